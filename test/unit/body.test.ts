// Reading a request body (src/server/body.ts) without a network: the rest of a body answered early
// is read and dropped for at most ten seconds of the clock it is given, then the connection is cut.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import type { IncomingMessage } from 'node:http';
import { discardRest, readBody } from '../../src/server/body.ts';
import { ManualClock } from '../support/manual-clock.ts';

/** A request whose body is still coming, and how often its connection was cut. */
function uploading(headers: Record<string, string> = {}): { req: IncomingMessage; body: PassThrough; cuts: () => number } {
  const body = new PassThrough();
  let cuts = 0;
  Object.assign(body, { complete: false, headers, socket: { destroy: () => cuts++ } });
  return { req: body as unknown as IncomingMessage, body, cuts: () => cuts };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('the rest of a body answered early', () => {
  test('is read for ten seconds of the clock it is given, then the connection is cut', () => {
    const clock = new ManualClock();
    const { req, body, cuts } = uploading();
    discardRest(req, clock);
    body.write(Buffer.alloc(1024));
    clock.advance(9_999);
    assert.equal(cuts(), 0, 'still reading');
    clock.advance(1);
    assert.equal(cuts(), 1, 'cut when the manual clock says ten seconds are over');
  });

  test('a body that ends in time keeps its connection', async () => {
    const clock = new ManualClock();
    const { req, body, cuts } = uploading();
    discardRest(req, clock);
    body.end(Buffer.alloc(10));
    await turn();
    clock.advance(60_000);
    assert.equal(cuts(), 0);
  });

  test('readBody: a declared length past the limit is a 413 at once, and the rest is discarded on the clock it is given', async () => {
    const clock = new ManualClock();
    const { req, cuts } = uploading({ 'content-length': '2048' });
    const result = await readBody(req, 1024, clock);
    assert.ok(!result.ok && result.error?.status === 413);
    clock.advance(10_000);
    assert.equal(cuts(), 1);
  });

  test('readBody: a body that grows past the limit is a 413, and the rest is discarded on the clock it is given', async () => {
    const clock = new ManualClock();
    const { req, body, cuts } = uploading();
    const reading = readBody(req, 1024, clock);
    body.write(Buffer.alloc(2048));
    const result = await reading;
    assert.ok(!result.ok && result.error?.status === 413);
    clock.advance(9_999);
    assert.equal(cuts(), 0);
    clock.advance(1);
    assert.equal(cuts(), 1);
  });
});
