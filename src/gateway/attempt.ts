// One attempt on one target of a route: an undici handler that holds the answer until it can be
// committed. An error status is read whole (up to MAX_ERROR_BODY) to classify it; a stream is held
// until its first content event (FirstContentWatch) when a failure could still lead to another
// attempt, else committed at its status line like a JSON answer below 400. What it learns goes to its owner (the RoutedExchange): failed, or committed and then
// relayed byte by byte.
import type { IncomingHttpHeaders } from 'node:http';
import type { FailureClass } from '../config/schema.ts';
import type { Clock, TimerHandle } from '../lifecycle/clock.ts';
import type { DispatchController, Provider, ProviderRequest, ResponseHandler } from '../providers/types.ts';
import type { RouteTarget } from '../routing/router.ts';
import type { TargetState } from '../routing/targets.ts';
import { retryAfterMs, statusFailure, transportFailure } from '../routing/failures.ts';
import type { Translation } from '../translate/registry.ts';
import { FirstContentWatch } from './first-content.ts';
import { errors } from '../api/errors.ts';
import type { AttemptTrace } from '../telemetry/tracing.ts';

/** An error answer is read up to this much (for its class and to return it); the rest is cut. */
const MAX_ERROR_BODY = 64 * 1024;
/** A stream held this long without content is committed anyway (never buffer without bound). */
const MAX_HELD_BYTES = 1024 * 1024;

/** A target made ready for one request: its provider, the request in its API, the translation back. */
export interface Prepared {
  readonly target: RouteTarget;
  readonly index: number;
  readonly provider: Provider;
  readonly state: TargetState;
  /** The metrics label: the target's model, or the route entry when it keeps the client's name. */
  readonly label: string;
  readonly request: ProviderRequest;
  readonly translation: Translation | undefined;
  readonly dropped: readonly string[];
  /** The stream's usage was asked for by the gateway, not the client: it is taken out of what the client gets. */
  readonly stripUsage: boolean;
}

/** Why an attempt failed, and what it leaves to return if it was the last. */
export interface Failure {
  readonly kind: FailureClass;
  /** An HTTP answer: what is returned when this failure is the last. */
  readonly status?: number;
  readonly headers?: IncomingHttpHeaders;
  readonly body?: Buffer;
  /** A stream that failed with an error event: what it sent until then, returned as it is when last. */
  readonly held?: Buffer[];
  readonly error?: Error;
  readonly retryAfterMs?: number;
}

/** What an attempt reports to: the exchange that runs the route's attempts. */
export interface AttemptOwner {
  noteAttempt(attempt: Attempt): void;
  /** The attempt failed before anything was committed. */
  failed(attempt: Attempt, failure: Failure): void;
  /** The attempt's answer is the one: status and headers (held bytes follow through `data`). */
  commit(attempt: Attempt, status: number, headers: IncomingHttpHeaders, latencyMs: number): void;
  /** Upstream bytes of the committed answer. */
  data(chunk: Buffer): void;
  end(): void;
  /** The committed answer failed part way. */
  broke(error: Error): void;
}

/** One attempt on one target: an undici handler that holds the answer until it can be committed. */
export class Attempt implements ResponseHandler {
  readonly #exchange: AttemptOwner;
  readonly prepared: Prepared;
  readonly #clock: Clock;
  readonly #startedAt: number;
  controller: DispatchController | undefined;
  /** Its span, when the request is traced. */
  trace: AttemptTrace | undefined;
  #phase: 'headers' | 'error_body' | 'holding' | 'committed' | 'done' = 'headers';
  #status = 0;
  #headers: IncomingHttpHeaders = {};
  #chunks: Buffer[] = [];
  #bytes = 0;
  #watch: FirstContentWatch | undefined;
  #headersTimer: TimerHandle | undefined;
  #firstTokenTimer: TimerHandle | undefined;

  /** Whether a stream is held until its first content (only when a failure could still lead to another attempt). */
  readonly #hold: boolean;

  constructor(exchange: AttemptOwner, prepared: Prepared, clock: Clock, stream: boolean, hold: boolean) {
    this.#exchange = exchange;
    this.#hold = hold;
    this.prepared = prepared;
    this.#clock = clock;
    this.#startedAt = clock.now();
    exchange.noteAttempt(this);
    const { timeoutMs, firstTokenTimeoutMs } = prepared.target;
    if (timeoutMs > 0) this.#headersTimer = clock.after(timeoutMs, () => this.timeout('timeout'));
    if (stream && firstTokenTimeoutMs > 0) this.#firstTokenTimer = clock.after(firstTokenTimeoutMs, () => this.timeout('first_token_timeout'));
  }

  onRequestStart(controller: DispatchController): void {
    this.controller = controller;
    if (this.#phase === 'done') controller.abort(new Error('attempt abandoned'));
  }

  onResponseStart(_controller: DispatchController, status: number, headers: IncomingHttpHeaders): void {
    if (this.#phase !== 'headers') return;
    this.#headersTimer?.cancel();
    this.#status = status;
    this.#headers = headers;
    if (status >= 400) {
      this.#phase = 'error_body';
      return;
    }
    const contentType = headers['content-type'];
    if (this.#hold && typeof contentType === 'string' && contentType.startsWith('text/event-stream')) {
      this.#phase = 'holding';
      this.#watch = new FirstContentWatch();
      return;
    }
    this.#commit();
  }

  onResponseData(_controller: DispatchController, chunk: Buffer): void {
    switch (this.#phase) {
      case 'committed':
        return this.#exchange.data(chunk);
      case 'error_body':
        if (this.#bytes < MAX_ERROR_BODY) {
          const room = MAX_ERROR_BODY - this.#bytes;
          this.#chunks.push(chunk.length > room ? chunk.subarray(0, room) : chunk);
          this.#bytes += Math.min(chunk.length, room);
        }
        return;
      case 'holding': {
        this.#chunks.push(chunk);
        this.#bytes += chunk.length;
        const seen = this.#watch!.push(chunk);
        if (seen === 'content' || this.#bytes > MAX_HELD_BYTES) return this.#commit();
        if (seen === 'error') {
          const held = this.#chunks;
          this.#stop();
          this.#exchange.failed(this, { kind: 'stream_error', held, headers: this.#headers });
        }
        return;
      }
      default:
    }
  }

  onResponseEnd(): void {
    switch (this.#phase) {
      case 'committed':
        this.#phase = 'done';
        this.prepared.state.end();
        return this.#exchange.end();
      case 'holding': {
        const seen = this.#watch!.finish();
        if (seen === 'content') {
          // Its last event was not closed by a blank line: an answer all the same.
          this.#commit();
          this.#phase = 'done';
          this.prepared.state.end();
          return this.#exchange.end();
        }
        const held = this.#chunks;
        this.#phase = 'done';
        this.#clearTimers();
        if (seen === 'error') return this.#exchange.failed(this, { kind: 'stream_error', held, headers: this.#headers });
        // Ended before any content, so without its final event ([DONE], message_stop,
        // response.completed): cut, a failure that may fall back.
        return this.#exchange.failed(this, { kind: 'stream_error', error: errors.streamCut(this.prepared.provider.name) });
      }
      case 'error_body': {
        this.#phase = 'done';
        this.#clearTimers();
        const body = Buffer.concat(this.#chunks);
        const kind = statusFailure(this.#status, body.toString('utf8'));
        const retryAfter = kind === 'rate_limited' || kind === 'server_error' ? retryAfterMs(this.#headers) : undefined;
        return this.#exchange.failed(this, { kind, status: this.#status, headers: this.#headers, body, retryAfterMs: retryAfter });
      }
      default:
    }
  }

  onResponseError(_controller: DispatchController, error: Error): void {
    const phase = this.#phase;
    if (phase === 'done') return;
    this.#phase = 'done';
    this.#clearTimers();
    if (phase === 'committed') {
      this.prepared.state.end();
      this.prepared.state.failed(transportFailure(error), this.#clock.now(), { failures: 0, secs: 0, maxSecs: 0 }, undefined);
      return this.#exchange.broke(error);
    }
    if (phase === 'error_body') {
      // The error answer was cut: what was read of it is still the answer.
      const body = Buffer.concat(this.#chunks);
      return this.#exchange.failed(this, { kind: statusFailure(this.#status, body.toString('utf8')), status: this.#status, headers: this.#headers, body });
    }
    this.#exchange.failed(this, { kind: transportFailure(error), error });
  }

  /** A deadline passed before the answer could be committed: this attempt is given up. */
  timeout(kind: 'timeout' | 'first_token_timeout'): void {
    if (this.#phase === 'committed' || this.#phase === 'done') return;
    this.#stop();
    this.#exchange.failed(this, { kind });
  }

  /** The exchange was aborted (client gone, forced drain). */
  abandon(reason: Error): void {
    const phase = this.#phase;
    if (phase === 'done') return;
    this.#phase = 'done';
    this.#clearTimers();
    this.prepared.state.end();
    if (phase !== 'committed') this.prepared.state.abandoned();
    this.controller?.abort(reason);
  }

  #stop(): void {
    this.#phase = 'done';
    this.#clearTimers();
    this.controller?.abort(new Error('attempt abandoned for another target'));
  }

  #commit(): void {
    this.#phase = 'committed';
    this.#clearTimers();
    const held = this.#chunks;
    this.#chunks = [];
    this.#watch = undefined;
    this.#exchange.commit(this, this.#status, this.#headers, this.#clock.now() - this.#startedAt);
    for (const chunk of held) this.#exchange.data(chunk);
  }

  #clearTimers(): void {
    this.#headersTimer?.cancel();
    this.#firstTokenTimer?.cancel();
  }
}

