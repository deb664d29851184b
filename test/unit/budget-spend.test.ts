// Where `GET /budgets` reads the spend (src/wiring/budgets-view.ts's BudgetSpend): the process's own
// limit store, or in a supervisor of workers on Redis a Redis client of its own, opened once per
// `limits.redis`, closed when a reload moves or leaves Redis and at the exit.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseConfig } from '../../src/config/load.ts';
import { MemoryStore } from '../../src/limits/memory-store.ts';
import type { LimitStore } from '../../src/limits/store.ts';
import { BudgetSpend } from '../../src/wiring/budgets-view.ts';

const config = (limits: string) =>
  parseConfig(
    `listeners: [{ name: proxy, address: "127.0.0.1:0", role: proxy }]
providers: [{ name: echo, type: echo }]
models: [{ name: echo, provider: echo }]
keys: [{ name: k, key: sk-budget-spend-000001, budget: { usd: 5, period: day } }]
limits: ${limits}
`,
    'test.yaml',
    {},
  );
const REDIS_A = config('{ store: redis, redis: { url: "redis://127.0.0.1:1" } }');
const REDIS_B = config('{ store: redis, redis: { url: "redis://127.0.0.1:2" } }');
const MEMORY = config('{ store: memory }');

/** A fake Redis: each one opened answers `spentMicros` and counts its closes. */
function opener(spentMicros: number) {
  const opened: { url: string; closed: number }[] = [];
  const open = async (limits: { redis?: { url: string } | undefined }): Promise<LimitStore> => {
    const entry = { url: limits.redis!.url, closed: 0 };
    opened.push(entry);
    const store = new MemoryStore();
    return Object.assign(store, { spent: async (ids: readonly string[]) => ids.map(() => spentMicros), close: async () => void entry.closed++, ready: async () => true });
  };
  return { opened, open: open as unknown as ConstructorParameters<typeof BudgetSpend>[3] };
}

test("a supervisor of workers on Redis reads Redis through one client per `limits.redis`; a reload that moves Redis closes the old one, one that leaves Redis closes it too; the exit closes the last and refuses after", async () => {
  const redis = opener(1_500_000);
  const spend = new BudgetSpend(new MemoryStore(), () => true, () => undefined, redis.open);
  assert.equal((await spend.rows(REDIS_A))[0]!.spent_usd, 1.5);
  await spend.rows(REDIS_A);
  assert.deepEqual(redis.opened, [{ url: 'redis://127.0.0.1:1', closed: 0 }], 'one client while the settings stay');
  await spend.rows(REDIS_B);
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(redis.opened, [{ url: 'redis://127.0.0.1:1', closed: 1 }, { url: 'redis://127.0.0.1:2', closed: 0 }]);
  assert.equal((await spend.rows(MEMORY))[0]!.spent_usd, 0, 'memory: its own store');
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(redis.opened.map((o) => o.closed), [1, 1], 'a reload away from Redis closes its client');
  await spend.rows(REDIS_A);
  await spend.close();
  assert.deepEqual(redis.opened.map((o) => o.closed), [1, 1, 1], 'the exit closes the last');
  await assert.rejects(spend.rows(REDIS_A), /exiting/);
  assert.equal(redis.opened.length, 3, 'none opened after the exit');
});

test('a single process (no workers) reads its own store, Redis or not, and opens nothing', async () => {
  const redis = opener(1_500_000);
  const spend = new BudgetSpend(new MemoryStore(), () => false, () => undefined, redis.open);
  assert.equal((await spend.rows(REDIS_A))[0]!.spent_usd, 0);
  await spend.close();
  assert.equal((await spend.rows(MEMORY))[0]!.spent_usd, 0, 'its own store still answers after the exit step');
  assert.deepEqual(redis.opened, []);
});
