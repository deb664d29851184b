// Time and timers are injected into the lifecycle so its tests advance a fake clock instead of
// sleeping (the way Envoy's drain manager takes its TimeSource from the dispatcher); the tests'
// clock is test/support/manual-clock.ts.

export interface TimerHandle {
  cancel(): void;
}

export interface Clock {
  /** Monotonic milliseconds. */
  now(): number;
  /** Runs `fn` once after `ms`; the timer does not keep the process alive. */
  after(ms: number, fn: () => void): TimerHandle;
  /** Runs `fn` every `ms`; the timer does not keep the process alive. */
  every(ms: number, fn: () => void): TimerHandle;
}

export const systemClock: Clock = {
  now: () => performance.now(),
  after(ms, fn) {
    const timer = setTimeout(fn, ms);
    timer.unref();
    return { cancel: () => clearTimeout(timer) };
  },
  every(ms, fn) {
    const timer = setInterval(fn, ms);
    timer.unref();
    return { cancel: () => clearInterval(timer) };
  },
};

/**
 * Timers that end together (a process's, cancelled at its exit): a one-shot timer leaves the set
 * when it fires; `cancelAll` stops the others.
 */
export class Timers {
  readonly #clock: Clock;
  readonly #pending = new Set<TimerHandle>();

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  after(ms: number, fn: () => void): void {
    const timer = this.#clock.after(ms, () => {
      this.#pending.delete(timer);
      fn();
    });
    this.#pending.add(timer);
  }

  every(ms: number, fn: () => void): void {
    this.#pending.add(this.#clock.every(ms, fn));
  }

  cancelAll(): void {
    for (const timer of this.#pending) timer.cancel();
    this.#pending.clear();
  }
}

/** The randomness the drain uses (E1, E2); tests pass their own. */
export const systemRandom = (): number => Math.random();
