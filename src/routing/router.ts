// Model name → provider route. Exact names are a map lookup; patterns ("prefix-*") are tried
// longest prefix first; "*" is the catch-all. Per-request work does not grow with exact names.
import type { ModelConfig } from '../config/schema.ts';

export interface Route {
  /** The configured entry that matched (a name or a pattern). */
  readonly entry: string;
  readonly provider: string;
  /** The model name sent upstream; undefined keeps the requested one. */
  readonly upstreamModel: string | undefined;
}

export class ModelRouter {
  readonly #exact = new Map<string, Route>();
  readonly #prefixes: { prefix: string; route: Route }[] = [];
  readonly #catchAll: Route | undefined;
  readonly models: readonly ModelConfig[];

  constructor(models: readonly ModelConfig[]) {
    this.models = models;
    let catchAll: Route | undefined;
    for (const model of models) {
      const route: Route = { entry: model.name, provider: model.provider, upstreamModel: model.upstream_model };
      if (model.name === '*') catchAll = route;
      else if (model.name.endsWith('*')) this.#prefixes.push({ prefix: model.name.slice(0, -1), route });
      else this.#exact.set(model.name, route);
    }
    this.#prefixes.sort((a, b) => b.prefix.length - a.prefix.length);
    this.#catchAll = catchAll;
  }

  resolve(model: string): Route | undefined {
    const exact = this.#exact.get(model);
    if (exact) return exact;
    for (const { prefix, route } of this.#prefixes) if (model.startsWith(prefix)) return route;
    return this.#catchAll;
  }
}
