// Connection retirement: one connection told to go (E2, E6), the proactive drain over the last
// third of the drain time (E2, E3), and the one sweep timer for the connections' deadlines (fresh,
// idle, and a retired connection's drain timeout). The Lifecycle owns it and hands it what it
// needs; the drain plan and the states stay there. How a connection is told or ended is its
// protocol's business (ConnectionProtocol).
import type { Clock } from './clock.ts';
import type { ConnectionTracker, TrackedConnection } from './connections.ts';
import type { DrainSettings } from './contracts.ts';
import { proactiveDrainAt } from './drain-policy.ts';

/**
 * How often connection deadlines are checked: each is met within this long after it has passed
 * (a connection is ended at the first sweep at or after its deadline).
 */
export const SWEEP_MS = 500;

export interface RetirementNeeds {
  readonly clock: Clock;
  readonly connections: ConnectionTracker;
  /** The settings in force now (a reload replaces them). */
  settings(): DrainSettings;
  readonly random: () => number;
  /** A one-shot timer, cancelled if the process exits first. */
  after(ms: number, fn: () => void): void;
  /** A repeating timer, cancelled when the process exits. */
  every(ms: number, fn: () => void): void;
}

export class ConnectionRetirement {
  readonly #clock: Clock;
  readonly #connections: ConnectionTracker;
  readonly #settings: () => DrainSettings;
  readonly #random: () => number;
  readonly #after: (ms: number, fn: () => void) => void;
  readonly #every: (ms: number, fn: () => void) => void;
  #sweeping = false;

  constructor(needs: RetirementNeeds) {
    this.#clock = needs.clock;
    this.#connections = needs.connections;
    this.#settings = () => needs.settings();
    this.#random = needs.random;
    this.#after = (ms, fn) => needs.after(ms, fn);
    this.#every = (ms, fn) => needs.every(ms, fn);
  }

  /** Starts the sweep timer (once serving, or when a drain deadline is set before). Idempotent. */
  startSweep(): void {
    if (this.#sweeping) return;
    this.#sweeping = true;
    this.#every(SWEEP_MS, () => this.#sweep());
  }

  /** One timer for every connection deadline, instead of a timer per connection. */
  #sweep(): void {
    const now = this.#clock.now();
    const settings = this.#settings();
    const freshMs = settings.freshTimeoutSecs * 1000;
    const idleMs = settings.idleTimeoutSecs * 1000;
    for (const connection of this.#connections.all()) {
      const deadline = connection.drainDeadline;
      if (deadline && now >= deadline.at) {
        // Checked once: one busy now is left to its retirement (its next response, or its last
        // stream, ends it).
        connection.drainDeadline = undefined;
        if ((connection.state === 'idle' || connection.state === 'fresh') && !connection.socket.destroyed) {
          this.#connections.end(connection, deadline.reason);
          continue;
        }
      }
      if (freshMs > 0 && connection.state === 'fresh' && connection.protocol.name !== 'tls' && now - connection.acceptedAt >= freshMs) {
        this.#connections.destroy(connection, 'fresh_timeout');
      } else if (idleMs > 0 && connection.state === 'idle' && connection.protocol.multiplexed && now - connection.idleSince >= idleMs) {
        this.#connections.end(connection, 'idle_timeout');
      }
    }
  }

  /**
   * E2: at two thirds of the drain time, every connection not yet draining gets a random moment in
   * the last third at which it is told to go, early enough for its own drain timeout to elapse
   * before the drain ends. `inPlan` says, at that moment, whether the drain covers a listener.
   */
  scheduleProactiveDrain(startedAt: number, drainTimeMs: number, inPlan: (listener: string) => boolean): void {
    const timeoutMs = this.#settings().connectionDrainTimeoutSecs * 1000;
    if (drainTimeMs - timeoutMs <= (drainTimeMs * 2) / 3) return; // too short to leave room
    this.#after((drainTimeMs * 2) / 3, () => {
      for (const connection of this.#connections.all()) {
        if (connection.retiring || !inPlan(connection.listener)) continue;
        const at = proactiveDrainAt(drainTimeMs, timeoutMs, connection.acceptedAt - startedAt, this.#random);
        if (at === undefined) continue;
        const delay = Math.max(0, startedAt + at - this.#clock.now());
        this.#after(delay, () => this.#drainProactively(connection, timeoutMs));
      }
    });
  }

  #drainProactively(connection: TrackedConnection, timeoutMs: number): void {
    if (connection.state === 'upgraded') {
      // E3: an upgraded stream cannot be told to go away. It is in flight like any request and
      // finishes (L7), unless the operator chose Envoy's way and has it reset at once.
      if (this.#settings().resetUpgradedOnProactiveDrain && !connection.socket.destroyed) {
        connection.retiring = true;
        this.#connections.destroy(connection, 'proactive_drain_reset');
      }
      return;
    }
    this.retire(connection, timeoutMs, 'proactive_drain');
  }

  /**
   * Tells one connection to go (E2, E6), through its protocol: HTTP/1.1 closes after its next
   * response, HTTP/2 gets its GOAWAY. With `closeIdle`, one that is idle or fresh once `timeoutMs`
   * has passed is then ended, by the sweep (a client may be reusing it at that moment: only worth
   * it when the process or the listener is going away). Upgraded sessions are left to finish.
   */
  retire(connection: TrackedConnection, timeoutMs: number, reason: string, closeIdle = true): void {
    if (connection.retiring || connection.socket.destroyed) return;
    connection.retiring = true;
    connection.protocol.retire();
    if (!closeIdle) return;
    connection.drainDeadline = { at: this.#clock.now() + timeoutMs, reason };
    this.startSweep();
  }
}
