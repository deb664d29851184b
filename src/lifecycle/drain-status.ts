// What the drain shows while it runs (O1): what it waits for, the streams and sessions still open,
// the drain in progress as the admin API reports it, and its moments (the status page's timeline).
// Views over the lifecycle's numbers, and the lines that report them; they decide nothing.
import type { DrainInfo, DrainMoment, DrainReport, DrainSettings, DrainView, ForceEndable, LifecycleHooks, LifecycleLog, OpenWork } from './contracts.ts';
import { describeWaiting, type WaitingFor } from './progress.ts';

/** What the views read of a drain in progress (drain-run.ts's DrainRun). */
export interface RunFacts {
  readonly plan: DrainPlan;
  seconds(): number;
  windowSecs(): number;
  windowSecsLeft(): number;
  moments(): readonly DrainMoment[];
}

/** What the views read of the lifecycle. */
export interface DrainStatusSource {
  inFlight(): number;
  /** Worker processes still running (the supervisor's holds). */
  workers(): number;
  run(): RunFacts | undefined;
  /** What a forced drain would end: the requests, streams and sessions in flight. */
  open(): Iterable<ForceEndable>;
  settings(): DrainSettings;
  /** Health-probe connections accepted during the drain. */
  probes(): number;
}

/** The drain as the admin API, the status page and the drain lines show it. */
export class DrainStatus implements DrainView {
  readonly #source: DrainStatusSource;

  constructor(source: DrainStatusSource) {
    this.#source = source;
  }

  /** Seconds since the drain began, 0 before. */
  seconds(): number {
    return this.#source.run()?.seconds() ?? 0;
  }

  /** The drain's window in seconds (0 before a drain, and for a drain that stopped accepting at once). */
  windowSecs(): number {
    const run = this.#source.run();
    return run ? round(run.windowSecs()) : 0;
  }

  /** What the drain waits for now (O1): the window, and the work in flight by kind. */
  waitingFor(): WaitingFor {
    const s = this.#source;
    return waitingFor(s.inFlight(), s.workers(), s.run()?.windowSecsLeft() ?? 0, s.open());
  }

  /** Health-probe connections accepted during the drain (counted, not logged one by one). */
  get probeConnections(): number {
    return this.#source.probes();
  }

  /** What the admin API reports about the drain in progress, if any. */
  info(): DrainInfo | undefined {
    const run = this.#source.run();
    return run && drainInfo(run.plan, run.seconds(), this.#source.settings());
  }

  /** The drain's moments so far (empty before a drain). */
  moments(): readonly DrainMoment[] {
    return this.#source.run()?.moments() ?? [];
  }

  /** The streams and sessions in flight (`total`) and the `limit` oldest of them, oldest first. */
  openWork(limit: number): { total: number; oldest: OpenWork[] } {
    return openWork(this.#source.open(), limit);
  }
}

/** The drain's plan, as the lifecycle keeps it. */
export interface DrainPlan {
  trigger: string;
  startedAt: number;
  graceful: boolean;
  inboundOnly: boolean;
  exit: boolean;
  includeModifyOnly: boolean;
  keepIdleSecs: number;
}

/** What the drain waits for now: the window left, and the work in flight by kind. */
export function waitingFor(inFlight: number, workers: number, windowSecsLeft: number, open: Iterable<ForceEndable>): WaitingFor {
  let streams = 0;
  let sessions = 0;
  for (const f of open) {
    const kind = f.kind?.();
    if (kind === 'stream') streams++;
    else if (kind === 'session') sessions++;
  }
  return {
    window_secs_left: Math.round(windowSecsLeft * 10) / 10,
    requests: Math.max(0, inFlight - streams - sessions),
    streams,
    sessions,
    workers,
  };
}

/**
 * The streams and sessions in flight (`total`) and the `limit` oldest of them, oldest first: what
 * the status page lists. Walks what is in flight, so it is read only when someone watches.
 */
export function openWork(open: Iterable<ForceEndable>, limit: number): { total: number; oldest: OpenWork[] } {
  const work: OpenWork[] = [];
  for (const f of open) {
    const kind = f.kind?.();
    if ((kind !== 'stream' && kind !== 'session') || !f.exchange) continue;
    const e = f.exchange;
    work.push({ kind, endpoint: e.endpoint, model: e.model.slice(0, 200), protocol: e.protocol, listener: e.listener, age_secs: round(e.durationSeconds()) });
  }
  work.sort((a, b) => b.age_secs - a.age_secs);
  return { total: work.length, oldest: work.slice(0, limit) };
}

/** The drain in progress, as the admin API reports it. */
export function drainInfo(plan: DrainPlan, elapsedSecs: number, settings: DrainSettings): DrainInfo {
  return {
    trigger: plan.trigger,
    graceful: plan.graceful,
    inbound_only: plan.inboundOnly,
    exit: plan.exit,
    elapsed_secs: round(elapsedSecs),
    drain_time_secs: settings.drainTimeSecs,
    strategy: settings.drainStrategy,
  };
}

/** The drain's moments, each recorded once, in seconds from its start. */
export class DrainMoments {
  readonly #moments: DrainMoment[] = [];

  record(event: DrainMoment['event'], atSecs: number): void {
    if (this.#moments.some((m) => m.event === event)) return;
    this.#moments.push({ event, at_secs: round(atSecs) });
  }

  list(): readonly DrainMoment[] {
    return this.#moments;
  }
}

export function round(value: number): number {
  return Math.round(value * 1000) / 1000;
}

/**
 * The drain's `drain_started` and `drain_progress` lines (O1): logged, or handed to the
 * `reportDrain` hook (a supervisor adds its workers' numbers first, which takes a moment).
 */
export class DrainReports {
  readonly #log: LifecycleLog;
  readonly #hooks: LifecycleHooks;
  /** Lines the hook is still writing. */
  readonly #pending = new Set<Promise<void>>();

  constructor(log: LifecycleLog, hooks: LifecycleHooks) {
    this.#log = log;
    this.#hooks = hooks;
  }

  /** A drain line: the message says what the drain waits for, in words. */
  report(fields: DrainReport, what: string): void {
    const message = `${what}: ${describeWaiting(fields.waiting_for)}`;
    if (!this.#hooks.reportDrain) return this.#log.info(fields, message);
    const written = this.#hooks.reportDrain(fields, message);
    if (!written) return;
    this.#pending.add(written);
    const done = () => void this.#pending.delete(written);
    written.then(done, done);
  }

  /** Runs `fn` once every line still being written is written: `process_exit` stays the last line. */
  afterPending(fn: () => void): void {
    if (this.#pending.size === 0) fn();
    else void Promise.allSettled([...this.#pending]).then(fn);
  }
}
