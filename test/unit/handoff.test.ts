// ConnectionHandoff (src/process-channel/handoff.ts): a connection handed to another process stays the
// sender's until the receiver confirms it; what the receiver refuses, never got, or did not confirm
// before its channel closed is given back, unread and open.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Socket } from 'node:net';
import { ConnectionHandoff, receiveHandoff, type Unconfirmed } from '../../src/process-channel/handoff.ts';
import { handoffSocket } from '../support/handoff-socket.ts';


function channel() {
  const sent: { id: number; meta: string; handle: object }[] = [];
  const back: Unconfirmed<string>[] = [];
  let open = true;
  const handoff = new ConnectionHandoff<string>(
    (id, meta, handle) => {
      if (!open) return false;
      sent.push({ id, meta, handle });
      return true;
    },
    (returned) => back.push(returned),
  );
  return { handoff, sent, back, shut: () => (open = false) };
}

test('the sender keeps its copy until the receiver confirms it; then its copy closes', () => {
  const { handoff, sent, back } = channel();
  const a = handoffSocket('a');
  assert.equal(handoff.pass(a, 'lease 1'), true);
  assert.deepEqual(sent, [{ id: 1, meta: 'lease 1', handle: { fd: 'a' } }]);
  assert.equal(handoff.backlog, 1);
  assert.equal(a.destroyed, false, 'kept open until confirmed');
  handoff.confirmed(1);
  assert.equal(a.destroyed, true);
  assert.equal(handoff.backlog, 0);
  assert.deepEqual(back, []);
  // A confirmation repeated or unknown does nothing.
  handoff.confirmed(1);
  handoff.confirmed(7);
  assert.deepEqual(back, []);
});

test('a refused connection is given back open, not closed', () => {
  const { handoff, back } = channel();
  const a = handoffSocket('a');
  handoff.pass(a, 'lease 1');
  handoff.refused(1);
  assert.deepEqual(back.map((b) => [b.socket, b.meta]), [[a, 'lease 1']]);
  assert.equal(a.destroyed, false);
  assert.equal(handoff.backlog, 0);
});

test('confirmations come in order: one that skips ids gives back the connections before it (they never arrived)', () => {
  const { handoff, back } = channel();
  const [a, b, c] = [handoffSocket('a'), handoffSocket('b'), handoffSocket('c')];
  handoff.pass(a, 'x');
  handoff.pass(b, 'y');
  handoff.pass(c, 'z');
  handoff.confirmed(3);
  assert.deepEqual(back.map((r) => r.socket), [a, b]);
  assert.equal(c.destroyed, true);
  assert.equal(a.destroyed || b.destroyed, false);
  assert.equal(handoff.backlog, 0);
});

test('the receiver gone: every connection it did not confirm is given back, and nothing more is passed', () => {
  const { handoff, back, sent } = channel();
  const [a, b, c] = [handoffSocket('a'), handoffSocket('b'), handoffSocket('c')];
  handoff.pass(a, 'x');
  handoff.pass(b, 'y');
  handoff.confirmed(1);
  handoff.pass(c, 'z');
  handoff.close();
  assert.deepEqual(back.map((r) => r.socket), [b, c]);
  assert.equal(b.destroyed || c.destroyed, false);
  assert.equal(handoff.pass(handoffSocket('d'), 'w'), false);
  assert.equal(sent.length, 3);
  // A late confirmation (none can come after the close, but) changes nothing.
  handoff.confirmed(2);
  assert.equal(b.destroyed, false);
  handoff.close();
  assert.equal(back.length, 2);
});

test('a connection that cannot be sent is not kept (the caller passes it elsewhere); one without a handle is not sent', () => {
  const { handoff, shut, sent } = channel();
  shut();
  assert.equal(handoff.pass(handoffSocket('a'), 'x'), false);
  assert.equal(handoff.backlog, 0);
  const { handoff: other } = channel();
  const closed = Object.assign(handoffSocket('b'), { _handle: null });
  assert.equal(other.pass(closed, 'x'), false);
  assert.equal(sent.length, 0);
});

test('property: every connection handed over ends exactly once: closed here once confirmed, or given back (refused, skipped, or unconfirmed at the close)', async () => {
  const { default: fc } = await import('fast-check');
  const op = fc.oneof(
    fc.constant({ kind: 'pass' as const, id: 0 }),
    fc.record({ kind: fc.constant('confirm' as const), id: fc.integer({ min: 0, max: 25 }) }),
    fc.record({ kind: fc.constant('refuse' as const), id: fc.integer({ min: 0, max: 25 }) }),
  );
  fc.assert(
    fc.property(fc.array(op, { maxLength: 40 }), (ops) => {
      const { handoff, back } = channel();
      const sockets: (Socket & { name: string })[] = [];
      for (const o of ops) {
        if (o.kind === 'pass') {
          const socket = handoffSocket(String(sockets.length));
          sockets.push(socket);
          assert.equal(handoff.pass(socket, socket.name), true);
        } else if (o.kind === 'confirm') handoff.confirmed(o.id);
        else handoff.refused(o.id);
      }
      handoff.close();
      assert.equal(handoff.backlog, 0);
      const returned = back.map((r) => r.socket);
      assert.equal(new Set(returned).size, returned.length, 'none given back twice');
      for (const socket of sockets) assert.equal(socket.destroyed !== returned.includes(socket), true, `socket ${socket.name}: closed xor given back`);
    }),
    { numRuns: 500 },
  );
});

test('the receiver gives the connection to its listener only once its confirmation is written (nothing is read before)', () => {
  const socket = new Socket();
  const order: string[] = [];
  let written: (() => void) | undefined;
  receiveHandoff(
    socket,
    (done) => {
      order.push('confirm');
      written = done;
    },
    (taken) => {
      order.push('take');
      assert.equal(taken, socket, 'a socket already wrapped is used as it is');
    },
  );
  assert.deepEqual(order, ['confirm']);
  written!();
  assert.deepEqual(order, ['confirm', 'take']);
  socket.destroy();
});
