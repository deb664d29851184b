// Which limits a request falls under, and the store asked once for all of them. A request that
// passes holds an Admission: its token reservation, its concurrency lease (renewed while it runs)
// and its hold on its key's budget (what it may cost, budgets.ts; renewed with the lease), settled
// with the real usage and cost when it finishes. Settlements that the store could not take are
// retried, and the drain waits for them (L9) before the store is closed.
import type { BudgetConfig, Config, LimitsConfig, RateLimits } from '../config/schema.ts';
import { errors, type GatewayError } from '../api/errors.ts';
import type { Usage } from '../api/usage.ts';
import { Prices } from './prices.ts';
import { budgetPeriod, budgetRefusal, holdMicros } from './budgets.ts';
import { estimateTokens } from './estimates.ts';
import { StoreUnavailable, type Ask, type BucketReading, type LimitKind, type LimitStore, type RateBucket, type Renewal, type Settlement, type Verdict } from './store.ts';

export type Scope = 'global' | 'model' | 'key' | 'key_model';

/** The limits of one reload: what `limits`, `prices` and each key's `limits`/`budget` say. */
export class LimitPolicy {
  readonly settings: LimitsConfig;
  readonly prices: Prices;

  constructor(config: Pick<Config, 'limits' | 'prices'>) {
    this.settings = config.limits;
    this.prices = new Prices(config.prices);
  }
}

/** The key a request presented, as the limiter sees it. */
export interface LimitedKey {
  readonly name: string;
  readonly limits?: (RateLimits & { models?: Record<string, RateLimits> | undefined }) | undefined;
  readonly budget?: BudgetConfig | undefined;
}

export interface AdmitRequest {
  readonly policy: LimitPolicy;
  readonly key: LimitedKey;
  /** The configured model entry the request matched. */
  readonly model: string;
  /** The model name the client asked for. */
  readonly requested: string;
  /** The route's targets: the model each would be asked for (undefined: the client's name), priced for a budget's hold. */
  readonly targets: readonly { readonly model: string | undefined }[];
  /** Embeddings and token counts produce no completion tokens. */
  readonly generates: boolean;
  /** Token counts cost nothing: no hold on a budget. */
  readonly billed: boolean;
  readonly json: Record<string, unknown>;
  readonly bodyBytes: number;
  /** Unique per request: the lease id. */
  readonly id: string;
  /** The key's place taken when its key was checked (`enter`), handed to the admission. */
  readonly entry?: Entry | undefined;
}

/**
 * A request's place in its key's `concurrent` limit, taken when its key is checked, before its body
 * is read (a slow body is a request in progress too): renewed until it is handed to the request's
 * admission, or given back by `leave()` when the request ends before one.
 */
export interface Entry {
  /** The request ended before its admission: its place is given back (once; nothing once admitted). */
  leave(): void;
  /** `leave()` was called: the request must not be admitted. */
  readonly left: boolean;
}

export interface LimitEvents {
  refused(key: string, scope: Scope, limit: LimitKind): void;
  storeError(operation: 'acquire' | 'settle' | 'renew', outcome: 'allowed' | 'refused' | 'retried' | 'lost', error: Error): void;
  /** A settlement the store never took (it was away until the exit): its usage, for the record. */
  notCommitted(key: string, tokens: number, micros: number): void;
}

interface Applied {
  readonly scope: Scope;
  readonly label: string;
  readonly bucket: RateBucket;
}

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

const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({});
/** What a request refused by a concurrent limit is told to wait before it tries again. */
const CONCURRENT_RETRY_MS = 1000;
const NOTHING: readonly string[] = Object.freeze([]);

/** An `Entry` as the limiter keeps it: what it holds, until its admission takes it or it is left. */
class KeyEntry implements Entry {
  readonly #concurrency: readonly string[];
  readonly #giveBack: () => void;
  #state: 'held' | 'taken' | 'left' = 'held';

  constructor(concurrency: readonly string[], giveBack: () => void) {
    this.#concurrency = concurrency;
    this.#giveBack = giveBack;
  }

  get left(): boolean {
    return this.#state === 'left';
  }

  leave(): void {
    if (this.#state !== 'held') return;
    this.#state = 'left';
    this.#giveBack();
  }

  /** The admission takes over what is held (nothing, once left). */
  take(): readonly string[] {
    if (this.#state !== 'held') return NOTHING;
    this.#state = 'taken';
    return this.#concurrency;
  }
}

/** Nothing to take or give back: no limit and no budget applies. */
export const UNLIMITED: Admission = { headers: NO_HEADERS, finish() {} };

const MAX_RETRY_QUEUE = 10_000;

export class Limiter {
  readonly #store: LimitStore;
  readonly #events: LimitEvents;
  readonly #now: () => number;
  /** Leases held by requests in progress: renewed every lease/3. */
  readonly #held = new Map<string, Renewal>();
  #leaseMs = 30_000;
  #renewTimer: NodeJS.Timeout | undefined;
  readonly #pending = new Set<Promise<void>>();
  #retry: Settlement[] = [];
  #retryTimer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(store: LimitStore, events: LimitEvents, now: () => number = Date.now) {
    this.#store = store;
    this.#events = events;
    this.#now = now;
  }

  get store(): LimitStore {
    return this.#store;
  }

  /** Settlements in progress or waiting to be retried. */
  get unsettled(): number {
    return this.#pending.size + this.#retry.length;
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
    if (s.global === undefined && modelLimits === undefined && key.limits === undefined && key.budget === undefined) return UNLIMITED;
    // The key's place, when its entry holds it: counted already, and the admission's to give back.
    const entered = request.entry instanceof KeyEntry ? request.entry.take() : NOTHING;
    const scopes: [Scope, string, RateLimits | undefined][] = [
      ['global', 'g', s.global],
      ['model', `m:${model}`, modelLimits],
      ['key', `k:${key.name}`, key.limits],
      ['key_model', `km:${key.name}:${model}`, own(key.limits?.models, model)],
    ];
    const requests: Applied[] = [];
    const tokens: Applied[] = [];
    const concurrency: { scope: Scope; id: string; max: number }[] = [];
    for (const [scope, id, limits] of scopes) {
      if (limits === undefined) continue;
      if (limits.rpm !== undefined) requests.push({ scope, label: id, bucket: { id: `${id}:rpm`, capacity: limits.rpm } });
      if (limits.tpm !== undefined) tokens.push({ scope, label: id, bucket: { id: `${id}:tpm`, capacity: limits.tpm } });
      if (limits.concurrent !== undefined && !(scope === 'key' && entered.length > 0)) concurrency.push({ scope, id: `${id}:cc`, max: limits.concurrent });
    }
    const budget = key.budget === undefined ? undefined : budgetPeriod(key.name, key.budget, this.#now());
    // What the request may cost, held against the budget while it runs: only a key with a budget pays for pricing it.
    const hold = budget === undefined ? 0 : holdMicros(request, s.budget_hold_output_tokens);
    if (requests.length === 0 && tokens.length === 0 && concurrency.length === 0 && budget === undefined && entered.length === 0) return UNLIMITED;
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
      budgets: budget ? [budget] : [],
      hold,
      lease: request.id,
      leaseMs: s.lease_secs * 1000,
    };
    this.#leaseMs = ask.leaseMs;
    // Only the key's place, held already: nothing to ask of the store.
    if (requests.length === 0 && tokens.length === 0 && concurrency.length === 0 && budget === undefined) return this.#admission(request, ask, NO_HEADERS, true, entered);
    const decide = (verdict: Verdict): Admission | GatewayError => this.#decide(request, ask, verdict, requests, tokens, concurrency, entered);
    let answer: Verdict | Promise<Verdict>;
    try {
      answer = this.#store.acquire(ask);
    } catch (error) {
      return this.#unavailable(request, ask, error, entered);
    }
    if (!(answer instanceof Promise)) return decide(answer);
    return answer.then(decide, (error: unknown) => this.#unavailable(request, ask, error, entered));
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
    this.#leaseMs = ask.leaseMs;
    const decide = (verdict: Verdict): Entry | GatewayError => (verdict.ok ? this.#entry(key.name, id, [limit.id]) : this.#refused(key, '', ask, verdict, NO_HEADERS, [], [], [limit]));
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
    if (concurrency.length > 0) this.#hold({ lease, concurrency, holds: [], hold: 0 });
    return new KeyEntry(concurrency, () => this.#leave(key, lease, concurrency));
  }

  /** A place given back without an admission: the request ended first, or its admission was refused. */
  #leave(key: string, lease: string, concurrency: readonly string[]): void {
    if (concurrency.length === 0) return;
    this.#release(lease);
    this.#settle({ key, used: 0, tokens: [], refund: 0, concurrency, lease, spend: [], holds: [], hold: 0 });
  }

  #decide(
    request: AdmitRequest,
    ask: Ask,
    verdict: Verdict,
    requests: Applied[],
    tokens: Applied[],
    concurrency: { scope: Scope; id: string; max: number }[],
    entered: readonly string[],
  ): Admission | GatewayError {
    const headers = rateHeaders(requests, tokens, verdict.requests, verdict.tokens);
    if (verdict.ok) return this.#admission(request, ask, headers, true, entered);
    this.#leave(request.key.name, ask.lease, entered);
    return this.#refused(request.key, request.model, ask, verdict, headers, requests, tokens, concurrency);
  }

  #refused(
    key: LimitedKey,
    model: string,
    ask: Ask,
    verdict: Extract<Verdict, { ok: false }>,
    headers: Readonly<Record<string, string>>,
    requests: Applied[],
    tokens: Applied[],
    concurrency: readonly { scope: Scope; id: string; max: number }[],
  ): GatewayError {
    if (verdict.limit === 'budget') {
      this.#events.refused(key.name, 'key', 'budget');
      return budgetRefusal(key.name, key.budget!, ask, verdict, headers);
    }
    const refusedBy = verdict.limit === 'requests' ? requests[verdict.index]! : verdict.limit === 'tokens' ? tokens[verdict.index]! : undefined;
    const scope = refusedBy?.scope ?? concurrency[verdict.index]!.scope;
    this.#events.refused(key.name, scope, verdict.limit);
    // A place in a concurrent limit is free as soon as one of the requests holding it ends, which no
    // store can foresee (the soonest lease expiry is ~lease_secs away, renewed while they run).
    const ms = verdict.limit === 'concurrent' ? CONCURRENT_RETRY_MS : Math.max(1, verdict.retryAfterMs);
    const what =
      verdict.limit === 'requests'
        ? `${refusedBy!.bucket.capacity} requests per minute`
        : verdict.limit === 'tokens'
          ? `${refusedBy!.bucket.capacity} tokens per minute (this request reserves ${ask.cost})`
          : `${concurrency[verdict.index]!.max} concurrent requests`;
    const message = `Rate limit reached for ${scopeWords(scope, key.name, model)}: ${what}. Try again in ${formatDuration(ms)}.`;
    return errors.rateLimited(message, { ...headers, 'retry-after': String(Math.ceil(ms / 1000)), 'retry-after-ms': String(ms) });
  }

  /** The store did not answer: on_store_error says whether the request goes on (uncounted, its spend still recorded) or is refused. */
  #unavailable(request: AdmitRequest, ask: Ask, error: unknown, entered: readonly string[]): Admission | GatewayError {
    if (!(error instanceof StoreUnavailable)) throw error;
    const open = request.policy.settings.on_store_error === 'open';
    this.#events.storeError('acquire', open ? 'allowed' : 'refused', error);
    if (!open) {
      this.#leave(request.key.name, ask.lease, entered);
      return errors.limitStoreUnavailable();
    }
    return this.#admission(request, ask, NO_HEADERS, false, entered);
  }

  /** `entered`: the key's place its entry held, given back with the rest. */
  #admission(request: AdmitRequest, ask: Ask, headers: Readonly<Record<string, string>>, taken: boolean, entered: readonly string[]): Admission {
    const acquired = taken ? ask.concurrency.map((c) => c.id) : [];
    const concurrency = entered.length === 0 ? acquired : [...entered, ...acquired];
    const holds = taken && ask.hold > 0 ? ask.budgets.map((b) => b.id) : [];
    const renewed = concurrency.length > 0 || holds.length > 0;
    if (renewed) this.#hold({ lease: ask.lease, concurrency, holds, hold: ask.hold });
    let done = false;
    let released = false;
    return {
      headers,
      finish: (usage, costMicros, answered) => {
        if (done) return;
        done = true;
        if (renewed) this.#release(ask.lease);
        // Unknown usage: an answer that went out keeps its reservation; a failure gives it back.
        const used = usage ? usage.prompt + usage.completion : answered ? ask.cost : 0;
        const spend = ask.budgets.length > 0 && costMicros !== undefined && costMicros > 0 ? ask.budgets.map((b) => ({ id: b.id, micros: costMicros, resetAt: b.resetAt })) : [];
        const tokens = taken ? ask.tokens : [];
        const refund = tokens.length > 0 ? ask.cost - used : 0;
        const places = released ? NOTHING : concurrency;
        if (refund === 0 && places.length === 0 && holds.length === 0 && spend.length === 0) return;
        this.#settle({ key: request.key.name, used, tokens, refund, concurrency: places, lease: ask.lease, spend, holds, hold: ask.hold });
      },
      release:
        concurrency.length === 0
          ? undefined
          : () => {
              if (done || released) return;
              released = true;
              // The holds on budgets stay (and are renewed) until the settlement replaces them by the cost.
              if (holds.length > 0) this.#hold({ lease: ask.lease, concurrency: NOTHING, holds, hold: ask.hold });
              else this.#release(ask.lease);
              this.#settle({ key: request.key.name, used: 0, tokens: [], refund: 0, concurrency, lease: ask.lease, spend: [], holds: [], hold: 0, early: true });
            },
    };
  }

  #settle(settlement: Settlement): void {
    let result: void | Promise<void>;
    try {
      result = this.#store.settle(settlement);
    } catch (error) {
      return this.#settleFailed(settlement, error);
    }
    if (!(result instanceof Promise)) return;
    const pending: Promise<void> = result.then(
      () => {
        this.#pending.delete(pending);
      },
      (error: unknown) => {
        this.#pending.delete(pending);
        this.#settleFailed(settlement, error);
      },
    );
    this.#pending.add(pending);
  }

  #settleFailed(settlement: Settlement, error: unknown): void {
    const failure = error instanceof Error ? error : new Error(String(error));
    if (this.#closed || this.#retry.length >= MAX_RETRY_QUEUE) {
      this.#events.storeError('settle', 'lost', failure);
      this.#lost(settlement);
      return;
    }
    this.#events.storeError('settle', 'retried', failure);
    this.#retry.push(settlement);
    this.#retryTimer ??= setTimeout(() => {
      this.#retryTimer = undefined;
      this.#retrySettlements();
    }, 1000).unref();
  }

  #retrySettlements(): void {
    const queued = this.#retry;
    this.#retry = [];
    for (const settlement of queued) this.#settle(settlement);
  }

  #lost(s: Settlement): void {
    this.#events.notCommitted(s.key, s.used, s.spend[0]?.micros ?? 0);
  }

  /** A lease (in concurrency limits, of holds on budgets) renewed until its request ends. */
  #hold(renewal: Renewal): void {
    this.#held.set(renewal.lease, renewal);
    if (this.#renewTimer === undefined) {
      const every = Math.max(50, Math.floor(this.#leaseMs / 3));
      this.#renewTimer = setInterval(() => this.#renew(), every).unref();
    }
  }

  #release(lease: string): void {
    this.#held.delete(lease);
    if (this.#held.size === 0 && this.#renewTimer !== undefined) {
      clearInterval(this.#renewTimer);
      this.#renewTimer = undefined;
    }
  }

  #renew(): void {
    if (this.#held.size === 0) return;
    const renewals = [...this.#held.values()];
    const report = (error: unknown) => this.#events.storeError('renew', 'retried', error instanceof Error ? error : new Error(String(error)));
    try {
      const result = this.#store.renew(renewals, this.#leaseMs);
      if (result instanceof Promise) result.catch(report);
    } catch (error) {
      report(error);
    }
  }

  /**
   * L9: called once nothing is in flight. Settlements still out get until `timeoutMs` (the queue
   * is retried once more); what the store never took is logged with its usage; then the store closes.
   */
  async close(timeoutMs: number): Promise<void> {
    if (this.#renewTimer !== undefined) clearInterval(this.#renewTimer);
    this.#renewTimer = undefined;
    const deadline = this.#now() + timeoutMs;
    while ((this.#pending.size > 0 || this.#retry.length > 0) && this.#now() < deadline) {
      if (this.#retryTimer !== undefined) {
        clearTimeout(this.#retryTimer);
        this.#retryTimer = undefined;
      }
      this.#retrySettlements();
      if (this.#pending.size === 0) break;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.allSettled([...this.#pending]), new Promise((resolve) => (timer = setTimeout(resolve, Math.max(0, deadline - this.#now()))))]);
      clearTimeout(timer);
      if (this.#retry.length > 0) await new Promise((resolve) => setTimeout(resolve, Math.min(200, Math.max(0, deadline - this.#now()))));
    }
    this.#closed = true;
    if (this.#retryTimer !== undefined) clearTimeout(this.#retryTimer);
    for (const settlement of this.#retry) this.#lost(settlement);
    this.#retry = [];
    await this.#store.close();
  }
}

/** A model's entry in a limits map: its own property only (a model named "constructor" is not Object's). */
function own(map: Readonly<Record<string, RateLimits>> | undefined, model: string): RateLimits | undefined {
  return map !== undefined && Object.hasOwn(map, model) ? map[model] : undefined;
}

function smallestCapacity(applied: readonly Applied[]): number {
  let smallest = Infinity;
  for (const a of applied) smallest = Math.min(smallest, a.bucket.capacity);
  return smallest;
}

function scopeWords(scope: Scope, key: string, model: string): string {
  switch (scope) {
    case 'global':
      return 'this gateway';
    case 'model':
      return `model "${model}"`;
    case 'key':
      return `API key "${key}"`;
    case 'key_model':
      return `API key "${key}" on model "${model}"`;
  }
}

/** OpenAI's x-ratelimit-* headers, from the tightest bucket of each kind. */
function rateHeaders(requests: Applied[], tokens: Applied[], requestReadings: readonly BucketReading[], tokenReadings: readonly BucketReading[]): Record<string, string> {
  const headers: Record<string, string> = {};
  const tightest = (applied: Applied[], readings: readonly BucketReading[], kind: string) => {
    let best = -1;
    for (let i = 0; i < readings.length; i++) if (best === -1 || readings[i]!.remaining < readings[best]!.remaining) best = i;
    if (best === -1) return;
    headers[`x-ratelimit-limit-${kind}`] = String(applied[best]!.bucket.capacity);
    headers[`x-ratelimit-remaining-${kind}`] = String(readings[best]!.remaining);
    headers[`x-ratelimit-reset-${kind}`] = formatDuration(readings[best]!.fullInMs);
  };
  tightest(requests, requestReadings, 'requests');
  tightest(tokens, tokenReadings, 'tokens');
  return headers;
}

/** As OpenAI writes durations: "20ms", "1s", "6m0s", "1h2m3s" (fractions of a second kept to ms). */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms`;
  const totalSeconds = ms / 1000;
  const h = Math.floor(totalSeconds / 3600);
  const m = Math.floor((totalSeconds % 3600) / 60);
  const sec = Math.round((totalSeconds % 60) * 1000) / 1000;
  return `${h > 0 ? `${h}h` : ''}${h > 0 || m > 0 ? `${m}m` : ''}${sec}s`;
}
