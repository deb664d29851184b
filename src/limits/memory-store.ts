// The counters in this process's memory: exact for one process. With workers, the supervisor holds
// the one MemoryStore and the workers ask it over IPC (supervisor-store.ts), so that N workers do
// not allow N times a limit. Leases expire as in Redis, so a worker that dies gives its places back.
//
// A hot restart carries the counters to the next generation (E7): the old one's `snapshot()` at the
// hand-over starts the new one's store, and from then on every change the old one makes (what it
// still admits, settles and renews while it serves and drains) is given to its `follower` and
// applied to the new one's store (`apply`): spend, buckets, the leases of its requests in flight and
// their holds on the budgets end up there as they would have in one store.
import { admits, fullInMs, levelAt, waitMs, type BucketState } from './bucket.ts';
import type { Ask, BucketReading, LimitStore, Renewal, Settlement, Verdict } from './store.ts';

/** Every counter of a store, as plain data (it crosses IPC as JSON). */
export interface MemoryState {
  /** id, level, at (epoch ms), capacity. */
  buckets: [string, number, number, number][];
  /** id, micro-dollars, resetAt (epoch ms). */
  spent: [string, number, number][];
  /** Concurrency limit id, lease id, held until (epoch ms). */
  leases: [string, string, number][];
  /** Budget id, lease id, micro-dollars held, held until (epoch ms). Absent in a state an older version sent. */
  holds?: [string, string, number, number][];
}

/** One change a store made, to make in another (a hot restart's next generation). */
export type MemoryChange =
  /** An acquire that was let through: what it took (of a budget, its hold). */
  | { op: 'take'; ask: Ask }
  | { op: 'settle'; settlement: Settlement }
  | { op: 'renew'; renewals: readonly Renewal[]; leaseMs: number };

/** Where a store's changes go once it has handed its counters over. */
export interface MemoryFollower {
  change(change: MemoryChange): void;
  /** Resolves once every change given so far is on its way (the store closes after it). */
  flushed(): Promise<void>;
}

/** How long `close()` waits for the follower to take the last changes. */
const FOLLOWER_FLUSH_MS = 2000;

/** Budget counters are kept this long after their period ends, then dropped. */
const BUDGET_KEEP_MS = 24 * 3600_000;
/** Idle buckets are full again after a minute (unless in debt): they are swept every two. */
const SWEEP_EVERY_MS = 120_000;

export class MemoryStore implements LimitStore {
  readonly kind = 'memory';
  readonly #buckets = new Map<string, BucketState & { capacity: number }>();
  readonly #leases = new Map<string, Map<string, number>>();
  readonly #spent = new Map<string, { micros: number; resetAt: number }>();
  /** Per budget: what each request in progress holds against it (its lease's), until when. */
  readonly #holds = new Map<string, Map<string, { micros: number; until: number }>>();
  readonly #now: () => number;
  #swept: number;
  #follower: MemoryFollower | undefined;

  /** `state`: the counters to start from (a previous generation's, at a hot restart). */
  constructor(now: () => number = Date.now, state?: MemoryState) {
    this.#now = now;
    this.#swept = now();
    if (state) this.#restore(state);
  }

  /** Every counter, for the next generation to start from. */
  snapshot(): MemoryState {
    const leases: MemoryState['leases'] = [];
    for (const [id, held] of this.#leases) for (const [lease, until] of held) leases.push([id, lease, until]);
    const holds: NonNullable<MemoryState['holds']> = [];
    for (const [id, held] of this.#holds) for (const [lease, h] of held) holds.push([id, lease, h.micros, h.until]);
    return {
      buckets: [...this.#buckets].map(([id, b]) => [id, b.level, b.at, b.capacity]),
      spent: [...this.#spent].map(([id, e]) => [id, e.micros, e.resetAt]),
      leases,
      holds,
    };
  }

  /** From now on every change (this store's own and those it applies) also goes to `follower`; undefined: no more. */
  follow(follower: MemoryFollower | undefined): void {
    this.#follower = follower;
  }

  /**
   * A change another store made (the previous generation, after its snapshot): made here too,
   * whatever the limits say (it was let through there), and passed on to this store's follower.
   */
  apply(change: MemoryChange): void {
    if (change.op === 'settle') return this.settle(change.settlement);
    if (change.op === 'renew') return this.renew(change.renewals, change.leaseMs);
    const now = this.#now();
    const levels = (buckets: Ask['requests']) => buckets.map((b) => levelAt(this.#buckets.get(b.id), b.capacity, now));
    this.#take(change.ask, now, levels(change.ask.requests), levels(change.ask.tokens));
    this.#follower?.change(change);
  }

  acquire(ask: Ask): Verdict {
    const now = this.#now();
    this.#sweep(now);
    const levels = (buckets: Ask['requests']) => buckets.map((b) => levelAt(this.#buckets.get(b.id), b.capacity, now));
    const requestLevels = levels(ask.requests);
    const tokenLevels = levels(ask.tokens);
    const readings = (buckets: Ask['requests'], at: number[]): BucketReading[] => buckets.map((b, i) => ({ remaining: Math.max(0, Math.floor(at[i]!)), fullInMs: fullInMs(at[i]!, b.capacity) }));
    const refuse = (limit: 'requests' | 'tokens' | 'concurrent' | 'budget', index: number, retryAfterMs: number, money?: { spent: number; held: number }): Verdict => ({
      ok: false,
      limit,
      index,
      retryAfterMs,
      requests: readings(ask.requests, requestLevels),
      tokens: readings(ask.tokens, tokenLevels),
      ...money,
    });
    for (let i = 0; i < ask.budgets.length; i++) {
      const budget = ask.budgets[i]!;
      const spent = this.#spent.get(budget.id)?.micros ?? 0;
      const wait = Math.max(0, budget.resetAt - now);
      if (spent >= budget.maxMicros) return refuse('budget', i, wait, { spent, held: 0 });
      if (ask.hold === 0) continue;
      const held = this.#heldOn(budget.id, now);
      if (spent + held + ask.hold > budget.maxMicros) return refuse('budget', i, wait, { spent, held });
    }
    for (let i = 0; i < ask.requests.length; i++) {
      if (!admits(requestLevels[i]!, ask.requests[i]!.capacity, 1)) return refuse('requests', i, waitMs(requestLevels[i]!, ask.requests[i]!.capacity, 1));
    }
    for (let i = 0; i < ask.tokens.length; i++) {
      if (!admits(tokenLevels[i]!, ask.tokens[i]!.capacity, ask.cost)) return refuse('tokens', i, waitMs(tokenLevels[i]!, ask.tokens[i]!.capacity, ask.cost));
    }
    for (let i = 0; i < ask.concurrency.length; i++) {
      const limit = ask.concurrency[i]!;
      const held = this.#live(limit.id, now);
      if (held !== undefined && held.size >= limit.max) return refuse('concurrent', i, Math.max(1, Math.min(...held.values()) - now));
    }
    // Every limit admits: take from all of them.
    this.#take(ask, now, requestLevels, tokenLevels);
    this.#follower?.change({ op: 'take', ask });
    return { ok: true, requests: readings(ask.requests, requestLevels), tokens: readings(ask.tokens, tokenLevels) };
  }

  /**
   * Takes a request from each request bucket, the cost from each token bucket (their levels now,
   * in `requestLevels` and `tokenLevels`, which are left as the buckets are), and a lease in each
   * concurrency limit.
   */
  #take(ask: Ask, now: number, requestLevels: number[], tokenLevels: number[]): void {
    ask.requests.forEach((b, i) => this.#buckets.set(b.id, { level: (requestLevels[i]! -= 1), at: now, capacity: b.capacity }));
    ask.tokens.forEach((b, i) => this.#buckets.set(b.id, { level: (tokenLevels[i]! -= ask.cost), at: now, capacity: b.capacity }));
    for (const limit of ask.concurrency) {
      let held = this.#leases.get(limit.id);
      if (!held) this.#leases.set(limit.id, (held = new Map()));
      held.set(ask.lease, now + ask.leaseMs);
    }
    if (ask.hold > 0) {
      for (const budget of ask.budgets) {
        let held = this.#holds.get(budget.id);
        if (!held) this.#holds.set(budget.id, (held = new Map()));
        held.set(ask.lease, { micros: ask.hold, until: now + ask.leaseMs });
      }
    }
  }

  settle(s: Settlement): void {
    const now = this.#now();
    if (s.refund !== 0) {
      for (const b of s.tokens) this.#buckets.set(b.id, { level: Math.min(b.capacity, levelAt(this.#buckets.get(b.id), b.capacity, now) + s.refund), at: now, capacity: b.capacity });
    }
    for (const id of s.concurrency) {
      const held = this.#leases.get(id);
      held?.delete(s.lease);
      if (held?.size === 0) this.#leases.delete(id);
    }
    for (const { id, micros, resetAt } of s.spend) {
      const entry = this.#spent.get(id);
      if (entry) entry.micros += micros;
      else this.#spent.set(id, { micros, resetAt });
    }
    // `?? []`: a settlement an older version's generation sent has no holds.
    for (const id of s.holds ?? []) {
      const held = this.#holds.get(id);
      held?.delete(s.lease);
      if (held?.size === 0) this.#holds.delete(id);
    }
    this.#follower?.change({ op: 'settle', settlement: s });
  }

  /** Moves on the leases and holds still held; one already expired stays expired (its place may have been given away). */
  renew(renewals: readonly Renewal[], leaseMs: number): void {
    const now = this.#now();
    const until = now + leaseMs;
    for (const r of renewals) {
      for (const id of r.concurrency) {
        const held = this.#leases.get(id);
        if (held !== undefined && (held.get(r.lease) ?? 0) > now) held.set(r.lease, until);
      }
      for (const id of r.holds ?? []) {
        const hold = this.#holds.get(id)?.get(r.lease);
        if (hold !== undefined && hold.until > now) hold.until = until;
      }
    }
    this.#follower?.change({ op: 'renew', renewals, leaseMs });
  }

  async spent(ids: readonly string[]): Promise<number[]> {
    return ids.map((id) => this.#spent.get(id)?.micros ?? 0);
  }

  /** Micro-dollars held against each budget by the requests in progress (for tests). */
  async held(ids: readonly string[]): Promise<number[]> {
    const now = this.#now();
    return ids.map((id) => this.#heldOn(id, now));
  }

  /** The last changes reach the follower (bounded): a generation that exits leaves its usage counted. */
  async close(): Promise<void> {
    const follower = this.#follower;
    if (!follower) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([follower.flushed(), new Promise<void>((resolve) => (timer = setTimeout(resolve, FOLLOWER_FLUSH_MS)))]);
    clearTimeout(timer);
  }

  /** Entries that are not what this version writes (another version's generation sent them) are left out. */
  #restore(state: MemoryState): void {
    const text = (value: unknown): value is string => typeof value === 'string';
    const finite = (...values: unknown[]) => values.every((v) => Number.isFinite(v));
    for (const [id, level, at, capacity] of state.buckets) if (text(id) && finite(level, at, capacity)) this.#buckets.set(id, { level, at, capacity });
    for (const [id, micros, resetAt] of state.spent) if (text(id) && finite(micros, resetAt)) this.#spent.set(id, { micros, resetAt });
    for (const [id, lease, until] of state.leases) {
      if (!text(id) || !text(lease) || !finite(until)) continue;
      let held = this.#leases.get(id);
      if (!held) this.#leases.set(id, (held = new Map()));
      held.set(lease, until);
    }
    for (const [id, lease, micros, until] of Array.isArray(state.holds) ? state.holds : []) {
      if (!text(id) || !text(lease) || !finite(micros, until)) continue;
      let held = this.#holds.get(id);
      if (!held) this.#holds.set(id, (held = new Map()));
      held.set(lease, { micros, until });
    }
  }

  /** What the requests in progress hold against a budget, the expired holds dropped (a process that died holding them). */
  #heldOn(id: string, now: number): number {
    const held = this.#holds.get(id);
    if (!held) return 0;
    let total = 0;
    for (const [lease, hold] of held) {
      if (hold.until <= now) held.delete(lease);
      else total += hold.micros;
    }
    if (held.size === 0) this.#holds.delete(id);
    return total;
  }

  /** A limit's leases, the expired ones dropped (a process that died holding them). */
  #live(id: string, now: number): Map<string, number> | undefined {
    const held = this.#leases.get(id);
    if (!held) return undefined;
    for (const [lease, until] of held) if (until <= now) held.delete(lease);
    return held;
  }

  #sweep(now: number): void {
    if (now - this.#swept < SWEEP_EVERY_MS) return;
    this.#swept = now;
    // A bucket full again is as good as none; one still in debt is kept.
    for (const [id, state] of this.#buckets) if (levelAt(state, state.capacity, now) >= state.capacity) this.#buckets.delete(id);
    for (const [id, entry] of this.#spent) if (now > entry.resetAt + BUDGET_KEEP_MS) this.#spent.delete(id);
    for (const id of [...this.#leases.keys()]) if (this.#live(id, now)?.size === 0) this.#leases.delete(id);
    for (const id of [...this.#holds.keys()]) this.#heldOn(id, now);
  }
}
