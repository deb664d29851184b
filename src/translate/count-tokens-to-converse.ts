// Anthropic's token counting on a Bedrock Converse model: Bedrock's CountTokens in its Converse
// form (`{input: {converse: {messages, system, toolConfig, additionalModelRequestFields}}}`), its
// `inputTokens` as Anthropic's `input_tokens`.
import type { Translator } from './types.ts';
import { converseTranslation } from './messages-to-converse.ts';
import { countTokensTranslation } from './count-tokens.ts';

export function converseCountTranslation(model: string): Translator {
  return countTokensTranslation(converseTranslation(model), {
    to: 'converse_count_tokens',
    counted: ['messages', 'system', 'toolConfig', 'additionalModelRequestFields'],
    wrap: (fields) => ({ input: { converse: fields } }),
    total: 'inputTokens',
  });
}
