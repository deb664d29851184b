// The settings a reload switches in place, as one participant (E6): the drain's settings, the
// connection limit, the listeners' drain scopes, the admin routes (tokens, status page, hosts),
// the access log and the log level.
import type { Config } from '../config/schema.ts';
import type { AdminRoutes } from '../admin/admin.ts';
import type { DrainSettings } from '../lifecycle/contracts.ts';
import type { Lifecycle } from '../lifecycle/lifecycle.ts';
import type { ConfigChange, PreparedChange, ReloadParticipant } from '../reload/transaction.ts';
import type { AccessLog } from '../telemetry/access-log.ts';
import type { Loggers } from '../telemetry/logger.ts';

/** The lifecycle's settings, every field filled: the schema's defaults, and the drain time defaults to the window (applied here once, not in the lifecycle). */
export function drainSettings(config: Config): DrainSettings {
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

export interface SettingsDeps {
  readonly lifecycle: Lifecycle;
  readonly accessLog: AccessLog;
  readonly loggers: Loggers;
  /** The admin routes of a config (built at the prepare: nothing of them serves until the commit). */
  createAdmin(config: Config): AdminRoutes;
}

export class ProcessSettings implements ReloadParticipant {
  readonly name = 'settings';
  readonly #deps: SettingsDeps;
  #admin!: AdminRoutes;

  /** Applies `config`'s settings (the lifecycle was built with its drain settings). */
  constructor(deps: SettingsDeps, config: Config) {
    this.#deps = deps;
    this.#apply(config, deps.createAdmin(config));
  }

  /** The admin listeners' routes of the config serving. */
  get admin(): AdminRoutes {
    return this.#admin;
  }

  prepare({ own: next }: ConfigChange): PreparedChange {
    const admin = this.#deps.createAdmin(next);
    return {
      commit: () => {
        this.#deps.lifecycle.updateSettings(drainSettings(next));
        this.#apply(next, admin);
      },
      abort: () => {},
    };
  }

  #apply(config: Config, admin: AdminRoutes): void {
    const { lifecycle, accessLog, loggers } = this.#deps;
    lifecycle.connections.limit = config.downstream.max_connections;
    for (const l of config.listeners) lifecycle.registerListener(l.name, { drainType: l.drain_type, direction: l.direction, admin: l.role === 'admin' });
    this.#admin = admin;
    accessLog.setLogger(config.log.access_log ? loggers.access : undefined);
    loggers.events.level = loggers.access.level = config.log.level;
  }
}
