// Relays the answer a route committed to the client as it arrives: status and headers, then bytes
// (SSE chunk by chunk), with back-pressure and exactly one ending. Shaped as an undici
// DispatchHandler; its controller is the RoutedExchange, which stands for the attempts. When the
// client leaves first, the exchange is told (it reads the answer on to its usage, or stops), and
// the request stays in flight until its usage is known.
import type { IncomingHttpHeaders } from 'node:http';
import type { DispatchController, Endpoint, ResponseHandler } from '../providers/types.ts';
import type { DrainDecision, ForceEndable } from '../lifecycle/contracts.ts';
import type { RequestContext } from '../server/context.ts';
import { endResponse, sendError, writeHead } from '../server/respond.ts';
import { downstreamHeaders } from './headers.ts';
import { errors, GatewayError } from '../api/errors.ts';
import { classifyUpstreamError, kindOfCode } from './upstream-errors.ts';
import { streamErrorEvent } from './stream-errors.ts';

/** What the relay asks of the exchange that drives it, beyond undici's controller. */
export interface RelayController extends DispatchController {
  /** The client left: the answer is read on to its usage (bounded), or the exchange stops. */
  leave(reason: Error): void;
  /** Calls `done` once the usage is known (read, or estimated); false when it already is. */
  whenSettled(done: () => void): boolean;
  /** The `sequence_number` the next event of a Responses stream takes. */
  nextSequence(): number;
}

export interface RelayEnvironment {
  readonly decision: DrainDecision;
  upstreamError(provider: string, kind: string): void;
  /** Logs an unexpected error (a bug) with the request it happened in. */
  reportBug(error: unknown, requestId: string): void;
}

const LF = 10;
const LF_LF = (LF << 8) | LF;

/** Ends the upstream request when the client leaves first. */
class ClientGoneError extends Error {
  readonly code = 'SLUICE_ERR_CLIENT_GONE';
  constructor() {
    super('client closed the connection');
  }
}

export class ResponseRelay implements ResponseHandler, ForceEndable {
  readonly #ctx: RequestContext;
  readonly #env: RelayEnvironment;
  /** The client's endpoint: the shape of the error event that ends a stream. */
  readonly #api: Endpoint;
  #controller: RelayController | undefined;
  #sse = false;
  #ended = false;
  #waitingForDrain = false;
  /** The last two bytes written: an error event after a stream cut mid-event starts on an event of its own. */
  #lastTwo = 0;

  constructor(ctx: RequestContext, env: RelayEnvironment, api: Endpoint) {
    this.#ctx = ctx;
    this.#env = env;
    this.#api = api;
    ctx.forceEnder = this;
    ctx.settleLater = this.#onResponseClosed;
  }

  onRequestStart(controller: RelayController): void {
    this.#controller = controller;
    if (this.#ended) controller.abort(new ClientGoneError());
  }

  onResponseStart(_controller: DispatchController, status: number, headers: IncomingHttpHeaders): void {
    if (this.#ended) return;
    const contentType = headers['content-type'];
    this.#sse = typeof contentType === 'string' && contentType.startsWith('text/event-stream');
    if (status >= 300) {
      this.#ctx.errorCode = `upstream_status_${status}`;
      this.#env.upstreamError(this.#ctx.provider, 'status');
    }
    writeHead(this.#ctx, this.#env.decision, status, downstreamHeaders(headers));
  }

  onResponseData(controller: DispatchController, chunk: Buffer): void {
    if (this.#ended) return;
    const n = chunk.length;
    this.#ctx.bytesOut += n;
    // `ledger.bodies`: what the client receives, a stream's events as sent.
    this.#ctx.bodies?.keep(chunk);
    if (n > 0) this.#lastTwo = n >= 2 ? (chunk[n - 2]! << 8) | chunk[n - 1]! : ((this.#lastTwo & 0xff) << 8) | chunk[0]!;
    if (!this.#ctx.res.write(chunk) && !this.#waitingForDrain) {
      this.#waitingForDrain = true;
      controller.pause();
      this.#ctx.res.once('drain', this.#onDrain);
    }
  }

  onResponseEnd(): void {
    if (this.#ended) return;
    this.#finish();
    endResponse(this.#ctx);
  }

  onResponseError(_controller: DispatchController, error: Error): void {
    if (this.#ended) return;
    // A GatewayError is the route's verdict (every attempt failed, or none could be made); anything else broke a committed answer.
    const { error: gatewayError, kind } = error instanceof GatewayError ? { error, kind: kindOfCode(error.code) } : classifyUpstreamError(error, this.#ctx.provider);
    this.#env.upstreamError(this.#ctx.provider, kind);
    this.#ctx.errorCode = gatewayError.code;
    this.#finish();
    const res = this.#ctx.res;
    if (!res.headersSent) sendError(this.#ctx, this.#env.decision, gatewayError);
    else if (this.#sse) this.#endStreamWithError(gatewayError);
    else res.destroy(); // a half-sent JSON body cannot carry an error: the client must see a cut.
  }

  /**
   * L8: the drain was forced. The upstream request is aborted; a response not yet begun is a 503
   * (`drain_forced`), a stream ends with an explicit error event (never a fake [DONE]), and a
   * half-sent JSON body is cut, since it cannot carry an error.
   */
  /** A streamed (SSE) response counts as a stream in `waiting_for`. */
  kind(): 'request' | 'stream' {
    return this.#sse ? 'stream' : 'request';
  }

  forceEnd(reason: string): void {
    // An answer still read for its usage after its client left is stopped too (its usage estimated).
    if (this.#ended) return this.#controller?.abort(new Error(`gateway shutting down (${reason})`));
    this.#ctx.errorCode = 'drain_forced';
    this.#finish();
    this.#controller?.abort(new Error(`gateway shutting down (${reason})`));
    const res = this.#ctx.res;
    if (!res.headersSent) sendError(this.#ctx, this.#env.decision, errors.drainForced());
    else if (this.#sse) this.#endStreamWithError(new GatewayError(503, 'server_error', 'gateway_shutdown', 'the gateway is shutting down and ended this stream before it was complete'));
    else res.destroy();
  }

  #endStreamWithError(error: GatewayError): void {
    // What was sent may end in the middle of an event (a cut): it is closed first, so that the error
    // event is one of its own and not glued to the last line.
    const closed = this.#lastTwo === LF_LF || this.#lastTwo === 0 ? '' : (this.#lastTwo & 0xff) === LF ? '\n' : '\n\n';
    endResponse(this.#ctx, closed + streamErrorEvent(error, this.#api, this.#controller?.nextSequence() ?? 0));
  }

  #finish(): void {
    this.#ended = true;
  }

  readonly #onDrain = (): void => {
    this.#waitingForDrain = false;
    this.#controller?.resume();
  };

  /** The response closed (ended, or the client left first): the request leaves in flight once its usage is known. */
  readonly #onResponseClosed = (done: () => void): boolean => {
    if (!this.#ended) {
      this.#ctx.errorCode ||= 'client_gone';
      this.#finish();
      this.#controller?.leave(new ClientGoneError());
    }
    return this.#controller?.whenSettled(done) ?? false;
  };
}
