// `workers_recycle: { max_rss_mb, max_requests }`: every 2 s the group's serving workers are
// checked against the bounds; one past a bound leaves its slot (it keeps serving: `Retiring`), a
// replacement is forked into the slot, and once that one serves the old worker drains (trigger
// `worker_recycle`). The recycler keeps the retired workers until they exit. Time comes from the
// injected Clock.
import type { Worker } from 'node:cluster';
import type { Config } from '../config/schema.ts';
import type { Clock, TimerHandle } from '../lifecycle/clock.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { Retiring, WorkerSlot } from './worker-slot.ts';
import type { WorkerReply } from './worker-asks.ts';

/** How often the workers' memory and request counts are checked against `workers_recycle`. */
export const RECYCLE_CHECK_MS = 2000;

/** What a worker's `info` tells the recycler. */
export interface RecycleInfo {
  rss_bytes?: number;
  requests_started?: number;
}

/** Why a worker passed the bounds (none: it did not), with its figures for the log line. */
export function recycleReason(bounds: Config['workers_recycle'], info: RecycleInfo): { reason: string; fields: { rss_mb: number; requests: number } } | undefined {
  const rssMb = (info.rss_bytes ?? 0) / (1024 * 1024);
  const requests = info.requests_started ?? 0;
  const reason =
    bounds.max_rss_mb > 0 && rssMb >= bounds.max_rss_mb
      ? `its memory (${Math.round(rssMb)} MiB) passed workers_recycle.max_rss_mb (${bounds.max_rss_mb})`
      : bounds.max_requests > 0 && requests >= bounds.max_requests
        ? `it started ${requests} requests (workers_recycle.max_requests: ${bounds.max_requests})`
        : undefined;
  return reason ? { reason, fields: { rss_mb: Math.round(rssMb), requests } } : undefined;
}

export class Recycler {
  readonly #log: Logger;
  readonly #clock: Clock;
  /** Recycled workers still alive, by process. */
  readonly #retiring = new Map<Worker, Retiring>();
  #recycles = 0;
  #timer: TimerHandle | undefined;

  constructor(log: Logger, clock: Clock) {
    this.#log = log;
    this.#clock = clock;
  }

  /** Workers replaced since the start. */
  get recycles(): number {
    return this.#recycles;
  }

  /** Recycled workers still alive. */
  get size(): number {
    return this.#retiring.size;
  }

  retiring(): IterableIterator<Retiring> {
    return this.#retiring.values();
  }

  /** The recycled worker of this process, if it is one. */
  of(worker: Worker): Retiring | undefined {
    return this.#retiring.get(worker);
  }

  /** Runs `check` every RECYCLE_CHECK_MS until `stop()`. */
  start(check: () => void): void {
    this.#timer = this.#clock.every(RECYCLE_CHECK_MS, check);
  }

  stop(): void {
    this.#timer?.cancel();
    this.#timer = undefined;
  }

  /**
   * Asks the workers (`query`) and replaces each serving one past `bounds`, unless the group has
   * `stopped` meanwhile (it stops or drains).
   */
  async check(bounds: Config['workers_recycle'], slots: readonly WorkerSlot[], query: () => Promise<WorkerReply<RecycleInfo>[]>, stopped: () => boolean): Promise<void> {
    if (bounds.max_rss_mb <= 0 && bounds.max_requests <= 0) return;
    for (const reply of await query()) {
      const slot = slots[reply.slot - 1];
      if (!slot || !reply.value || slot.state !== 'ready' || slot.replacing || stopped()) continue;
      const found = recycleReason(bounds, reply.value);
      if (found && this.take(slot, found.reason, found.fields)) slot.fork();
    }
  }

  /**
   * Takes the slot's worker out (it keeps serving) for its replacement, which the caller forks into
   * the slot; false when the slot has no worker.
   */
  take(slot: WorkerSlot, reason: string, fields: object): boolean {
    const proc = slot.current;
    if (!proc) return false;
    const old: Retiring = { slot: slot.index, proc };
    this.#retiring.set(proc.worker, old);
    this.#recycles++;
    this.#log.info(
      { event: 'worker_recycling', worker: slot.index, worker_pid: proc.worker.process.pid, reason, ...fields },
      `worker ${slot.index} is being replaced: ${reason}; it serves until its replacement does`,
    );
    slot.replacing = old;
    slot.current = undefined;
    return true;
  }

  /** The replacement serves: the recycled worker stops taking connections and drains (its work in flight finishes). */
  retire(old: Retiring, keepIdleSecs: number): void {
    this.#log.info({ event: 'worker_recycled', worker: old.slot, worker_pid: old.proc.worker.process.pid }, `worker ${old.slot}'s replacement serves; the old process drains`);
    old.proc.channel.send({ type: 'command', command: { kind: 'drain', trigger: 'worker_recycle', options: { graceful: false, keepIdleSecs } } });
  }

  /** A recycled worker exited. */
  exited(old: Retiring, code: number | null, signal: string | null): void {
    this.#retiring.delete(old.proc.worker);
    this.#log.info(
      { event: 'worker_exited', worker: old.slot, worker_pid: old.proc.worker.process.pid, exit_code: code, signal, recycled: true },
      `worker ${old.slot} (recycled) exited`,
    );
  }
}
