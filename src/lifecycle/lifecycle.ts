// The process-wide lifecycle: one state, one exact in-flight counter, the drain sequence of
// spec/lifecycle.md (L1-L10). Listeners and handlers ask it what to do; they never see signals.
import type { Socket } from 'node:net';
import type { Clock, TimerHandle } from './clock.ts';
import { ConnectionTracker, type TrackedConnection } from './connections.ts';

export type LifecycleState = 'starting' | 'serving' | 'draining' | 'closing' | 'exited';

/** What a listener or handler may ask of the lifecycle: the read side of the drain. */
export interface DrainDecision {
  /** L3: must a response whose headers are written now close its connection? */
  shouldRetire(): boolean;
  /** Called once when the drain begins (HTTP/2 sessions send GOAWAY here). Returns an unsubscribe. */
  onRetire(callback: () => void): () => void;
}

/** Something in flight that can be ended with an explicit error when the drain is forced (L8). */
export interface ForceEndable {
  forceEnd(reason: string): void;
}

export interface LifecycleLog {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
}

export interface LifecycleHooks {
  /** Stops accepting new connections on every listener (existing ones stay). */
  stopAccepting(): void;
  /** Final work before exit (L9): close upstream pools, flush logs. */
  shutdown(): Promise<void>;
}

export interface DrainSettings {
  minDrainSecs: number;
  maxDrainSecs: number;
  progressLogSecs: number;
  /** L6: how long a fresh connection is held after the listeners close. */
  freshConnectionGraceSecs: number;
  /** While serving, a connection that sends no request for this long is closed (0 = never). */
  freshTimeoutSecs?: number;
  /** Idle multiplexed (HTTP/2) connections are closed after this long (0 = never). */
  idleTimeoutSecs?: number;
}

/** How often connection deadlines (fresh and idle timeouts) are checked. */
const SWEEP_MS = 500;

export class Lifecycle implements DrainDecision {
  readonly connections: ConnectionTracker;
  #state: LifecycleState = 'starting';
  #inFlight = 0;
  #settings: DrainSettings;
  readonly #clock: Clock;
  readonly #log: LifecycleLog;
  readonly #hooks: LifecycleHooks;
  readonly #retireCallbacks = new Set<() => void>();
  readonly #forceEndables = new Set<ForceEndable>();
  readonly #timers: TimerHandle[] = [];
  #drainStartedAt = 0;
  #windowElapsed = false;
  #forced: string | undefined;
  #done: Promise<number> | undefined;
  #resolveDone: ((code: number) => void) | undefined;
  #onConnectionAccepted: ((connection: TrackedConnection) => void) | undefined;
  #onConnectionClosed: ((connection: TrackedConnection, reason: string) => void) | undefined;

  constructor(options: { clock: Clock; log: LifecycleLog; hooks: LifecycleHooks; settings: DrainSettings }) {
    this.#clock = options.clock;
    this.#log = options.log;
    this.#hooks = options.hooks;
    this.#settings = options.settings;
    this.connections = new ConnectionTracker(
      {
        accepted: (connection) => this.#connectionAccepted(connection),
        closed: (connection, reason) => {
          this.#onConnectionClosed?.(connection, reason);
          this.#check();
        },
      },
      () => options.clock.now(),
    );
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

  /** L1: ready only while serving. */
  ready(): boolean {
    return this.#state === 'serving';
  }

  updateSettings(settings: DrainSettings): void {
    this.#settings = settings;
  }

  /** Observers for metrics and logs (set once by the composition root). */
  observeConnections(accepted: (c: TrackedConnection) => void, closed: (c: TrackedConnection, reason: string) => void): void {
    this.#onConnectionAccepted = accepted;
    this.#onConnectionClosed = closed;
  }

  markServing(): void {
    if (this.#state !== 'starting') return;
    this.#state = 'serving';
    this.#timers.push(this.#clock.every(SWEEP_MS, () => this.#sweep()));
  }

  /** One timer for every connection deadline, instead of a timer per connection. */
  #sweep(): void {
    const now = this.#clock.now();
    const freshMs = (this.#settings.freshTimeoutSecs ?? 0) * 1000;
    const idleMs = (this.#settings.idleTimeoutSecs ?? 0) * 1000;
    if (freshMs === 0 && idleMs === 0) return;
    for (const connection of this.connections.all()) {
      if (freshMs > 0 && connection.state === 'fresh' && connection.protocol !== 'tls' && now - connection.acceptedAt >= freshMs) {
        this.connections.destroy(connection, 'fresh_timeout');
      } else if (idleMs > 0 && connection.state === 'idle' && connection.gracefulClose && now - connection.idleSince >= idleMs) {
        this.connections.end(connection, 'idle_timeout');
      }
    }
  }

  shouldRetire(): boolean {
    return this.#state !== 'serving' && this.#state !== 'starting';
  }

  onRetire(callback: () => void): () => void {
    this.#retireCallbacks.add(callback);
    return () => this.#retireCallbacks.delete(callback);
  }

  connectionAccepted(socket: Socket, listener: string): TrackedConnection {
    return this.connections.add(socket, listener);
  }

  /** A request's headers were read (or a WebSocket upgrade began): it is in flight. */
  requestStarted(connection: TrackedConnection | undefined): void {
    this.#inFlight++;
    if (connection) this.connections.requestStarted(connection);
  }

  /** The request's response closed, whatever ended it. Called exactly once per requestStarted. */
  requestFinished(connection: TrackedConnection | undefined): void {
    this.#inFlight--;
    if (connection && this.connections.requestFinished(connection) && this.#state !== 'serving' && this.#state !== 'starting') {
      // L3: a response that began before the drain has finished; its connection goes now.
      this.connections.end(connection, 'drain_retired');
    }
    this.#check();
  }

  /** Registers a stream that must end with an explicit error if the drain is forced (L8). */
  trackForceEndable(stream: ForceEndable): () => void {
    this.#forceEndables.add(stream);
    return () => this.#forceEndables.delete(stream);
  }

  /**
   * Starts the drain (L1-L6). Returns the same promise on every call; it resolves with the exit
   * code once the process may exit.
   */
  drain(trigger: string): Promise<number> {
    if (this.#done) return this.#done;
    this.#done = new Promise((resolve) => (this.#resolveDone = resolve));
    this.#state = 'draining';
    this.#drainStartedAt = this.#clock.now();
    const { minDrainSecs, maxDrainSecs, progressLogSecs } = this.#settings;
    this.#log.info(
      { event: 'drain_started', trigger, min_drain_secs: minDrainSecs, max_drain_secs: maxDrainSecs, in_flight: this.#inFlight, open_connections: this.connections.size },
      'drain started',
    );
    for (const callback of this.#retireCallbacks) callback();
    this.#timers.push(
      this.#clock.every(progressLogSecs * 1000, () =>
        this.#log.info(
          { event: 'drain_progress', state: this.#state, in_flight: this.#inFlight, open_connections: this.connections.size, elapsed_secs: round(this.drainSeconds()) },
          'still draining',
        ),
      ),
    );
    this.#timers.push(
      this.#clock.after(minDrainSecs * 1000, () => {
        this.#windowElapsed = true;
        this.#check();
      }),
    );
    if (maxDrainSecs > 0) this.#timers.push(this.#clock.after(maxDrainSecs * 1000, () => this.force('max_drain_secs')));
    // D3: with no window, nothing in flight means we can go at once.
    if (minDrainSecs === 0) this.#windowElapsed = true;
    this.#check();
    return this.#done;
  }

  /** L8: ends the drain now. In-flight streams get an explicit error event; the exit code is 1. */
  force(reason: string): void {
    if (this.#state === 'exited' || this.#forced) return;
    this.#forced = reason;
    this.#log.warn({ event: 'drain_forced', reason, in_flight: this.#inFlight, open_connections: this.connections.size }, 'drain forced');
    if (!this.#done) void this.drain(reason);
    if (this.#state === 'draining') this.#closeListeners();
    for (const stream of [...this.#forceEndables]) stream.forceEnd(reason);
    for (const connection of this.connections.all()) {
      // Streams and sessions just wrote their error event or close frame: let it flush (FIN after
      // the writes); everything else goes now.
      if (connection.inFlight > 0) this.connections.end(connection, 'drain_forced');
      else this.connections.destroy(connection, 'drain_forced');
    }
    // Sockets that do not finish writing promptly must not hold a forced exit.
    this.#timers.push(this.#clock.after(1000, () => this.#finish()));
    this.#check();
  }

  #connectionAccepted(connection: TrackedConnection): void {
    this.#onConnectionAccepted?.(connection);
    if (this.draining) {
      const { remoteAddress, remotePort } = connection.socket;
      this.#log.info(
        { event: 'connection_accepted_while_draining', listener: connection.listener, peer: `${remoteAddress}:${remotePort}`, open_connections: this.connections.size },
        'accepted a connection while draining',
      );
    }
    if (this.#state === 'closing') this.#holdFresh(connection);
  }

  #check(): void {
    if (this.#state === 'draining' && this.#windowElapsed && this.#inFlight === 0) this.#closeListeners();
    if (this.#state === 'closing' && this.#inFlight === 0 && this.connections.size === 0) this.#finish();
  }

  /** L5/L6: the window is over and nothing is in flight: stop accepting, close idle connections. */
  #closeListeners(): void {
    this.#state = 'closing';
    this.#log.info(
      { event: 'listeners_closing', in_flight: this.#inFlight, open_connections: this.connections.size, elapsed_secs: round(this.drainSeconds()) },
      'listeners closing',
    );
    this.#hooks.stopAccepting();
    for (const connection of this.connections.all()) {
      if (connection.state === 'idle') this.connections.end(connection, 'drain_idle');
      else if (connection.state === 'fresh') this.#holdFresh(connection);
    }
  }

  #holdFresh(connection: TrackedConnection): void {
    this.#timers.push(
      this.#clock.after(this.#settings.freshConnectionGraceSecs * 1000, () => {
        if (connection.state === 'fresh' && !connection.socket.destroyed) this.connections.destroy(connection, 'drain_fresh_timeout');
      }),
    );
  }

  #finish(): void {
    if (this.#state === 'exited') return;
    this.#state = 'exited';
    for (const timer of this.#timers) timer.cancel();
    const code = this.#forced ? 1 : 0;
    this.#log.info(
      { event: 'process_exit', exit_code: code, drain_duration_secs: round(this.drainSeconds()), forced: this.#forced ?? null },
      'process exiting',
    );
    const resolve = this.#resolveDone;
    this.#hooks.shutdown().then(
      () => resolve?.(code),
      () => resolve?.(code === 0 ? 1 : code),
    );
  }
}

function round(value: number): number {
  return Math.round(value * 1000) / 1000;
}
