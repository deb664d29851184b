// Knows every downstream connection, its listener and its state, so the drain can close idle ones,
// hold fresh ones (L6) and tell when the last one is gone.
import type { Socket } from 'node:net';

export type ConnectionState = 'fresh' | 'idle' | 'active' | 'upgraded';

export interface TrackedConnection {
  readonly socket: Socket;
  readonly listener: string;
  readonly acceptedAt: number;
  state: ConnectionState;
  /** Requests in flight on this connection (HTTP/1.1 pipelining may make it more than one). */
  inFlight: number;
  /** Set when the connection must close once its current response is done (L3). */
  retiring: boolean;
  closeReason: string | undefined;
}

export interface ConnectionEvents {
  accepted(connection: TrackedConnection): void;
  closed(connection: TrackedConnection, reason: string): void;
}

export class ConnectionTracker {
  readonly #connections = new Map<Socket, TrackedConnection>();
  readonly #events: ConnectionEvents;
  readonly #now: () => number;

  constructor(events: ConnectionEvents, now: () => number) {
    this.#events = events;
    this.#now = now;
  }

  get size(): number {
    return this.#connections.size;
  }

  add(socket: Socket, listener: string): TrackedConnection {
    const connection: TrackedConnection = {
      socket,
      listener,
      acceptedAt: this.#now(),
      state: 'fresh',
      inFlight: 0,
      retiring: false,
      closeReason: undefined,
    };
    this.#connections.set(socket, connection);
    socket.once('close', () => {
      this.#connections.delete(socket);
      this.#events.closed(connection, connection.closeReason ?? (connection.state === 'fresh' ? 'client_closed_fresh' : 'client_closed'));
    });
    this.#events.accepted(connection);
    return connection;
  }

  get(socket: Socket): TrackedConnection | undefined {
    return this.#connections.get(socket);
  }

  requestStarted(connection: TrackedConnection): void {
    connection.inFlight++;
    if (connection.state !== 'upgraded') connection.state = 'active';
  }

  /** Returns true when the connection has nothing left in flight. */
  requestFinished(connection: TrackedConnection): boolean {
    connection.inFlight--;
    if (connection.inFlight > 0 || connection.state === 'upgraded') return false;
    connection.state = 'idle';
    return true;
  }

  upgraded(connection: TrackedConnection): void {
    connection.state = 'upgraded';
  }

  /** Ends the connection gracefully (FIN after pending writes), recording why. */
  end(connection: TrackedConnection, reason: string): void {
    connection.closeReason ??= reason;
    // Sends FIN after pending writes, then destroys: a peer that never answers our FIN must not
    // hold the drain open.
    connection.socket.destroySoon();
  }

  destroy(connection: TrackedConnection, reason: string): void {
    connection.closeReason ??= reason;
    connection.socket.destroy();
  }

  *all(): IterableIterator<TrackedConnection> {
    yield* this.#connections.values();
  }

  counts(): { listener: string; state: ConnectionState; count: number }[] {
    const byKey = new Map<string, { listener: string; state: ConnectionState; count: number }>();
    for (const c of this.#connections.values()) {
      const key = `${c.listener}\0${c.state}`;
      const entry = byKey.get(key);
      if (entry) entry.count++;
      else byKey.set(key, { listener: c.listener, state: c.state, count: 1 });
    }
    return [...byKey.values()];
  }
}
