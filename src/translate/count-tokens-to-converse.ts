// Anthropic's token counting (`/v1/messages/count_tokens`) on a Bedrock Converse model: the
// Messages body translated as for Converse (messages-to-converse.ts: the same rules, so a count is
// of what a request would send), sent to Bedrock's CountTokens in its Converse form
// (`{input: {converse: {messages, system, toolConfig, additionalModelRequestFields}}}`), and the
// answer's `inputTokens` as Anthropic's `input_tokens`.
import type { Json, TranslatedRequest, Translator } from './types.ts';
import { TranslationError } from './types.ts';
import { converseTranslation } from './messages-to-converse.ts';

/** What CountTokens' Converse form takes of a Converse request (the inference settings are not counted). */
const COUNTED = ['messages', 'system', 'toolConfig', 'additionalModelRequestFields'] as const;

export function converseCountTranslation(model: string): Translator {
  const messages = converseTranslation(model);
  return {
    from: 'count_tokens',
    to: 'converse_count_tokens',
    request(body: Json, upstreamModel: string): TranslatedRequest {
      // A count has no max_tokens; the translation of a request wants one, and it is not counted.
      const { body: converse, dropped } = messages.request({ ...body, max_tokens: 1 }, upstreamModel);
      const input: Json = {};
      for (const field of COUNTED) if (converse[field] !== undefined) input[field] = converse[field];
      return { body: { model: upstreamModel, stream: false, input: { converse: input } }, dropped };
    },
    response: (answer: Json) => ({ input_tokens: tokens(answer.inputTokens) }),
    error: (status: number, body: unknown) => messages.error(status, body),
    stream() {
      throw new TranslationError('stream', 'token counting has no stream');
    },
  };
}

function tokens(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : 0;
}
