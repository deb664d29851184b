// Relays the answer a route committed to the client as it arrives: status and headers, then bytes
// (SSE chunk by chunk), with back-pressure and exactly one ending. Shaped as an undici
// DispatchHandler; its controller is the RoutedExchange, which stands for the attempts.
import type { IncomingHttpHeaders } from 'node:http';
import type { DispatchController, ResponseHandler } from '../providers/types.ts';
import type { DrainDecision, ForceEndable } from '../lifecycle/contracts.ts';
import type { RequestContext } from '../server/context.ts';
import { sendError, writeHead } from '../server/respond.ts';
import { downstreamHeaders } from './headers.ts';
import { errors, GatewayError, type ErrorDialect } from '../api/errors.ts';
import { classifyUpstreamError, kindOfCode } from './upstream-errors.ts';

export interface RelayEnvironment {
  readonly decision: DrainDecision;
  upstreamError(provider: string, kind: string): void;
  /** Logs an unexpected error (a bug) with the request it happened in. */
  reportBug(error: unknown, requestId: string): void;
}

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
  readonly #dialect: ErrorDialect;
  #controller: DispatchController | undefined;
  #sse = false;
  #ended = false;
  #waitingForDrain = false;

  constructor(ctx: RequestContext, env: RelayEnvironment, dialect: ErrorDialect) {
    this.#ctx = ctx;
    this.#env = env;
    this.#dialect = dialect;
    ctx.forceEnder = this;
    ctx.res.once('close', this.#onClientClose);
  }

  onRequestStart(controller: DispatchController): void {
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
    if (!this.#ctx.res.write(chunk) && !this.#waitingForDrain) {
      this.#waitingForDrain = true;
      controller.pause();
      this.#ctx.res.once('drain', this.#onDrain);
    }
  }

  onResponseEnd(): void {
    if (this.#ended) return;
    this.#finish();
    this.#ctx.res.end();
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
    if (this.#ended) return;
    this.#ctx.errorCode = 'drain_forced';
    this.#finish();
    this.#controller?.abort(new Error(`gateway shutting down (${reason})`));
    const res = this.#ctx.res;
    if (!res.headersSent) sendError(this.#ctx, this.#env.decision, errors.drainForced());
    else if (this.#sse) this.#endStreamWithError(new GatewayError(503, 'server_error', 'gateway_shutdown', 'the gateway is shutting down and ended this stream before it was complete'));
    else res.destroy();
  }

  #endStreamWithError(error: GatewayError): void {
    this.#ctx.res.end(`event: error\ndata: ${error.body(this.#dialect)}\n\n`);
  }

  #finish(): void {
    this.#ended = true;
  }

  readonly #onDrain = (): void => {
    this.#waitingForDrain = false;
    this.#controller?.resume();
  };

  readonly #onClientClose = (): void => {
    if (this.#ended) return;
    this.#ctx.errorCode ||= 'client_gone';
    this.#finish();
    this.#controller?.abort(new ClientGoneError());
  };
}
