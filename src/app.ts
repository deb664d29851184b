// Builds a running gateway from a validated config: telemetry, lifecycle, routing, listeners.
// Holds the wiring only; each behaviour lives in its own module.
import type { Config } from './config/schema.ts';
import { Lifecycle } from './lifecycle/lifecycle.ts';
import { systemClock } from './lifecycle/clock.ts';
import type { HealthCheck } from './lifecycle/health.ts';
import { Metrics } from './telemetry/metrics.ts';
import { AccessLog } from './telemetry/access-log.ts';
import { flushLogger, type Loggers } from './telemetry/logger.ts';
import { Gateway, createRouting } from './gateway/gateway.ts';
import { AdminRoutes } from './admin/admin.ts';
import { Listener } from './server/listener.ts';
import { createRequestHandler } from './server/requests.ts';
import { createUpgradeHandler } from './server/upgrade.ts';
import { RealtimeRoute } from './gateway/realtime.ts';

export interface RunningGateway {
  readonly lifecycle: Lifecycle;
  readonly listeners: readonly Listener[];
  /** Starts the drain; resolves with the exit code (the same promise on every call). */
  drain(trigger: string): Promise<number>;
  /** L8: a second signal ends the drain now. */
  force(reason: string): void;
  /** New TLS handshakes use the certificates now in the files (SIGHUP). */
  reloadCertificates(trigger: string): void;
}

export async function startGateway(config: Config, loggers: Loggers, version: string): Promise<RunningGateway> {
  const logger = loggers.events;
  let listeners: Listener[] = [];
  let gateway: Gateway | undefined;
  const lifecycle = new Lifecycle({
    clock: systemClock,
    log: logger,
    settings: {
      minDrainSecs: config.shutdown.min_drain_secs,
      maxDrainSecs: config.shutdown.max_drain_secs,
      progressLogSecs: config.shutdown.progress_log_secs,
      freshConnectionGraceSecs: config.downstream.idle_timeout_secs || config.downstream.fresh_connection_grace_secs,
      freshTimeoutSecs: config.downstream.headers_timeout_secs,
      idleTimeoutSecs: config.downstream.idle_timeout_secs,
      drainStrategy: config.shutdown.drain_strategy,
      drainTimeSecs: config.shutdown.drain_time_secs,
      connectionDrainTimeoutSecs: config.downstream.drain_timeout_secs,
    },
    hooks: {
      stopAccepting: (include) => {
        for (const listener of listeners) if (!include || include(listener.name)) listener.stopAccepting();
      },
      shutdown: async () => {
        // L9: pools close once their requests are done (nothing is in flight by now).
        await Promise.allSettled([...(gateway?.routing.providers.values() ?? [])].map((p) => p.close()));
        flushLogger(logger);
      },
    },
  });
  const metrics = new Metrics({
    connections: () => lifecycle.connections.counts(),
    draining: () => lifecycle.draining,
    drainDurationSeconds: () => lifecycle.drainSeconds(),
  });
  lifecycle.observeConnections(
    (connection) => metrics.connectionsAccepted.labels(connection.listener).inc(),
    (connection, reason) => metrics.connectionsClosed.labels(connection.listener, reason).inc(),
  );
  gateway = new Gateway(createRouting(config), {
    decision: lifecycle,
    trackForceEndable: (stream) => lifecycle.trackForceEndable(stream),
    upstreamError: (provider, kind) => metrics.upstreamErrors.labels(provider, kind).inc(),
    reportBug: (error, requestId) => logger.error({ event: 'handler_error', request_id: requestId, err: error }, 'request handler failed'),
  });
  const admin = new AdminRoutes({
    metrics,
    lifecycle,
    version,
    startedAt: Date.now(),
    token: config.admin.token,
    drainTimeSecs: config.shutdown.drain_time_secs ?? config.shutdown.min_drain_secs,
    listeners: () =>
      listeners.map((l) => ({ name: l.name, role: l.role, address: l.configuredAddress, accepting: l.accepting, tls: l.tls, protocols: l.protocols })),
  });
  const accessLog = new AccessLog(config.log.access_log ? loggers.access : undefined, metrics);
  const healthChecks = (): HealthCheck[] => [
    { name: 'config_loaded', ok: true },
    { name: 'listeners_up', ok: listeners.every((l) => l.accepting) },
    { name: 'not_draining', ok: !lifecycle.draining },
    { name: 'healthcheck_ok', ok: !lifecycle.healthCheckFailed },
  ];
  const services = {
    lifecycle,
    metrics,
    accessLog,
    logger,
    healthChecks,
    routesFor: (listener: Listener) => (listener.role === 'admin' ? admin : gateway!),
  };
  const onRequest = createRequestHandler(services);
  const realtime = new RealtimeRoute({
    routing: () => gateway!.routing,
    trackForceEndable: (stream) => lifecycle.trackForceEndable(stream),
    upstreamError: (provider, kind) => metrics.upstreamErrors.labels(provider, kind).inc(),
    connectTimeoutMs: config.upstream.connect_timeout_ms,
  });
  const onUpgrade = createUpgradeHandler(services, new Map([['/v1/realtime', realtime]]));
  for (const l of config.listeners) lifecycle.registerListener(l.name, { drainType: l.drain_type, direction: l.direction, admin: l.role === 'admin' });
  listeners = config.listeners.map(
    (l) => new Listener(l, config.downstream, lifecycle, systemClock, logger, onRequest, l.role === 'proxy' ? onUpgrade : undefined),
  );
  try {
    for (const listener of listeners) {
      const address = await listener.listen();
      logger.info(
        { event: 'listener_started', listener: listener.name, role: listener.role, address: formatAddress(address.address, address.port) },
        `listening on ${formatAddress(address.address, address.port)} (${listener.role})`,
      );
    }
  } catch (error) {
    for (const listener of listeners) listener.stopAccepting();
    throw error;
  }
  lifecycle.markServing();
  logger.info(
    { event: 'ready', providers: config.providers.map((p) => `${p.name} (${p.type})`), models: config.models.length, keys: config.keys.length },
    'sluice is ready',
  );
  return {
    lifecycle,
    listeners,
    drain: (trigger) => lifecycle.drain(trigger),
    reloadCertificates: (trigger) => {
      for (const listener of listeners) listener.reloadCertificates(trigger);
    },
    force: (reason) => lifecycle.force(reason),
  };
}

function formatAddress(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}
