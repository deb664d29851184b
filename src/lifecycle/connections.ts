// Knows every downstream connection, its listener, its state and its protocol, so the drain can
// close idle ones, hold fresh ones (L6) and tell when the last one is gone. How a connection is
// told to go, closed or destroyed is its protocol's (ConnectionProtocol): HTTP/1.1 and the TLS
// handshake are here, HTTP/2 and WebSocket in server/.
import type { Socket } from 'node:net';

/** A connection's protocol as logs and labels name it. */
export type ProtocolName = 'tls' | 'http1' | 'h2' | 'websocket';

/**
 * How a tracked connection ends, as its protocol wants it (L3, L4, E3): the lifecycle asks this
 * object and never tells HTTP/1.1 from HTTP/2 itself. HTTP/1.1 (every connection's protocol when
 * accepted) and the TLS handshake are in `connections.ts`; HTTP/2 and WebSocket in `server/`.
 */
export interface ConnectionProtocol {
  /** 'tls' while the handshake is under way, then 'http1' or 'h2'; 'websocket' once upgraded. */
  readonly name: ProtocolName;
  /**
   * Requests are streams over the connection (HTTP/2). Its close announces the last stream it
   * processed (GOAWAY), so it can be closed once its last request has finished without racing a
   * request the client is sending; and its idle timeout is the lifecycle's (`idle_timeout_secs`),
   * as no protocol server keeps one. (HTTP/1.1's is the protocol server's keep-alive timeout.)
   */
  readonly multiplexed: boolean;
  /**
   * Tells the client to go elsewhere soon (L3, L4, E2, E6). HTTP/1.1: nothing is sent, the
   * connection's `retiring` makes its next response close it. HTTP/2: the GOAWAY with the last
   * stream id. A WebSocket session cannot be told (E3). Idempotent.
   */
  retire(): void;
  /**
   * Ends it gracefully. HTTP/1.1, a handshake, WebSocket: FIN after pending writes, then destroyed
   * (a peer that never answers the FIN cannot hold the drain open). HTTP/2: the GOAWAY; open
   * streams finish and the session ends once they have. Idempotent.
   */
  close(): void;
  /** Ends it now: the socket is destroyed. */
  destroy(): void;
}

export type ConnectionState = 'fresh' | 'idle' | 'active' | 'upgraded';

export interface TrackedConnection {
  /** The transport: the TCP socket, then the TLS socket once the handshake is done. */
  socket: Socket;
  readonly listener: string;
  /** When the connection was accepted, or when its TLS handshake completed. */
  acceptedAt: number;
  /** When the last request on it finished (for idle timeouts of multiplexed protocols). */
  idleSince: number;
  /**
   * How it ends (`name`: 'http1', 'h2', 'websocket', or 'tls' while the handshake is under way).
   * HTTP/1.1 when accepted; the listener, the HTTP/2 session and the upgrade replace it.
   */
  protocol: ConnectionProtocol;
  state: ConnectionState;
  /** Requests in flight on this connection (HTTP/1.1 pipelining may make it more than one). */
  inFlight: number;
  /** Set when the connection must close once its current response is done (L3). */
  retiring: boolean;
  /** E2/E6: a retired connection still idle or fresh at `at` is then ended (checked by the sweep). */
  drainDeadline: { readonly at: number; readonly reason: string } | undefined;
  closeReason: string | undefined;
}

/**
 * A protocol with nothing of its own to say when the connection ends: the socket's FIN, or its
 * reset, is the goodbye. Retiring sends nothing.
 */
export abstract class SocketProtocol implements ConnectionProtocol {
  abstract readonly name: ProtocolName;
  readonly multiplexed = false;
  readonly #connection: { readonly socket: Socket };

  /** The connection, not its socket: a TLS hand-over replaces the socket. */
  constructor(connection: { readonly socket: Socket }) {
    this.#connection = connection;
  }

  retire(): void {}

  /** FIN after pending writes, then destroyed: a peer that never answers the FIN cannot hold the drain open. */
  close(): void {
    this.#connection.socket.destroySoon();
  }

  destroy(): void {
    this.#connection.socket.destroy();
  }
}

/**
 * HTTP/1.1, every connection's protocol until told otherwise. Retiring it sends nothing: its
 * `retiring` makes its next response carry `Connection: close` (L3), as closing it under a client
 * that may be sending its next request would lose that request.
 */
export class Http1Protocol extends SocketProtocol {
  readonly name = 'http1';
}

/**
 * A TLS connection until its handshake completes: no request can have begun, and the handshake's
 * own timeout bounds it, not the fresh-connection timeout.
 */
export class TlsHandshake extends SocketProtocol {
  readonly name = 'tls';
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
      protocol: undefined!, // just below: it needs the connection
      state: 'fresh',
      inFlight: 0,
      retiring: false,
      drainDeadline: undefined,
      closeReason: undefined,
    };
    connection.protocol = new Http1Protocol(connection);
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

  /** The connection now carries `protocol` (a WebSocket session) until it closes. */
  upgraded(connection: TrackedConnection, protocol: ConnectionProtocol): void {
    connection.state = 'upgraded';
    connection.protocol = protocol;
  }

  /** Ends the connection gracefully, as its protocol does (see ConnectionProtocol.close), recording why. */
  end(connection: TrackedConnection, reason: string): void {
    connection.closeReason ??= reason;
    connection.protocol.close();
  }

  /** Ends the connection now, recording why. */
  destroy(connection: TrackedConnection, reason: string): void {
    connection.closeReason ??= reason;
    connection.protocol.destroy();
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
