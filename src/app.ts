// Builds a running gateway from a validated config: telemetry, lifecycle, routing, listeners, the
// admin side and the reload transaction over them (E6, E6a). Wiring only: each behaviour lives in
// its own module, and what differs in a supervisor or a worker comes from its `Supervision`.
import type { Config } from './config/schema.ts';
import { Lifecycle } from './lifecycle/lifecycle.ts';
import { systemClock } from './lifecycle/clock.ts';
import { Metrics } from './telemetry/metrics.ts';
import { AccessLog } from './telemetry/access-log.ts';
import type { Loggers } from './telemetry/logger.ts';
import { startTracing } from './telemetry/start-tracing.ts';
import { Gateway, createRouting } from './gateway/gateway.ts';
import { RoutingReload } from './gateway/routing-reload.ts';
import { RealtimeRoute } from './gateway/realtime.ts';
import { NO_CLIENT_KEYS, openProxyMessage, OpenProxyWarnings } from './auth/open-proxy.ts';
import { RetryBudget } from './routing/retry-budget.ts';
import { MemoryStore } from './limits/memory-store.ts';
import { STATE_VALUE } from './routing/targets.ts';
import { Listener, type ListenerHandlers } from './server/listener.ts';
import { ListenerSet } from './server/listener-set.ts';
import { ListenerSockets } from './server/sockets.ts';
import { createRequestHandler } from './server/requests.ts';
import { createUpgradeHandler } from './server/upgrade.ts';
import { oneProcess } from './cluster/supervision.ts';
import { ReloadTransaction, ReloadRefused, type ConfigChange } from './reload/transaction.ts';
import { ReloadReport } from './reload/reload-report.ts';
import { createLimiter, limitStoreErrorLog, limitStoreName } from './wiring/limiter.ts';
import { gatewayReports, routingEvents } from './wiring/gateway-events.ts';
import { drainSettings, ProcessSettings } from './wiring/process-settings.ts';
import { ProcessView } from './wiring/process-view.ts';
import { adminRoutes, createStatusFeed } from './wiring/admin-surface.ts';
import { exitWork } from './wiring/exit-work.ts';
import { processPlace, startLedger } from './wiring/ledger.ts';
import { watchBudgets } from './wiring/budget-alerts.ts';
import { BudgetSpend } from './wiring/budgets-view.ts';
import type { GatewayOptions, PreparedGatewayReload, RunningGateway } from './running-gateway.ts';
import { isDeepStrictEqual } from 'node:util';

export type { ConfigSourceControl, GatewayOptions, HotRestartControl, PreparedGatewayReload, RunningGateway } from './running-gateway.ts';

export async function startGateway(fullConfig: Config, loggers: Loggers, version: string, options: GatewayOptions = {}): Promise<RunningGateway> {
  const logger = loggers.events;
  const clock = systemClock;
  const startedAt = Date.now();
  const { supervision = oneProcess, sockets = new ListenerSockets() } = options;
  // A supervisor serves only the admin listeners and no request (no tracing, memory limits); its workers serve the rest.
  const config = supervision.own(fullConfig);
  /** The whole config serving: what a resource write is checked against. */
  let serving = fullConfig;
  // Each process that serves requests exports its own traces; off, the SDK is never loaded.
  const tracing = await startTracing(config.tracing, logger, version);
  const listeners = new ListenerSet((l, c) => new Listener(l, c.downstream, lifecycle, logger, handlersFor(l.role), sockets), logger);
  let exit: (forced: boolean) => Promise<void>;
  const lifecycle = new Lifecycle({
    clock,
    // The drain's lines are also span events when tracing is on.
    log: tracing ? tracing.lifecycleLog(logger) : logger,
    settings: drainSettings(config),
    hooks: {
      stopAccepting: (include) => listeners.stopAccepting(include),
      shutdown: (forced) => exit(forced),
      // Read when asked: `view` exists by the time a hook runs.
      ...supervision.lifecycleHooks({
        get state() {
          return lifecycle.state;
        },
        info: () => view.info(),
      }),
    },
  });
  let gatewayRef: Gateway | undefined;
  const metrics = new Metrics({
    ...(options.configSource ? { configSource: () => options.configSource!.state() } : {}),
    connections: () => lifecycle.connections.counts(),
    draining: () => lifecycle.draining,
    drainDurationSeconds: () => lifecycle.status.seconds(),
    targets: () =>
      [...(gatewayRef?.routing.targets.all() ?? [])].map((t) => ({
        provider: t.provider,
        model: t.model,
        state: STATE_VALUE[t.state === 'open' && clock.now() >= t.openUntil ? 'half_open' : t.state],
        inFlight: t.inFlight,
      })),
    ...supervision.metricsSources(),
  });
  const limiter = await createLimiter(config, logger, metrics, options.limitStore, clock);
  // The usage ledger (read at start); the retention is run by the process that holds the admin listeners.
  const ledger = await startLedger({ config, logger, metrics, clock, place: processPlace(), prunes: options.announceReady !== false });
  const budgetAlerts = watchBudgets(config, limiter, logger, ledger?.store);
  lifecycle.observeConnections(
    (connection) => metrics.connectionsAccepted.labels(connection.listener).inc(),
    (connection, reason) => metrics.connectionsClosed.labels(connection.listener, reason).inc(),
    (listener) => metrics.connectionsRejected.labels(listener).inc(),
  );
  const reports = gatewayReports(metrics, logger, clock);
  const routingReports = routingEvents(logger);
  const gateway = new Gateway(createRouting(config, routingReports), {
    ...reports,
    decision: lifecycle,
    limiter,
    tracing,
    clock,
    ...(ledger ? { ledgerRefuses: () => ledger.refuses() } : {}),
    budget: new RetryBudget(config.routing.retry_budget_percent, config.routing.min_retry_concurrency),
  });
  gatewayRef = gateway;
  const reloadReport = new ReloadReport(metrics, logger);
  const view = new ProcessView({ version, startedAt, lifecycle, gateway, listeners, metrics, supervision, reloads: reloadReport, options, clock });
  // A supervisor of workers on Redis reads the budgets' spend there (its own store counts nothing).
  const logStoreError = limitStoreErrorLog(logger, clock);
  const budgetSpend = new BudgetSpend(limiter.store, () => supervision.workers > 0, (error) => logStoreError(limitStoreName(serving.limits), { operation: 'budgets' }, error));
  const adminParts = {
    version,
    startedAt,
    lifecycle,
    metrics,
    supervision,
    view,
    logger,
    options,
    usage: { ledger: ledger?.store, budgets: () => budgetSpend.rows(serving) },
  };
  const statusFeed = createStatusFeed(adminParts);
  const accessLog = new AccessLog(config.log.access_log ? loggers.access : undefined, metrics);
  const settings = new ProcessSettings({ lifecycle, accessLog, loggers, createAdmin: adminRoutes(adminParts, statusFeed, () => serving) }, config);
  exit = exitWork({ gateway, configSource: options.configSource, limiter, budgetAlerts, budgetSpend, ledger, tracing, statusFeed, lifecycle, supervision, logger });
  const services = {
    lifecycle,
    metrics,
    accessLog,
    ledger,
    logger,
    healthChecks: () => view.healthChecks(),
    routesFor: (listener: Listener) => (listener.role === 'admin' ? settings.admin : gateway),
  };
  const onRequest = createRequestHandler(services);
  const realtime = new RealtimeRoute({
    routing: () => gateway.routing,
    limiter,
    trackForceEndable: (stream) => lifecycle.trackForceEndable(stream),
    upstreamError: reports.upstreamError,
    reportBug: (error, requestId) => logger.error({ event: 'handler_error', request_id: requestId, err: error }, 'realtime handshake failed'),
    connectTimeoutMs: config.upstream.connect_timeout_ms,
  });
  const onUpgrade = createUpgradeHandler(services, new Map([['/v1/realtime', realtime]]));
  const handlersFor = (role: string): ListenerHandlers => ({ onRequest, onUpgrade: role === 'proxy' ? onUpgrade : undefined });

  if (options.healthCheckFailed) lifecycle.health.fail();
  await listeners.open(config);
  try {
    // The workers' listeners, announced here too so that one process's log tells where all listen.
    for (const l of await supervision.start(fullConfig, lifecycle, sockets, limiter.store)) listeners.logStarted(l, supervision.logFields());
  } catch (error) {
    listeners.stopAccepting();
    throw error;
  }
  lifecycle.markServing();
  // The process that says `ready` (one process, a supervisor) also says which proxy listeners anyone can use.
  const openProxies = options.announceReady !== false ? new OpenProxyWarnings((l) => logger.warn({ event: 'proxy_open', listener: l.name, address: l.address }, openProxyMessage(l))) : undefined;
  if (openProxies) {
    const notReady = config.resources_pending ?? (gateway.routing.keys.closed ? NO_CLIENT_KEYS : undefined);
    logger.info(
      {
        event: 'ready',
        providers: config.providers.map((p) => `${p.name} (${p.type})`),
        models: config.models.length,
        keys: config.keys.length,
        ...supervision.logFields(),
        ...(config.resources_pending !== undefined ? { config_loaded: false } : {}),
        ...(gateway.routing.keys.closed ? { client_keys: false } : {}),
      },
      notReady === undefined ? 'sluice is ready' : `sluice is listening, not ready: ${notReady}`,
    );
    openProxies.check(fullConfig);
  }

  // E6a: every part prepares its share, then all switch or none; the workers' after this process's own.
  const transaction = new ReloadTransaction([new RoutingReload(gateway, config, routingReports), settings, listeners, ...supervision.reloadParticipants()], {
    refuseCommit: () => (lifecycle.draining ? 'the process began draining during the reload' : undefined),
    stepFailed: (participant, step, error) =>
      logger.error({ event: 'config_reload_step_failed', participant, step, err: error }, `the reload's ${step} of ${participant} failed (a bug); the other parts went on`),
  });

  /** Prepares every part's share of `full`; a prepare that fails is reported and rethrown, having undone everything. */
  async function prepareReload(full: Config, trigger: string): Promise<PreparedGatewayReload> {
    const change: ConfigChange = { full, own: supervision.own(full), trigger };
    const prepared = await transaction.prepare(change).catch((error: unknown) => {
      reloadReport.failed(trigger, (error as Error).message, error instanceof ReloadRefused ? error.fields : {});
      throw error;
    });
    return {
      commit: () => {
        const outcome = prepared.commit();
        if (!outcome.ok) {
          reloadReport.failed(trigger, outcome.reason, outcome.fields);
          return false;
        }
        serving = full;
        reloadReport.succeeded(trigger, { listeners: full.listeners.length, providers: change.own.providers.length, models: change.own.models.length, keys: change.own.keys.length });
        openProxies?.check(full);
        return true;
      },
      abort: () => {
        reloadReport.abandoned();
        return prepared.abort();
      },
    };
  }

  return {
    lifecycle,
    metrics,
    drain: (trigger) => lifecycle.drain(trigger),
    force: (reason) => lifecycle.force(reason),
    /**
     * E6/E6a: applies a validated config all or nothing. Models, providers and keys swap atomically
     * between requests; listeners are kept, replaced, added or removed (`ListenerSet`); with workers,
     * every worker prepares its share first, and only when all of them (and this process) have
     * prepared does any of them switch.
     */
    reload: async (full, trigger) => {
      if (!isDeepStrictEqual(full.tracing, serving.tracing)) {
        logger.warn({ event: 'config_reload_partial', setting: 'tracing', reason: 'read at start' }, 'the tracing settings are read at start: this change applies when the gateway is restarted');
      }
      for (const setting of ['ledger', 'budget_alerts'] as const) {
        if (!isDeepStrictEqual(full[setting], serving[setting])) {
          logger.warn({ event: 'config_reload_partial', setting, reason: 'read at start' }, `the ${setting} settings are read at start: this change applies when the gateway is restarted`);
        }
      }
      const prepared = await prepareReload(full, trigger).catch(() => undefined);
      return prepared ? prepared.commit() : false;
    },
    prepareReload,
    reloadRejected: (trigger, reason) => reloadReport.rejected(trigger, reason),
    info: () => view.info(),
    status: () => view.status(),
    metricsJson: () => metrics.json(),
    boundListeners: () => listeners.bound(),
    memoryLimits: limiter.store instanceof MemoryStore ? limiter.store : undefined,
  };
}
