// Builds a running gateway from a validated config: telemetry, lifecycle, routing, listeners; and
// applies a new config to it, all or nothing (E6, E6a). Holds the wiring only; each behaviour
// lives in its own module.
import type { Config } from './config/schema.ts';
import { Lifecycle } from './lifecycle/lifecycle.ts';
import type { DrainSettings } from './lifecycle/contracts.ts';
import { systemClock } from './lifecycle/clock.ts';
import { ExitSequence, exitBoundMs } from './lifecycle/exit-steps.ts';
import type { HealthCheck } from './lifecycle/health.ts';
import { Metrics, type MetricsJson } from './telemetry/metrics.ts';
import { AccessLog } from './telemetry/access-log.ts';
import { flushLogger, type Loggers } from './telemetry/logger.ts';
import { startTracing } from './telemetry/start-tracing.ts';
import { Gateway, createRouting, type Routing } from './gateway/gateway.ts';
import { NO_CLIENT_KEYS, openProxyMessage, OpenProxyWarnings } from './auth/open-proxy.ts';
import { RetryBudget } from './routing/retry-budget.ts';
import { Limiter } from './limits/limiter.ts';
import { openStore } from './limits/open-store.ts';
import { MemoryStore } from './limits/memory-store.ts';
import { redactUrl, redactUrlsIn } from './config/redact-url.ts';
import type { LimitStore } from './limits/store.ts';
import { STATE_VALUE } from './routing/targets.ts';
import { AdminRoutes } from './admin/admin.ts';
import { StatusFeed } from './admin/status-feed.ts';
import { StatusSnapshots, type ConfigFacts, type ExitedEvent, type LastReload } from './admin/status-snapshot.ts';
import { OPEN_WORK_SHOWN } from './cluster/group-info.ts';
import { Listener, type ListenerHandlers } from './server/listener.ts';
import { ListenerSockets, type SocketProvider } from './server/sockets.ts';
import { createRequestHandler } from './server/requests.ts';
import { createUpgradeHandler } from './server/upgrade.ts';
import { RealtimeRoute } from './gateway/realtime.ts';
import type { BoundListener, ProcessInfo, ProcessStatus } from './lifecycle/process-info.ts';
import { oneProcess, type Supervision } from './cluster/supervision.ts';
import { configStore, type ResourceStore } from './config/store.ts';
import type { SourceState } from './config/etcd-source.ts';
import { isDeepStrictEqual } from 'node:util';

export interface RunningGateway {
  readonly lifecycle: Lifecycle;
  readonly metrics: Metrics;
  /** Starts the drain; resolves with the exit code (the same promise on every call). */
  drain(trigger: string): Promise<number>;
  /** L8: a second signal ends the drain now. */
  force(reason: string): void;
  /**
   * E6/E6a: applies a validated new config without a restart, all or nothing. Resolves false when
   * it could not be applied (already logged and counted; the previous config keeps serving).
   */
  reload(next: Config, trigger: string): Promise<boolean>;
  /**
   * E6a: the first half of `reload()`, for a worker that commits when its supervisor says so. Takes
   * the whole config, like `reload()`: the process prepares its own part of it (`Supervision.own`).
   */
  prepareReload(nextFull: Config, trigger: string): Promise<PreparedReload>;
  /** Logs (`config_reload_failed`) and counts a reload that could not be applied. */
  reloadFailed(reason: string, fields?: object): void;
  /** A new config was refused: the last good one keeps serving. */
  reloadRejected(trigger?: string, reason?: string): void;
  /** This process's state, as GET /server_info reports it. */
  info(): ProcessInfo;
  /** This process's state for the status page (a supervisor asks its workers for it). */
  status(): ProcessStatus;
  /** This process's metrics, for a supervisor to sum. */
  metricsJson(): Promise<MetricsJson>;
  /** Where each listener of this process listens (`host:port`, the port bound when 0 was asked). */
  boundListeners(): BoundListener[];
  /** The limit counters this process holds in memory (limits.store memory; a supervisor's are its workers'), which a hot restart carries. */
  readonly memoryLimits: MemoryStore | undefined;
}

/** A reload whose every fallible step has succeeded: nothing has switched yet. */
export interface PreparedReload {
  /** Switches to the new config. Cannot fail. */
  commit(): void;
  /** Closes what the prepare opened; the previous config serves as before. */
  abort(): Promise<void>;
}

export interface GatewayOptions {
  /** The worker processes this process supervises, if any (default: none, `oneProcess`). */
  supervision?: Supervision;
  /** Log `ready` once serving (default true; a worker leaves that to its supervisor). */
  announceReady?: boolean;
  /** Where the listeners get their sockets (default: sockets of this process's own, bound here). */
  sockets?: SocketProvider;
  /** E4/E7: start with the health check failed (carried over by a hot restart). */
  healthCheckFailed?: boolean;
  /** E7: this process is a generation under a keeper: the admin API can ask for a hot restart. */
  hotRestart?: HotRestartControl;
  /** Where the config comes from (etcd mode): the admin API's writable store, its state for the metrics, and what closes it (L9). */
  configSource?: ConfigSourceControl;
  /** The config file's name, for the admin API's answer in file mode (none: the embedded default). */
  configFile?: string;
  /**
   * Where the limits' counters live, when not where `limits.store` says: a worker's, its
   * supervisor's memory; a generation's, the counters the previous one handed over (E7).
   */
  limitStore?: LimitStore;
}

/** What a running gateway knows of an etcd config source. */
export interface ConfigSourceControl {
  readonly store: ResourceStore;
  state(): SourceState;
  /** L9: stops the source; a snapshot write in progress gets `flushMs`. Resolves false if it did not finish. */
  close(flushMs: number): Promise<boolean>;
}

/** What the admin API and /server_info know of hot restart (E7). */
export interface HotRestartControl {
  info(): object;
  /** Asks the keeper for a hot restart; it reports the result itself. */
  request(trigger: string): void;
}

/** The lifecycle's settings, every field filled: the schema's defaults, and the drain time defaults to the window (applied here once, not in the lifecycle). */
function drainSettings(config: Config): DrainSettings {
  return {
    minDrainSecs: config.shutdown.min_drain_secs,
    maxDrainSecs: config.shutdown.max_drain_secs,
    progressLogSecs: config.shutdown.progress_log_secs,
    freshConnectionGraceSecs: config.downstream.idle_timeout_secs || config.downstream.fresh_connection_grace_secs,
    freshTimeoutSecs: config.downstream.headers_timeout_secs,
    idleTimeoutSecs: config.downstream.idle_timeout_secs,
    drainStrategy: config.shutdown.drain_strategy,
    drainTimeSecs: config.shutdown.drain_time_secs ?? config.shutdown.min_drain_secs,
    resetUpgradedOnProactiveDrain: config.shutdown.reset_upgraded_on_proactive_drain,
    connectionDrainTimeoutSecs: config.downstream.drain_timeout_secs,
  };
}

/**
 * The process's limiter on the store the config names, or the one given (a worker's: its
 * supervisor's memory). A supervisor serves no request: it holds memory counters for its workers
 * and never opens a Redis client. Store errors are counted always and logged once every 10 s.
 */
async function createLimiter(config: Config, logger: Loggers['events'], metrics: Metrics, given: LimitStore | undefined, supervisor: boolean): Promise<Limiter> {
  let lastLogged = -Infinity;
  const where = config.limits.store === 'redis' ? redactUrl(config.limits.redis!.url) : config.limits.store;
  const logError = (fields: object, error: Error) => {
    const now = Date.now();
    if (now - lastLogged < 10_000) return;
    lastLogged = now;
    const reason = redactUrlsIn(error.message);
    logger.warn({ event: 'limit_store_error', store: where, reason, ...fields }, `the limit store (${where}) failed: ${reason}`);
  };
  const store = given ?? (supervisor ? new MemoryStore() : await openStore(config.limits, (error) => logError({ operation: 'connect' }, error)));
  return new Limiter(store, {
    refused: (key, scope, limit) => metrics.rateLimited.add(1, key, scope, limit),
    storeError: (operation, outcome, error) => {
      metrics.limitStoreErrors.labels(operation, outcome).inc();
      logError({ operation, outcome }, error);
    },
    notCommitted: (key, tokens, micros) =>
      logger.error({ event: 'usage_not_committed', key_name: key, tokens, cost_usd: micros / 1e6 }, `usage of key "${key}" could not be written to the limit store before the exit`),
  });
}

export async function startGateway(fullConfig: Config, loggers: Loggers, version: string, options: GatewayOptions = {}): Promise<RunningGateway> {
  const logger = loggers.events;
  const startedAt = Date.now();
  const { supervision = oneProcess, sockets = new ListenerSockets() } = options;
  // A supervisor serves only the admin listeners; its workers serve the rest.
  const config = supervision.own(fullConfig);
  let current = config;
  /** The whole config serving (a supervisor's own has only the admin listeners): what a resource write is checked against. */
  let currentFull = fullConfig;
  let listeners: Listener[] = [];
  // Traces: each process that serves requests exports its own (a supervisor serves none); off, the SDK is never loaded.
  const tracing = supervision.workers > 0 ? undefined : await startTracing(config.tracing, logger, version);
  const lifecycle = new Lifecycle({
    clock: systemClock,
    // The drain's lines are also span events when tracing is on.
    log: tracing ? tracing.lifecycleLog(logger) : logger,
    settings: drainSettings(config),
    hooks: {
      stopAccepting: (include) => {
        for (const listener of listeners) {
          if (include && !include(listener.name)) continue;
          listener.stopAccepting();
        }
      },
      // L9, in the order of lifecycle/exit-steps.ts (what `sluice plan` counts).
      shutdown: (forced) =>
        new ExitSequence()
          .set('upstream_pools', () => Promise.allSettled([...gateway.routing.providers.values()].map((p) => (forced ? p.destroy() : p.close()))))
          .set('snapshot_write', () => closeSource())
          .set('usage_commit', () => limiter.close(exitBoundMs('usage_commit')))
          .set('tracing_flush', () => tracing?.shutdown())
          .set('status_page', () => statusFeed.close(lifecycle.forcedReason))
          .set('workers', () => supervision.stopped())
          .set('logs', () => flushLogger(logger))
          .run(forced, (step, error) => logger.warn({ event: 'exit_step_failed', step, reason: redactUrlsIn(String((error as Error)?.message ?? error)) }, `the exit step ${step} failed; the others went on`)),
      // Read when asked: `lifecycle` and `info` exist by the time a hook runs.
      ...supervision.lifecycleHooks({
        get state() {
          return lifecycle.state;
        },
        info: () => info(),
      }),
    },
  });
  // L9: the etcd client closes; a snapshot write in progress gets its bound once nothing is in flight.
  const closeSource = async () => {
    const source = options.configSource;
    if (!source) return;
    const startedAt = Date.now();
    const boundMs = exitBoundMs('snapshot_write');
    if (!(await source.close(boundMs))) {
      logger.warn({ event: 'snapshot_flush_timeout', waited_ms: Date.now() - startedAt }, `the snapshot cache write did not finish within ${boundMs / 1000} s; exiting without it (the previous snapshot stays whole)`);
    }
  };
  const metrics = new Metrics({
    ...(options.configSource ? { configSource: () => options.configSource!.state() } : {}),
    connections: () => lifecycle.connections.counts(),
    draining: () => lifecycle.draining,
    drainDurationSeconds: () => lifecycle.status.seconds(),
    targets: () =>
      [...(gatewayRef?.routing.targets.all() ?? [])].map((t) => ({
        provider: t.provider,
        model: t.model,
        state: STATE_VALUE[t.state === 'open' && systemClock.now() >= t.openUntil ? 'half_open' : t.state],
        inFlight: t.inFlight,
      })),
    ...supervision.metricsSources(),
  });
  const limiter = await createLimiter(config, logger, metrics, options.limitStore, supervision.workers > 0);
  if (limiter.store.ready && !(await limiter.store.ready(config.limits.redis!.connect_timeout_ms))) {
    logger.warn({ event: 'limit_store_unreachable', store: redactUrl(config.limits.redis!.url), on_store_error: config.limits.on_store_error }, 'Redis for the limits cannot be reached yet; limits.on_store_error applies until it can');
  }
  let gatewayRef: Gateway | undefined;
  // An outage can spend the retry budget on every request: said once a minute per route, counted always.
  const budgetWarned = new Map<string, number>();
  const retryBudgetLog = {
    warn: (route: string) => {
      const now = systemClock.now();
      if ((budgetWarned.get(route) ?? -Infinity) > now - 60_000) return;
      budgetWarned.set(route, now);
      logger.warn({ event: 'retry_budget_exhausted', route }, `route "${route}": the retry budget is spent; failures are returned without retry (sluice_route_retries_total{kind="budget_exhausted"} counts them)`);
    },
  };
  lifecycle.observeConnections(
    (connection) => metrics.connectionsAccepted.labels(connection.listener).inc(),
    (connection, reason) => metrics.connectionsClosed.labels(connection.listener, reason).inc(),
    (listener) => metrics.connectionsRejected.labels(listener).inc(),
  );
  lifecycle.connections.limit = config.downstream.max_connections;
  // A provider's model list that cannot be fetched is logged once, until it answers again.
  const modelListEvents = {
    failed: (provider: string, reason: string) =>
      logger.warn({ event: 'models_list_failed', provider, reason }, `could not fetch the model list of provider "${provider}"; /v1/models lists the exact names only`),
    recovered: (provider: string) => logger.info({ event: 'models_list_recovered', provider }, `the model list of provider "${provider}" is available again`),
  };
  const gateway = new Gateway(createRouting(config, modelListEvents), {
    decision: lifecycle,
    limiter,
    tracing,
    upstreamError: (provider, kind) => metrics.upstreamErrors.labels(provider, kind).inc(),
    reportBug: (error, requestId) => logger.error({ event: 'handler_error', request_id: requestId, err: error }, 'request handler failed'),
    clock: systemClock,
    budget: new RetryBudget(config.routing.retry_budget_percent, config.routing.min_retry_concurrency),
    attempted: (provider, model, outcome) => metrics.attempts.add(1, provider, model, outcome),
    retried: (route, kind) => metrics.retries.add(1, route, kind),
    budgetExhausted: (route) => {
      metrics.retries.add(1, route, 'budget_exhausted');
      retryBudgetLog.warn(route);
    },
    cooldownStarted: (provider, model, failure, ms) =>
      logger.warn({ event: 'target_cooldown', provider, model, failure, cooldown_ms: Math.round(ms) }, `target ${provider}/${model} left out for ${Math.round(ms / 1000)} s after ${failure} failures`),
  });
  gatewayRef = gateway;
  const healthChecks = (): HealthCheck[] => [
    { name: 'config_loaded', ok: current.resources_pending === undefined },
    { name: 'client_keys', ok: !gateway.routing.keys.closed, detail: NO_CLIENT_KEYS },
    { name: 'healthcheck_ok', ok: !lifecycle.health.failed },
    { name: 'listeners_up', ok: listeners.every((l) => l.accepting) },
    { name: 'not_draining', ok: !lifecycle.draining },
    ...supervision.healthChecks(),
  ];
  const info = (): ProcessInfo => ({
    state: lifecycle.state,
    ready: lifecycle.ready() && healthChecks().every((c) => c.ok),
    healthcheck_failed: lifecycle.health.failed,
    in_flight: lifecycle.inFlight,
    open_connections: lifecycle.connections.size,
    connections: lifecycle.connections.counts(),
    drain: lifecycle.status.info() ?? null,
    waiting_for: lifecycle.draining ? lifecycle.status.waitingFor() : null,
    probe_connections: lifecycle.status.probeConnections,
    listeners: listeners.map((l) => ({ name: l.name, role: l.role, address: l.configuredAddress, accepting: l.accepting, tls: l.tls, protocols: l.protocols })),
    requests_started: lifecycle.requestsStarted,
    rss_bytes: process.memoryUsage.rss(),
    targets: [...gateway.routing.targets.all()].map((t) => t.info(systemClock.now())),
  });
  const serverInfo = async (): Promise<object> => {
    const head = { version, uptime_secs: Math.round((Date.now() - startedAt) / 1000), pid: process.pid, hot_restart: options.hotRestart?.info() ?? null, config_source: configFacts() };
    return { ...head, ...(await supervision.groupInfo(info())) };
  };
  const renderMetrics = async (): Promise<string> => metrics.render(await supervision.workerMetrics());
  /** The status page's data: computed only while someone watches (admin/status-feed.ts). */
  const status = (): ProcessStatus => ({
    ...info(),
    pid: process.pid,
    in_flight_by: [...metrics.inFlight.cells()].filter((c) => c.value > 0).map((c) => ({ endpoint: c.labels.endpoint!, protocol: c.labels.protocol!, count: c.value })),
    open_work: lifecycle.status.openWork(OPEN_WORK_SHOWN),
    drain_window_secs: lifecycle.status.windowSecs(),
    drain_moments: lifecycle.status.moments(),
  });
  let lastReload: LastReload | null = null;
  const configFacts = (): ConfigFacts => {
    const source = options.configSource?.state();
    return {
      source: options.configSource ? 'etcd' : options.configFile ? 'file' : 'embedded',
      ...(options.configFile ? { file: options.configFile } : {}),
      ...(source ? { revision: source.revision, ...source.following } : {}),
      last_reload: lastReload,
    };
  };
  const snapshots = new StatusSnapshots({ version, startedAt, status: () => supervision.groupStatus(status()), config: configFacts });
  const statusFeed = new StatusFeed({
    snapshot: () => snapshots.next(),
    exited: (forced): ExitedEvent => ({
      at: new Date().toISOString(),
      pid: process.pid,
      exit_code: forced !== undefined ? 1 : supervision.exitCode,
      forced: forced ?? null,
      drain_secs: Math.round(lifecycle.status.seconds() * 1000) / 1000,
      timeline: lifecycle.status.moments(),
    }),
    intervalMs: () => (lifecycle.draining ? 500 : 1000),
    maxWatchers: 32,
    failed: (error) => logger.error({ event: 'handler_error', err: error }, 'building a status snapshot failed'),
  });
  const createAdmin = (c: Config) =>
    new AdminRoutes({
      metrics,
      lifecycle,
      version,
      tokens: [...(c.admin.token ? [{ name: 'admin', token: c.admin.token }] : []), ...c.admin.tokens],
      resources: options.configSource?.store ?? configStore(c, options.configFile ? 'file' : 'embedded', options.configFile ?? 'embedded default'),
      current: () => currentFull,
      audit: logger,
      drainTimeSecs: c.shutdown.drain_time_secs ?? c.shutdown.min_drain_secs,
      serverInfo,
      renderMetrics,
      hotRestart: options.hotRestart,
      status: c.admin.status_page ? statusFeed : undefined,
      allowedHosts: c.admin.allowed_hosts,
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
    limiter,
    trackForceEndable: (stream) => lifecycle.trackForceEndable(stream),
    upstreamError: (provider, kind) => metrics.upstreamErrors.labels(provider, kind).inc(),
    reportBug: (error, requestId) => logger.error({ event: 'handler_error', request_id: requestId, err: error }, 'realtime handshake failed'),
    connectTimeoutMs: config.upstream.connect_timeout_ms,
  });
  const onUpgrade = createUpgradeHandler(services, new Map([['/v1/realtime', realtime]]));
  const handlersFor = (role: string): ListenerHandlers => ({ onRequest, onUpgrade: role === 'proxy' ? onUpgrade : undefined });
  const registerScopes = (c: Config) => {
    for (const l of c.listeners) lifecycle.registerListener(l.name, { drainType: l.drain_type, direction: l.direction, admin: l.role === 'admin' });
  };
  const logStarted = (l: BoundListener, extra: object = {}) =>
    logger.info({ event: 'listener_started', listener: l.name, role: l.role, address: l.address, ...extra }, `listening on ${l.address} (${l.role})`);
  const open = async (listener: Listener) => {
    await listener.listen();
    logStarted({ name: listener.name, role: listener.role, address: listener.boundAddress });
  };
  const newListener = (l: Config['listeners'][number], c: Config) => new Listener(l, c.downstream, lifecycle, logger, handlersFor(l.role), sockets);

  registerScopes(config);
  if (options.healthCheckFailed) lifecycle.health.fail();
  listeners = config.listeners.map((l) => newListener(l, config));
  try {
    for (const listener of listeners) await open(listener);
    // The workers' listeners, announced here too so that one process's log tells where all listen.
    // The workers share this process's memory store (Redis: each has its own client).
    const groupLimits = config.limits.store === 'memory' ? limiter.store : undefined;
    for (const l of await supervision.start(fullConfig, lifecycle, sockets, groupLimits)) logStarted(l, supervision.logFields());
  } catch (error) {
    for (const listener of listeners) listener.stopAccepting();
    throw error;
  }
  lifecycle.markServing();
  // The process that says `ready` (one process, a supervisor) also says which proxy listeners anyone can use.
  const openProxies = options.announceReady !== false ? new OpenProxyWarnings((l) => logger.warn({ event: 'proxy_open', listener: l.name, address: l.address }, openProxyMessage(l))) : undefined;
  if (options.announceReady !== false) {
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
    openProxies!.check(fullConfig);
  }

  /** Logs and counts a reload that was refused or could not be applied: the previous config keeps serving. */
  const reloadFailed = (reason: string, fields: object = {}) => {
    metrics.configReloads.labels('failure').inc();
    metrics.configLastReloadSuccessful.set(0);
    const trigger = (fields as { trigger?: unknown }).trigger;
    lastReload = { at: new Date().toISOString(), trigger: typeof trigger === 'string' ? trigger : 'unknown', outcome: 'failure', reason };
    logger.error({ event: 'config_reload_failed', reason, ...fields }, `applying the new configuration failed; the previous one keeps serving: ${reason}`);
  };

  // One reload at a time, from its prepare until its commit or abort: a second SIGHUP (or a
  // worker's next prepare) waits for the first to be settled.
  let reloadQueue: Promise<void> = Promise.resolve();
  const reloadTurn = (): Promise<() => void> => {
    let done!: () => void;
    const previous = reloadQueue;
    reloadQueue = new Promise<void>((resolve) => (done = resolve));
    return previous.then(() => done);
  };

  /**
   * E6a: prepares a reload completely without changing what serves: builds the routing (new
   * providers), loads every TLS certificate/key pair the new config names, and binds every new
   * listening socket (its connections held until the commit). Throws, having undone all of that,
   * when a step fails. The returned commit switches everything and cannot fail.
   *
   * A listener replaced on the same address (TLS switched on or off, another role, or the address
   * handed from a removed or renamed listener) takes the old one's socket (`ListenerSockets`): at
   * the commit the old one lets go and the new one serves, so nothing is refused. A listener whose
   * address and TLS-ness stay keeps its socket and only takes new protocol settings
   * (`prepareReconfigure`).
   */
  async function prepareReload(nextFull: Config, trigger: string): Promise<PreparedReload> {
    // A supervisor prepares its admin listeners, a worker its proxy ones; the line counts them all.
    const next = supervision.own(nextFull);
    const release = await reloadTurn();
    const opened: Listener[] = [];
    let routing: Routing | undefined;
    let settled = false;
    const abort = async (): Promise<void> => {
      if (settled) return;
      settled = true;
      try {
        for (const listener of opened) listener.discard();
        // Providers built for the new config only: nothing was routed to them.
        for (const [name, provider] of routing?.providers ?? []) if (gateway.routing.providers.get(name) !== provider) void provider.close();
      } finally {
        release();
      }
    };
    try {
      routing = createRouting(next, modelListEvents, { config: current, routing: gateway.routing });
      const old = new Map(listeners.map((l) => [l.name, l]));
      const reconfigure: ((trigger: string) => void)[] = [];
      const kept: Listener[] = [];
      for (const l of next.listeners) {
        const existing = old.get(l.name);
        // Throws when the TLS material cannot be loaded.
        const step = existing?.prepareReconfigure(l, next.downstream);
        if (existing && step) {
          old.delete(l.name);
          reconfigure.push(step);
          kept.push(existing);
          continue;
        }
        const fresh = newListener(l, next);
        opened.push(fresh);
        kept.push(fresh);
        await fresh.listen({ hold: true });
      }
      // Old listeners not kept (replaced or removed).
      const removed = [...old.values()];
      const nextRouting = routing;
      return {
        abort,
        commit: () => {
          if (settled) throw new Error('this reload was already settled');
          settled = true;
          try {
            const previous = gateway.routing;
            gateway.setRouting(nextRouting);
            for (const [name, provider] of previous.providers) {
              if (nextRouting.providers.get(name) !== provider) void provider.close();
            }
            lifecycle.updateSettings(drainSettings(next));
            lifecycle.connections.limit = next.downstream.max_connections;
            registerScopes(next);
            admin = createAdmin(next);
            accessLog.setLogger(next.log.access_log ? loggers.access : undefined);
            logger.level = loggers.access.level = next.log.level;
            for (const step of reconfigure) step(trigger);
            for (const g of removed) {
              g.stopAccepting();
              g.retireConnections();
              const replaced = next.listeners.some((l) => l.name === g.name);
              if (!replaced) logger.info({ event: 'listener_removed', listener: g.name }, 'listener removed; its connections are retired');
            }
            for (const fresh of opened) {
              fresh.release();
              logStarted({ name: fresh.name, role: fresh.role, address: fresh.boundAddress });
            }
            listeners = kept;
            current = next;
            metrics.configReloads.labels('success').inc();
            metrics.configLastReloadSuccessful.set(1);
            lastReload = { at: new Date().toISOString(), trigger, outcome: 'success' };
            logger.info(
              { event: 'config_reloaded', trigger, listeners: nextFull.listeners.length, providers: next.providers.length, models: next.models.length, keys: next.keys.length },
              'configuration reloaded',
            );
          } finally {
            release();
          }
        },
      };
    } catch (error) {
      await abort();
      throw error;
    }
  }

  /**
   * E6/E6a: applies a validated config all or nothing. Models, providers and keys swap atomically
   * between requests; a listener whose settings changed keeps its listening socket and retires the
   * old settings' connections; a removed listener stops accepting and retires its connections; a
   * removed or changed provider gets no new requests and its pool closes when its last request
   * ends. With workers, every worker prepares its share first, and only when all of them (and this
   * process) have prepared does any of them switch. Resolves false when the reload failed (logged
   * and counted): then nothing changed anywhere.
   */
  async function reload(nextFull: Config, trigger: string): Promise<boolean> {
    supervision.reloadStarting(nextFull);
    if (!isDeepStrictEqual(nextFull.tracing, currentFull.tracing)) {
      logger.warn({ event: 'config_reload_partial', setting: 'tracing', reason: 'read at start' }, 'the tracing settings are read at start: this change applies when the gateway is restarted');
    }
    let prepared: PreparedReload;
    try {
      prepared = await prepareReload(nextFull, trigger);
    } catch (error) {
      reloadFailed((error as Error).message, { trigger });
      return false;
    }
    const problems = await supervision.prepareReload(nextFull, trigger);
    if (problems.length > 0) {
      supervision.finishReload(false);
      await prepared.abort();
      reloadFailed(problems.map((p) => `worker ${p.worker}: ${p.reason}`).join('; '), { trigger, workers_failed: problems });
      return false;
    }
    if (lifecycle.draining) {
      supervision.finishReload(false);
      await prepared.abort();
      reloadFailed('the process began draining during the reload', { trigger });
      return false;
    }
    prepared.commit();
    currentFull = nextFull;
    supervision.finishReload(true);
    openProxies?.check(nextFull);
    return true;
  }

  return {
    lifecycle,
    metrics,
    drain: (trigger) => lifecycle.drain(trigger),
    force: (reason) => lifecycle.force(reason),
    reload,
    prepareReload,
    reloadFailed,
    reloadRejected: (trigger = 'unknown', reason = 'the new configuration is not valid') => {
      metrics.configReloads.labels('failure').inc();
      metrics.configLastReloadSuccessful.set(0);
      lastReload = { at: new Date().toISOString(), trigger, outcome: 'failure', reason };
    },
    info,
    status,
    metricsJson: () => metrics.json(),
    boundListeners: () => listeners.map((l) => ({ name: l.name, role: l.role, address: l.boundAddress })),
    memoryLimits: limiter.store instanceof MemoryStore ? limiter.store : undefined,
  };
}
