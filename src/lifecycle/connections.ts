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

/**
 * One downstream connection: its listener, its state, its protocol and how it ends. The state is
 * its own: the tracker moves it (a request started, finished, an upgrade, a TLS hand-over), and
 * whoever decides that it ends (retirement.ts) calls `retire()`, `end()` or `destroy()`.
 */
export class TrackedConnection {
  readonly listener: string;
  #socket: Socket;
  #acceptedAt: number;
  #idleSince = 0;
  #protocol: ConnectionProtocol;
  #state: ConnectionState = 'fresh';
  #inFlight = 0;
  #retiring = false;
  #deadline: { readonly at: number; readonly reason: string } | undefined;
  #closeReason: string | undefined;

  constructor(socket: Socket, listener: string, acceptedAt: number) {
    this.#socket = socket;
    this.listener = listener;
    this.#acceptedAt = acceptedAt;
    this.#protocol = new Http1Protocol(this);
  }

  /** The transport: the TCP socket, then the TLS socket once the handshake is done. */
  get socket(): Socket {
    return this.#socket;
  }

  /** When the connection was accepted, or when its TLS handshake completed. */
  get acceptedAt(): number {
    return this.#acceptedAt;
  }

  /** When the last request on it finished (for idle timeouts of multiplexed protocols). */
  get idleSince(): number {
    return this.#idleSince;
  }

  /**
   * How it ends (`name`: 'http1', 'h2', 'websocket', or 'tls' while the handshake is under way).
   * HTTP/1.1 when accepted; the listener and the HTTP/2 session replace it (an upgrade: `upgraded`).
   */
  get protocol(): ConnectionProtocol {
    return this.#protocol;
  }

  set protocol(protocol: ConnectionProtocol) {
    this.#protocol = protocol;
  }

  get state(): ConnectionState {
    return this.#state;
  }

  /** Requests in flight on this connection (HTTP/1.1 pipelining may make it more than one). */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** It was told to go: its current response is its last (L3). */
  get retiring(): boolean {
    return this.#retiring;
  }

  /** E2/E6: a retired connection still idle or fresh at `at` is then ended (checked by the sweep). */
  get drainDeadline(): { readonly at: number; readonly reason: string } | undefined {
    return this.#deadline;
  }

  /** Why it ended, once something ended it (the first reason given wins). */
  get closeReason(): string | undefined {
    return this.#closeReason;
  }

  /** Records why it is ending, unless a reason was recorded first (a TLS handshake's failure). */
  noteCloseReason(reason: string): void {
    this.#closeReason ??= reason;
  }

  /**
   * Tells the client to go (L3, L4, E2, E6): through its protocol (HTTP/2: the GOAWAY), and its
   * next response closes it (HTTP/1.1: `Connection: close`). Idempotent.
   */
  retire(): void {
    if (this.#retiring) return;
    this.#retiring = true;
    this.#protocol.retire();
  }

  /** Its protocol told the client to go on its own (an HTTP/2 GOAWAY sent by the session's close). */
  markRetiring(): void {
    this.#retiring = true;
  }

  /** Once `at` has passed, the sweep ends it if it is then idle or fresh (E2, E6, E7). */
  endIfIdleBy(at: number, reason: string): void {
    this.#deadline = { at, reason };
  }

  /** The deadline, if `now` has reached it; taken once. */
  takeDeadline(now: number): { readonly reason: string } | undefined {
    const deadline = this.#deadline;
    if (!deadline || now < deadline.at) return undefined;
    this.#deadline = undefined;
    return deadline;
  }

  /** Ends it gracefully, as its protocol does (see ConnectionProtocol.close), recording why. */
  end(reason: string): void {
    this.#closeReason ??= reason;
    this.#protocol.close();
  }

  /** Ends it now, recording why. */
  destroy(reason: string): void {
    this.#closeReason ??= reason;
    this.#protocol.destroy();
  }

  // The tracker's: what happened on the connection.

  /** A request (or a live view) began on it. */
  started(): void {
    this.#inFlight++;
    if (this.#state !== 'upgraded') this.#state = 'active';
  }

  /** One ended; true when nothing is left in flight (it is idle now). */
  finished(now: number): boolean {
    this.#inFlight--;
    if (this.#inFlight > 0 || this.#state === 'upgraded') return false;
    this.#state = 'idle';
    this.#idleSince = now;
    return true;
  }

  /** It carries `protocol` (a WebSocket session) until it closes. */
  upgraded(protocol: ConnectionProtocol): void {
    this.#state = 'upgraded';
    this.#protocol = protocol;
  }

  /** It runs over `socket` now (a TLS socket over the TCP one it was accepted on). */
  handedOver(socket: Socket, now: number): void {
    this.#socket = socket;
    this.#acceptedAt = now;
  }
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

/** Observers of the connections for metrics and logs: told before the owner's events. */
type Observers = Partial<ConnectionEvents>;

/** The connections of the process, by socket and by listener. */
export class ConnectionTracker {
  readonly #bySocket = new Map<Socket, TrackedConnection>();
  readonly #byListener = new Map<string, Set<TrackedConnection>>();
  readonly #events: ConnectionEvents;
  readonly #now: () => number;
  #observers: Observers = {};

  constructor(events: ConnectionEvents, now: () => number) {
    this.#events = events;
    this.#now = now;
  }

  /** Observers for metrics and logs (set once by the composition root). */
  observe(accepted: Observers['accepted'], closed: Observers['closed'], rejected?: Observers['rejected']): void {
    this.#observers = { accepted, closed, rejected };
  }

  get size(): number {
    return this.#bySocket.size;
  }

  /** The most connections open at once across listeners; 0 is no limit. */
  limit = 0;

  /**
   * Tracks a new connection, or closes it at once (returning undefined) when the limit is reached:
   * refusing early is cheaper than serving badly once the process is out of memory or descriptors.
   */
  admit(socket: Socket, listener: string): TrackedConnection | undefined {
    if (this.limit > 0 && this.#bySocket.size >= this.limit) {
      socket.destroy();
      this.#observers.rejected?.(listener);
      this.#events.rejected?.(listener);
      return undefined;
    }
    return this.add(socket, listener);
  }

  add(socket: Socket, listener: string): TrackedConnection {
    const connection = new TrackedConnection(socket, listener, this.#now());
    let ofListener = this.#byListener.get(listener);
    if (!ofListener) this.#byListener.set(listener, (ofListener = new Set()));
    ofListener.add(connection);
    this.#watch(connection, socket);
    this.#observers.accepted?.(connection);
    this.#events.accepted(connection);
    return connection;
  }

  /** The connection now runs over `socket` (a TLS socket over the TCP one it was accepted on). */
  handOver(connection: TrackedConnection, socket: Socket): void {
    this.#bySocket.delete(connection.socket);
    connection.handedOver(socket, this.#now());
    this.#watch(connection, socket);
  }

  #watch(connection: TrackedConnection, socket: Socket): void {
    this.#bySocket.set(socket, connection);
    socket.once('close', () => {
      // After a hand-over the old socket's close is not the connection's.
      if (this.#bySocket.get(socket) !== connection) return;
      this.#bySocket.delete(socket);
      const ofListener = this.#byListener.get(connection.listener)!;
      ofListener.delete(connection);
      if (ofListener.size === 0) this.#byListener.delete(connection.listener);
      const reason = connection.closeReason ?? (connection.state === 'fresh' ? 'client_closed_fresh' : 'client_closed');
      this.#observers.closed?.(connection, reason);
      this.#events.closed(connection, reason);
    });
  }

  get(socket: Socket): TrackedConnection | undefined {
    return this.#bySocket.get(socket);
  }

  requestStarted(connection: TrackedConnection): void {
    connection.started();
  }

  /** Returns true when the connection has nothing left in flight. */
  requestFinished(connection: TrackedConnection): boolean {
    return connection.finished(this.#now());
  }

  *all(): IterableIterator<TrackedConnection> {
    yield* this.#bySocket.values();
  }

  /** The connections of one listener. */
  *of(listener: string): IterableIterator<TrackedConnection> {
    const ofListener = this.#byListener.get(listener);
    if (ofListener) yield* ofListener;
  }

  counts(): { listener: string; state: ConnectionState; count: number }[] {
    const counts: { listener: string; state: ConnectionState; count: number }[] = [];
    for (const [listener, connections] of this.#byListener) {
      const byState = new Map<ConnectionState, number>();
      for (const c of connections) byState.set(c.state, (byState.get(c.state) ?? 0) + 1);
      for (const [state, count] of byState) counts.push({ listener, state, count });
    }
    return counts;
  }
}
