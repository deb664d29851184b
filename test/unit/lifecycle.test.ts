// The drain sequence (rules L1-L10, D3, O1) driven by a ManualClock and fake sockets: no sockets
// are opened and nothing sleeps; time moves only when a test advances it.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Clock } from '../../src/lifecycle/clock.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { Lifecycle } from '../../src/lifecycle/lifecycle.ts';
import type { DrainSettings, ForceEndable, LifecycleCommand, LifecycleHooks } from '../../src/lifecycle/contracts.ts';
import { drainSettings } from '../support/drain-settings.ts';
import { TlsHandshake, type TrackedConnection } from '../../src/lifecycle/connections.ts';
import { WebSocketProtocol } from '../../src/server/upgrade.ts';
import { asHttp2 } from '../support/fake-http2.ts';

/** A socket as far as the lifecycle can tell: it closes (emits 'close') when destroyed. */
class FakeSocket extends EventEmitter {
  destroyed = false;
  /** How the gateway closed it: 'end' (FIN after writes, destroySoon) or 'destroy'; undefined while open. */
  closedBy: 'end' | 'destroy' | 'peer' | undefined = undefined;
  destroySoonCalls = 0;
  destroyCalls = 0;
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** When set, destroySoon() only half-closes: the peer must close (peerClose) for 'close' to fire. */
  readonly holdOnEnd: boolean;
  readonly #onClose: ((how: string) => void) | undefined;

  constructor(port: number, options: { holdOnEnd?: boolean; onClose?: (how: string) => void } = {}) {
    super();
    this.remoteAddress = '192.0.2.7';
    this.remotePort = port;
    this.holdOnEnd = options.holdOnEnd ?? false;
    this.#onClose = options.onClose;
  }

  destroy(): this {
    this.destroyCalls++;
    this.#close('destroy');
    return this;
  }

  destroySoon(): void {
    this.destroySoonCalls++;
    if (this.closedBy === undefined && !this.holdOnEnd) this.#close('end');
  }

  /** The client closes its side. */
  peerClose(): void {
    this.#close(this.destroySoonCalls > 0 ? 'end' : 'peer');
  }

  #close(how: 'end' | 'destroy' | 'peer'): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.closedBy = how;
    this.#onClose?.(how);
    this.emit('close', false);
  }
}

/**
 * BUG workaround (see the todo test below): Lifecycle hands `clock.now` unbound to the
 * ConnectionTracker, and ManualClock.now() reads a private field, so a raw ManualClock throws on
 * the first accepted connection. Until that is fixed the tests use ManualClock through arrows.
 */
function bound(manual: ManualClock): Clock {
  return { now: () => manual.now(), after: (ms, fn) => manual.after(ms, fn), every: (ms, fn) => manual.every(ms, fn) };
}

interface LogLine {
  level: 'info' | 'warn';
  fields: Record<string, unknown>;
  message: string;
}

interface Deferred {
  promise: Promise<void>;
  resolve(): void;
  reject(error: Error): void;
}

function deferred(): Deferred {
  let resolve!: () => void;
  let reject!: (error: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets pending promise callbacks run (no timers are involved). */
const settle = () => nextTurn();

/**
 * The value of a promise that must already be resolving (only microtasks left): a drain that never
 * ends fails the test instead of hanging it.
 */
async function outcome<T>(promise: Promise<T>): Promise<T> {
  const state = watch(promise);
  await settle();
  assert.equal(state.settled, true, 'the drain promise has not resolved');
  return state.value as T;
}

function watch<T>(promise: Promise<T>): { settled: boolean; value: T | undefined } {
  const state: { settled: boolean; value: T | undefined } = { settled: false, value: undefined };
  promise.then((value) => {
    state.settled = true;
    state.value = value;
  });
  return state;
}

function setup(
  settings: Partial<DrainSettings> = {},
  options: { shutdown?: () => Promise<void>; serving?: boolean; commanded?: LifecycleHooks['commanded']; reportDrain?: LifecycleHooks['reportDrain'] } = {},
) {
  const clock = new ManualClock();
  const logs: LogLine[] = [];
  /** Everything that happens, in order: log events, hook calls, socket closes. */
  const order: string[] = [];
  let stopAcceptingCalls = 0;
  let shutdownCalls = 0;
  let port = 40000;
  const hooks: LifecycleHooks = {
    stopAccepting() {
      stopAcceptingCalls++;
      order.push('stopAccepting');
    },
    shutdown() {
      shutdownCalls++;
      order.push('shutdown');
      return options.shutdown ? options.shutdown() : Promise.resolve();
    },
    commanded: options.commanded,
    ...(options.reportDrain ? { reportDrain: options.reportDrain } : {}),
  };
  const record = (level: LogLine['level']) => (fields: object, message: string) => {
    const line = { level, fields: fields as Record<string, unknown>, message };
    logs.push(line);
    order.push(`log:${String(line.fields.event)}`);
  };
  const lifecycle = new Lifecycle({
    clock: bound(clock),
    log: { info: record('info'), warn: record('warn') },
    hooks,
    settings: drainSettings(settings),
  });
  if (options.serving !== false) lifecycle.markServing();

  function connect(name = 'conn', socketOptions: { holdOnEnd?: boolean; listener?: string } = {}) {
    const socket = new FakeSocket(++port, { holdOnEnd: socketOptions.holdOnEnd ?? false, onClose: (how) => order.push(`close:${name}:${how}`) });
    const connection = lifecycle.connections.add(socket as unknown as Socket, socketOptions.listener ?? 'proxy');
    return { socket, connection };
  }
  /** A keep-alive connection that has served one request and waits for the next. */
  function idle(name = 'idle') {
    const c = connect(name);
    lifecycle.requestStarted(c.connection);
    lifecycle.requestFinished(c.connection);
    assert.equal(c.connection.state, 'idle');
    return c;
  }
  /** A connection with a request in flight. */
  function active(name = 'active') {
    const c = connect(name);
    lifecycle.requestStarted(c.connection);
    return c;
  }

  return {
    lifecycle,
    clock,
    logs,
    order,
    connect,
    idle,
    active,
    advanceSecs: (secs: number) => clock.advance(secs * 1000),
    events: (event: string) => logs.filter((l) => l.fields.event === event),
    get stopAcceptingCalls() {
      return stopAcceptingCalls;
    },
    get shutdownCalls() {
      return shutdownCalls;
    },
  };
}

class FakeStream implements ForceEndable {
  readonly reasons: string[] = [];
  readonly #onForceEnd: (() => void) | undefined;
  constructor(onForceEnd?: () => void) {
    this.#onForceEnd = onForceEnd;
  }
  forceEnd(reason: string): void {
    this.reasons.push(reason);
    this.#onForceEnd?.();
  }
}

describe('clock', () => {
  test(
    'Lifecycle works with a ManualClock passed as-is',
    () => {
      const clock = new ManualClock();
      const lifecycle = new Lifecycle({
        clock,
        log: { info() {}, warn() {} },
        hooks: { stopAccepting() {}, shutdown: async () => {} },
        settings: drainSettings({ minDrainSecs: 1 }),
      });
      clock.advance(1234);
      const connection = lifecycle.connections.add(new FakeSocket(1) as unknown as Socket, 'proxy');
      assert.equal(connection.acceptedAt, 1234);
    },
  );

  test('ManualClock: after() fires once when due, every() repeats, cancel() stops, time moves only on advance()', () => {
    const clock = new ManualClock();
    const fired: string[] = [];
    clock.after(100, () => fired.push(`after@${clock.now()}`));
    const tick = clock.every(40, () => fired.push(`every@${clock.now()}`));
    const cancelled = clock.after(50, () => fired.push('cancelled'));
    cancelled.cancel();
    clock.advance(99);
    assert.deepEqual(fired, ['every@40', 'every@80']);
    assert.equal(clock.now(), 99);
    clock.advance(1);
    assert.deepEqual(fired, ['every@40', 'every@80', 'after@100']);
    tick.cancel();
    clock.advance(1000);
    assert.equal(fired.length, 3);
    assert.equal(clock.now(), 1100);
  });

  test('ManualClock: a timer scheduled from a callback fires in the same advance() when due', () => {
    const clock = new ManualClock();
    const fired: number[] = [];
    clock.after(10, () => clock.after(10, () => fired.push(clock.now())));
    clock.advance(25);
    assert.deepEqual(fired, [20]);
  });

  test('a connection records when it was accepted (clock time)', () => {
    const t = setup();
    t.advanceSecs(2.5);
    assert.equal(t.connect().connection.acceptedAt, 2500);
  });
});

describe('L1 readiness', () => {
  test('L1: not ready while starting, ready once serving, not ready from the first moment of the drain', () => {
    const t = setup({}, { serving: false });
    assert.equal(t.lifecycle.state, 'starting');
    assert.equal(t.lifecycle.ready(), false);
    t.lifecycle.markServing();
    assert.equal(t.lifecycle.ready(), true);
    t.active();
    void t.lifecycle.drain('SIGTERM');
    // No clock tick, no microtask: already not ready.
    assert.equal(t.lifecycle.ready(), false);
    assert.equal(t.lifecycle.state, 'draining');
    assert.equal(t.lifecycle.draining, true);
    t.advanceSecs(100);
    assert.equal(t.lifecycle.ready(), false);
  });

  test('L1: markServing() after the drain began does not make it ready again', () => {
    const t = setup();
    void t.lifecycle.drain('SIGTERM');
    t.lifecycle.markServing();
    assert.equal(t.lifecycle.ready(), false);
    assert.equal(t.lifecycle.state, 'draining');
  });
});

describe('L2/L5 listeners keep accepting', () => {
  test('L2: listeners keep accepting for the whole min_drain_secs window, even with nothing in flight', () => {
    const t = setup({ minDrainSecs: 30 });
    t.idle();
    void t.lifecycle.drain('SIGTERM');
    t.clock.advance(29_999);
    assert.equal(t.stopAcceptingCalls, 0);
    assert.equal(t.lifecycle.state, 'draining');
    t.clock.advance(1);
    assert.equal(t.stopAcceptingCalls, 1);
    assert.notEqual(t.lifecycle.state, 'draining');
  });

  test('L2/L5: a request in flight past the window keeps the listeners accepting until it finishes', () => {
    const t = setup({ minDrainSecs: 10 });
    const { connection } = t.active();
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(10);
    assert.equal(t.stopAcceptingCalls, 0, 'window elapsed but a request is in flight');
    t.advanceSecs(300);
    assert.equal(t.stopAcceptingCalls, 0);
    assert.equal(t.lifecycle.state, 'draining');
    assert.equal(t.events('listeners_closing').length, 0);
    t.lifecycle.requestFinished(connection);
    assert.equal(t.stopAcceptingCalls, 1);
    assert.equal(t.events('listeners_closing').length, 1);
  });

  test('L5: in-flight reaching 0 inside the window does not close the listeners early', () => {
    const t = setup({ minDrainSecs: 10 });
    const { connection } = t.active();
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(3);
    t.lifecycle.requestFinished(connection);
    assert.equal(t.stopAcceptingCalls, 0);
    t.advanceSecs(7);
    assert.equal(t.stopAcceptingCalls, 1);
  });

  test('L5: requests that start inside the window also hold the listeners open', () => {
    const t = setup({ minDrainSecs: 10 });
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(9);
    const { connection } = t.active('late');
    t.advanceSecs(5);
    assert.equal(t.stopAcceptingCalls, 0);
    t.lifecycle.requestFinished(connection);
    assert.equal(t.stopAcceptingCalls, 1);
  });
});

describe('L3 retiring connections', () => {
  test('L3: shouldRetire is false while starting and serving, true once draining and after', async () => {
    const t = setup({ minDrainSecs: 1 }, { serving: false });
    assert.equal(t.lifecycle.shouldRetire(), false);
    t.lifecycle.markServing();
    assert.equal(t.lifecycle.shouldRetire(), false);
    const done = t.lifecycle.drain('SIGTERM');
    assert.equal(t.lifecycle.shouldRetire(), true);
    t.advanceSecs(1);
    assert.equal(t.lifecycle.state, 'exited');
    assert.equal(t.lifecycle.shouldRetire(), true);
    assert.equal(await outcome(done), 0);
  });

  test('L3: onRetire callbacks run once when the drain begins; an unsubscribed one does not', () => {
    const t = setup();
    let a = 0;
    let b = 0;
    t.lifecycle.onRetire('proxy', () => a++);
    const unsubscribe = t.lifecycle.onRetire('proxy', () => b++);
    unsubscribe();
    assert.equal(a, 0);
    void t.lifecycle.drain('SIGTERM');
    void t.lifecycle.drain('SIGINT');
    assert.equal(a, 1);
    assert.equal(b, 0);
  });

  test('L3: an HTTP/1.1 connection whose response began before the drain is not closed under its client; its next response closes it, and the listeners closing end it', () => {
    const t = setup({ minDrainSecs: 30 });
    const { socket, connection } = t.active();
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(1);
    t.lifecycle.requestFinished(connection);
    assert.equal(socket.destroyed, false, 'a pooled client may be sending its next request right now');
    assert.equal(connection.retiring, true, 'its next response carries Connection: close');
    t.advanceSecs(30);
    assert.equal(socket.closedBy, 'end', 'ended gracefully once the listeners close');
    assert.equal(t.lifecycle.connections.size, 0);
  });

  test("L3: an HTTP/2 connection whose last stream finishes during the drain is ended with its GOAWAY ('drain_retired')", () => {
    const t = setup({ minDrainSecs: 30 });
    const { connection } = t.active();
    const session = asHttp2(connection);
    void t.lifecycle.drain('SIGTERM');
    t.lifecycle.requestFinished(connection);
    assert.equal(session.goaways, 1);
    assert.equal(connection.closeReason, 'drain_retired');
  });

  test('L3: a response finishing while serving keeps its connection open (idle)', () => {
    const t = setup();
    const { socket, connection } = t.active();
    t.lifecycle.requestFinished(connection);
    assert.equal(socket.destroyed, false);
    assert.equal(connection.state, 'idle');
  });

  test('L3: with two pipelined requests, the connection is retired only after the second finishes', () => {
    const t = setup();
    const { socket, connection } = t.active();
    t.lifecycle.requestStarted(connection);
    void t.lifecycle.drain('SIGTERM');
    t.lifecycle.requestFinished(connection);
    assert.equal(socket.destroyed, false);
    assert.equal(connection.state, 'active');
    assert.equal(connection.retiring, false);
    t.lifecycle.requestFinished(connection);
    assert.equal(connection.retiring, true, 'retired after the second');
    assert.equal(socket.destroyed, false);
  });

  test('L3: an idle keep-alive connection that sends a request during the window is retired after it', () => {
    const t = setup({ minDrainSecs: 30 });
    const { socket, connection } = t.idle();
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(5);
    assert.equal(socket.destroyed, false, 'idle connections stay during the window');
    t.lifecycle.requestStarted(connection);
    t.lifecycle.requestFinished(connection);
    assert.equal(connection.retiring, true);
  });
});

describe('L6 connections after the listeners close', () => {
  test('L6: after stopAccepting, idle connections are ended, fresh ones held until freshConnectionGraceSecs then destroyed', async () => {
    const t = setup({ minDrainSecs: 5, freshConnectionGraceSecs: 10 });
    const idle = t.idle('idle');
    const fresh = t.connect('fresh');
    const done = watch(t.lifecycle.drain('SIGTERM'));
    t.advanceSecs(5);
    assert.equal(t.stopAcceptingCalls, 1);
    assert.equal(idle.socket.closedBy, 'end');
    assert.equal(idle.connection.closeReason, 'drain_idle');
    assert.equal(fresh.socket.destroyed, false, 'a fresh connection is held');
    t.clock.advance(9_999);
    assert.equal(fresh.socket.destroyed, false);
    t.clock.advance(1);
    assert.equal(fresh.socket.closedBy, 'destroy');
    assert.equal(fresh.connection.closeReason, 'drain_fresh_timeout');
    await settle();
    assert.equal(done.settled, true);
    assert.equal(done.value, 0);
  });

  test('L6: a held fresh connection that starts a request is not destroyed by the grace timer (active ones are left), and is retired after its response', async () => {
    const t = setup({ minDrainSecs: 0, freshConnectionGraceSecs: 10 });
    const fresh = t.connect('fresh');
    const done = watch(t.lifecycle.drain('SIGTERM'));
    assert.equal(t.stopAcceptingCalls, 1);
    t.advanceSecs(4);
    t.lifecycle.requestStarted(fresh.connection);
    t.advanceSecs(60);
    assert.equal(fresh.socket.destroyed, false, 'an active connection is left alone');
    assert.equal(fresh.connection.state, 'active');
    await settle();
    assert.equal(done.settled, false);
    t.lifecycle.requestFinished(fresh.connection);
    assert.equal(fresh.connection.closeReason, 'drain_retired');
    assert.equal(fresh.socket.closedBy, 'end');
    await settle();
    assert.equal(done.value, 0);
  });

  test('L6: a connection accepted after the listeners closed is held for the grace, then destroyed', () => {
    const t = setup({ minDrainSecs: 0, freshConnectionGraceSecs: 10 });
    const first = t.connect('first');
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(5);
    const late = t.connect('late');
    t.advanceSecs(5);
    assert.equal(first.connection.closeReason, 'drain_fresh_timeout');
    assert.equal(late.socket.destroyed, false);
    t.advanceSecs(5);
    assert.equal(late.connection.closeReason, 'drain_fresh_timeout');
    assert.equal(late.socket.closedBy, 'destroy');
  });

  test('L7: a WebSocket session holds the drain (in flight) until its socket closes', async () => {
    const t = setup({ minDrainSecs: 0 });
    const ws = t.active('ws');
    ws.connection.upgraded(new WebSocketProtocol(ws.connection));
    assert.equal(ws.connection.state, 'upgraded');
    const done = watch(t.lifecycle.drain('SIGTERM'));
    t.advanceSecs(3600);
    assert.equal(t.stopAcceptingCalls, 0);
    assert.equal(ws.socket.destroyed, false);
    // The session ends: its socket closes, then the exchange is recorded as finished.
    ws.socket.peerClose();
    t.lifecycle.requestFinished(ws.connection);
    assert.equal(t.stopAcceptingCalls, 1);
    assert.equal(ws.socket.destroySoonCalls, 0, 'an upgraded connection is not "retired" by requestFinished');
    await settle();
    assert.equal(done.value, 0);
  });

  test('L6: connections closed by the client are counted out with client_closed / client_closed_fresh', () => {
    const t = setup();
    const closed: [string, string][] = [];
    t.lifecycle.observeConnections(
      () => {},
      (connection, reason) => closed.push([connection.listener, reason]),
    );
    const fresh = t.connect('fresh');
    const used = t.idle('used');
    fresh.socket.peerClose();
    used.socket.peerClose();
    assert.deepEqual(closed, [
      ['proxy', 'client_closed_fresh'],
      ['proxy', 'client_closed'],
    ]);
    assert.equal(t.lifecycle.connections.size, 0);
  });
});

describe('connection deadlines, hand-over and graceful close', () => {
  test('L4: an HTTP/2 connection is ended with its GOAWAY, not with a FIN', () => {
    const t = setup({ minDrainSecs: 0 });
    const h2 = t.idle('h2');
    const session = asHttp2(h2.connection);
    void t.lifecycle.drain('SIGTERM');
    assert.equal(session.goaways, 1);
    assert.equal(h2.socket.destroySoonCalls, 0);
    assert.equal(h2.connection.closeReason, 'drain_idle');
    assert.equal(t.lifecycle.state, 'closing', 'the session is still open until its peer closes');
  });

  test('a TLS hand-over moves the connection to the new socket; the old socket closing does not count it out', () => {
    const t = setup();
    const closed: string[] = [];
    t.lifecycle.observeConnections(
      () => {},
      (_c, reason) => closed.push(reason),
    );
    const raw = t.connect('raw');
    raw.connection.protocol = new TlsHandshake(raw.connection);
    t.advanceSecs(2);
    const tls = new FakeSocket(443);
    t.lifecycle.connections.handOver(raw.connection, tls as unknown as Socket);
    assert.equal(raw.connection.socket, tls as unknown as Socket);
    assert.equal(raw.connection.acceptedAt, 2000);
    assert.equal(t.lifecycle.connections.get(tls as unknown as Socket), raw.connection);
    assert.equal(t.lifecycle.connections.get(raw.socket as unknown as Socket), undefined);
    raw.socket.peerClose();
    assert.equal(t.lifecycle.connections.size, 1);
    assert.deepEqual(closed, []);
    tls.peerClose();
    assert.equal(t.lifecycle.connections.size, 0);
    assert.deepEqual(closed, ['client_closed_fresh']);
  });

  test('while serving, a connection that sends no request within freshTimeoutSecs is destroyed; one mid TLS handshake is not', () => {
    const t = setup({ freshTimeoutSecs: 30 });
    const silent = t.connect('silent');
    const handshaking = t.connect('handshaking');
    handshaking.connection.protocol = new TlsHandshake(handshaking.connection);
    const used = t.idle('used');
    t.clock.advance(29_999);
    assert.equal(silent.socket.destroyed, false);
    t.clock.advance(501);
    assert.equal(silent.socket.closedBy, 'destroy');
    assert.equal(silent.connection.closeReason, 'fresh_timeout');
    assert.equal(handshaking.socket.destroyed, false);
    assert.equal(used.socket.destroyed, false);
  });

  test('idle multiplexed (HTTP/2) connections are ended after idleTimeoutSecs; HTTP/1.1 idle ones are left to the protocol server', () => {
    const t = setup({ idleTimeoutSecs: 60 });
    const h1 = t.idle('h1');
    const h2 = t.connect('h2');
    const session = asHttp2(h2.connection);
    t.advanceSecs(10);
    t.lifecycle.requestStarted(h2.connection);
    t.lifecycle.requestFinished(h2.connection);
    assert.equal(h2.connection.idleSince, 10_000);
    t.advanceSecs(59);
    assert.equal(session.goaways, 0);
    t.advanceSecs(1);
    assert.equal(session.goaways, 1);
    assert.equal(h2.connection.closeReason, 'idle_timeout');
    assert.equal(h1.socket.destroyed, false);
  });

  test('no connection deadlines are enforced when both timeouts are 0', () => {
    const t = setup({ freshTimeoutSecs: 0, idleTimeoutSecs: 0 });
    const silent = t.connect();
    t.advanceSecs(24 * 3600);
    assert.equal(silent.socket.destroyed, false);
  });
});

describe('L8 forced drain', () => {
  test('L8: force() calls forceEnd on tracked streams, ends busy connections gracefully, destroys the rest, exit code 1', async () => {
    const t = setup({ minDrainSecs: 30, freshConnectionGraceSecs: 10 });
    const busy = t.active('busy');
    const idle = t.idle('idle');
    const fresh = t.connect('fresh');
    const stream = new FakeStream();
    const gone = new FakeStream();
    t.lifecycle.trackForceEndable(stream);
    const untrack = t.lifecycle.trackForceEndable(gone);
    untrack();
    const done = watch(t.lifecycle.drain('SIGTERM'));
    t.advanceSecs(2);
    t.lifecycle.force('second SIGTERM');
    assert.deepEqual(stream.reasons, ['second SIGTERM']);
    assert.deepEqual(gone.reasons, []);
    assert.equal(t.stopAcceptingCalls, 1);
    assert.equal(busy.socket.closedBy, 'end', 'a connection with a stream in flight gets FIN after its error event');
    assert.equal(busy.connection.closeReason, 'drain_forced');
    assert.equal(idle.socket.destroyed, true);
    assert.equal(fresh.socket.closedBy, 'destroy');
    assert.equal(fresh.connection.closeReason, 'drain_forced');
    const forced = t.events('drain_forced');
    assert.equal(forced.length, 1);
    assert.equal(forced[0]!.level, 'warn');
    assert.equal(forced[0]!.fields.reason, 'second SIGTERM');
    assert.equal(forced[0]!.fields.in_flight, 1);
    // The stuck request never reports finished: the 1 s backstop ends the process anyway.
    await settle();
    assert.equal(done.settled, false);
    t.clock.advance(999);
    await settle();
    assert.equal(done.settled, false);
    t.clock.advance(1);
    await settle();
    assert.equal(done.value, 1);
    assert.equal(t.shutdownCalls, 1);
    const exit = t.events('process_exit');
    assert.equal(exit[0]!.fields.exit_code, 1);
    assert.equal(exit[0]!.fields.forced, 'second SIGTERM');
  });

  test('L8: when the forced streams finish their responses, the process exits at once with code 1', async () => {
    const t = setup({ minDrainSecs: 30 });
    const busy = t.active('busy');
    t.lifecycle.trackForceEndable(new FakeStream(() => t.lifecycle.requestFinished(busy.connection)));
    const done = t.lifecycle.drain('SIGTERM');
    t.lifecycle.force('second SIGTERM');
    assert.equal(t.lifecycle.state, 'exited');
    assert.equal(await outcome(done), 1);
  });

  test('L8: a WebSocket session in flight is ended gracefully (FIN after its close frame), not destroyed', () => {
    const t = setup({ minDrainSecs: 30 });
    const ws = t.active('ws');
    ws.connection.upgraded(new WebSocketProtocol(ws.connection));
    void t.lifecycle.drain('SIGTERM');
    t.lifecycle.force('second SIGTERM');
    assert.equal(ws.socket.closedBy, 'end');
    assert.equal(ws.connection.closeReason, 'drain_forced');
  });

  test('L8: max_drain_secs forces the drain when it runs out', async () => {
    const t = setup({ minDrainSecs: 5, maxDrainSecs: 60 });
    const busy = t.active();
    const stream = new FakeStream();
    t.lifecycle.trackForceEndable(stream);
    const done = watch(t.lifecycle.drain('SIGTERM'));
    t.clock.advance(59_999);
    assert.deepEqual(stream.reasons, []);
    assert.equal(t.events('drain_forced').length, 0);
    t.clock.advance(1);
    assert.deepEqual(stream.reasons, ['max_drain_secs']);
    assert.equal(busy.connection.closeReason, 'drain_forced');
    t.advanceSecs(1);
    await settle();
    assert.equal(done.value, 1);
  });

  test('L8: max_drain_secs 0 means no deadline', () => {
    const t = setup({ minDrainSecs: 5, maxDrainSecs: 0 });
    t.active();
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(24 * 3600);
    assert.equal(t.events('drain_forced').length, 0);
    assert.equal(t.lifecycle.state, 'draining');
  });

  test('E7: a drain given forceAfter is forced at that deadline with its reason, max_drain_secs or not', async () => {
    const t = setup({ minDrainSecs: 5, maxDrainSecs: 0 });
    t.active();
    const stream = new FakeStream();
    t.lifecycle.trackForceEndable(stream);
    const done = watch(t.lifecycle.drain('hot_restart', { graceful: false, forceAfter: { secs: 30, reason: 'shutdown.parent_shutdown_secs' } }));
    t.clock.advance(29_999);
    assert.deepEqual(stream.reasons, []);
    assert.equal(t.lifecycle.state, 'draining');
    t.clock.advance(1);
    assert.deepEqual(stream.reasons, ['shutdown.parent_shutdown_secs']);
    assert.equal(t.lifecycle.forcedReason, 'shutdown.parent_shutdown_secs');
    t.advanceSecs(1);
    await settle();
    assert.equal(done.value, 1);
  });

  test('E7: a drain in progress takes a later forceAfter; the earlier deadline still holds', () => {
    const t = setup({ minDrainSecs: 5, maxDrainSecs: 60 });
    t.active();
    const stream = new FakeStream();
    t.lifecycle.trackForceEndable(stream);
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(10);
    void t.lifecycle.drain('hot_restart', { forceAfter: { secs: 20, reason: 'shutdown.parent_shutdown_secs' } });
    t.clock.advance(19_999);
    assert.deepEqual(stream.reasons, []);
    t.clock.advance(1);
    assert.deepEqual(stream.reasons, ['shutdown.parent_shutdown_secs']);
    const late = setup({ minDrainSecs: 5, maxDrainSecs: 60 });
    late.active();
    const other = new FakeStream();
    late.lifecycle.trackForceEndable(other);
    void late.lifecycle.drain('SIGTERM');
    void late.lifecycle.drain('hot_restart', { forceAfter: { secs: 120, reason: 'shutdown.parent_shutdown_secs' } });
    late.advanceSecs(60);
    assert.deepEqual(other.reasons, ['max_drain_secs'], 'the settings\' deadline, when it comes first');
  });

  test('L8: a second force() is ignored', () => {
    const t = setup();
    t.active();
    const stream = new FakeStream();
    t.lifecycle.trackForceEndable(stream);
    void t.lifecycle.drain('SIGTERM');
    t.lifecycle.force('first');
    t.lifecycle.force('second');
    assert.deepEqual(stream.reasons, ['first']);
    assert.equal(t.events('drain_forced').length, 1);
  });

  test('L8: force() without a drain starts one and still exits 1', async () => {
    const t = setup({ minDrainSecs: 30 });
    t.active();
    t.lifecycle.force('fatal');
    assert.equal(t.events('drain_started').length, 1);
    t.advanceSecs(1);
    await settle();
    assert.equal(t.lifecycle.state, 'exited');
    assert.equal(await outcome(t.lifecycle.drain('again')), 1);
  });

  test(
    'L8: force() with nothing in flight and min_drain_secs 0 still exits with code 1',
    async () => {
      const t = setup({ minDrainSecs: 0 });
      t.lifecycle.force('fatal');
      assert.equal(await outcome(t.lifecycle.drain('again')), 1);
      const events = t.logs.map((l) => l.fields.event);
      assert.ok(events.indexOf('drain_forced') < events.indexOf('process_exit'), events.join(','));
    },
  );
});

describe('drain() promise', () => {
  test('a second drain() call returns the same promise and starts nothing new', async () => {
    const t = setup({ minDrainSecs: 1 });
    const first = t.lifecycle.drain('SIGTERM');
    const second = t.lifecycle.drain('SIGINT');
    assert.equal(first, second);
    assert.equal(t.events('drain_started').length, 1);
    assert.equal(t.events('drain_started')[0]!.fields.trigger, 'SIGTERM');
    t.advanceSecs(1);
    assert.equal(await outcome(first), 0);
    assert.equal(t.lifecycle.drain('late'), first);
  });

  test('D3: min_drain_secs 0 with nothing in flight closes at once', async () => {
    const t = setup({ minDrainSecs: 0 });
    const idle = t.idle();
    const done = t.lifecycle.drain('SIGTERM');
    // Synchronously, with no clock advance:
    assert.equal(t.stopAcceptingCalls, 1);
    assert.equal(idle.connection.closeReason, 'drain_idle');
    assert.equal(t.shutdownCalls, 1);
    assert.equal(t.lifecycle.state, 'exited');
    assert.equal(await outcome(done), 0);
    assert.equal(t.clock.now(), 0);
  });

  test('D3: min_drain_secs 0 with a request in flight waits for it, then closes at once', async () => {
    const t = setup({ minDrainSecs: 0 });
    const busy = t.active();
    const done = watch(t.lifecycle.drain('SIGTERM'));
    assert.equal(t.stopAcceptingCalls, 0);
    t.advanceSecs(2);
    t.lifecycle.requestFinished(busy.connection);
    assert.equal(t.stopAcceptingCalls, 1);
    await settle();
    assert.equal(done.value, 0);
  });

  test('L9: the shutdown hook is called once, and the drain promise resolves 0 only after the last connection closes', async () => {
    const t = setup({ minDrainSecs: 0, freshConnectionGraceSecs: 10 });
    const fresh = t.connect('fresh');
    const slow = t.idle('slow-peer');
    // This peer does not answer our FIN at once.
    const holding = t.connect('holding', { holdOnEnd: true });
    t.lifecycle.requestStarted(holding.connection);
    t.lifecycle.requestFinished(holding.connection);
    const done = watch(t.lifecycle.drain('SIGTERM'));
    assert.equal(slow.socket.destroyed, true);
    assert.equal(holding.socket.destroySoonCalls, 1);
    assert.equal(holding.socket.destroyed, false);
    fresh.socket.peerClose();
    await settle();
    assert.equal(t.shutdownCalls, 0);
    assert.equal(done.settled, false);
    holding.socket.peerClose();
    assert.equal(t.shutdownCalls, 1);
    await settle();
    assert.equal(done.value, 0);
    t.advanceSecs(3600);
    t.connect('after exit').socket.peerClose();
    await settle();
    assert.equal(t.shutdownCalls, 1);
  });

  test('L9: the drain promise resolves after hooks.shutdown() resolves', async () => {
    const gate = deferred();
    const t = setup({ minDrainSecs: 0 }, { shutdown: () => gate.promise });
    const done = watch(t.lifecycle.drain('SIGTERM'));
    assert.equal(t.shutdownCalls, 1);
    await settle();
    assert.equal(done.settled, false);
    gate.resolve();
    await settle();
    assert.equal(done.value, 0);
  });

  test('L9: a failing shutdown hook makes the exit code 1', async () => {
    const t = setup({ minDrainSecs: 0 }, { shutdown: () => Promise.reject(new Error('flush failed')) });
    assert.equal(await outcome(t.lifecycle.drain('SIGTERM')), 1);
  });

  test('drainSeconds() is 0 before the drain and counts from its start', async () => {
    const t = setup({ minDrainSecs: 10 });
    t.advanceSecs(100);
    assert.equal(t.lifecycle.status.seconds(), 0);
    const done = t.lifecycle.drain('SIGTERM');
    t.advanceSecs(4);
    assert.equal(t.lifecycle.status.seconds(), 4);
    t.advanceSecs(6);
    await outcome(done);
    assert.equal(t.lifecycle.status.seconds(), 10);
  });
});

describe('L10 in-flight accounting', () => {
  test('L10: the in-flight count is exact across starts and finishes, with and without a tracked connection', () => {
    const t = setup();
    const a = t.connect('a');
    const b = t.connect('b');
    const counts: number[] = [];
    const step = (fn: () => void) => {
      fn();
      counts.push(t.lifecycle.inFlight);
    };
    step(() => t.lifecycle.requestStarted(a.connection));
    step(() => t.lifecycle.requestStarted(a.connection));
    step(() => t.lifecycle.requestStarted(b.connection));
    step(() => t.lifecycle.requestStarted(undefined));
    assert.equal(a.connection.inFlight, 2);
    assert.equal(b.connection.inFlight, 1);
    step(() => t.lifecycle.requestFinished(b.connection));
    step(() => t.lifecycle.requestFinished(a.connection));
    assert.equal(a.connection.state, 'active');
    step(() => t.lifecycle.requestFinished(undefined));
    step(() => t.lifecycle.requestFinished(a.connection));
    assert.deepEqual(counts, [1, 2, 3, 4, 3, 2, 1, 0]);
    assert.equal(a.connection.inFlight, 0);
    assert.equal(a.connection.state, 'idle');
    assert.equal(b.connection.state, 'idle');
  });

  test('L10: connection states and counts by listener', () => {
    const t = setup();
    t.connect('f1');
    t.connect('f2', { listener: 'admin' });
    t.idle('i1');
    t.active('a1');
    const counts = t.lifecycle.connections.counts().sort((x, y) => `${x.listener}${x.state}`.localeCompare(`${y.listener}${y.state}`));
    assert.deepEqual(counts, [
      { listener: 'admin', state: 'fresh', count: 1 },
      { listener: 'proxy', state: 'active', count: 1 },
      { listener: 'proxy', state: 'fresh', count: 1 },
      { listener: 'proxy', state: 'idle', count: 1 },
    ]);
  });

  test('L10: a request that outlives its connection still holds the drain until it finishes', async () => {
    const t = setup({ minDrainSecs: 0 });
    const busy = t.active();
    const done = watch(t.lifecycle.drain('SIGTERM'));
    busy.socket.peerClose();
    assert.equal(t.lifecycle.connections.size, 0);
    assert.equal(t.stopAcceptingCalls, 0);
    await settle();
    assert.equal(done.settled, false);
    t.lifecycle.requestFinished(busy.connection);
    await settle();
    assert.equal(done.value, 0);
  });
});

describe('O1 logs', () => {
  test('O1: drain_started carries trigger, min_drain_secs, in_flight and open_connections', () => {
    const t = setup({ minDrainSecs: 12, maxDrainSecs: 90 });
    t.active();
    t.idle();
    t.connect();
    void t.lifecycle.drain('SIGTERM');
    const [started] = t.events('drain_started');
    assert.ok(started);
    assert.equal(started.level, 'info');
    assert.deepEqual(started.fields, {
      event: 'drain_started',
      trigger: 'SIGTERM',
      min_drain_secs: 12,
      max_drain_secs: 90,
      strategy: 'immediate',
      inbound_only: false,
      exit: true,
      in_flight: 1,
      open_connections: 3,
      waiting_for: { window_secs_left: 12, requests: 1, streams: 0, sessions: 0, workers: 0 },
      probe_connections: 0,
    });
  });

  test('O1: drain progress is logged every progress_log_secs until the exit', async () => {
    const t = setup({ minDrainSecs: 30, progressLogSecs: 5 });
    const busy = t.active();
    const done = t.lifecycle.drain('SIGTERM');
    t.clock.advance(4_999);
    assert.equal(t.events('drain_progress').length, 0);
    t.clock.advance(1);
    assert.equal(t.events('drain_progress').length, 1);
    t.advanceSecs(15);
    const progress = t.events('drain_progress');
    assert.deepEqual(
      progress.map((p) => p.fields.elapsed_secs),
      [5, 10, 15, 20],
    );
    assert.deepEqual(progress[0]!.fields, {
      event: 'drain_progress',
      state: 'draining',
      in_flight: 1,
      open_connections: 1,
      elapsed_secs: 5,
      waiting_for: { window_secs_left: 25, requests: 1, streams: 0, sessions: 0, workers: 0 },
      probe_connections: 0,
    });
    assert.equal(progress[0]!.message, 'still draining: window open 25 s more (still accepting, for the load balancer); in flight: 1 request, 0 streams, 0 sessions');
    t.advanceSecs(20);
    assert.equal(t.events('drain_progress').at(-1)!.fields.elapsed_secs, 40);
    assert.equal(t.events('drain_progress').at(-1)!.message, 'still draining: window over; waiting for 1 request, 0 streams, 0 sessions');
    t.lifecycle.requestFinished(busy.connection);
    await outcome(done);
    const count = t.events('drain_progress').length;
    t.advanceSecs(60);
    assert.equal(t.events('drain_progress').length, count, 'no progress lines after the exit');
  });

  test('O1: listeners_closing is logged when the listeners close, with in_flight, open_connections, elapsed_secs', () => {
    const t = setup({ minDrainSecs: 7 });
    t.idle();
    t.connect();
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(7);
    const [closing] = t.events('listeners_closing');
    assert.ok(closing);
    assert.deepEqual(closing.fields, { event: 'listeners_closing', in_flight: 0, open_connections: 2, elapsed_secs: 7 });
  });

  test('O1: process_exit carries exit_code and drain_duration_secs', async () => {
    const t = setup({ minDrainSecs: 3 });
    const busy = t.active();
    t.advanceSecs(50);
    const done = t.lifecycle.drain('SIGTERM');
    t.clock.advance(4_250);
    t.lifecycle.requestFinished(busy.connection);
    assert.equal(await outcome(done), 0);
    const [exit] = t.events('process_exit');
    assert.ok(exit);
    assert.deepEqual(exit.fields, { event: 'process_exit', exit_code: 0, drain_duration_secs: 4.25, forced: null });
  });

  test('O1: process_exit waits for a drain line still being written (a supervisor asking its workers for the group\'s numbers), and stays the last line', async () => {
    const written = deferred();
    const lines: string[] = [];
    const t = setup({ minDrainSecs: 0 }, { reportDrain: (report) => written.promise.then(() => void lines.push(report.event)) });
    const done = watch(t.lifecycle.drain('SIGTERM'));
    await settle();
    // Nothing in flight and no window: the drain is over at once, but its first line is not written yet.
    assert.equal(t.lifecycle.state, 'exited');
    assert.deepEqual(t.events('process_exit'), []);
    assert.equal(t.shutdownCalls, 0);
    assert.equal(done.settled, false);
    written.resolve();
    await settle();
    assert.deepEqual(lines, ['drain_started']);
    assert.equal(t.events('process_exit').length, 1);
    assert.deepEqual(t.order.slice(-2), ['log:process_exit', 'shutdown']);
    assert.equal(done.settled, true);
    assert.equal(done.value, 0);
  });

  test('O1: without such a line (one process), process_exit and the shutdown follow the drain at once', () => {
    const t = setup({ minDrainSecs: 0 });
    void t.lifecycle.drain('SIGTERM');
    assert.equal(t.events('process_exit').length, 1);
    assert.equal(t.shutdownCalls, 1);
  });

  test('O1: connection_accepted_while_draining names the listener and the peer, at its first request; not logged while serving', () => {
    const t = setup();
    t.lifecycle.requestStarted(t.connect('before').connection);
    assert.equal(t.events('connection_accepted_while_draining').length, 0);
    void t.lifecycle.drain('SIGTERM');
    const { socket, connection } = t.connect('during', { listener: 'admin' });
    assert.equal(t.events('connection_accepted_while_draining').length, 0, 'not before its first request: it may be a probe');
    t.lifecycle.requestStarted(connection);
    t.lifecycle.requestFinished(connection);
    t.lifecycle.requestStarted(connection);
    const lines = t.events('connection_accepted_while_draining');
    assert.equal(lines.length, 1);
    assert.deepEqual(lines[0]!.fields, {
      event: 'connection_accepted_while_draining',
      listener: 'admin',
      peer: `192.0.2.7:${socket.remotePort}`,
      open_connections: 2,
    });
  });

  test('O1: a connection whose first request is a health probe is counted, not logged', () => {
    const t = setup();
    void t.lifecycle.drain('SIGTERM');
    for (let i = 0; i < 3; i++) t.lifecycle.requestStarted(t.connect(`probe${i}`).connection, true);
    t.lifecycle.requestStarted(t.connect('client').connection, false);
    assert.equal(t.events('connection_accepted_while_draining').length, 1);
    assert.equal(t.lifecycle.status.probeConnections, 3);
    t.advanceSecs(5);
    assert.equal(t.events('drain_progress')[0]!.fields.probe_connections, 3);
  });

  test('waiting_for counts streams and sessions by what their force-ends say they are', () => {
    const t = setup({ minDrainSecs: 0 });
    for (let i = 0; i < 4; i++) t.active(`a${i}`);
    t.lifecycle.trackForceEndable({ forceEnd: () => {}, kind: () => 'stream' });
    t.lifecycle.trackForceEndable({ forceEnd: () => {}, kind: () => 'session' });
    t.lifecycle.trackForceEndable({ forceEnd: () => {}, kind: () => 'request' });
    t.lifecycle.trackForceEndable({ forceEnd: () => {} });
    void t.lifecycle.drain('SIGTERM');
    assert.deepEqual(t.lifecycle.status.waitingFor(), { window_secs_left: 0, requests: 2, streams: 1, sessions: 1, workers: 0 });
    assert.equal(t.events('drain_started')[0]!.message, 'drain started: window over; waiting for 2 requests, 1 stream, 1 session');
  });

  test('observeConnections sees every accept and close with its reason', () => {
    const t = setup({ minDrainSecs: 0, freshConnectionGraceSecs: 1 });
    const accepted: TrackedConnection[] = [];
    const closed: string[] = [];
    t.lifecycle.observeConnections(
      (c) => accepted.push(c),
      (_c, reason) => closed.push(reason),
    );
    t.idle();
    t.connect();
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(1);
    assert.equal(accepted.length, 2);
    assert.deepEqual(closed, ['drain_idle', 'drain_fresh_timeout']);
  });
});

describe('phase order', () => {
  test('close order: readiness fails → window → stopAccepting → idle closed → shutdown → resolve', async () => {
    const t = setup({ minDrainSecs: 10, freshConnectionGraceSecs: 5, progressLogSecs: 4 });
    t.idle('idle');
    const done = t.lifecycle.drain('SIGTERM').then((code) => t.order.push(`resolved:${code}`));
    t.order.push(`ready:${t.lifecycle.ready()}`);
    t.clock.advance(9_999);
    t.order.push('window-1ms');
    t.clock.advance(1);
    await outcome(done);
    assert.deepEqual(t.order, [
      'log:drain_started',
      'ready:false',
      'log:drain_progress',
      'log:drain_progress',
      'window-1ms',
      'log:listeners_closing',
      'stopAccepting',
      'close:idle:end',
      'log:process_exit',
      'shutdown',
      'resolved:0',
    ]);
  });

  test('close order with a fresh connection: its grace ends before shutdown', async () => {
    const t = setup({ minDrainSecs: 2, freshConnectionGraceSecs: 3, progressLogSecs: 100 });
    t.idle('idle');
    t.connect('fresh');
    const done = t.lifecycle.drain('SIGTERM').then((code) => t.order.push(`resolved:${code}`));
    t.advanceSecs(5);
    await outcome(done);
    assert.deepEqual(t.order, [
      'log:drain_started',
      'log:listeners_closing',
      'stopAccepting',
      'close:idle:end',
      'close:fresh:destroy',
      'log:process_exit',
      'shutdown',
      'resolved:0',
    ]);
  });
});

describe('a supervisor of worker processes', () => {
  test('L5/L9: a hold keeps the drain open like a request: the listeners close and the process exits only once every hold is released', async () => {
    const t = setup({ minDrainSecs: 1 });
    const releaseA = t.lifecycle.hold();
    const releaseB = t.lifecycle.hold();
    const done = watch(t.lifecycle.drain('SIGTERM'));
    t.advanceSecs(5);
    assert.equal(t.lifecycle.state, 'draining');
    assert.equal(t.stopAcceptingCalls, 0);
    releaseA();
    releaseA(); // idempotent: one hold is released once
    assert.equal(t.lifecycle.state, 'draining');
    releaseB();
    assert.equal(t.stopAcceptingCalls, 1);
    await settle();
    assert.equal(done.value, 0);
    assert.equal(t.lifecycle.inFlight, 0, 'holds are not requests');
  });

  test('E4/L8: every drain, force and health-check change is passed to the commanded hook, with its options', () => {
    const commands: LifecycleCommand[] = [];
    const t = setup({ minDrainSecs: 30 }, { commanded: (c) => commands.push(c) });
    assert.equal(t.lifecycle.health.fail(), true);
    assert.equal(t.lifecycle.health.fail(), false); // no change, nothing passed on
    t.lifecycle.health.restore();
    void t.lifecycle.drain('admin:/drain_listeners', { graceful: true, exit: false, windowSecs: 2 });
    void t.lifecycle.drain('SIGTERM');
    t.lifecycle.force('second SIGTERM');
    assert.deepEqual(commands, [
      { kind: 'healthcheck', failed: true },
      { kind: 'healthcheck', failed: false },
      { kind: 'drain', trigger: 'admin:/drain_listeners', options: { graceful: true, exit: false, windowSecs: 2 } },
      { kind: 'drain', trigger: 'SIGTERM', options: {} },
      { kind: 'force', reason: 'second SIGTERM' },
    ]);
  });
});
