// OpenAI-compatible servers an `openai` provider can name as its `preset`: where each listens by
// default and what it accepts of OpenAI's chat parameters. Each fact is
// from the server's own documentation, SDK or code (docs/openai-compatible.md lists the sources
// and what could not be checked). `streamUsage: false` where the server refuses `stream_options`
// or it could not be confirmed that it takes it: a refused parameter would break every stream,
// and an unconfirmed one is not worth that risk (the stream's usage is then read if the server
// sends it, else estimated).
import type { OpenAIPreset } from '../../config/schema.ts';
import type { ParameterRules } from '../parameter-policy.ts';

/** Where it listens by default, and what it accepts (which need a key: config's PRESETS_NEEDING_A_KEY). */
export interface Preset extends ParameterRules {
  readonly baseUrl: string;
}

/** Older servers know `max_tokens` only. */
const MAX_TOKENS = { max_completion_tokens: 'max_tokens' } as const;

export const PRESETS: Readonly<Record<OpenAIPreset, Preset>> = {
  ollama: { baseUrl: 'http://localhost:11434/v1', rename: MAX_TOKENS, streamUsage: true },
  vllm: { baseUrl: 'http://localhost:8000/v1', streamUsage: true },
  lmstudio: { baseUrl: 'http://localhost:1234/v1', rename: MAX_TOKENS, streamUsage: false },
  // llama-server refuses more than one choice.
  llamacpp: { baseUrl: 'http://localhost:8080/v1', drop: ['n'], streamUsage: true },
  // Groq refuses these, stream_options included (its streams carry usage in `x_groq.usage`).
  groq: { baseUrl: 'https://api.groq.com/openai/v1', drop: ['logprobs', 'top_logprobs', 'logit_bias', 'n'], streamUsage: false },
  // Mistral refuses every field its schema lacks (422), and names two otherwise.
  mistral: {
    baseUrl: 'https://api.mistral.ai/v1',
   
    drop: ['logprobs', 'top_logprobs', 'logit_bias', 'user', 'service_tier', 'store'],
    rename: { ...MAX_TOKENS, seed: 'random_seed' },
    streamUsage: false,
  },
  deepseek: { baseUrl: 'https://api.deepseek.com/v1', rename: MAX_TOKENS, streamUsage: true },
  together: { baseUrl: 'https://api.together.ai/v1', streamUsage: false },
  // Fireworks sends a stream's usage in its last chunk unasked.
  fireworks: { baseUrl: 'https://api.fireworks.ai/inference/v1', streamUsage: false },
  openrouter: { baseUrl: 'https://openrouter.ai/api/v1', streamUsage: true },
  xai: { baseUrl: 'https://api.x.ai/v1', streamUsage: true },
};
