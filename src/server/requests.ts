// Where every HTTP request enters and leaves: in-flight accounting (entered when headers are read,
// left on the response's `close`, whatever ended it: L10), the request context, health probes,
// and the hand-off to the proxy or admin routes.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { RequestLifecycle } from '../lifecycle/contracts.ts';
import { liveness, readiness, type HealthCheck } from '../lifecycle/health.ts';
import type { Metrics } from '../telemetry/metrics.ts';
import type { AccessLog, FinishedRequest } from '../telemetry/access-log.ts';
import { RequestContext, type ExchangeContext } from './context.ts';
import { sendError, sendJson } from './respond.ts';
import { errors, type GatewayError } from '../api/errors.ts';
import { discardRest } from './body.ts';
import { clientErrorCodes } from './client-error.ts';
import { capClientFields } from '../telemetry/log-cap.ts';
import type { Listener } from './listener.ts';

export interface RouteTable {
  /** The metrics label for a path, or undefined when this table does not serve it. */
  endpointOf(path: string): string | undefined;
  handle(ctx: RequestContext, path: string): void;
  /**
   * A path served as a live view (the admin status event stream): it is not in flight, so no drain
   * waits for it (L5); the exit ends it. Absent: none.
   */
  watches?(path: string): boolean;
  /**
   * What every request to this table's listeners passes first, health probes included (the admin
   * API's Host, origin and media-type rules): the refusal, or undefined. Must not throw. Absent: none.
   */
  admit?(ctx: RequestContext, listener: Listener): GatewayError | undefined;
}

/** Where a finished exchange that reached its admission is recorded (the usage ledger), off the request path. */
export interface ExchangeLedger {
  /** Synchronous, cheap, never throws. */
  record(ctx: ExchangeContext, status: number): void;
}

export interface RequestServices {
  readonly lifecycle: RequestLifecycle;
  readonly metrics: Metrics;
  readonly accessLog: AccessLog;
  /** The usage ledger; absent: none is kept. */
  readonly ledger?: ExchangeLedger | undefined;
  readonly logger: Logger;
  readonly healthChecks: () => HealthCheck[];
  routesFor(listener: Listener): RouteTable;
}

/** Leaves in-flight and writes the access log line: called exactly once per exchange. */
export function createExchangeRecorder(services: RequestServices) {
  const { lifecycle, metrics, accessLog } = services;
  return function recordFinished(ctx: ExchangeContext, status: number): void {
    try {
      // What the request holds (limits, usage to commit) is given back before it leaves in-flight.
      ctx.finished(status);
    } catch (error) {
      services.logger.error({ event: 'handler_error', request_id: ctx.id, err: error }, 'settling a finished request failed');
    }
    // Recorded before it leaves in-flight: the exit's ledger flush, which waits for nothing in flight, then has it.
    if (ctx.ledgered && services.ledger !== undefined) {
      try {
        services.ledger.record(ctx, status);
      } catch (error) {
        services.logger.error({ event: 'telemetry_error', request_id: ctx.id, err: error }, 'recording a finished request in the ledger failed');
      }
    }
    if (ctx.watch) lifecycle.watchFinished(ctx.connection);
    else lifecycle.requestFinished(ctx.connection);
    try {
      if (!ctx.watch) metrics.inFlight.add(-1, ctx.endpoint, ctx.protocol);
      recordAccess(ctx, status);
    } catch (error) {
      // Telemetry must never take the process down with it.
      services.logger.error({ event: 'telemetry_error', request_id: ctx.id, err: error }, 'recording a finished request failed');
    }
  };

  function recordAccess(ctx: ExchangeContext, status: number): void {
    const finished: FinishedRequest = {
      id: ctx.id,
      downstreamRequestId: ctx.downstreamRequestId,
      peer: ctx.peer,
      method: ctx.req.method ?? '',
      path: pathOf(ctx.req.url),
      status,
      durationSeconds: ctx.durationSeconds(),
      endpoint: ctx.endpoint,
      model: ctx.model,
      modelEntry: ctx.modelEntry,
      provider: ctx.provider,
      servedModel: ctx.servedModel,
      listener: ctx.listener,
      protocol: ctx.protocol,
      errorCode: ctx.errorCode,
      usage: ctx.usage,
      attempts: ctx.attempts,
      attemptLog: ctx.attemptLog,
      keyName: ctx.keyName,
      costMicros: ctx.costMicros,
    };
    accessLog.record(finished);
    ctx.trace?.end(finished);
  }
}

/** O1: requests that arrive during the drain are logged one by one (health probes excluded). */
export function logIfDraining(services: RequestServices, ctx: ExchangeContext, path: string): void {
  if (!services.lifecycle.draining) return;
  services.logger.info(
    capClientFields({ event: 'request_while_draining', method: ctx.req.method, path, request_id: ctx.id, peer: ctx.peer, downstream_request_id: ctx.downstreamRequestId }, ['method', 'path', 'downstream_request_id']),
    'request arrived while draining',
  );
}


export function createRequestHandler(services: RequestServices) {
  const { lifecycle, metrics, logger } = services;
  const recordFinished = createExchangeRecorder(services);

  /**
   * L8: a forced drain ends every request in flight with an explicit error. The relay of a proxied
   * request knows how (it also aborts the upstream request); anything else that has not answered
   * yet (still reading the body, say) gets a 503 in the caller's shape.
   */
  function forceEnd(ctx: RequestContext, reason: string): void {
    if (ctx.forceEnder) return ctx.forceEnder.forceEnd(reason);
    if (!ctx.res.headersSent) sendError(ctx, lifecycle, errors.drainForced());
    else ctx.res.destroy();
  }

  function finished(ctx: RequestContext): void {
    const res = ctx.res;
    ctx.errorCode ||= clientErrorCodes.get(res) ?? '';
    if (!res.writableFinished && !ctx.errorCode) ctx.errorCode = 'client_gone';
    // 499: the client left before any response status was sent (nginx's convention).
    recordFinished(ctx, res.headersSent ? res.statusCode : 499);
  }

  return function onRequest(listener: Listener, req: IncomingMessage, res: ServerResponse): void {
    const connection = listener.connectionOf(req);
    const path = pathOf(req.url);
    const probe = path === '/livez' || path === '/readyz';
    const routes = services.routesFor(listener);
    // A live view (the admin status event stream) is not in flight: no drain waits for it (L5).
    const watch = !probe && routes.watches?.(path) === true;
    if (watch) lifecycle.watchStarted(connection);
    else lifecycle.requestStarted(connection, probe);
    const ctx = new RequestContext(req, res, listener.name, connection);
    ctx.watch = watch;
    const untrack = lifecycle.trackForceEndable({ forceEnd: (reason) => forceEnd(ctx, reason), kind: () => ctx.forceEnder?.kind?.() ?? 'request', exchange: ctx });
    res.once('close', () => {
      let left = false;
      const finish = (): void => {
        if (left) return;
        left = true;
        untrack();
        finished(ctx);
      };
      // Still tracked while it settles: a forced drain (L8) ends that too.
      let later = false;
      try {
        later = ctx.settleLater?.(finish) === true;
      } catch (error) {
        logger.error({ event: 'handler_error', request_id: ctx.id, err: error }, 'settling a request failed');
      }
      if (!later) finish();
    });
    // An HTTP/1.1 connection whose request line claims another version ("HTTP/2.0", "HTTP/0.9",
    // which Node's parser lets through), or an HTTP/1.1 request without Host (RFC 9112 §3.2; Node's
    // own 400 would have no body): answered in the API's error shape, never routed, connection closed.
    const refusal = ctx.protocol !== 'http1' ? undefined : req.httpVersionMajor !== 1 ? errors.httpVersionNotSupported() : req.httpVersionMinor === 1 && req.headers.host === undefined ? errors.missingHost() : undefined;
    if (refusal) {
      ctx.endpoint = 'other';
      if (!watch) metrics.inFlight.add(1, ctx.endpoint, ctx.protocol);
      res.shouldKeepAlive = false;
      sendError(ctx, lifecycle, refusal);
      return;
    }
    const refused = routes.admit?.(ctx, listener);
    if (refused) {
      ctx.endpoint = probe ? path.slice(1) : (routes.endpointOf(path) ?? 'other');
      if (!watch) metrics.inFlight.add(1, ctx.endpoint, ctx.protocol);
      // Its body is not read: dropped (bounded) so that the client still sees the answer.
      discardRest(req);
      sendError(ctx, lifecycle, refused);
      return;
    }
    if (probe) {
      ctx.endpoint = path.slice(1);
      metrics.inFlight.add(1, ctx.endpoint, ctx.protocol);
      const answer = path === '/livez' ? liveness() : readiness(services.healthChecks(), hasQueryKey(req.url, 'verbose'));
      sendJson(ctx, lifecycle, answer.status, answer.body);
      return;
    }
    ctx.endpoint = routes.endpointOf(path) ?? 'other';
    if (!watch) metrics.inFlight.add(1, ctx.endpoint, ctx.protocol);
    logIfDraining(services, ctx, path);
    try {
      routes.handle(ctx, path);
    } catch (error) {
      // Nothing a client sends may take the process down; this is a bug, answered as one.
      logger.error({ event: 'handler_error', request_id: ctx.id, err: error }, 'request handler failed');
      if (!res.headersSent) sendError(ctx, lifecycle, errors.internal());
      else res.destroy();
    }
  };
}

/** A URL's query: everything after its first `?` (a `?` may appear in a query, RFC 3986 3.4). */
export function queryOf(url: string | undefined): string {
  const at = url === undefined ? -1 : url.indexOf('?');
  return at === -1 ? '' : url!.slice(at + 1);
}

export function pathOf(url: string | undefined): string {
  if (url === undefined) return '/';
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
}

function hasQueryKey(url: string | undefined, key: string): boolean {
  const q = url?.indexOf('?') ?? -1;
  if (q === -1) return false;
  return new URLSearchParams(url!.slice(q + 1)).has(key);
}
