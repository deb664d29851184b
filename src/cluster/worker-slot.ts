// One slot of `workers: N` (1..N, stable across restarts): forks its worker process (a cluster
// worker, with a ProcessChannel that holds every message until the worker's `hello`), kills a
// worker that does not serve in time, and restarts one that died with a back-off. What a worker
// says, and what its exit means for the group, is the group's (worker-group.ts). Time comes from
// the injected Clock.
import cluster, { type Worker } from 'node:cluster';
import { MAX_DURATION_SECS } from '../config/schema.ts';
import type { Clock, TimerHandle } from '../lifecycle/clock.ts';
import type { Logger } from '../telemetry/logger.ts';
import { ProcessChannel } from '../process-channel/channel.ts';
import { workerTransport } from '../process-channel/transport.ts';
import { WORKER_SLOT_ENV, type FromWorker, type ToWorker } from './messages.ts';
import { workerTarget, type WorkerTarget } from './worker-target.ts';

export type WorkerState = 'starting' | 'ready' | 'draining' | 'restarting' | 'exited';

/** The supervisor's side of a worker's channel. */
export type WorkerChannel = ProcessChannel<ToWorker, FromWorker>;

/** One worker process, from its fork to its exit (in its slot, or recycled out of it). */
export interface WorkerProcess {
  readonly worker: Worker;
  readonly channel: WorkerChannel;
  /** The worker as the connection dispatch knows it. */
  readonly target: WorkerTarget;
  /** Ends the hold this worker keeps on the supervisor's drain. */
  readonly release: () => void;
}

/** A worker taken out of its slot by recycling: it serves until its replacement does, then drains. */
export interface Retiring {
  readonly slot: number;
  readonly proc: WorkerProcess;
}

/** What a slot needs of its group. */
export interface SlotHooks {
  /** Holds the supervisor's drain open while the worker lives. */
  hold(): () => void;
  /** A worker was forked into the slot: the group listens to its channel. */
  forked(slot: WorkerSlot, proc: WorkerProcess): void;
  /** A worker of this slot exited (the one in it, or one recycled out of it). */
  exited(slot: WorkerSlot, proc: WorkerProcess, code: number | null, signal: string | null): void;
  /** The restart back-off passed. */
  restartDue(slot: WorkerSlot): void;
}

/**
 * How long a worker may take from its fork to serving before it is killed (and the group's start
 * fails, or the worker is restarted with back-off). `SLUICE_WORKER_START_TIMEOUT_SECS` overrides it.
 */
export function startTimeoutMs(): number {
  const secs = Number(process.env.SLUICE_WORKER_START_TIMEOUT_SECS);
  // Bounded as the config's durations are (a longer timer would fire at once).
  return secs > 0 ? Math.min(secs, MAX_DURATION_SECS) * 1000 : 60_000;
}

/** Restart delays after a worker dies while serving: doubling from the first, up to the last. */
export const RESTART_DELAY_MS = { first: 500, max: 30_000 };

export class WorkerSlot {
  readonly index: number;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #hooks: SlotHooks;
  readonly #forkWorker: (env: NodeJS.ProcessEnv) => Worker;
  /** The worker serving (or starting) in the slot. */
  current: WorkerProcess | undefined;
  state: WorkerState = 'exited';
  restarts = 0;
  /** Consecutive deaths without reaching ready, for the restart back-off. */
  failures = 0;
  /** Why the supervisor ended this worker during its start, for the exit line. */
  startProblem: string | undefined;
  /** The worker being recycled while its replacement (now `current`) starts: it drains once that one serves. */
  replacing: Retiring | undefined;
  /** Kills a worker that does not serve in time. */
  #startTimer: TimerHandle | undefined;
  #restartTimer: TimerHandle | undefined;

  /** `forkWorker`: how a worker process is started (tests give a fake one). */
  constructor(index: number, log: Logger, clock: Clock, hooks: SlotHooks, forkWorker: (env: NodeJS.ProcessEnv) => Worker = (env) => cluster.fork(env)) {
    this.index = index;
    this.#log = log;
    this.#clock = clock;
    this.#hooks = hooks;
    this.#forkWorker = forkWorker;
  }

  /** A restart is waiting for its back-off. */
  get restartPending(): boolean {
    return this.#restartTimer !== undefined;
  }

  /** Forks a worker into the slot. */
  fork(): WorkerProcess {
    const worker = this.#forkWorker({ [WORKER_SLOT_ENV]: String(this.index) });
    const channel: WorkerChannel = new ProcessChannel(workerTransport(worker), { holdUntilHello: true, replies: ['reply'], clock: this.#clock });
    const proc: WorkerProcess = { worker, channel, target: workerTarget(channel), release: this.#hooks.hold() };
    this.current = proc;
    this.state = 'starting';
    this.startProblem = undefined;
    this.#hooks.forked(this, proc);
    // A worker that never serves must not leave the group "starting" in silence (a worker on
    // another Node.js, a start that hangs): it is ended, and its exit says why.
    const timeoutMs = startTimeoutMs();
    this.#startTimer = this.#clock.after(timeoutMs, () => {
      this.#startTimer = undefined;
      if (this.current !== proc || this.state !== 'starting') return;
      const answered = channel.hello;
      this.startProblem = answered
        ? `it did not become ready within ${timeoutMs / 1000} s`
        : `it did not answer within ${timeoutMs / 1000} s of being started (is it running the same Node.js and dist/main.js? see its stderr)`;
      this.#log.error(
        { event: 'worker_start_timeout', worker: this.index, worker_pid: worker.process.pid, answered, timeout_secs: timeoutMs / 1000 },
        `worker ${this.index} is being killed: ${this.startProblem}`,
      );
      worker.process.kill('SIGKILL');
    });
    worker.on('exit', (code: number | null, signal: string | null) => this.#hooks.exited(this, proc, code, signal));
    // An IPC error (the worker went away mid-send) shows up as its exit; nothing else to do here.
    worker.on('error', () => {});
    return proc;
  }

  /** The worker serves. */
  served(): void {
    this.#clearStartTimer();
    this.state = 'ready';
    this.failures = 0;
  }

  /** The worker in the slot exited: the slot is empty. */
  vacate(): void {
    this.#clearStartTimer();
    this.current = undefined;
    this.state = 'exited';
  }

  /**
   * The worker died while the group serves (`problem`: why the supervisor ended it during its
   * start): logged, and a new one is forked after the back-off.
   */
  scheduleRestart(wasReady: boolean, problem: string | undefined, exit: { pid: number | undefined; code: number | null; signal: string | null }): void {
    this.failures = wasReady ? 1 : this.failures + 1;
    const delay = Math.min(RESTART_DELAY_MS.max, RESTART_DELAY_MS.first * 2 ** (this.failures - 1));
    this.state = 'restarting';
    this.#log.error(
      {
        event: 'worker_exited',
        worker: this.index,
        worker_pid: exit.pid,
        exit_code: exit.code,
        signal: exit.signal,
        restart_in_ms: delay,
        ...(wasReady ? {} : { during_start: true, reason: problem ?? null }),
      },
      `worker ${this.index} ${wasReady ? 'died' : `died before it was ready${problem ? ` (${problem})` : ''}`}; restarting it in ${delay} ms`,
    );
    this.#restartTimer = this.#clock.after(delay, () => {
      this.#restartTimer = undefined;
      this.#hooks.restartDue(this);
    });
  }

  /** No restart after all (the group stops). */
  cancelRestart(): void {
    if (!this.#restartTimer) return;
    this.#restartTimer.cancel();
    this.#restartTimer = undefined;
    this.state = 'exited';
  }

  /** Sends to the worker in the slot (held until its `hello`); nothing when there is none. */
  send(message: ToWorker): void {
    this.current?.channel.send(message);
  }

  #clearStartTimer(): void {
    this.#startTimer?.cancel();
    this.#startTimer = undefined;
  }
}
