// The process-wide lifecycle: one state, one exact in-flight counter, the drain sequence of
// docs/graceful-shutdown.md (L1-L10). Listeners and handlers ask it what to do; they never see signals.
import type { Socket } from 'node:net';
import { systemRandom, type Clock, type TimerHandle } from './clock.ts';
import { ConnectionTracker, type TrackedConnection } from './connections.ts';
import { closeProbability } from './drain-policy.ts';
import { describeWaiting, type WaitingFor } from './progress.ts';
import { ConnectionRetirement } from './retirement.ts';
import type { AdminLifecycle, DrainInfo, DrainMoment, DrainOptions, DrainReport, DrainSettings, ForceEndable, LifecycleHooks, LifecycleLog, ListenerLifecycle, ListenerScope, OpenWork, RequestLifecycle } from './contracts.ts';

export type LifecycleState = 'starting' | 'serving' | 'draining' | 'closing' | 'exited';

interface DrainPlan {
  trigger: string;
  startedAt: number;
  graceful: boolean;
  inboundOnly: boolean;
  exit: boolean;
  includeModifyOnly: boolean;
  keepIdleSecs: number;
}

export class Lifecycle implements ListenerLifecycle, RequestLifecycle, AdminLifecycle {
  readonly connections: ConnectionTracker;
  readonly #retirement: ConnectionRetirement;
  #state: LifecycleState = 'starting';
  #inFlight = 0;
  /** Work outside this process that the drain waits for (worker processes). */
  #holds = 0;
  #settings: DrainSettings;
  readonly #clock: Clock;
  readonly #log: LifecycleLog;
  readonly #hooks: LifecycleHooks;
  readonly #retireCallbacks = new Set<{ listener: string; callback: () => void }>();
  readonly #scopes = new Map<string, ListenerScope>();
  readonly #random: () => number;
  #plan: DrainPlan | undefined;
  #healthFailed = false;
  readonly #forceEndables = new TrackedList<ForceEndable>();
  /** Pending timers, cancelled on exit; one-shot timers leave the set when they fire. */
  readonly #timers = new Set<TimerHandle>();
  #drainStartedAt = 0;
  #windowEndsAt = 0;
  #windowElapsed = false;
  /** Connections accepted during the drain that have not sent a request yet: logged at their first one unless it is a probe. */
  readonly #acceptedWhileDraining = new WeakSet<TrackedConnection>();
  #probeConnections = 0;
  #forced: string | undefined;
  /** Connections carrying live views (watchStarted), with how many each: they hold no drain. */
  readonly #watching = new Map<TrackedConnection, number>();
  readonly #moments: DrainMoment[] = [];
  readonly #done: Promise<number>;
  #resolveDone: ((code: number) => void) | undefined;
  /** Drain lines a `reportDrain` hook is still writing (O1: before process_exit). */
  readonly #reporting = new Set<Promise<void>>();
  #onConnectionAccepted: ((connection: TrackedConnection) => void) | undefined;
  #onConnectionClosed: ((connection: TrackedConnection, reason: string) => void) | undefined;
  #onConnectionRejected: ((listener: string) => void) | undefined;

  constructor(options: { clock: Clock; log: LifecycleLog; hooks: LifecycleHooks; settings: DrainSettings; random?: () => number }) {
    this.#clock = options.clock;
    this.#random = options.random ?? systemRandom;
    this.#done = new Promise((resolve) => (this.#resolveDone = resolve));
    this.#log = options.log;
    this.#hooks = options.hooks;
    this.#settings = options.settings;
    this.connections = new ConnectionTracker(
      {
        accepted: (connection) => this.#connectionAccepted(connection),
        rejected: (listener) => this.#onConnectionRejected?.(listener),
        closed: (connection, reason) => {
          this.#onConnectionClosed?.(connection, reason);
          this.#check();
        },
      },
      () => options.clock.now(),
    );
    this.#retirement = new ConnectionRetirement({
      clock: options.clock,
      connections: this.connections,
      settings: () => this.#settings,
      random: this.#random,
      after: (ms, fn) => this.#after(ms, fn),
      every: (ms, fn) => void this.#timers.add(this.#clock.every(ms, fn)),
    });
  }

  /** Resolves with the exit code once a drain that exits has finished, whatever started it. */
  get done(): Promise<number> {
    return this.#done;
  }

  get state(): LifecycleState {
    return this.#state;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  get draining(): boolean {
    return this.#state === 'draining' || this.#state === 'closing';
  }

  /** Seconds since the drain began, 0 before. */
  drainSeconds(): number {
    return this.draining || this.#state === 'exited' ? (this.#clock.now() - this.#drainStartedAt) / 1000 : 0;
  }

  /** Why the drain was forced (L8), if it was. */
  get forcedReason(): string | undefined {
    return this.#forced;
  }

  /** The drain's window in seconds (0 before a drain, and for a drain that stopped accepting at once). */
  drainWindowSecs(): number {
    return this.#plan ? round(Math.max(0, this.#windowEndsAt - this.#drainStartedAt) / 1000) : 0;
  }

  /** What the drain waits for now (O1): the window, and the work in flight by kind. */
  waitingFor(): WaitingFor {
    let streams = 0;
    let sessions = 0;
    for (const f of this.#forceEndables.values()) {
      const kind = f.kind?.();
      if (kind === 'stream') streams++;
      else if (kind === 'session') sessions++;
    }
    const left = this.#windowElapsed ? 0 : Math.max(0, this.#windowEndsAt - this.#clock.now()) / 1000;
    return {
      window_secs_left: Math.round(left * 10) / 10,
      requests: Math.max(0, this.#inFlight - streams - sessions),
      streams,
      sessions,
      workers: this.#holds,
    };
  }

  /** Health-probe connections accepted during the drain (counted, not logged one by one). */
  #requestsStarted = 0;

  /** Requests (and upgrades) started since this process began: a worker's age, for `workers_recycle.max_requests`. */
  get requestsStarted(): number {
    return this.#requestsStarted;
  }

  get probeConnections(): number {
    return this.#probeConnections;
  }

  /** L1: ready only while serving, and not while the health check is failed on purpose (E4). */
  ready(): boolean {
    return this.#state === 'serving' && !this.#healthFailed;
  }

  get healthCheckFailed(): boolean {
    return this.#healthFailed;
  }

  /** What the admin API reports about the drain in progress, if any. */
  drainInfo(): DrainInfo | undefined {
    const plan = this.#plan;
    if (!plan) return undefined;
    return {
      trigger: plan.trigger,
      graceful: plan.graceful,
      inbound_only: plan.inboundOnly,
      exit: plan.exit,
      elapsed_secs: round(this.drainSeconds()),
      drain_time_secs: this.#drainTimeMs() / 1000,
      strategy: this.#settings.drainStrategy,
    };
  }

  /** E5: registers how a listener takes part in drains. */
  registerListener(name: string, scope: ListenerScope): void {
    this.#scopes.set(name, scope);
  }

  /** E4: readiness fails and every `default` listener retires its connections at once (no drain time). */
  failHealthCheck(): boolean {
    if (this.#healthFailed) return false;
    this.#healthFailed = true;
    this.#log.info({ event: 'healthcheck_failed', in_flight: this.#inFlight, open_connections: this.connections.size }, 'health check failed by the admin API');
    for (const { listener, callback } of this.#retireCallbacks) if (this.#scopes.get(listener)?.drainType !== 'modify_only') callback();
    this.#hooks.commanded?.({ kind: 'healthcheck', failed: true });
    return true;
  }

  /** E4: readiness passes again (when not draining); connections already told to go stay told. */
  restoreHealthCheck(): boolean {
    if (!this.#healthFailed) return false;
    this.#healthFailed = false;
    this.#log.info({ event: 'healthcheck_ok' }, 'health check restored by the admin API');
    this.#hooks.commanded?.({ kind: 'healthcheck', failed: false });
    return true;
  }

  updateSettings(settings: DrainSettings): void {
    this.#settings = settings;
  }

  /** Observers for metrics and logs (set once by the composition root). */
  observeConnections(
    accepted: (c: TrackedConnection) => void,
    closed: (c: TrackedConnection, reason: string) => void,
    rejected?: (listener: string) => void,
  ): void {
    this.#onConnectionAccepted = accepted;
    this.#onConnectionClosed = closed;
    this.#onConnectionRejected = rejected;
  }

  markServing(): void {
    if (this.#state !== 'starting') return;
    this.#state = 'serving';
    this.#retirement.startSweep();
  }

  #after(ms: number, fn: () => void): void {
    const timer = this.#clock.after(ms, () => {
      this.#timers.delete(timer);
      fn();
    });
    this.#timers.add(timer);
  }

  shouldRetire(listener?: string): boolean {
    const scope = listener === undefined ? undefined : this.#scopes.get(listener);
    if (this.#healthFailed && scope?.drainType !== 'modify_only') return true;
    const plan = this.#plan;
    if (!plan) return false;
    // Past the window everything goes: L6 serves late requests with `Connection: close`.
    if (this.#state === 'closing' || this.#state === 'exited') return true;
    if (!this.#inPlan(plan, scope)) return false;
    const probability = closeProbability(this.#settings.drainStrategy, this.#clock.now() - plan.startedAt, this.#drainTimeMs());
    return probability >= 1 || this.#random() < probability;
  }

  onRetire(listener: string, callback: () => void): () => void {
    const entry = { listener, callback };
    this.#retireCallbacks.add(entry);
    return () => this.#retireCallbacks.delete(entry);
  }

  #inPlan(plan: DrainPlan, scope: ListenerScope | undefined): boolean {
    if (!scope) return true;
    if (scope.drainType === 'modify_only' && !plan.includeModifyOnly) return false;
    return !(plan.inboundOnly && scope.direction === 'outbound');
  }

  #drainTimeMs(): number {
    return this.#settings.drainTimeSecs * 1000;
  }

  connectionAccepted(socket: Socket, listener: string): TrackedConnection {
    return this.connections.add(socket, listener);
  }

  /** Like connectionAccepted, but closes the socket and returns undefined past `max_connections`. */
  admitConnection(socket: Socket, listener: string): TrackedConnection | undefined {
    return this.connections.admit(socket, listener);
  }

  /**
   * A request's headers were read (or a WebSocket upgrade began): it is in flight. `probe`: a health
   * probe (/livez, /readyz), which the drain's per-connection lines leave out (O1).
   */
  requestStarted(connection: TrackedConnection | undefined, probe = false): void {
    this.#inFlight++;
    this.#requestsStarted++;
    if (!connection) return;
    this.connections.requestStarted(connection);
    if (this.draining && this.#acceptedWhileDraining.delete(connection)) {
      if (probe) this.#probeConnections++;
      else this.#logAcceptedWhileDraining(connection);
    }
  }

  /** The request's response closed, whatever ended it. Called exactly once per requestStarted. */
  requestFinished(connection: TrackedConnection | undefined): void {
    this.#inFlight--;
    this.#exchangeFinished(connection);
  }

  watchStarted(connection: TrackedConnection | undefined): void {
    if (!connection) return;
    this.connections.requestStarted(connection);
    this.#watching.set(connection, (this.#watching.get(connection) ?? 0) + 1);
  }

  watchFinished(connection: TrackedConnection | undefined): void {
    if (connection) {
      const left = (this.#watching.get(connection) ?? 1) - 1;
      if (left > 0) this.#watching.set(connection, left);
      else this.#watching.delete(connection);
    }
    this.#exchangeFinished(connection);
  }

  /** What the end of an exchange (a request, a session, a live view) does to its connection. */
  #exchangeFinished(connection: TrackedConnection | undefined): void {
    if (connection && this.connections.requestFinished(connection) && (connection.retiring || this.shouldRetire(connection.listener))) {
      // L3: a response that began before the drain has finished. A multiplexed protocol (HTTP/2)
      // says goodbye with GOAWAY, whose last stream id tells the client what was not processed, and once the listeners are closed everything goes (L6). An
      // HTTP/1.1 connection inside the window is not closed under its client, which may be sending
      // its next request right now: that next response carries `Connection: close` instead.
      if (connection.protocol.multiplexed || this.#state === 'closing') this.connections.end(connection, 'drain_retired');
      else connection.retiring = true;
    }
    this.#check();
  }

  /**
   * Work outside this process that a drain waits for as it waits for requests: the supervisor of
   * worker processes holds one per living worker. Returns the release (idempotent).
   */
  hold(): () => void {
    this.#holds++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#holds--;
      if (this.#holds === 0 && this.draining) this.#moment('workers_exited');
      this.#check();
    };
  }

  /** Registers a stream that must end with an explicit error if the drain is forced (L8). */
  trackForceEndable(stream: ForceEndable): () => void {
    return this.#forceEndables.add(stream);
  }

  /**
   * Starts the drain (L1-L6, E1-E4). Returns the same promise on every call; it resolves with the
   * exit code once the process may exit. A later call can only widen a drain in progress (to every
   * listener, or to exiting), never narrow it; otherwise it is a no-op.
   */
  drain(trigger: string, options: DrainOptions = {}): Promise<number> {
    const graceful = options.graceful ?? true;
    const inboundOnly = options.inboundOnly ?? false;
    const exit = options.exit ?? true;
    if (this.#state !== 'exited') this.#hooks.commanded?.({ kind: 'drain', trigger, options });
    if (this.#plan) {
      this.#widen(trigger, inboundOnly, exit);
      return this.#done;
    }
    const plan: DrainPlan = { trigger, startedAt: this.#clock.now(), graceful, inboundOnly, exit, includeModifyOnly: options.includeModifyOnly ?? false, keepIdleSecs: options.keepIdleSecs ?? 0 };
    this.#plan = plan;
    this.#state = 'draining';
    this.#drainStartedAt = plan.startedAt;
    const { maxDrainSecs, progressLogSecs } = this.#settings;
    const windowSecs = graceful ? (options.windowSecs ?? this.#settings.minDrainSecs) : 0;
    this.#windowEndsAt = plan.startedAt + windowSecs * 1000;
    this.#moment('drain_started');
    // D3: with no window, nothing in flight means we can go at once.
    if (windowSecs === 0) {
      this.#windowElapsed = true;
      this.#moment('window_over');
    }
    this.#report(
      {
        event: 'drain_started',
        trigger,
        min_drain_secs: windowSecs,
        max_drain_secs: maxDrainSecs,
        strategy: this.#settings.drainStrategy,
        inbound_only: inboundOnly,
        exit,
        in_flight: this.#inFlight,
        open_connections: this.connections.size,
        waiting_for: this.waitingFor(),
        probe_connections: this.#probeConnections,
      },
      'drain started',
    );
    if (this.#settings.drainStrategy === 'immediate') {
      for (const { listener, callback } of this.#retireCallbacks) if (this.#inPlan(plan, this.#scopes.get(listener))) callback();
    }
    if (!graceful) {
      this.#hooks.stopAccepting((listener) => {
        const scope = this.#scopes.get(listener);
        return this.#inPlan(plan, scope) && !(scope?.admin && !plan.exit);
      });
    }
    this.#timers.add(
      this.#clock.every(progressLogSecs * 1000, () =>
        this.#report(
          {
            event: 'drain_progress',
            state: this.#state,
            in_flight: this.#inFlight,
            open_connections: this.connections.size,
            elapsed_secs: round(this.drainSeconds()),
            waiting_for: this.waitingFor(),
            probe_connections: this.#probeConnections,
          },
          'still draining',
        ),
      ),
    );
    this.#after(windowSecs * 1000, () => {
      this.#windowElapsed = true;
      this.#moment('window_over');
      this.#check();
    });
    if (graceful) this.#retirement.scheduleProactiveDrain(plan.startedAt, this.#drainTimeMs(), (listener) => this.#inPlan(plan, this.#scopes.get(listener)));
    if (maxDrainSecs > 0 && exit) this.#after(maxDrainSecs * 1000, () => this.force('max_drain_secs'));
    this.#check();
    return this.#done;
  }

  #widen(trigger: string, inboundOnly: boolean, exit: boolean): void {
    const plan = this.#plan!;
    const wider = (plan.inboundOnly && !inboundOnly) || (!plan.exit && exit);
    if (!wider) return;
    if (!inboundOnly) plan.inboundOnly = false;
    if (exit && !plan.exit) {
      plan.exit = true;
      const { maxDrainSecs } = this.#settings;
      if (maxDrainSecs > 0) this.#after(maxDrainSecs * 1000, () => this.force('max_drain_secs'));
    }
    this.#log.info({ event: 'drain_widened', trigger, inbound_only: plan.inboundOnly, exit: plan.exit }, 'drain widened');
    if (this.#settings.drainStrategy === 'immediate') {
      for (const { listener, callback } of this.#retireCallbacks) if (this.#inPlan(plan, this.#scopes.get(listener))) callback();
    }
    this.#check();
  }

  /** Tells one connection to go (E2, E6): see ConnectionRetirement.retire. */
  retireConnection(connection: TrackedConnection, timeoutMs: number, reason: string, closeIdle = true): void {
    this.#retirement.retire(connection, timeoutMs, reason, closeIdle);
  }

  /** L8: ends the drain now. In-flight streams get an explicit error event; the exit code is 1. */
  force(reason: string): void {
    if (this.#state === 'exited' || this.#forced) return;
    this.#forced = reason;
    this.#log.warn({ event: 'drain_forced', reason, in_flight: this.#inFlight, open_connections: this.connections.size }, 'drain forced');
    this.#hooks.commanded?.({ kind: 'force', reason });
    if (!this.#plan) void this.drain(reason);
    else this.#plan.exit = true;
    this.#moment('forced');
    if (this.#state === 'draining') this.#closeListeners();
    // Every request and session in flight ends now with an explicit error: a 503 when its response
    // had not started, an error event on a stream, a 1001 close frame on a WebSocket session.
    for (const stream of [...this.#forceEndables.values()]) stream.forceEnd(reason);
    for (const connection of this.connections.all()) {
      // Those just wrote their error: let it flush (FIN after the writes, HTTP/2's GOAWAY);
      // everything else goes now.
      if (connection.inFlight > 0) this.connections.end(connection, 'drain_forced');
      else this.connections.destroy(connection, 'drain_forced');
    }
    this.#check();
    // Sockets that do not finish writing promptly must not hold a forced exit (unless #check() has
    // already finished it).
    if ((this.#state as LifecycleState) !== 'exited') this.#after(1000, () => this.#finish());
  }

  /** A drain line: the message says what the drain waits for, in words (O1). */
  #report(fields: DrainReport, what: string): void {
    const message = `${what}: ${describeWaiting(fields.waiting_for)}`;
    if (!this.#hooks.reportDrain) return this.#log.info(fields, message);
    const written = this.#hooks.reportDrain(fields, message);
    if (!written) return;
    this.#reporting.add(written);
    const done = () => void this.#reporting.delete(written);
    written.then(done, done);
  }

  #connectionAccepted(connection: TrackedConnection): void {
    this.#onConnectionAccepted?.(connection);
    // O1: logged at its first request, unless that is a health probe (counted instead).
    if (this.draining) this.#acceptedWhileDraining.add(connection);
    if (this.#state === 'closing') this.#holdFresh(connection);
  }

  #logAcceptedWhileDraining(connection: TrackedConnection): void {
    const { remoteAddress, remotePort } = connection.socket;
    this.#log.info(
      { event: 'connection_accepted_while_draining', listener: connection.listener, peer: `${remoteAddress}:${remotePort}`, open_connections: this.connections.size },
      'accepted a connection while draining',
    );
  }

  #check(): void {
    const idle = this.#inFlight === 0 && this.#holds === 0;
    if (this.#state === 'draining' && this.#plan?.exit && this.#windowElapsed && idle) this.#closeListeners();
    if (this.#state === 'closing' && idle && this.#onlyWatchersLeft()) this.#finish();
  }

  /** No connection is left but those carrying live views, which the exit ends (they hold no drain). */
  #onlyWatchersLeft(): boolean {
    if (this.connections.size > this.#watching.size) return false;
    for (const connection of this.connections.all()) if (!this.#watching.has(connection)) return false;
    return true;
  }

  /** Records a moment of the drain once (the status page's timeline). */
  #moment(event: DrainMoment['event']): void {
    if (this.#moments.some((m) => m.event === event)) return;
    this.#moments.push({ event, at_secs: round(this.drainSeconds()) });
  }

  /** The drain's moments so far (empty before a drain). */
  drainMoments(): readonly DrainMoment[] {
    return this.#moments;
  }

  /**
   * The streams and sessions in flight (`total`) and the `limit` oldest of them, oldest first: what
   * the status page lists. Walks what is in flight, so it is read only when someone watches.
   */
  openWork(limit: number): { total: number; oldest: OpenWork[] } {
    const open: OpenWork[] = [];
    for (const f of this.#forceEndables.values()) {
      const kind = f.kind?.();
      if ((kind !== 'stream' && kind !== 'session') || !f.exchange) continue;
      const e = f.exchange;
      open.push({ kind, endpoint: e.endpoint, model: e.model.slice(0, 200), protocol: e.protocol, listener: e.listener, age_secs: round(e.durationSeconds()) });
    }
    open.sort((a, b) => b.age_secs - a.age_secs);
    return { total: open.length, oldest: open.slice(0, limit) };
  }

  /** L5/L6: the window is over and nothing is in flight: stop accepting, close idle connections. */
  #closeListeners(): void {
    this.#state = 'closing';
    this.#moment('listeners_closed');
    this.#log.info(
      { event: 'listeners_closing', in_flight: this.#inFlight, open_connections: this.connections.size, elapsed_secs: round(this.drainSeconds()) },
      'listeners closing',
    );
    this.#hooks.stopAccepting();
    const keepIdleMs = (this.#plan?.keepIdleSecs ?? 0) * 1000;
    for (const connection of this.connections.all()) {
      if (connection.state === 'idle' && keepIdleMs > 0 && !connection.protocol.multiplexed) this.#keepIdle(connection, keepIdleMs);
      else if (connection.state === 'idle') this.connections.end(connection, 'drain_idle');
      else if (connection.state === 'fresh') this.#holdFresh(connection);
    }
  }

  /** E7: an idle HTTP/1.1 connection goes at its next response, or once idle `ms` from now. */
  #keepIdle(connection: TrackedConnection, ms: number): void {
    connection.retiring = true;
    connection.drainDeadline = { at: this.#clock.now() + ms, reason: 'drain_idle' };
    this.#retirement.startSweep();
  }

  #holdFresh(connection: TrackedConnection): void {
    this.#after(this.#settings.freshConnectionGraceSecs * 1000, () => {
      if (connection.state === 'fresh' && !connection.socket.destroyed) this.connections.destroy(connection, 'drain_fresh_timeout');
    });
  }

  #finish(): void {
    if (this.#state === 'exited') return;
    this.#state = 'exited';
    this.#moment('exited');
    for (const timer of this.#timers) timer.cancel();
    this.#timers.clear();
    const forced = this.#forced !== undefined;
    const code = forced ? 1 : 0;
    // A forced end leaves nothing open behind it, whatever its protocol.
    if (forced) for (const connection of this.connections.all()) this.connections.destroy(connection, 'drain_forced');
    const exitLine = { event: 'process_exit', exit_code: code, drain_duration_secs: round(this.drainSeconds()), forced: this.#forced ?? null };
    const resolve = this.#resolveDone;
    const exit = () => {
      this.#log.info(exitLine, 'process exiting');
      this.#hooks.shutdown(forced).then(
        () => resolve?.(code),
        () => resolve?.(code === 0 ? 1 : code),
      );
    };
    // O1: process_exit is the last line: a drain line still being written (a supervisor asking its
    // workers for the group's numbers, bounded by that query's timeout) goes first.
    if (this.#reporting.size === 0) exit();
    else void Promise.allSettled([...this.#reporting]).then(exit);
  }
}

interface ListNode<T> {
  value: T;
  prev: ListNode<T> | undefined;
  next: ListNode<T> | undefined;
}

/**
 * Everything in flight that a forced drain must end: added when a request starts, removed when its
 * response closes, so thousands of times a second. A doubly linked list, not a Set: measured under
 * wrk, a Set used this way made every scavenge keep 30-70 MB alive and take about 20 ms instead
 * of 1 ms, and cost a third of the throughput; a list node is one small object that dies young.
 */
class TrackedList<T> {
  #head: ListNode<T> | undefined;

  /** Adds `value`; returns its removal (idempotent). */
  add(value: T): () => void {
    const node: ListNode<T> = { value, prev: undefined, next: this.#head };
    if (this.#head) this.#head.prev = node;
    this.#head = node;
    let linked = true;
    return () => {
      if (!linked) return;
      linked = false;
      if (node.prev) node.prev.next = node.next;
      else this.#head = node.next;
      if (node.next) node.next.prev = node.prev;
      node.prev = node.next = undefined;
    };
  }

  *values(): IterableIterator<T> {
    for (let node = this.#head; node; node = node.next) yield node.value;
  }
}

function round(value: number): number {
  return Math.round(value * 1000) / 1000;
}
