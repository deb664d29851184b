// What one process tells of itself: the readiness checks, /server_info, the status page's data and
// where its config comes from. A supervisor adds its workers' (`Supervision`).
import type { ConfigFacts } from '../admin/status-snapshot.ts';
import { NO_CLIENT_KEYS } from '../auth/open-proxy.ts';
import { OPEN_WORK_SHOWN } from '../cluster/group-info.ts';
import type { Supervision } from '../cluster/supervision.ts';
import type { Gateway } from '../gateway/gateway.ts';
import type { Clock } from '../lifecycle/clock.ts';
import type { HealthCheck } from '../lifecycle/health.ts';
import type { Lifecycle } from '../lifecycle/lifecycle.ts';
import type { ProcessInfo, ProcessStatus } from '../lifecycle/process-info.ts';
import type { ReloadReport } from '../reload/reload-report.ts';
import type { GatewayOptions } from '../running-gateway.ts';
import type { ListenerSet } from '../server/listener-set.ts';
import type { Metrics } from '../telemetry/metrics.ts';

export interface ViewedParts {
  readonly version: string;
  /** When the process started (wall clock, ms). */
  readonly startedAt: number;
  readonly lifecycle: Lifecycle;
  readonly gateway: Gateway;
  readonly listeners: ListenerSet;
  readonly metrics: Metrics;
  readonly supervision: Supervision;
  readonly reloads: ReloadReport;
  readonly options: Pick<GatewayOptions, 'hotRestart' | 'configSource' | 'configFile'>;
  readonly clock: Clock;
}

export class ProcessView {
  readonly #p: ViewedParts;

  constructor(parts: ViewedParts) {
    this.#p = parts;
  }

  healthChecks(): HealthCheck[] {
    const { gateway, lifecycle, listeners, supervision } = this.#p;
    return [
      { name: 'config_loaded', ok: gateway.routing.pending === undefined },
      { name: 'client_keys', ok: !gateway.routing.keys.closed, detail: NO_CLIENT_KEYS },
      { name: 'healthcheck_ok', ok: !lifecycle.health.failed },
      { name: 'listeners_up', ok: listeners.all.every((l) => l.accepting) },
      { name: 'not_draining', ok: !lifecycle.draining },
      ...supervision.healthChecks(),
    ];
  }

  /** This process's state, as GET /server_info reports it. */
  info(): ProcessInfo {
    const { lifecycle, listeners, gateway, clock } = this.#p;
    return {
      state: lifecycle.state,
      ready: lifecycle.ready() && this.healthChecks().every((c) => c.ok),
      healthcheck_failed: lifecycle.health.failed,
      in_flight: lifecycle.inFlight,
      open_connections: lifecycle.connections.size,
      connections: lifecycle.connections.counts(),
      drain: lifecycle.status.info() ?? null,
      waiting_for: lifecycle.draining ? lifecycle.status.waitingFor() : null,
      probe_connections: lifecycle.status.probeConnections,
      listeners: listeners.all.map((l) => ({ name: l.name, role: l.role, address: l.configuredAddress, accepting: l.accepting, tls: l.tls, protocols: l.protocols })),
      requests_started: lifecycle.requestsStarted,
      rss_bytes: process.memoryUsage.rss(),
      targets: [...gateway.routing.targets.all()].map((t) => t.info(clock.now())),
    };
  }

  /** GET /server_info: the process, its hot restart, its config source, and its workers'. */
  async serverInfo(): Promise<object> {
    const { version, startedAt, options, supervision } = this.#p;
    const head = { version, uptime_secs: Math.round((Date.now() - startedAt) / 1000), pid: process.pid, hot_restart: options.hotRestart?.info() ?? null, config_source: this.configFacts() };
    return { ...head, ...(await supervision.groupInfo(this.info())) };
  }

  /** The status page's data: computed only while someone watches (admin/status-feed.ts). */
  status(): ProcessStatus {
    const { lifecycle, metrics } = this.#p;
    return {
      ...this.info(),
      pid: process.pid,
      in_flight_by: [...metrics.inFlight.cells()].filter((c) => c.value > 0).map((c) => ({ endpoint: c.labels.endpoint!, protocol: c.labels.protocol!, count: c.value })),
      open_work: lifecycle.status.openWork(OPEN_WORK_SHOWN),
      drain_window_secs: lifecycle.status.windowSecs(),
      drain_moments: lifecycle.status.moments(),
    };
  }

  /** Where the config comes from, and the last reload. */
  configFacts(): ConfigFacts {
    const { options, reloads } = this.#p;
    const source = options.configSource?.state();
    return {
      source: options.configSource ? 'etcd' : options.configFile ? 'file' : 'embedded',
      ...(options.configFile ? { file: options.configFile } : {}),
      ...(source ? { revision: source.revision, ...source.following } : {}),
      last_reload: reloads.last,
    };
  }
}
