// The admin listeners' side of a process: the status page's feed (snapshots while someone watches,
// and the `exited` event) and the admin routes of a config.
import type { Config } from '../config/schema.ts';
import { AdminRoutes } from '../admin/admin.ts';
import { StatusFeed } from '../admin/status-feed.ts';
import { StatusSnapshots, type ExitedEvent } from '../admin/status-snapshot.ts';
import type { Supervision } from '../cluster/supervision.ts';
import { configStore } from '../config/store.ts';
import type { Lifecycle } from '../lifecycle/lifecycle.ts';
import type { GatewayOptions } from '../running-gateway.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { Metrics } from '../telemetry/metrics.ts';
import type { ProcessView } from './process-view.ts';
import type { UsageSource } from '../admin/usage-api.ts';

export interface AdminParts {
  readonly version: string;
  readonly startedAt: number;
  readonly lifecycle: Lifecycle;
  readonly metrics: Metrics;
  readonly supervision: Supervision;
  readonly view: ProcessView;
  readonly logger: Logger;
  readonly options: Pick<GatewayOptions, 'hotRestart' | 'configSource' | 'configFile'>;
  /** The usage ledger's routes read this. */
  readonly usage: UsageSource;
}

/** The status page's feed: the group's status every second (every half second while draining). */
export function createStatusFeed({ version, startedAt, lifecycle, supervision, view, logger }: AdminParts): StatusFeed {
  const snapshots = new StatusSnapshots({ version, startedAt, status: () => supervision.groupStatus(view.status()), config: () => view.configFacts() });
  return new StatusFeed({
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
}

/** The admin routes of a config; `serving` is the whole config serving (what a resource write is checked against). */
export function adminRoutes(parts: AdminParts, statusFeed: StatusFeed, serving: () => Config): (config: Config) => AdminRoutes {
  const { metrics, lifecycle, version, view, supervision, logger, options, usage } = parts;
  const renderMetrics = async (): Promise<string> => metrics.render(await supervision.workerMetrics());
  return (c) =>
    new AdminRoutes({
      metrics,
      lifecycle,
      version,
      tokens: [...(c.admin.token ? [{ name: 'admin', token: c.admin.token, scope: 'write' as const }] : []), ...c.admin.tokens],
      resources: options.configSource?.store ?? configStore(c, options.configFile ? 'file' : 'embedded', options.configFile ?? 'embedded default'),
      current: serving,
      audit: logger,
      drainTimeSecs: c.shutdown.drain_time_secs ?? c.shutdown.min_drain_secs,
      serverInfo: () => view.serverInfo(),
      renderMetrics,
      hotRestart: options.hotRestart,
      status: c.admin.status_page ? statusFeed : undefined,
      allowedHosts: c.admin.allowed_hosts,
      usage,
    });
}
