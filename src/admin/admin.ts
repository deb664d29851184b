// Routes of an admin listener (E4): metrics, server info, drain controls, health-check override,
// and the OpenAPI document. Every route but the probes and /metrics needs the admin token when one
// is configured.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { RouteTable } from '../server/requests.ts';
import type { RequestContext } from '../server/context.ts';
import type { Metrics } from '../telemetry/metrics.ts';
import type { Lifecycle } from '../lifecycle/lifecycle.ts';
import { sendError, sendJson, writeHead } from '../server/respond.ts';
import { GatewayError, errors } from '../gateway/errors.ts';
import { ADMIN_ROUTES, openApiDocument, type AdminRoute } from './openapi.ts';

export interface AdminEnvironment {
  readonly metrics: Metrics;
  readonly lifecycle: Lifecycle;
  readonly version: string;
  readonly startedAt: number;
  /** The admin token, if any (compared as SHA-256 digests in constant time). */
  readonly token: string | undefined;
  /** How long a graceful admin drain keeps accepting. */
  readonly drainTimeSecs: number;
  listeners(): { name: string; role: string; address: string; accepting: boolean; tls: boolean; protocols: readonly string[] }[];
}

const ROUTES = new Map(ADMIN_ROUTES.map((r) => [r.path, r]));

export class AdminRoutes implements RouteTable {
  readonly #env: AdminEnvironment;
  readonly #tokenDigest: Buffer | undefined;
  readonly #openApi: string;

  constructor(env: AdminEnvironment) {
    this.#env = env;
    this.#tokenDigest = env.token ? digest(env.token) : undefined;
    this.#openApi = JSON.stringify(openApiDocument(env.version));
  }

  endpointOf(path: string): string | undefined {
    return ROUTES.has(path) ? path.slice(1).replaceAll('/', '_') : undefined;
  }

  handle(ctx: RequestContext, path: string): void {
    const decision = this.#env.lifecycle;
    const route = ROUTES.get(path);
    if (!route) return sendError(ctx, decision, errors.notFound(path));
    if (ctx.req.method !== route.method) return sendError(ctx, decision, errors.methodNotAllowed(ctx.req.method ?? '', path, route.method));
    if (!route.open && !this.#authorized(ctx)) return sendError(ctx, decision, new GatewayError(401, 'authentication_error', 'invalid_admin_token', 'admin token missing or wrong: send "Authorization: Bearer <admin.token>"'));
    this.#serve(ctx, route);
  }

  #serve(ctx: RequestContext, route: AdminRoute): void {
    const { lifecycle } = this.#env;
    const query = new URLSearchParams(ctx.req.url?.split('?')[1] ?? '');
    switch (route.path) {
      case '/metrics':
        return this.#metrics(ctx);
      case '/openapi.json':
        return sendJson(ctx, lifecycle, 200, this.#openApi);
      case '/server_info':
        return sendJson(ctx, lifecycle, 200, JSON.stringify(this.#serverInfo()));
      case '/healthcheck/fail':
        lifecycle.failHealthCheck();
        return sendJson(ctx, lifecycle, 200, JSON.stringify({ status: 'healthcheck_failed' }));
      case '/healthcheck/ok':
        lifecycle.restoreHealthCheck();
        return sendJson(ctx, lifecycle, 200, JSON.stringify({ status: 'healthcheck_ok' }));
      case '/drain_listeners': {
        const graceful = query.has('graceful');
        const skipExit = query.has('skip_exit');
        if (skipExit && !graceful) {
          return sendError(ctx, lifecycle, new GatewayError(400, 'invalid_request_error', 'skip_exit_needs_graceful', 'skip_exit only applies to a graceful drain (add ?graceful)'));
        }
        void lifecycle.drain('admin:/drain_listeners', {
          graceful,
          inboundOnly: query.has('inboundonly'),
          exit: graceful && !skipExit,
          windowSecs: this.#env.drainTimeSecs,
        });
        return sendJson(ctx, lifecycle, 200, JSON.stringify({ status: 'draining', drain: lifecycle.drainInfo() }));
      }
    }
  }

  #authorized(ctx: RequestContext): boolean {
    if (!this.#tokenDigest) return true;
    const match = /^Bearer\s+(\S+)\s*$/i.exec(ctx.req.headers.authorization ?? '');
    return match !== null && timingSafeEqual(digest(match[1]!), this.#tokenDigest);
  }

  #serverInfo(): object {
    const { lifecycle } = this.#env;
    return {
      version: this.#env.version,
      state: lifecycle.state,
      ready: lifecycle.ready(),
      healthcheck_failed: lifecycle.healthCheckFailed,
      uptime_secs: Math.round((Date.now() - this.#env.startedAt) / 1000),
      in_flight: lifecycle.inFlight,
      open_connections: lifecycle.connections.size,
      connections: lifecycle.connections.counts(),
      drain: lifecycle.drainInfo() ?? null,
      listeners: this.#env.listeners(),
    };
  }

  #metrics(ctx: RequestContext): void {
    const { metrics, lifecycle } = this.#env;
    metrics.render().then(
      (text) => {
        if (ctx.res.headersSent || ctx.res.writableEnded) return;
        writeHead(ctx, lifecycle, 200, { 'content-type': metrics.registry.contentType, 'content-length': Buffer.byteLength(text) });
        ctx.res.end(text);
      },
      () => sendError(ctx, lifecycle, errors.internal()),
    );
  }
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}
