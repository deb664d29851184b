// Where every HTTP request enters and leaves: in-flight accounting (entered when headers are read,
// left on the response's `close`, whatever ended it: L10), the request context, health probes,
// and the hand-off to the proxy or admin routes.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { Lifecycle } from '../lifecycle/lifecycle.ts';
import { liveness, readiness, type HealthCheck } from '../lifecycle/health.ts';
import type { Metrics } from '../telemetry/metrics.ts';
import type { AccessLog } from '../telemetry/access-log.ts';
import { RequestContext } from './context.ts';
import { sendJson } from './respond.ts';
import type { Listener } from './listener.ts';

export interface RouteTable {
  /** The metrics label for a path, or undefined when this table does not serve it. */
  endpointOf(path: string): string | undefined;
  handle(ctx: RequestContext, path: string): void;
}

export interface RequestServices {
  readonly lifecycle: Lifecycle;
  readonly metrics: Metrics;
  readonly accessLog: AccessLog;
  readonly logger: Logger;
  readonly healthChecks: () => HealthCheck[];
  routesFor(listener: Listener): RouteTable;
}

export function createRequestHandler(services: RequestServices) {
  const { lifecycle, metrics, accessLog, logger } = services;

  function finished(ctx: RequestContext): void {
    lifecycle.requestFinished(ctx.connection);
    const { req, res } = ctx;
    metrics.inFlight.labels(ctx.endpoint, ctx.protocol).dec();
    if (!res.writableFinished && !ctx.errorCode) ctx.errorCode = 'client_gone';
    accessLog.record({
      id: ctx.id,
      downstreamRequestId: ctx.downstreamRequestId,
      peer: ctx.peer,
      method: req.method ?? '',
      path: pathOf(req.url),
      // 499: the client left before any response status was sent (nginx's convention).
      status: res.headersSent ? res.statusCode : 499,
      durationSeconds: ctx.durationSeconds(),
      endpoint: ctx.endpoint,
      model: ctx.model,
      provider: ctx.provider,
      listener: ctx.listener,
      protocol: ctx.protocol,
      errorCode: ctx.errorCode,
      usage: ctx.usage,
    });
  }

  return function onRequest(listener: Listener, req: IncomingMessage, res: ServerResponse): void {
    const socket = req.socket;
    const connection = lifecycle.connections.get(socket);
    // The fresh-connection guard is done once a request arrives; keep-alive timing takes over.
    if (connection?.state === 'fresh') socket.setTimeout(0);
    lifecycle.requestStarted(connection);
    const ctx = new RequestContext(req, res, listener.name, connection);
    res.once('close', () => finished(ctx));
    const path = pathOf(req.url);
    if (path === '/livez' || path === '/readyz') {
      ctx.healthProbe = true;
      ctx.endpoint = path.slice(1);
      metrics.inFlight.labels(ctx.endpoint, ctx.protocol).inc();
      const answer = path === '/livez' ? liveness() : readiness(services.healthChecks(), hasQueryKey(req.url, 'verbose'));
      sendJson(ctx, lifecycle, answer.status, answer.body);
      return;
    }
    const routes = services.routesFor(listener);
    ctx.endpoint = routes.endpointOf(path) ?? 'other';
    metrics.inFlight.labels(ctx.endpoint, ctx.protocol).inc();
    if (lifecycle.draining) {
      logger.info(
        { event: 'request_while_draining', method: req.method, path, request_id: ctx.id, peer: ctx.peer, downstream_request_id: ctx.downstreamRequestId },
        'request arrived while draining',
      );
    }
    try {
      routes.handle(ctx, path);
    } catch (error) {
      // Nothing a client sends may take the process down; this is a bug, answered as one.
      logger.error({ event: 'handler_error', request_id: ctx.id, err: error }, 'request handler failed');
      if (!res.headersSent) sendJson(ctx, lifecycle, 500, '{"error":{"message":"internal gateway error","type":"server_error","code":"internal_error"}}');
      else res.destroy();
    }
  };
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
