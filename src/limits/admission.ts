// A request let through the limits: what it holds (its reservation, its places in `concurrent`
// limits, its holds on budgets, renewed while it runs), given back when it finishes with the
// settlement of its real usage and cost, or its places ahead of that (`release`).
import type { Usage } from '../api/usage.ts';
import type { LeaseRenewal } from './lease-renewal.ts';
import type { Settlements } from './settlements.ts';
import type { Ask } from './store.ts';
import { NOTHING } from './key-entry.ts';

/** A request let through: what it holds, given back by `finish`. */
export interface Admission {
  /** x-ratelimit-* for the response (empty when no rate limit applies). */
  readonly headers: Readonly<Record<string, string>>;
  /** The request ended; `usage` is what the provider reported (undefined: nothing reported). */
  finish(usage: Usage | undefined, costMicros: number | undefined, answered: boolean): void;
  /**
   * Present when the request holds places in `concurrent` limits: the answer is about to be
   * complete (called before its last bytes are written), so its places are given back now, ahead
   * of the settlement. The client may send its next request as soon as it has the answer, to
   * another worker or gateway: that one must find the place free.
   */
  readonly release?: () => void;
}

export const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({});

/** Nothing to take or give back: no limit and no budget applies. */
export const UNLIMITED: Admission = { headers: NO_HEADERS, finish() {} };

/**
 * The admission of a request the store let through (`taken`), or let through uncounted (the store
 * was away, `on_store_error: open`). `entered`: the key's place its entry held, given back with the rest.
 */
export function holdingAdmission(
  key: string,
  ask: Ask,
  headers: Readonly<Record<string, string>>,
  taken: boolean,
  entered: readonly string[],
  leases: LeaseRenewal,
  settlements: Settlements,
  /** Told once the spend of a request with a cost was handed to the store (the budget alerts). */
  spent?: () => void,
): Admission {
  const acquired = taken ? ask.concurrency.map((c) => c.id) : [];
  const concurrency = entered.length === 0 ? acquired : [...entered, ...acquired];
  const holds = taken && ask.hold > 0 ? ask.budgets.map((b) => b.id) : [];
  const renewed = concurrency.length > 0 || holds.length > 0;
  if (renewed) leases.hold({ lease: ask.lease, concurrency, holds, hold: ask.hold });
  let done = false;
  let released = false;
  return {
    headers,
    finish: (usage, costMicros, answered) => {
      if (done) return;
      done = true;
      if (renewed) leases.release(ask.lease);
      // Unknown usage: an answer that went out keeps its reservation; a failure gives it back.
      const used = usage ? usage.prompt + usage.completion : answered ? ask.cost : 0;
      const spend = ask.budgets.length > 0 && costMicros !== undefined && costMicros > 0 ? ask.budgets.map((b) => ({ id: b.id, micros: costMicros, resetAt: b.resetAt })) : [];
      const tokens = taken ? ask.tokens : [];
      const refund = tokens.length > 0 ? ask.cost - used : 0;
      const places = released ? NOTHING : concurrency;
      if (refund === 0 && places.length === 0 && holds.length === 0 && spend.length === 0) return;
      settlements.settle({ key, used, tokens, refund, concurrency: places, lease: ask.lease, spend, holds, hold: ask.hold }, spend.length > 0 ? spent : undefined);
    },
    release:
      concurrency.length === 0
        ? undefined
        : () => {
            if (done || released) return;
            released = true;
            // The holds on budgets stay (and are renewed) until the settlement replaces them by the cost.
            if (holds.length > 0) leases.hold({ lease: ask.lease, concurrency: NOTHING, holds, hold: ask.hold });
            else leases.release(ask.lease);
            settlements.settle({ key, used: 0, tokens: [], refund: 0, concurrency, lease: ask.lease, spend: [], holds: [], hold: 0, early: true });
          },
  };
}
