// The live view's parts without sockets: a watch holds no drain (L5) while its connection stays
// counted; the open streams and sessions, oldest first and capped; the drain's moments; and the
// status feed: no snapshot while nobody watches, ticks skipped for a watcher that does not read,
// the cap on watchers, and the last `exited` event.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Clock } from '../../src/lifecycle/clock.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { Lifecycle } from '../../src/lifecycle/lifecycle.ts';
import type { ExchangeFacts } from '../../src/lifecycle/contracts.ts';
import { StatusFeed } from '../../src/admin/status-feed.ts';
import type { RequestContext } from '../../src/server/context.ts';
import { drainSettings } from '../support/drain-settings.ts';

class FakeSocket extends EventEmitter {
  destroyed = false;
  remoteAddress = '192.0.2.1';
  remotePort = 1;
  destroy(): this {
    if (!this.destroyed) {
      this.destroyed = true;
      this.emit('close', false);
    }
    return this;
  }
  destroySoon(): void {
    this.destroy();
  }
}

function setup(minDrainSecs = 1) {
  const manual = new ManualClock();
  const clock: Clock = { now: () => manual.now(), after: (ms, fn) => manual.after(ms, fn), every: (ms, fn) => manual.every(ms, fn) };
  let shutdowns = 0;
  const lifecycle = new Lifecycle({
    clock,
    log: { info: () => {}, warn: () => {} },
    settings: drainSettings({ minDrainSecs }),
    hooks: { stopAccepting: () => {}, shutdown: async () => void shutdowns++ },
  });
  lifecycle.markServing();
  const connect = () => {
    const socket = new FakeSocket();
    return { socket, connection: lifecycle.connections.add(socket as unknown as Socket, 'admin') };
  };
  return { manual, lifecycle, connect, shutdowns: () => shutdowns };
}

describe('a watch and the drain', () => {
  test('L5: a watch is not in flight: the drain finishes with the watcher connected, and the connection is counted as active until then', async () => {
    const { manual, lifecycle, connect, shutdowns } = setup(1);
    const { connection } = connect();
    lifecycle.watchStarted(connection);
    assert.equal(lifecycle.inFlight, 0);
    assert.deepEqual(lifecycle.connections.counts(), [{ listener: 'admin', state: 'active', count: 1 }]);
    const done = lifecycle.drain('SIGTERM');
    manual.advance(1000);
    assert.equal(lifecycle.state, 'exited', 'the watcher held the drain');
    assert.equal(await done, 0);
    assert.equal(shutdowns(), 1);
    assert.deepEqual(lifecycle.status.moments().map((m) => m.event), ['drain_started', 'window_over', 'listeners_closed', 'exited']);
    lifecycle.watchFinished(connection);
    assert.equal(lifecycle.inFlight, 0, 'nothing left counted');
  });

  test('L5: a request on another connection still holds the listeners open; once it ends they close, its connection is closed, the watcher\'s is not, and the process exits', () => {
    const { manual, lifecycle, connect } = setup(1);
    const watcher = connect();
    const other = connect();
    lifecycle.watchStarted(watcher.connection);
    lifecycle.requestStarted(other.connection);
    void lifecycle.drain('SIGTERM');
    manual.advance(1500);
    assert.equal(lifecycle.state, 'draining', 'the request holds the listeners open');
    lifecycle.requestFinished(other.connection);
    // The request's connection is closed as the listeners close; the watcher's stays.
    assert.equal(other.socket.destroyed, true);
    assert.equal(watcher.socket.destroyed, false);
    assert.equal(lifecycle.state, 'exited');
  });

  test('L6: a fresh connection still holds the exit for its grace; the watcher\'s connection does not', () => {
    const { manual, lifecycle, connect } = setup(0);
    const shared = connect();
    const fresh = connect();
    lifecycle.watchStarted(shared.connection);
    void lifecycle.drain('SIGTERM');
    manual.advance(10);
    // A fresh connection (no request yet) is held for its grace (L6), watcher or not.
    assert.equal(lifecycle.state, 'closing');
    fresh.socket.destroy();
    assert.equal(lifecycle.state, 'exited');
  });
});

describe('open streams and sessions', () => {
  test('only streams and sessions are listed, oldest first, at most the limit; plain requests and work without facts are left out', () => {
    const { lifecycle } = setup();
    const facts = (age: number, endpoint: string): ExchangeFacts => ({ endpoint, model: 'm'.repeat(300), protocol: 'http1', listener: 'proxy', durationSeconds: () => age });
    lifecycle.trackForceEndable({ forceEnd: () => {}, kind: () => 'stream', exchange: facts(2, 'a') });
    lifecycle.trackForceEndable({ forceEnd: () => {}, kind: () => 'session', exchange: facts(9, 'b') });
    lifecycle.trackForceEndable({ forceEnd: () => {}, kind: () => 'request', exchange: facts(50, 'c') });
    lifecycle.trackForceEndable({ forceEnd: () => {}, kind: () => 'stream' });
    const untrack = lifecycle.trackForceEndable({ forceEnd: () => {}, kind: () => 'stream', exchange: facts(5, 'd') });
    const open = lifecycle.status.openWork(2);
    assert.equal(open.total, 3);
    assert.deepEqual(open.oldest.map((o) => [o.kind, o.endpoint, o.age_secs]), [['session', 'b', 9], ['stream', 'd', 5]]);
    assert.equal(open.oldest[0]!.model.length, 200, 'a client-given model name is cut');
    untrack();
    assert.equal(lifecycle.status.openWork(50).total, 2);
  });
});

/** A response as far as the feed can tell. */
class FakeResponse extends EventEmitter {
  written: string[] = [];
  headersSent = false;
  writableEnded = false;
  destroyed = false;
  statusCode = 0;
  /** What write() answers: false when the socket's buffer is full. */
  fits = true;
  shouldKeepAlive = true;
  writeHead(status: number): this {
    this.statusCode = status;
    this.headersSent = true;
    return this;
  }
  write(text: string): boolean {
    this.written.push(text);
    return this.fits;
  }
  end(text?: string, done?: () => void): this {
    if (text) this.written.push(text);
    this.writableEnded = true;
    done?.();
    this.emit('close');
    return this;
  }
  destroy(): this {
    this.destroyed = true;
    this.emit('close');
    return this;
  }
}

const decision = { shouldRetire: () => false, onRetire: () => () => {} };
const context = (res: FakeResponse) => ({ res, connection: undefined, listener: 'admin', protocol: 'http1', id: 'r', responseHeaders: undefined, errorCode: '', dialect: 'openai' }) as unknown as RequestContext;
const events = (res: FakeResponse, name: string) => res.written.filter((w) => w.startsWith(`event: ${name}\n`));

describe('the status feed', () => {
  function feed(max = 2) {
    let snapshots = 0;
    const f = new StatusFeed({
      snapshot: async () => ({ n: ++snapshots }),
      exited: (forced) => ({ exit_code: forced ? 1 : 0, forced: forced ?? null }),
      intervalMs: () => 5,
      maxWatchers: max,
      failed: (error) => assert.fail(String(error)),
    });
    return { f, snapshots: () => snapshots };
  }
  const ticks = (n: number) => new Promise((r) => setTimeout(r, n * 5 + 20));

  test('nothing is computed while nobody watches; ticks start with the first watcher and stop with the last', async () => {
    const { f, snapshots } = feed();
    await ticks(3);
    assert.equal(snapshots(), 0);
    const res = new FakeResponse();
    f.serve(context(res), decision);
    assert.equal(res.statusCode, 200);
    await ticks(4);
    assert.ok(events(res, 'status').length >= 2);
    res.destroy();
    await nextTurn();
    const after = snapshots();
    await ticks(4);
    assert.equal(snapshots(), after, 'ticks go on with nobody watching');
  });

  test('a watcher that does not read misses ticks instead of having them buffered; it gets them again once drained', async () => {
    const { f } = feed();
    const slow = new FakeResponse();
    const quick = new FakeResponse();
    f.serve(context(slow), decision);
    f.serve(context(quick), decision);
    slow.fits = false;
    await ticks(6);
    assert.equal(events(slow, 'status').length, 1, 'only the write that did not fit');
    assert.ok(events(quick, 'status').length >= 4);
    assert.ok(f.skipped >= 3);
    slow.fits = true;
    slow.emit('drain');
    await ticks(3);
    assert.ok(events(slow, 'status').length >= 2);
    await f.close(undefined);
  });

  test('at most maxWatchers at once: the next gets 429 too_many_watchers', async () => {
    const { f } = feed(1);
    const first = new FakeResponse();
    const second = new FakeResponse();
    f.serve(context(first), decision);
    f.serve(context(second), decision);
    assert.equal(second.statusCode, 429);
    assert.match(second.written.join(''), /too_many_watchers/);
    await f.close(undefined);
  });

  test('close: every watcher gets exited as its last event and its stream ends; a watcher arriving after is told at once', async () => {
    const { f } = feed();
    const res = new FakeResponse();
    f.serve(context(res), decision);
    await ticks(2);
    await f.close(undefined);
    assert.equal(res.writableEnded, true);
    assert.ok(res.written.at(-1)!.startsWith('event: exited\n'));
    assert.match(res.written.at(-1)!, /"exit_code":0/);
    const late = new FakeResponse();
    f.serve(context(late), decision);
    assert.deepEqual(late.written.map((w) => w.split('\n')[0]), ['event: exited']);
    assert.equal(late.writableEnded, true);
  });

  test('L8: a forced drain ends a watcher with exited and the reason', async () => {
    const { f } = feed();
    const res = new FakeResponse();
    const ctx = context(res);
    f.serve(ctx, decision);
    ctx.forceEnder!.forceEnd('second SIGTERM');
    assert.match(res.written.at(-1)!, /^event: exited\ndata: \{"exit_code":1,"forced":"second SIGTERM"\}/);
    assert.equal(f.watchers, 0);
  });
});
