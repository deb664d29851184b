// What a request cost: its usage times the model's price. The shipped table holds the providers'
// published list prices (US dollars per million tokens) for their common models; `prices` in the
// config adds models and replaces any entry. A name matches an entry exactly or as "entry-…"
// (a dated version: gpt-4o-2024-08-06 is priced as gpt-4o), the longest entry winning.
import type { PriceConfig } from '../config/schema.ts';
import type { Usage } from '../api/usage.ts';

/** Published list prices, USD per million tokens (input, output, cached input, cache write). */
const SHIPPED: Readonly<Record<string, PriceConfig>> = {
  'gpt-5': { input: 1.25, output: 10, cached_input: 0.125 },
  'gpt-5-mini': { input: 0.25, output: 2, cached_input: 0.025 },
  'gpt-5-nano': { input: 0.05, output: 0.4, cached_input: 0.005 },
  'gpt-4.1': { input: 2, output: 8, cached_input: 0.5 },
  'gpt-4.1-mini': { input: 0.4, output: 1.6, cached_input: 0.1 },
  'gpt-4.1-nano': { input: 0.1, output: 0.4, cached_input: 0.025 },
  'gpt-4o': { input: 2.5, output: 10, cached_input: 1.25 },
  'gpt-4o-mini': { input: 0.15, output: 0.6, cached_input: 0.075 },
  o3: { input: 2, output: 8, cached_input: 0.5 },
  'o3-mini': { input: 1.1, output: 4.4, cached_input: 0.55 },
  'o4-mini': { input: 1.1, output: 4.4, cached_input: 0.275 },
  'text-embedding-3-small': { input: 0.02, output: 0 },
  'text-embedding-3-large': { input: 0.13, output: 0 },
  'claude-opus-4-5': { input: 5, output: 25, cached_input: 0.5, cache_write: 6.25 },
  'claude-opus-4-1': { input: 15, output: 75, cached_input: 1.5, cache_write: 18.75 },
  'claude-opus-4': { input: 15, output: 75, cached_input: 1.5, cache_write: 18.75 },
  'claude-sonnet-4-5': { input: 3, output: 15, cached_input: 0.3, cache_write: 3.75 },
  'claude-sonnet-4': { input: 3, output: 15, cached_input: 0.3, cache_write: 3.75 },
  'claude-3-7-sonnet': { input: 3, output: 15, cached_input: 0.3, cache_write: 3.75 },
  'claude-haiku-4-5': { input: 1, output: 5, cached_input: 0.1, cache_write: 1.25 },
  'claude-3-5-haiku': { input: 0.8, output: 4, cached_input: 0.08, cache_write: 1 },
  // Google (the Gemini API's and Vertex AI's prices, prompts up to 200k tokens).
  'gemini-2.5-pro': { input: 1.25, output: 10, cached_input: 0.125 },
  'gemini-2.5-flash': { input: 0.3, output: 2.5, cached_input: 0.03 },
  'gemini-2.5-flash-lite': { input: 0.1, output: 0.4, cached_input: 0.01 },
  'gemini-2.0-flash': { input: 0.1, output: 0.4, cached_input: 0.025 },
  'gemini-2.0-flash-lite': { input: 0.075, output: 0.3 },
  'gemini-embedding-001': { input: 0.15, output: 0 },
  // Amazon Bedrock (on-demand, us-east-1); its Anthropic models cost what Anthropic's do.
  'nova-premier': { input: 2.5, output: 12.5 },
  'nova-pro': { input: 0.8, output: 3.2, cached_input: 0.2 },
  'nova-lite': { input: 0.06, output: 0.24, cached_input: 0.015 },
  'nova-micro': { input: 0.035, output: 0.14, cached_input: 0.00875 },
  'llama3-1-8b-instruct': { input: 0.22, output: 0.22 },
  'llama3-1-70b-instruct': { input: 0.72, output: 0.72 },
  'llama3-3-70b-instruct': { input: 0.72, output: 0.72 },
  'mistral-large-2407': { input: 2, output: 6 },
  'titan-embed-text-v2': { input: 0.02, output: 0 },
  'titan-embed-text-v1': { input: 0.1, output: 0 },
  'embed-english-v3': { input: 0.1, output: 0 },
  'embed-multilingual-v3': { input: 0.1, output: 0 },
};

/** Bedrock's vendor prefixes (`anthropic.claude-…`), and its cross-region inference profiles' (`us.anthropic.claude-…`). */
const BEDROCK_PREFIX = /^((us|eu|apac|jp|au|ca|us-gov|global)\.)?(anthropic|meta|amazon|mistral|cohere|ai21|deepseek|openai|qwen|writer)\./;

/**
 * A model name as the shipped table names it: the last part of a path or an ARN
 * (`models/gemini-2.5-pro`, `arn:aws:bedrock:…:inference-profile/us.anthropic.claude-…`), without
 * Bedrock's prefixes and version suffix (`:0`), and with Vertex's `@date` as `-date`.
 */
export function bareModel(model: string): string {
  const slash = model.lastIndexOf('/');
  let bare = slash === -1 ? model : model.slice(slash + 1);
  const prefixed = BEDROCK_PREFIX.exec(bare);
  if (prefixed) bare = bare.slice(prefixed[0].length).replace(/:\d+$/, '');
  return bare.replace('@', '-');
}

export class Prices {
  readonly #table: ReadonlyMap<string, PriceConfig>;
  /** Entry names, longest first: the first that matches is the longest. */
  readonly #names: readonly string[];

  constructor(overrides: Readonly<Record<string, PriceConfig>> = {}) {
    this.#table = new Map([...Object.entries(SHIPPED), ...Object.entries(overrides)]);
    this.#names = [...this.#table.keys()].sort((a, b) => b.length - a.length);
  }

  /** The price of `model` (an upstream model name; "provider/model" is read as "model", a Bedrock or Vertex id as bareModel says), if known. */
  of(model: string): PriceConfig | undefined {
    const exact = this.#table.get(model);
    if (exact) return exact;
    const bare = bareModel(model);
    for (const name of this.#names) {
      if (bare === name || (bare.startsWith(name) && bare.charCodeAt(name.length) === 45 /* - */)) return this.#table.get(name);
    }
    return undefined;
  }

  /** The cost of `usage` on the first of `models` that has a price, in micro-dollars; undefined when none has. */
  costMicros(usage: Usage, models: readonly string[]): number | undefined {
    for (const model of models) {
      const price = model === '' ? undefined : this.of(model);
      if (price) return costMicros(usage, price);
    }
    return undefined;
  }
}

/** Micro-dollars (whole): prices are per million tokens, so tokens × price is micro-dollars. */
export function costMicros(usage: Usage, price: PriceConfig): number {
  const cached = Math.min(usage.cached ?? 0, usage.prompt);
  const written = Math.min(usage.cacheWrite ?? 0, usage.prompt - cached);
  const fresh = usage.prompt - cached - written;
  return Math.round(fresh * price.input + cached * (price.cached_input ?? price.input) + written * (price.cache_write ?? price.input) + usage.completion * price.output);
}
