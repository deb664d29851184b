// ProcessChannel (src/process-channel/channel.ts): the typed IPC channel of both supervisors, over a
// fake transport (two ends of an in-memory pipe) and the manual clock: hello first, replies matched
// by id, timeouts, the other side gone, and connections passed with an acknowledgement.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { Socket } from 'node:net';
import { ProcessChannel } from '../../src/process-channel/channel.ts';
import type { Transport } from '../../src/process-channel/transport.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { handoffSocket } from '../support/handoff-socket.ts';

type Down = { type: 'start'; n: number } | { type: 'ask'; id: number } | { type: 'conn'; handoff: number; meta: string };
type Up = { type: 'hello' } | { type: 'answer'; id: number; value: string } | { type: 'note'; text: string } | { type: 'taken'; handoff: number } | { type: 'refused'; handoff: number };

/** Two ends of a pipe: what one writes the other receives (at once), with its handle. */
function pipe() {
  const a = new EventEmitter();
  const b = new EventEmitter();
  let open = true;
  const written: { from: 'parent' | 'child'; message: unknown; handle: object | undefined }[] = [];
  const end = (self: EventEmitter, other: EventEmitter, from: 'parent' | 'child'): Transport => ({
    connected: () => open,
    write(message, handle, done) {
      if (!open) throw new Error('closed');
      written.push({ from, message, handle });
      other.emit('message', structuredClone(message), handle);
      done?.();
    },
    listen: (receive) => void self.on('message', receive),
    whenGone: (gone) => void self.once('gone', gone),
  });
  return {
    parent: end(a, b, 'parent'),
    child: end(b, a, 'child'),
    written,
    /** The channel closes: each side hears that the other is gone. */
    close() {
      open = false;
      a.emit('gone');
      b.emit('gone');
    },
  };
}

test('hello first: the parent holds what it sends until the hello, then sends the hello handlers\' messages first, in order', () => {
  const p = pipe();
  const parent = new ProcessChannel<Down, Up>(p.parent, { holdUntilHello: true });
  const child = new ProcessChannel<Up, Down>(p.child);
  const heard: Down[] = [];
  child.onAny((m) => heard.push(m));
  const writtenCalls: string[] = [];
  assert.equal(parent.send({ type: 'start', n: 2 }, undefined, () => writtenCalls.push('2')), true);
  assert.equal(parent.send({ type: 'start', n: 3 }), true);
  assert.equal(heard.length, 0, 'nothing written before the hello');
  assert.equal(parent.hello, false);
  parent.on('hello', () => parent.send({ type: 'start', n: 1 }));
  child.send({ type: 'hello' });
  assert.equal(parent.hello, true);
  assert.deepEqual(heard.map((m) => (m.type === 'start' ? m.n : -1)), [1, 2, 3]);
  assert.deepEqual(writtenCalls, ['2']);
  // A second hello changes nothing.
  child.send({ type: 'hello' });
  assert.equal(heard.length, 3);
});

test('held messages are dropped when the other side goes before its hello; their written callbacks still run', () => {
  const p = pipe();
  const parent = new ProcessChannel<Down, Up>(p.parent, { holdUntilHello: true });
  const calls: string[] = [];
  parent.send({ type: 'start', n: 1 }, undefined, () => calls.push('written'));
  p.close();
  assert.deepEqual(calls, ['written']);
  assert.equal(parent.gone, true);
  assert.equal(parent.send({ type: 'start', n: 2 }), false, 'nothing can be sent once gone');
  assert.equal(p.written.length, 0);
});

test('messages are dispatched by type to their handlers; a message without a type is ignored', () => {
  const p = pipe();
  const parent = new ProcessChannel<Down, Up>(p.parent);
  const notes: string[] = [];
  const stop = parent.on('note', (m) => notes.push(m.text));
  let any = 0;
  parent.onAny(() => any++);
  const child = new ProcessChannel<Up, Down>(p.child);
  child.send({ type: 'note', text: 'a' });
  child.send({ type: 'hello' });
  p.child.write({ no: 'type' }, undefined, undefined);
  p.child.write('text', undefined, undefined);
  stop();
  child.send({ type: 'note', text: 'b' });
  assert.deepEqual(notes, ['a']);
  assert.equal(any, 3);
});

test('a request resolves with the reply that carries its id; others are not taken for it', async () => {
  const p = pipe();
  const clock = new ManualClock();
  const parent = new ProcessChannel<Down, Up>(p.parent, { replies: ['answer'], clock });
  const child = new ProcessChannel<Up, Down>(p.child);
  const asked: number[] = [];
  child.on('ask', (m) => asked.push(m.id));
  const first = parent.request<Extract<Up, { type: 'answer' }>>((id) => ({ type: 'ask', id }), 1000);
  const second = parent.request<Extract<Up, { type: 'answer' }>>((id) => ({ type: 'ask', id }), 1000);
  assert.equal(asked.length, 2);
  assert.notEqual(asked[0], asked[1]);
  child.send({ type: 'answer', id: 999, value: 'stray' });
  child.send({ type: 'answer', id: asked[1]!, value: 'two' });
  child.send({ type: 'answer', id: asked[0]!, value: 'one' });
  assert.equal((await first)?.value, 'one');
  assert.equal((await second)?.value, 'two');
});

test('a request not answered in time resolves with nothing, at its timeout and not before; a late reply is ignored', async () => {
  const p = pipe();
  const clock = new ManualClock();
  const parent = new ProcessChannel<Down, Up>(p.parent, { replies: ['answer'], clock });
  const child = new ProcessChannel<Up, Down>(p.child);
  let id = 0;
  child.on('ask', (m) => (id = m.id));
  let settled: unknown = 'pending';
  void parent.request((i) => ({ type: 'ask', id: i }), 1000).then((r) => (settled = r));
  clock.advance(999);
  await Promise.resolve();
  assert.equal(settled, 'pending');
  clock.advance(1);
  await Promise.resolve();
  assert.equal(settled, undefined);
  child.send({ type: 'answer', id, value: 'late' });
  await Promise.resolve();
  assert.equal(settled, undefined);
});

test('the other side gone: waiting requests resolve with nothing at once, and the gone handlers run once', async () => {
  const p = pipe();
  const clock = new ManualClock();
  const parent = new ProcessChannel<Down, Up>(p.parent, { replies: ['answer'], clock });
  new ProcessChannel<Up, Down>(p.child);
  let gone = 0;
  parent.onGone(() => gone++);
  const waiting = parent.request((id) => ({ type: 'ask', id }), 60_000);
  p.close();
  assert.equal(await waiting, undefined);
  assert.equal(gone, 1);
  let late = 0;
  parent.onGone(() => late++);
  assert.equal(late, 1, 'a handler added once gone runs at once');
  assert.equal(await parent.request((id) => ({ type: 'ask', id }), 60_000), undefined, 'nothing can be asked once gone');
});

test('endRequests: every request waiting gets nothing now', async () => {
  const p = pipe();
  const parent = new ProcessChannel<Down, Up>(p.parent, { replies: ['answer'], clock: new ManualClock() });
  new ProcessChannel<Up, Down>(p.child);
  const waiting = parent.request((id) => ({ type: 'ask', id }), 60_000);
  parent.endRequests();
  assert.equal(await waiting, undefined);
});


function handoffPair() {
  const p = pipe();
  const parent = new ProcessChannel<Down, Up>(p.parent);
  const child = new ProcessChannel<Up, Down>(p.child);
  const back: string[] = [];
  const handoff = parent.handoff<string>({ message: (id, meta) => ({ type: 'conn', handoff: id, meta }), taken: 'taken', refused: 'refused', back: (r) => back.push(r.meta) });
  const arrived: { id: number; meta: string; handle: object | undefined }[] = [];
  child.on('conn', (m, handle) => arrived.push({ id: m.handoff, meta: m.meta, handle }));
  return { p, parent, child, handoff, back, arrived };
}

test('handoff: a connection stays the sender\'s until the receiver confirms it; then the sender\'s copy closes', () => {
  const { handoff, child, arrived, back } = handoffPair();
  const socket = handoffSocket('a');
  assert.equal(handoff.pass(socket, 'lease 1'), true);
  assert.deepEqual(arrived.map((a) => [a.meta, a.handle]), [['lease 1', { fd: 'a' }]]);
  assert.equal(handoff.backlog, 1);
  assert.equal(socket.destroyed, false);
  child.send({ type: 'taken', handoff: arrived[0]!.id });
  assert.equal(socket.destroyed, true);
  assert.equal(handoff.backlog, 0);
  assert.deepEqual(back, []);
});

test('handoff: a refused connection goes back to the sender, open', () => {
  const { handoff, child, arrived, back } = handoffPair();
  const socket = handoffSocket('a');
  handoff.pass(socket, 'lease 1');
  child.send({ type: 'refused', handoff: arrived[0]!.id });
  assert.deepEqual(back, ['lease 1']);
  assert.equal(socket.destroyed, false);
  assert.equal(handoff.backlog, 0);
});

test('handoff: what the receiver never answered goes back to the sender when it is gone; nothing more is passed', () => {
  const { p, handoff, child, arrived, back } = handoffPair();
  const [a, b] = [handoffSocket('a'), handoffSocket('b')];
  handoff.pass(a, 'x');
  handoff.pass(b, 'y');
  child.send({ type: 'taken', handoff: arrived[0]!.id });
  p.close();
  assert.deepEqual(back, ['y']);
  assert.equal(a.destroyed, true);
  assert.equal(b.destroyed, false);
  assert.equal(handoff.pass(handoffSocket('c'), 'z'), false);
});

test('receive: the receiver confirms, and takes the connection once the confirmation is written; refuse closes its copy', () => {
  const p = pipe();
  const parent = new ProcessChannel<Down, Up>(p.parent);
  const child = new ProcessChannel<Up, Down>(p.child);
  const order: string[] = [];
  parent.on('taken', (m) => order.push(`taken ${m.handoff}`));
  parent.on('refused', (m) => order.push(`refused ${m.handoff}`));
  const socket = new Socket();
  // A socket already wrapped is used as it is.
  child.receive(socket, { type: 'taken', handoff: 4 }, (taken) => {
    assert.equal(taken, socket);
    order.push('take');
  });
  assert.deepEqual(order, ['taken 4', 'take']);
  let closed = false;
  child.refuse({ close: () => (closed = true) }, { type: 'refused', handoff: 5 });
  assert.deepEqual(order, ['taken 4', 'take', 'refused 5']);
  assert.equal(closed, true);
  // With the channel gone the connection is still taken (nothing else would serve it).
  p.close();
  child.receive(socket, { type: 'taken', handoff: 6 }, () => order.push('take after gone'));
  assert.equal(order.at(-1), 'take after gone');
  socket.destroy();
});
