// What the limiter asks of the place its counters live. Plain data in and out, so that a store can
// be this process's memory, the supervisor's (over IPC, for workers) or Redis (for a fleet). One
// `acquire` checks every limit a request falls under and takes from all of them, or from none.

/** A per-minute bucket (bucket.ts): requests or tokens of one scope. */
export interface RateBucket {
  readonly id: string;
  readonly capacity: number;
}

/** A concurrency limit of one scope: leases held by requests in progress. */
export interface ConcurrencyLimit {
  readonly id: string;
  readonly max: number;
}

/** A budget of one key for one period, in micro-dollars (whole numbers: no rounding drift). */
export interface BudgetLimit {
  readonly id: string;
  readonly maxMicros: number;
  /** When the period ends (epoch ms): the counter expires a day after. */
  readonly resetAt: number;
}

export interface Ask {
  /** Each takes one request. */
  readonly requests: readonly RateBucket[];
  /** Each takes `cost` tokens (the reservation). */
  readonly tokens: readonly RateBucket[];
  readonly cost: number;
  readonly concurrency: readonly ConcurrencyLimit[];
  /**
   * Each is checked: refused once spent, or when what is spent, what the requests in progress hold
   * and `hold` would pass it; then `hold` is held against it until the settlement.
   */
  readonly budgets: readonly BudgetLimit[];
  /** Micro-dollars held against each budget while the request runs (what it may cost); 0: nothing. */
  readonly hold: number;
  /** The request's lease id in every concurrency limit, and of its hold on each budget. */
  readonly lease: string;
  /** How long the lease (and the hold) lasts unless renewed, ms. */
  readonly leaseMs: number;
}

/** A hold as a member of a budget's set of holds in Redis: the lease and the micro-dollars it holds. */
export function holdMember(lease: string, hold: number): string {
  return `${lease}|${hold}`;
}

/** A bucket as the request leaves it (after taking, or as it was when refused). */
export interface BucketReading {
  readonly remaining: number;
  readonly fullInMs: number;
}

export type LimitKind = 'requests' | 'tokens' | 'concurrent' | 'budget';

export type Verdict =
  | { readonly ok: true; readonly requests: readonly BucketReading[]; readonly tokens: readonly BucketReading[] }
  | {
      readonly ok: false;
      readonly limit: LimitKind;
      /** Which of that kind's limits refused (its index in the ask). */
      readonly index: number;
      readonly retryAfterMs: number;
      readonly requests: readonly BucketReading[];
      readonly tokens: readonly BucketReading[];
      /** A budget's refusal: the micro-dollars spent, and held by the requests in progress (for the answer's words). */
      readonly spent?: number;
      readonly held?: number;
    };

/** What a finished request gives back or adds. */
export interface Settlement {
  /** Whose usage it is (the key's name), and the tokens it used: for the log if it is never committed. */
  readonly key: string;
  readonly used: number;
  readonly tokens: readonly RateBucket[];
  /** Tokens reserved minus tokens used: given back (negative: taken too). */
  readonly refund: number;
  readonly concurrency: readonly string[];
  readonly lease: string;
  readonly spend: readonly { readonly id: string; readonly micros: number; readonly resetAt: number }[];
  /** Budgets whose hold of `hold` micro-dollars by this lease ends (the spend replaces it). */
  readonly holds: readonly string[];
  readonly hold: number;
  /**
   * Only the places in `concurrency`, given back ahead of the settlement (the answer is complete):
   * counted once on its own, apart from the lease's settlement that follows (a store that makes
   * retried settlements count once keys them by lease and this).
   */
  readonly early?: boolean;
}

/** Leases still in use: their expiry moves on, in each concurrency limit and of each budget's hold. */
export interface Renewal {
  readonly concurrency: readonly string[];
  readonly lease: string;
  readonly holds: readonly string[];
  readonly hold: number;
}

export interface LimitStore {
  readonly kind: string;
  /** A store across the network (Redis): resolves true once it answers, false after `ms` without. */
  ready?(ms: number): Promise<boolean>;
  acquire(ask: Ask): Verdict | Promise<Verdict>;
  settle(settlement: Settlement): void | Promise<void>;
  renew(renewals: readonly Renewal[], leaseMs: number): void | Promise<void>;
  /** Micro-dollars spent on each budget (for /server_info and tests). */
  spent(ids: readonly string[]): Promise<number[]>;
  close(): Promise<void>;
}

/** The store could not answer (unreachable, timed out): on_store_error decides. */
export class StoreUnavailable extends Error {}
