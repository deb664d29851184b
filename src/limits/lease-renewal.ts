// The leases of the requests in progress (their places in `concurrent` limits, their holds on
// budgets), renewed every lease/3 on the injected clock while any is held: a lease expires only
// when the process holding it is gone.
import type { Clock, TimerHandle } from '../lifecycle/clock.ts';
import type { LimitEvents } from './limit-policy.ts';
import type { LimitStore, Renewal } from './store.ts';

export class LeaseRenewal {
  readonly #store: LimitStore;
  readonly #events: LimitEvents;
  readonly #clock: Clock;
  /** Leases held by requests in progress, by lease id. */
  readonly #held = new Map<string, Renewal>();
  /** One function for every timer started, not a closure each. */
  readonly #tick = (): void => this.#renew();
  #timer: TimerHandle | undefined;
  /** How long a lease lasts, as the latest request asked it (`limits.lease_secs`). */
  leaseMs = 30_000;

  constructor(store: LimitStore, events: LimitEvents, clock: Clock) {
    this.#store = store;
    this.#events = events;
    this.#clock = clock;
  }

  /** A lease (in concurrency limits, of holds on budgets) renewed until its request ends. */
  hold(renewal: Renewal): void {
    this.#held.set(renewal.lease, renewal);
    if (this.#timer === undefined) this.#timer = this.#clock.every(Math.max(50, Math.floor(this.leaseMs / 3)), this.#tick);
  }

  release(lease: string): void {
    this.#held.delete(lease);
    if (this.#held.size === 0) this.stop();
  }

  /** No more renewals (the exit): the leases still held expire. */
  stop(): void {
    if (this.#timer === undefined) return;
    this.#timer.cancel();
    this.#timer = undefined;
  }

  #renew(): void {
    if (this.#held.size === 0) return;
    const renewals = [...this.#held.values()];
    const report = (error: unknown) => this.#events.storeError('renew', 'retried', error instanceof Error ? error : new Error(String(error)));
    try {
      const result = this.#store.renew(renewals, this.leaseMs);
      if (result instanceof Promise) result.catch(report);
    } catch (error) {
      report(error);
    }
  }
}
