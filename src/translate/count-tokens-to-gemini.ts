// Anthropic's token counting (`/v1/messages/count_tokens`) on a Gemini model: the Messages body
// translated as for generateContent (messages-to-gemini.ts: the same rules, so a count is of what
// a request would send), sent to `countTokens` as its `generateContentRequest` (the Gemini API's
// form; Vertex's provider takes the request's fields themselves), and the answer's `totalTokens`
// as Anthropic's `input_tokens`.
import type { Json, TranslatedRequest, Translator } from './types.ts';
import { TranslationError } from './types.ts';
import { geminiTranslation } from './messages-to-gemini.ts';

/** What a countTokens request may carry of a generateContent request (the generation settings are not counted). */
const COUNTED = ['contents', 'systemInstruction', 'tools', 'toolConfig'] as const;

export function geminiCountTranslation(model: string): Translator {
  const messages = geminiTranslation(model);
  return {
    from: 'count_tokens',
    to: 'gemini_count_tokens',
    request(body: Json, upstreamModel: string): TranslatedRequest {
      // A count has no max_tokens; the translation of a request wants one, and it is not counted.
      const { body: generate, dropped } = messages.request({ ...body, max_tokens: 1 }, upstreamModel);
      const request: Json = { model: `models/${upstreamModel}` };
      for (const field of COUNTED) if (generate[field] !== undefined) request[field] = generate[field];
      return { body: { model: upstreamModel, stream: false, generateContentRequest: request }, dropped };
    },
    response(answer: Json): Json {
      const total = answer.totalTokens;
      return { input_tokens: typeof total === 'number' && Number.isFinite(total) && total >= 0 ? total : 0 };
    },
    error: (status: number, body: unknown) => messages.error(status, body),
    stream() {
      throw new TranslationError('stream', 'token counting has no stream');
    },
  };
}
