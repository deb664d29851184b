// What a running gateway asks of its supervision: nothing in one process (`oneProcess`), and with
// `workers: N` (`GroupSupervision`, over a `WorkerGroup`) it serves only the admin listeners, passes
// every drain and health-check change on, reports the group's numbers, prepares and settles every
// reload across the workers, and waits for them to exit.
import type { LimitStore } from '../limits/store.ts';
import { withListenersOf, type Config } from '../config/schema.ts';
import type { LifecycleHooks } from '../lifecycle/contracts.ts';
import type { HealthCheck } from '../lifecycle/health.ts';
import { describeWaiting } from '../lifecycle/progress.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { MetricsJson, StateSources } from '../telemetry/metrics.ts';
import type { BoundListener, GroupStatus, ProcessInfo, ProcessStatus } from '../lifecycle/process-info.ts';
import type { SocketProvider } from '../server/sockets.ts';
import { mergeGroupInfo, mergeGroupStatus } from './group-info.ts';
import { ReloadRefused, type ReloadParticipant } from '../reload/transaction.ts';
import type { Supervisor, WorkerGroup } from './worker-group.ts';

/** What supervision sees of the process it runs in (read when asked: the lifecycle is built after the hooks). */
export interface SupervisedProcess {
  /** The lifecycle's state. */
  readonly state: string;
  /** This process's own state, as /server_info reports it. */
  info(): ProcessInfo;
}

export interface Supervision {
  /** How many worker processes serve the proxy listeners (0: this process serves alone). */
  readonly workers: number;
  /** Once the drain is over: 0 when every worker that ended during it exited 0, else the first other code (or 1). */
  readonly exitCode: number;
  /**
   * The part of a config that this process serves itself. A supervisor serves no request: it keeps
   * the admin listeners, traces nothing, and holds its workers' limit counters in memory (with
   * `limits.store: redis` it holds none and opens no client).
   */
  own(config: Config): Config;
  /** The lifecycle hooks that pass commands on and report the drain (none in one process). */
  lifecycleHooks(local: SupervisedProcess): Pick<LifecycleHooks, 'commanded' | 'reportDrain'>;
  /** The metrics of the supervision itself (`sluice_workers`, restarts). */
  metricsSources(): Pick<StateSources, 'workers' | 'workerRestarts' | 'workerRecycles'>;
  /** Fields added to the `ready` line and to the workers' `listener_started` lines. */
  logFields(): object;
  /**
   * Once this process listens: starts the workers, whose listeners' sockets come from `sockets`
   * and whose limit counters live in this process's `limits` (when the config's `limits.store` is
   * memory); resolves with where they listen.
   */
  start(fullConfig: Config, supervisor: Supervisor, sockets: SocketProvider, limits: LimitStore): Promise<BoundListener[]>;
  /** Readiness checks of the supervision (every worker serving). */
  healthChecks(): HealthCheck[];
  /** /server_info: this process's info, with the workers' summed and listed. */
  groupInfo(local: ProcessInfo): Promise<object>;
  /** The status page: this process's status, with the workers' summed and listed. */
  groupStatus(local: ProcessStatus): Promise<GroupStatus>;
  /** The workers' metrics, to sum with this process's. */
  workerMetrics(): Promise<MetricsJson[]>;
  /** E6a: the supervision's parts of a reload, after this process's own (the workers: every one prepares, then all switch or none). */
  reloadParticipants(): ReloadParticipant[];
  /** At shutdown, once this process's own drain is over: waits for the workers to exit. */
  stopped(): Promise<void>;
}

/** One process: it serves everything itself and supervises nothing. */
export const oneProcess: Supervision = {
  workers: 0,
  exitCode: 0,
  own: (config) => config,
  lifecycleHooks: () => ({ commanded: undefined, reportDrain: undefined }),
  metricsSources: () => ({ workers: undefined, workerRestarts: undefined, workerRecycles: undefined }),
  logFields: () => ({}),
  start: async () => [],
  healthChecks: () => [],
  groupInfo: async (local) => local,
  groupStatus: async (local) => ({ ...local, workers: [] }),
  workerMetrics: async () => [],
  reloadParticipants: () => [],
  stopped: async () => {},
};

/**
 * A worker of a group: it is given the group's whole config and serves the proxy listeners of it
 * (its supervisor keeps the admin ones); it supervises nothing.
 */
export const workerShare: Supervision = { ...oneProcess, own: (config) => withListenersOf(config, 'proxy') };

/** How long a supervisor waits for its workers to exit once its own drain is over, before killing them. */
const WORKER_EXIT_GRACE_MS = 5000;

/**
 * This process supervises worker processes that serve the proxy listeners: it keeps the admin
 * listeners, passes every drain and health-check change on, and waits for the workers to exit.
 */
export class GroupSupervision implements Supervision {
  readonly #workers: WorkerGroup;
  readonly #logger: Logger;
  /** The config the group was started with (a reload does not change the number of workers). */
  #started: Config | undefined;

  constructor(workers: WorkerGroup, logger: Logger) {
    this.#workers = workers;
    this.#logger = logger;
  }

  get workers(): number {
    return this.#workers.size;
  }

  get exitCode(): number {
    return this.#workers.exitCode;
  }

  own(config: Config): Config {
    const admin = withListenersOf(config, 'admin');
    return { ...admin, tracing: { ...admin.tracing, enabled: false }, limits: { ...admin.limits, store: 'memory' } };
  }

  lifecycleHooks(local: SupervisedProcess): Pick<LifecycleHooks, 'commanded' | 'reportDrain'> {
    const workers = this.#workers;
    const logger = this.#logger;
    return {
      commanded: (command) => workers.command(command),
      // O1: a supervisor's drain lines tell the group's numbers (its own are the admin listener's).
      // The lifecycle's process_exit waits for the line (the query is bounded by its timeout).
      reportDrain: (report) =>
        workers.query<ProcessInfo>('info').then((replies) => {
          if (report.event === 'drain_progress' && local.state === 'exited') return;
          const group = mergeGroupInfo(local.info(), replies);
          const waitingFor = { ...group.waiting_for!, window_secs_left: report.waiting_for.window_secs_left, workers: report.waiting_for.workers };
          const what = report.event === 'drain_started' ? 'drain started' : 'still draining';
          logger.info(
            { ...report, in_flight: group.in_flight, open_connections: group.open_connections, waiting_for: waitingFor, probe_connections: group.probe_connections },
            `${what}: ${describeWaiting(waitingFor)}`,
          );
        }),
    };
  }

  metricsSources(): Pick<StateSources, 'workers' | 'workerRestarts' | 'workerRecycles'> {
    return { workers: () => this.#workers.counts(), workerRestarts: () => this.#workers.restarts(), workerRecycles: () => this.#workers.recycles() };
  }

  logFields(): object {
    return { workers: this.#workers.size };
  }

  start(fullConfig: Config, supervisor: Supervisor, sockets: SocketProvider, limits: LimitStore): Promise<BoundListener[]> {
    this.#started = fullConfig;
    // The workers share this process's memory counters (Redis: each has its own client).
    return this.#workers.start(fullConfig, supervisor, sockets, fullConfig.limits.store === 'memory' ? limits : undefined);
  }

  healthChecks(): HealthCheck[] {
    return [{ name: 'workers_ready', ok: this.#workers.allReady() }];
  }

  async groupInfo(local: ProcessInfo): Promise<object> {
    return mergeGroupInfo(local, await this.#workers.query<ProcessInfo>('info'));
  }

  async groupStatus(local: ProcessStatus): Promise<GroupStatus> {
    return mergeGroupStatus(local, await this.#workers.query<ProcessStatus>('status'));
  }

  async workerMetrics(): Promise<MetricsJson[]> {
    const replies = await this.#workers.query<MetricsJson>('metrics');
    return replies.flatMap((r) => (r.value ? [r.value] : []));
  }

  reloadParticipants(): ReloadParticipant[] {
    const workers = this.#workers;
    return [
      {
        name: 'workers',
        prepare: async ({ full, trigger }) => {
          if (full.workers !== this.#started?.workers) {
            this.#logger.warn({ event: 'config_reload_partial', setting: 'workers', reason: 'the number of workers changes at the next start' }, 'workers is not changed by a reload');
          }
          const problems = await workers.prepareReload(full, trigger);
          if (problems.length > 0) {
            workers.finishReload(false);
            throw new ReloadRefused(problems.map((p) => `worker ${p.worker}: ${p.reason}`).join('; '), { workers_failed: problems });
          }
          return { commit: () => workers.finishReload(true), abort: () => workers.finishReload(false) };
        },
      },
    ];
  }

  stopped(): Promise<void> {
    return this.#workers.stopped(WORKER_EXIT_GRACE_MS);
  }
}
