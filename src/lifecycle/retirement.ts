// When a connection ends: the one place that decides it. One connection told to go (E2, E6); its
// last response during a drain (L3); the proactive drain over the last third of the drain time
// (E2, E3); the listeners' close (L6, E7: idle ones ended or kept, fresh ones held); the forced end
// (L8); and the one sweep timer for the connections' deadlines (fresh, idle, and a retired
// connection's drain timeout). The Lifecycle owns it and says when; the drain plan and the states
// stay there. How a connection is told or ended is its protocol's business (ConnectionProtocol).
import type { Clock, Timers } from './clock.ts';
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
  /** The process's timers, cancelled when it exits. */
  readonly timers: Timers;
}

export class ConnectionRetirement {
  readonly #clock: Clock;
  readonly #connections: ConnectionTracker;
  readonly #settings: () => DrainSettings;
  readonly #random: () => number;
  readonly #timers: Timers;
  #sweeping = false;

  constructor(needs: RetirementNeeds) {
    this.#clock = needs.clock;
    this.#connections = needs.connections;
    this.#settings = () => needs.settings();
    this.#random = needs.random;
    this.#timers = needs.timers;
  }

  /** Starts the sweep timer (once serving, or when a drain deadline is set before). Idempotent. */
  startSweep(): void {
    if (this.#sweeping) return;
    this.#sweeping = true;
    this.#timers.every(SWEEP_MS, () => this.#sweep());
  }

  /** One timer for every connection deadline, instead of a timer per connection. */
  #sweep(): void {
    const now = this.#clock.now();
    const settings = this.#settings();
    const freshMs = settings.freshTimeoutSecs * 1000;
    const idleMs = settings.idleTimeoutSecs * 1000;
    for (const connection of this.#connections.all()) {
      // Checked once: one busy now is left to its retirement (its next response, or its last
      // stream, ends it).
      const deadline = connection.takeDeadline(now);
      if (deadline && (connection.state === 'idle' || connection.state === 'fresh') && !connection.socket.destroyed) {
        connection.end(deadline.reason);
        continue;
      }
      if (freshMs > 0 && connection.state === 'fresh' && connection.protocol.name !== 'tls' && now - connection.acceptedAt >= freshMs) {
        connection.destroy('fresh_timeout');
      } else if (idleMs > 0 && connection.state === 'idle' && connection.protocol.multiplexed && now - connection.idleSince >= idleMs) {
        connection.end('idle_timeout');
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
    this.#timers.after((drainTimeMs * 2) / 3, () => {
      for (const connection of this.#connections.all()) {
        if (connection.retiring || !inPlan(connection.listener)) continue;
        const at = proactiveDrainAt(drainTimeMs, timeoutMs, connection.acceptedAt - startedAt, this.#random);
        if (at === undefined) continue;
        const delay = Math.max(0, startedAt + at - this.#clock.now());
        this.#timers.after(delay, () => this.#drainProactively(connection, timeoutMs));
      }
    });
  }

  #drainProactively(connection: TrackedConnection, timeoutMs: number): void {
    if (connection.state === 'upgraded') {
      // E3: an upgraded stream cannot be told to go away. It is in flight like any request and
      // finishes (L7), unless the operator chose Envoy's way and has it reset at once.
      if (this.#settings().resetUpgradedOnProactiveDrain && !connection.socket.destroyed) {
        connection.retire();
        connection.destroy('proactive_drain_reset');
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
    connection.retire();
    if (!closeIdle) return;
    connection.endIfIdleBy(this.#clock.now() + timeoutMs, reason);
    this.startSweep();
  }

  /**
   * L3: a connection's last exchange has finished during a drain, or after it was told to go. A
   * multiplexed protocol (HTTP/2) says goodbye with GOAWAY, whose last stream id tells the client
   * what was not processed, and once the listeners are closed (`closing`) everything goes (L6). An
   * HTTP/1.1 connection inside the window is not closed under its client, which may be sending its
   * next request right now: that next response carries `Connection: close` instead.
   */
  lastExchangeFinished(connection: TrackedConnection, closing: boolean): void {
    if (connection.protocol.multiplexed || closing) connection.end('drain_retired');
    else connection.retire();
  }

  /**
   * L6: the listeners have closed. Idle connections end (E7: an idle HTTP/1.1 one is kept
   * `keepIdleMs`, and goes at its next response or once still idle then); fresh ones are held for
   * the fresh-connection grace; busy ones end with their last exchange.
   */
  listenersClosed(keepIdleMs: number): void {
    for (const connection of this.#connections.all()) {
      if (connection.state === 'idle' && keepIdleMs > 0 && !connection.protocol.multiplexed) {
        connection.retire();
        connection.endIfIdleBy(this.#clock.now() + keepIdleMs, 'drain_idle');
        this.startSweep();
      } else if (connection.state === 'idle') connection.end('drain_idle');
      else if (connection.state === 'fresh') this.holdFresh(connection);
    }
  }

  /** L6: a fresh connection (accepted, no request yet) gets the grace to send one, then goes. */
  holdFresh(connection: TrackedConnection): void {
    this.#timers.after(this.#settings().freshConnectionGraceSecs * 1000, () => {
      if (connection.state === 'fresh' && !connection.socket.destroyed) connection.destroy('drain_fresh_timeout');
    });
  }

  /**
   * L8: the drain is forced. Connections whose exchanges have just written their error end after
   * it (FIN after the writes, HTTP/2's GOAWAY); every other one goes now.
   */
  forced(): void {
    for (const connection of this.#connections.all()) {
      if (connection.inFlight > 0) connection.end('drain_forced');
      else connection.destroy('drain_forced');
    }
  }

  /** L8: a forced exit leaves nothing open behind it, whatever its protocol. */
  destroyAll(reason: string): void {
    for (const connection of this.#connections.all()) connection.destroy(reason);
  }
}
