// A finished exchange's ledger record (src/wiring/ledger-record.ts): its counts as the stores keep
// them, whatever a provider reported.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { ExchangeContext } from '../../src/server/context.ts';
import { ledgerRecord } from '../../src/wiring/ledger-record.ts';
import { encodeLine } from '../../src/ledger/line.ts';
import { storableCount } from '../../src/ledger/record.ts';

function exchange(usage: ExchangeContext['usage']): ExchangeContext {
  const req = { headers: {}, socket: { remoteAddress: '127.0.0.1', remotePort: 40_000 } } as unknown as IncomingMessage;
  const ctx = new ExchangeContext(req, 'proxy', undefined);
  ctx.usage = usage;
  return ctx;
}

test("a provider's token counts are whole in the record, as both stores keep them: a fraction rounded, a count past 2^53 cut there, a whole one as it is", () => {
  const odd = ledgerRecord(exchange({ prompt: 3.7, completion: 1e300, cached: 2.5, cacheWrite: 0.4, estimated: false }), 200, { worker: 0, generation: 0 }, Date.now());
  assert.deepEqual(
    [odd.prompt_tokens, odd.completion_tokens, odd.cached_tokens, odd.cache_write_tokens],
    [4, Number.MAX_SAFE_INTEGER, 3, 0],
  );
  // Its line holds no fraction and no exponent: PostgreSQL's server reads each count straight into a bigint.
  assert.doesNotMatch(encodeLine(odd), /_tokens":-?\d+(\.|e)/);
  const usual = ledgerRecord(exchange({ prompt: 12, completion: 9, cached: 0, estimated: true }), 200, { worker: 0, generation: 0 }, Date.now());
  assert.deepEqual([usual.prompt_tokens, usual.completion_tokens, usual.cached_tokens, usual.cache_write_tokens, usual.usage_estimated], [12, 9, 0, 0, true]);
  const none = ledgerRecord(exchange(undefined), 401, { worker: 0, generation: 0 }, Date.now());
  assert.deepEqual([none.prompt_tokens, none.completion_tokens], [0, 0]);
});

test('storableCount: whole numbers within ±(2^53 − 1) as they are; fractions rounded; beyond, the bound; not finite, 0', () => {
  for (const n of [0, 1, 42, -7, Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER]) assert.equal(storableCount(n), n);
  assert.deepEqual([0.4, 0.5, 2.5, -1.6].map(storableCount), [0, 1, 3, -2]);
  assert.deepEqual([2 ** 53, 1e300, -1e300].map(storableCount), [Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER]);
  assert.deepEqual([Number.NaN, Infinity, -Infinity].map(storableCount), [0, 0, 0]);
});
