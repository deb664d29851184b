// ListenerSockets (src/server/sockets.ts): who gets which listening socket, when it closes, and
// what a socket does with the connections that arrive while nobody takes them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { ListenerSockets, type ConnectionTaker } from '../../src/server/sockets.ts';

/** Connects to `bound` and sends `bytes`; resolves with the client socket once connected. */
async function client(bound: string, bytes = ''): Promise<Socket> {
  const [host, port] = [bound.slice(0, bound.lastIndexOf(':')), Number(bound.slice(bound.lastIndexOf(':') + 1))];
  const socket = connect(port, host);
  socket.on('error', () => {});
  await once(socket, 'connect');
  if (bytes) socket.write(bytes);
  return socket;
}

function taker(): { take: ConnectionTaker; got: Socket[]; next(): Promise<Socket> } {
  const got: Socket[] = [];
  const waiters: ((s: Socket) => void)[] = [];
  return {
    got,
    take: (socket) => {
      got.push(socket);
      waiters.shift()?.(socket);
    },
    next: () => (got.length > waiters.length ? Promise.resolve(got[waiters.length]!) : new Promise((r) => waiters.push(r))),
  };
}

test('a fixed address is one socket whoever asks; port 0 is a socket of one\'s own', async () => {
  const sockets = new ListenerSockets();
  const a = await sockets.acquire('a', '127.0.0.1:0');
  const b = await sockets.acquire('b', '127.0.0.1:0');
  assert.notEqual(a.bound, b.bound, 'two port-0 listeners get two ports');
  const again = await sockets.acquire('renamed', a.bound);
  assert.equal(again.bound, a.bound, 'a listener asking for a bound address shares its socket (no EADDRINUSE)');
  sockets.closeAll();
});

test('the socket closes when its last holder lets go, not before', async () => {
  const sockets = new ListenerSockets();
  const first = await sockets.acquire('old', '127.0.0.1:0');
  const second = await sockets.acquire('new', first.bound);
  first.letGo();
  const still = await client(first.bound);
  still.destroy();
  second.letGo();
  await assert.rejects(client(first.bound), /ECONNREFUSED/);
});

test('connections wait, unread, while nobody takes them; the next taker gets them with every byte', async () => {
  const sockets = new ListenerSockets();
  const lease = await sockets.acquire('proxy', '127.0.0.1:0');
  const c = await client(lease.bound, 'GET / HTTP/1.1\r\n\r\n');
  await new Promise((r) => setTimeout(r, 50));
  const t = taker();
  lease.serve(t.take);
  const served = await t.next();
  served.resume();
  const [chunk] = (await once(served, 'data')) as [Buffer];
  assert.equal(chunk.toString(), 'GET / HTTP/1.1\r\n\r\n');
  c.destroy();
  sockets.closeAll();
});

test('unserve by someone else does nothing; by the taker, connections wait again', async () => {
  const sockets = new ListenerSockets();
  const lease = await sockets.acquire('proxy', '127.0.0.1:0');
  const bound = lease.bound;
  const t = taker();
  lease.serve(t.take);
  lease.unserve(() => {});
  const c1 = await client(lease.bound);
  await t.next();
  lease.unserve(t.take);
  const c2 = await client(lease.bound);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(t.got.length, 1, 'the second waits');
  const withdrawn = sockets.withdrawAll();
  assert.equal(withdrawn.length, 1, 'and is handed out by withdrawAll, open');
  assert.equal(withdrawn[0]!.bound, bound);
  assert.equal(withdrawn[0]!.socket.destroyed, false);
  await assert.rejects(client(bound), /ECONNREFUSED/, 'withdrawAll stops accepting');
  for (const s of [c1, c2, ...t.got, withdrawn[0]!.socket]) s.destroy();
});

test('an adopted socket goes to the listener of the same name and configured address; others are closed as unclaimed', async () => {
  // Two listening sockets "from the previous generation".
  const listen = async (): Promise<Server> => {
    const server = createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    return server;
  };
  const kept = await listen();
  const dropped = await listen();
  const keptBound = `127.0.0.1:${(kept.address() as { port: number }).port}`;
  const droppedBound = `127.0.0.1:${(dropped.address() as { port: number }).port}`;
  const sockets = new ListenerSockets();
  sockets.adopt({ name: 'proxy', configured: '127.0.0.1:0', bound: keptBound }, kept);
  sockets.adopt({ name: 'gone', configured: '127.0.0.1:0', bound: droppedBound }, dropped);
  const lease = await sockets.acquire('proxy', '127.0.0.1:0');
  assert.equal(lease.bound, keptBound, 'same name, same configured address: the same port, kept');
  sockets.closeUnclaimed();
  await assert.rejects(client(droppedBound), /ECONNREFUSED/);
  const handed = sockets.handOver();
  assert.deepEqual(handed.map((h) => h.handed), [{ name: 'proxy', configured: '127.0.0.1:0', bound: keptBound }]);
  sockets.closeAll();
});

test('a bind that fails names the listener, the address and why', async () => {
  const sockets = new ListenerSockets();
  const taken = await sockets.acquire('a', '127.0.0.1:0');
  const other = new ListenerSockets();
  await assert.rejects(other.acquire('b', taken.bound), (error: Error & { code?: string }) => {
    assert.match(error.message, new RegExp(`listener "b" cannot listen on ${taken.bound.replaceAll('.', '\\.')}: the address is already in use`));
    assert.equal(error.code, 'EADDRINUSE');
    return true;
  });
  sockets.closeAll();
});

test('connections still waiting when the last holder lets go are closed; a connection taken afterwards is closed too', async () => {
  const sockets = new ListenerSockets();
  const lease = await sockets.acquire('proxy', '127.0.0.1:0');
  const bound = lease.bound;
  const c = await client(bound);
  const closed = once(c, 'close');
  await new Promise((r) => setTimeout(r, 50));
  lease.letGo();
  await closed;
  assert.deepEqual(sockets.handOver(), [], 'nothing left to hand over');
});

test('two fixed addresses are two sockets; a listener asking for another fixed address does not get this one', async () => {
  const sockets = new ListenerSockets();
  const a = await sockets.acquire('a', '127.0.0.1:0');
  const b = await sockets.acquire('b', '127.0.0.1:0');
  const again = await sockets.acquire('c', b.bound);
  assert.equal(again.bound, b.bound);
  assert.notEqual(again.bound, a.bound);
  assert.equal(sockets.handOver().length, 2);
  sockets.closeAll();
});
