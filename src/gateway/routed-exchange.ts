// One proxied request on a route: attempts on its targets, retries and fallbacks, until one answer
// is committed to the client. Nothing goes downstream before that: an error status is read whole
// (it is small) and a stream is held until its first content event, so a target that refuses,
// resets, answers 429/5xx, sends an error event or stalls before its first token is replaced
// without the client seeing it. Once committed, the answer is relayed (translated when the target
// speaks another API) and never switched: a later failure, or a stream that ends without its API's
// final event, ends it with the explicit error event. Its usage is read as it passes (estimated
// when the provider never gave it whole); if the client leaves first, the answer is read on to its
// usage, within bounds, before the request is settled.
import type { IncomingHttpHeaders } from 'node:http';
import type { Clock, TimerHandle } from '../lifecycle/clock.ts';
import type { DispatchController, Endpoint, Provider, ProviderRequest, ResponseHandler } from '../providers/types.ts';
import type { AttemptTrace } from '../telemetry/tracing.ts';
import type { Route } from '../routing/router.ts';
import type { CooldownSettings } from '../routing/targets.ts';
import type { RetryBudget } from '../routing/retry-budget.ts';
import { backoffMs, countsAgainstTarget, listed } from '../routing/failures.ts';
import type { RequestContext } from '../server/context.ts';
import type { AttemptRecord } from '../telemetry/access-log.ts';
import { errors, GatewayError } from '../api/errors.ts';
import { TranslationError, type Json, type StreamOutcome, type StreamTranslator } from '../translate/types.ts';
import { translationFor } from '../translate/registry.ts';
import { Attempt, type AttemptOwner, type Failure, type Prepared } from './attempt.ts';
import { UsageMeter } from './usage-meter.ts';
import { UsageStripper, withStreamUsage } from './stream-usage.ts';
import type { RelayController } from './relay.ts';
import type { Usage } from '../api/usage.ts';

const BLANK_LINE = Buffer.from('\n\n');
/** The failures a stream can have after its headers and before its first content. */
const AFTER_HEADERS = ['reset', 'timeout', 'first_token_timeout', 'stream_error'] as const;
/** A JSON answer larger than this is not translated (a 502): it is read whole to be rewritten. */
const MAX_TRANSLATED_JSON = 32 * 1024 * 1024;
/** After the client left, at most this much more of an answer is read for its usage. */
const MAX_READ_AFTER_DISCONNECT = 4 * 1024 * 1024;
/** A committed answer that failed is recorded on its target without counting towards a cooldown. */
const NO_COOLDOWN = { failures: 0, secs: 0, maxSecs: 0 };

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

export class RoutedExchange implements RelayController, AttemptOwner {
  readonly #req: RoutedRequest;
  readonly #env: ExchangeEnvironment;
  readonly #downstream: Downstream;
  readonly #stream: boolean;
  readonly #tried = new Set<number>();
  readonly #retriesOn = new Map<number, number>();
  readonly #prepared = new Map<number, Prepared | GatewayError>();
  readonly #startedAt: number;
  #attempts = 0;
  #current: Attempt | undefined;
  #committed: Attempt | undefined;
  #aborted = false;
  #finished = false;
  #paused = false;
  #waiting: TimerHandle | undefined;
  #deadline: TimerHandle | undefined;
  #inBudget = false;
  /** The first reason a target could not take the request at all (no translation, a parameter it cannot express). */
  #unfit: GatewayError | undefined;
  #meter: UsageMeter | undefined;
  /** The client left: the answer is read on for its usage only, bounded by time and bytes. */
  #left = false;
  #leftBytes = 0;
  #leftTimer: TimerHandle | undefined;
  /** The usage is known (ctx.usage set): the request may leave in flight; and who waits for it. */
  #settled = false;
  #onSettled: (() => void) | undefined;
  #translator: StreamTranslator | undefined;
  /** A relayed stream whose usage the client did not ask for: what the gateway asked is taken out again. */
  #stripper: UsageStripper | undefined;
  /** A translated stream has written its first bytes. */
  #translatedOut = false;
  /** Upstream bytes waiting for the next turn of the event loop to be translated, and whether the end came behind them. */
  #deferred: Buffer[] | undefined;
  #endDeferred = false;
  #jsonChunks: Buffer[] | undefined;
  #jsonBytes = 0;
  /** A translated JSON answer's status and headers, sent with its translated body. */
  #heldStart: { status: number; headers: IncomingHttpHeaders } | undefined;
  /** When the attempt in progress started; every attempt, from the first failure on (the access line's `attempts`). */
  #launchedAt = 0;
  #log: AttemptRecord[] | undefined;

  constructor(request: RoutedRequest, env: ExchangeEnvironment, downstream: Downstream) {
    this.#req = request;
    this.#env = env;
    this.#downstream = downstream;
    this.#stream = request.json.stream === true;
    this.#startedAt = env.clock.now();
  }

  // -- the controller the relay holds -------------------------------------------------------------

  get aborted(): boolean {
    return this.#aborted;
  }

  get paused(): boolean {
    return this.#paused;
  }

  get reason(): Error | null {
    return null;
  }

  pause(): void {
    this.#paused = true;
    this.#committed?.controller?.pause();
  }

  resume(): void {
    this.#paused = false;
    this.#committed?.controller?.resume();
  }

  /** The client left or the drain was forced: no further attempt, the one in progress is aborted. */
  abort(reason: Error): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.#waiting?.cancel();
    if (!this.#committed && this.#current && this.#log) this.#record(this.#current.prepared, 'cancelled', undefined, this.#env.clock.now() - this.#launchedAt);
    (this.#committed ?? this.#current)?.abandon(reason);
    this.#finish('cancelled');
  }

  // -- after the client left ---------------------------------------------------------------------

  /**
   * The client left before the end. A committed answer is read on and thrown away until it ends,
   * so that its usage is the provider's: at most `readAfterDisconnectMs` and
   * MAX_READ_AFTER_DISCONNECT bytes, then it is stopped and its usage estimated. Before any answer
   * (attempts under way, or between two), or with no time allowed, it stops at once: nothing was
   * answered, and a provider stops generating what nobody reads.
   */
  leave(reason: Error): void {
    if (this.#aborted || this.#finished) return;
    const wait = this.#req.readAfterDisconnectMs;
    if (wait <= 0 || this.#committed === undefined) return this.abort(reason);
    this.#left = true;
    this.#deadline?.cancel();
    this.#leftTimer = this.#env.clock.after(wait, () => this.abort(reason));
    if (this.#paused) this.resume();
  }

  whenSettled(done: () => void): boolean {
    if (this.#settled) return false;
    this.#onSettled = done;
    return true;
  }

  nextSequence(): number {
    return this.#translator?.nextSequence?.() ?? this.#meter?.nextSequence() ?? 0;
  }

  // -- attempts ----------------------------------------------------------------------------------

  start(): void {
    this.#env.budget.requestStarted();
    this.#downstream.onRequestStart(this, {});
    const total = this.#req.route.retry.total_timeout_ms;
    if (total > 0) this.#deadline = this.#env.clock.after(total, () => this.#onDeadline());
    this.#next(true);
  }

  get attempts(): number {
    return this.#attempts;
  }

  /** Starts the next attempt on the best untried target; `first`: any target, cooling or not, rather than none. */
  #next(first: boolean, last?: Failure): void {
    const { route } = this.#req;
    for (;;) {
      const now = this.#env.clock.now();
      const index = route.balancer.pick(this.#tried, route.states, now, this.#hashKey(), first);
      if (index === undefined) return this.#fail(last);
      const prepared = this.#prepare(index);
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
    const attempt = new Attempt(this, prepared, this.#env.clock, this.#stream, this.#stream && this.#mayTryAgain(prepared.index));
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
    const afterHeaders = (list: readonly (string | number)[]) => AFTER_HEADERS.some((kind) => list.includes(kind));
    if (afterHeaders(retry.retry_on) && (this.#retriesOn.get(index) ?? 0) < retry.max_retries_per_target) return true;
    return afterHeaders(retry.fallback_on) && this.#tried.size < targets.length;
  }

  #prepare(index: number): Prepared | GatewayError {
    let prepared = this.#prepared.get(index);
    if (prepared) return prepared;
    const { route, providers, json, bytes, ctx, endpoint, headers, path } = this.#req;
    const target = route.targets[index]!;
    const provider = providers.get(target.provider)!;
    const upstreamModel = target.model ?? (json.model as string);
    const label = target.model ?? route.entry;
    const state = route.states[index]!;
    const targetHeaders = Object.keys(target.headers).length === 0 ? headers : { ...headers, ...target.headers };
    const base = { requestId: ctx.id, headers: targetHeaders };
    if (provider.supports(endpoint)) {
      let body = bytes;
      let parsed = json;
      // Usage of every OpenAI chat and completions stream is asked for (limits, spend) and hidden again if the client did not ask.
      const asked = (endpoint === 'chat' || endpoint === 'completions') && provider.type !== 'anthropic' ? withStreamUsage(json) : undefined;
      if (upstreamModel !== json.model || asked) {
        parsed = { ...(asked ?? json), model: upstreamModel };
        try {
          body = Buffer.from(JSON.stringify(parsed));
        } catch {
          return errors.tooDeep();
        }
      }
      prepared = { target, index, provider, state, label, request: { ...base, endpoint, body, json: parsed }, translation: undefined, dropped: [], stripUsage: asked !== undefined };
    } else {
      const translation = translationFor(endpoint, provider.type, json);
      if (!translation || !provider.supports(translation.translator.to)) {
        prepared = errors.unsupportedEndpoint(json.model as string, provider.name, provider.type, path);
      } else {
        try {
          const out = translation.translator.request(json, upstreamModel);
          const body = Buffer.from(JSON.stringify(out.body));
          // The client's own API headers (anthropic-version, anthropic-beta; openai-beta) mean nothing to the other API.
          const foreign = provider.type === 'anthropic' ? 'openai-' : 'anthropic-';
          const translatedHeaders = Object.fromEntries(Object.entries(base.headers).filter(([name]) => !name.startsWith(foreign)));
          prepared = {
            target,
            index,
            provider,
            state,
            label,
            request: { requestId: base.requestId, headers: translatedHeaders, endpoint: translation.translator.to, body, json: out.body },
            translation,
            dropped: out.dropped,
            stripUsage: false,
          };
        } catch (error) {
          if (error instanceof TranslationError) prepared = errors.untranslatable(error.param, error.message, provider.name, provider.type);
          else if (error instanceof RangeError) prepared = errors.tooDeep();
          else throw error;
        }
      }
    }
    this.#prepared.set(index, prepared);
    return prepared;
  }

  #hashKey(): string | undefined {
    const on = this.#req.route.hashOn;
    if (on === undefined) return undefined;
    if (on.from === 'header') {
      const value = this.#req.ctx.req.headers[on.path[0]!];
      return Array.isArray(value) ? value.join(',') : value;
    }
    let value: unknown = this.#req.json;
    for (const key of on.path) value = value !== null && typeof value === 'object' ? (value as Json)[key] : undefined;
    return typeof value === 'string' || typeof value === 'number' ? String(value) : undefined;
  }

  // -- what attempts report ----------------------------------------------------------------------

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
    if (this.#attempts >= retry.max_attempts || left <= 0) return this.#fail(failure);
    const retries = this.#retriesOn.get(prepared.index) ?? 0;
    if (listed(retry.retry_on, failure.kind, failure.status) && retries < retry.max_retries_per_target) {
      // A Retry-After longer than the backoff allows is not waited for: the next target is tried.
      const wait = Math.max(backoffMs(retries, retry.backoff_base_ms, retry.backoff_max_ms), failure.retryAfterMs ?? 0);
      if (wait < left && wait <= retry.backoff_max_ms && prepared.state.usable(now + wait)) {
        if (!this.#takeBudget()) return this.#fail(failure);
        this.#retriesOn.set(prepared.index, retries + 1);
        this.#env.retried(entry, 'retry');
        this.#waiting = this.#env.clock.after(wait, () => {
          this.#waiting = undefined;
          this.#launch(prepared);
        });
        return;
      }
    }
    if (!listed(retry.fallback_on, failure.kind, failure.status)) return this.#fail(failure);
    const peek = this.#req.route.balancer.pick(this.#tried, this.#req.route.states, now, this.#hashKey(), false);
    if (peek === undefined) return this.#fail(failure);
    if (!this.#takeBudget()) return this.#fail(failure);
    this.#env.retried(entry, 'fallback');
    // `peek` advanced the round robin once; choosing again would skip a target, so it is used.
    const prepared2 = this.#prepare(peek);
    if (prepared2 instanceof GatewayError) {
      this.#tried.add(peek);
      this.#unfit ??= prepared2;
      this.#endBudget();
      return this.#next(false, failure);
    }
    this.#launch(prepared2);
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

  /** No further attempt: the last failure is what the client gets, in its own API's shape. */
  #fail(last: Failure | undefined): void {
    if (this.#aborted || this.#finished) return;
    this.#deadline?.cancel();
    const ctx = this.#req.ctx;
    if (last === undefined) {
      this.#finish();
      const error = this.#unfit ?? errors.noTarget(this.#req.route.entry);
      ctx.errorCode = error.code;
      return this.#downstream.onResponseError(this, error);
    }
    const prepared = this.#lastPrepared;
    if (last.held !== undefined && prepared) {
      // A stream that failed with its own error event: the client gets it as the target sent it.
      this.#begin(prepared, 200, last.headers ?? {});
      for (const chunk of last.held) this.data(chunk);
      return this.end();
    }
    if (last.status !== undefined && prepared) {
      this.#finish();
      const headers: IncomingHttpHeaders = { ...last.headers };
      let body = last.body ?? Buffer.alloc(0);
      if (prepared.translation) {
        let parsed: unknown;
        try {
          parsed = JSON.parse(body.toString('utf8'));
        } catch {
          parsed = undefined;
        }
        try {
          body = Buffer.from(JSON.stringify(prepared.translation.translator.error(last.status, parsed)));
        } catch (error) {
          this.#env.reportBug(error, this.#req.ctx.id);
          return this.#downstream.onResponseError(this, errors.untranslatableAnswer(prepared.provider.name));
        }
        headers['content-type'] = 'application/json';
      }
      delete headers['content-length'];
      delete headers['transfer-encoding'];
      headers['content-length'] = String(body.length);
      if (prepared.dropped.length > 0) headers['sluice-dropped-params'] = prepared.dropped.join(', ');
      this.#downstream.onResponseStart(this, last.status, headers, '');
      this.#downstream.onResponseData(this, body);
      return this.#downstream.onResponseEnd(this, {});
    }
    this.#finish();
    // A transport error is answered as it always was (its class and status, by undici's code).
    if (last.error) return this.#downstream.onResponseError(this, last.error);
    const provider = prepared?.provider.name ?? this.#req.route.entry;
    const error =
      last.kind === 'first_token_timeout'
        ? errors.firstTokenTimeout(provider)
        : last.kind === 'timeout'
          ? errors.upstreamTimeout(provider)
          : last.kind === 'connect'
            ? errors.upstreamConnect(provider)
            : last.kind === 'reset'
              ? errors.upstreamReset(provider)
              : errors.upstreamFailed(provider);
    this.#downstream.onResponseError(this, error);
  }

  get #lastPrepared(): Prepared | undefined {
    return this.#lastAttempt?.prepared;
  }

  #lastAttempt: Attempt | undefined;

  noteAttempt(attempt: Attempt): void {
    this.#lastAttempt = attempt;
  }

  #onDeadline(): void {
    this.#deadline = undefined;
    if (this.#committed || this.#aborted || this.#finished) return;
    this.#waiting?.cancel();
    const current = this.#current;
    if (current) current.timeout('timeout');
    else this.#fail({ kind: 'timeout' });
  }

  /** The attempt is the answer: from here on it is relayed, never replaced. */
  commit(attempt: Attempt, status: number, headers: IncomingHttpHeaders, latencyMs: number): void {
    const { prepared } = attempt;
    this.#committed = attempt;
    this.#current = undefined;
    this.#deadline?.cancel();
    this.#endBudget();
    prepared.state.succeeded(latencyMs);
    attempt.trace?.committed(status);
    this.#env.attempted(prepared.provider.name, prepared.label, 'success');
    if (this.#log) this.#record(prepared, 'success', status, latencyMs);
    this.#begin(prepared, status, headers);
    if (this.#paused) attempt.controller?.pause();
  }

  #begin(prepared: Prepared, status: number, headers: IncomingHttpHeaders): void {
    const out: IncomingHttpHeaders = { ...headers };
    const contentType = headers['content-type'];
    const sse = typeof contentType === 'string' && contentType.startsWith('text/event-stream');
    if (status < 300) {
      const api = prepared.request.endpoint;
      // A translated stream's translator knows how it ended; a relayed one is watched by byte search.
      this.#meter = new UsageMeter({ api, sse, watchEnd: prepared.translation === undefined, estimates: api !== 'count_tokens' });
    }
    if (prepared.translation) {
      delete out['content-length'];
      delete out['content-encoding'];
      if (sse) this.#translator = prepared.translation.stream();
      else {
        // A JSON answer is translated whole: its status goes out with the translated body, so
        // that an answer that cannot be read is still a clean 502.
        this.#jsonChunks = [];
        this.#jsonBytes = 0;
        out['content-type'] = 'application/json';
        if (prepared.dropped.length > 0) out['sluice-dropped-params'] = prepared.dropped.join(', ');
        this.#heldStart = { status, headers: out };
        return;
      }
    }
    if (prepared.stripUsage && sse) {
      delete out['content-length'];
      this.#stripper = new UsageStripper();
    }
    if (prepared.dropped.length > 0) out['sluice-dropped-params'] = prepared.dropped.join(', ');
    this.#downstream.onResponseStart(this, status, out, '');
  }

  /** Upstream bytes of the committed answer. */
  data(chunk: Buffer): void {
    this.#meter?.push(chunk);
    if (this.#left) {
      this.#leftBytes += chunk.length;
      if (this.#leftBytes > MAX_READ_AFTER_DISCONNECT) this.abort(new Error('the answer is too long to read on after the client left'));
      return;
    }
    if (this.#jsonChunks) {
      this.#jsonChunks.push(chunk);
      this.#jsonBytes += chunk.length;
      if (this.#jsonBytes > MAX_TRANSLATED_JSON) {
        const attempt = this.#committed;
        this.#jsonChunks = undefined;
        attempt?.abandon(new Error('answer too large to translate'));
        this.broke(errors.untranslatableAnswer(attempt?.prepared.provider.name ?? this.#req.route.entry));
      }
      return;
    }
    if (this.#translator) {
      if (this.#deferred) {
        this.#deferred.push(chunk);
        return;
      }
      if (!this.#translatedOut) {
        // The first event goes out before the rest of its read is translated: a read can carry a
        // whole answer, and Node sends what a response writes in one tick together, so the rest
        // waits for the next turn of the event loop (what arrives meanwhile queues behind it).
        const blank = chunk.indexOf(BLANK_LINE);
        if (blank !== -1 && blank + 2 < chunk.length) {
          this.#translate(chunk.subarray(0, blank + 2));
          if (this.#translatedOut && this.#translator) {
            this.#deferred = [chunk.subarray(blank + 2)];
            setImmediate(this.#flushDeferred);
            return;
          }
          return this.#translate(chunk.subarray(blank + 2));
        }
      }
      return this.#translate(chunk);
    }
    if (this.#stripper) {
      const out = this.#stripper.push(chunk);
      if (out.length > 0) this.#downstream.onResponseData(this, out);
      return;
    }
    this.#downstream.onResponseData(this, chunk);
  }

  /** The translation deferred after the first event: what queued, then the end if it came. */
  readonly #flushDeferred = (): void => {
    const queued = this.#deferred;
    this.#deferred = undefined;
    if (!queued || this.#finished || !this.#translator) return;
    this.#translate(queued.length === 1 ? queued[0]! : Buffer.concat(queued));
    if (this.#endDeferred) {
      this.#endDeferred = false;
      this.end();
    }
  };

  #translate(chunk: Buffer): void {
    let text: string;
    try {
      text = this.#translator!.push(chunk);
    } catch (error) {
      return this.#untranslatable(error);
    }
    if (text === '') return;
    this.#translatedOut = true;
    this.#downstream.onResponseData(this, Buffer.from(text));
  }

  /** A translator failed on what the provider sent (a bug, or an answer no translator expects): the answer ends with an error. */
  #untranslatable(error: unknown): void {
    const attempt = this.#committed;
    this.#translator = undefined;
    this.#env.reportBug(error, this.#req.ctx.id);
    attempt?.abandon(new Error('answer could not be translated'));
    this.broke(errors.untranslatableAnswer(attempt?.prepared.provider.name ?? this.#req.route.entry));
  }

  end(): void {
    if (this.#deferred) {
      this.#endDeferred = true;
      return;
    }
    if (this.#left) return this.#finish();
    const prepared = (this.#committed ?? this.#lastAttempt)?.prepared;
    if (this.#jsonChunks && prepared?.translation) {
      const raw = Buffer.concat(this.#jsonChunks).toString('utf8');
      this.#jsonChunks = undefined;
      const start = this.#heldStart!;
      this.#heldStart = undefined;
      let parsed: unknown;
      try {
        parsed = JSON.parse(raw);
      } catch {
        parsed = undefined;
      }
      let body: Buffer | undefined;
      if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) {
        try {
          body = Buffer.from(JSON.stringify(prepared.translation.translator.response(parsed as Json)));
        } catch (error) {
          this.#env.reportBug(error, this.#req.ctx.id);
        }
      }
      this.#finish();
      // Not JSON, or not an answer the translator can read: the provider's fault, a 502.
      if (body === undefined) return this.#downstream.onResponseError(this, errors.untranslatableAnswer(prepared.provider.name));
      this.#downstream.onResponseStart(this, start.status, { ...start.headers, 'content-length': String(body.length) }, '');
      this.#downstream.onResponseData(this, body);
      return this.#downstream.onResponseEnd(this, {});
    }
    let outcome: StreamOutcome | undefined;
    if (this.#translator) {
      let text: string;
      try {
        text = this.#translator.end();
        outcome = this.#translator.outcome?.();
      } catch (error) {
        return this.#untranslatable(error);
      }
      if (text !== '') this.#downstream.onResponseData(this, Buffer.from(text));
    } else if (this.#stripper) {
      const rest = this.#stripper.end();
      if (rest.length > 0) this.#downstream.onResponseData(this, rest);
    }
    outcome ??= this.#meter?.outcome();
    const provider = prepared?.provider.name ?? this.#req.route.entry;
    if (outcome === 'cut') {
      // Ended cleanly but without its final event: an incomplete answer, which must not look whole.
      this.#committed?.prepared.state.failed('stream_error', this.#env.clock.now(), NO_COOLDOWN, undefined);
      return this.broke(errors.streamCut(provider));
    }
    if (outcome === 'error') {
      // The stream carried its own error event, relayed (or translated) as it came.
      this.#req.ctx.errorCode = 'upstream_stream_error';
      this.#env.upstreamError(provider, 'stream_error');
    }
    this.#finish();
    this.#downstream.onResponseEnd(this, {});
  }

  /** The committed answer failed part way: the relay ends it (an error event for a stream). */
  broke(error: Error): void {
    // What arrived before the failure goes out before its error event.
    if (this.#deferred) this.#flushDeferred();
    if (this.#finished) return;
    this.#finish(errorTypeOf(error));
    this.#downstream.onResponseError(this, error);
  }

  /** `errorType`: why the committed (or current) attempt ended early, for its span. */
  #finish(errorType?: string): void {
    if (this.#finished) return;
    this.#finished = true;
    this.#deadline?.cancel();
    this.#leftTimer?.cancel();
    this.#endBudget();
    this.#env.budget.requestFinished();
    this.#req.ctx.attempts = this.#attempts;
    this.#req.ctx.attemptLog = this.#log;
    // Attempts that failed before a commit have ended their spans already.
    const attempt = this.#committed ?? this.#current;
    let usage: Usage | undefined | Promise<Usage>;
    try {
      usage = this.#meter?.usage(this.#req.promptTokens);
    } catch (error) {
      this.#env.reportBug(error, this.#req.ctx.id);
    }
    if (!(usage instanceof Promise)) return this.#settle(usage, attempt, errorType);
    usage.then(
      (estimate) => this.#settle(estimate, attempt, errorType),
      (error: unknown) => {
        this.#env.reportBug(error, this.#req.ctx.id);
        this.#settle(undefined, attempt, errorType);
      },
    );
  }

  /** The usage is known (or given up on): the request may be settled and leave in flight. */
  #settle(usage: Usage | undefined, attempt: Attempt | undefined, errorType: string | undefined): void {
    if (usage) this.#req.ctx.usage = usage;
    attempt?.trace?.end(usage, errorType);
    this.#settled = true;
    const done = this.#onSettled;
    this.#onSettled = undefined;
    done?.();
  }
}

/** A broken answer's error, as a span's `error.type`: its code (undici's, or ours), else its name. */
function errorTypeOf(error: Error): string {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && code !== '' ? code : error.name;
}

/** The request an attempt sends when traced: its own `traceparent` (the caller's `tracestate` only if the caller's `traceparent` was valid). */
function tracedRequest(request: ProviderRequest, trace: AttemptTrace): ProviderRequest {
  const headers: Record<string, string | string[]> = { ...request.headers, traceparent: trace.traceparent };
  if (!trace.keepsTracestate) delete headers.tracestate;
  return { ...request, headers };
}
