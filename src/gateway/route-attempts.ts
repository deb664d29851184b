// The attempts of one request on its route's targets, retries and fallbacks, until one answer is
// committed. Nothing goes downstream before that: an error status is read whole (it is small) and a
// stream is held until its first content event, so a target that refuses, resets, answers 429/5xx,
// sends an error event or stalls before its first token is replaced without the client seeing it.
import type { TimerHandle } from '../lifecycle/clock.ts';
import type { ProviderRequest } from '../providers/types.ts';
import type { AttemptTrace } from '../telemetry/tracing.ts';
import { backoffMs, countsAgainstTarget, listed } from '../routing/failures.ts';
import type { AttemptRecord } from '../telemetry/access-log.ts';
import { GatewayError } from '../api/errors.ts';
import type { Json } from '../translate/types.ts';
import { Attempt, type AttemptOwner, type Failure, type Prepared } from './attempt.ts';
import type { ExchangeEnvironment, RoutedRequest } from './routed-request.ts';
import { prepareTarget } from './target-request.ts';

/** The failures a stream can have after its headers and before its first content. */
const AFTER_HEADERS = ['reset', 'timeout', 'first_token_timeout', 'stream_error'] as const;

/** The exchange the attempts are made for: each Attempt reports to it, and it answers when no attempt is left. */
export interface AttemptsOwner extends AttemptOwner {
  /** No further attempt: the last failure is what the client gets; none: no target could take the request (`unfit`: the first reason why). */
  fail(last: Failure | undefined, unfit: GatewayError | undefined): void;
}

export class RouteAttempts {
  readonly #req: RoutedRequest;
  readonly #env: ExchangeEnvironment;
  readonly #owner: AttemptsOwner;
  readonly #stream: boolean;
  readonly #tried = new Set<number>();
  /** Retries so far, by target; made at the first retry. */
  #retriesOn: Map<number, number> | undefined;
  readonly #prepared = new Map<number, Prepared | GatewayError>();
  readonly #startedAt: number;
  #attempts = 0;
  #current: Attempt | undefined;
  #aborted = false;
  /** An attempt was committed, or the request finished: the route's deadline no longer applies. */
  #closed = false;
  #waiting: TimerHandle | undefined;
  #deadline: TimerHandle | undefined;
  #inBudget = false;
  /** The first reason a target could not take the request at all (no translation, a parameter it cannot express). */
  #unfit: GatewayError | undefined;
  /** When the attempt in progress started; every attempt, from the first failure on (the access line's `attempts`). */
  #launchedAt = 0;
  #log: AttemptRecord[] | undefined;

  constructor(request: RoutedRequest, env: ExchangeEnvironment, owner: AttemptsOwner) {
    this.#req = request;
    this.#env = env;
    this.#owner = owner;
    this.#stream = request.json.stream === true;
    this.#startedAt = env.clock.now();
  }

  get count(): number {
    return this.#attempts;
  }

  /** The route's total deadline, and the first attempt. */
  start(): void {
    const total = this.#req.route.retry.total_timeout_ms;
    if (total > 0) this.#deadline = this.#env.clock.after(total, () => this.#onDeadline());
    this.#next(true);
  }

  /** Starts the next attempt on the best untried target; `first`: any target, cooling or not, rather than none. */
  #next(first: boolean, last?: Failure): void {
    const { route } = this.#req;
    for (;;) {
      const now = this.#env.clock.now();
      const index = route.balancer.pick(this.#tried, route.states, now, hashKey(this.#req), first);
      if (index === undefined) return this.#owner.fail(last, this.#unfit);
      const prepared = prepareTarget(this.#req, index, this.#prepared);
      if (prepared instanceof GatewayError) {
        this.#tried.add(index);
        this.#unfit ??= prepared;
        continue;
      }
      this.#launch(prepared);
      return;
    }
  }

  #launch(prepared: Prepared): void {
    if (this.#aborted) return;
    this.#tried.add(prepared.index);
    this.#attempts++;
    this.#req.ctx.provider = prepared.provider.name;
    this.#req.ctx.upstreamModel = prepared.target.model ?? this.#req.ctx.model;
    this.#req.ctx.servedModel = prepared.label;
    this.#launchedAt = this.#env.clock.now();
    prepared.state.begin(this.#launchedAt);
    const attempt = new Attempt(this.#owner, prepared, this.#env.clock, this.#stream, this.#stream && this.#mayTryAgain(prepared.index));
    this.#current = attempt;
    let request = prepared.request;
    const trace = this.#req.ctx.trace;
    if (trace) {
      const { provider, translation } = prepared;
      attempt.trace = trace.startAttempt({
        provider: provider.name,
        providerType: provider.type,
        model: this.#req.ctx.upstreamModel,
        origin: provider.origin,
        number: this.#attempts,
        translatedTo: translation ? request.endpoint : undefined,
      });
      request = tracedRequest(request, attempt.trace);
    }
    try {
      prepared.provider.dispatch(request, attempt);
    } catch (error) {
      attempt.onResponseError(undefined as never, error as Error);
    }
  }

  /**
   * Whether a stream's failure after its headers and before its first content (a reset, an error
   * event, a stall) could still lead to another attempt: only then is it held until its first
   * content. Otherwise holding would gain nothing and delay the client's response headers (a
   * reasoning model may think for minutes before its first token).
   */
  #mayTryAgain(index: number): boolean {
    const { retry, targets } = this.#req.route;
    if (this.#attempts >= retry.max_attempts) return false;
    if (afterHeaders(retry.retry_on) && (this.#retriesOn?.get(index) ?? 0) < retry.max_retries_per_target) return true;
    return afterHeaders(retry.fallback_on) && this.#tried.size < targets.length;
  }

  /** An attempt failed before anything was committed. */
  failed(attempt: Attempt, failure: Failure): void {
    const { prepared } = attempt;
    attempt.trace?.failed(failure.kind, failure.status);
    const now = this.#env.clock.now();
    prepared.state.end();
    this.#endBudget();
    this.#env.attempted(prepared.provider.name, prepared.label, failure.kind);
    this.#record(prepared, failure.kind, failure.status, now - this.#launchedAt);
    if (countsAgainstTarget(failure.kind)) {
      if (prepared.state.failed(failure.kind, now, this.#req.cooldown, failure.retryAfterMs)) {
        this.#env.cooldownStarted(prepared.provider.name, prepared.label, failure.kind, prepared.state.openUntil - now);
      }
    } else prepared.state.succeeded(undefined); // it answered: it is up.
    if (this.#current === attempt) this.#current = undefined;
    if (this.#aborted) return;
    const { retry, entry } = this.#req.route;
    const elapsed = now - this.#startedAt;
    const left = retry.total_timeout_ms > 0 ? retry.total_timeout_ms - elapsed : Infinity;
    if (this.#attempts >= retry.max_attempts || left <= 0) return this.#owner.fail(failure, this.#unfit);
    const retries = this.#retriesOn?.get(prepared.index) ?? 0;
    if (listed(retry.retry_on, failure.kind, failure.status) && retries < retry.max_retries_per_target) {
      // A Retry-After longer than the backoff allows is not waited for: the next target is tried.
      const wait = Math.max(backoffMs(retries, retry.backoff_base_ms, retry.backoff_max_ms), failure.retryAfterMs ?? 0);
      if (wait < left && wait <= retry.backoff_max_ms && prepared.state.usable(now + wait)) {
        if (!this.#takeBudget()) return this.#owner.fail(failure, this.#unfit);
        (this.#retriesOn ??= new Map()).set(prepared.index, retries + 1);
        this.#env.retried(entry, 'retry');
        this.#waiting = this.#env.clock.after(wait, () => {
          this.#waiting = undefined;
          this.#launch(prepared);
        });
        return;
      }
    }
    if (!listed(retry.fallback_on, failure.kind, failure.status)) return this.#owner.fail(failure, this.#unfit);
    const peek = this.#req.route.balancer.pick(this.#tried, this.#req.route.states, now, hashKey(this.#req), false);
    if (peek === undefined) return this.#owner.fail(failure, this.#unfit);
    if (!this.#takeBudget()) return this.#owner.fail(failure, this.#unfit);
    this.#env.retried(entry, 'fallback');
    // `peek` advanced the round robin once; choosing again would skip a target, so it is used.
    const prepared2 = prepareTarget(this.#req, peek, this.#prepared);
    if (prepared2 instanceof GatewayError) {
      this.#tried.add(peek);
      this.#unfit ??= prepared2;
      this.#endBudget();
      return this.#next(false, failure);
    }
    this.#launch(prepared2);
  }

  /** The attempt is the answer: no other follows. */
  committed(attempt: Attempt, status: number, latencyMs: number): void {
    const { prepared } = attempt;
    this.#closed = true;
    this.#current = undefined;
    this.#deadline?.cancel();
    this.#endBudget();
    prepared.state.succeeded(latencyMs);
    attempt.trace?.committed(status);
    this.#env.attempted(prepared.provider.name, prepared.label, 'success');
    if (this.#log) this.#record(prepared, 'success', status, latencyMs);
  }

  /** The exchange was aborted: no further attempt. The one in progress (recorded as cancelled when `uncommitted`) is returned, to be abandoned. */
  abort(uncommitted: boolean): Attempt | undefined {
    this.#aborted = true;
    this.#waiting?.cancel();
    if (uncommitted && this.#current && this.#log) this.#record(this.#current.prepared, 'cancelled', undefined, this.#env.clock.now() - this.#launchedAt);
    return this.#current;
  }

  stopDeadline(): void {
    this.#deadline?.cancel();
  }

  /** The request is over: its retry (if any) leaves the budget, the access line gets the attempts; returns the attempt in progress. */
  finish(): Attempt | undefined {
    this.#closed = true;
    this.#deadline?.cancel();
    this.#endBudget();
    this.#req.ctx.attempts = this.#attempts;
    this.#req.ctx.attemptLog = this.#log;
    return this.#current;
  }

  /** An attempt for the access line; the list is made at the first failure, so a request answered at once allocates nothing. */
  #record(prepared: Prepared, outcome: string, status: number | undefined, ms: number): void {
    (this.#log ??= []).push({ target: `${prepared.provider.name}/${prepared.label}`, outcome, status, ms: Math.round(ms) });
  }

  #takeBudget(): boolean {
    if (this.#env.budget.tryRetry()) {
      this.#inBudget = true;
      return true;
    }
    this.#env.budgetExhausted(this.#req.route.entry);
    return false;
  }

  #endBudget(): void {
    if (!this.#inBudget) return;
    this.#inBudget = false;
    this.#env.budget.retryFinished();
  }

  #onDeadline(): void {
    this.#deadline = undefined;
    if (this.#closed || this.#aborted) return;
    this.#waiting?.cancel();
    const current = this.#current;
    if (current) current.timeout('timeout');
    else this.#owner.fail({ kind: 'timeout' }, this.#unfit);
  }
}

/** Whether a route's `retry_on` or `fallback_on` names a failure a stream can have after its headers. */
function afterHeaders(list: readonly (string | number)[]): boolean {
  return AFTER_HEADERS.some((kind) => list.includes(kind));
}

/** What a consistent-hash route picks its target by: a header, or a value in the body; undefined for other routes. */
function hashKey(request: RoutedRequest): string | undefined {
  const on = request.route.hashOn;
  if (on === undefined) return undefined;
  if (on.from === 'header') {
    const value = request.ctx.req.headers[on.path[0]!];
    return Array.isArray(value) ? value.join(',') : value;
  }
  let value: unknown = request.json;
  for (const key of on.path) value = value !== null && typeof value === 'object' ? (value as Json)[key] : undefined;
  return typeof value === 'string' || typeof value === 'number' ? String(value) : undefined;
}

/** The request an attempt sends when traced: its own `traceparent` (the caller's `tracestate` only if the caller's `traceparent` was valid). */
function tracedRequest(request: ProviderRequest, trace: AttemptTrace): ProviderRequest {
  const headers: Record<string, string | string[]> = { ...request.headers, traceparent: trace.traceparent };
  if (!trace.keepsTracestate) delete headers.tracestate;
  return { ...request, headers };
}
