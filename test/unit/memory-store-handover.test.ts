// The memory store handed over at a hot restart (src/limits/memory-store.ts): a snapshot starts the
// next generation's store, and every change the old store makes after it (admissions, settlements,
// renewals) is made in the new one too, so that both end where one store would have.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryStore, type MemoryChange, type MemoryFollower } from '../../src/limits/memory-store.ts';
import type { Ask, Settlement } from '../../src/limits/store.ts';

const ask = (over: Partial<Ask> = {}): Ask => ({ requests: [], tokens: [], cost: 0, concurrency: [], budgets: [], hold: 0, lease: 'l1', leaseMs: 30_000, ...over });
const settlement = (over: Partial<Settlement> = {}): Settlement => ({ key: 'a', used: 0, tokens: [], refund: 0, concurrency: [], lease: 'l1', spend: [], holds: [], hold: 0, ...over });

const rpm = { id: 'k:a:rpm', capacity: 2 };
const tpm = { id: 'k:a:tpm', capacity: 1000 };
const cc = { id: 'k:a:cc', max: 1 };
const budget = { id: 'b:a:2026-12-03', maxMicros: 10, resetAt: 2_000_000_000_000 };

/** A follower that applies each change to `to` at once (the keeper's relay, without IPC). */
function relay(to: MemoryStore): MemoryFollower & { changes: MemoryChange[] } {
  const changes: MemoryChange[] = [];
  return {
    changes,
    change: (change) => {
      changes.push(JSON.parse(JSON.stringify(change)) as MemoryChange);
      to.apply(changes.at(-1)!);
    },
    flushed: async () => {},
  };
}

test('a store started from a snapshot refuses what the old one refuses: a spent budget, an empty RPM bucket, a held place', () => {
  const now = 1_000_000;
  const old = new MemoryStore(() => now);
  assert.equal(old.acquire(ask({ requests: [rpm], lease: 'a' })).ok, true);
  assert.equal(old.acquire(ask({ requests: [rpm], concurrency: [cc], lease: 'b' })).ok, true);
  old.settle(settlement({ lease: 'a', spend: [{ id: budget.id, micros: 12, resetAt: budget.resetAt }] }));
  // Through JSON, as it crosses IPC.
  const next = new MemoryStore(() => now, JSON.parse(JSON.stringify(old.snapshot())));
  assert.deepEqual(next.snapshot(), old.snapshot());
  const refused = (store: MemoryStore, over: Partial<Ask>) => {
    const verdict = store.acquire(ask({ lease: 'x', ...over }));
    return verdict.ok ? 'ok' : verdict.limit;
  };
  for (const store of [old, next]) {
    assert.equal(refused(store, { budgets: [budget] }), 'budget');
    assert.equal(refused(store, { requests: [rpm] }), 'requests');
    assert.equal(refused(store, { concurrency: [cc] }), 'concurrent');
  }
});

test('after the snapshot, the old store\'s changes follow: what it admits, settles and renews ends the same in the new one', () => {
  let now = 1_000_000;
  const old = new MemoryStore(() => now);
  old.acquire(ask({ requests: [rpm], tokens: [tpm], cost: 100, concurrency: [cc], lease: 'running' }));
  const next = new MemoryStore(() => now, old.snapshot());
  const follower = relay(next);
  old.follow(follower);
  // The old generation still serves: a request admitted there takes from the new store's buckets.
  now += 1000;
  assert.equal(old.acquire(ask({ requests: [rpm], tokens: [tpm], cost: 50, lease: 'later' })).ok, true);
  // Its running request is renewed, then ends: settled with its usage and spend.
  now += 20_000;
  old.renew([{ concurrency: [cc.id], lease: 'running', holds: [], hold: 0 }], 30_000);
  now += 20_000;
  assert.equal(next.acquire(ask({ concurrency: [cc], lease: 'x' })).ok, false, 'renewed there: still held here past its first lease');
  old.settle(settlement({ lease: 'running', tokens: [tpm], refund: 80, concurrency: [cc.id], spend: [{ id: budget.id, micros: 25, resetAt: budget.resetAt }] }));
  assert.deepEqual(follower.changes.map((c) => c.op), ['take', 'renew', 'settle']);
  assert.deepEqual(next.snapshot(), old.snapshot(), 'the same counters');
  assert.equal(next.acquire(ask({ concurrency: [cc], lease: 'y' })).ok, true, 'the place given back there is free here at once');
  assert.equal(next.acquire(ask({ budgets: [budget], lease: 'z' })).ok, false, 'the spend settled there counts here');
});

test('a change is made whatever the new store\'s own limits say (it was let through where it was decided)', () => {
  const now = 1_000_000;
  const old = new MemoryStore(() => now);
  const next = new MemoryStore(() => now, old.snapshot());
  old.follow(relay(next));
  // The new generation serves too and empties the bucket; the old one, not knowing, admits one more.
  assert.equal(next.acquire(ask({ requests: [rpm], lease: 'n1' })).ok, true);
  assert.equal(next.acquire(ask({ requests: [rpm], lease: 'n2' })).ok, true);
  assert.equal(old.acquire(ask({ requests: [rpm], lease: 'o1' })).ok, true);
  const verdict = next.acquire(ask({ requests: [rpm], lease: 'n3' }));
  assert.equal(verdict.ok, false);
  // A debt: the next request here waits for one and a half refills.
  assert.ok(!verdict.ok && verdict.retryAfterMs >= 59_000, `retry after ${!verdict.ok && verdict.retryAfterMs} ms`);
});

test('a chain of restarts: a store that applies changes passes them on to its own follower', () => {
  const now = 1_000_000;
  const first = new MemoryStore(() => now);
  const second = new MemoryStore(() => now, first.snapshot());
  first.follow(relay(second));
  first.acquire(ask({ concurrency: [cc], lease: 'long' }));
  const third = new MemoryStore(() => now, second.snapshot());
  second.follow(relay(third));
  // The first generation, still draining, ends its request: the place is free in the third.
  first.settle(settlement({ lease: 'long', concurrency: [cc.id] }));
  assert.equal(third.acquire(ask({ concurrency: [cc], lease: 'x' })).ok, true);
});

test('not following (the common case): no change is recorded; following stops when told', async () => {
  const now = 1_000_000;
  const store = new MemoryStore(() => now);
  const next = new MemoryStore(() => now);
  const follower = relay(next);
  store.acquire(ask({ requests: [rpm] }));
  store.follow(follower);
  store.follow(undefined);
  store.acquire(ask({ requests: [rpm] }));
  store.settle(settlement());
  assert.deepEqual(follower.changes, []);
});

test('close() waits for the follower to take the last changes', async () => {
  const store = new MemoryStore(() => 0);
  let flushed = false;
  store.follow({
    change: () => {},
    flushed: () => new Promise<void>((resolve) => setImmediate(() => ((flushed = true), resolve()))),
  });
  await store.close();
  assert.equal(flushed, true);
});

test('property: whatever the old store does after the snapshot, the new one ends with the same counters', async () => {
  const { default: fc } = await import('fast-check');
  const buckets = [rpm, { id: 'g:rpm', capacity: 5 }];
  const tokenBuckets = [tpm];
  const limits = [cc, { id: 'g:cc', max: 3 }];
  const op = fc.oneof(
    fc.record({ kind: fc.constant('acquire' as const), lease: fc.integer({ min: 0, max: 5 }), cost: fc.integer({ min: 0, max: 400 }), which: fc.integer({ min: 0, max: 7 }) }),
    fc.record({ kind: fc.constant('settle' as const), lease: fc.integer({ min: 0, max: 5 }), refund: fc.integer({ min: -100, max: 300 }), micros: fc.integer({ min: 0, max: 20 }) }),
    fc.record({ kind: fc.constant('renew' as const), lease: fc.integer({ min: 0, max: 5 }) }),
    fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 0, max: 90_000 }) }),
  );
  /** What a store answers: each bucket's level now, the spend, the leases still live. */
  const observed = (store: MemoryStore, now: number) => {
    const state = store.snapshot();
    const levels: Record<string, number> = {};
    for (const b of [...buckets, ...tokenBuckets]) {
      const found = state.buckets.find(([id]) => id === b.id);
      levels[b.id] = found ? Math.min(b.capacity, found[1] + (Math.max(0, now - found[2]) * b.capacity) / 60_000) : b.capacity;
    }
    return {
      levels,
      spent: Object.fromEntries(state.spent.map(([id, micros]) => [id, micros])),
      leases: state.leases.filter(([, , until]) => until > now).map(([id, lease, until]) => `${id} ${lease} ${until}`).sort(),
    };
  };
  fc.assert(
    fc.property(fc.array(op, { maxLength: 30 }), fc.array(op, { maxLength: 30 }), (before, afterwards) => {
      let now = 1_000_000;
      const old = new MemoryStore(() => now);
      const run = (ops: typeof before) => {
        for (const o of ops) {
          if (o.kind === 'wait') now += o.ms;
          else if (o.kind === 'acquire')
            old.acquire(ask({ requests: buckets.filter((_, i) => o.which & (1 << i)), tokens: o.which & 4 ? tokenBuckets : [], cost: o.cost, concurrency: limits.filter((_, i) => o.which & (1 << i)), lease: `l${o.lease}` }));
          else if (o.kind === 'settle')
            old.settle(settlement({ lease: `l${o.lease}`, tokens: tokenBuckets, refund: o.refund, concurrency: limits.map((l) => l.id), spend: o.micros > 0 ? [{ id: budget.id, micros: o.micros, resetAt: budget.resetAt }] : [] }));
          else old.renew([{ concurrency: limits.map((l) => l.id), lease: `l${o.lease}`, holds: [], hold: 0 }], 30_000);
        }
      };
      run(before);
      const next = new MemoryStore(() => now, JSON.parse(JSON.stringify(old.snapshot())));
      old.follow(relay(next));
      run(afterwards);
      const [a, b] = [observed(old, now), observed(next, now)];
      for (const id of Object.keys(a.levels)) assert.ok(Math.abs(a.levels[id]! - b.levels[id]!) < 1e-9, `${id}: ${a.levels[id]} ≠ ${b.levels[id]}`);
      assert.deepEqual(b.spent, a.spent);
      assert.deepEqual(b.leases, a.leases);
    }),
    { numRuns: 300 },
  );
});

test('counters in a shape this version does not write (another version\'s generation) are left out, never kept as garbage', () => {
  const now = 1_000_000;
  const state = {
    buckets: [['k:a:rpm', 0, now, 2], ['bad', 'x', now, 2], [7, 0, now, 2], ['nan', Number.NaN, now, 2]],
    spent: [[budget.id, 50, budget.resetAt], ['bad', null, 0]],
    leases: [[cc.id, 'held', now + 10_000], [cc.id, 'bad', 'soon']],
  } as unknown as ConstructorParameters<typeof MemoryStore>[1];
  const store = new MemoryStore(() => now, state);
  // A version before the budgets' holds sent none.
  assert.deepEqual(store.snapshot(), {
    buckets: [['k:a:rpm', 0, now, 2]],
    spent: [[budget.id, 50, budget.resetAt]],
    leases: [[cc.id, 'held', now + 10_000]],
    holds: [],
  });
  const withHolds = { ...state, holds: [[budget.id, 'running', 40, now + 10_000], [budget.id, 'bad', 'x', now], [budget.id, 7, 1, now], 'garbage'] } as unknown as ConstructorParameters<typeof MemoryStore>[1];
  assert.deepEqual(new MemoryStore(() => now, withHolds).snapshot().holds, [[budget.id, 'running', 40, now + 10_000]]);
});
