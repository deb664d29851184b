// What the status page and `sluice status` are sent each tick (GET /status/events): the process's
// or the group's state, requests per second, where the config comes from and how its last reload
// went, and during a drain its progress and timeline. Built only while someone watches.
import { describeWaiting } from '../lifecycle/progress.ts';
import type { DrainMoment } from '../lifecycle/contracts.ts';
import type { GroupStatus, WorkerStatus } from '../lifecycle/process-info.ts';
import type { LastReload } from '../reload/reload-report.ts';

export type { LastReload };

/** Where the config comes from. */
export interface ConfigFacts {
  source: 'file' | 'embedded' | 'etcd';
  /** The file as named at the start (file and etcd mode: the bootstrap file). */
  file?: string;
  /** etcd mode: the revision of the resources serving. */
  revision?: number;
  /** etcd mode: whether the gateway follows etcd now (its watch is open: a change in etcd arrives). */
  following?: boolean;
  /** etcd mode: since when it follows, or does not (ISO 8601). */
  since?: string;
  /** etcd mode: why it does not follow (the last failure); null while it follows. */
  last_error?: string | null;
  last_reload: LastReload | null;
}

/** One tick of the status stream (`event: status`). */
export interface StatusSnapshot {
  at: string;
  version: string;
  pid: number;
  uptime_secs: number;
  state: string;
  ready: boolean;
  healthcheck_failed: boolean;
  config: ConfigFacts;
  /** Requests (and upgrades) started per second since the previous tick, over the group. */
  requests_per_sec: number;
  in_flight: number;
  in_flight_by: GroupStatus['in_flight_by'];
  open_connections: number;
  connections: GroupStatus['connections'];
  listeners: GroupStatus['listeners'];
  targets: Record<string, unknown>[];
  workers: WorkerStatus[];
  drain: DrainProgress | null;
  open_work: GroupStatus['open_work'];
}

export interface DrainProgress {
  trigger: string;
  strategy: string;
  exit: boolean;
  elapsed_secs: number;
  /** How long the listeners keep accepting at least. */
  window_secs: number;
  waiting_for: NonNullable<GroupStatus['waiting_for']>;
  /** `waiting_for` in words (as in the drain log lines). */
  waiting: string;
  timeline: readonly DrainMoment[];
}

/** The last event of the stream (`event: exited`): the process is exiting now. */
export interface ExitedEvent {
  at: string;
  pid: number;
  exit_code: number;
  /** Why the drain was forced (L8), or null. */
  forced: string | null;
  drain_secs: number;
  timeline: readonly DrainMoment[];
}

export interface SnapshotSources {
  readonly version: string;
  /** When the process started (ms since the epoch). */
  readonly startedAt: number;
  /** The process's or the group's status (a supervisor asks its workers). */
  status(): Promise<GroupStatus>;
  config(): ConfigFacts;
}

/** Builds the ticks; keeps each process's request count from the previous one for the rate. */
export class StatusSnapshots {
  readonly #sources: SnapshotSources;
  /** Requests started by pid at the previous tick (a restarted worker has a new pid). */
  #previous = new Map<number, number>();
  #previousAt = 0;

  constructor(sources: SnapshotSources) {
    this.#sources = sources;
  }

  async next(): Promise<StatusSnapshot> {
    const s = await this.#sources.status();
    const now = Date.now();
    const counts = new Map<number, number>([[s.pid, s.requests_started - s.workers.reduce((sum, w) => sum + (w.requests_started ?? 0), 0)]]);
    for (const w of s.workers) if (w.pid !== null && w.requests_started !== null) counts.set(w.pid, w.requests_started);
    let started = 0;
    for (const [pid, count] of counts) started += Math.max(0, count - (this.#previous.get(pid) ?? count));
    const seconds = (now - this.#previousAt) / 1000;
    const rate = this.#previousAt === 0 || seconds <= 0 ? 0 : Math.round((started / seconds) * 10) / 10;
    this.#previous = counts;
    this.#previousAt = now;
    const drain = s.drain as { trigger: string; strategy: string; exit: boolean; elapsed_secs: number } | null;
    return {
      at: new Date(now).toISOString(),
      version: this.#sources.version,
      pid: s.pid,
      uptime_secs: Math.round((now - this.#sources.startedAt) / 1000),
      state: s.state,
      ready: s.ready,
      healthcheck_failed: s.healthcheck_failed,
      config: this.#sources.config(),
      requests_per_sec: rate,
      in_flight: s.in_flight,
      in_flight_by: s.in_flight_by,
      open_connections: s.open_connections,
      connections: s.connections,
      listeners: s.listeners,
      targets: s.targets ?? [],
      workers: s.workers,
      drain:
        drain && s.waiting_for
          ? {
              trigger: drain.trigger,
              strategy: drain.strategy,
              exit: drain.exit,
              elapsed_secs: drain.elapsed_secs,
              window_secs: s.drain_window_secs,
              waiting_for: s.waiting_for,
              waiting: describeWaiting(s.waiting_for),
              timeline: s.drain_moments,
            }
          : null,
      open_work: s.open_work,
    };
  }
}
