// Edges of the drain logic that mutation testing (npm run mutation, docs/reliability.md) found
// unchecked: boundaries, defaults, drains started late, widening, the connection limit, and what
// must not happen after the exit. Fake clock, fake sockets, fixed random source.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Clock, TimerHandle } from '../../src/lifecycle/clock.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { closeProbability, proactiveDrainAt } from '../../src/lifecycle/drain-policy.ts';
import { ConnectionTracker } from '../../src/lifecycle/connections.ts';
import { Lifecycle } from '../../src/lifecycle/lifecycle.ts';
import { SWEEP_MS } from '../../src/lifecycle/retirement.ts';
import type { DrainSettings, ForceEndable, LifecycleCommand } from '../../src/lifecycle/contracts.ts';
import { drainSettings } from '../support/drain-settings.ts';
import { asHttp2 } from '../support/fake-http2.ts';
import { WebSocketProtocol } from '../../src/server/upgrade.ts';

class FakeSocket extends EventEmitter {
  destroyed = false;
  closedBy: 'end' | 'destroy' | undefined;
  remoteAddress = '192.0.2.9';
  remotePort = 9;
  /** When set, destroySoon() only half-closes: the socket stays open (a peer that never answers). */
  holdOnEnd = false;
  destroy(): this {
    this.#close('destroy');
    return this;
  }
  destroySoon(): void {
    if (!this.holdOnEnd) this.#close('end');
  }
  #close(how: 'end' | 'destroy'): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.closedBy = how;
    this.emit('close', false);
  }
}

/** A ManualClock that also tells which timers are still pending (set, not fired, not cancelled). */
class WatchedClock implements Clock {
  readonly manual = new ManualClock();
  readonly #pending = new Set<object>();
  now(): number {
    return this.manual.now();
  }
  after(ms: number, fn: () => void): TimerHandle {
    const key = {};
    this.#pending.add(key);
    const handle = this.manual.after(ms, () => {
      this.#pending.delete(key);
      fn();
    });
    return { cancel: () => (this.#pending.delete(key), handle.cancel()) };
  }
  every(ms: number, fn: () => void): TimerHandle {
    const key = {};
    this.#pending.add(key);
    const handle = this.manual.every(ms, fn);
    return { cancel: () => (this.#pending.delete(key), handle.cancel()) };
  }
  get pending(): number {
    return this.#pending.size;
  }
}

const LISTENERS = ['proxy', 'egress', 'out', 'admin', 'unregistered'];

function setup(settings: Partial<DrainSettings> = {}, random: () => number = () => 0.5) {
  const clock = new WatchedClock();
  const logs: { fields: Record<string, unknown>; message: string }[] = [];
  const log = (fields: object, message: string) => logs.push({ fields: fields as Record<string, unknown>, message });
  const stopped: string[][] = [];
  const commands: LifecycleCommand[] = [];
  let shutdownCalls = 0;
  const lifecycle = new Lifecycle({
    clock,
    random,
    log: { info: log, warn: log },
    hooks: {
      stopAccepting: (include) => stopped.push(LISTENERS.filter((name) => !include || include(name))),
      shutdown: async () => {
        shutdownCalls++;
      },
      commanded: (command) => commands.push(command),
    },
    settings: drainSettings(settings),
  });
  lifecycle.registerListener('proxy', { drainType: 'default', direction: 'inbound' });
  lifecycle.registerListener('egress', { drainType: 'modify_only', direction: 'outbound' });
  lifecycle.registerListener('out', { drainType: 'default', direction: 'outbound' });
  lifecycle.registerListener('admin', { drainType: 'default', direction: 'inbound', admin: true });
  const closed: string[] = [];
  const rejected: string[] = [];
  lifecycle.observeConnections(
    () => {},
    (_c, reason) => closed.push(reason),
    (listener) => rejected.push(listener),
  );
  lifecycle.markServing();
  const connect = (listener = 'proxy') => {
    const socket = new FakeSocket();
    return { socket, connection: lifecycle.connections.add(socket as unknown as Socket, listener) };
  };
  const active = (listener = 'proxy') => {
    const c = connect(listener);
    lifecycle.requestStarted(c.connection);
    return c;
  };
  const idle = (listener = 'proxy') => {
    const c = active(listener);
    lifecycle.requestFinished(c.connection);
    return c;
  };
  /** An HTTP/2 connection over a fake session that counts its GOAWAYs. */
  const h2 = (listener = 'proxy') => {
    const c = connect(listener);
    return { ...c, session: asHttp2(c.connection) };
  };
  return {
    clock,
    lifecycle,
    logs,
    stopped,
    commands,
    closed,
    rejected,
    connect,
    active,
    idle,
    h2,
    advanceSecs: (secs: number) => clock.manual.advance(secs * 1000),
    events: (event: string) => logs.filter((l) => l.fields.event === event),
    get shutdownCalls() {
      return shutdownCalls;
    },
  };
}

/** Whether a promise has settled once pending callbacks ran, and with what. */
async function peek<T>(promise: Promise<T>): Promise<{ settled: boolean; value: T | undefined }> {
  const state: { settled: boolean; value: T | undefined } = { settled: false, value: undefined };
  void promise.then((value) => {
    state.settled = true;
    state.value = value;
  });
  await nextTurn();
  return state;
}

describe('drain policy arithmetic (E1, E2)', () => {
  test('E1: with no drain time a gradual drain retires every response (probability 1, never NaN)', () => {
    assert.equal(closeProbability('gradual', 0, 0), 1);
    assert.equal(closeProbability('gradual', 5_000, 0), 1);
  });

  test('E2: the proactive moment is spread uniformly over [2/3 of the drain time, drain time - connection timeout]', () => {
    assert.equal(proactiveDrainAt(60_000, 5_000, 0, () => 0), 40_000);
    assert.equal(proactiveDrainAt(60_000, 5_000, 0, () => 0.5), 47_500);
    assert.equal(proactiveDrainAt(60_000, 5_000, 0, () => 0.9), 53_500);
  });

  test('E2: no proactive drain when the connection timeout exactly fills the last third (no room left)', () => {
    assert.equal(proactiveDrainAt(15_000, 5_000, 0, () => 0.5), undefined);
    assert.notEqual(proactiveDrainAt(15_001, 5_000, 0, () => 0.5), undefined);
  });
});

describe('E1 gradual retirement, measured from the drain start', () => {
  test('E1: a drain begun late starts at probability 0: time spent serving before it does not count', () => {
    const t = setup({ drainStrategy: 'gradual', drainTimeSecs: 40, minDrainSecs: 40 }, () => 0.5);
    t.advanceSecs(100);
    void t.lifecycle.drain('SIGTERM');
    assert.equal(t.lifecycle.shouldRetire('proxy'), false, 'p = 0 at the start');
    t.advanceSecs(11); // p = 11 / 20 = 0.55 > 0.5
    assert.equal(t.lifecycle.shouldRetire('proxy'), true);
  });

  test('E1: a response retires with probability p exactly: a draw equal to p (0 at the start) does not retire', () => {
    let roll = 0;
    const t = setup({ drainStrategy: 'gradual', drainTimeSecs: 40, minDrainSecs: 40 }, () => roll);
    void t.lifecycle.drain('SIGTERM');
    assert.equal(t.lifecycle.shouldRetire('proxy'), false, 'p = 0, draw 0');
    t.advanceSecs(5); // p = 0.25
    roll = 0.25;
    assert.equal(t.lifecycle.shouldRetire('proxy'), false, 'draw = p');
    roll = 0.2499;
    assert.equal(t.lifecycle.shouldRetire('proxy'), true, 'draw < p');
  });
});

describe('L3/E5 shouldRetire by listener and state', () => {
  test('E4/E5: with the health check failed, a response on an unnamed or unregistered listener retires; one on a modify_only listener does not', () => {
    const t = setup();
    t.lifecycle.health.fail();
    assert.equal(t.lifecycle.shouldRetire(), true);
    assert.equal(t.lifecycle.shouldRetire('unregistered'), true);
    assert.equal(t.lifecycle.shouldRetire('egress'), false);
  });

  test('L6: once the listeners close every response retires, on modify_only listeners too', async () => {
    const t = setup({ minDrainSecs: 1 });
    const busy = t.active();
    const done = t.lifecycle.drain('SIGTERM');
    assert.equal(t.lifecycle.shouldRetire('egress'), false, 'modify_only: not in the drain while the window runs');
    t.advanceSecs(1);
    busy.socket.holdOnEnd = true; // its client has not closed yet
    t.lifecycle.requestFinished(busy.connection);
    assert.equal(t.lifecycle.state, 'closing');
    assert.equal(t.lifecycle.shouldRetire('egress'), true, 'closing');
    busy.socket.destroy();
    assert.equal(await done, 0);
    assert.equal(t.lifecycle.state, 'exited');
    assert.equal(t.lifecycle.shouldRetire('egress'), true, 'exited');
  });
});

describe('E4 drain controls: listeners, widening, health check', () => {
  test('E4: onRetire callbacks: a drain and a health-check fail tell default listeners, never modify_only ones; an inbound-only drain skips outbound ones', () => {
    const t = setup();
    const told: string[] = [];
    for (const name of ['proxy', 'egress', 'out', 'unregistered']) t.lifecycle.onRetire(name, () => told.push(name));
    t.lifecycle.health.fail();
    assert.deepEqual(told.sort(), ['out', 'proxy', 'unregistered']);

    const u = setup();
    const toldU: string[] = [];
    for (const name of ['proxy', 'egress', 'out']) u.lifecycle.onRetire(name, () => toldU.push(name));
    void u.lifecycle.drain('admin', { inboundOnly: true, exit: false });
    assert.deepEqual(toldU, ['proxy']);
  });

  test('E4: a non-graceful drain that keeps the process stops every drained listener except the admin one; one that exits stops the admin one too', () => {
    const keep = setup();
    void keep.lifecycle.drain('admin', { graceful: false, exit: false });
    assert.deepEqual(keep.stopped, [['proxy', 'out', 'unregistered']]);
    const exit = setup();
    exit.active();
    void exit.lifecycle.drain('admin', { graceful: false, exit: true });
    assert.deepEqual(exit.stopped, [['proxy', 'out', 'admin', 'unregistered']]);
  });

  test('E2/E4: a non-graceful listener drain does not drain connections proactively', () => {
    const t = setup({ drainTimeSecs: 60, connectionDrainTimeoutSecs: 5 }, () => 0);
    const busy = t.active();
    const idle = t.idle();
    void t.lifecycle.drain('admin', { graceful: false, exit: false });
    t.advanceSecs(120);
    assert.equal(busy.connection.retiring, false);
    assert.equal(idle.socket.destroyed, false);
  });

  test('E4: a later drain widens an inbound-only one to every listener without making it exit', () => {
    const t = setup({ minDrainSecs: 1 });
    const told: string[] = [];
    t.lifecycle.onRetire('out', () => told.push('out'));
    t.lifecycle.onRetire('egress', () => told.push('egress'));
    void t.lifecycle.drain('admin', { inboundOnly: true, exit: false });
    assert.equal(t.lifecycle.shouldRetire('out'), false);
    assert.deepEqual(told, []);
    void t.lifecycle.drain('admin', { inboundOnly: false, exit: false });
    assert.equal(t.lifecycle.shouldRetire('out'), true);
    assert.deepEqual(told, ['out'], 'immediate: the newly drained listener is told; modify_only never');
    assert.equal(t.lifecycle.status.info()?.inbound_only, false);
    assert.equal(t.lifecycle.status.info()?.exit, false);
    assert.equal(t.events('drain_widened').length, 1);
    t.advanceSecs(600);
    assert.equal(t.lifecycle.state, 'draining', 'still no exit');
  });

  test('E1/E4: widening a gradual drain tells no listener at once', () => {
    const t = setup({ drainStrategy: 'gradual', minDrainSecs: 1 });
    let told = 0;
    t.lifecycle.onRetire('out', () => told++);
    void t.lifecycle.drain('admin', { inboundOnly: true, exit: false });
    void t.lifecycle.drain('admin', { inboundOnly: false, exit: false });
    assert.equal(t.lifecycle.status.info()?.inbound_only, false);
    assert.equal(told, 0);
  });

  test('E4: a later drain can make a skip_exit drain exit while it stays inbound-only', async () => {
    const t = setup({ minDrainSecs: 1 });
    const busy = t.active();
    const done = t.lifecycle.drain('admin', { inboundOnly: true, exit: false, windowSecs: 1 });
    t.advanceSecs(5);
    t.lifecycle.requestFinished(busy.connection);
    assert.equal(t.lifecycle.state, 'draining', 'skip_exit: stays after the window with nothing in flight');
    t.lifecycle.requestStarted(busy.connection);
    void t.lifecycle.drain('admin', { inboundOnly: true, exit: true });
    assert.equal(t.lifecycle.status.info()?.exit, true);
    assert.equal(t.lifecycle.status.info()?.inbound_only, true, 'still inbound only');
    assert.equal(t.lifecycle.shouldRetire('out'), false);
    t.lifecycle.requestFinished(busy.connection);
    assert.equal(await done, 0);
  });

  test('L8/E4: widening to exit starts the max_drain_secs deadline from the widening; 0 means none', async () => {
    const t = setup({ maxDrainSecs: 60 });
    t.active();
    const done = t.lifecycle.drain('admin', { exit: false, windowSecs: 1 });
    t.advanceSecs(10);
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(59.999);
    assert.equal(t.events('drain_forced').length, 0, 'not before 60 s after the widening');
    t.advanceSecs(0.001);
    assert.deepEqual(
      t.events('drain_forced').map((l) => l.fields.reason),
      ['max_drain_secs'],
    );
    t.advanceSecs(1);
    assert.equal(await done, 1);

    const none = setup({ maxDrainSecs: 0 });
    none.active();
    void none.lifecycle.drain('admin', { exit: false, windowSecs: 1 });
    void none.lifecycle.drain('SIGTERM');
    none.advanceSecs(3600);
    assert.equal(none.events('drain_forced').length, 0);
    assert.equal(none.lifecycle.state, 'draining');
  });

  test('E4: restoring a health check that is not failed is a no-op; restoring a failed one reports it', () => {
    const t = setup();
    assert.equal(t.lifecycle.health.failed, false);
    assert.equal(t.lifecycle.health.restore(), false);
    assert.deepEqual(t.commands, []);
    assert.equal(t.lifecycle.health.fail(), true);
    assert.equal(t.lifecycle.health.failed, true);
    assert.equal(t.lifecycle.health.restore(), true);
    assert.equal(t.lifecycle.health.failed, false);
    assert.deepEqual(
      t.logs.map((l) => l.fields.event),
      ['healthcheck_failed', 'healthcheck_ok'],
    );
  });

  test('E4: drainInfo is undefined before a drain, then reports the plan, the drain time and the strategy', () => {
    const t = setup({ minDrainSecs: 30 });
    assert.equal(t.lifecycle.status.info(), undefined);
    void t.lifecycle.drain('admin', { inboundOnly: true, exit: false });
    t.advanceSecs(2.5);
    assert.deepEqual(t.lifecycle.status.info(), {
      trigger: 'admin',
      graceful: true,
      inbound_only: true,
      exit: false,
      elapsed_secs: 2.5,
      drain_time_secs: 30,
      strategy: 'immediate',
    });
    const g = setup({ minDrainSecs: 30, drainTimeSecs: 90, drainStrategy: 'gradual' });
    void g.lifecycle.drain('SIGTERM');
    assert.equal(g.lifecycle.status.info()?.drain_time_secs, 90);
    assert.equal(g.lifecycle.status.info()?.strategy, 'gradual');
  });

  test('E6: updateSettings applies to the next drain', () => {
    const t = setup({ minDrainSecs: 30 });
    t.lifecycle.updateSettings(drainSettings({ minDrainSecs: 2 }));
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(2);
    assert.equal(t.lifecycle.state, 'exited');
  });
});

describe('E2 proactive drain', () => {
  const settings = { drainStrategy: 'gradual', drainTimeSecs: 60, minDrainSecs: 60 } as const;

  test('E2: a drain begun late still drains earlier connections, each at its own moment after the drain start', () => {
    const t = setup({ ...settings, connectionDrainTimeoutSecs: 5 }, () => 0.5);
    t.advanceSecs(10);
    const busy = t.active();
    t.advanceSecs(20);
    void t.lifecycle.drain('SIGTERM'); // at 30 s; moment = 30 + 40 + 0.5 * 15 = 77.5 s
    t.advanceSecs(47.499);
    assert.equal(busy.connection.retiring, false);
    t.advanceSecs(0.001);
    assert.equal(busy.connection.retiring, true);
  });

  test('E2: connections accepted between half and two thirds of the drain time are drained proactively', () => {
    const t = setup({ ...settings, connectionDrainTimeoutSecs: 5 }, () => 0);
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(35);
    const late = t.active();
    t.advanceSecs(5);
    assert.equal(late.connection.retiring, true);
  });

  test('E2/E5: connections on a modify_only listener are not drained proactively', () => {
    const t = setup({ ...settings, connectionDrainTimeoutSecs: 5 }, () => 0);
    const egress = t.idle('egress');
    const egressBusy = t.active('egress');
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(59);
    assert.equal(egress.socket.destroyed, false);
    assert.equal(egressBusy.connection.retiring, false);
  });

  test("E2: an idle connection is closed with reason 'proactive_drain' after its own drain timeout (default 5 s, or as set)", () => {
    for (const [timeoutSecs, expected] of [
      [undefined, 5],
      [10, 10],
    ] as const) {
      const t = setup({ ...settings, ...(timeoutSecs === undefined ? {} : { connectionDrainTimeoutSecs: timeoutSecs }) }, () => 0);
      const idle = t.idle();
      void t.lifecycle.drain('SIGTERM');
      t.advanceSecs(40 + expected - 0.001);
      assert.equal(idle.socket.destroyed, false, `timeout ${expected}`);
      t.advanceSecs(0.001);
      assert.equal(idle.socket.closedBy, 'end', `timeout ${expected}`);
      assert.deepEqual(t.closed, ['proactive_drain']);
    }
  });
});

describe('E3 opt-in reset', () => {
  test("E3: with reset_upgraded_on_proactive_drain, an upgraded session is reset at its moment and counted out as 'proactive_drain_reset'", () => {
    const t = setup({ drainStrategy: 'gradual', drainTimeSecs: 60, minDrainSecs: 60, connectionDrainTimeoutSecs: 5, resetUpgradedOnProactiveDrain: true }, () => 0);
    const ws = t.active();
    ws.connection.upgraded(new WebSocketProtocol(ws.connection));
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(40);
    assert.equal(ws.socket.closedBy, 'destroy');
    assert.equal(ws.connection.retiring, true);
    assert.deepEqual(t.closed, ['proactive_drain_reset']);
  });
});

describe('E6 retireConnection', () => {
  test('E6: a connection is told once; a closed one is not told', () => {
    const t = setup();
    const c = t.h2();
    t.lifecycle.retireConnection(c.connection, 5_000, 'listener_changed');
    t.lifecycle.retireConnection(c.connection, 5_000, 'listener_changed');
    assert.equal(c.session.goaways, 1);
    const gone = t.h2();
    gone.socket.destroy();
    t.lifecycle.retireConnection(gone.connection, 5_000, 'listener_changed');
    assert.equal(gone.session.goaways, 0);
    assert.equal(gone.connection.retiring, false);
  });

  test('E6: a fresh or idle connection is closed after the timeout; with closeIdle false it is left open', () => {
    const t = setup();
    const fresh = t.connect();
    const idle = t.idle();
    const kept = t.idle();
    const busy = t.active();
    t.lifecycle.retireConnection(fresh.connection, 5_000, 'listener_changed');
    t.lifecycle.retireConnection(idle.connection, 5_000, 'listener_changed');
    t.lifecycle.retireConnection(kept.connection, 5_000, 'listener_changed', false);
    t.lifecycle.retireConnection(busy.connection, 5_000, 'listener_changed');
    t.advanceSecs(5);
    assert.equal(fresh.socket.closedBy, 'end');
    assert.equal(idle.socket.closedBy, 'end');
    assert.equal(kept.socket.destroyed, false);
    assert.equal(kept.connection.retiring, true);
    assert.equal(busy.socket.destroyed, false);
    assert.deepEqual(t.closed, ['listener_changed', 'listener_changed']);
  });

  test('E6: the drain timeout is kept by the sweep: an idle retired connection is ended once it has passed, never before, within one sweep period', () => {
    const t = setup();
    t.advanceSecs(1.2); // between two sweeps
    const idle = t.idle();
    t.lifecycle.retireConnection(idle.connection, 5_000, 'listener_changed');
    t.advanceSecs(4.999);
    assert.equal(idle.socket.destroyed, false, 'before its drain timeout');
    t.clock.manual.advance(1 + SWEEP_MS);
    assert.equal(idle.socket.closedBy, 'end');
    assert.deepEqual(t.closed, ['listener_changed']);
  });

  test('E6: a retired connection busy at its deadline is left to its retirement: the deadline is checked once, not again when it turns idle', () => {
    const t = setup();
    const c = t.idle();
    t.lifecycle.retireConnection(c.connection, 5_000, 'listener_changed');
    t.lifecycle.requestStarted(c.connection);
    t.advanceSecs(6);
    assert.equal(c.connection.drainDeadline, undefined);
    t.lifecycle.requestFinished(c.connection);
    t.advanceSecs(60);
    assert.equal(c.socket.destroyed, false, 'its next response closes it (Connection: close)');
    assert.equal(c.connection.retiring, true);
  });

  test('E6: a retired HTTP/2 connection gets one GOAWAY; its end at the deadline sends no second one', () => {
    const t = setup();
    const c = t.h2();
    t.lifecycle.requestStarted(c.connection);
    t.lifecycle.requestFinished(c.connection);
    t.lifecycle.retireConnection(c.connection, 5_000, 'listener_changed');
    assert.equal(c.session.goaways, 1);
    t.advanceSecs(5);
    assert.equal(c.session.goaways, 1);
    assert.equal(c.connection.closeReason, 'listener_changed');
  });

  test('E6: a drain timeout set before the lifecycle serves is kept too (the first deadline starts the sweep)', () => {
    const clock = new ManualClock();
    const lifecycle = new Lifecycle({
      clock,
      log: { info() {}, warn() {} },
      hooks: { stopAccepting() {}, shutdown: async () => {} },
      settings: drainSettings(),
    });
    const socket = new FakeSocket();
    const connection = lifecycle.connections.add(socket as unknown as Socket, 'proxy');
    lifecycle.retireConnection(connection, 1_000, 'listener_changed');
    clock.advance(999);
    assert.equal(socket.destroyed, false);
    clock.advance(1 + SWEEP_MS);
    assert.equal(socket.closedBy, 'end');
  });
});

describe('connection deadlines while serving', () => {
  test('the fresh timeout counts from when the connection was accepted, and holds at exactly the timeout', () => {
    const t = setup({ freshTimeoutSecs: 1 });
    t.advanceSecs(2);
    const fresh = t.connect();
    t.advanceSecs(0.5);
    assert.equal(fresh.socket.destroyed, false, 'accepted 0.5 s ago');
    t.advanceSecs(0.5);
    assert.equal(fresh.socket.closedBy, 'destroy', 'swept at exactly 1 s');
    assert.deepEqual(t.closed, ['fresh_timeout']);
  });

  test('with only a fresh timeout set, idle HTTP/2 connections are not ended; an HTTP/2 connection with a stream in flight never is', () => {
    const t = setup({ freshTimeoutSecs: 1, idleTimeoutSecs: 0 });
    const idle = t.h2();
    t.lifecycle.requestStarted(idle.connection);
    t.lifecycle.requestFinished(idle.connection);
    t.advanceSecs(60);
    assert.equal(idle.session.goaways, 0);
    assert.equal(idle.socket.destroyed, false);

    const u = setup({ idleTimeoutSecs: 1 });
    const busy = u.h2();
    u.lifecycle.requestStarted(busy.connection);
    u.advanceSecs(60);
    assert.equal(busy.socket.destroyed, false);
    assert.equal(busy.session.goaways, 0);
  });
});

describe('L10 connection tracking and the limit', () => {
  test('L10: past downstream.max_connections a new connection is closed at once, reported as rejected, and not tracked', () => {
    const t = setup();
    t.lifecycle.connections.limit = 2;
    const sockets = [new FakeSocket(), new FakeSocket(), new FakeSocket()];
    assert.ok(t.lifecycle.connections.admit(sockets[0] as unknown as Socket, 'proxy'));
    assert.ok(t.lifecycle.connections.admit(sockets[1] as unknown as Socket, 'proxy'));
    assert.equal(t.lifecycle.connections.admit(sockets[2] as unknown as Socket, 'proxy'), undefined);
    assert.equal(sockets[2]!.closedBy, 'destroy');
    assert.equal(t.lifecycle.connections.size, 2);
    assert.deepEqual(t.rejected, ['proxy']);
    assert.deepEqual(t.closed, [], 'a rejected connection is not counted as closed');
    sockets[0]!.destroy();
    const next = new FakeSocket();
    assert.ok(t.lifecycle.connections.admit(next as unknown as Socket, 'proxy'), 'room again after one closed');
    assert.equal(next.destroyed, false);
  });

  test('L10: past the limit a connection is refused without an observer for refusals too', () => {
    const tracker = new ConnectionTracker({ accepted() {}, closed() {} }, () => 0);
    tracker.limit = 1;
    assert.ok(tracker.admit(new FakeSocket() as unknown as Socket, 'proxy'));
    const refused = new FakeSocket();
    assert.equal(tracker.admit(refused as unknown as Socket, 'proxy'), undefined);
    assert.equal(refused.closedBy, 'destroy');

    const lifecycle = new Lifecycle({
      clock: new ManualClock(),
      log: { info() {}, warn() {} },
      hooks: { stopAccepting() {}, shutdown: async () => {} },
      settings: drainSettings({ minDrainSecs: 0 }),
    });
    lifecycle.connections.limit = 1;
    assert.ok(lifecycle.connections.admit(new FakeSocket() as unknown as Socket, 'proxy'));
    assert.equal(lifecycle.connections.admit(new FakeSocket() as unknown as Socket, 'proxy'), undefined);
  });

  test('L10: max_connections 0 admits every connection', () => {
    const t = setup();
    t.lifecycle.connections.limit = 0;
    for (let i = 0; i < 5; i++) assert.ok(t.lifecycle.connections.admit(new FakeSocket() as unknown as Socket, 'proxy'));
    assert.equal(t.lifecycle.connections.size, 5);
    assert.deepEqual(t.rejected, []);
  });

  test('L10: a connection is fresh over http1, active with a request, idle after it; an upgraded one stays upgraded until it closes', () => {
    const t = setup();
    t.advanceSecs(3);
    const c = t.connect();
    assert.equal(c.connection.protocol.name, 'http1');
    assert.equal(c.connection.state, 'fresh');
    t.lifecycle.requestStarted(c.connection);
    assert.equal(c.connection.state, 'active');
    t.advanceSecs(1);
    t.lifecycle.requestFinished(c.connection);
    assert.equal(c.connection.state, 'idle');
    assert.equal(c.connection.idleSince, 4_000);

    const ws = t.active();
    ws.connection.upgraded(new WebSocketProtocol(ws.connection));
    t.lifecycle.requestStarted(ws.connection);
    assert.equal(ws.connection.state, 'upgraded');
    t.lifecycle.requestFinished(ws.connection);
    t.lifecycle.requestFinished(ws.connection);
    assert.equal(ws.connection.state, 'upgraded', 'the session ended: the socket closes, it does not become idle');
  });

  test('L10: counts add up connections of the same listener and state', () => {
    const t = setup();
    t.idle();
    t.idle();
    t.active();
    t.idle('out');
    const counts = t.lifecycle.connections.counts().sort((a, b) => `${a.listener}${a.state}`.localeCompare(`${b.listener}${b.state}`));
    assert.deepEqual(counts, [
      { listener: 'out', state: 'idle', count: 1 },
      { listener: 'proxy', state: 'active', count: 1 },
      { listener: 'proxy', state: 'idle', count: 2 },
    ]);
  });
});

describe('L8 forced drain edges', () => {
  test('L8: force() with nothing in flight and no connection exits at once, without waiting for the 1 s flush', async () => {
    const t = setup();
    const done = t.lifecycle.done;
    t.lifecycle.force('SIGTERM');
    assert.equal(t.lifecycle.state, 'exited');
    assert.deepEqual(await peek(done), { settled: true, value: 1 });
  });

  test('L8: forcing a skip_exit drain makes it exit', async () => {
    const t = setup();
    const busy = t.active();
    void t.lifecycle.drain('admin', { exit: false });
    t.lifecycle.force('SIGTERM');
    assert.equal(t.lifecycle.status.info()?.exit, true);
    t.lifecycle.requestFinished(busy.connection);
    assert.equal(await t.lifecycle.done, 1);
  });

  test('L8: forcing a drain whose listeners are already closed does not close them again', () => {
    const t = setup({ minDrainSecs: 1 });
    const busy = t.active();
    void t.lifecycle.drain('SIGTERM');
    t.advanceSecs(1);
    busy.socket.holdOnEnd = true;
    t.lifecycle.requestFinished(busy.connection);
    assert.equal(t.lifecycle.state, 'closing');
    assert.equal(t.stopped.length, 1);
    t.lifecycle.force('SIGTERM');
    assert.equal(t.stopped.length, 1);
    assert.equal(t.events('listeners_closing').length, 1);
  });

  test('L8/L9: when a forced stream ends its request at once, the process exits once: shutdown and process_exit are not repeated', async () => {
    const t = setup();
    const stream: ForceEndable = { forceEnd: () => t.lifecycle.requestFinished(undefined) };
    t.lifecycle.requestStarted(undefined);
    t.lifecycle.trackForceEndable(stream);
    void t.lifecycle.drain('SIGTERM');
    t.lifecycle.force('SIGTERM');
    assert.equal(t.lifecycle.state, 'exited');
    t.advanceSecs(5);
    await nextTurn();
    assert.equal(t.shutdownCalls, 1);
    assert.equal(t.events('process_exit').length, 1);
    assert.equal(await t.lifecycle.done, 1);
  });
});

describe('L8 how connections end', () => {
  test('L8: at a forced exit every connection still open is destroyed: one whose FIN was not answered, one accepted after the force', async () => {
    const t = setup();
    const held = t.active();
    held.socket.holdOnEnd = true;
    void t.lifecycle.drain('SIGTERM');
    t.lifecycle.force('SIGTERM');
    assert.equal(held.socket.destroyed, false, 'its FIN is on the way');
    const late = t.connect();
    t.advanceSecs(1);
    assert.equal(t.lifecycle.state, 'exited');
    assert.equal(held.socket.closedBy, 'destroy');
    assert.equal(late.socket.closedBy, 'destroy');
    assert.deepEqual(t.closed, ['drain_forced', 'drain_forced']);
    assert.equal(t.lifecycle.connections.size, 0);
    assert.equal(await t.lifecycle.done, 1);
  });
});

describe('after the exit', () => {
  test('L9: on exit every pending timer is cancelled, so nothing the drain scheduled fires afterwards', () => {
    const t = setup({ drainStrategy: 'gradual', drainTimeSecs: 60, minDrainSecs: 60, maxDrainSecs: 120, connectionDrainTimeoutSecs: 5 });
    const held = t.active();
    held.socket.holdOnEnd = true;
    void t.lifecycle.drain('SIGTERM');
    t.lifecycle.retireConnection(t.connect().connection, 30_000, 'listener_changed');
    t.lifecycle.force('SIGTERM');
    t.advanceSecs(1);
    assert.equal(t.lifecycle.state, 'exited');
    assert.equal(t.clock.pending, 0);
  });

  test('E4/L8: drain() and force() after the exit change nothing and are not passed on', async () => {
    const t = setup({ minDrainSecs: 0 });
    const done = t.lifecycle.drain('SIGTERM');
    assert.equal(await done, 0);
    const before = { commands: t.commands.length, logs: t.logs.length };
    assert.equal(t.lifecycle.drain('SIGINT'), done);
    assert.equal(t.lifecycle.done, done);
    t.lifecycle.force('SIGINT');
    assert.equal(t.commands.length, before.commands);
    assert.equal(t.logs.length, before.logs);
    assert.equal(await done, 0);
  });
});
