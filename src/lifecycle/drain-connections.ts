// What the drain notes of single connections: one accepted during the drain is logged at its first
// request, unless that is a health probe (counted instead, O1); and a connection that carries only
// live views (the admin status stream) holds no drain (L5), so the exit may end it.
import type { TrackedConnection } from './connections.ts';
import type { LifecycleLog } from './contracts.ts';

export class DrainConnections {
  readonly #log: LifecycleLog;
  readonly #openConnections: () => number;
  /** Accepted during the drain, no request yet: logged at their first one unless it is a probe. */
  readonly #acceptedWhileDraining = new WeakSet<TrackedConnection>();
  #probes = 0;
  /** Connections carrying live views, with how many each. */
  readonly #watching = new Map<TrackedConnection, number>();

  constructor(log: LifecycleLog, openConnections: () => number) {
    this.#log = log;
    this.#openConnections = openConnections;
  }

  /** Health-probe connections accepted during the drain (counted, not logged one by one). */
  get probes(): number {
    return this.#probes;
  }

  acceptedWhileDraining(connection: TrackedConnection): void {
    this.#acceptedWhileDraining.add(connection);
  }

  /** A request began on `connection` during the drain. */
  requestWhileDraining(connection: TrackedConnection, probe: boolean): void {
    if (!this.#acceptedWhileDraining.delete(connection)) return;
    if (probe) {
      this.#probes++;
      return;
    }
    const { remoteAddress, remotePort } = connection.socket;
    this.#log.info(
      { event: 'connection_accepted_while_draining', listener: connection.listener, peer: `${remoteAddress}:${remotePort}`, open_connections: this.#openConnections() },
      'accepted a connection while draining',
    );
  }

  watchStarted(connection: TrackedConnection): void {
    this.#watching.set(connection, (this.#watching.get(connection) ?? 0) + 1);
  }

  watchFinished(connection: TrackedConnection): void {
    const left = (this.#watching.get(connection) ?? 1) - 1;
    if (left > 0) this.#watching.set(connection, left);
    else this.#watching.delete(connection);
  }

  /** No connection of `open` is left but those carrying live views. */
  onlyWatchersLeft(open: { readonly size: number; all(): Iterable<TrackedConnection> }): boolean {
    if (open.size > this.#watching.size) return false;
    for (const connection of open.all()) if (!this.#watching.has(connection)) return false;
    return true;
  }
}
