// Which limits a request falls under, and the store asked once for all of them (`admit`, and `enter`
// for a key's `concurrent` place before the body). What a request that passes holds is its Admission
// (admission.ts), renewed while it runs (lease-renewal.ts) and settled when it ends (settlements.ts).
import type { RateLimits } from '../config/schema.ts';
import { errors, type GatewayError } from '../api/errors.ts';
import { systemClock, type Clock } from '../lifecycle/clock.ts';
import { budgetOwners, budgetPeriod, budgetRefusal, holdMicros, type BudgetOwner } from './budgets.ts';
import { estimateTokens } from './estimates.ts';
import { StoreUnavailable, type Ask, type BudgetLimit, type LimitStore, type Verdict } from './store.ts';

/** Told after a request's spend was settled on budgets (the budget alerts read the totals then). */
export type SpendWatch = (owners: readonly BudgetOwner[], periods: readonly BudgetLimit[]) => void;
import type { AdmitRequest, LimitEvents, LimitedKey, LimitPolicy, Scope } from './limit-policy.ts';
import { KeyEntry, NOTHING, type Entry } from './key-entry.ts';
import { holdingAdmission, NO_HEADERS, UNLIMITED, type Admission } from './admission.ts';
import { LeaseRenewal } from './lease-renewal.ts';
import { Settlements } from './settlements.ts';
import { rateHeaders, rateLimitRefusal, refusedScope, type Applied, type AppliedConcurrency } from './rate-limit-refusal.ts';

export class Limiter {
  readonly #store: LimitStore;
  readonly #events: LimitEvents;
  /** Wall-clock ms: which budget period a request falls in (a calendar day or month). */
  readonly #now: () => number;
  readonly #leases: LeaseRenewal;
  readonly #settlements: Settlements;
  /** The budget alerts, when configured. */
  spendWatch: SpendWatch | undefined = undefined;

  /**
   * `now`: the wall clock the budgets' periods are read on; `clock`: the timers of the renewals and
   * the retries, and the exit's deadline (tests pass a manual one).
   */
  constructor(store: LimitStore, events: LimitEvents, now: () => number = Date.now, clock: Clock = systemClock) {
    this.#store = store;
    this.#events = events;
    this.#now = now;
    this.#leases = new LeaseRenewal(store, events, clock);
    this.#settlements = new Settlements(store, events, clock);
  }

  get store(): LimitStore {
    return this.#store;
  }

  /** Settlements in progress or waiting to be retried. */
  get unsettled(): number {
    return this.#settlements.unsettled;
  }

  /**
   * Synchronous when nothing applies (the common case costs no promise) or the store answers at
   * once (memory); a promise for Redis.
   */
  admit(request: AdmitRequest): Admission | GatewayError | Promise<Admission | GatewayError> {
    const { policy, key, model } = request;
    const s = policy.settings;
    const modelLimits = own(s.models, model);
    // The common case, nothing to count: no string built, nothing asked of the store.
    if (s.global === undefined && modelLimits === undefined && key.limits === undefined && key.budget === undefined && key.team === undefined && key.userBudget === undefined) return UNLIMITED;
    // The key's place, when its entry holds it: counted already, and the admission's to give back.
    const entered = request.entry instanceof KeyEntry ? request.entry.take() : NOTHING;
    const scopes: [Scope, string, RateLimits | undefined][] = [
      ['global', 'g', s.global],
      ['model', `m:${model}`, modelLimits],
      ['team', `t:${key.team?.name}`, key.team?.limits],
      ['key', `k:${key.name}`, key.limits],
      ['key_model', `km:${key.name}:${model}`, own(key.limits?.models, model)],
    ];
    const requests: Applied[] = [];
    const tokens: Applied[] = [];
    const concurrency: AppliedConcurrency[] = [];
    for (const [scope, id, limits] of scopes) {
      if (limits === undefined) continue;
      if (limits.rpm !== undefined) requests.push({ scope, label: id, bucket: { id: `${id}:rpm`, capacity: limits.rpm } });
      if (limits.tpm !== undefined) tokens.push({ scope, label: id, bucket: { id: `${id}:tpm`, capacity: limits.tpm } });
      if (limits.concurrent !== undefined && !(scope === 'key' && entered.length > 0)) concurrency.push({ scope, id: `${id}:cc`, max: limits.concurrent });
    }
    const owners = key.budget === undefined && key.team === undefined && key.userBudget === undefined ? NO_OWNERS : budgetOwners(key, request.user ?? '');
    const now = owners.length === 0 ? 0 : this.#now();
    const budgets = owners.map((owner) => budgetPeriod(owner.id, owner.budget, now));
    // What the request may cost, held against the budgets while it runs: only a request under a budget pays for pricing it.
    const hold = budgets.length === 0 ? 0 : holdMicros(request, s.budget_hold_output_tokens);
    if (requests.length === 0 && tokens.length === 0 && concurrency.length === 0 && budgets.length === 0 && entered.length === 0) return UNLIMITED;
    // Never more than the smallest bucket it is counted in: a larger reservation passes only when
    // that bucket is full anyway (bucket.ts), and the rest would empty the other, shared buckets
    // (the gateway's, the model's) for as long as the request runs, and tell every other key to wait
    // until they refilled it. The real usage is settled whatever was reserved.
    const cost = tokens.length === 0 ? 0 : Math.min(estimateTokens(request, s.estimate_output_tokens), smallestCapacity(tokens));
    const ask: Ask = {
      requests: requests.map((a) => a.bucket),
      tokens: tokens.map((a) => a.bucket),
      cost,
      concurrency: concurrency.map(({ id, max }) => ({ id, max })),
      budgets,
      hold,
      lease: request.id,
      leaseMs: s.lease_secs * 1000,
    };
    this.#leases.leaseMs = ask.leaseMs;
    // Only the key's place, held already: nothing to ask of the store.
    if (requests.length === 0 && tokens.length === 0 && concurrency.length === 0 && budgets.length === 0) return this.#admission(request, ask, NO_HEADERS, true, entered, owners);
    const decide = (verdict: Verdict): Admission | GatewayError => this.#decide(request, ask, verdict, requests, tokens, concurrency, entered, owners);
    let answer: Verdict | Promise<Verdict>;
    try {
      answer = this.#store.acquire(ask);
    } catch (error) {
      return this.#unavailable(request, ask, error, entered, owners);
    }
    if (!(answer instanceof Promise)) return decide(answer);
    return answer.then(decide, (error: unknown) => this.#unavailable(request, ask, error, entered, owners));
  }

  /**
   * The key's place in its `concurrent` limit, taken when the key is checked, before the body is
   * read: a request whose body is still coming is in progress too. Undefined (nothing asked, no
   * promise) for a key without that limit. The place is renewed until `admit` takes it over, or
   * given back by `leave()`.
   */
  enter(policy: LimitPolicy, key: LimitedKey, id: string): Entry | GatewayError | Promise<Entry | GatewayError> | undefined {
    const max = key.limits?.concurrent;
    if (max === undefined) return undefined;
    const s = policy.settings;
    const limit = { scope: 'key' as const, id: `k:${key.name}:cc`, max };
    const ask: Ask = { requests: [], tokens: [], cost: 0, concurrency: [{ id: limit.id, max }], budgets: [], hold: 0, lease: id, leaseMs: s.lease_secs * 1000 };
    this.#leases.leaseMs = ask.leaseMs;
    const decide = (verdict: Verdict): Entry | GatewayError => (verdict.ok ? this.#entry(key.name, id, [limit.id]) : this.#refused(key, '', ask, verdict, NO_HEADERS, [], [], [limit], NO_OWNERS));
    const unavailable = (error: unknown): Entry | GatewayError => {
      if (!(error instanceof StoreUnavailable)) throw error;
      const open = s.on_store_error === 'open';
      this.#events.storeError('acquire', open ? 'allowed' : 'refused', error);
      // Open: nothing held; the admission asks for the key's place with the rest.
      return open ? this.#entry(key.name, id, NOTHING) : errors.limitStoreUnavailable();
    };
    let answer: Verdict | Promise<Verdict>;
    try {
      answer = this.#store.acquire(ask);
    } catch (error) {
      return unavailable(error);
    }
    if (!(answer instanceof Promise)) return decide(answer);
    return answer.then(decide, unavailable);
  }

  /** An entry holding `concurrency` (none: the store was away), renewed until taken or left. */
  #entry(key: string, lease: string, concurrency: readonly string[]): KeyEntry {
    if (concurrency.length > 0) this.#leases.hold({ lease, concurrency, holds: [], hold: 0 });
    return new KeyEntry(concurrency, () => this.#leave(key, lease, concurrency));
  }

  /** A place given back without an admission: the request ended first, or its admission was refused. */
  #leave(key: string, lease: string, concurrency: readonly string[]): void {
    if (concurrency.length === 0) return;
    this.#leases.release(lease);
    this.#settlements.settle({ key, used: 0, tokens: [], refund: 0, concurrency, lease, spend: [], holds: [], hold: 0 });
  }

  #decide(request: AdmitRequest, ask: Ask, verdict: Verdict, requests: Applied[], tokens: Applied[], concurrency: AppliedConcurrency[], entered: readonly string[], owners: readonly BudgetOwner[]): Admission | GatewayError {
    const headers = rateHeaders(requests, tokens, verdict.requests, verdict.tokens);
    if (verdict.ok) return this.#admission(request, ask, headers, true, entered, owners);
    this.#leave(request.key.name, ask.lease, entered);
    return this.#refused(request.key, request.model, ask, verdict, headers, requests, tokens, concurrency, owners);
  }

  #refused(
    key: LimitedKey,
    model: string,
    ask: Ask,
    verdict: Extract<Verdict, { ok: false }>,
    headers: Readonly<Record<string, string>>,
    requests: Applied[],
    tokens: Applied[],
    concurrency: readonly AppliedConcurrency[],
    owners: readonly BudgetOwner[],
  ): GatewayError {
    if (verdict.limit === 'budget') {
      const owner = owners[verdict.index] ?? owners[0]!;
      this.#events.refused(key.name, owner.scope === 'team' ? 'team' : 'key', 'budget');
      return budgetRefusal(owner.whose, owner.budget, ask, verdict, headers);
    }
    const scope = refusedScope(verdict, requests, tokens, concurrency);
    this.#events.refused(key.name, scope, verdict.limit);
    return rateLimitRefusal(key.name, model, ask.cost, verdict, scope, headers, requests, tokens, concurrency, key.team?.name);
  }

  /** The store did not answer: on_store_error says whether the request goes on (uncounted, its spend still recorded) or is refused. */
  #unavailable(request: AdmitRequest, ask: Ask, error: unknown, entered: readonly string[], owners: readonly BudgetOwner[]): Admission | GatewayError {
    if (!(error instanceof StoreUnavailable)) throw error;
    const open = request.policy.settings.on_store_error === 'open';
    this.#events.storeError('acquire', open ? 'allowed' : 'refused', error);
    if (!open) {
      this.#leave(request.key.name, ask.lease, entered);
      return errors.limitStoreUnavailable();
    }
    return this.#admission(request, ask, NO_HEADERS, false, entered, owners);
  }

  /** `entered`: the key's place its entry held, given back with the rest. */
  #admission(request: AdmitRequest, ask: Ask, headers: Readonly<Record<string, string>>, taken: boolean, entered: readonly string[], owners: readonly BudgetOwner[]): Admission {
    const watch = this.spendWatch;
    const spent = watch === undefined || owners.length === 0 ? undefined : () => watch(owners, ask.budgets);
    return holdingAdmission(request.key.name, ask, headers, taken, entered, this.#leases, this.#settlements, spent);
  }

  /**
   * L9: called once nothing is in flight. Settlements still out get until `timeoutMs` (the queue
   * is retried once more); what the store never took is logged with its usage; then the store closes.
   */
  async close(timeoutMs: number): Promise<void> {
    this.#leases.stop();
    await this.#settlements.close(timeoutMs);
    await this.#store.close();
  }
}

const NO_OWNERS: readonly BudgetOwner[] = Object.freeze([]);

/** A model's entry in a limits map: its own property only (a model named "constructor" is not Object's). */
function own(map: Readonly<Record<string, RateLimits>> | undefined, model: string): RateLimits | undefined {
  return map !== undefined && Object.hasOwn(map, model) ? map[model] : undefined;
}

function smallestCapacity(applied: readonly Applied[]): number {
  let smallest = Infinity;
  for (const a of applied) smallest = Math.min(smallest, a.bucket.capacity);
  return smallest;
}
