// HTTP/2 sessions: tracked as connections whose requests are streams, and retired with the
// two-step GOAWAY of RFC 9113 §6.8 (L4): first a notice carrying the largest stream id, so streams
// the client is opening right now are still accepted, then, after `drain_timeout_secs`, the final
// GOAWAY with the real last stream id. Open streams finish either way.
import { constants, type ServerHttp2Session } from 'node:http2';
import type { TrackedConnection } from '../lifecycle/connections.ts';
import type { Clock } from '../lifecycle/clock.ts';

const MAX_STREAM_ID = 2 ** 31 - 1;

export class Http2Sessions {
  readonly #connections = new WeakMap<ServerHttp2Session, TrackedConnection>();
  readonly #sessions = new Set<ServerHttp2Session>();
  /** Sessions that got the GOAWAY notice and wait for their final GOAWAY. */
  readonly #noticed = new WeakSet<ServerHttp2Session>();
  readonly #drainTimeoutMs: number;
  readonly #clock: Clock;

  constructor(drainTimeoutMs: number, clock: Clock) {
    this.#drainTimeoutMs = drainTimeoutMs;
    this.#clock = clock;
  }

  add(session: ServerHttp2Session, connection: TrackedConnection): void {
    connection.protocol = 'h2';
    this.#connections.set(session, connection);
    this.#sessions.add(session);
    // Closing a session is a final GOAWAY, not a reset socket; one that already got the notice
    // keeps its drain timeout, so a stream the client is opening right now is not refused.
    connection.gracefulClose = (now) => {
      if (now || !this.#noticed.has(session)) this.close(session);
    };
    connection.retire = () => this.retire(session);
    session.once('close', () => this.#sessions.delete(session));
    session.on('error', () => session.destroy());
  }

  connectionOf(session: ServerHttp2Session): TrackedConnection | undefined {
    return this.#connections.get(session);
  }

  /** L4: the notice now, the final GOAWAY after the drain timeout. Idempotent. */
  retire(session: ServerHttp2Session): void {
    if (session.closed || session.destroyed || this.#noticed.has(session)) return;
    this.#noticed.add(session);
    const connection = this.#connections.get(session);
    if (connection) connection.retiring = true;
    session.goaway(constants.NGHTTP2_NO_ERROR, MAX_STREAM_ID);
    const timer = this.#clock.after(this.#drainTimeoutMs, () => this.close(session));
    session.once('close', () => timer.cancel());
  }

  retireAll(): void {
    for (const session of this.#sessions) this.retire(session);
  }

  /** Final GOAWAY with the last stream id; the session ends when its open streams have. */
  close(session: ServerHttp2Session): void {
    if (!session.closed && !session.destroyed) session.close();
  }
}
