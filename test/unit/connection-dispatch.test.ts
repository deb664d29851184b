// ConnectionDispatch (src/cluster/connection-dispatch.ts): the supervisor's side of the proxy
// sockets with workers, over a fake socket provider: who holds a socket, who is passed each
// connection, and when the socket is served, unserved and closed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { mock } from 'node:test';
import { ConnectionDispatch, RETURNED_WAIT_MS, type DispatchTarget, type HeldLease } from '../../src/cluster/connection-dispatch.ts';
import type { ConnectionTaker, SocketLease, SocketProvider } from '../../src/server/sockets.ts';

/** A provider whose sockets are plain records of what was asked of them. */
function fakeSockets() {
  const sockets: { listener: string; configured: string; taker: ConnectionTaker | undefined; holders: number; closed: boolean }[] = [];
  const provider: SocketProvider = {
    async acquire(listener, configured) {
      let socket = sockets.find((s) => s.configured === configured && !s.closed && configured !== '127.0.0.1:0');
      if (!socket) sockets.push((socket = { listener, configured, taker: undefined, holders: 0, closed: false }));
      socket.holders++;
      const s = socket;
      let held = true;
      const lease: SocketLease = {
        bound: '127.0.0.1:9999',
        address: () => ({ address: '127.0.0.1', port: 9999, family: 'IPv4' }) as AddressInfo,
        serve: (taker) => (s.taker = taker),
        unserve: (taker) => {
          if (s.taker === taker) s.taker = undefined;
        },
        letGo: () => {
          if (!held) return;
          held = false;
          if (--s.holders === 0) s.closed = true;
        },
      };
      return lease;
    },
  };
  /** A connection arriving on the first socket (as its listening socket would hand it over). */
  const arrive = (socket = fakeSocket()): Socket => {
    const taker = sockets[0]?.taker;
    assert.ok(taker, 'the socket is served');
    taker(socket);
    return socket;
  };
  return { provider, sockets, arrive };
}

function fakeSocket(): Socket {
  let destroyed = false;
  return {
    destroy() {
      destroyed = true;
    },
    get destroyed() {
      return destroyed;
    },
  } as unknown as Socket;
}

/** A worker that records what it is passed; `backlog` stands for the connections it has not confirmed. */
function worker(name: string, alive = true) {
  const passed: { lease: number; socket: Socket; held: HeldLease }[] = [];
  const target: DispatchTarget & { alive: boolean; name: string; passed: typeof passed; backlog: number } = {
    name,
    alive,
    passed,
    backlog: 0,
    pass(socket, held) {
      if (!target.alive) return false;
      passed.push({ lease: held.id, socket, held });
      return true;
    },
  };
  return target;
}

const settle = () => new Promise((r) => setImmediate(r));

test('workers of one listener share one socket; each connection goes to the next serving worker in turn', async () => {
  const { provider, sockets, arrive } = fakeSockets();
  const dispatch = new ConnectionDispatch(provider);
  const [a, b] = [worker('a'), worker('b')];
  assert.equal(await dispatch.acquire(a, 1, 'proxy', '127.0.0.1:0'), '127.0.0.1:9999');
  await dispatch.acquire(b, 1, 'proxy', '127.0.0.1:0');
  assert.equal(sockets.length, 1, 'one socket for the listener, even at port 0');
  dispatch.serve(a, 1, true);
  dispatch.serve(b, 1, true);
  await settle();
  for (let i = 0; i < 6; i++) arrive();
  assert.equal(a.passed.length, 3);
  assert.equal(b.passed.length, 3);
});

test('nobody serving: the socket is unserved (its connections wait); serving again resumes', async () => {
  const { provider, sockets } = fakeSockets();
  const dispatch = new ConnectionDispatch(provider);
  const a = worker('a');
  await dispatch.acquire(a, 7, 'proxy', '127.0.0.1:0');
  await settle();
  assert.equal(sockets[0]!.taker, undefined, 'held but not serving: not served');
  dispatch.serve(a, 7, true);
  await settle();
  assert.ok(sockets[0]!.taker);
  dispatch.serve(a, 7, false);
  await settle();
  assert.equal(sockets[0]!.taker, undefined);
});

test('a worker that cannot take a connection (gone) is skipped: the next one gets it; none left: the connection waits, then closes with the socket', async () => {
  const { provider, sockets, arrive } = fakeSockets();
  const dispatch = new ConnectionDispatch(provider);
  const [a, b] = [worker('a', false), worker('b')];
  await dispatch.acquire(a, 1, 'proxy', '127.0.0.1:0');
  await dispatch.acquire(b, 1, 'proxy', '127.0.0.1:0');
  dispatch.serve(a, 1, true);
  dispatch.serve(b, 1, true);
  await settle();
  arrive();
  arrive();
  assert.equal(b.passed.length, 2);
  b.alive = false;
  const waiting = arrive();
  assert.equal(waiting.destroyed, false, 'kept for a worker that serves');
  assert.equal(dispatch.waiting, 1);
  // Both exit: the socket closes, and so does what waited on it.
  dispatch.gone(a);
  dispatch.gone(b);
  await settle();
  assert.equal(sockets[0]!.closed, true);
  assert.equal(waiting.destroyed, true);
  assert.equal(dispatch.waiting, 0);
});

test('a connection a worker gives back (refused, or never confirmed before it died) goes to another serving worker, never back to the same', async () => {
  const { provider, arrive } = fakeSockets();
  const dispatch = new ConnectionDispatch(provider);
  const [a, b] = [worker('a'), worker('b')];
  await dispatch.acquire(a, 1, 'proxy', '127.0.0.1:0');
  await dispatch.acquire(b, 4, 'proxy', '127.0.0.1:0');
  dispatch.serve(a, 1, true);
  dispatch.serve(b, 4, true);
  await settle();
  const socket = arrive();
  const first = a.passed[0] ?? b.passed[0];
  const [from, other] = a.passed.length === 1 ? [a, b] : [b, a];
  // Several times: round robin would otherwise give it back to `from` every other time.
  for (let i = 0; i < 3; i++) {
    const before = other.passed.length;
    first!.held.returned(socket);
    assert.equal(other.passed.length, before + 1, 'the other worker gets it');
    assert.equal(other.passed.at(-1)!.socket, socket);
    assert.equal(other.passed.at(-1)!.lease, other === a ? 1 : 4, "for the other worker's own lease");
  }
  assert.equal(from.passed.length, 1);
  assert.equal(socket.destroyed, false);
});

test('a connection given back while no other worker serves waits for one (then it is passed) or RETURNED_WAIT_MS (then it is closed)', async () => {
  const { provider, arrive } = fakeSockets();
  let now = 1_000_000;
  mock.timers.enable({ apis: ['setInterval'] });
  try {
    const dispatch = new ConnectionDispatch(provider, () => now);
    const [a, b] = [worker('a'), worker('b')];
    await dispatch.acquire(a, 1, 'proxy', '127.0.0.1:0');
    await dispatch.acquire(b, 1, 'proxy', '127.0.0.1:0');
    dispatch.serve(a, 1, true);
    await settle();
    const early = arrive();
    const late = arrive();
    assert.equal(a.passed.length, 2);
    // a dies without confirming either; b holds the socket but does not serve it yet.
    a.alive = false;
    a.passed[0]!.held.returned(early);
    assert.equal(dispatch.waiting, 1);
    now += RETURNED_WAIT_MS - 1000;
    mock.timers.tick(1000);
    a.passed[1]!.held.returned(late);
    assert.equal(dispatch.waiting, 2);
    now += 1000;
    mock.timers.tick(1000);
    assert.equal(early.destroyed, true, 'waited RETURNED_WAIT_MS: closed');
    assert.equal(late.destroyed, false);
    dispatch.serve(b, 1, true);
    await settle();
    assert.deepEqual(b.passed.map((p) => p.socket), [late], 'served as soon as a worker serves the socket');
    assert.equal(dispatch.waiting, 0);
  } finally {
    mock.timers.reset();
  }
});

test('a worker with a long backlog (connections not confirmed) is skipped while another has less', async () => {
  const { provider, arrive } = fakeSockets();
  const dispatch = new ConnectionDispatch(provider);
  const [a, b] = [worker('a'), worker('b')];
  await dispatch.acquire(a, 1, 'proxy', '127.0.0.1:0');
  await dispatch.acquire(b, 1, 'proxy', '127.0.0.1:0');
  dispatch.serve(a, 1, true);
  dispatch.serve(b, 1, true);
  await settle();
  a.backlog = 64;
  for (let i = 0; i < 4; i++) arrive();
  assert.equal(a.passed.length, 0);
  assert.equal(b.passed.length, 4);
  // Both long: round robin again (nothing else can take them).
  b.backlog = 100;
  for (let i = 0; i < 4; i++) arrive();
  assert.equal(a.passed.length, 2);
  assert.equal(b.passed.length, 6);
});

test('the socket closes when the last worker lets go of it (or exits), not before', async () => {
  const { provider, sockets } = fakeSockets();
  const dispatch = new ConnectionDispatch(provider);
  const [a, b] = [worker('a'), worker('b')];
  await dispatch.acquire(a, 1, 'proxy', '127.0.0.1:8080');
  await dispatch.acquire(b, 3, 'proxy', '127.0.0.1:8080');
  dispatch.serve(a, 1, true);
  dispatch.serve(b, 3, true);
  await settle();
  dispatch.letGo(a, 1);
  await settle();
  assert.equal(sockets[0]!.closed, false);
  assert.ok(sockets[0]!.taker, 'b still serves it');
  dispatch.gone(b);
  await settle();
  assert.equal(sockets[0]!.closed, true);
  assert.equal(sockets[0]!.taker, undefined);
  // A later worker's acquire gets a new socket.
  const c = worker('c');
  await dispatch.acquire(c, 1, 'proxy', '127.0.0.1:8080');
  assert.equal(sockets.length, 2);
});

test('a lease id is the worker\'s own: two workers may use the same number', async () => {
  const { provider, arrive } = fakeSockets();
  const dispatch = new ConnectionDispatch(provider);
  const [a, b] = [worker('a'), worker('b')];
  await dispatch.acquire(a, 1, 'proxy', '127.0.0.1:0');
  await dispatch.acquire(b, 1, 'proxy', '127.0.0.1:0');
  dispatch.serve(a, 1, true);
  await settle();
  arrive();
  arrive();
  assert.equal(a.passed.length, 2);
  assert.equal(b.passed.length, 0, "b's lease 1 does not serve: a's serve was a's");
});

test('two listeners are two sockets, each served by its own holders', async () => {
  const { provider, sockets } = fakeSockets();
  const dispatch = new ConnectionDispatch(provider);
  const a = worker('a');
  await dispatch.acquire(a, 1, 'proxy', '127.0.0.1:0');
  await dispatch.acquire(a, 2, 'other', '127.0.0.1:0');
  assert.equal(sockets.length, 2);
  dispatch.serve(a, 2, true);
  await settle();
  assert.equal(sockets[0]!.taker, undefined, "proxy's socket is not served by the other listener's lease");
  assert.ok(sockets[1]!.taker);
});
