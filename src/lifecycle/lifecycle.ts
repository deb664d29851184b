// The process-wide lifecycle: one state, one exact in-flight counter, the drain sequence of
// docs/graceful-shutdown.md (L1-L10). Listeners and handlers ask it what to do; they never see signals.
// A drain in progress is drain-run.ts's; how connections end, retirement.ts's; what the drain
// shows, drain-status.ts's; how listeners take part, listener-scopes.ts's.
import { systemRandom, Timers, type Clock } from './clock.ts';
import { ConnectionTracker, type TrackedConnection } from './connections.ts';
import { DrainConnections } from './drain-connections.ts';
import { DrainRun, type DrainRunNeeds } from './drain-run.ts';
import { DrainReports, DrainStatus, round } from './drain-status.ts';
import { HealthOverride } from './health-override.ts';
import { ListenerScopes } from './listener-scopes.ts';
import { ConnectionRetirement } from './retirement.ts';
import { TrackedList } from './tracked-list.ts';
import type { AdminLifecycle, DrainOptions, DrainSettings, ForceEndable, LifecycleHooks, LifecycleLog, ListenerLifecycle, ListenerScope, RequestLifecycle } from './contracts.ts';

export type LifecycleState = 'starting' | 'serving' | 'draining' | 'closing' | 'exited';

export class Lifecycle implements ListenerLifecycle, RequestLifecycle, AdminLifecycle {
  readonly connections: ConnectionTracker;
  /** What the drain shows (O1, the admin API, the status page). */
  readonly status: DrainStatus;
  #state: LifecycleState = 'starting';
  #inFlight = 0;
  #requestsStarted = 0;
  /** Work outside this process that the drain waits for (worker processes). */
  #holds = 0;
  #settings: DrainSettings;
  #run: DrainRun | undefined;
  #forced: string | undefined;
  readonly #log: LifecycleLog;
  readonly #hooks: LifecycleHooks;
  readonly #random: () => number;
  readonly #scopes = new ListenerScopes();
  /** E4: the health check failed on purpose, and restored. */
  readonly health: HealthOverride;
  readonly #retirement: ConnectionRetirement;
  readonly #reports: DrainReports;
  readonly #drainConnections: DrainConnections;
  readonly #forceEndables = new TrackedList<ForceEndable>();
  /** Every timer the lifecycle and its parts set, cancelled at the exit. */
  readonly #timers: Timers;
  /** What a drain is given to run (drain-run.ts). */
  readonly #runNeeds: DrainRunNeeds;
  readonly #done: Promise<number>;
  #resolveDone: ((code: number) => void) | undefined;

  constructor(options: { clock: Clock; log: LifecycleLog; hooks: LifecycleHooks; settings: DrainSettings; random?: () => number }) {
    this.#random = options.random ?? systemRandom;
    this.#done = new Promise((resolve) => (this.#resolveDone = resolve));
    this.#log = options.log;
    this.#hooks = options.hooks;
    this.#settings = options.settings;
    this.#timers = new Timers(options.clock);
    this.connections = new ConnectionTracker({ accepted: (connection) => this.#connectionAccepted(connection), closed: () => this.#check() }, () => options.clock.now());
    this.#reports = new DrainReports(options.log, options.hooks);
    this.health = new HealthOverride(options.log, options.hooks, this.#scopes, () => ({ in_flight: this.#inFlight, open_connections: this.connections.size }));
    this.#drainConnections = new DrainConnections(options.log, () => this.connections.size);
    this.status = new DrainStatus({
      inFlight: () => this.#inFlight,
      workers: () => this.#holds,
      run: () => this.#run,
      open: () => this.#forceEndables.values(),
      settings: () => this.#settings,
      probes: () => this.#drainConnections.probes,
    });
    const settings = () => this.#settings;
    this.#retirement = new ConnectionRetirement({ clock: options.clock, connections: this.connections, settings, random: this.#random, timers: this.#timers });
    this.#runNeeds = {
      clock: options.clock,
      log: options.log,
      hooks: options.hooks,
      settings,
      timers: this.#timers,
      random: this.#random,
      scopes: this.#scopes,
      retirement: this.#retirement,
      reports: this.#reports,
      numbers: () => ({ in_flight: this.#inFlight, open_connections: this.connections.size, waiting_for: this.status.waitingFor(), probe_connections: this.#drainConnections.probes }),
      state: () => this.#state,
      force: (reason) => this.force(reason),
      check: () => this.#check(),
    };
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

  /** Requests (and upgrades) started since this process began: a worker's age, for `workers_recycle.max_requests`. */
  get requestsStarted(): number {
    return this.#requestsStarted;
  }

  get draining(): boolean {
    return this.#state === 'draining' || this.#state === 'closing';
  }

  /** Why the drain was forced (L8), if it was. */
  get forcedReason(): string | undefined {
    return this.#forced;
  }

  /** L1: ready only while serving, and not while the health check is failed on purpose (E4). */
  ready(): boolean {
    return this.#state === 'serving' && !this.health.failed;
  }

  // Set-up.

  /** E5: registers how a listener takes part in drains. */
  registerListener(name: string, scope: ListenerScope): void {
    this.#scopes.register(name, scope);
  }

  updateSettings(settings: DrainSettings): void {
    this.#settings = settings;
  }

  /** Observers for metrics and logs (set once by the composition root). */
  observeConnections(...observers: Parameters<ConnectionTracker['observe']>): void {
    this.connections.observe(...observers);
  }

  markServing(): void {
    if (this.#state !== 'starting') return;
    this.#state = 'serving';
    this.#retirement.startSweep();
  }

  // The drain decision (L3, E1, E4, E5).

  shouldRetire(listener?: string): boolean {
    if (this.health.retires(listener)) return true;
    if (!this.#run) return false;
    // Past the window everything goes: L6 serves late requests with `Connection: close`.
    return this.#state === 'closing' || this.#state === 'exited' || this.#run.retires(listener);
  }

  onRetire(listener: string, callback: () => void): () => void {
    return this.#scopes.onRetire(listener, callback);
  }

  // Connections and the work in flight (L5, L10).

  /** Tells one connection to go (E2, E6): see ConnectionRetirement.retire. */
  retireConnection(connection: TrackedConnection, timeoutMs: number, reason: string, closeIdle = true): void {
    this.#retirement.retire(connection, timeoutMs, reason, closeIdle);
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
    if (this.draining) this.#drainConnections.requestWhileDraining(connection, probe);
  }

  /** The request's response closed, whatever ended it. Called exactly once per requestStarted. */
  requestFinished(connection: TrackedConnection | undefined): void {
    this.#inFlight--;
    this.#exchangeFinished(connection);
  }

  watchStarted(connection: TrackedConnection | undefined): void {
    if (!connection) return;
    this.connections.requestStarted(connection);
    this.#drainConnections.watchStarted(connection);
  }

  watchFinished(connection: TrackedConnection | undefined): void {
    if (connection) this.#drainConnections.watchFinished(connection);
    this.#exchangeFinished(connection);
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
      if (this.#holds === 0 && this.draining) this.#run?.moment('workers_exited');
      this.#check();
    };
  }

  /** Registers a stream that must end with an explicit error if the drain is forced (L8). */
  trackForceEndable(stream: ForceEndable): () => void {
    return this.#forceEndables.add(stream);
  }

  // The drain.

  /**
   * Starts the drain (L1-L6, E1-E4). Returns the same promise on every call; it resolves with the
   * exit code once the process may exit. A later call can only widen a drain in progress (to every
   * listener, or to exiting), never narrow it; otherwise it is a no-op.
   */
  drain(trigger: string, options: DrainOptions = {}): Promise<number> {
    if (this.#state !== 'exited') this.#hooks.commanded?.({ kind: 'drain', trigger, options });
    if (this.#run) {
      this.#run.widen(trigger, options);
      return this.#done;
    }
    this.#run = new DrainRun(this.#runNeeds, trigger, options);
    this.#state = 'draining';
    this.#run.start();
    this.#check();
    return this.#done;
  }

  /** L8: ends the drain now. In-flight streams get an explicit error event; the exit code is 1. */
  force(reason: string): void {
    if (this.#state === 'exited' || this.#forced) return;
    this.#forced = reason;
    this.#log.warn({ event: 'drain_forced', reason, in_flight: this.#inFlight, open_connections: this.connections.size }, 'drain forced');
    this.#hooks.commanded?.({ kind: 'force', reason });
    if (!this.#run) void this.drain(reason);
    else this.#run.plan.exit = true;
    this.#run!.moment('forced');
    if (this.#state === 'draining') this.#closeListeners();
    // Every request and session in flight ends now with an explicit error: a 503 when its response
    // had not started, an error event on a stream, a 1001 close frame on a WebSocket session.
    for (const stream of [...this.#forceEndables.values()]) stream.forceEnd(reason);
    this.#retirement.forced();
    this.#check();
    // Sockets slow to finish writing must not hold a forced exit (unless #check() has finished it).
    if ((this.#state as LifecycleState) !== 'exited') this.#timers.after(1000, () => this.#finish());
  }

  #connectionAccepted(connection: TrackedConnection): void {
    // O1: logged at its first request, unless that is a health probe (counted instead).
    if (this.draining) this.#drainConnections.acceptedWhileDraining(connection);
    if (this.#state === 'closing') this.#retirement.holdFresh(connection);
  }

  /** What the end of an exchange (a request, a session, a live view) does to its connection. */
  #exchangeFinished(connection: TrackedConnection | undefined): void {
    // L3: a response that began before the drain (or before its connection was told to go) has finished.
    if (connection && this.connections.requestFinished(connection) && (connection.retiring || this.shouldRetire(connection.listener))) {
      this.#retirement.lastExchangeFinished(connection, this.#state === 'closing');
    }
    this.#check();
  }

  #check(): void {
    const idle = this.#inFlight === 0 && this.#holds === 0;
    if (this.#state === 'draining' && this.#run?.plan.exit && this.#run.windowElapsed && idle) this.#closeListeners();
    // Connections carrying only live views hold no drain: the exit ends them.
    if (this.#state === 'closing' && idle && this.#drainConnections.onlyWatchersLeft(this.connections)) this.#finish();
  }

  /** L5/L6: the window is over and nothing is in flight: stop accepting, close idle connections. */
  #closeListeners(): void {
    this.#state = 'closing';
    this.#run!.moment('listeners_closed');
    const elapsed = round(this.status.seconds());
    this.#log.info({ event: 'listeners_closing', in_flight: this.#inFlight, open_connections: this.connections.size, elapsed_secs: elapsed }, 'listeners closing');
    this.#hooks.stopAccepting();
    this.#retirement.listenersClosed(this.#run!.plan.keepIdleSecs * 1000);
  }

  #finish(): void {
    if (this.#state === 'exited') return;
    this.#state = 'exited';
    this.#run!.moment('exited');
    this.#timers.cancelAll();
    const forced = this.#forced !== undefined;
    const code = forced ? 1 : 0;
    // A forced end leaves nothing open behind it, whatever its protocol.
    if (forced) this.#retirement.destroyAll('drain_forced');
    const exitLine = { event: 'process_exit', exit_code: code, drain_duration_secs: round(this.status.seconds()), forced: this.#forced ?? null };
    // O1: process_exit is the last line: a drain line still being written (a supervisor asking its
    // workers for the group's numbers, bounded by that query's timeout) goes first.
    this.#reports.afterPending(() => {
      this.#log.info(exitLine, 'process exiting');
      this.#hooks.shutdown(forced).then(
        () => this.#resolveDone?.(code),
        () => this.#resolveDone?.(code === 0 ? 1 : code),
      );
    });
  }
}
