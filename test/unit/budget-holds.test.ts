// A budget's holds without a network: what a request may cost is held against its key's budget
// while it runs (the memory store; the Redis scripts do the same, checked against a real Redis in
// test/security/budget-holds.test.ts), refused when spent + held + its hold would pass the budget,
// replaced by the real cost at the settlement, renewed with the lease and dropped when the lease
// expires (a process that died holding it); the limiter's pricing of a hold and its 429s.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { MemoryStore } from '../../src/limits/memory-store.ts';
import { Limiter } from '../../src/limits/limiter.ts';
import { LimitPolicy } from '../../src/limits/limit-policy.ts';
import type { Admission } from '../../src/limits/admission.ts';
import { holdMicros } from '../../src/limits/budgets.ts';
import type { Ask, Settlement } from '../../src/limits/store.ts';
import { GatewayError } from '../../src/api/errors.ts';
import { parseConfig } from '../../src/config/load.ts';
import { ManualClock } from '../support/manual-clock.ts';

const budget = { id: 'k:2026-12', maxMicros: 1_000_000, resetAt: 61_000 };
const ask = (over: Partial<Ask> = {}): Ask => ({ requests: [], tokens: [], cost: 0, concurrency: [], budgets: [budget], hold: 400_000, lease: 'l1', leaseMs: 30_000, ...over });
const settlement = (lease: string, spent: number, over: Partial<Settlement> = {}): Settlement => ({
  key: 'k',
  used: 0,
  tokens: [],
  refund: 0,
  concurrency: [],
  lease,
  spend: spent > 0 ? [{ id: budget.id, micros: spent, resetAt: budget.resetAt }] : [],
  holds: [budget.id],
  hold: 400_000,
  ...over,
});

describe('the memory store holds what a request may cost against its budget', () => {
  test('20 requests of $0.40 at once on an untouched $1 budget: two are let through, the rest refused with what is spent and held', async () => {
    const store = new MemoryStore(() => 1000);
    const verdicts = Array.from({ length: 20 }, (_, i) => store.acquire(ask({ lease: `r${i}` })));
    assert.equal(verdicts.filter((v) => v.ok).length, 2);
    const refused = verdicts[2]!;
    assert.ok(!refused.ok && refused.limit === 'budget' && refused.spent === 0 && refused.held === 800_000 && refused.retryAfterMs === 60_000);
    assert.deepEqual(await store.held([budget.id]), [800_000]);
    // The first ends having cost $0.30: its hold is replaced by its cost.
    store.settle(settlement('r0', 300_000));
    assert.deepEqual(await store.held([budget.id]), [400_000]);
    assert.deepEqual(await store.spent([budget.id]), [300_000]);
    assert.equal(store.acquire(ask({ lease: 'r20' })).ok, false, '$0.30 spent + $0.40 held + $0.40 > $1');
    store.settle(settlement('r1', 100_000));
    assert.ok(store.acquire(ask({ lease: 'r21' })).ok, '$0.40 spent + $0.40 = $0.80');
  });

  test('a request with no hold (its model has no price) is refused only once the budget is spent', () => {
    const store = new MemoryStore(() => 1000);
    assert.ok(store.acquire(ask({ lease: 'a', hold: 900_000 })).ok);
    assert.ok(store.acquire(ask({ lease: 'free', hold: 0 })).ok, 'held, not spent');
    store.settle(settlement('a', 1_000_000, { hold: 900_000 }));
    const spent = store.acquire(ask({ lease: 'free2', hold: 0 }));
    assert.ok(!spent.ok && spent.limit === 'budget' && spent.spent === 1_000_000);
  });

  test('a hold expires with its lease unless renewed: a process that died holding it gives the budget back', async () => {
    let now = 0;
    const store = new MemoryStore(() => now);
    store.acquire(ask({ lease: 'killed', leaseMs: 1000 }));
    store.acquire(ask({ lease: 'running', leaseMs: 1000 }));
    now = 900;
    store.renew([{ lease: 'running', concurrency: [], holds: [budget.id], hold: 400_000 }], 1000);
    now = 1500;
    assert.deepEqual(await store.held([budget.id]), [400_000], 'the killed one\'s hold expired; the renewed one is held until 1900');
    now = 2000;
    assert.deepEqual(await store.held([budget.id]), [0]);
    // One already expired stays expired.
    store.renew([{ lease: 'running', concurrency: [], holds: [budget.id], hold: 400_000 }], 1000);
    assert.deepEqual(await store.held([budget.id]), [0]);
  });

  test('holds carry to the next generation (snapshot), and its changes follow (take, renew, settle)', async () => {
    const old = new MemoryStore(() => 1000);
    old.acquire(ask({ lease: 'before' }));
    const next = new MemoryStore(() => 1000, old.snapshot());
    assert.deepEqual(await next.held([budget.id]), [400_000]);
    old.follow({ change: (change) => next.apply(change), flushed: async () => {} });
    old.acquire(ask({ lease: 'after' }));
    assert.deepEqual(await next.held([budget.id]), [800_000]);
    assert.equal(next.acquire(ask({ lease: 'new' })).ok, false, 'what the old generation holds counts in the new one');
    old.settle(settlement('before', 50_000));
    assert.deepEqual(await next.held([budget.id]), [400_000]);
    assert.deepEqual(await next.spent([budget.id]), [50_000]);
  });

  test('fuzzed: whatever the order of takes and settlements, spent + held never passes the budget by more than the real costs passed their holds', () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('take' as const), hold: fc.integer({ min: 0, max: 600_000 }) }),
      fc.record({ kind: fc.constant('settle' as const), which: fc.nat(30), cost: fc.integer({ min: 0, max: 700_000 }) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        const store = new MemoryStore(() => 1000);
        const running: { lease: string; hold: number }[] = [];
        let spent = 0;
        /** What the settled requests cost beyond their holds: the bound of the overrun. */
        let excess = 0;
        ops.forEach((o, i) => {
          if (o.kind === 'take') {
            if (store.acquire(ask({ lease: `l${i}`, hold: o.hold })).ok) running.push({ lease: `l${i}`, hold: o.hold });
          } else {
            const r = running.splice(o.which % Math.max(1, running.length), 1)[0];
            if (!r) return;
            store.settle(settlement(r.lease, o.cost, { hold: r.hold }));
            spent += o.cost;
            excess += Math.max(0, o.cost - r.hold);
          }
          const held = running.reduce((sum, r) => sum + r.hold, 0);
          assert.ok(spent + held <= budget.maxMicros + excess, `spent ${spent} + held ${held} > ${budget.maxMicros} + ${excess}`);
        });
      }),
    );
  });
});

function policy(yaml: string): LimitPolicy {
  return new LimitPolicy(parseConfig(`listeners: [{ name: p, address: "127.0.0.1:0", role: proxy }]\n${yaml}`, 'test.yaml', {}));
}

const events = { refused() {}, storeError() {}, notCommitted() {} };

const request = (p: LimitPolicy, over: Partial<{ json: Record<string, unknown>; id: string; bodyBytes: number; targets: { model: string | undefined }[]; requested: string; billed: boolean; generates: boolean }> = {}) => ({
  policy: p,
  key: { name: 'k', budget: { usd: 1, period: 'day' as const } },
  model: 'm',
  requested: over.requested ?? 'cheap',
  targets: over.targets ?? [{ model: undefined }],
  generates: over.generates ?? true,
  billed: over.billed ?? true,
  json: over.json ?? { max_tokens: 1000 },
  bodyBytes: over.bodyBytes ?? 4000,
  id: over.id ?? 'r1',
});

describe('the limiter prices a hold and says why a request does not fit', () => {
  const p = policy('prices: { cheap: { input: 1, output: 2 }, dear: { input: 10, output: 400 } }\nlimits: { budget_hold_output_tokens: 3000 }');

  test('prompt (body / 4) and max_tokens for each choice, at the dearest target\'s price; the default output when max_tokens is absent; nothing for token counts or unpriced models', () => {
    // 1,000 prompt tokens at $1 and 1,000 output at $2 a million.
    assert.equal(holdMicros(request(p), 3000), 3000);
    assert.equal(holdMicros(request(p, { json: { max_tokens: 1000, n: 3 } }), 3000), 1000 + 6000);
    assert.equal(holdMicros(request(p, { json: {} }), 3000), 1000 + 6000, 'no max_tokens: the default output');
    assert.equal(holdMicros(request(p, { json: { max_completion_tokens: 10 } }), 3000), 1000 + 20);
    assert.equal(holdMicros(request(p, { targets: [{ model: undefined }, { model: 'dear' }] }), 3000), 10 * 1000 + 400 * 1000, 'a fallback may reach the dear target');
    assert.equal(holdMicros(request(p, { requested: 'unpriced' }), 3000), 0);
    assert.equal(holdMicros(request(p, { targets: [{ model: 'unpriced' }] }), 3000), 3000, 'an unpriced target is priced as the name the client sent, as its settlement is');
    assert.equal(holdMicros(request(p, { billed: false }), 3000), 0);
    assert.equal(holdMicros(request(p, { generates: false }), 3000), 1000, 'embeddings: the prompt only');
  });

  test('fuzzed: whatever a client sends as max_tokens, n and best_of, and whatever the prices, a hold is a whole number of micro-dollars Redis can read', () => {
    const value = fc.oneof(fc.integer(), fc.double(), fc.string(), fc.constant(null), fc.boolean(), fc.constant(1e308), fc.array(fc.nat(), { maxLength: 2 }));
    const dear = policy('prices: { huge: { input: 1000000000, output: 1000000000 } }');
    fc.assert(
      fc.property(fc.dictionary(fc.constantFrom('max_tokens', 'max_completion_tokens', 'max_output_tokens', 'n', 'best_of'), value), fc.nat(100_000_000), fc.boolean(), (json, bodyBytes, huge) => {
        const hold = holdMicros(request(huge ? dear : p, { json, bodyBytes, requested: huge ? 'huge' : 'cheap' }), 4096);
        assert.ok(Number.isSafeInteger(hold) && hold >= 0, String(hold));
        assert.match(String(hold), /^\d+$/);
      }),
    );
  });

  test('held by requests in progress: a 429 budget_exceeded that says so, with a Retry-After of a second; the SDKs may retry', () => {
    const limiter = new Limiter(new MemoryStore(() => 0), events, () => 0);
    const dear = { targets: [{ model: 'dear' }], json: { max_tokens: 1000 } };
    const first = limiter.admit(request(p, { ...dear, id: 'a' })) as Admission;
    assert.ok(!(first instanceof GatewayError));
    const second = limiter.admit(request(p, { ...dear, id: 'b' })) as Admission;
    assert.ok(!(second instanceof GatewayError));
    const refused = limiter.admit(request(p, { ...dear, id: 'c' }));
    assert.ok(refused instanceof GatewayError && refused.status === 429 && refused.code === 'budget_exceeded');
    assert.equal(refused.message, 'API key "k" has $1 left of its budget of $1 for this day, $0.82 of it held by its requests in progress, and this request may cost up to $0.41 (its prompt, and its max_tokens or limits.budget_hold_output_tokens when it sets none, at its model\'s price): try again once they have finished');
    assert.equal(refused.headers!['retry-after'], '1');
    assert.equal(refused.headers!['x-should-retry'], undefined);
    // The first ends having cost $0.70: what is left cannot hold $0.41 even once the other ends.
    first.finish({ prompt: 1000, completion: 1725 }, 700_000, true);
    const left = limiter.admit(request(p, { ...dear, id: 'd' }));
    assert.ok(left instanceof GatewayError && left.code === 'budget_exceeded');
    assert.equal(left.message, 'API key "k" has $0.3 left of its budget of $1 for this day, and this request may cost up to $0.41 (its prompt, and its max_tokens or limits.budget_hold_output_tokens when it sets none, at its model\'s price)');
    assert.equal(left.headers!['x-should-retry'], 'false');
    assert.equal(left.headers!['retry-after'], String(24 * 3600));
    // Once the other has failed (it costs nothing), a smaller max_tokens fits: $0.70 + $0.05.
    second.finish(undefined, undefined, false);
    assert.ok(!(limiter.admit(request(p, { targets: [{ model: 'dear' }], json: { max_tokens: 100 }, id: 'e' })) instanceof GatewayError));
  });

  test('a request that holds is renewed with its lease, and its settlement gives the hold back', async () => {
    const renewed: unknown[] = [];
    const store = new MemoryStore(() => 0);
    const spy = Object.assign(Object.create(store) as MemoryStore, { renew: (r: unknown) => renewed.push(r), acquire: (a: Ask) => store.acquire(a), settle: (s: Settlement) => store.settle(s) });
    const limiter = new Limiter(spy, events, () => 0);
    const shortLease = policy('prices: { cheap: { input: 1, output: 2 } }\nlimits: { lease_secs: 0.15 }');
    const admission = limiter.admit(request(shortLease)) as Admission;
    const deadline = Date.now() + 5000;
    while (renewed.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.deepEqual(renewed[0], [{ lease: 'r1', concurrency: [], holds: ['k:1970-01-01'], hold: 1000 + 2 * 1000 }]);
    admission.finish({ prompt: 10, completion: 10 }, 30, true);
    assert.deepEqual(await store.held(['k:1970-01-01']), [0]);
    assert.deepEqual(await store.spent(['k:1970-01-01']), [30]);
  });

  test('the renewals run every lease/3 on the clock the limiter is given, and stop with the last lease', () => {
    const clock = new ManualClock();
    const renewed: { renewals: unknown; leaseMs: number }[] = [];
    const store = new MemoryStore(() => 0);
    const spy = Object.assign(Object.create(store) as MemoryStore, {
      renew: (renewals: unknown, leaseMs: number) => renewed.push({ renewals, leaseMs }),
      acquire: (a: Ask) => store.acquire(a),
      settle: (s: Settlement) => store.settle(s),
    });
    const limiter = new Limiter(spy, events, () => 0, clock);
    const admission = limiter.admit(request(policy('prices: { cheap: { input: 1, output: 2 } }\nlimits: { lease_secs: 30 }'))) as Admission;
    clock.advance(9_999);
    assert.equal(renewed.length, 0, 'not before a third of the lease');
    clock.advance(1);
    assert.deepEqual(renewed, [{ renewals: [{ lease: 'r1', concurrency: [], holds: ['k:1970-01-01'], hold: 1000 + 2 * 1000 }], leaseMs: 30_000 }]);
    clock.advance(20_000);
    assert.equal(renewed.length, 3);
    admission.finish({ prompt: 10, completion: 10 }, 30, true);
    clock.advance(60_000);
    assert.equal(renewed.length, 3, 'nothing renewed once the request ended');
  });
});
