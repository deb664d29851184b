// Builds a running gateway from a validated config: telemetry, lifecycle, routing, listeners; and
// applies a new config to it (E6). Holds the wiring only; each behaviour lives in its own module.
import { withListenersOf, type Config } from './config/schema.ts';
import { Lifecycle, type DrainSettings } from './lifecycle/lifecycle.ts';
import { systemClock } from './lifecycle/clock.ts';
import type { HealthCheck } from './lifecycle/health.ts';
import { Metrics, type MetricsJson } from './telemetry/metrics.ts';
import { AccessLog } from './telemetry/access-log.ts';
import { flushLogger, type Loggers } from './telemetry/logger.ts';
import { Gateway, createRouting } from './gateway/gateway.ts';
import { AdminRoutes } from './admin/admin.ts';
import { Listener, type ListenerHandlers } from './server/listener.ts';
import { createRequestHandler } from './server/requests.ts';
import { createUpgradeHandler } from './server/upgrade.ts';
import { RealtimeRoute } from './gateway/realtime.ts';
import type { BoundListener, WorkerGroup } from './cluster/worker-group.ts';
import { mergeGroupInfo, type ProcessInfo } from './cluster/group-info.ts';

export interface RunningGateway {
  readonly lifecycle: Lifecycle;
  /** Starts the drain; resolves with the exit code (the same promise on every call). */
  drain(trigger: string): Promise<number>;
  /** L8: a second signal ends the drain now. */
  force(reason: string): void;
  /** E6: applies a validated new config without a restart. */
  reload(next: Config, trigger: string): Promise<void>;
  /** A new config was refused: the last good one keeps serving. */
  reloadRejected(): void;
  /** This process's state, as GET /server_info reports it. */
  info(): ProcessInfo;
  /** This process's metrics, for a supervisor to sum. */
  metricsJson(): Promise<MetricsJson>;
  /** Where each listener of this process listens (`host:port`, the port bound when 0 was asked). */
  boundListeners(): BoundListener[];
}

export interface GatewayOptions {
  /**
   * This process supervises worker processes that serve the proxy listeners: it keeps the admin
   * listeners, passes every drain and health-check change on, and waits for the workers to exit.
   */
  workers?: WorkerGroup;
  /** Log `ready` once serving (default true; a worker leaves that to its supervisor). */
  announceReady?: boolean;
}

/** How long a supervisor waits for its workers to exit once its own drain is over, before killing them. */
const WORKER_EXIT_GRACE_MS = 5000;

function drainSettings(config: Config): DrainSettings {
  return {
    minDrainSecs: config.shutdown.min_drain_secs,
    maxDrainSecs: config.shutdown.max_drain_secs,
    progressLogSecs: config.shutdown.progress_log_secs,
    freshConnectionGraceSecs: config.downstream.idle_timeout_secs || config.downstream.fresh_connection_grace_secs,
    freshTimeoutSecs: config.downstream.headers_timeout_secs,
    idleTimeoutSecs: config.downstream.idle_timeout_secs,
    drainStrategy: config.shutdown.drain_strategy,
    drainTimeSecs: config.shutdown.drain_time_secs,
    resetUpgradedOnProactiveDrain: config.shutdown.reset_upgraded_on_proactive_drain,
    connectionDrainTimeoutSecs: config.downstream.drain_timeout_secs,
  };
}

function formatAddress(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

export async function startGateway(fullConfig: Config, loggers: Loggers, version: string, options: GatewayOptions = {}): Promise<RunningGateway> {
  const logger = loggers.events;
  const startedAt = Date.now();
  const { workers } = options;
  // A supervisor serves only the admin listeners; its workers serve the rest.
  const own = (c: Config): Config => (workers ? withListenersOf(c, 'admin') : c);
  const config = own(fullConfig);
  let current = config;
  let listeners: Listener[] = [];
  const lifecycle = new Lifecycle({
    clock: systemClock,
    log: logger,
    settings: drainSettings(config),
    hooks: {
      stopAccepting: (include) => {
        for (const listener of listeners) if (!include || include(listener.name)) listener.stopAccepting();
      },
      shutdown: async () => {
        // L9: pools close once their requests are done (nothing is in flight by now).
        await Promise.allSettled([...gateway.routing.providers.values()].map((p) => p.close()));
        await workers?.stopped(WORKER_EXIT_GRACE_MS);
        flushLogger(logger);
      },
      commanded: workers ? (command) => workers.command(command) : undefined,
    },
  });
  const metrics = new Metrics({
    connections: () => lifecycle.connections.counts(),
    draining: () => lifecycle.draining,
    drainDurationSeconds: () => lifecycle.drainSeconds(),
    workers: workers && (() => workers.counts()),
    workerRestarts: workers && (() => workers.restarts()),
  });
  lifecycle.observeConnections(
    (connection) => metrics.connectionsAccepted.labels(connection.listener).inc(),
    (connection, reason) => metrics.connectionsClosed.labels(connection.listener, reason).inc(),
    (listener) => metrics.connectionsRejected.labels(listener).inc(),
  );
  lifecycle.connections.limit = config.downstream.max_connections;
  const gateway = new Gateway(createRouting(config), {
    decision: lifecycle,
    trackForceEndable: (stream) => lifecycle.trackForceEndable(stream),
    upstreamError: (provider, kind) => metrics.upstreamErrors.labels(provider, kind).inc(),
    reportBug: (error, requestId) => logger.error({ event: 'handler_error', request_id: requestId, err: error }, 'request handler failed'),
  });
  const healthChecks = (): HealthCheck[] => [
    { name: 'config_loaded', ok: true },
    { name: 'healthcheck_ok', ok: !lifecycle.healthCheckFailed },
    { name: 'listeners_up', ok: listeners.every((l) => l.accepting) },
    { name: 'not_draining', ok: !lifecycle.draining },
    ...(workers ? [{ name: 'workers_ready', ok: workers.allReady() }] : []),
  ];
  const info = (): ProcessInfo => ({
    state: lifecycle.state,
    ready: lifecycle.ready() && healthChecks().every((c) => c.ok),
    healthcheck_failed: lifecycle.healthCheckFailed,
    in_flight: lifecycle.inFlight,
    open_connections: lifecycle.connections.size,
    connections: lifecycle.connections.counts(),
    drain: lifecycle.drainInfo() ?? null,
    listeners: listeners.map((l) => ({ name: l.name, role: l.role, address: l.configuredAddress, accepting: l.accepting, tls: l.tls, protocols: l.protocols })),
  });
  const serverInfo = async (): Promise<object> => {
    const head = { version, uptime_secs: Math.round((Date.now() - startedAt) / 1000) };
    if (!workers) return { ...head, ...info() };
    return { ...head, ...mergeGroupInfo(info(), await workers.query<ProcessInfo>('info')) };
  };
  const renderMetrics = async (): Promise<string> => {
    if (!workers) return metrics.render();
    const replies = await workers.query<MetricsJson>('metrics');
    return metrics.render(replies.flatMap((r) => (r.value ? [r.value] : [])));
  };
  const createAdmin = (c: Config) =>
    new AdminRoutes({
      metrics,
      lifecycle,
      version,
      token: c.admin.token,
      drainTimeSecs: c.shutdown.drain_time_secs ?? c.shutdown.min_drain_secs,
      serverInfo,
      renderMetrics,
    });
  let admin = createAdmin(config);
  const accessLog = new AccessLog(config.log.access_log ? loggers.access : undefined, metrics);
  const services = {
    lifecycle,
    metrics,
    accessLog,
    logger,
    healthChecks,
    routesFor: (listener: Listener) => (listener.role === 'admin' ? admin : gateway),
  };
  const onRequest = createRequestHandler(services);
  const realtime = new RealtimeRoute({
    routing: () => gateway.routing,
    trackForceEndable: (stream) => lifecycle.trackForceEndable(stream),
    upstreamError: (provider, kind) => metrics.upstreamErrors.labels(provider, kind).inc(),
    connectTimeoutMs: config.upstream.connect_timeout_ms,
  });
  const onUpgrade = createUpgradeHandler(services, new Map([['/v1/realtime', realtime]]));
  const handlersFor = (role: string): ListenerHandlers => ({ onRequest, onUpgrade: role === 'proxy' ? onUpgrade : undefined });
  const registerScopes = (c: Config) => {
    for (const l of c.listeners) lifecycle.registerListener(l.name, { drainType: l.drain_type, direction: l.direction, admin: l.role === 'admin' });
  };
  const bound = new Map<Listener, string>();
  const logStarted = (l: BoundListener, extra: object = {}) =>
    logger.info({ event: 'listener_started', listener: l.name, role: l.role, address: l.address, ...extra }, `listening on ${l.address} (${l.role})`);
  const open = async (listener: Listener) => {
    const address = await listener.listen();
    const where = formatAddress(address.address, address.port);
    bound.set(listener, where);
    logStarted({ name: listener.name, role: listener.role, address: where });
  };

  registerScopes(config);
  listeners = config.listeners.map((l) => new Listener(l, config.downstream, lifecycle, systemClock, logger, handlersFor(l.role)));
  try {
    for (const listener of listeners) await open(listener);
    // The workers' listeners, announced here too so that one process's log tells where all listen.
    for (const l of (await workers?.start(fullConfig, lifecycle)) ?? []) logStarted(l, { workers: workers!.size });
  } catch (error) {
    for (const listener of listeners) listener.stopAccepting();
    throw error;
  }
  lifecycle.markServing();
  if (options.announceReady !== false) {
    logger.info(
      {
        event: 'ready',
        providers: config.providers.map((p) => `${p.name} (${p.type})`),
        models: config.models.length,
        keys: config.keys.length,
        ...(workers ? { workers: workers.size } : {}),
      },
      'sluice is ready',
    );
  }

  /**
   * E6: models, providers and keys swap atomically between requests; a listener whose settings
   * changed keeps its listening socket and retires the old settings' connections; a removed
   * listener stops accepting and retires its connections; a removed or changed provider gets no
   * new requests and its pool closes when its last request ends.
   */
  async function reload(nextFull: Config, trigger: string): Promise<void> {
    if (workers) {
      if (nextFull.workers !== fullConfig.workers) {
        logger.warn({ event: 'config_reload_partial', key: 'workers', reason: 'the number of workers changes at the next start' }, 'workers is not changed by a reload');
      }
      workers.reload(nextFull, trigger);
    }
    const next = own(nextFull);
    const previous = { config: current, routing: gateway.routing };
    gateway.setRouting(createRouting(next, previous));
    for (const [name, provider] of previous.routing.providers) {
      if (gateway.routing.providers.get(name) !== provider) void provider.close();
    }
    lifecycle.updateSettings(drainSettings(next));
    lifecycle.connections.limit = next.downstream.max_connections;
    registerScopes(next);
    admin = createAdmin(next);
    accessLog.setLogger(next.log.access_log ? loggers.access : undefined);
    logger.level = loggers.access.level = next.log.level;
    const old = new Map(listeners.map((l) => [l.name, l]));
    const kept: Listener[] = [];
    for (const l of next.listeners) {
      const existing = old.get(l.name);
      old.delete(l.name);
      if (existing?.reconfigure(l, next.downstream)) {
        existing.reloadCertificates(trigger);
        kept.push(existing);
        continue;
      }
      if (existing) {
        // Another address, or TLS switched: the old listener goes, its connections are retired.
        existing.stopAccepting();
        existing.retireConnections();
      }
      const fresh = new Listener(l, next.downstream, lifecycle, systemClock, logger, handlersFor(l.role));
      await open(fresh);
      kept.push(fresh);
    }
    for (const removed of old.values()) {
      removed.stopAccepting();
      removed.retireConnections();
      logger.info({ event: 'listener_removed', listener: removed.name }, 'listener removed; its connections are retired');
    }
    listeners = kept;
    current = next;
    metrics.configReloads.labels('success').inc();
    metrics.configLastReloadSuccessful.set(1);
    logger.info(
      { event: 'config_reloaded', trigger, listeners: next.listeners.length, providers: next.providers.length, models: next.models.length, keys: next.keys.length },
      'configuration reloaded',
    );
  }

  return {
    lifecycle,
    drain: (trigger) => lifecycle.drain(trigger),
    force: (reason) => lifecycle.force(reason),
    reload,
    reloadRejected: () => {
      metrics.configReloads.labels('failure').inc();
      metrics.configLastReloadSuccessful.set(0);
    },
    info,
    metricsJson: () => metrics.json(),
    boundListeners: () => listeners.map((l) => ({ name: l.name, role: l.role, address: bound.get(l) ?? l.configuredAddress })),
  };
}
