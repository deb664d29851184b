// The lifecycle's parts one by one (src/lifecycle/: the list of what a forced drain ends, what the
// drain notes of single connections, its status and lines, the connection table, retirement, a
// drain run, the health override, the words of `waiting_for`), and the Lifecycle's own counters
// and lines that the drain-sequence tests leave unread. Each assertion names the rule it keeps.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Clock } from '../../src/lifecycle/clock.ts';
import { Timers } from '../../src/lifecycle/clock.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { drainSettings } from '../support/drain-settings.ts';
import { Lifecycle } from '../../src/lifecycle/lifecycle.ts';
import { TrackedList } from '../../src/lifecycle/tracked-list.ts';
import { DrainConnections } from '../../src/lifecycle/drain-connections.ts';
import { DrainMoments, DrainReports, DrainStatus, openWork } from '../../src/lifecycle/drain-status.ts';
import { ConnectionTracker, type TrackedConnection } from '../../src/lifecycle/connections.ts';
import { ConnectionRetirement } from '../../src/lifecycle/retirement.ts';
import { ListenerScopes } from '../../src/lifecycle/listener-scopes.ts';
import { describeWaiting, sumWaitingFor, type WaitingFor } from '../../src/lifecycle/progress.ts';
import type { DrainSettings, ForceEndable, LifecycleHooks } from '../../src/lifecycle/contracts.ts';

class FakeSocket extends EventEmitter {
  destroyed = false;
  closedBy: 'end' | 'destroy' | undefined;
  readonly remoteAddress = '192.0.2.9';
  readonly remotePort: number;
  constructor(port = 1) {
    super();
    this.remotePort = port;
  }
  destroy(): this {
    this.#close('destroy');
    return this;
  }
  destroySoon(): void {
    this.#close('end');
  }
  #close(how: 'end' | 'destroy'): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.closedBy = how;
    this.emit('close', false);
  }
}

const asSocket = (s: FakeSocket) => s as unknown as Socket;
const clockOf = (manual: ManualClock): Clock => ({ now: () => manual.now(), after: (ms, fn) => manual.after(ms, fn), every: (ms, fn) => manual.every(ms, fn) });

interface Line {
  level: string;
  fields: Record<string, unknown>;
  message: string;
}

function logger(): { lines: Line[]; log: { info(f: object, m: string): void; warn(f: object, m: string): void; error(f: object, m: string): void } } {
  const lines: Line[] = [];
  const at = (level: string) => (fields: object, message: string) => void lines.push({ level, fields: fields as Record<string, unknown>, message });
  return { lines, log: { info: at('info'), warn: at('warn'), error: at('error') } };
}

function lifecycleSetup(settings: Partial<DrainSettings> = {}, hooks: Partial<LifecycleHooks> = {}) {
  const clock = new ManualClock();
  const { lines, log } = logger();
  const lifecycle = new Lifecycle({
    clock: clockOf(clock),
    log,
    hooks: { stopAccepting: () => {}, shutdown: () => Promise.resolve(), ...hooks },
    settings: drainSettings(settings),
    random: () => 0.5,
  });
  lifecycle.markServing();
  let port = 50000;
  const connect = (listener = 'proxy') => {
    const socket = new FakeSocket(++port);
    return { socket, connection: lifecycle.connections.add(asSocket(socket), listener) };
  };
  return { clock, lines, lifecycle, connect, message: (event: string) => lines.find((l) => l.fields.event === event)?.message };
}

describe('TrackedList (what a forced drain must end, L8)', () => {
  test('adds at the head, removes from anywhere once, and keeps the order of what is left', () => {
    const list = new TrackedList<string>();
    const a = list.add('a');
    const b = list.add('b');
    const c = list.add('c');
    assert.deepEqual([...list.values()], ['c', 'b', 'a']);
    b();
    assert.deepEqual([...list.values()], ['c', 'a'], 'from the middle');
    b();
    assert.deepEqual([...list.values()], ['c', 'a'], 'a second removal does nothing');
    c();
    assert.deepEqual([...list.values()], ['a'], 'the head');
    const d = list.add('d');
    a();
    assert.deepEqual([...list.values()], ['d'], 'the tail');
    d();
    assert.deepEqual([...list.values()], []);
    list.add('e');
    assert.deepEqual([...list.values()], ['e'], 'usable again once empty');
    const tail = new TrackedList<string>();
    const x = tail.add('x');
    const y = tail.add('y');
    tail.add('z');
    y();
    x();
    assert.deepEqual([...tail.values()], ['z'], 'the middle, then the tail: the links left behind are right');
  });
});

describe('DrainConnections (O1 lines, L5 live views)', () => {
  test('a connection accepted while draining is logged at its first request only, unless that is a probe (counted)', () => {
    const { lines, log } = logger();
    const tracked = new DrainConnections(log, () => 7);
    const socket = new FakeSocket(4321);
    const connection = { socket, listener: 'proxy' } as unknown as TrackedConnection;
    tracked.requestWhileDraining(connection, false);
    assert.equal(lines.length, 0, 'not accepted while draining: nothing to say');
    tracked.acceptedWhileDraining(connection);
    tracked.requestWhileDraining(connection, false);
    tracked.requestWhileDraining(connection, false);
    assert.equal(lines.length, 1, 'once, at its first request');
    assert.deepEqual(lines[0]!.fields, { event: 'connection_accepted_while_draining', listener: 'proxy', peer: '192.0.2.9:4321', open_connections: 7 });
    assert.equal(lines[0]!.message, 'accepted a connection while draining');
    const probe = { socket, listener: 'admin' } as unknown as TrackedConnection;
    tracked.acceptedWhileDraining(probe);
    tracked.requestWhileDraining(probe, true);
    tracked.requestWhileDraining(probe, true);
    assert.equal(tracked.probes, 1);
    assert.equal(lines.length, 1);
  });

  test('only connections carrying live views left: counted per view, a connection with none left holds', () => {
    const { log } = logger();
    const tracked = new DrainConnections(log, () => 0);
    const a = {} as TrackedConnection;
    const b = {} as TrackedConnection;
    const open = (...connections: TrackedConnection[]) => ({ size: connections.length, all: () => connections });
    assert.equal(tracked.onlyWatchersLeft(open()), true, 'nothing open');
    assert.equal(tracked.onlyWatchersLeft(open(a)), false);
    tracked.watchStarted(a);
    tracked.watchStarted(a);
    assert.equal(tracked.onlyWatchersLeft(open(a)), true);
    tracked.watchFinished(a);
    assert.equal(tracked.onlyWatchersLeft(open(a)), true, 'one of its two views is still open');
    tracked.watchFinished(a);
    assert.equal(tracked.onlyWatchersLeft(open(a)), false, 'its last view ended');
    tracked.watchStarted(b);
    assert.equal(tracked.onlyWatchersLeft(open(a, b)), false, 'a holds, b does not');
    assert.equal(tracked.onlyWatchersLeft({ size: 1, all: () => [a] }), false, 'as many open as watched, but not the same');
    tracked.watchFinished(b);
    tracked.watchFinished(b);
    tracked.watchStarted(b);
    assert.equal(tracked.onlyWatchersLeft(open(b)), true, 'a view finished once too often leaves no debt');
  });
});

describe('the words of waiting_for (O1)', () => {
  const w = (over: Partial<WaitingFor>): WaitingFor => ({ window_secs_left: 0, requests: 0, streams: 0, sessions: 0, workers: 0, ...over });
  test('each case says what holds the drain, in numbers and words', () => {
    assert.equal(describeWaiting(w({ window_secs_left: 3.5, requests: 1 })), 'window open 3.5 s more (still accepting, for the load balancer); in flight: 1 request, 0 streams, 0 sessions');
    assert.equal(describeWaiting(w({ requests: 2, streams: 1, sessions: 3 })), 'window over; waiting for 2 requests, 1 stream, 3 sessions');
    assert.equal(describeWaiting(w({ streams: 1 })), 'window over; waiting for 0 requests, 1 stream, 0 sessions');
    assert.equal(describeWaiting(w({ sessions: 1 })), 'window over; waiting for 0 requests, 0 streams, 1 session');
    assert.equal(describeWaiting(w({ workers: 2 })), 'window over; nothing in flight; waiting for 2 workers to exit');
    assert.equal(describeWaiting(w({ workers: 1 })), 'window over; nothing in flight; waiting for 1 worker to exit');
    assert.equal(describeWaiting(w({})), 'window over; nothing in flight');
  });

  test('a group sums its processes\' work; the window and the workers are the supervisor\'s own', () => {
    const own = w({ window_secs_left: 2, requests: 1, workers: 2 });
    const sum = sumWaitingFor(own, [w({ requests: 2, streams: 1, window_secs_left: 9, workers: 5 }), w({ sessions: 4, streams: 2 })]);
    assert.deepEqual(sum, { window_secs_left: 2, requests: 3, streams: 3, sessions: 4, workers: 2 });
    assert.equal(own.requests, 1, 'its own numbers are not changed');
  });
});

describe('DrainStatus, DrainMoments, DrainReports', () => {
  test('before a drain: nothing to show; the window is 0 and so are the moments', () => {
    const status = new DrainStatus({ inFlight: () => 2, workers: () => 1, run: () => undefined, open: () => [], settings: () => drainSettings({}), probes: () => 3 });
    assert.equal(status.seconds(), 0);
    assert.equal(status.windowSecs(), 0);
    assert.deepEqual(status.moments(), []);
    assert.equal(status.info(), undefined);
    assert.equal(status.probeConnections, 3);
    assert.deepEqual(status.waitingFor(), { window_secs_left: 0, requests: 2, streams: 0, sessions: 0, workers: 1 });
  });

  test('open work: streams and sessions with their exchange, oldest first, capped; requests and unknown kinds left out', () => {
    const exchange = (model: string, age: number) => ({ endpoint: '/v1/chat/completions', model, protocol: 'http1', listener: 'proxy', durationSeconds: () => age });
    const open: ForceEndable[] = [
      { forceEnd: () => {}, kind: () => 'stream', exchange: exchange('young', 1) },
      { forceEnd: () => {}, kind: () => 'request', exchange: exchange('request', 50) },
      { forceEnd: () => {}, exchange: exchange('no kind', 60) },
      { forceEnd: () => {}, kind: () => 'session', exchange: exchange('x'.repeat(300), 30) },
      { forceEnd: () => {}, kind: () => 'stream' },
    ];
    const work = openWork(open, 1);
    assert.equal(work.total, 2);
    assert.equal(work.oldest.length, 1);
    assert.equal(work.oldest[0]!.kind, 'session');
    assert.equal(work.oldest[0]!.model.length, 200, 'a model name is cut to 200 characters');
  });

  test('a moment is recorded once, at its first time', () => {
    const moments = new DrainMoments();
    moments.record('drain_started', 0);
    moments.record('window_over', 1.23456);
    moments.record('window_over', 9);
    assert.deepEqual(moments.list(), [
      { event: 'drain_started', at_secs: 0 },
      { event: 'window_over', at_secs: 1.235 },
    ]);
  });

  test('lines through the hook: the exit waits for the ones still being written, each only once', async () => {
    const { lines, log } = logger();
    const written: { resolve: () => void }[] = [];
    const reports = new DrainReports(log, {
      stopAccepting: () => {},
      shutdown: () => Promise.resolve(),
      reportDrain: () => new Promise<void>((resolve) => written.push({ resolve })),
    });
    const fields = { event: 'drain_started' as const, in_flight: 0, open_connections: 0, waiting_for: { window_secs_left: 0, requests: 0, streams: 0, sessions: 0, workers: 0 }, probe_connections: 0 };
    reports.report(fields, 'drain started');
    let exited = 0;
    reports.afterPending(() => exited++);
    await nextTurn();
    assert.equal(exited, 0, 'a line is still being written');
    written[0]!.resolve();
    await nextTurn();
    assert.equal(exited, 1);
    reports.afterPending(() => exited++);
    assert.equal(exited, 2, 'nothing pending: at once');
    assert.equal(lines.length, 0, 'the hook wrote it, not the log');
    const sync = new DrainReports(log, { stopAccepting: () => {}, shutdown: () => Promise.resolve(), reportDrain: () => undefined });
    sync.report(fields, 'drain started');
    sync.afterPending(() => exited++);
    assert.equal(exited, 3, 'a hook that wrote at once leaves nothing pending');
    const plain = new DrainReports(log, { stopAccepting: () => {}, shutdown: () => Promise.resolve() });
    plain.report(fields, 'drain started');
    assert.equal(lines[0]!.message, 'drain started: window over; nothing in flight');
  });
});

describe('ConnectionTracker and TrackedConnection', () => {
  function tracker() {
    const closed: string[] = [];
    const t = new ConnectionTracker({ accepted: () => {}, closed: (c, reason) => void closed.push(`${c.listener}:${reason}`) }, () => 42);
    return { t, closed };
  }

  test('by listener: a listener\'s connections, none once they have closed; counts by listener and state', () => {
    const { t, closed } = tracker();
    const a = new FakeSocket();
    const b = new FakeSocket();
    const c = new FakeSocket();
    const ca = t.add(asSocket(a), 'proxy');
    t.add(asSocket(b), 'proxy');
    t.add(asSocket(c), 'admin');
    t.requestStarted(ca);
    assert.equal([...t.of('proxy')].length, 2);
    assert.equal([...t.of('nowhere')].length, 0);
    assert.deepEqual(t.counts(), [
      { listener: 'proxy', state: 'active', count: 1 },
      { listener: 'proxy', state: 'fresh', count: 1 },
      { listener: 'admin', state: 'fresh', count: 1 },
    ]);
    a.destroy();
    b.destroy();
    assert.equal([...t.of('proxy')].length, 0);
    assert.deepEqual(t.counts(), [{ listener: 'admin', state: 'fresh', count: 1 }], 'a listener with no connection left is not listed');
    t.add(asSocket(new FakeSocket()), 'proxy');
    assert.equal([...t.of('proxy')].length, 1, 'a listener gets connections again after it had none');
    assert.deepEqual(closed, ['proxy:client_closed', 'proxy:client_closed_fresh']);
  });

  test('a close reason noted first is kept; retire() tells the protocol once; the deadline is taken once, when due', () => {
    const { t, closed } = tracker();
    const socket = new FakeSocket();
    const connection = t.add(asSocket(socket), 'proxy');
    let retired = 0;
    connection.protocol = { name: 'h2', multiplexed: true, retire: () => void retired++, close: () => socket.destroySoon(), destroy: () => socket.destroy() };
    connection.retire();
    connection.retire();
    assert.equal(retired, 1);
    assert.equal(connection.retiring, true);
    connection.endIfIdleBy(100, 'listener_changed');
    assert.deepEqual(connection.drainDeadline, { at: 100, reason: 'listener_changed' });
    assert.equal(connection.takeDeadline(99), undefined);
    assert.equal(connection.takeDeadline(100)?.reason, 'listener_changed');
    assert.equal(connection.takeDeadline(200), undefined, 'taken once');
    assert.equal(connection.drainDeadline, undefined);
    connection.noteCloseReason('tls_handshake_failed');
    connection.noteCloseReason('other');
    connection.end('drain_idle');
    assert.equal(connection.closeReason, 'tls_handshake_failed');
    assert.deepEqual(closed, ['proxy:tls_handshake_failed']);
  });
});

describe('ConnectionRetirement', () => {
  function retirementSetup(settings: Partial<DrainSettings> = {}) {
    const clock = new ManualClock();
    const tracker = new ConnectionTracker({ accepted: () => {}, closed: () => {} }, () => clock.now());
    let everyCalls = 0;
    const timers = new Timers(clockOf(clock));
    const counted = { after: (ms: number, fn: () => void) => timers.after(ms, fn), every: (ms: number, fn: () => void) => (everyCalls++, timers.every(ms, fn)), cancelAll: () => timers.cancelAll() } as unknown as Timers;
    const retirement = new ConnectionRetirement({ clock: clockOf(clock), connections: tracker, settings: () => drainSettings(settings), random: () => 0.5, timers: counted });
    const connect = (listener = 'proxy') => {
      const socket = new FakeSocket();
      return { socket, connection: tracker.add(asSocket(socket), listener) };
    };
    return { clock, retirement, connect, everyCalls: () => everyCalls };
  }

  test('one sweep timer, however often it is asked for', () => {
    const t = retirementSetup();
    t.retirement.startSweep();
    t.retirement.startSweep();
    assert.equal(t.everyCalls(), 1);
  });

  test('E7: at the listeners\' close an idle HTTP/1.1 connection is kept the given time, retired, then ended if still idle; fresh ones are held; idle ones without a keep time end', () => {
    const t = retirementSetup({ freshConnectionGraceSecs: 3 });
    const kept = t.connect();
    kept.connection.started();
    kept.connection.finished(0);
    const fresh = t.connect();
    t.retirement.listenersClosed(2000);
    assert.equal(kept.connection.retiring, true, 'its next response closes it');
    assert.equal(kept.socket.destroyed, false);
    assert.equal(fresh.socket.destroyed, false, 'held for the fresh-connection grace');
    t.clock.advance(1999);
    assert.equal(kept.socket.destroyed, false);
    t.clock.advance(600);
    assert.equal(kept.socket.closedBy, 'end');
    assert.equal(kept.connection.closeReason, 'drain_idle');
    t.clock.advance(1000);
    assert.equal(fresh.connection.closeReason, 'drain_fresh_timeout');
    const u = retirementSetup();
    const idle = u.connect();
    idle.connection.started();
    idle.connection.finished(0);
    u.retirement.listenersClosed(0);
    assert.equal(idle.connection.closeReason, 'drain_idle', 'no keep time: ended at once');
    const h2 = u.connect();
    h2.connection.protocol = { name: 'h2', multiplexed: true, retire: () => {}, close: () => h2.socket.destroySoon(), destroy: () => h2.socket.destroy() };
    h2.connection.started();
    h2.connection.finished(0);
    u.retirement.listenersClosed(5000);
    assert.equal(h2.connection.closeReason, 'drain_idle', 'HTTP/2 says goodbye at once: its GOAWAY races no request');
  });

  test('E2: the proactive drain needs room: a drain time not longer than the drain timeout by a third schedules nothing', () => {
    const tight = retirementSetup({ connectionDrainTimeoutSecs: 10 });
    const c = tight.connect();
    // 30 s drain time, 10 s timeout: 30 - 10 = 20 = two thirds: no room.
    tight.retirement.scheduleProactiveDrain(0, 30_000, () => true);
    tight.clock.advance(30_000);
    assert.equal(c.connection.retiring, false);
    const roomy = retirementSetup({ connectionDrainTimeoutSecs: 9 });
    const d = roomy.connect();
    roomy.retirement.scheduleProactiveDrain(0, 30_000, () => true);
    roomy.clock.advance(30_000);
    assert.equal(d.connection.retiring, true, 'with one second more of room it is told');
  });
});

describe('ListenerScopes', () => {
  test('no listener named: no scope, and every drain covers it', () => {
    const scopes = new ListenerScopes();
    scopes.register('undefined', { drainType: 'modify_only', direction: 'outbound' });
    assert.equal(scopes.get(undefined), undefined);
    assert.equal(scopes.modifyOnly(undefined), false);
  });
});

describe('Lifecycle: its counters and lines', () => {
  test('requests started are counted for the worker\'s age; draining covers closing too; the forced reason is kept', async () => {
    const t = lifecycleSetup({ minDrainSecs: 0 });
    const c = t.connect();
    t.lifecycle.requestStarted(c.connection);
    t.lifecycle.requestStarted(undefined);
    assert.equal(t.lifecycle.requestsStarted, 2);
    t.lifecycle.requestFinished(c.connection);
    t.lifecycle.requestFinished(undefined);
    t.connect(); // fresh: held after the listeners close
    assert.equal(t.lifecycle.forcedReason, undefined);
    void t.lifecycle.drain('SIGTERM');
    assert.equal(t.lifecycle.state, 'closing');
    assert.equal(t.lifecycle.draining, true);
    t.lifecycle.force('second signal');
    assert.equal(t.lifecycle.forcedReason, 'second signal');
    assert.equal(await t.lifecycle.done, 1);
  });

  test('a live view on no connection is nothing to count; one that ends gives its connection back (L5)', async () => {
    const t = lifecycleSetup({ minDrainSecs: 0 });
    t.lifecycle.watchStarted(undefined);
    t.lifecycle.watchFinished(undefined);
    const c = t.connect();
    t.lifecycle.watchStarted(c.connection);
    t.lifecycle.watchStarted(c.connection);
    t.lifecycle.watchFinished(c.connection);
    assert.equal(c.connection.inFlight, 1);
    const done = t.lifecycle.drain('SIGTERM');
    await nextTurn();
    assert.equal(t.lifecycle.state, 'exited', 'a connection carrying only a live view holds no drain');
    assert.equal(await done, 0);
    const u = lifecycleSetup({ minDrainSecs: 0 });
    const d = u.connect();
    u.lifecycle.watchStarted(d.connection);
    u.lifecycle.watchFinished(d.connection);
    u.lifecycle.requestStarted(d.connection);
    void u.lifecycle.drain('SIGTERM');
    assert.equal(u.lifecycle.state, 'draining', 'its view ended: the connection carries a request, which holds the drain');
    const v = lifecycleSetup({ minDrainSecs: 0 });
    const slow = v.connect();
    slow.socket.destroySoon = () => {}; // a peer slow to close
    v.lifecycle.watchStarted(slow.connection);
    v.lifecycle.watchFinished(slow.connection);
    void v.lifecycle.drain('SIGTERM');
    assert.equal(v.lifecycle.state, 'closing', 'its view ended: an open connection that carries none holds the exit until it closes');
  });

  test('a connection accepted before the drain is not logged as accepted while draining, and its probes are not counted', () => {
    const t = lifecycleSetup({ minDrainSecs: 10 });
    const before = t.connect();
    void t.lifecycle.drain('SIGTERM');
    t.lifecycle.requestStarted(before.connection, true);
    const during = t.connect();
    t.lifecycle.requestStarted(during.connection, true);
    assert.equal(t.lifecycle.status.probeConnections, 1);
    assert.equal(t.lines.filter((l) => l.fields.event === 'connection_accepted_while_draining').length, 0);
  });

  test('the workers\' exit is a moment of the drain, once the last hold is released; a hold released outside a drain is none', async () => {
    const t = lifecycleSetup({ minDrainSecs: 0 });
    t.lifecycle.hold()();
    const first = t.lifecycle.hold();
    const second = t.lifecycle.hold();
    void t.lifecycle.drain('SIGTERM');
    first();
    assert.ok(!t.lifecycle.status.moments().some((m) => m.event === 'workers_exited'), 'one worker still runs');
    second();
    assert.deepEqual(
      t.lifecycle.status.moments().map((m) => m.event),
      ['drain_started', 'window_over', 'workers_exited', 'listeners_closed', 'exited'],
    );
  });

  test('a drain that does not exit is widened to exit by a plain drain; its lines say so in words', async () => {
    const t = lifecycleSetup({ minDrainSecs: 0 });
    const done = t.lifecycle.drain('admin', { exit: false });
    assert.equal(t.lifecycle.state, 'draining');
    void t.lifecycle.drain('SIGTERM');
    assert.equal(await done, 0);
    assert.equal(t.message('drain_widened'), 'drain widened');
    assert.equal(t.message('listeners_closing'), 'listeners closing');
    assert.equal(t.message('process_exit'), 'process exiting');
    const u = lifecycleSetup({ minDrainSecs: 0 });
    void u.lifecycle.drain('admin', { exit: false });
    void u.lifecycle.drain('admin', { exit: false });
    assert.equal(u.lifecycle.state, 'draining', 'a second drain that does not exit widens nothing');
    assert.equal(u.message('drain_widened'), undefined);
  });

  test('O1: the window in the drain lines is the one given, to the last digit, whatever the clock reads', () => {
    const t = lifecycleSetup({ minDrainSecs: 0.5 });
    t.clock.advance(198.01058371560208); // a start where (start + 500 - start) / 1000 is not 0.5
    t.lifecycle.requestStarted(undefined);
    void t.lifecycle.drain('SIGTERM');
    assert.equal(t.lines.find((l) => l.fields.event === 'drain_started')!.fields.min_drain_secs, 0.5);
    assert.equal(t.lifecycle.status.windowSecs(), 0.5);
  });

  test('L8: the forced end\'s line; a socket that never finishes writing holds the exit one second at most', async () => {
    const t = lifecycleSetup({ minDrainSecs: 60 });
    const stuck = t.connect();
    stuck.socket.destroySoon = () => {}; // never finishes writing
    t.lifecycle.requestStarted(stuck.connection);
    const done = t.lifecycle.drain('SIGTERM');
    t.lifecycle.force('max_drain_secs');
    assert.equal(t.message('drain_forced'), 'drain forced');
    assert.equal(t.lifecycle.state, 'closing');
    t.clock.advance(999);
    assert.equal(t.lifecycle.state, 'closing');
    t.clock.advance(1);
    assert.equal(t.lifecycle.state, 'exited');
    assert.equal(await done, 1);
    assert.ok(t.lifecycle.status.moments().some((m) => m.event === 'forced'));
  });

  test('E4: the health override\'s lines carry the numbers and say what happened', () => {
    const t = lifecycleSetup();
    const c = t.connect();
    t.lifecycle.requestStarted(c.connection);
    t.lifecycle.health.fail();
    t.lifecycle.health.restore();
    const failed = t.lines.find((l) => l.fields.event === 'healthcheck_failed')!;
    assert.deepEqual(failed.fields, { event: 'healthcheck_failed', in_flight: 1, open_connections: 1 });
    assert.equal(failed.message, 'health check failed by the admin API');
    assert.equal(t.message('healthcheck_ok'), 'health check restored by the admin API');
  });

  test('E7: a drain that keeps idle connections (a hot restart) keeps them the seconds it was given', () => {
    const t = lifecycleSetup({ minDrainSecs: 0 });
    const idle = t.connect();
    t.lifecycle.requestStarted(idle.connection);
    t.lifecycle.requestFinished(idle.connection);
    void t.lifecycle.drain('hot_restart', { keepIdleSecs: 2 });
    assert.equal(idle.socket.destroyed, false);
    t.clock.advance(1500);
    assert.equal(idle.socket.destroyed, false, 'kept 2 s, not 2 ms');
    t.clock.advance(1000);
    assert.equal(idle.connection.closeReason, 'drain_idle');
  });

  test('E1 gradual: at the end of the drain time every response closes its connection, even with the largest random number', () => {
    const clock = new ManualClock();
    const { log } = logger();
    const lifecycle = new Lifecycle({ clock: clockOf(clock), log, hooks: { stopAccepting: () => {}, shutdown: () => Promise.resolve() }, settings: drainSettings({ minDrainSecs: 10, drainTimeSecs: 10, drainStrategy: 'gradual' }), random: () => 1 });
    lifecycle.markServing();
    lifecycle.requestStarted(undefined); // in flight: the drain stays in its draining state
    void lifecycle.drain('SIGTERM');
    clock.advance(10_000);
    assert.equal(lifecycle.state, 'draining');
    assert.equal(lifecycle.shouldRetire('proxy'), true);
  });
});

describe('Timers', () => {
  test('cancelAll cancels each pending timer once, however often it is called', () => {
    const clock = new ManualClock();
    let cancels = 0;
    const counting: Clock = {
      now: () => clock.now(),
      after: (ms, fn) => {
        const handle = clock.after(ms, fn);
        return { cancel: () => (cancels++, handle.cancel()) };
      },
      every: (ms, fn) => {
        const handle = clock.every(ms, fn);
        return { cancel: () => (cancels++, handle.cancel()) };
      },
    };
    const timers = new Timers(counting);
    timers.after(10, () => {});
    timers.every(10, () => {});
    timers.cancelAll();
    timers.cancelAll();
    assert.equal(cancels, 2);
  });
});
