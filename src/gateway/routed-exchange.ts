// One proxied request on a route, as its relay sees it: attempts on its targets (route-attempts.ts)
// until one answer is committed to the client. Once committed, the answer is relayed (translated
// when the target speaks another API) and never switched: a later failure, or a stream that ends
// without its API's final event, ends it with the explicit error event. Its usage is read as it
// passes (estimated when the provider never gave it whole); if the client leaves first, the answer
// is read on to its usage, within bounds, before the request is settled.
import type { IncomingHttpHeaders } from 'node:http';
import type { TimerHandle } from '../lifecycle/clock.ts';
import { errors, type GatewayError } from '../api/errors.ts';
import type { StreamOutcome, StreamTranslator } from '../translate/types.ts';
import type { Attempt, Failure, Prepared } from './attempt.ts';
import { UsageMeter } from './usage-meter.ts';
import { UsageStripper } from './stream-usage.ts';
import type { RelayController } from './relay.ts';
import type { Usage } from '../api/usage.ts';
import type { Downstream, ExchangeEnvironment, RoutedRequest } from './routed-request.ts';
import { RouteAttempts, type AttemptsOwner } from './route-attempts.ts';
import { failureError, sendFailureAnswer } from './failure-answer.ts';
import { translatedAnswer } from './answer-translation.ts';

const BLANK_LINE = Buffer.from('\n\n');
/** A JSON answer larger than this is not translated (a 502): it is read whole to be rewritten. */
const MAX_TRANSLATED_JSON = 32 * 1024 * 1024;
/** After the client left, at most this much more of an answer is read for its usage. */
const MAX_READ_AFTER_DISCONNECT = 4 * 1024 * 1024;
/** A committed answer that failed is recorded on its target without counting towards a cooldown. */
const NO_COOLDOWN = { failures: 0, secs: 0, maxSecs: 0 };

export class RoutedExchange implements RelayController, AttemptsOwner {
  readonly #req: RoutedRequest;
  readonly #env: ExchangeEnvironment;
  readonly #downstream: Downstream;
  /** The attempts on the route's targets, until one is committed. */
  readonly #tries: RouteAttempts;
  #committed: Attempt | undefined;
  /** The attempt made last: the one whose failure stands when none is left. */
  #lastAttempt: Attempt | undefined;
  #aborted = false;
  #finished = false;
  #paused = false;
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

  constructor(request: RoutedRequest, env: ExchangeEnvironment, downstream: Downstream) {
    this.#req = request;
    this.#env = env;
    this.#downstream = downstream;
    this.#tries = new RouteAttempts(request, env, this);
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
    const current = this.#tries.abort(this.#committed === undefined);
    (this.#committed ?? current)?.abandon(reason);
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
    this.#tries.stopDeadline();
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
    this.#tries.start();
  }

  get attempts(): number {
    return this.#tries.count;
  }

  // -- what attempts report ----------------------------------------------------------------------

  noteAttempt(attempt: Attempt): void {
    this.#lastAttempt = attempt;
  }

  /** An attempt failed before anything was committed. */
  failed(attempt: Attempt, failure: Failure): void {
    this.#tries.failed(attempt, failure);
  }

  /** No further attempt: the last failure is what the client gets, in its own API's shape. */
  fail(last: Failure | undefined, unfit: GatewayError | undefined): void {
    if (this.#aborted || this.#finished) return;
    this.#tries.stopDeadline();
    const ctx = this.#req.ctx;
    if (last === undefined) {
      this.#finish();
      const error = unfit ?? errors.noTarget(this.#req.route.entry);
      ctx.errorCode = error.code;
      return this.#downstream.onResponseError(this, error);
    }
    const prepared = this.#lastAttempt?.prepared;
    if (last.held !== undefined && prepared) {
      // A stream that failed with its own error event: the client gets it as the target sent it.
      this.#begin(prepared, 200, last.headers ?? {});
      for (const chunk of last.held) this.data(chunk);
      return this.end();
    }
    this.#finish();
    if (last.status !== undefined && prepared) return sendFailureAnswer(this.#downstream, this, prepared, last.status, last, this.#env, ctx.id);
    // A transport error is answered as it always was (its class and status, by undici's code).
    if (last.error) return this.#downstream.onResponseError(this, last.error);
    this.#downstream.onResponseError(this, failureError(last.kind, prepared?.provider.name ?? this.#req.route.entry));
  }

  /** The attempt is the answer: from here on it is relayed, never replaced. */
  commit(attempt: Attempt, status: number, headers: IncomingHttpHeaders, latencyMs: number): void {
    this.#committed = attempt;
    this.#tries.committed(attempt, status, latencyMs);
    this.#begin(attempt.prepared, status, headers);
    if (this.#paused) attempt.controller?.pause();
  }

  // -- the committed answer ----------------------------------------------------------------------

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
      const chunks = this.#jsonChunks;
      this.#jsonChunks = undefined;
      const start = this.#heldStart!;
      this.#heldStart = undefined;
      let body: Buffer | undefined;
      try {
        body = translatedAnswer(prepared.translation, chunks);
      } catch (error) {
        this.#env.reportBug(error, this.#req.ctx.id);
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
    this.#leftTimer?.cancel();
    const current = this.#tries.finish();
    this.#env.budget.requestFinished();
    // Attempts that failed before a commit have ended their spans already.
    const attempt = this.#committed ?? current;
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
