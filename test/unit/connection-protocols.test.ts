// The connection protocol objects (ConnectionProtocol): how each protocol is told to go, closed and
// destroyed, and where the response head asks them (L3, L4, E3). Fake sockets and sessions.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import type { ServerHttp2Session } from 'node:http2';
import type { ServerResponse } from 'node:http';
import { ConnectionTracker, TlsHandshake, type TrackedConnection } from '../../src/lifecycle/connections.ts';
import type { DrainDecision } from '../../src/lifecycle/contracts.ts';
import { Http2Sessions } from '../../src/server/http2.ts';
import { WebSocketProtocol } from '../../src/server/upgrade.ts';
import { FakeHttp2Session } from '../support/fake-http2.ts';
import { writeHead } from '../../src/server/respond.ts';
import type { RequestContext } from '../../src/server/context.ts';

class FakeSocket extends EventEmitter {
  destroyed = false;
  closedBy: 'end' | 'destroy' | undefined;
  destroySoon(): void {
    this.#close('end');
  }
  destroy(): this {
    this.#close('destroy');
    return this;
  }
  #close(how: 'end' | 'destroy'): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.closedBy = how;
    this.emit('close', false);
  }
}

function setup() {
  const closed: string[] = [];
  const tracker = new ConnectionTracker({ accepted() {}, closed: (_c, reason) => closed.push(reason) }, () => 0);
  const connect = () => {
    const socket = new FakeSocket();
    return { socket, connection: tracker.add(socket as unknown as Socket, 'proxy') };
  };
  const h2 = () => {
    const c = connect();
    const session = new FakeHttp2Session();
    sessions.add(session as unknown as ServerHttp2Session, c.connection);
    return { ...c, session };
  };
  const sessions = new Http2Sessions();
  return { tracker, closed, connect, h2, sessions };
}

describe('HTTP/1.1 (every connection when accepted)', () => {
  test('retiring sends nothing; ending is a FIN after pending writes; destroying resets', () => {
    const t = setup();
    const a = t.connect();
    assert.equal(a.connection.protocol.name, 'http1');
    assert.equal(a.connection.protocol.multiplexed, false);
    a.connection.protocol.retire();
    assert.equal(a.socket.destroyed, false, 'its next response closes it (L3)');
    a.connection.end('drain_idle');
    assert.equal(a.socket.closedBy, 'end');
    const b = t.connect();
    b.connection.destroy('drain_forced');
    assert.equal(b.socket.closedBy, 'destroy');
    assert.deepEqual(t.closed, ['drain_idle', 'drain_forced']);
  });

  test('after a TLS hand-over the protocol ends the TLS socket, not the TCP one under it', () => {
    const t = setup();
    const raw = t.connect();
    raw.connection.protocol = new TlsHandshake(raw.connection);
    assert.equal(raw.connection.protocol.name, 'tls');
    const tls = new FakeSocket();
    t.tracker.handOver(raw.connection, tls as unknown as Socket);
    raw.connection.end('drain_idle');
    assert.equal(tls.closedBy, 'end');
    assert.equal(raw.socket.destroyed, false);
  });
});

describe('HTTP/2 (Http2Protocol)', () => {
  test('a session makes its connection HTTP/2: multiplexed, retired with one GOAWAY however often it is told or closed', () => {
    const t = setup();
    const c = t.h2();
    assert.equal(c.connection.protocol.name, 'h2');
    assert.equal(c.connection.protocol.multiplexed, true);
    c.connection.protocol.retire();
    assert.equal(c.session.goaways, 1);
    assert.equal(c.connection.retiring, true);
    c.connection.protocol.retire();
    c.connection.end('drain_retired');
    t.sessions.retireAll();
    assert.equal(c.session.goaways, 1);
    assert.equal(c.socket.destroyed, false, 'a GOAWAY, never a reset socket: open streams finish');
    assert.equal(c.connection.closeReason, 'drain_retired');
  });

  test('retireAll() gives every open session its GOAWAY, and none to a session that has closed', () => {
    const t = setup();
    const open = t.h2();
    const gone = t.h2();
    gone.session.destroy();
    t.sessions.retireAll();
    assert.equal(open.session.goaways, 1);
    assert.equal(open.connection.retiring, true);
    assert.equal(gone.session.goaways, 0);
    assert.equal(t.sessions.connectionOf(open.session as unknown as ServerHttp2Session), open.connection);
  });

  test('destroying an HTTP/2 connection resets its socket', () => {
    const t = setup();
    const c = t.h2();
    c.connection.destroy('drain_forced');
    assert.equal(c.socket.closedBy, 'destroy');
    assert.equal(c.session.goaways, 0);
  });
});

describe('WebSocket (an upgraded connection)', () => {
  test('E3: retiring sends nothing; ending is a FIN after pending writes (after the 1001 close frame of a forced end)', () => {
    const t = setup();
    const ws = t.connect();
    t.tracker.requestStarted(ws.connection);
    ws.connection.upgraded(new WebSocketProtocol(ws.connection));
    assert.equal(ws.connection.state, 'upgraded');
    assert.equal(ws.connection.protocol.name, 'websocket');
    assert.equal(ws.connection.protocol.multiplexed, false);
    ws.connection.protocol.retire();
    assert.equal(ws.socket.destroyed, false);
    ws.connection.end('drain_forced');
    assert.equal(ws.socket.closedBy, 'end');
  });
});

describe('the response head asks the protocol (L3, L4)', () => {
  const retireAll: DrainDecision = { shouldRetire: () => true, onRetire: () => () => {} };
  const keep: DrainDecision = { shouldRetire: () => false, onRetire: () => () => {} };

  function context(connection: TrackedConnection, protocol: 'http1' | 'h2') {
    const res = { shouldKeepAlive: true, heads: 0, writeHead() { this.heads++; } };
    const ctx = { res: res as unknown as ServerResponse, connection, listener: 'proxy', protocol, id: 'req-1' } as unknown as RequestContext;
    return { ctx, res };
  }

  test('L3: an HTTP/1.1 response that retires its connection closes it after itself, and nothing is sent before', () => {
    const t = setup();
    const c = t.connect();
    const { ctx, res } = context(c.connection, 'http1');
    writeHead(ctx, retireAll, 200, {});
    assert.equal(res.shouldKeepAlive, false);
    assert.equal(c.connection.retiring, true);
    assert.equal(c.socket.destroyed, false);
    assert.equal(res.heads, 1);
  });

  test('L3: a response on a connection already retiring closes it, whatever the drain says now', () => {
    const t = setup();
    const c = t.connect();
    c.connection.markRetiring();
    const { ctx, res } = context(c.connection, 'http1');
    writeHead(ctx, keep, 200, {});
    assert.equal(res.shouldKeepAlive, false);
  });

  test('L4: HTTP/2 responses that retire their connection send one GOAWAY between them; a response that does not retire sends none', () => {
    const t = setup();
    const kept = t.h2();
    writeHead(context(kept.connection, 'h2').ctx, keep, 200, {});
    assert.equal(kept.session.goaways, 0);
    assert.equal(kept.connection.retiring, false);
    const c = t.h2();
    writeHead(context(c.connection, 'h2').ctx, retireAll, 200, {});
    writeHead(context(c.connection, 'h2').ctx, retireAll, 200, {});
    assert.equal(c.session.goaways, 1);
    assert.equal(c.connection.retiring, true);
  });
});
