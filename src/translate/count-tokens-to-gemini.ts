// Anthropic's token counting on a Gemini model: `countTokens` with the request as its
// `generateContentRequest` (the Gemini API's form; Vertex's provider takes the request's fields
// themselves), its `totalTokens` as Anthropic's `input_tokens`.
import type { Translator } from './types.ts';
import { geminiTranslation } from './messages-to-gemini.ts';
import { countTokensTranslation } from './count-tokens.ts';

export function geminiCountTranslation(model: string): Translator {
  return countTokensTranslation(geminiTranslation(model), {
    to: 'gemini_count_tokens',
    counted: ['contents', 'systemInstruction', 'tools', 'toolConfig'],
    wrap: (fields, upstreamModel) => ({ generateContentRequest: { model: `models/${upstreamModel}`, ...fields } }),
    total: 'totalTokens',
  });
}
