// The one place where response heads are written, so that the drain decision (L3) is taken when
// the headers go out, not when the request arrived.
import type { OutgoingHttpHeaders } from 'node:http';
import type { DrainDecision } from '../lifecycle/contracts.ts';
import type { GatewayError } from '../api/errors.ts';
import type { RequestContext } from './context.ts';

export function writeHead(ctx: RequestContext, decision: DrainDecision, status: number, headers: OutgoingHttpHeaders): void {
  const res = ctx.res;
  const connection = ctx.connection;
  if (connection?.retiring || decision.shouldRetire(ctx.listener)) {
    // L3: decided now. An HTTP/1.1 response then carries `Connection: close`, and Node closes the
    // socket after it.
    if (ctx.protocol === 'http1') res.shouldKeepAlive = false;
    // The connection is told through its protocol: HTTP/2 gets the GOAWAY now, with the last
    // stream id (L4), and streams the client already sent complete; HTTP/1.1 has nothing to send.
    connection?.retire();
  }
  if (ctx.responseHeaders !== undefined) Object.assign(headers, ctx.responseHeaders);
  headers['x-request-id'] = ctx.id;
  ctx.headAt = process.hrtime.bigint();
  res.writeHead(status, headers);
}

/** Ends the response (with `body`, if any, kept for the ledger when `ledger.bodies` is on): `ctx.beforeEnd` first, while the client cannot have the answer yet. */
export function endResponse(ctx: RequestContext, body?: string): void {
  ctx.beforeEnd?.();
  if (body === undefined) return void ctx.res.end();
  ctx.bytesOut += Buffer.byteLength(body);
  ctx.bodies?.keep(body);
  ctx.res.end(body);
}

export function sendJson(ctx: RequestContext, decision: DrainDecision, status: number, body: string): void {
  if (ctx.res.headersSent || ctx.res.destroyed) return;
  writeHead(ctx, decision, status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  endResponse(ctx, body);
}

export function sendError(ctx: RequestContext, decision: DrainDecision, error: GatewayError): void {
  ctx.errorCode ||= error.code;
  if (ctx.res.headersSent || ctx.res.destroyed) return;
  // In the caller's shape (set by the route), so its SDK shows the message, not raw JSON.
  const body = error.body(ctx.dialect);
  writeHead(ctx, decision, error.status, { ...error.headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  endResponse(ctx, body);
}
