// Budget alerts: a JSON POST to the operator's webhook when a key's or a team's budget crosses a
// threshold (50 %, 80 %, 100 % by default). Off the request's path: `observe` only compares a
// reading with the thresholds; the claim (each crossing sent once, across the fleet when the claims
// are the ledger's store) and the POST, retried with back-off, run behind it. A budget's crossings
// go one after another (ascending), so that its receiver hears of 50 % before 80 %.
import { createHmac } from 'node:crypto';
import { request } from 'undici';
import { redactUrlsIn } from '../config/redact-url.ts';

export interface BudgetAlertSettings {
  /** The webhook (http or https). Never told to an event: it may carry a credential. */
  readonly url: string;
  /** Percents of a budget, ascending, e.g. [50, 80, 100]. */
  readonly thresholds: readonly number[];
  /** Sent with each POST (an Authorization header for the receiver, say). */
  readonly headers?: Readonly<Record<string, string>>;
  /** When set, each POST carries x-sluice-signature: sha256=<hex HMAC-SHA256 of the body>. */
  readonly secret?: string;
  /** One POST's timeout. */
  readonly timeoutMs: number;
  /** Attempts of one alert before it is given up. */
  readonly maxAttempts: number;
}

/** Who decides that a crossing is sent once: the ledger's store (across the fleet and restarts) or this process's memory. */
export interface AlertClaims {
  /** true the first time `id` is claimed. */
  claim(id: string): Promise<boolean>;
}

/** Claims kept in this process's memory: a crossing is sent once by the alerts sharing them. */
export function memoryClaims(): AlertClaims {
  const claimed = new Set<string>();
  return {
    claim(id) {
      if (claimed.has(id)) return Promise.resolve(false);
      claimed.add(id);
      return Promise.resolve(true);
    },
  };
}

/** A budget's total, read after a request's spend was settled on it. */
export interface BudgetReading {
  readonly scope: 'key' | 'team';
  readonly name: string;
  /** The budget's period id (the store's budget id): `${id}:${YYYY-MM}` or `${id}:${YYYY-MM-DD}`. */
  readonly periodId: string;
  readonly period: 'day' | 'month';
  readonly budgetMicros: number;
  readonly spentMicros: number;
  /** Epoch ms. */
  readonly resetAt: number;
}

/** What an event says of an alert: never the URL, the headers or the secret. */
export interface BudgetAlertSubject {
  readonly scope: string;
  readonly name: string;
  readonly threshold: number;
}

export interface BudgetAlertEvents {
  sent(alert: BudgetAlertSubject): void;
  /** `final`: given up (or a claim that failed: attempts 0, tried again on the budget's next reading). */
  failed(alert: BudgetAlertSubject, error: string, attempts: number, final: boolean): void;
}

/** One POST: resolves with the response's status, rejects on a network error or its timeout. */
export type AlertSender = (url: string, init: { headers: Record<string, string>; body: string; timeoutMs: number }) => Promise<number>;

export interface BudgetAlertOptions {
  /** Wall-clock ms: the alert's `at`. */
  readonly now?: () => number;
  /** The back-off's wait (tests make it instant). */
  readonly sleep?: (ms: number) => Promise<void>;
  readonly send?: AlertSender;
}

/** The first back-off, doubled after each failure up to the cap. */
const FIRST_BACKOFF_MS = 1000;
const MAX_BACKOFF_MS = 60_000;
/** A reading of a period over for longer than this is not alerted on (and its crossings are forgotten). */
const LATE_MS = 60 * 60_000;
/** How often the crossings of ended periods are forgotten, at most. */
const PRUNE_EVERY_MS = 60_000;
/** An error's text in an event, at most. */
const MAX_ERROR_CHARS = 300;
/** A receiver's answer read (and dropped) at most. */
const MAX_ANSWER_BYTES = 64 * 1024;

type State = 'queued' | 'claiming' | 'sending' | 'waiting' | 'done';

interface Alert {
  readonly id: string;
  readonly periodId: string;
  readonly subject: BudgetAlertSubject;
  readonly headers: Record<string, string>;
  readonly body: string;
  state: State;
  attempts: number;
}

/** A budget period's crossings claimed or in flight in this process. */
interface Taken {
  readonly resetAt: number;
  readonly thresholds: Set<number>;
}

type Outcome = { ok: true } | { ok: false; retry: boolean; error: string };

export class BudgetAlerts {
  readonly #settings: BudgetAlertSettings;
  readonly #thresholds: readonly number[];
  readonly #claims: AlertClaims;
  readonly #events: BudgetAlertEvents;
  readonly #now: () => number;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #send: AlertSender;
  /** Texts an error must never show: the secret and the headers' values. */
  readonly #secrets: readonly string[];
  /** In front of the claims: a hot budget asks them once per crossing, not once per request. */
  readonly #taken = new Map<string, Taken>();
  #nextPrune = 0;
  /** Each budget's alerts, one after another: the tail of its chain. */
  readonly #lanes = new Map<string, Promise<void>>();
  readonly #active = new Set<Alert>();
  /** Resolved at close: the alerts waiting for a retry try once more at once. */
  readonly #closing: PromiseWithResolvers<void> = Promise.withResolvers<void>();
  #isClosing = false;
  #closed = false;

  constructor(settings: BudgetAlertSettings, claims: AlertClaims, events: BudgetAlertEvents, options: BudgetAlertOptions = {}) {
    this.#settings = settings;
    this.#thresholds = [...new Set(settings.thresholds)].filter((t) => t > 0).sort((a, b) => a - b);
    this.#claims = claims;
    this.#events = events;
    this.#now = options.now ?? Date.now;
    this.#sleep = options.sleep ?? sleep;
    this.#send = options.send ?? post;
    this.#secrets = [settings.secret ?? '', ...Object.values(settings.headers ?? {})].filter((s) => s.length >= 8);
  }

  /** The alerts being claimed or sent, and those waiting to be retried. */
  get pending(): number {
    return this.#active.size;
  }

  /**
   * Synchronous, cheap, never throws: the thresholds this reading has crossed are each claimed
   * (`${periodId}:${threshold}`) and, if this is the first claim, sent. Readings for the same budget
   * may come in any order and repeatedly. A reading after `close` is not alerted on (nothing is
   * claimed: the fleet's next reading will be).
   */
  observe(reading: BudgetReading): void {
    if (this.#isClosing) return;
    try {
      this.#observe(reading);
    } catch {
      // A malformed reading (a date out of range): nothing to alert on.
    }
  }

  #observe(r: BudgetReading): void {
    if (!(r.budgetMicros > 0) || !Number.isFinite(r.spentMicros) || !Number.isFinite(r.resetAt)) return;
    let taken = this.#taken.get(r.periodId);
    const crossed: number[] = [];
    for (const threshold of this.#thresholds) {
      if (r.spentMicros * 100 < threshold * r.budgetMicros) break;
      if (!taken?.thresholds.has(threshold)) crossed.push(threshold);
    }
    // The common case, below the next threshold or past it already: no clock read, nothing built.
    if (crossed.length === 0) return;
    const now = this.#now();
    this.#prune(now);
    if (now > r.resetAt + LATE_MS) return;
    if (taken === undefined) {
      taken = { resetAt: r.resetAt, thresholds: new Set() };
      this.#taken.set(r.periodId, taken);
    }
    for (const threshold of crossed) {
      const alert = this.#alert(r, threshold, now);
      taken.thresholds.add(threshold);
      this.#enqueue(alert);
    }
  }

  /** Forgets the crossings of periods over for a while (a reading of those is not alerted on). */
  #prune(now: number): void {
    if (now < this.#nextPrune) return;
    this.#nextPrune = now + PRUNE_EVERY_MS;
    for (const [periodId, taken] of this.#taken) if (now > taken.resetAt + LATE_MS) this.#taken.delete(periodId);
  }

  #alert(r: BudgetReading, threshold: number, now: number): Alert {
    const id = `${r.periodId}:${threshold}`;
    const body = JSON.stringify({
      type: 'budget.threshold_crossed',
      id,
      scope: r.scope,
      name: r.name,
      period: r.period,
      period_resets_at: new Date(r.resetAt).toISOString(),
      threshold_percent: threshold,
      budget_usd: r.budgetMicros / 1e6,
      spent_usd: r.spentMicros / 1e6,
      left_usd: Math.max(0, r.budgetMicros - r.spentMicros) / 1e6,
      at: new Date(now).toISOString(),
    });
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(this.#settings.headers ?? {})) headers[name.toLowerCase()] = value;
    headers['content-type'] = 'application/json';
    headers['x-sluice-alert-id'] = id;
    if (this.#settings.secret) headers['x-sluice-signature'] = `sha256=${createHmac('sha256', this.#settings.secret).update(body).digest('hex')}`;
    return { id, periodId: r.periodId, subject: { scope: r.scope, name: r.name, threshold }, headers, body, state: 'queued', attempts: 0 };
  }

  /** After the budget's alerts before it: claimed, then sent. */
  #enqueue(alert: Alert): void {
    this.#active.add(alert);
    const { periodId } = alert;
    const lane = (this.#lanes.get(periodId) ?? Promise.resolve()).then(() => this.#run(alert));
    this.#lanes.set(periodId, lane);
    void lane.then(() => {
      if (this.#lanes.get(periodId) === lane) this.#lanes.delete(periodId);
    });
  }

  /** Never rejects. */
  async #run(alert: Alert): Promise<void> {
    if (alert.state === 'done') return;
    alert.state = 'claiming';
    let claimed: boolean;
    try {
      claimed = await this.#claims.claim(alert.id);
    } catch (error) {
      // Not claimed: the budget's next reading asks again (a crossing neither lost nor sent twice).
      this.#taken.get(alert.periodId)?.thresholds.delete(alert.subject.threshold);
      if (!this.#closed) this.#tell(() => this.#events.failed(alert.subject, `claiming it failed: ${this.#text(error)}`, 0, false));
      return this.#finish(alert);
    }
    if (!claimed) return this.#finish(alert);
    // Claimed after the exit's deadline: ours to send, and never sent.
    if (this.#closed) {
      this.#finish(alert);
      return this.#tell(() => this.#events.failed(alert.subject, 'the gateway exited before it was sent', 0, true));
    }
    await this.#deliver(alert);
  }

  async #deliver(alert: Alert): Promise<void> {
    const max = Math.max(1, this.#settings.maxAttempts);
    for (let attempt = 1; ; attempt++) {
      alert.state = 'sending';
      alert.attempts = attempt;
      const outcome = await this.#attempt(alert);
      // The exit's deadline passed during the attempt: reported by close.
      if (isDone(alert)) return;
      if (outcome.ok) {
        this.#finish(alert);
        return this.#tell(() => this.#events.sent(alert.subject));
      }
      const final = !outcome.retry || attempt >= max || this.#isClosing;
      this.#tell(() => this.#events.failed(alert.subject, outcome.error, attempt, final));
      if (final) return this.#finish(alert);
      alert.state = 'waiting';
      await Promise.race([this.#sleep(backoffMs(attempt)), this.#closing.promise]);
      if (isDone(alert)) return;
    }
  }

  async #attempt(alert: Alert): Promise<Outcome> {
    const timeoutMs = this.#settings.timeoutMs;
    let status: number;
    try {
      status = await this.#send(this.#settings.url, { headers: alert.headers, body: alert.body, timeoutMs });
    } catch (error) {
      const timedOut = error instanceof Error && error.name === 'TimeoutError';
      return { ok: false, retry: true, error: timedOut ? `timed out after ${timeoutMs} ms` : this.#text(error) };
    }
    if (status >= 200 && status < 300) return { ok: true };
    if (status >= 300 && status < 400) return { ok: false, retry: false, error: `HTTP ${status} (a redirect, not followed)` };
    return { ok: false, retry: status === 408 || status === 429 || status >= 500, error: `HTTP ${status}` };
  }

  #finish(alert: Alert): void {
    alert.state = 'done';
    this.#active.delete(alert);
  }

  /** An error as an event tells it: URLs redacted, never the secret or a header's value. */
  #text(error: unknown): string {
    let text = redactUrlsIn(error instanceof Error ? error.message || error.name : String(error));
    for (const secret of this.#secrets) text = text.replaceAll(secret, '[redacted]');
    return text.length > MAX_ERROR_CHARS ? `${text.slice(0, MAX_ERROR_CHARS)}…` : text;
  }

  /** An event handler that throws does not stop the alerts. */
  #tell(event: () => void): void {
    try {
      event();
    } catch {
      // The events are the logger's: nothing else to tell.
    }
  }

  /**
   * Exit (L9): readings are no longer alerted on; the alerts waiting for a retry try once more at
   * once, and a failure is then final. Waits up to `timeoutMs` for the alerts in progress; those
   * still being sent then are reported `final` (one still being claimed is, if the claim was ours).
   */
  async close(timeoutMs: number): Promise<void> {
    if (!this.#isClosing) {
      this.#isClosing = true;
      this.#closing.resolve();
    }
    const lanes = [...this.#lanes.values()];
    if (lanes.length > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.allSettled(lanes), new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(0, timeoutMs))))]);
      clearTimeout(timer);
    }
    this.#closed = true;
    for (const alert of [...this.#active]) {
      const { state, attempts } = alert;
      if (state === 'claiming') continue;
      this.#finish(alert);
      if (state === 'sending' || state === 'waiting') this.#tell(() => this.#events.failed(alert.subject, 'the gateway exited before it was sent', attempts, true));
    }
  }
}

/** Finished, or given up by close while it was awaited (a read TypeScript does not narrow away). */
function isDone(alert: Alert): boolean {
  return alert.state === 'done';
}

/** The wait after the `attempt`th failure: from 1 s, doubling, at most 60 s, each between half of it and all of it. */
export function backoffMs(attempt: number): number {
  const base = Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** Math.min(attempt - 1, 30));
  return Math.round(base / 2 + (Math.random() * base) / 2);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

/** The default sender: one POST within its timeout (connecting, the answer's head and body), never following a redirect. */
async function post(url: string, init: { headers: Record<string, string>; body: string; timeoutMs: number }): Promise<number> {
  const signal = AbortSignal.timeout(init.timeoutMs);
  const answer = await request(url, { method: 'POST', headers: init.headers, body: init.body, signal });
  // The status is what counts; the body is read only to free the connection.
  await answer.body.dump({ limit: MAX_ANSWER_BYTES, signal }).catch(() => undefined);
  return answer.statusCode;
}
