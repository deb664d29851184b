// Knows every downstream connection, its listener and its state, so the drain can close idle ones,
// hold fresh ones (L6) and tell when the last one is gone.
import type { Socket } from 'node:net';

export type ConnectionState = 'fresh' | 'idle' | 'active' | 'upgraded';

export interface TrackedConnection {
  /** The transport: the TCP socket, then the TLS socket once the handshake is done. */
  socket: Socket;
  readonly listener: string;
  /** When the connection was accepted, or when its TLS handshake completed. */
  acceptedAt: number;
  /** When the last request on it finished (for idle timeouts of multiplexed protocols). */
  idleSince: number;
  /** 'http1', 'h2', or 'tls' while the handshake is under way. */
  protocol: string;
  state: ConnectionState;
  /** Requests in flight on this connection (HTTP/1.1 pipelining may make it more than one). */
  inFlight: number;
  /** Set when the connection must close once its current response is done (L3). */
  retiring: boolean;
  closeReason: string | undefined;
  /** How to close it gracefully when the protocol has its own way (HTTP/2: GOAWAY, open streams finish). */
  gracefulClose: (() => void) | undefined;
  /** How to tell a multiplexed connection's client to go elsewhere soon (HTTP/2: GOAWAY). */
  retire: (() => void) | undefined;
}

export interface ConnectionEvents {
  accepted(connection: TrackedConnection): void;
  /** A connection over the limit was closed before it was tracked. */
  rejected?(listener: string): void;
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

  /** The most connections open at once across listeners; 0 is no limit. */
  limit = 0;

  /**
   * Tracks a new connection, or closes it at once (returning undefined) when the limit is reached:
   * refusing early is cheaper than serving badly once the process is out of memory or descriptors.
   */
  admit(socket: Socket, listener: string): TrackedConnection | undefined {
    if (this.limit > 0 && this.#connections.size >= this.limit) {
      socket.destroy();
      this.#events.rejected?.(listener);
      return undefined;
    }
    return this.add(socket, listener);
  }

  add(socket: Socket, listener: string): TrackedConnection {
    const connection: TrackedConnection = {
      socket,
      listener,
      acceptedAt: this.#now(),
      idleSince: 0,
      protocol: 'http1',
      state: 'fresh',
      inFlight: 0,
      retiring: false,
      closeReason: undefined,
      gracefulClose: undefined,
      retire: undefined,
    };
    this.#watch(connection, socket);
    this.#events.accepted(connection);
    return connection;
  }

  /** The connection now runs over `socket` (a TLS socket over the TCP one it was accepted on). */
  handOver(connection: TrackedConnection, socket: Socket): void {
    this.#connections.delete(connection.socket);
    connection.socket = socket;
    connection.acceptedAt = this.#now();
    this.#watch(connection, socket);
  }

  #watch(connection: TrackedConnection, socket: Socket): void {
    this.#connections.set(socket, connection);
    socket.once('close', () => {
      // After a hand-over the old socket's close is not the connection's.
      if (this.#connections.get(socket) !== connection) return;
      this.#connections.delete(socket);
      this.#events.closed(connection, connection.closeReason ?? (connection.state === 'fresh' ? 'client_closed_fresh' : 'client_closed'));
    });
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
    connection.idleSince = this.#now();
    return true;
  }

  upgraded(connection: TrackedConnection): void {
    connection.state = 'upgraded';
  }

  /** Ends the connection gracefully (FIN after pending writes), recording why. */
  end(connection: TrackedConnection, reason: string): void {
    connection.closeReason ??= reason;
    if (connection.gracefulClose) {
      connection.gracefulClose();
      return;
    }
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
