// Drain controls beyond a signal (rules E1-E5): strategies, proactive drain, admin drains,
// health-check fail, per-listener drain type and direction. Fake clock, fixed random source.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { ManualClock } from '../support/manual-clock.ts';
import { closeProbability, proactiveDrainAt } from '../../src/lifecycle/drain-policy.ts';
import { Lifecycle } from '../../src/lifecycle/lifecycle.ts';
import type { DrainSettings } from '../../src/lifecycle/contracts.ts';
import { drainSettings } from '../support/drain-settings.ts';
import { WebSocketProtocol } from '../../src/server/upgrade.ts';

class FakeSocket extends EventEmitter {
  destroyed = false;
  closedBy: string | undefined;
  remoteAddress = '192.0.2.1';
  remotePort = 1;
  destroy(): this {
    return this.#close('destroy');
  }
  destroySoon(): void {
    this.#close('end');
  }
  #close(how: string): this {
    if (!this.destroyed) {
      this.destroyed = true;
      this.closedBy = how;
      this.emit('close');
    }
    return this;
  }
}

function setup(settings: Partial<DrainSettings> = {}, random: () => number = () => 0.5) {
  const clock = new ManualClock();
  const stopped: string[] = [];
  const events: string[] = [];
  const log = (fields: object) => events.push(String((fields as { event?: string }).event));
  const lifecycle = new Lifecycle({
    clock,
    random,
    log: { info: log, warn: log },
    hooks: {
      stopAccepting: (include) => {
        for (const name of ['proxy', 'egress', 'admin']) if (!include || include(name)) stopped.push(name);
      },
      shutdown: async () => {},
    },
    settings: drainSettings(settings),
  });
  lifecycle.registerListener('proxy', { drainType: 'default', direction: 'inbound' });
  lifecycle.registerListener('egress', { drainType: 'modify_only', direction: 'outbound' });
  lifecycle.registerListener('admin', { drainType: 'default', direction: 'outbound' });
  lifecycle.markServing();
  const connect = (listener = 'proxy') => {
    const socket = new FakeSocket();
    return { socket, connection: lifecycle.connections.add(socket as unknown as Socket, listener) };
  };
  const idle = (listener = 'proxy') => {
    const c = connect(listener);
    lifecycle.requestStarted(c.connection);
    lifecycle.requestFinished(c.connection);
    return c;
  };
  return { clock, lifecycle, stopped, events, connect, idle };
}

describe('E1: strategies', () => {
  test('close probability at 0, 25, 50, 75 and 100 % of the drain time', () => {
    const T = 40_000;
    for (const [at, gradual] of [
      [0, 0],
      [0.25, 0.5],
      [0.5, 1],
      [0.75, 1],
      [1, 1],
    ] as const) {
      assert.equal(closeProbability('gradual', at * T, T), gradual, `gradual at ${at * 100}%`);
      assert.equal(closeProbability('immediate', at * T, T), 1, `immediate at ${at * 100}%`);
    }
  });

  test('gradual: shouldRetire follows the random source against the rising probability', () => {
    let roll = 0.3;
    const t = setup({ drainStrategy: 'gradual', drainTimeSecs: 40, minDrainSecs: 40 }, () => roll);
    void t.lifecycle.drain('SIGTERM');
    assert.equal(t.lifecycle.shouldRetire('proxy'), false, 't=0: probability 0');
    t.clock.advance(5_000); // 25 % of half the drain time → p = 0.25
    assert.equal(t.lifecycle.shouldRetire('proxy'), false, 'p 0.25 < roll 0.3');
    t.clock.advance(2_000); // p = 0.35
    assert.equal(t.lifecycle.shouldRetire('proxy'), true, 'p 0.35 > roll 0.3');
    roll = 0.99999;
    t.clock.advance(12_999); // just before half the drain time: p just under 1
    assert.equal(t.lifecycle.shouldRetire('proxy'), false);
    t.clock.advance(1); // at half the drain time: p = 1
    assert.equal(t.lifecycle.shouldRetire('proxy'), true);
  });

  test('immediate: every response retires from the first moment', () => {
    const t = setup({ drainStrategy: 'immediate' }, () => 0.999);
    assert.equal(t.lifecycle.shouldRetire('proxy'), false);
    void t.lifecycle.drain('SIGTERM');
    assert.equal(t.lifecycle.shouldRetire('proxy'), true);
  });

  test('gradual drains do not GOAWAY every HTTP/2 session at the start; immediate ones do', () => {
    for (const strategy of ['gradual', 'immediate'] as const) {
      const t = setup({ drainStrategy: strategy });
      let calls = 0;
      t.lifecycle.onRetire('proxy', () => calls++);
      void t.lifecycle.drain('SIGTERM');
      assert.equal(calls, strategy === 'immediate' ? 1 : 0, strategy);
    }
  });
});

describe('E2/E3: proactive drain', () => {
  test('moments fall inside the last third and before drain end minus the drain timeout', () => {
    const T = 60_000;
    const timeout = 5_000;
    for (let i = 0; i <= 100; i++) {
      const at = proactiveDrainAt(T, timeout, -1000, () => i / 100)!;
      assert.ok(at >= (2 * T) / 3 && at <= T - timeout, `moment ${at}`);
    }
  });

  test('skipped when the drain time leaves no room, and for connections accepted in the last third', () => {
    assert.equal(proactiveDrainAt(12_000, 5_000, 0, () => 0.5), undefined, '12 s drain, 5 s timeout: last third too short');
    assert.equal(proactiveDrainAt(60_000, 5_000, 40_000, () => 0.5), undefined, 'accepted when the last third began');
    assert.notEqual(proactiveDrainAt(60_000, 5_000, 39_999, () => 0.5), undefined);
  });

  /** An idle connection, a busy one and an upgraded (WebSocket) one, then a SIGTERM drain. */
  const idleBusyAndUpgraded = (t: ReturnType<typeof setup>) => {
    const idle = t.idle();
    const busy = t.connect();
    t.lifecycle.requestStarted(busy.connection);
    const ws = t.connect();
    t.lifecycle.requestStarted(ws.connection);
    ws.connection.upgraded(new WebSocketProtocol(ws.connection));
    void t.lifecycle.drain('SIGTERM');
    return { idle, busy, ws };
  };

  test('idle connections are closed one drain timeout after their proactive moment; active ones retire; upgraded ones finish (E3)', () => {
    const t = setup({ drainStrategy: 'gradual', drainTimeSecs: 60, minDrainSecs: 60, connectionDrainTimeoutSecs: 5 }, () => 0);
    const { idle, busy, ws } = idleBusyAndUpgraded(t);
    t.clock.advance(39_999);
    assert.equal(idle.socket.destroyed, false);
    assert.equal(busy.connection.retiring, false);
    t.clock.advance(1); // 2/3 of 60 s, random 0: the moment is now
    assert.equal(busy.connection.retiring, true, 'busy connection told to go (Connection: close on its next response)');
    assert.equal(idle.socket.destroyed, false, 'idle: waits for its own drain timeout');
    t.clock.advance(5_000);
    assert.equal(idle.socket.closedBy, 'end');
    assert.equal(busy.socket.destroyed, false, 'busy: left to finish');
    t.clock.advance(60_000);
    assert.equal(ws.socket.destroyed, false, 'E3: a session in flight is never reset by the drain');
    assert.equal(ws.connection.retiring, false);
    assert.equal(t.lifecycle.state, 'draining', 'the session keeps the process up (L7)');
    t.lifecycle.requestFinished(ws.connection);
    t.lifecycle.requestFinished(busy.connection);
    assert.equal(t.lifecycle.state, 'closing');
  });

  test('E3 opt-in: reset_upgraded_on_proactive_drain resets an upgraded connection at its proactive moment', () => {
    const t = setup({ drainStrategy: 'gradual', drainTimeSecs: 60, minDrainSecs: 60, connectionDrainTimeoutSecs: 5, resetUpgradedOnProactiveDrain: true }, () => 0);
    const { idle, busy, ws } = idleBusyAndUpgraded(t);
    t.clock.advance(39_999);
    assert.equal(idle.socket.destroyed, false);
    assert.equal(busy.connection.retiring, false);
    t.clock.advance(1); // 2/3 of 60 s, random 0: the moment is now
    assert.equal(busy.connection.retiring, true, 'busy connection told to go (Connection: close on its next response)');
    assert.equal(ws.socket.closedBy, 'destroy', 'E3: an upgraded HTTP/1 stream is reset at once');
    assert.equal(idle.socket.destroyed, false, 'idle: waits for its own drain timeout');
    t.clock.advance(5_000);
    assert.equal(idle.socket.closedBy, 'end');
    assert.equal(busy.socket.destroyed, false, 'busy: left to finish');
  });

  test('not done for a health-check-failed drain (it has no drain time)', () => {
    const t = setup({ drainTimeSecs: 60, connectionDrainTimeoutSecs: 5 }, () => 0);
    const idle = t.idle();
    t.lifecycle.health.fail();
    t.clock.advance(120_000);
    assert.equal(idle.socket.destroyed, false);
    assert.equal(idle.connection.retiring, false);
  });
});

describe('E4: admin drains and health check', () => {
  test('health-check fail: readiness fails, default listeners retire at once, modify_only ones do not; ok restores', () => {
    const t = setup();
    assert.equal(t.lifecycle.health.fail(), true);
    assert.equal(t.lifecycle.health.fail(), false, 'a repeated call is a no-op');
    assert.equal(t.lifecycle.ready(), false);
    assert.equal(t.lifecycle.shouldRetire('proxy'), true);
    assert.equal(t.lifecycle.shouldRetire('egress'), false, 'E5: modify_only');
    assert.deepEqual(t.stopped, [], 'listeners keep accepting');
    t.lifecycle.health.restore();
    assert.equal(t.lifecycle.ready(), true);
    assert.equal(t.lifecycle.shouldRetire('proxy'), false);
  });

  test('non-graceful drain_listeners stops accepting now, keeps connections and the process', async () => {
    const t = setup();
    const c = t.idle();
    void t.lifecycle.drain('admin', { graceful: false, exit: false });
    assert.deepEqual(t.stopped, ['proxy', 'admin'], 'stopped at once (not the modify_only listener)');
    assert.equal(c.socket.destroyed, false);
    assert.equal(t.lifecycle.ready(), false);
    t.clock.advance(600_000);
    assert.equal(t.lifecycle.state, 'draining', 'no exit');
  });

  test('graceful with skip_exit: listeners stay open and the process stays after the drain time', () => {
    const t = setup({ minDrainSecs: 30 });
    void t.lifecycle.drain('admin', { graceful: true, exit: false, windowSecs: 10 });
    t.clock.advance(60_000);
    assert.deepEqual(t.stopped, []);
    assert.equal(t.lifecycle.state, 'draining');
    assert.equal(t.lifecycle.ready(), false);
  });

  test('graceful drain keeps accepting for the drain time, then stops and exits; a repeated call is a no-op', async () => {
    const t = setup({ minDrainSecs: 30 });
    const first = t.lifecycle.drain('admin', { graceful: true, windowSecs: 10 });
    const again = t.lifecycle.drain('admin', { graceful: true, windowSecs: 10 });
    assert.equal(first, again);
    t.clock.advance(9_999);
    assert.deepEqual(t.stopped, []);
    t.clock.advance(1);
    assert.deepEqual(t.stopped, ['proxy', 'egress', 'admin']);
    assert.equal(await first, 0);
    assert.equal(t.events.filter((e) => e === 'drain_started').length, 1);
  });

  test('inboundonly leaves outbound listeners alone; a later signal widens the drain to all and to exit', async () => {
    const t = setup();
    void t.lifecycle.drain('admin', { graceful: true, inboundOnly: true, exit: false, windowSecs: 1 });
    assert.equal(t.lifecycle.shouldRetire('proxy'), true);
    assert.equal(t.lifecycle.shouldRetire('admin'), false, 'outbound');
    t.clock.advance(5_000);
    assert.equal(t.lifecycle.state, 'draining');
    const done = t.lifecycle.drain('SIGTERM');
    assert.equal(t.lifecycle.shouldRetire('admin'), true);
    assert.ok(t.events.includes('drain_widened'));
    assert.equal(await done, 0);
  });
});
