// Routes of an admin listener (E4): metrics, server info, drain controls, health-check override,
// and the OpenAPI document. Every request, probes included, first passes the request guard (Host,
// origin, media type: request-guard.ts); then every route but the probes and /metrics needs the
// admin token when one is configured.
import { createHash, timingSafeEqual } from 'node:crypto';
import { queryOf, type RouteTable } from '../server/requests.ts';
import type { Listener } from '../server/listener.ts';
import type { RequestContext } from '../server/context.ts';
import type { Metrics } from '../telemetry/metrics.ts';
import type { AdminLifecycle } from '../lifecycle/contracts.ts';
import { sendError, sendJson, writeHead } from '../server/respond.ts';
import { GatewayError, errors } from '../api/errors.ts';
import { ADMIN_ROUTES, openApiDocument, type AdminRoute } from './openapi.ts';
import { serveResources, type AuditLog } from './resources-api.ts';
import type { ResourceStore } from '../config/store.ts';
import type { Config } from '../config/schema.ts';
import type { StatusFeed } from './status-feed.ts';
import { STATUS_PAGE, STATUS_PAGE_HEADERS } from './status-page.ts';
import { ADMIN_RESPONSE_HEADERS, AdminRequestGuard } from './request-guard.ts';
import { REQUESTS_PREFIX, serveUsage, type UsageSource } from './usage-api.ts';

export interface AdminEnvironment {
  readonly metrics: Metrics;
  readonly lifecycle: AdminLifecycle;
  readonly version: string;
  /**
   * The admin tokens by name (`admin.token` is named "admin"), compared as SHA-256 digests in
   * constant time, with their scope (`read`: nothing that changes anything). None: the API is open.
   */
  readonly tokens: readonly { name: string; token: string; scope: 'read' | 'write' }[];
  /** How long a graceful admin drain keeps accepting. */
  readonly drainTimeSecs: number;
  /** The process's (or, under a supervisor, the whole group's) state for GET /server_info. */
  serverInfo(): Promise<object>;
  /** The Prometheus exposition (summed across the group under a supervisor). */
  renderMetrics(): Promise<string>;
  /** E7: present when this process runs under a keeper (`hot_restart.enabled`). */
  readonly hotRestart?: { request(trigger: string): void; info(): object } | undefined;
  /** Providers, models and keys: the etcd source (writable) or the config loaded from a file. */
  readonly resources: ResourceStore;
  /** The config serving now (a resource write is checked against it). */
  readonly current: () => Config;
  /** Where `config_write` audit events go. */
  readonly audit: AuditLog;
  /** GET /status/events; absent with `admin.status_page: false` (then /status and /status/events are 404). */
  readonly status?: StatusFeed | undefined;
  /** `admin.allowed_hosts`: the Host names the API answers to besides loopback and the listener's own address. */
  readonly allowedHosts: readonly string[];
  /** The usage ledger's routes read this. */
  readonly usage: UsageSource;
}

/** Who an unauthenticated caller is in audit events (no admin token configured). */
const NO_TOKEN = 'anonymous (no admin token configured)';

const ROUTES = new Map(ADMIN_ROUTES.map((r) => [r.path, r]));
const STATUS_EVENTS = '/status/events';
/** One request of the ledger: `/requests/{id}`. */
const REQUEST_DETAIL = '/requests/{id}';
/** The resource routes (resources-api.ts) live below this path. */
const CONFIG = '/config';
/** A read token asked for a change. */
const READ_ONLY = (who: string) =>
  new GatewayError(403, 'permission_error', 'admin_token_read_only', `admin token "${who}" has scope read: it may look, not change anything`);
const UNAUTHORIZED = () => new GatewayError(401, 'authentication_error', 'invalid_admin_token', 'admin token missing or wrong: send "Authorization: Bearer <admin.token>"');

export class AdminRoutes implements RouteTable {
  readonly #env: AdminEnvironment;
  readonly #tokens: { name: string; digest: Buffer; scope: 'read' | 'write' }[];
  readonly #openApi: string;
  readonly #guard: AdminRequestGuard;

  constructor(env: AdminEnvironment) {
    this.#env = env;
    this.#guard = new AdminRequestGuard(env.allowedHosts);
    this.#tokens = env.tokens.map((t) => ({ name: t.name, digest: digest(t.token), scope: t.scope }));
    this.#openApi = JSON.stringify(openApiDocument(env.version, env.status ? ADMIN_ROUTES : ADMIN_ROUTES.filter((r) => !r.statusPage)));
  }

  /** The status event stream is a live view: not in flight, ended at the exit (requests.ts). */
  watches(path: string): boolean {
    return path === STATUS_EVENTS && this.#env.status !== undefined;
  }

  /** Before any route, the probes included: the request guard's refusal; every answer gets ADMIN_RESPONSE_HEADERS. */
  admit(ctx: RequestContext, listener: Listener): GatewayError | undefined {
    ctx.responseHeaders = ADMIN_RESPONSE_HEADERS;
    try {
      return this.#guard.refuse(ctx.req, listener);
    } catch {
      // It reads only strings and never throws; were it to, the request is refused, not let through.
      return errors.internal();
    }
  }

  endpointOf(path: string): string | undefined {
    if (path === CONFIG || path.startsWith(`${CONFIG}/`)) return 'config';
    if (path.startsWith(REQUESTS_PREFIX)) return 'requests_id';
    return ROUTES.has(path) ? path.slice(1).replaceAll('/', '_') : undefined;
  }

  handle(ctx: RequestContext, path: string): void {
    const decision = this.#env.lifecycle;
    if (path === CONFIG || path.startsWith(`${CONFIG}/`)) {
      const caller = this.#caller(ctx);
      if (caller === undefined) return sendError(ctx, decision, UNAUTHORIZED());
      if (caller.scope === 'read' && ctx.req.method !== 'GET' && ctx.req.method !== 'HEAD') return sendError(ctx, decision, READ_ONLY(caller.name));
      const { resources, current, audit } = this.#env;
      return serveResources({ store: resources, current, audit, decision }, ctx, path.slice(CONFIG.length + 1).split('/').filter((s, i, all) => s !== '' || i < all.length - 1), caller.name);
    }
    const route = path.startsWith(REQUESTS_PREFIX) ? ROUTES.get(REQUEST_DETAIL) : ROUTES.get(path);
    if (!route || (route.statusPage && !this.#env.status)) return sendError(ctx, decision, errors.notFound(path));
    if (ctx.req.method !== route.method) return sendError(ctx, decision, errors.methodNotAllowed(ctx.req.method ?? '', path, route.method));
    if (!route.open) {
      const caller = this.#caller(ctx);
      if (caller === undefined) return sendError(ctx, decision, UNAUTHORIZED());
      // Every admin route that is not a GET changes something (a drain, the health check, a hot restart).
      if (caller.scope === 'read' && route.method !== 'GET') return sendError(ctx, decision, READ_ONLY(caller.name));
    }
    this.#serve(ctx, route, path);
  }

  #serve(ctx: RequestContext, route: AdminRoute, path: string): void {
    const { lifecycle } = this.#env;
    const query = new URLSearchParams(queryOf(ctx.req.url));
    switch (route.path) {
      case '/metrics':
        return this.#metrics(ctx);
      case '/openapi.json':
        return sendJson(ctx, lifecycle, 200, this.#openApi);
      case '/status':
        writeHead(ctx, lifecycle, 200, { ...STATUS_PAGE_HEADERS, 'content-length': Buffer.byteLength(STATUS_PAGE) });
        return void ctx.res.end(STATUS_PAGE);
      case STATUS_EVENTS:
        return this.#env.status!.serve(ctx, lifecycle);
      case '/usage':
      case '/requests':
      case REQUEST_DETAIL:
      case '/budgets':
        return serveUsage(this.#env.usage, ctx, lifecycle, path);
      case '/server_info':
        return this.#async(ctx, this.#env.serverInfo().then((info) => ({ type: 'application/json', body: JSON.stringify(info) })));
      case '/healthcheck/fail':
        lifecycle.health.fail();
        return sendJson(ctx, lifecycle, 200, JSON.stringify({ status: 'healthcheck_failed' }));
      case '/healthcheck/ok':
        lifecycle.health.restore();
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
        return sendJson(ctx, lifecycle, 200, JSON.stringify({ status: 'draining', drain: lifecycle.status.info() }));
      }
      case '/hot_restart': {
        const hotRestart = this.#env.hotRestart;
        if (!hotRestart) {
          return sendError(ctx, lifecycle, new GatewayError(409, 'invalid_request_error', 'hot_restart_disabled', 'hot restart is not enabled: start Sluice with hot_restart.enabled: true'));
        }
        if (lifecycle.status.info()) return sendError(ctx, lifecycle, new GatewayError(409, 'invalid_request_error', 'draining', 'this generation is draining: the next one may already serve'));
        hotRestart.request('admin:/hot_restart');
        return sendJson(ctx, lifecycle, 202, JSON.stringify({ status: 'requested', hot_restart: hotRestart.info() }));
      }
    }
  }

  /** The admin token presented (its name and scope), or undefined when it is missing or wrong (every token is compared, in constant time). */
  #caller(ctx: RequestContext): { name: string; scope: 'read' | 'write' } | undefined {
    if (this.#tokens.length === 0) return { name: NO_TOKEN, scope: 'write' };
    const match = /^Bearer\s+(\S+)\s*$/i.exec(ctx.req.headers.authorization ?? '');
    if (!match) return undefined;
    const presented = digest(match[1]!);
    let who: { name: string; scope: 'read' | 'write' } | undefined;
    for (const t of this.#tokens) if (timingSafeEqual(presented, t.digest)) who ??= { name: t.name, scope: t.scope };
    return who;
  }

  #metrics(ctx: RequestContext): void {
    const type = this.#env.metrics.registry.contentType;
    this.#async(ctx, this.#env.renderMetrics().then((body) => ({ type, body })));
  }

  /** Answers 200 with what `answer` resolves to, or 500 if it fails, unless the client left. */
  #async(ctx: RequestContext, answer: Promise<{ type: string; body: string }>): void {
    const { lifecycle } = this.#env;
    answer.then(
      ({ type, body }) => {
        if (ctx.res.headersSent || ctx.res.writableEnded) return;
        writeHead(ctx, lifecycle, 200, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
        ctx.res.end(body);
      },
      () => {
        if (!ctx.res.headersSent && !ctx.res.writableEnded) sendError(ctx, lifecycle, errors.internal());
      },
    );
  }
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}
