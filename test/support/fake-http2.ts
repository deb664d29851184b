// An HTTP/2 session as its connection's protocol (src/server/http2.ts, Http2Protocol) and
// Http2Sessions use it, with no socket: close() is the GOAWAY, counted; destroy() emits 'close'.
import { EventEmitter } from 'node:events';
import type { TrackedConnection } from '../../src/lifecycle/connections.ts';
import { Http2Protocol } from '../../src/server/http2.ts';

export class FakeHttp2Session extends EventEmitter {
  closed = false;
  destroyed = false;
  goaways = 0;
  close(): void {
    this.goaways++;
    this.closed = true;
  }
  destroy(): void {
    this.destroyed = true;
    this.emit('close');
  }
}

/** Makes `connection` an HTTP/2 one over a fake session, and returns the session. */
export function asHttp2(connection: TrackedConnection): FakeHttp2Session {
  const session = new FakeHttp2Session();
  connection.protocol = new Http2Protocol(session, connection);
  return session;
}
