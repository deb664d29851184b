// The counters in Redis, shared by every gateway that uses it: each operation is one Lua script
// (redis-scripts.ts), so a check and its take are atomic across the fleet. Commands fail fast when
// Redis is away (no offline queue, a command timeout): the limiter then does what on_store_error says.
import { Redis } from 'ioredis';
import { ACQUIRE, RENEW, SETTLE } from './redis-scripts.ts';
import { holdMember, StoreUnavailable, type Ask, type BucketReading, type LimitKind, type LimitStore, type Renewal, type Settlement, type Verdict } from './store.ts';

export interface RedisSettings {
  readonly url: string;
  readonly key_prefix: string;
  readonly command_timeout_ms: number;
  readonly connect_timeout_ms: number;
}

type ScriptCall = (numKeys: number, ...args: (string | number)[]) => Promise<unknown>;
interface Scripts {
  sluiceAcquire: ScriptCall;
  sluiceSettle: ScriptCall;
  sluiceRenew: ScriptCall;
}

const KINDS: readonly LimitKind[] = ['requests', 'requests', 'tokens', 'concurrent', 'budget'];

export class RedisStore implements LimitStore {
  readonly kind = 'redis';
  readonly #redis: Redis & Scripts;
  readonly #prefix: string;
  readonly #ready: Promise<void>;

  constructor(settings: RedisSettings, onError: (error: Error) => void) {
    const redis = new Redis(settings.url, {
      lazyConnect: true,
      // The scripts of every request begun in one turn of the event loop go out in one write.
      enableAutoPipelining: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: settings.command_timeout_ms,
      connectTimeout: settings.connect_timeout_ms,
      // Reconnect for ever, at most every 2 s: limits resume as soon as Redis is back.
      retryStrategy: (times) => Math.min(100 * times, 2000),
    });
    redis.on('error', onError);
    redis.defineCommand('sluiceAcquire', { lua: ACQUIRE });
    redis.defineCommand('sluiceSettle', { lua: SETTLE });
    redis.defineCommand('sluiceRenew', { lua: RENEW });
    this.#redis = redis as Redis & Scripts;
    this.#prefix = settings.key_prefix;
    this.#ready = redis.connect().then(
      () => undefined,
      () => undefined, // reported through 'error'; it keeps trying
    );
  }

  /** Resolves once connected, or after `ms` (the gateway serves either way). */
  async ready(ms: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.#ready, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
    clearTimeout(timer);
    return this.#redis.status === 'ready';
  }

  async acquire(ask: Ask): Promise<Verdict> {
    const p = this.#prefix;
    const keys = [
      ...ask.requests.map((b) => `${p}rl:${b.id}`),
      ...ask.tokens.map((b) => `${p}rl:${b.id}`),
      ...ask.concurrency.map((c) => `${p}cc:${c.id}`),
      ...ask.budgets.map((b) => `${p}sp:${b.id}`),
      ...ask.budgets.map((b) => `${p}sh:${b.id}`),
    ];
    const args = [
      ask.requests.length,
      ask.tokens.length,
      ask.concurrency.length,
      ask.budgets.length,
      ask.cost,
      ask.lease,
      ask.leaseMs,
      ask.hold,
      ...ask.requests.map((b) => b.capacity),
      ...ask.tokens.map((b) => b.capacity),
      ...ask.concurrency.map((c) => c.max),
      ...ask.budgets.map((b) => b.maxMicros),
      ...ask.budgets.map((b) => b.resetAt),
    ];
    const reply = (await this.#call(() => this.#redis.sluiceAcquire(keys.length, ...keys, ...args))) as number[];
    const readings = (from: number, count: number): BucketReading[] => {
      const out: BucketReading[] = [];
      for (let i = 0; i < count; i++) out.push({ remaining: Number(reply[from + 2 * i]), fullInMs: Number(reply[from + 2 * i + 1]) });
      return out;
    };
    const requests = readings(6, ask.requests.length);
    const tokens = readings(6 + 2 * ask.requests.length, ask.tokens.length);
    if (Number(reply[0]) === 1) return { ok: true, requests, tokens };
    const limit = KINDS[Number(reply[1])]!;
    const money = limit === 'budget' ? { spent: Number(reply[4]), held: Number(reply[5]) } : {};
    return { ok: false, limit, index: Number(reply[2]), retryAfterMs: Number(reply[3]), requests, tokens, ...money };
  }

  async settle(s: Settlement): Promise<void> {
    const p = this.#prefix;
    const keys = [
      ...s.tokens.map((b) => `${p}rl:${b.id}`),
      ...s.concurrency.map((id) => `${p}cc:${id}`),
      ...s.spend.map((x) => `${p}sp:${x.id}`),
      ...s.holds.map((id) => `${p}sh:${id}`),
      s.early ? `${p}settled:${s.lease}:places` : `${p}settled:${s.lease}`,
    ];
    const args = [
      s.tokens.length,
      s.concurrency.length,
      s.spend.length,
      s.holds.length,
      s.refund,
      s.lease,
      holdMember(s.lease, s.hold),
      ...s.tokens.map((b) => b.capacity),
      ...s.spend.map((x) => x.micros),
      ...s.spend.map((x) => x.resetAt + 24 * 3600_000),
    ];
    await this.#call(() => this.#redis.sluiceSettle(keys.length, ...keys, ...args));
  }

  async renew(renewals: readonly Renewal[], leaseMs: number): Promise<void> {
    const keys: string[] = [];
    const leases: string[] = [];
    for (const r of renewals) {
      for (const id of r.concurrency) {
        keys.push(`${this.#prefix}cc:${id}`);
        leases.push(r.lease);
      }
      for (const id of r.holds) {
        keys.push(`${this.#prefix}sh:${id}`);
        leases.push(holdMember(r.lease, r.hold));
      }
    }
    if (keys.length === 0) return;
    await this.#call(() => this.#redis.sluiceRenew(keys.length, ...keys, leaseMs, ...leases));
  }

  async spent(ids: readonly string[]): Promise<number[]> {
    if (ids.length === 0) return [];
    const values = (await this.#call(() => this.#redis.mget(...ids.map((id) => `${this.#prefix}sp:${id}`)))) as (string | null)[];
    return values.map((v) => (v === null ? 0 : Number(v)));
  }

  /** L9: QUIT (Redis answers what it has, then closes), or a plain disconnect when it does not answer. */
  async close(): Promise<void> {
    const redis = this.#redis;
    if (redis.status !== 'ready') {
      redis.disconnect();
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([redis.quit().catch(() => undefined), new Promise((resolve) => (timer = setTimeout(resolve, 1000)))]);
    clearTimeout(timer);
    redis.disconnect();
  }

  async #call<T>(command: () => Promise<T>): Promise<T> {
    try {
      return await command();
    } catch (error) {
      throw new StoreUnavailable((error as Error).message);
    }
  }
}
