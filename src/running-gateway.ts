// What a started gateway offers the process that started it (`cli.ts`, a worker, a generation under
// hot restart), and what that process may give it: types only, so that those import no wiring.
import type { Config } from './config/schema.ts';
import type { Lifecycle } from './lifecycle/lifecycle.ts';
import type { BoundListener, ProcessInfo, ProcessStatus } from './lifecycle/process-info.ts';
import type { Metrics, MetricsJson } from './telemetry/metrics.ts';
import type { MemoryStore } from './limits/memory-store.ts';
import type { LimitStore } from './limits/store.ts';
import type { Supervision } from './cluster/supervision.ts';
import type { SocketProvider } from './server/sockets.ts';
import type { ResourceStore } from './config/store.ts';
import type { SourceState } from './config/etcd-source.ts';

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
  prepareReload(nextFull: Config, trigger: string): Promise<PreparedGatewayReload>;
  /** A new config was refused (not valid): counted and shown; the last good one keeps serving. */
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

/** A reload every part of the process has prepared (a failed prepare was reported): nothing has switched yet. */
export interface PreparedGatewayReload {
  /**
   * Switches to the new config, unless the process began draining since the prepare; reports how
   * it went (`config_reloaded` or `config_reload_failed`) and resolves whether it switched.
   */
  commit(): boolean;
  /** Another process of the group could not prepare it: undoes the prepare (`config_reload_abandoned`). */
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

