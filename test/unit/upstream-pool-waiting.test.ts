// A request that waits for its credentials before it is sent (UpstreamPool.sendWhenReady), and the
// two ways a pool ends (docs/graceful-shutdown.md): L9, a close waits for the requests in
// progress, those still waiting for their credentials included, which are then sent; L8, a forced
// end (destroy) aborts a waiting request at once, so it is never sent, and tells its handler as
// undici would. Against a loopback server that counts what reaches it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { UpstreamPool, type OutgoingRequest } from '../../src/providers/upstream-pool.ts';
import type { ResponseHandler } from '../../src/providers/types.ts';

const SETTINGS = { connect_timeout_ms: 1000, timeout_ms: 5000, max_connections: 0 };

async function server(): Promise<{ url: string; hits: () => number; close: () => Promise<void> }> {
  let hits = 0;
  const s = createServer((req, res) => {
    hits++;
    req.resume();
    req.on('end', () => res.end('{}'));
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, hits: () => hits, close: () => new Promise((r) => s.close(() => r())) };
}

function handler() {
  const seen = { status: 0, error: undefined as Error | undefined, ended: false };
  // undici takes a handler for its current API by its onRequestStart.
  const h: ResponseHandler = {
    onRequestStart: () => {},
    onResponseStart: (_c, status) => void (seen.status = status),
    onResponseData: () => {},
    onResponseEnd: () => void (seen.ended = true),
    onResponseError: (_c, error) => void (seen.error = error),
  };
  return { h, seen };
}

const request = (): OutgoingRequest => ({ path: '/x', headers: { 'content-type': 'application/json' }, body: Buffer.from('{}') });

test('L9: a close waits for a request still waiting for its credentials, which is then sent and answered', async () => {
  const up = await server();
  const pool = new UpstreamPool(up.url, SETTINGS);
  let ready!: (r: OutgoingRequest) => void;
  const { h, seen } = handler();
  pool.sendWhenReady(new Promise((r) => (ready = r)), h);
  let closed = false;
  const closing = pool.close().then(() => (closed = true));
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(closed, false, 'the close waits for the waiting request');
  ready(request());
  await closing;
  assert.equal(seen.status, 200);
  assert.equal(seen.ended, true);
  assert.equal(up.hits(), 1);
  await up.close();
});

test('L8: a forced end aborts a request waiting for its credentials: its handler is told, and it is never sent', async () => {
  const up = await server();
  const pool = new UpstreamPool(up.url, SETTINGS);
  let ready!: (r: OutgoingRequest) => void;
  const { h, seen } = handler();
  pool.sendWhenReady(new Promise((r) => (ready = r)), h);
  await pool.destroy();
  assert.ok(seen.error instanceof Error, 'the handler hears of the abort');
  ready(request());
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(up.hits(), 0, 'never sent');
  assert.equal(seen.status, 0);
  await up.close();
});

test('credentials that cannot be had are the request error; nothing is sent', async () => {
  const up = await server();
  const pool = new UpstreamPool(up.url, SETTINGS);
  const { h, seen } = handler();
  const refusal = new Error('no credentials');
  pool.sendWhenReady(Promise.reject(refusal), h);
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(seen.error, refusal);
  assert.equal(up.hits(), 0);
  await pool.close();
  await up.close();
});
