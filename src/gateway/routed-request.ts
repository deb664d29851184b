// What a routed exchange works with: the request on its route (RoutedRequest), the gateway's
// services it reports to (ExchangeEnvironment), and what the client sees of it (Downstream).
import type { Clock } from '../lifecycle/clock.ts';
import type { Endpoint, Provider, ResponseHandler } from '../providers/types.ts';
import type { Route } from '../routing/router.ts';
import type { CooldownSettings } from '../routing/targets.ts';
import type { RetryBudget } from '../routing/retry-budget.ts';
import type { RequestContext } from '../server/context.ts';
import type { Json } from '../translate/types.ts';

export interface ExchangeEnvironment {
  readonly clock: Clock;
  readonly budget: RetryBudget;
  /** One attempt's outcome ('success' or a failure class), by target. */
  attempted(provider: string, model: string, outcome: string): void;
  /** A further attempt: on the same target, or on the next. */
  retried(route: string, kind: 'retry' | 'fallback'): void;
  budgetExhausted(route: string): void;
  /** A target's circuit opened (logged). */
  cooldownStarted(provider: string, model: string, failure: string, ms: number): void;
  /** Logs an unexpected error (a bug) with the request it happened in. */
  reportBug(error: unknown, requestId: string): void;
  /** A failure the client was told of (`sluice_upstream_errors_total`). */
  upstreamError(provider: string, kind: string): void;
}

/** What the client sees: the relay, as an undici handler that never sees attempts. */
export type Downstream = Required<Pick<ResponseHandler, 'onRequestStart' | 'onResponseStart' | 'onResponseData' | 'onResponseEnd' | 'onResponseError'>>;

export interface RoutedRequest {
  readonly ctx: RequestContext;
  readonly route: Route;
  readonly providers: ReadonlyMap<string, Provider>;
  readonly cooldown: CooldownSettings;
  readonly endpoint: Endpoint;
  /** The client's body, parsed, and its bytes. */
  readonly json: Json;
  readonly bytes: Buffer;
  readonly headers: Record<string, string | string[]>;
  readonly path: string;
  /** How long an answer is read on for its usage after the client left (0: not at all). */
  readonly readAfterDisconnectMs: number;
  /** The prompt's tokens as the limiter estimated them: an estimated usage's prompt when the provider reported none. */
  readonly promptTokens: number;
}
