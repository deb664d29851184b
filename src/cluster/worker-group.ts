// The supervisor's side of `workers: N`: one slot per worker (worker-slot.ts: fork, start timeout,
// restart back-off), each worker on its own channel (process-channel/); the group sends each the
// config and every lifecycle command, answers their socket and limit requests (limit-server.ts),
// replaces a worker that passes the `workers_recycle` bounds (recycler.ts: its replacement serves
// first, then it drains), asks across the group, and holds the supervisor's drain open while any
// worker lives.
import type { LimitStore } from '../limits/store.ts';
import cluster from 'node:cluster';
import type { Config } from '../config/schema.ts';
import type { LifecycleCommand } from '../lifecycle/contracts.ts';
import { systemClock, type Clock } from '../lifecycle/clock.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { SocketProvider } from '../server/sockets.ts';
import type { BoundListener } from '../lifecycle/process-info.ts';
import { ConnectionDispatch } from './connection-dispatch.ts';
import { serveLimits } from './limit-server.ts';
import { Recycler, type RecycleInfo } from './recycler.ts';
import { WorkerSlot, type Retiring, type WorkerProcess, type WorkerState } from './worker-slot.ts';
import type { QueryKind, ReloadPrepared, ToWorker } from './messages.ts';
import { askWorkers, type WorkerReply } from './worker-asks.ts';

export type { WorkerState } from './worker-slot.ts';
export type { WorkerReply } from './worker-asks.ts';

export interface WorkerGroupOptions {
  count: number;
  log: Logger;
  /** The timers that decide (start timeout, restart back-off, recycling checks, queries); default the system's. */
  clock?: Clock;
}

/** What the group needs of the supervisor's lifecycle. */
export interface Supervisor {
  /** Keeps the supervisor's drain open while a worker lives. */
  hold(): () => void;
}

/** How long a query waits for a worker's answer. */
const QUERY_TIMEOUT_MS = 1000;
/** How long a reload waits for every worker to prepare before it gives up (E6a). */
const RELOAD_PREPARE_TIMEOUT_MS = 10_000;

/** A worker that could not prepare a reload, and why. */
export interface ReloadProblem {
  worker: number;
  reason: string;
}

export class WorkerGroup {
  readonly #options: WorkerGroupOptions;
  readonly #clock: Clock;
  readonly #slots: WorkerSlot[];
  readonly #recycler: Recycler;
  #config: Config | undefined;
  #supervisor: Supervisor | undefined;
  #healthCheckFailed = false;
  #starting: { resolve: (listeners: BoundListener[]) => void; reject: (error: Error) => void } | undefined;
  #worstExitCode = 0;
  /** The reload prepared by the workers and not yet committed or aborted: the id each worker was asked with. */
  #pendingReload: { config: Config; trigger: string; asked: Map<WorkerProcess, number> } | undefined;
  /** Set by the first drain or force: from then on a worker that exits is not restarted. */
  #stopping = false;
  /** A drain was passed on: the workers that serve are draining (sluice_workers{state}). */
  #draining = false;
  #allExited: (() => void) | undefined;
  #dispatch: ConnectionDispatch | undefined;
  /** The group's limit counters (limits.store memory), which the workers use over IPC. */
  #limits: LimitStore | undefined;

  constructor(options: WorkerGroupOptions) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#recycler = new Recycler(options.log, this.#clock);
    const hooks = {
      hold: () => this.#supervisor!.hold(),
      forked: (slot: WorkerSlot, proc: WorkerProcess) => this.#listen(slot, proc),
      exited: (slot: WorkerSlot, proc: WorkerProcess, code: number | null, signal: string | null) => this.#exited(slot, proc, code, signal),
      restartDue: (slot: WorkerSlot) => {
        if (this.#stopping) {
          slot.state = 'exited';
          return this.#checkAllExited();
        }
        slot.restarts++;
        slot.fork();
      },
    };
    this.#slots = Array.from({ length: options.count }, (_, i) => new WorkerSlot(i + 1, options.log, this.#clock, hooks));
    cluster.setupPrimary({ serialization: 'advanced' });
  }

  get size(): number {
    return this.#slots.length;
  }

  /** Every slot has a worker that is serving. */
  allReady(): boolean {
    return this.#slots.every((s) => s.state === 'ready');
  }

  /** Workers by state, for the metrics. */
  counts(): { state: WorkerState; count: number }[] {
    const counts = new Map<WorkerState, number>();
    for (const slot of this.#slots) {
      const state = slot.state === 'ready' && this.#draining ? 'draining' : slot.state;
      counts.set(state, (counts.get(state) ?? 0) + 1);
    }
    return [...counts].map(([state, count]) => ({ state, count }));
  }

  restarts(): number {
    return this.#slots.reduce((sum, s) => sum + s.restarts, 0);
  }

  /** Workers replaced by `workers_recycle` since the start. */
  recycles(): number {
    return this.#recycler.recycles;
  }

  /** 0 when every worker that ended during the drain exited 0, else the first other code (or 1). */
  get exitCode(): number {
    return this.#worstExitCode;
  }

  /**
   * Forks every worker; resolves once all serve, with where the listeners they share listen. The
   * listening sockets come from `sockets` (this process holds them; the workers get connections).
   * Rejects (and stops the others) if one cannot start.
   */
  start(config: Config, supervisor: Supervisor, sockets: SocketProvider, limits?: LimitStore): Promise<BoundListener[]> {
    this.#limits = limits;
    this.#config = config;
    this.#dispatch = new ConnectionDispatch(sockets);
    this.#recycler.start(() => {
      const bounds = this.#config?.workers_recycle;
      const stopped = () => this.#stopping || this.#draining;
      if (bounds && !stopped() && !this.#pendingReload) void this.#recycler.check(bounds, this.#slots, () => this.query<RecycleInfo>('info'), stopped);
    });
    this.#supervisor = supervisor;
    const started = new Promise<BoundListener[]>((resolve, reject) => (this.#starting = { resolve, reject }));
    for (const slot of this.#slots) slot.fork();
    return started.catch((error: unknown) => {
      this.kill();
      throw error;
    });
  }

  /** Passes a drain, force or health-check change on to every worker. */
  command(command: LifecycleCommand): void {
    if (command.kind === 'healthcheck') this.#healthCheckFailed = command.failed;
    if (command.kind !== 'healthcheck') {
      this.#draining = true;
      this.#stop();
    }
    const message: ToWorker = { type: 'command', command };
    for (const slot of this.#slots) slot.send(message);
    // Recycled workers still serving or draining hear drains and forced ends too.
    for (const retiring of this.#recycler.retiring()) retiring.proc.channel.send(message);
  }

  /**
   * E6a: every running worker prepares the new config (the supervisor validated it first) and holds
   * it; resolves with the workers that could not (none: every one is ready to switch). Follow with
   * `finishReload()`.
   */
  async prepareReload(config: Config, trigger: string): Promise<ReloadProblem[]> {
    const asked = new Map<WorkerProcess, number>();
    this.#pendingReload = { config, trigger, asked };
    const replies = await askWorkers<ReloadPrepared>(this.#slots, (id, proc) => {
      asked.set(proc, id);
      return { type: 'reload_prepare', id, config, trigger };
    }, RELOAD_PREPARE_TIMEOUT_MS);
    return replies.flatMap((r): ReloadProblem[] => {
      if (!r.asked) return [];
      if (!r.value) return [{ worker: r.slot, reason: `did not prepare within ${RELOAD_PREPARE_TIMEOUT_MS} ms` }];
      return r.value.ok ? [] : [{ worker: r.slot, reason: r.value.reason }];
    });
  }

  /**
   * E6a: tells the workers to switch to the config they prepared (`commit`) or to drop it. A worker
   * started meanwhile (it was given the old config) is sent the new one to apply on its own.
   */
  finishReload(commit: boolean): void {
    const pending = this.#pendingReload;
    this.#pendingReload = undefined;
    if (!pending) return;
    if (commit) this.#config = pending.config;
    for (const slot of this.#slots) {
      if (!slot.current) continue;
      const id = pending.asked.get(slot.current);
      if (id !== undefined) slot.send({ type: commit ? 'reload_commit' : 'reload_abort', id });
      else if (commit) slot.send({ type: 'reload', config: pending.config, trigger: pending.trigger });
    }
  }

  /** Asks every running worker; a worker that does not answer in time has `value: undefined`. */
  async query<T>(kind: QueryKind): Promise<WorkerReply<T>[]> {
    return askWorkers<T>(this.#slots, (id) => ({ type: 'query', id, kind }), QUERY_TIMEOUT_MS);
  }

  /** Resolves once no worker runs; workers still running after `killAfterMs` are killed. */
  stopped(killAfterMs: number): Promise<void> {
    this.#stop();
    if (this.#slots.every((s) => !s.current)) return Promise.resolve();
    const timer = this.#clock.after(killAfterMs, () => this.kill());
    return new Promise<void>((resolve) => {
      this.#allExited = () => {
        timer.cancel();
        resolve();
      };
    });
  }

  /** Ends every worker at once (SIGKILL): for a failed start and for stragglers. */
  kill(): void {
    this.#stop();
    for (const slot of this.#slots) slot.current?.worker.process.kill('SIGKILL');
    for (const retiring of this.#recycler.retiring()) retiring.proc.worker.process.kill('SIGKILL');
  }

  #stop(): void {
    this.#stopping = true;
    this.#recycler.stop();
    for (const slot of this.#slots) slot.cancelRestart();
    this.#checkAllExited();
  }

  /**
   * What a worker says. A recycled one still serves and drains, so it confirms the connections it
   * was passed (workerTarget), lets go of its sockets, and admits and settles its requests in the
   * group's limit store (or what they cost would never be charged); one that exited may have done
   * so in its last messages, read after its exit. Only the worker in its slot starts, acquires
   * sockets and answers queries.
   */
  #listen(slot: WorkerSlot, proc: WorkerProcess): void {
    const { channel, target } = proc;
    const inSlot = () => slot.current === proc;
    serveLimits(channel, () => this.#limits);
    // The start goes first, so it arrives before any command held meanwhile.
    channel.on('hello', () => {
      if (inSlot()) channel.send({ type: 'start', config: this.#config!, healthCheckFailed: this.#healthCheckFailed });
    });
    channel.on('ready', (message) => {
      if (inSlot()) this.#ready(slot, message.listeners);
    });
    channel.on('start_failed', (message) => {
      if (!inSlot()) return;
      slot.startProblem = message.message;
      if (this.#starting) {
        this.#starting.reject(new Error(`worker ${slot.index} could not start: ${message.message}`));
        this.#starting = undefined;
      }
    });
    channel.on('socket_acquire', ({ lease, listener, configured }) => {
      if (!inSlot()) return;
      this.#dispatch!.acquire(target, lease, listener, configured).then(
        (bound) => channel.send({ type: 'socket_acquired', lease, bound }),
        (error: NodeJS.ErrnoException) => channel.send({ type: 'socket_acquired', lease, error: error.message, code: error.code }),
      );
    });
    channel.on('socket_serve', (message) => this.#dispatch?.serve(target, message.lease, message.serving));
    channel.on('socket_let_go', (message) => this.#dispatch?.letGo(target, message.lease));
  }

  #ready(slot: WorkerSlot, listeners: BoundListener[]): void {
    slot.served();
    this.#options.log.info({ event: 'worker_ready', worker: slot.index, worker_pid: slot.current?.worker.process.pid }, `worker ${slot.index} ready`);
    // Recycling: the replacement serves; now the worker it replaces drains.
    const old = slot.replacing;
    slot.replacing = undefined;
    if (old) this.#recycler.retire(old, this.#config?.downstream.drain_timeout_secs ?? 5);
    if (this.#starting && this.allReady()) {
      this.#starting.resolve(listeners);
      this.#starting = undefined;
    }
  }

  #exited(slot: WorkerSlot, proc: WorkerProcess, code: number | null, signal: string | null): void {
    // A worker that exited will not answer: no need to wait for it.
    proc.channel.endRequests();
    const retiring = this.#recycler.of(proc.worker);
    if (retiring) return this.#retiredExited(slot, retiring, code, signal);
    if (slot.current !== proc) return;
    const wasReady = slot.state === 'ready';
    const problem = slot.startProblem;
    slot.vacate();
    this.#dispatch?.gone(proc.target);
    const worker = proc.worker;
    const stopping = this.#stopping;
    const clean = code === 0 && signal === null;
    if (stopping) {
      if (!clean && this.#worstExitCode === 0) this.#worstExitCode = code || 1;
      this.#options.log.info({ event: 'worker_exited', worker: slot.index, worker_pid: worker.process.pid, exit_code: code, signal }, `worker ${slot.index} exited`);
    } else if (this.#starting) {
      this.#starting.reject(new Error(`worker ${slot.index} ${problem ? `could not start: ${problem}` : `exited during start (code ${code}, signal ${signal}); its stderr says why`}`));
      this.#starting = undefined;
    } else {
      // Died while serving: the others carry the load, readiness fails until it is back.
      slot.scheduleRestart(wasReady, problem, { pid: worker.process.pid, code, signal });
    }
    // Released after this exit is logged: the last release may end the supervisor's drain, whose
    // process_exit line must come after every worker_exited.
    proc.release();
    this.#checkAllExited();
  }

  #retiredExited(slot: WorkerSlot, old: Retiring, code: number | null, signal: string | null): void {
    this.#dispatch?.gone(old.proc.target);
    // Died before its replacement served: the replacement carries on starting; nothing to drain.
    if (slot.replacing === old) slot.replacing = undefined;
    this.#recycler.exited(old, code, signal);
    old.proc.release();
    this.#checkAllExited();
  }

  #checkAllExited(): void {
    if (this.#slots.every((s) => !s.current && !s.restartPending) && this.#recycler.size === 0) this.#allExited?.();
  }
}
