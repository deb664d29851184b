// Time and timers are injected into the lifecycle so its tests advance a fake clock instead of
// sleeping (the way Envoy's drain manager takes its TimeSource from the dispatcher).

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

/** A clock for tests: time moves only when `advance` is called. */
export class ManualClock implements Clock {
  #now = 0;
  #timers: { at: number; fn: () => void; every: number; cancelled: boolean }[] = [];

  now(): number {
    return this.#now;
  }

  after(ms: number, fn: () => void): TimerHandle {
    return this.#add(ms, fn, 0);
  }

  every(ms: number, fn: () => void): TimerHandle {
    return this.#add(ms, fn, ms);
  }

  /** Moves time forward, firing due timers in order. */
  advance(ms: number): void {
    const target = this.#now + ms;
    for (;;) {
      const due = this.#timers.filter((t) => !t.cancelled && t.at <= target).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.#now = due.at;
      if (due.every > 0) due.at += due.every;
      else due.cancelled = true;
      due.fn();
    }
    this.#now = target;
    this.#timers = this.#timers.filter((t) => !t.cancelled);
  }

  #add(ms: number, fn: () => void, every: number): TimerHandle {
    const timer = { at: this.#now + Math.max(0, ms), fn, every, cancelled: false };
    this.#timers.push(timer);
    return { cancel: () => (timer.cancelled = true) };
  }
}

/** The randomness the drain uses (E1, E2); tests pass their own. */
export const systemRandom = (): number => Math.random();
