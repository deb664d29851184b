// A per-minute limit as a token bucket: `capacity` units, refilled continuously at capacity/60 per
// second. A full bucket lets a burst of `capacity` through; sustained, `capacity` per minute. The
// memory store runs these functions; the Redis store's scripts (redis-scripts.ts) do the same
// arithmetic, so that both answer alike.

export const MINUTE_MS = 60_000;

export interface BucketState {
  /** Units available (negative: a debt, when a request used more than it reserved). */
  level: number;
  /** When `level` was computed, epoch ms. */
  at: number;
}

/** The level at `now`: what was there plus the refill since, never above capacity. */
export function levelAt(state: BucketState | undefined, capacity: number, now: number): number {
  if (state === undefined) return capacity;
  return Math.min(capacity, state.level + (Math.max(0, now - state.at) * capacity) / MINUTE_MS);
}

/**
 * Whether `cost` units may be taken at `level`. A request costing more than the whole bucket is
 * let through when the bucket is full (it could never pass otherwise) and leaves a debt.
 */
export function admits(level: number, capacity: number, cost: number): boolean {
  return level >= Math.min(cost, capacity);
}

/** How long until `cost` units may be taken, in ms (0 when they may now). */
export function waitMs(level: number, capacity: number, cost: number): number {
  const need = Math.min(cost, capacity) - level;
  return need <= 0 ? 0 : Math.ceil((need * MINUTE_MS) / capacity);
}

/** How long until the bucket is full again, in ms (OpenAI's x-ratelimit-reset-*). */
export function fullInMs(level: number, capacity: number): number {
  return level >= capacity ? 0 : Math.ceil(((capacity - level) * MINUTE_MS) / capacity);
}
