// Model name → route. Exact names are a map lookup; patterns ("prefix-*") are tried longest prefix
// first; "*" is the catch-all. Per-request work does not grow with exact names. A route has one or
// more targets and a Balancer that chooses among them.
import { DEFAULT_ROUTE_RETRY, modelTargets, type ModelConfig, type RouteRetryConfig } from '../config/schema.ts';
import { Balancer, type Strategy } from './balancer.ts';
import { TargetStates, type TargetState } from './targets.ts';
import { systemClock, type Clock } from '../lifecycle/clock.ts';

export interface RouteTarget {
  readonly provider: string;
  /** The model name sent upstream; undefined keeps the requested one. */
  readonly model: string | undefined;
  readonly weight: number;
  readonly priority: number;
  /** Wait for response headers, ms; 0: the upstream default. */
  readonly timeoutMs: number;
  /** Wait for a stream's first content, ms; 0: none. */
  readonly firstTokenTimeoutMs: number;
  readonly headers: Readonly<Record<string, string>>;
  /** Stable identity (provider, model, position). */
  readonly id: string;
}

export interface Route {
  /** The configured entry that matched (a name or a pattern). */
  readonly entry: string;
  readonly targets: readonly RouteTarget[];
  readonly strategy: Strategy;
  /** consistent_hash: what is hashed. */
  readonly hashOn: { readonly from: 'header' | 'body'; readonly path: readonly string[] } | undefined;
  readonly retry: RouteRetryConfig;
  readonly balancer: Balancer;
  /** Each target's state (shared with every route to the same provider and model), by index. */
  readonly states: readonly TargetState[];
  /** The first target's provider (the model list of a pattern, realtime sessions). */
  readonly provider: string;
  /** The first target's upstream model. */
  readonly upstreamModel: string | undefined;
}

export function buildRoute(model: ModelConfig, states: TargetStates): Route {
  const retry = model.retry ?? DEFAULT_ROUTE_RETRY;
  const strategy = model.strategy ?? 'round_robin';
  const targets = modelTargets(model).map((t, index): RouteTarget => ({
    provider: t.provider,
    model: t.model,
    weight: t.weight,
    priority: t.priority,
    timeoutMs: t.timeout_ms ?? retry.attempt_timeout_ms,
    firstTokenTimeoutMs: t.first_token_timeout_ms ?? retry.first_token_timeout_ms,
    headers: t.headers,
    id: `${t.provider}/${t.model ?? ''}/${index}`,
  }));
  let hashOn: Route['hashOn'];
  if (model.hash_on !== undefined) {
    const colon = model.hash_on.indexOf(':');
    const from = model.hash_on.slice(0, colon) as 'header' | 'body';
    const rest = model.hash_on.slice(colon + 1);
    hashOn = { from, path: from === 'header' ? [rest.toLowerCase()] : rest.split('.') };
  }
  return {
    entry: model.name,
    targets,
    strategy,
    hashOn,
    retry,
    balancer: new Balancer(targets, strategy),
    states: targets.map((t) => states.get(t.provider, t.model ?? model.name)),
    provider: targets[0]!.provider,
    upstreamModel: targets[0]!.model,
  };
}

export class ModelRouter {
  readonly #exact = new Map<string, Route>();
  readonly #prefixes: { prefix: string; route: Route }[] = [];
  readonly #catchAll: Route | undefined;
  readonly models: readonly ModelConfig[];
  /** Where the routes' targets keep their state (circuits, cooldowns, in flight). */
  readonly states: TargetStates;

  /**
   * `states`: where the routes' targets keep their state (a reload passes the carried ones); without
   * them, fresh ones on `clock` (tests pass a manual one).
   */
  constructor(models: readonly ModelConfig[], states?: TargetStates, clock: Clock = systemClock) {
    this.models = models;
    this.states = states ?? new TargetStates(clock);
    let catchAll: Route | undefined;
    for (const model of models) {
      const route = buildRoute(model, this.states);
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

  /** Every route, once each. */
  routes(): Route[] {
    return [...this.#exact.values(), ...this.#prefixes.map((p) => p.route), ...(this.#catchAll ? [this.#catchAll] : [])];
  }
}
