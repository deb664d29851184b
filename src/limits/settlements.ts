// Settlements handed to the store: those it could not take are retried a second later (on the
// injected clock), and at the exit (L9) waited for up to a deadline; what it never took is reported
// with its usage.
import type { Clock, TimerHandle } from '../lifecycle/clock.ts';
import type { LimitEvents } from './limit-policy.ts';
import type { LimitStore, Settlement } from './store.ts';

/** Settlements waiting to be retried beyond this are reported as lost at once. */
const MAX_RETRY_QUEUE = 10_000;
/** How long a refused settlement waits before it is tried again. */
const RETRY_AFTER_MS = 1000;
/** At the exit, the pause before the queue is tried again when the store refused it. */
const CLOSE_RETRY_PAUSE_MS = 200;

export class Settlements {
  readonly #store: LimitStore;
  readonly #events: LimitEvents;
  readonly #clock: Clock;
  readonly #pending = new Set<Promise<void>>();
  #retry: { settlement: Settlement; done: (() => void) | undefined }[] = [];
  #retryTimer: TimerHandle | undefined;
  readonly #retryTick = (): void => {
    this.#retryTimer = undefined;
    this.#retryAll();
  };
  #closed = false;

  constructor(store: LimitStore, events: LimitEvents, clock: Clock) {
    this.#store = store;
    this.#events = events;
    this.#clock = clock;
  }

  /** Settlements in progress or waiting to be retried. */
  get unsettled(): number {
    return this.#pending.size + this.#retry.length;
  }

  /** `done`: told once the store has taken it (the budget alerts then read the totals). */
  settle(settlement: Settlement, done?: () => void): void {
    let result: void | Promise<void>;
    try {
      result = this.#store.settle(settlement);
    } catch (error) {
      return this.#failed(settlement, error, done);
    }
    if (!(result instanceof Promise)) return done?.();
    const pending: Promise<void> = result.then(
      () => {
        this.#pending.delete(pending);
        done?.();
      },
      (error: unknown) => {
        this.#pending.delete(pending);
        this.#failed(settlement, error, done);
      },
    );
    this.#pending.add(pending);
  }

  #failed(settlement: Settlement, error: unknown, done: (() => void) | undefined): void {
    const failure = error instanceof Error ? error : new Error(String(error));
    if (this.#closed || this.#retry.length >= MAX_RETRY_QUEUE) {
      this.#events.storeError('settle', 'lost', failure);
      this.#lost(settlement);
      return;
    }
    this.#events.storeError('settle', 'retried', failure);
    this.#retry.push({ settlement, done });
    this.#retryTimer ??= this.#clock.after(RETRY_AFTER_MS, this.#retryTick);
  }

  #retryAll(): void {
    const queued = this.#retry;
    this.#retry = [];
    for (const { settlement, done } of queued) this.settle(settlement, done);
  }

  #lost(s: Settlement): void {
    this.#events.notCommitted(s.key, s.used, s.spend[0]?.micros ?? 0);
  }

  /**
   * L9: settlements still out get until `timeoutMs` (the queue is retried once more); what the
   * store never took is reported with its usage, and any settlement after this is too.
   */
  async close(timeoutMs: number): Promise<void> {
    const clock = this.#clock;
    const deadline = clock.now() + timeoutMs;
    while ((this.#pending.size > 0 || this.#retry.length > 0) && clock.now() < deadline) {
      this.#retryTimer?.cancel();
      this.#retryTimer = undefined;
      this.#retryAll();
      if (this.#pending.size === 0) break;
      let timer: TimerHandle | undefined;
      await Promise.race([Promise.allSettled([...this.#pending]), new Promise<void>((resolve) => (timer = clock.after(Math.max(0, deadline - clock.now()), resolve)))]);
      timer?.cancel();
      if (this.#retry.length > 0) await new Promise<void>((resolve) => clock.after(Math.min(CLOSE_RETRY_PAUSE_MS, Math.max(0, deadline - clock.now())), resolve));
    }
    this.#closed = true;
    this.#retryTimer?.cancel();
    this.#retryTimer = undefined;
    for (const { settlement } of this.#retry) this.#lost(settlement);
    this.#retry = [];
  }
}
