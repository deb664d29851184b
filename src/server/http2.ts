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
import type { TrackedConnection } from '../lifecycle/connections.ts';

export class Http2Sessions {
  readonly #connections = new WeakMap<ServerHttp2Session, TrackedConnection>();
  readonly #sessions = new Set<ServerHttp2Session>();

  add(session: ServerHttp2Session, connection: TrackedConnection): void {
    connection.protocol = 'h2';
    this.#connections.set(session, connection);
    this.#sessions.add(session);
    // Closing a session is a GOAWAY, never a reset socket.
    connection.gracefulClose = () => this.retire(session);
    connection.retire = () => this.retire(session);
    session.once('close', () => this.#sessions.delete(session));
    session.on('error', () => session.destroy());
  }

  connectionOf(session: ServerHttp2Session): TrackedConnection | undefined {
    return this.#connections.get(session);
  }

  /** L4: the GOAWAY with the last stream id; the session ends when its open streams have. Idempotent. */
  retire(session: ServerHttp2Session): void {
    const connection = this.#connections.get(session);
    if (connection) connection.retiring = true;
    if (!session.closed && !session.destroyed) session.close();
  }

  retireAll(): void {
    for (const session of this.#sessions) this.retire(session);
  }
}
