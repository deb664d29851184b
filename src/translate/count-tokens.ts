// Anthropic's token counting (`/v1/messages/count_tokens`) on a provider of another API: the
// Messages body translated as a request to that API would be (the same rules, so a count is of what
// a request would send), the fields a count takes of it sent to the provider's counting method,
// and its count given back as Anthropic's `input_tokens`. Bedrock's CountTokens and Gemini's
// countTokens are its two uses (count-tokens-to-converse.ts, count-tokens-to-gemini.ts).
import type { Endpoint } from '../providers/types.ts';
import { TranslationError, type Json, type TranslatedRequest, type Translator } from './types.ts';

export interface CountingApi {
  /** The provider's counting endpoint. */
  readonly to: Endpoint;
  /** The fields of a translated request that are counted (not its generation settings). */
  readonly counted: readonly string[];
  /** The counting request's body around those fields. */
  wrap(fields: Json, upstreamModel: string): Json;
  /** The answer's count. */
  readonly total: string;
}

/** Token counting through `messages`, the translation of a Messages request to the provider's API. */
export function countTokensTranslation(messages: Translator, api: CountingApi): Translator {
  return {
    from: 'count_tokens',
    to: api.to,
    request(body: Json, upstreamModel: string): TranslatedRequest {
      // A count has no max_tokens; the translation of a request wants one, and it is not counted.
      const { body: translated, dropped } = messages.request({ ...body, max_tokens: 1 }, upstreamModel);
      const fields: Json = {};
      for (const field of api.counted) if (translated[field] !== undefined) fields[field] = translated[field];
      return { body: { model: upstreamModel, stream: false, ...api.wrap(fields, upstreamModel) }, dropped };
    },
    response(answer: Json): Json {
      const total = answer[api.total];
      return { input_tokens: typeof total === 'number' && Number.isFinite(total) && total >= 0 ? total : 0 };
    },
    error: (status: number, body: unknown) => messages.error(status, body),
    stream() {
      throw new TranslationError('stream', 'token counting has no stream');
    },
  };
}
