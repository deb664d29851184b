// The supervisor's side of `workers: N`: forks one worker process per slot, sends each the config
// and every lifecycle command, restarts a worker that dies while serving, replaces a worker that
// passes the `workers_recycle` bounds (its replacement serves first, then it drains), answers
// queries across the group, and holds the supervisor's drain open while any worker lives.
import type { LimitStore } from '../limits/store.ts';
import cluster, { type Worker } from 'node:cluster';
import { MAX_DURATION_SECS, type Config } from '../config/schema.ts';
import type { LifecycleCommand } from '../lifecycle/contracts.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { SocketProvider } from '../server/sockets.ts';
import { ConnectionDispatch } from './connection-dispatch.ts';
import { answerLimit } from './supervisor-store.ts';
import { workerTarget, type WorkerTarget } from './worker-target.ts';
import type { BoundListener } from '../lifecycle/process-info.ts';
import { WORKER_SLOT_ENV, isMessage, type FromWorker, type QueryKind, type ReloadPrepared, type ToWorker } from './messages.ts';

export type WorkerState = 'starting' | 'ready' | 'draining' | 'restarting' | 'exited';

export interface WorkerReply<T> {
  slot: number;
  pid: number | undefined;
  state: WorkerState;
  /** Undefined when the worker did not answer in time (or is not running). */
  value: T | undefined;
}

export interface WorkerGroupOptions {
  count: number;
  log: Logger;
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
/**
 * How long a worker may take from its fork to serving before it is killed (and the group's start
 * fails, or the worker is restarted with back-off). `SLUICE_WORKER_START_TIMEOUT_SECS` overrides it.
 */
function startTimeoutMs(): number {
  const secs = Number(process.env.SLUICE_WORKER_START_TIMEOUT_SECS);
  // Bounded as the config's durations are (a longer timer would fire at once).
  return secs > 0 ? Math.min(secs, MAX_DURATION_SECS) * 1000 : 60_000;
}
/** Restart delays after a worker dies while serving: doubling from the first, up to the last. */
const RESTART_DELAY_MS = { first: 500, max: 30_000 };

interface Slot {
  readonly index: number;
  worker: Worker | undefined;
  state: WorkerState;
  release: (() => void) | undefined;
  restarts: number;
  /** Consecutive deaths without reaching ready, for the restart back-off. */
  failures: number;
  restartTimer: NodeJS.Timeout | undefined;
  /** The worker said `hello`: messages may be sent. Until then they wait in `queued`. */
  hello: boolean;
  queued: ToWorker[];
  /** Kills a worker that does not serve in time. */
  startTimer: NodeJS.Timeout | undefined;
  /** Why the supervisor ended this worker during its start, for the exit line. */
  startProblem: string | undefined;
  /** The worker as the connection dispatch knows it (one per process). */
  target: WorkerTarget | undefined;
  /** The worker being recycled while its replacement (now `worker`) starts: it drains once that one serves. */
  replacing: Retiring | undefined;
}

/** A worker taken out of its slot by recycling: it serves until its replacement does, then drains. */
interface Retiring {
  readonly slot: number;
  readonly worker: Worker;
  readonly target: WorkerTarget | undefined;
  readonly release: (() => void) | undefined;
}

/** How often the workers' memory and request counts are checked against `workers_recycle`. */
const RECYCLE_CHECK_MS = 2000;

export class WorkerGroup {
  readonly #options: WorkerGroupOptions;
  readonly #slots: Slot[];
  #config: Config | undefined;
  #supervisor: Supervisor | undefined;
  #healthCheckFailed = false;
  #nextQuery = 0;
  /** Pending queries by id: called with a worker's answer, or with nothing when a worker exits. */
  readonly #queries = new Map<number, (slot?: number, value?: unknown) => void>();
  #starting: { resolve: (listeners: BoundListener[]) => void; reject: (error: Error) => void } | undefined;
  #worstExitCode = 0;
  /** The reload prepared by the workers and not yet committed or aborted. */
  #pendingReload: { id: number; config: Config; trigger: string; asked: Set<Worker> } | undefined;
  /** Set by the first drain or force: from then on a worker that exits is not restarted. */
  #stopping = false;
  /** A drain was passed on: the workers that serve are draining (sluice_workers{state}). */
  #draining = false;
  #allExited: (() => void) | undefined;
  #dispatch: ConnectionDispatch | undefined;
  /** The group's limit counters (limits.store memory), which the workers use over IPC. */
  #limits: LimitStore | undefined;
  /** Recycled workers still alive, by process. */
  readonly #retiring = new Map<Worker, Retiring>();
  #recycles = 0;
  #recycleTimer: NodeJS.Timeout | undefined;

  constructor(options: WorkerGroupOptions) {
    this.#options = options;
    this.#slots = Array.from({ length: options.count }, (_, i) => ({
      index: i + 1,
      worker: undefined,
      state: 'exited' as WorkerState,
      release: undefined,
      restarts: 0,
      failures: 0,
      restartTimer: undefined,
      hello: false,
      queued: [],
      startTimer: undefined,
      startProblem: undefined,
      target: undefined,
      replacing: undefined,
    }));
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
    return this.#recycles;
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
    this.#recycleTimer = setInterval(() => void this.#checkRecycling(), RECYCLE_CHECK_MS);
    this.#recycleTimer.unref();
    this.#supervisor = supervisor;
    const started = new Promise<BoundListener[]>((resolve, reject) => (this.#starting = { resolve, reject }));
    for (const slot of this.#slots) this.#fork(slot);
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
    this.#broadcast({ type: 'command', command });
  }

  /**
   * E6a: every running worker prepares the new config (the supervisor validated it first) and holds
   * it; resolves with the workers that could not (none: every one is ready to switch). Follow with
   * `finishReload()`.
   */
  async prepareReload(config: Config, trigger: string): Promise<ReloadProblem[]> {
    const asked = new Set<Worker>();
    const replies = await this.#ask<ReloadPrepared>(
      (id) => {
        this.#pendingReload = { id, config, trigger, asked };
        return { type: 'reload_prepare', id, config, trigger };
      },
      RELOAD_PREPARE_TIMEOUT_MS,
      (slot) => {
        if (slot.worker) asked.add(slot.worker);
      },
    );
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
      if (!slot.worker) continue;
      if (pending.asked.has(slot.worker)) this.#send(slot, { type: commit ? 'reload_commit' : 'reload_abort', id: pending.id });
      else if (commit) this.#send(slot, { type: 'reload', config: pending.config, trigger: pending.trigger });
    }
  }

  /** Asks every running worker; a worker that does not answer in time has `value: undefined`. */
  async query<T>(kind: QueryKind): Promise<WorkerReply<T>[]> {
    return this.#ask<T>((id) => ({ type: 'query', id, kind }), QUERY_TIMEOUT_MS);
  }

  #ask<T>(message: (id: number) => ToWorker, timeoutMs: number, onAsk?: (slot: Slot) => void): Promise<(WorkerReply<T> & { asked: boolean })[]> {
    const replies = new Map<number, unknown>();
    const asked = this.#slots.filter((s) => s.worker && s.worker.isConnected() && (s.state === 'ready' || s.state === 'starting'));
    const id = this.#nextQuery++;
    const sent = message(id);
    for (const slot of asked) onAsk?.(slot);
    return new Promise((resolve) => {
      const finish = () => {
        clearTimeout(timer);
        this.#queries.delete(id);
        resolve(
          this.#slots.map((s) => ({ slot: s.index, pid: s.worker?.process.pid, state: s.state, value: replies.get(s.index) as T | undefined, asked: asked.includes(s) })),
        );
      };
      const timer = setTimeout(finish, timeoutMs);
      this.#queries.set(id, (slot, value) => {
        if (slot !== undefined) replies.set(slot, value);
        // A worker that exited will not answer: no need to wait for it.
        if (asked.every((s) => replies.has(s.index) || !s.worker)) finish();
      });
      if (asked.length === 0) return finish();
      for (const slot of asked) this.#send(slot, sent);
    });
  }

  /** Resolves once no worker runs; workers still running after `killAfterMs` are killed. */
  stopped(killAfterMs: number): Promise<void> {
    this.#stop();
    if (this.#slots.every((s) => !s.worker)) return Promise.resolve();
    const timer = setTimeout(() => this.kill(), killAfterMs);
    return new Promise<void>((resolve) => {
      this.#allExited = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /** Ends every worker at once (SIGKILL): for a failed start and for stragglers. */
  kill(): void {
    this.#stop();
    for (const slot of this.#slots) slot.worker?.process.kill('SIGKILL');
    for (const retiring of this.#retiring.values()) retiring.worker.process.kill('SIGKILL');
  }

  #stop(): void {
    this.#stopping = true;
    if (this.#recycleTimer) clearInterval(this.#recycleTimer);
    for (const slot of this.#slots) this.#cancelRestart(slot);
    this.#checkAllExited();
  }

  #fork(slot: Slot): void {
    const worker = cluster.fork({ [WORKER_SLOT_ENV]: String(slot.index) });
    slot.worker = worker;
    slot.state = 'starting';
    slot.hello = false;
    slot.queued = [];
    slot.startProblem = undefined;
    const target = workerTarget(worker);
    slot.target = target;
    slot.release = this.#supervisor!.hold();
    worker.on('message', (message: unknown) => {
      if (!isMessage<FromWorker>(message)) return;
      // A recycled worker's sockets stay its own until it lets go of them.
      if (slot.worker !== worker) this.#fromRetiring(worker, target, message);
      else this.#received(slot, message);
    });
    // A worker that never serves must not leave the group "starting" in silence (a worker on
    // another Node.js, a start that hangs): it is ended, and its exit says why.
    const timeoutMs = startTimeoutMs();
    slot.startTimer = setTimeout(() => {
      slot.startTimer = undefined;
      if (slot.worker !== worker || slot.state !== 'starting') return;
      slot.startProblem = slot.hello
        ? `it did not become ready within ${timeoutMs / 1000} s`
        : `it did not answer within ${timeoutMs / 1000} s of being started (is it running the same Node.js and dist/main.js? see its stderr)`;
      this.#options.log.error(
        { event: 'worker_start_timeout', worker: slot.index, worker_pid: worker.process.pid, answered: slot.hello, timeout_secs: timeoutMs / 1000 },
        `worker ${slot.index} is being killed: ${slot.startProblem}`,
      );
      worker.process.kill('SIGKILL');
    }, timeoutMs);
    slot.startTimer.unref();
    worker.on('exit', (code: number | null, signal: string | null) => this.#exited(slot, worker, code, signal));
    // An IPC error (the worker went away mid-send) shows up as its exit; nothing else to do here.
    worker.on('error', () => {});
  }

  #received(slot: Slot, message: FromWorker): void {
    switch (message.type) {
      case 'hello': {
        if (slot.hello) return;
        slot.hello = true;
        // The start goes first, so it arrives before any command queued meanwhile.
        this.#send(slot, { type: 'start', config: this.#config!, healthCheckFailed: this.#healthCheckFailed });
        for (const queued of slot.queued.splice(0)) this.#send(slot, queued);
        return;
      }
      case 'ready': {
        this.#clearStartTimer(slot);
        slot.state = 'ready';
        slot.failures = 0;
        this.#options.log.info({ event: 'worker_ready', worker: slot.index, worker_pid: slot.worker?.process.pid }, `worker ${slot.index} ready`);
        // Recycling: the replacement serves; now the worker it replaces drains.
        const old = slot.replacing;
        slot.replacing = undefined;
        if (old) this.#retire(old);
        if (this.#starting && this.allReady()) {
          this.#starting.resolve(message.listeners);
          this.#starting = undefined;
        }
        return;
      }
      case 'start_failed':
        slot.startProblem = message.message;
        if (this.#starting) {
          this.#starting.reject(new Error(`worker ${slot.index} could not start: ${message.message}`));
          this.#starting = undefined;
        }
        return;
      case 'reply':
        this.#queries.get(message.id)?.(slot.index, message.value);
        return;
      case 'socket_acquire': {
        const { lease } = message;
        this.#dispatch!.acquire(slot.target!, lease, message.listener, message.configured).then(
          (bound) => this.#send(slot, { type: 'socket_acquired', lease, bound }),
          (error: NodeJS.ErrnoException) => this.#send(slot, { type: 'socket_acquired', lease, error: error.message, code: error.code }),
        );
        return;
      }
      case 'limit':
        answerLimit(this.#limits, message, (reply) => this.#send(slot, reply));
        return;
      case 'connection_taken':
        slot.target?.handoff.confirmed(message.handoff);
        return;
      case 'connection_refused':
        slot.target?.handoff.refused(message.handoff);
        return;
      case 'socket_serve':
        this.#dispatch!.serve(slot.target!, message.lease, message.serving);
        return;
      case 'socket_let_go':
        this.#dispatch!.letGo(slot.target!, message.lease);
        return;
    }
  }

  #exited(slot: Slot, worker: Worker, code: number | null, signal: string | null): void {
    const retiring = this.#retiring.get(worker);
    if (retiring) return this.#retiredExited(slot, retiring, code, signal);
    if (slot.worker !== worker) return;
    const wasReady = slot.state === 'ready';
    const problem = slot.startProblem;
    this.#clearStartTimer(slot);
    if (slot.target) this.#dispatch?.gone(slot.target);
    slot.target = undefined;
    slot.worker = undefined;
    slot.state = 'exited';
    // Released after this exit is logged: the last release may end the supervisor's drain, whose
    // process_exit line must come after every worker_exited.
    const release = slot.release;
    slot.release = undefined;
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
      slot.failures = wasReady ? 1 : slot.failures + 1;
      const delay = Math.min(RESTART_DELAY_MS.max, RESTART_DELAY_MS.first * 2 ** (slot.failures - 1));
      slot.state = 'restarting';
      this.#options.log.error(
        {
          event: 'worker_exited',
          worker: slot.index,
          worker_pid: worker.process.pid,
          exit_code: code,
          signal,
          restart_in_ms: delay,
          ...(wasReady ? {} : { during_start: true, reason: problem ?? null }),
        },
        `worker ${slot.index} ${wasReady ? 'died' : `died before it was ready${problem ? ` (${problem})` : ''}`}; restarting it in ${delay} ms`,
      );
      slot.restartTimer = setTimeout(() => {
        slot.restartTimer = undefined;
        if (this.#stopping) {
          slot.state = 'exited';
          return this.#checkAllExited();
        }
        slot.restarts++;
        this.#fork(slot);
      }, delay);
      slot.restartTimer.unref();
    }
    for (const check of [...this.#queries.values()]) check();
    release?.();
    this.#checkAllExited();
  }

  #clearStartTimer(slot: Slot): void {
    if (slot.startTimer) clearTimeout(slot.startTimer);
    slot.startTimer = undefined;
  }

  #cancelRestart(slot: Slot): void {
    if (!slot.restartTimer) return;
    clearTimeout(slot.restartTimer);
    slot.restartTimer = undefined;
    slot.state = 'exited';
  }

  #checkAllExited(): void {
    if (this.#slots.every((s) => !s.worker && !s.restartTimer) && this.#retiring.size === 0) this.#allExited?.();
  }

  #broadcast(message: ToWorker): void {
    for (const slot of this.#slots) this.#send(slot, message);
    // Recycled workers still serving or draining hear drains and forced ends too.
    if (message.type === 'command') for (const retiring of this.#retiring.values()) sendTo(retiring.worker, message);
  }

  /** Checks every serving worker against `workers_recycle`; one that passes a bound is replaced. */
  async #checkRecycling(): Promise<void> {
    const bounds = this.#config?.workers_recycle;
    if (!bounds || (bounds.max_rss_mb <= 0 && bounds.max_requests <= 0) || this.#stopping || this.#draining || this.#pendingReload) return;
    const replies = await this.query<{ rss_bytes?: number; requests_started?: number }>('info');
    for (const reply of replies) {
      const slot = this.#slots[reply.slot - 1];
      const info = reply.value;
      if (!slot || !info || slot.state !== 'ready' || slot.replacing || this.#stopping || this.#draining) continue;
      const rssMb = (info.rss_bytes ?? 0) / (1024 * 1024);
      const requests = info.requests_started ?? 0;
      const reason =
        bounds.max_rss_mb > 0 && rssMb >= bounds.max_rss_mb
          ? `its memory (${Math.round(rssMb)} MiB) passed workers_recycle.max_rss_mb (${bounds.max_rss_mb})`
          : bounds.max_requests > 0 && requests >= bounds.max_requests
            ? `it started ${requests} requests (workers_recycle.max_requests: ${bounds.max_requests})`
            : undefined;
      if (reason) this.#recycle(slot, reason, { rss_mb: Math.round(rssMb), requests });
    }
  }

  /** Takes the slot's worker out (it keeps serving) and starts its replacement in the slot. */
  #recycle(slot: Slot, reason: string, fields: object): void {
    const worker = slot.worker;
    if (!worker) return;
    const old: Retiring = { slot: slot.index, worker, target: slot.target, release: slot.release };
    this.#retiring.set(worker, old);
    this.#recycles++;
    this.#options.log.info(
      { event: 'worker_recycling', worker: slot.index, worker_pid: worker.process.pid, reason, ...fields },
      `worker ${slot.index} is being replaced: ${reason}; it serves until its replacement does`,
    );
    slot.replacing = old;
    slot.worker = undefined;
    slot.release = undefined;
    slot.target = undefined;
    this.#fork(slot);
  }

  /** The replacement serves: the recycled worker stops taking connections and drains (its work in flight finishes). */
  #retire(old: Retiring): void {
    this.#options.log.info({ event: 'worker_recycled', worker: old.slot, worker_pid: old.worker.process.pid }, `worker ${old.slot}'s replacement serves; the old process drains`);
    sendTo(old.worker, {
      type: 'command',
      command: { kind: 'drain', trigger: 'worker_recycle', options: { graceful: false, keepIdleSecs: this.#config?.downstream.drain_timeout_secs ?? 5 } },
    });
  }

  #retiredExited(slot: Slot, old: Retiring, code: number | null, signal: string | null): void {
    this.#retiring.delete(old.worker);
    if (old.target) this.#dispatch?.gone(old.target);
    // Died before its replacement served: the replacement carries on starting; nothing to drain.
    if (slot.replacing === old) slot.replacing = undefined;
    this.#options.log.info(
      { event: 'worker_exited', worker: old.slot, worker_pid: old.worker.process.pid, exit_code: code, signal, recycled: true },
      `worker ${old.slot} (recycled) exited`,
    );
    for (const check of [...this.#queries.values()]) check();
    old.release?.();
    this.#checkAllExited();
  }

  /**
   * Messages of a worker no longer in its slot: a recycled one still serves and drains, so it
   * confirms the connections it was passed, lets go of its sockets, and admits and settles its
   * requests in the group's limit store (or what they cost would never be charged); one that
   * exited may have confirmed connections or settled requests in its last messages, read after
   * its exit.
   */
  #fromRetiring(worker: Worker, target: WorkerTarget, message: FromWorker): void {
    if (message.type === 'socket_serve') this.#dispatch?.serve(target, message.lease, message.serving);
    else if (message.type === 'socket_let_go') this.#dispatch?.letGo(target, message.lease);
    else if (message.type === 'connection_taken') target.handoff.confirmed(message.handoff);
    else if (message.type === 'connection_refused') target.handoff.refused(message.handoff);
    else if (message.type === 'limit') answerLimit(this.#limits, message, (reply) => sendTo(worker, reply));
  }


  #send(slot: Slot, message: ToWorker): void {
    const worker = slot.worker;
    if (!worker || !worker.isConnected()) return;
    if (!slot.hello) {
      slot.queued.push(message);
      return;
    }
    try {
      worker.send(message);
    } catch {
      // The channel closed under us: its exit event follows.
    }
  }
}

function sendTo(worker: Worker, message: ToWorker): void {
  if (!worker.isConnected()) return;
  try {
    worker.send(message);
  } catch {
    // Its exit follows.
  }
}
