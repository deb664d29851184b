// WorkerSlot (src/cluster/worker-slot.ts) and the recycler's bounds (src/cluster/recycler.ts), with
// fake worker processes and the manual clock: the start timeout, the restart back-off, the hello
// that releases what the slot held, and when a worker passes `workers_recycle`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Worker } from 'node:cluster';
import type { Logger } from '../../src/telemetry/logger.ts';
import { WorkerSlot, RESTART_DELAY_MS, type SlotHooks, type WorkerProcess } from '../../src/cluster/worker-slot.ts';
import { recycleReason } from '../../src/cluster/recycler.ts';
import { ManualClock } from '../support/manual-clock.ts';

/** A cluster worker as the slot uses it: messages it sent, signals it got. */
function fakeWorker() {
  const worker = new EventEmitter() as EventEmitter & { sent: unknown[]; killed: string[]; say(message: unknown): void };
  const proc = new EventEmitter() as EventEmitter & { pid: number; kill(signal: string): void };
  proc.pid = 4242;
  worker.sent = [];
  worker.killed = [];
  proc.kill = (signal) => void worker.killed.push(signal);
  Object.assign(worker, {
    process: proc,
    isConnected: () => true,
    send: (message: unknown) => void worker.sent.push(message),
    say: (message: unknown) => void worker.emit('message', message, undefined),
  });
  return worker;
}

function slotWith(clock: ManualClock) {
  const lines: { event?: string; [key: string]: unknown }[] = [];
  const log = { info: (l: Record<string, unknown>) => lines.push(l), error: (l: Record<string, unknown>) => lines.push(l), warn: (l: Record<string, unknown>) => lines.push(l) } as unknown as Logger;
  const workers: ReturnType<typeof fakeWorker>[] = [];
  const events: string[] = [];
  const hooks: SlotHooks = {
    hold: () => () => events.push('released'),
    forked: () => events.push('forked'),
    exited: (_slot, _proc, code) => events.push(`exited ${code}`),
    restartDue: () => events.push('restart due'),
  };
  const slot = new WorkerSlot(3, log, clock, hooks, (env) => {
    assert.equal(env.SLUICE_WORKER, '3');
    const worker = fakeWorker();
    workers.push(worker);
    return worker as unknown as Worker;
  });
  return { slot, workers, events, lines };
}

test('a worker that does not serve within the start timeout is killed, and the line says whether it answered', () => {
  const clock = new ManualClock();
  const { slot, workers, lines } = slotWith(clock);
  slot.fork();
  assert.equal(slot.state, 'starting');
  clock.advance(59_999);
  assert.deepEqual(workers[0]!.killed, []);
  clock.advance(1);
  assert.deepEqual(workers[0]!.killed, ['SIGKILL']);
  assert.match(slot.startProblem!, /did not answer within 60 s/);
  assert.equal(lines.find((l) => l.event === 'worker_start_timeout')?.answered, false);
  // A worker that said hello but never became ready.
  const second = slotWith(clock);
  second.slot.fork();
  second.workers[0]!.say({ type: 'hello' });
  clock.advance(60_000);
  assert.deepEqual(second.workers[0]!.killed, ['SIGKILL']);
  assert.match(second.slot.startProblem!, /did not become ready within 60 s/);
});

test('a worker that serves in time is not killed', () => {
  const clock = new ManualClock();
  const { slot, workers } = slotWith(clock);
  slot.fork();
  slot.served();
  clock.advance(120_000);
  assert.deepEqual(workers[0]!.killed, []);
  assert.equal(slot.state, 'ready');
});

test('what is sent before the worker\'s hello is held, then sent in order', () => {
  const clock = new ManualClock();
  const { slot, workers } = slotWith(clock);
  const proc: WorkerProcess = slot.fork();
  slot.send({ type: 'reload_commit', id: 1 });
  assert.deepEqual(workers[0]!.sent, []);
  proc.channel.on('hello', () => proc.channel.send({ type: 'reload_abort', id: 0 }));
  workers[0]!.say({ type: 'hello' });
  assert.deepEqual(workers[0]!.sent, [
    { type: 'reload_abort', id: 0 },
    { type: 'reload_commit', id: 1 },
  ]);
});

test('restarts back off: doubling from the first delay up to the last, and from the first again after a worker served', () => {
  const clock = new ManualClock();
  const { slot, events } = slotWith(clock);
  const delays: number[] = [];
  for (let i = 0; i < 8; i++) {
    slot.scheduleRestart(false, undefined, { pid: 1, code: 1, signal: null });
    assert.equal(slot.state, 'restarting');
    assert.equal(slot.restartPending, true);
    const before = events.length;
    let waited = 0;
    while (events.length === before) {
      clock.advance(100);
      waited += 100;
    }
    delays.push(waited);
    assert.equal(events.at(-1), 'restart due');
    assert.equal(slot.restartPending, false);
  }
  assert.deepEqual(delays, [500, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000]);
  assert.equal(RESTART_DELAY_MS.max, 30_000);
  // A worker that served and died: the back-off starts over.
  const due = () => events.filter((e) => e === 'restart due').length;
  const count = due();
  slot.scheduleRestart(true, undefined, { pid: 1, code: 1, signal: null });
  clock.advance(499);
  assert.equal(due(), count);
  clock.advance(1);
  assert.equal(due(), count + 1);
});

test('a restart cancelled does not come, and the slot is exited', () => {
  const clock = new ManualClock();
  const { slot, events } = slotWith(clock);
  slot.scheduleRestart(true, undefined, { pid: 1, code: 1, signal: null });
  slot.cancelRestart();
  assert.equal(slot.state, 'exited');
  clock.advance(60_000);
  assert.equal(events.includes('restart due'), false);
});

test('recycling bounds: memory first, then requests; a bound of 0 is off', () => {
  const mib = 1024 * 1024;
  assert.equal(recycleReason({ max_rss_mb: 100, max_requests: 0 }, { rss_bytes: 99 * mib, requests_started: 10 ** 9 }), undefined);
  assert.match(recycleReason({ max_rss_mb: 100, max_requests: 0 }, { rss_bytes: 100 * mib })!.reason, /max_rss_mb \(100\)/);
  assert.match(recycleReason({ max_rss_mb: 100, max_requests: 5 }, { rss_bytes: 1, requests_started: 5 })!.reason, /max_requests: 5/);
  assert.deepEqual(recycleReason({ max_rss_mb: 100, max_requests: 5 }, { rss_bytes: 200 * mib, requests_started: 9 })!.fields, { rss_mb: 200, requests: 9 });
  assert.equal(recycleReason({ max_rss_mb: 0, max_requests: 0 }, { rss_bytes: 10 ** 12, requests_started: 10 ** 9 }), undefined);
});
