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
};

export class Prices {
  readonly #table: ReadonlyMap<string, PriceConfig>;
  /** Entry names, longest first: the first that matches is the longest. */
  readonly #names: readonly string[];

  constructor(overrides: Readonly<Record<string, PriceConfig>> = {}) {
    this.#table = new Map([...Object.entries(SHIPPED), ...Object.entries(overrides)]);
    this.#names = [...this.#table.keys()].sort((a, b) => b.length - a.length);
  }

  /** The price of `model` (an upstream model name; "provider/model" is read as "model"), if known. */
  of(model: string): PriceConfig | undefined {
    const exact = this.#table.get(model);
    if (exact) return exact;
    const slash = model.lastIndexOf('/');
    const bare = slash === -1 ? model : model.slice(slash + 1);
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
