// Limits, budgets and prices without a network: the bucket arithmetic, the memory store (the same
// answers the Redis scripts give, checked against a real Redis in test/e2e/limits-redis.test.ts),
// the limiter's decisions and headers, and the stream usage the gateway asks for and hides.

import { describe, test } from 'node:test';
import fc from 'fast-check';
import assert from 'node:assert/strict';
import { admits, fullInMs, levelAt, waitMs } from '../../src/limits/bucket.ts';
import { MemoryStore } from '../../src/limits/memory-store.ts';
import { Limiter } from '../../src/limits/limiter.ts';
import { LimitPolicy, type LimitedKey } from '../../src/limits/limit-policy.ts';
import { UNLIMITED, type Admission } from '../../src/limits/admission.ts';
import { formatDuration } from '../../src/limits/rate-limit-refusal.ts';
import { budgetPeriod } from '../../src/limits/budgets.ts';
import { estimateTokens } from '../../src/limits/estimates.ts';
import { Prices, costMicros } from '../../src/limits/prices.ts';
import { StoreUnavailable, type Ask, type LimitStore, type Settlement } from '../../src/limits/store.ts';
import { UsageStripper, withStreamUsage } from '../../src/gateway/stream-usage.ts';
import { GatewayError } from '../../src/api/errors.ts';
import { parseConfig } from '../../src/config/load.ts';
import { ManualClock } from '../support/manual-clock.ts';

const ask = (over: Partial<Ask> = {}): Ask => ({ requests: [], tokens: [], cost: 0, concurrency: [], budgets: [], hold: 0, lease: 'l1', leaseMs: 30_000, ...over });

describe('bucket', () => {
  test('a full bucket, its refill and the waits', () => {
    assert.equal(levelAt(undefined, 60, 0), 60);
    assert.equal(levelAt({ level: 0, at: 0 }, 60, 1000), 1);
    assert.equal(levelAt({ level: 0, at: 0 }, 60, 10 * 60_000), 60, 'never above capacity');
    assert.equal(levelAt({ level: -30, at: 0 }, 60, 1000), -29, 'a debt refills too');
    assert.ok(admits(1, 60, 1));
    assert.ok(!admits(0.5, 60, 1));
    assert.ok(admits(100, 100, 5000), 'a request larger than the bucket passes when it is full');
    assert.ok(!admits(99, 100, 5000));
    assert.equal(waitMs(0, 60, 1), 1000);
    assert.equal(waitMs(0.5, 60, 1), 500);
    assert.equal(fullInMs(30, 60), 30_000);
    assert.equal(fullInMs(60, 60), 0);
  });
});

describe('MemoryStore', () => {
  test('requests per minute: a burst of the capacity, then one per 60/capacity seconds', () => {
    let now = 1_000_000;
    const store = new MemoryStore(() => now);
    const rpm = { id: 'k:a:rpm', capacity: 3 };
    for (let i = 0; i < 3; i++) assert.equal(store.acquire(ask({ requests: [rpm] })).ok, true);
    const refused = store.acquire(ask({ requests: [rpm] }));
    assert.equal(refused.ok, false);
    assert.ok(!refused.ok && refused.limit === 'requests' && refused.retryAfterMs === 20_000);
    now += 20_000;
    assert.equal(store.acquire(ask({ requests: [rpm] })).ok, true);
    assert.equal(store.acquire(ask({ requests: [rpm] })).ok, false);
  });

  test('all or nothing: a refusal by one limit takes from none', () => {
    const store = new MemoryStore(() => 0);
    const rpm = { id: 'r', capacity: 10 };
    const tpm = { id: 't', capacity: 100 };
    const first = store.acquire(ask({ requests: [rpm], tokens: [tpm], cost: 90 }));
    assert.ok(first.ok);
    assert.deepEqual(first.requests, [{ remaining: 9, fullInMs: 6000 }]);
    assert.deepEqual(first.tokens, [{ remaining: 10, fullInMs: 54_000 }]);
    const second = store.acquire(ask({ requests: [rpm], tokens: [tpm], cost: 90 }));
    assert.ok(!second.ok && second.limit === 'tokens' && second.index === 0);
    assert.deepEqual(second.requests, [{ remaining: 9, fullInMs: 6000 }], 'the request was not counted');
  });

  test('settling gives back what was reserved and not used, or takes the excess', () => {
    const store = new MemoryStore(() => 0);
    const tpm = { id: 't', capacity: 1000 };
    store.acquire(ask({ tokens: [tpm], cost: 600 }));
    store.settle({ key: 'a', used: 100, tokens: [tpm], refund: 500, concurrency: [], lease: 'l1', spend: [], holds: [], hold: 0 });
    const after = store.acquire(ask({ tokens: [tpm], cost: 0 }));
    assert.ok(after.ok && after.tokens[0]!.remaining === 900);
    store.settle({ key: 'a', used: 1500, tokens: [tpm], refund: -1500, concurrency: [], lease: 'l2', spend: [], holds: [], hold: 0 });
    const debt = store.acquire(ask({ tokens: [tpm], cost: 1 }));
    assert.ok(!debt.ok && debt.retryAfterMs === 36_060, 'a debt of 600 tokens is paid back at 1000/min');
  });

  test('concurrency: leases, given back on settle, expired when not renewed, kept when renewed', () => {
    let now = 0;
    const store = new MemoryStore(() => now);
    const cc = { id: 'c', max: 2 };
    assert.ok(store.acquire(ask({ concurrency: [cc], lease: 'a', leaseMs: 1000 })).ok);
    assert.ok(store.acquire(ask({ concurrency: [cc], lease: 'b', leaseMs: 1000 })).ok);
    const full = store.acquire(ask({ concurrency: [cc], lease: 'c', leaseMs: 1000 }));
    assert.ok(!full.ok && full.limit === 'concurrent' && full.retryAfterMs === 1000);
    store.settle({ key: '', used: 0, tokens: [], refund: 0, concurrency: ['c'], lease: 'a', spend: [], holds: [], hold: 0 });
    assert.ok(store.acquire(ask({ concurrency: [cc], lease: 'c', leaseMs: 1000 })).ok);
    now = 900;
    store.renew([{ lease: 'b', concurrency: ['c'], holds: [], hold: 0 }], 1000);
    now = 1500; // c expired (a process that died holding it); b was renewed until 1900
    assert.ok(store.acquire(ask({ concurrency: [cc], lease: 'd', leaseMs: 1000 })).ok);
    assert.equal(store.acquire(ask({ concurrency: [cc], lease: 'e', leaseMs: 1000 })).ok, false);
  });

  test('budgets: spend adds up; a spent budget refuses until its period ends', async () => {
    const store = new MemoryStore(() => 1000);
    const budget = { id: 'a:2026-12', maxMicros: 1_000_000, resetAt: 61_000 };
    assert.ok(store.acquire(ask({ budgets: [budget] })).ok);
    store.settle({ key: 'a', used: 0, tokens: [], refund: 0, concurrency: [], lease: 'l1', spend: [{ id: budget.id, micros: 600_000, resetAt: budget.resetAt }], holds: [], hold: 0 });
    assert.ok(store.acquire(ask({ budgets: [budget] })).ok, 'below the budget: still let through');
    store.settle({ key: 'a', used: 0, tokens: [], refund: 0, concurrency: [], lease: 'l2', spend: [{ id: budget.id, micros: 600_000, resetAt: budget.resetAt }], holds: [], hold: 0 });
    const refused = store.acquire(ask({ budgets: [budget] }));
    assert.ok(!refused.ok && refused.limit === 'budget' && refused.retryAfterMs === 60_000);
    assert.deepEqual(await store.spent([budget.id, 'other']), [1_200_000, 0]);
  });
});

/** A store that answers like memory, or fails like an unreachable Redis. */
class FlakyStore implements LimitStore {
  readonly kind = 'flaky';
  readonly inner = new MemoryStore(() => 0);
  down = false;
  settled: Settlement[] = [];
  closed = false;
  async acquire(a: Ask) {
    if (this.down) throw new StoreUnavailable('connection refused');
    return this.inner.acquire(a);
  }
  async settle(s: Settlement) {
    if (this.down) throw new StoreUnavailable('connection refused');
    this.settled.push(s);
    this.inner.settle(s);
  }
  async renew() {}
  spent(ids: readonly string[]) {
    return this.inner.spent(ids);
  }
  async close() {
    this.closed = true;
  }
}

function policy(yaml: string): LimitPolicy {
  return new LimitPolicy(parseConfig(`listeners: [{ name: p, address: "127.0.0.1:0", role: proxy }]\n${yaml}`, 'test.yaml', {}));
}

function events() {
  const seen = { refused: [] as string[], errors: [] as string[], lost: [] as string[] };
  return {
    seen,
    events: {
      refused: (key: string, scope: string, limit: string) => seen.refused.push(`${key}/${scope}/${limit}`),
      storeError: (operation: string, outcome: string) => seen.errors.push(`${operation}:${outcome}`),
      notCommitted: (key: string, tokens: number, micros: number) => seen.lost.push(`${key}:${tokens}:${micros}`),
    },
  };
}

const request = (p: LimitPolicy, key: LimitedKey, over: Partial<{ json: Record<string, unknown>; id: string; model: string; bodyBytes: number; targets: { model: string | undefined }[] }> = {}) => ({
  policy: p,
  key,
  model: over.model ?? 'gpt-4o',
  requested: over.model ?? 'gpt-4o',
  targets: over.targets ?? [{ model: undefined }],
  generates: true,
  billed: true,
  json: over.json ?? { model: 'gpt-4o', max_tokens: 100 },
  bodyBytes: over.bodyBytes ?? 400,
  id: over.id ?? 'req-1',
});

describe('Limiter', () => {
  test('no limit and no budget: the shared UNLIMITED admission, synchronously, nothing asked of the store', () => {
    const store = new FlakyStore();
    store.down = true;
    const limiter = new Limiter(store, events().events);
    assert.equal(limiter.admit(request(policy(''), { name: 'a' })), UNLIMITED);
    // A model named after an Object property is not a limits entry.
    assert.equal(limiter.admit(request(policy(''), { name: 'a' }, { model: 'constructor' })), UNLIMITED);
    assert.equal(limiter.admit(request(policy(''), { name: 'a' }, { model: '__proto__' })), UNLIMITED);
  });

  test('the tightest bucket of each kind gives the x-ratelimit-* headers; a refusal is a 429 with Retry-After in the caller\'s shape', () => {
    const { events: ev, seen } = events();
    const limiter = new Limiter(new MemoryStore(() => 0), ev);
    const p = policy('limits: { global: { rpm: 100 }, models: { gpt-4o: { tpm: 10000 } } }');
    const key = { name: 'team-a', limits: { rpm: 2 } };
    const first = limiter.admit(request(p, key)) as Admission;
    // The reservation: 400 bytes / 4 + max_tokens 100 = 200 tokens.
    assert.deepEqual(first.headers, {
      'x-ratelimit-limit-requests': '2',
      'x-ratelimit-remaining-requests': '1',
      'x-ratelimit-reset-requests': '30s',
      'x-ratelimit-limit-tokens': '10000',
      'x-ratelimit-remaining-tokens': '9800',
      'x-ratelimit-reset-tokens': '1.2s',
    });
    limiter.admit(request(p, key));
    const refused = limiter.admit(request(p, key));
    assert.ok(refused instanceof GatewayError);
    assert.equal(refused.status, 429);
    assert.equal(refused.headers!['retry-after'], '30');
    assert.equal(refused.headers!['retry-after-ms'], '30000');
    assert.equal(refused.headers!['x-ratelimit-remaining-requests'], '0');
    assert.deepEqual(JSON.parse(refused.body('openai')), {
      error: { message: 'Rate limit reached for API key "team-a": 2 requests per minute. Try again in 30s.', type: 'rate_limit_error', code: 'rate_limit_exceeded' },
    });
    assert.deepEqual(JSON.parse(refused.body('anthropic')), {
      type: 'error',
      error: { type: 'rate_limit_error', message: 'Rate limit reached for API key "team-a": 2 requests per minute. Try again in 30s.' },
    });
    assert.deepEqual(seen.refused, ['team-a/key/requests']);
  });

  test('a key\'s limit on one model applies to that model only', () => {
    const limiter = new Limiter(new MemoryStore(() => 0), events().events);
    const p = policy('');
    const key = { name: 'a', limits: { models: { 'gpt-4o': { concurrent: 1 } } } };
    assert.ok(!(limiter.admit(request(p, key, { id: '1' })) instanceof GatewayError));
    const second = limiter.admit(request(p, key, { id: '2' }));
    assert.ok(second instanceof GatewayError && /API key "a" on model "gpt-4o": 1 concurrent requests/.test(second.message));
    assert.ok(!(limiter.admit(request(p, key, { id: '3', model: 'gpt-4o-mini' })) instanceof GatewayError));
  });

  test('finish settles with the real usage: the reservation minus the tokens used comes back, the lease is given back', () => {
    const store = new MemoryStore(() => 0);
    const limiter = new Limiter(store, events().events);
    const p = policy('');
    const key = { name: 'a', limits: { tpm: 1000, concurrent: 1 } };
    const admission = limiter.admit(request(p, key)) as Admission;
    assert.equal(admission.headers['x-ratelimit-remaining-tokens'], '800');
    admission.finish({ prompt: 30, completion: 20 }, undefined, true);
    admission.finish({ prompt: 30, completion: 20 }, undefined, true); // once only
    const next = limiter.admit(request(p, key, { id: 'req-2' })) as Admission;
    assert.equal(next.headers['x-ratelimit-remaining-tokens'], String(1000 - 50 - 200));
  });

  test('a reservation larger than the smallest bucket it is counted in takes that bucket\'s capacity from each, and settles the real usage', () => {
    const limiter = new Limiter(new MemoryStore(() => 0), events().events);
    const p = policy('limits: { global: { tpm: 1000000 }, models: { gpt-4o: { tpm: 100000 } } }');
    const key = { name: 'a', limits: { tpm: 1000 } };
    const greedy = limiter.admit(request(p, key, { json: { max_tokens: 10_000_000 } })) as Admission;
    // The tightest bucket's headers: the key's, emptied, not ten million in debt.
    assert.equal(greedy.headers['x-ratelimit-remaining-tokens'], '0');
    const other = limiter.admit(request(p, { name: 'b' }, { id: 'b-1' })) as Admission;
    assert.ok(!(other instanceof GatewayError), 'another key still fits in the shared buckets');
    assert.equal(other.headers['x-ratelimit-remaining-tokens'], String(100_000 - 1000 - 200), 'the model\'s bucket lost 1,000 to the greedy request');
    greedy.finish({ prompt: 100, completion: 5000 }, undefined, true);
    const after = limiter.admit(request(p, { name: 'b' }, { id: 'b-2' })) as Admission;
    assert.equal(after.headers['x-ratelimit-remaining-tokens'], String(100_000 - 5100 - 200 - 200), 'settled with the real usage');
  });

  test('unknown usage: an answer that went out keeps its reservation, a failure gives it back', () => {
    const limiter = new Limiter(new MemoryStore(() => 0), events().events);
    const p = policy('');
    const key = { name: 'a', limits: { tpm: 1000 } };
    (limiter.admit(request(p, key, { id: '1' })) as Admission).finish(undefined, undefined, true);
    (limiter.admit(request(p, key, { id: '2' })) as Admission).finish(undefined, undefined, false);
    const third = limiter.admit(request(p, key, { id: '3' })) as Admission;
    assert.equal(third.headers['x-ratelimit-remaining-tokens'], String(1000 - 200 - 200));
  });

  test('a spent budget: 429 budget_exceeded, no SDK retry, Retry-After until the period ends', () => {
    const now = Date.UTC(2026, 11, 31, 23, 0, 0);
    const store = new MemoryStore(() => now);
    const limiter = new Limiter(store, events().events, () => now);
    const key = { name: 'a', budget: { usd: 1, period: 'day' as const } };
    const p = policy('');
    (limiter.admit(request(p, key, { id: '1' })) as Admission).finish({ prompt: 1, completion: 1 }, 1_000_000, true);
    const refused = limiter.admit(request(p, key, { id: '2' }));
    assert.ok(refused instanceof GatewayError);
    assert.equal(refused.status, 429);
    assert.equal(refused.code, 'budget_exceeded');
    assert.equal(refused.headers!['x-should-retry'], 'false');
    assert.equal(refused.headers!['retry-after'], '3600');
    assert.equal(JSON.parse(refused.body('openai')).error.type, 'insufficient_quota');
    assert.equal(JSON.parse(refused.body('anthropic')).error.type, 'rate_limit_error');
  });

  test('budget periods are UTC calendar days and months', () => {
    const now = Date.UTC(2026, 11, 31, 23, 59, 59);
    assert.deepEqual(budgetPeriod('a', { usd: 2.5, period: 'month' }, now), { id: 'a:2026-12', maxMicros: 2_500_000, resetAt: Date.UTC(2027, 0, 1) });
    assert.deepEqual(budgetPeriod('a', { usd: 1, period: 'day' }, now), { id: 'a:2026-12-31', maxMicros: 1_000_000, resetAt: Date.UTC(2027, 0, 1) });
  });

  test('on_store_error open: let through uncounted, counted as an error; closed: a 503', async () => {
    const store = new FlakyStore();
    store.down = true;
    const { events: ev, seen } = events();
    const limiter = new Limiter(store, ev);
    const key = { name: 'a', limits: { rpm: 1 } };
    const open = await limiter.admit(request(policy(''), key));
    assert.ok(!(open instanceof GatewayError));
    assert.deepEqual(open.headers, {});
    const closed = await limiter.admit(request(policy('limits: { on_store_error: closed }'), key));
    assert.ok(closed instanceof GatewayError && closed.status === 503 && closed.code === 'limit_store_unavailable');
    assert.deepEqual(seen.errors, ['acquire:allowed', 'acquire:refused']);
  });

  test('a settlement the store did not take is retried; close waits for it, and logs what it never took', async () => {
    const store = new FlakyStore();
    const { events: ev, seen } = events();
    const limiter = new Limiter(store, ev);
    const key = { name: 'a', limits: { tpm: 1000 } };
    const admission = (await limiter.admit(request(policy(''), key))) as Admission;
    store.down = true;
    admission.finish({ prompt: 10, completion: 5 }, 42, true);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(limiter.unsettled, 1);
    store.down = false;
    await limiter.close(2000);
    assert.equal(store.settled.length, 1);
    assert.equal(store.settled[0]!.refund, 200 - 15);
    assert.ok(store.closed);
    assert.deepEqual(seen.lost, []);

    const store2 = new FlakyStore();
    const limiter2 = new Limiter(store2, ev);
    const a2 = (await limiter2.admit(request(policy(''), { name: 'b', limits: { tpm: 1000 } }))) as Admission;
    store2.down = true;
    a2.finish({ prompt: 10, completion: 5 }, 42, true);
    await limiter2.close(300);
    assert.deepEqual(seen.lost, ['b:15:0'], 'logged with its key and usage');
    assert.ok(store2.closed);
  });

  test('a refused settlement is retried a second later on the clock the limiter is given', async () => {
    const clock = new ManualClock();
    const store = new FlakyStore();
    const { events: ev, seen } = events();
    const limiter = new Limiter(store, ev, () => 0, clock);
    const admission = (await limiter.admit(request(policy(''), { name: 'a', limits: { tpm: 1000 } }))) as Admission;
    store.down = true;
    admission.finish({ prompt: 10, completion: 5 }, undefined, true);
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(seen.errors, ['settle:retried']);
    store.down = false;
    clock.advance(999);
    assert.equal(store.settled.length, 0, 'not before the second is over');
    clock.advance(1);
    assert.equal(store.settled.length, 1, 'retried when the manual clock says the second is over');
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(limiter.unsettled, 0);
  });

  test('the exit waits for the store until the deadline of the clock the limiter is given, then logs what it never took', async () => {
    const clock = new ManualClock();
    const store = new FlakyStore();
    const { events: ev, seen } = events();
    const limiter = new Limiter(store, ev, () => 0, clock);
    const admission = (await limiter.admit(request(policy(''), { name: 'a', limits: { tpm: 1000 } }))) as Admission;
    store.down = true;
    admission.finish({ prompt: 10, completion: 5 }, undefined, true);
    let closed = false;
    const closing = limiter.close(60_000).then(() => (closed = true));
    // A minute on the manual clock, in steps, with the real time only a few turns of the event loop.
    for (let elapsed = 0; elapsed <= 60_000 && !closed; elapsed += 100) {
      for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
      if (elapsed === 30_000) assert.equal(closed, false, 'still waiting halfway to the deadline');
      clock.advance(100);
    }
    for (let i = 0; i < 5 && !closed; i++) await new Promise((resolve) => setImmediate(resolve));
    assert.equal(closed, true, 'closed once the manual clock passed the deadline');
    await closing;
    assert.deepEqual(seen.lost, ['a:15:0']);
    assert.ok(store.closed);
  });

  test('the token estimate: body bytes / 4 plus the completion maximum, or the default', () => {
    assert.equal(estimateTokens({ json: { max_tokens: 50 }, bodyBytes: 401, generates: true }, 500), 101 + 50);
    assert.equal(estimateTokens({ json: { max_completion_tokens: 7 }, bodyBytes: 4, generates: true }, 500), 8);
    assert.equal(estimateTokens({ json: {}, bodyBytes: 4, generates: true }, 500), 501);
    assert.equal(estimateTokens({ json: { max_tokens: 'x' }, bodyBytes: 4, generates: false }, 500), 1);
    assert.equal(estimateTokens({ json: { max_tokens: -1 }, bodyBytes: 0, generates: true }, 9), 9);
    // Every choice the provider generates is reserved: n, or best_of (the larger), at most 128.
    assert.equal(estimateTokens({ json: { max_tokens: 50, n: 4 }, bodyBytes: 4, generates: true }, 500), 1 + 200);
    assert.equal(estimateTokens({ json: { n: 3 }, bodyBytes: 4, generates: true }, 500), 1 + 1500);
    assert.equal(estimateTokens({ json: { max_tokens: 10, n: 2, best_of: 5 }, bodyBytes: 0, generates: true }, 500), 50);
    assert.equal(estimateTokens({ json: { max_tokens: 10, n: 1e9 }, bodyBytes: 0, generates: true }, 500), 1280);
    for (const n of [0, -3, 'x', null, Number.NaN, Infinity, 2.7]) assert.equal(estimateTokens({ json: { max_tokens: 10, n }, bodyBytes: 0, generates: true }, 500), n === 2.7 ? 20 : 10, String(n));
    assert.equal(estimateTokens({ json: { n: 8 }, bodyBytes: 40, generates: false }, 500), 10, 'embeddings: no output');
  });

  test('durations as OpenAI writes them', () => {
    assert.equal(formatDuration(20), '20ms');
    assert.equal(formatDuration(1000), '1s');
    assert.equal(formatDuration(1200), '1.2s');
    assert.equal(formatDuration(360_000), '6m0s');
    assert.equal(formatDuration(3_723_000), '1h2m3s');
  });
});

describe('Prices', () => {
  test('exact names, dated versions and provider prefixes; the config replaces the shipped table', () => {
    const prices = new Prices({ 'gpt-4o': { input: 1, output: 2 }, 'my-model': { input: 3, output: 4 } });
    assert.deepEqual(prices.of('gpt-4o'), { input: 1, output: 2 });
    assert.deepEqual(prices.of('gpt-4o-2024-08-06'), { input: 1, output: 2 });
    assert.equal(prices.of('gpt-4o-mini-2024-07-18')!.input, 0.15, 'the longest entry wins');
    assert.equal(prices.of('openai/gpt-4o-mini')!.input, 0.15);
    assert.equal(prices.of('claude-sonnet-4-5-20250929')!.output, 15);
    assert.equal(prices.of('gpt-4omni'), undefined, 'a prefix must end at a "-"');
    assert.equal(prices.of('unknown'), undefined);
    assert.equal(prices.costMicros({ prompt: 1000, completion: 100 }, ['unknown', 'my-model']), 3000 + 400);
    assert.equal(prices.costMicros({ prompt: 1000, completion: 100 }, ['unknown', '']), undefined);
  });

  test("Bedrock's and Vertex's model ids are priced as the model they name", () => {
    const prices = new Prices();
    const haiku = prices.of('claude-3-5-haiku')!;
    for (const id of [
      'anthropic.claude-3-5-haiku-20241022-v1:0',
      'us.anthropic.claude-3-5-haiku-20241022-v1:0',
      'arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0',
      'claude-3-5-haiku@20241022',
    ]) {
      assert.equal(prices.of(id), haiku, id);
    }
    assert.equal(prices.of('meta.llama3-1-8b-instruct-v1:0')!.input, 0.22);
    assert.equal(prices.of('amazon.nova-micro-v1:0')!.output, 0.14);
    assert.equal(prices.of('amazon.titan-embed-text-v2:0')!.input, 0.02);
    assert.equal(prices.of('models/gemini-2.5-flash')!.output, 2.5);
    assert.equal(prices.of('gemini-2.5-flash-lite-preview-06-17')!.input, 0.1, 'the longest entry wins');
    assert.equal(prices.of('acme.claude-3-5-haiku-v1:0'), undefined, 'only the vendors Bedrock has');
  });

  test('cached and cache-written prompt tokens at their own prices', () => {
    const price = { input: 3, output: 15, cached_input: 0.3, cache_write: 3.75 };
    assert.equal(costMicros({ prompt: 1000, completion: 100, cached: 600, cacheWrite: 300 }, price), 100 * 3 + 600 * 0.3 + 300 * 3.75 + 100 * 15);
    assert.equal(costMicros({ prompt: 10, completion: 0, cached: 50 }, price), 10 * 0.3, 'never more cached than prompt');
  });
});

/** Everything a stripper gives for `pieces`, then its end, as latin1 text (byte for byte). */
function stripped(stripper: UsageStripper, pieces: readonly Buffer[]): string {
  return Buffer.concat([...pieces.map((piece) => stripper.push(piece)), stripper.end()]).toString('latin1');
}

/** The oracle: the stream cut into events at each blank line, each rewritten as text (the stripper before it worked on bytes). */
function byTextRewrite(stream: string): string {
  const event = (text: string): string => {
    if (!text.includes('"usage"')) return text;
    if (text.includes('"choices":[]') && !text.includes('"usage":null')) return '';
    return text.replace(/,"usage":null|"usage":null,/g, '');
  };
  let out = '';
  let start = 0;
  for (let i = stream.indexOf('\n'); i !== -1; i = stream.indexOf('\n', i + 1)) {
    const next = stream[i + 1] === '\r' ? i + 2 : i + 1;
    if (next >= stream.length || stream[next] !== '\n') continue;
    out += event(stream.slice(start, next + 1));
    start = next + 1;
    i = next;
  }
  return out + (start < stream.length ? event(stream.slice(start)) : '');
}

describe('stream usage the client did not ask for', () => {
  const chunk = (extra: string) => `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]${extra}}\n\n`;
  const usageChunk = 'data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7}}\n\n';
  const upstream = chunk(',"usage":null') + chunk(',"usage":null,"obfuscation":"x"') + usageChunk + 'data: [DONE]\n\n';
  const expected = chunk('') + chunk(',"obfuscation":"x"') + 'data: [DONE]\n\n';

  test('asked for only when the client did not', () => {
    assert.deepEqual(withStreamUsage({ stream: true, model: 'm' }), { stream: true, model: 'm', stream_options: { include_usage: true } });
    assert.deepEqual(withStreamUsage({ stream: true, stream_options: { include_obfuscation: false } }), { stream: true, stream_options: { include_obfuscation: false, include_usage: true } });
    assert.equal(withStreamUsage({ stream: true, stream_options: { include_usage: true } }), undefined);
    assert.equal(withStreamUsage({ stream: false }), undefined);
    assert.equal(withStreamUsage({ stream: true, stream_options: 'x' }), undefined, 'a malformed value is left to the provider to refuse');
  });

  test('the usage chunk and every "usage":null are taken out, whatever the chunk boundaries; the rest passes byte for byte', () => {
    const whole = new UsageStripper();
    assert.equal(stripped(whole, [Buffer.from(upstream)]), expected);
    const bytes = Buffer.from(upstream);
    const split = new UsageStripper();
    assert.equal(stripped(split, Array.from(bytes, (_, i) => bytes.subarray(i, i + 1))), expected);
    const crlf = new UsageStripper();
    assert.equal(stripped(crlf, [Buffer.from(upstream.replaceAll('\n', '\r\n'))]), expected.replaceAll('\n', '\r\n'));
  });

  test('a read without "usage" passes as the same buffer, not a copy; a read of several events is one buffer', () => {
    const s = new UsageStripper();
    const plain = Buffer.from('data: {"choices":[{"delta":{"content":"x"}}]}\n\n');
    assert.equal(s.push(plain), plain, 'no copy');
    const out = s.push(Buffer.from(chunk(',"usage":null') + chunk(',"usage":null')));
    assert.equal(out.toString(), chunk('') + chunk(''));
  });

  test('fuzz: any bytes, any chunk boundaries: never throws, the output does not depend on where the chunks were cut, and is what an event-by-event text rewrite gives', () => {
    const event = fc.oneof(
      fc.constantFrom(chunk(',"usage":null'), usageChunk, 'data: [DONE]\n\n', ': ping\n\n', 'event: x\r\ndata: {"choices":[]}\r\n\r\n', 'data: {"usage":null,"choices":[]}\n\n', 'data: {"usage":null}\n\n', '"usage":null', ',"usage"', '"choices":[]', '\r\n\r\n', '\n'),
      fc.string({ maxLength: 40 }).map((t) => `data: ${t}\n\n`),
      fc.string({ maxLength: 20 }),
      fc.uint8Array({ maxLength: 12 }).map((b) => Buffer.from(b).toString('latin1')),
    );
    fc.assert(
      fc.property(fc.array(event, { maxLength: 12 }), fc.array(fc.nat(200), { maxLength: 6 }), (events, cuts) => {
        const bytes = Buffer.from(events.join(''), 'latin1');
        const expected = stripped(new UsageStripper(), [bytes]);
        const pieces: Buffer[] = [];
        let at = 0;
        for (const cut of [...cuts].sort((a, b) => a - b)) {
          const end = Math.min(bytes.length, cut);
          if (end <= at) continue;
          pieces.push(bytes.subarray(at, end));
          at = end;
        }
        pieces.push(bytes.subarray(at));
        assert.equal(stripped(new UsageStripper(), pieces), expected);
        // Where no event begins with a line end, the bytes are those of the text rewrite (before it, a
        // usage chunk was taken out with the line ends that began it; now they stay, as blank lines).
        const text = bytes.toString('latin1');
        if (!/^[\r\n]|\n\r?\n[\r\n]/.test(text)) assert.equal(expected, byTextRewrite(text));
      }),
      { numRuns: 3000 },
    );
  });

  test('a multi-byte character split across chunks survives', () => {
    const text = chunk(',"usage":null').replace('hi', 'héllo 👋');
    const bytes = Buffer.from(text);
    const s = new UsageStripper();
    assert.equal(Buffer.from(stripped(s, [bytes.subarray(0, 60), bytes.subarray(60, 63), bytes.subarray(63)]), 'latin1').toString('utf8'), chunk('').replace('hi', 'héllo 👋'));
  });
});
