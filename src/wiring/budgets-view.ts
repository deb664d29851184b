// `GET /budgets`: every budget of a key or a team in the config serving, with what its period has
// spent so far (the limit store's counter) and what is left.
import { isDeepStrictEqual } from 'node:util';
import type { BudgetRow } from '../admin/usage-api.ts';
import type { BudgetConfig, Config } from '../config/schema.ts';
import { budgetPeriod, teamBudgetId } from '../limits/budgets.ts';
import { openStore } from '../limits/open-store.ts';
import type { LimitStore } from '../limits/store.ts';

/**
 * Where this process reads the spend: its own limit store, except in the supervisor of workers on
 * Redis. That one keeps no counters (the workers count in Redis; its own store is an unused
 * memory), so it opens a Redis client of its own when first asked, on the `limits.redis` serving
 * then, and another after a reload changes it; a reload away from Redis closes it. Closed at the exit.
 */
export class BudgetSpend {
  readonly #own: LimitStore;
  readonly #supervisesWorkers: () => boolean;
  readonly #onRedisError: (error: Error) => void;
  readonly #open: typeof openStore;
  #redis: { settings: unknown; store: Promise<LimitStore> } | undefined;
  #closed = false;

  /** `open`: how a store is opened (`openStore`; a test's own). */
  constructor(own: LimitStore, supervisesWorkers: () => boolean, onRedisError: (error: Error) => void, open: typeof openStore = openStore) {
    this.#own = own;
    this.#supervisesWorkers = supervisesWorkers;
    this.#onRedisError = onRedisError;
    this.#open = open;
  }

  /** The budgets of `config` as they stand now. */
  async rows(config: Config): Promise<BudgetRow[]> {
    return budgetRows(config, await this.#storeFor(config));
  }

  /** At the exit: the Redis client closed; a call after it is refused rather than open another. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#dropRedis();
  }

  async #dropRedis(): Promise<void> {
    const redis = this.#redis;
    this.#redis = undefined;
    if (redis) await (await redis.store).close();
  }

  #storeFor(config: Config): LimitStore | Promise<LimitStore> {
    // A client for settings no longer serving (a reload moved Redis, or left it) is closed, not left reconnecting.
    if (config.limits.store !== 'redis' || !this.#supervisesWorkers()) {
      if (this.#redis) void this.#dropRedis().catch(() => undefined);
      return this.#own;
    }
    if (this.#closed) return Promise.reject(new Error('the gateway is exiting'));
    if (this.#redis && isDeepStrictEqual(this.#redis.settings, config.limits.redis)) return this.#redis.store;
    void this.#dropRedis().catch(() => undefined);
    const limits = config.limits;
    const store = this.#open(limits, this.#onRedisError).then(async (opened) => {
      await opened.ready?.(limits.redis!.connect_timeout_ms);
      return opened;
    });
    this.#redis = { settings: limits.redis, store };
    return store;
  }
}

/** The budgets of `config` as they stand at `now`. */
export async function budgetRows(config: Config, store: LimitStore, now: number = Date.now()): Promise<BudgetRow[]> {
  const owned: { scope: 'key' | 'team'; name: string; id: string; budget: BudgetConfig }[] = [];
  for (const key of config.keys) if (typeof key !== 'string' && key.budget) owned.push({ scope: 'key', name: key.name, id: key.name, budget: key.budget });
  for (const team of config.teams) if (team.budget) owned.push({ scope: 'team', name: team.name, id: teamBudgetId(team.name), budget: team.budget });
  if (owned.length === 0) return [];
  const periods = owned.map((o) => budgetPeriod(o.id, o.budget, now));
  const spent = await store.spent(periods.map((p) => p.id));
  return owned.map((o, i) => {
    const spentMicros = spent[i] ?? 0;
    return {
      scope: o.scope,
      name: o.name,
      period: o.budget.period,
      budget_usd: o.budget.usd,
      spent_usd: spentMicros / 1e6,
      left_usd: Math.max(0, periods[i]!.maxMicros - spentMicros) / 1e6,
      resets_at: new Date(periods[i]!.resetAt).toISOString(),
    };
  });
}
