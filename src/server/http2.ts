// HTTP/2 sessions: tracked as connections whose requests are streams, and retired with one GOAWAY
// carrying the real last stream id (L4); open streams finish, and the session ends once they have.
//
// Why not RFC 9113 §6.8's two steps (a notice with the largest stream id, the final GOAWAY a few
// seconds later)? Node's HTTP/2 has no shutdown notice: `session.goaway()` is nghttp2's
// `submit_goaway`, after which nghttp2 ignores every new stream, whatever id the frame carried. A
// stream that crossed such a "notice" went unanswered until the final GOAWAY refused it
// `drain_timeout_secs` later. With the final GOAWAY at once, a stream that crosses it is refused
// at once, and its id above the GOAWAY's last stream id tells the client it was not processed and
// is safe to retry on a new connection.
import type { ServerHttp2Session } from 'node:http2';
import type { ConnectionProtocol } from '../lifecycle/contracts.ts';
import type { TrackedConnection } from '../lifecycle/connections.ts';

/** The part of a session its protocol object uses (a test gives its own). */
export type Http2SessionLike = Pick<ServerHttp2Session, 'closed' | 'destroyed' | 'close'>;

/**
 * A connection carrying an HTTP/2 session. Retiring and closing it are the same: the GOAWAY with
 * the last stream id, after which open streams finish and the session ends (L4). Closing a session
 * is a GOAWAY, never a reset socket.
 */
export class Http2Protocol implements ConnectionProtocol {
  readonly name = 'h2';
  readonly multiplexed = true;
  readonly #session: Http2SessionLike;
  readonly #connection: TrackedConnection;

  constructor(session: Http2SessionLike, connection: TrackedConnection) {
    this.#session = session;
    this.#connection = connection;
  }

  /** L4: the GOAWAY; the session ends when its open streams have. Idempotent: one GOAWAY. */
  retire(): void {
    this.#connection.markRetiring();
    if (!this.#session.closed && !this.#session.destroyed) this.#session.close();
  }

  close(): void {
    this.retire();
  }

  destroy(): void {
    this.#connection.socket.destroy();
  }
}

/**
 * The HTTP/2 sessions of one protocol server (a listener's generation). The session → connection
 * map may be shared by a listener's generations, so that a request on an older generation's
 * session finds its connection in one lookup.
 */
export class Http2Sessions {
  readonly #connections: WeakMap<ServerHttp2Session, TrackedConnection>;
  readonly #sessions = new Map<ServerHttp2Session, Http2Protocol>();

  constructor(connections = new WeakMap<ServerHttp2Session, TrackedConnection>()) {
    this.#connections = connections;
  }

  /** The session runs over `connection`, which from now on ends as HTTP/2 does. */
  add(session: ServerHttp2Session, connection: TrackedConnection): void {
    const protocol = new Http2Protocol(session, connection);
    connection.protocol = protocol;
    this.#connections.set(session, connection);
    this.#sessions.set(session, protocol);
    session.once('close', () => this.#sessions.delete(session));
    session.on('error', () => session.destroy());
  }

  connectionOf(session: ServerHttp2Session): TrackedConnection | undefined {
    return this.#connections.get(session);
  }

  /** L4: every open session gets its GOAWAY (an immediate drain, a failed health check). */
  retireAll(): void {
    for (const protocol of this.#sessions.values()) protocol.retire();
  }
}
