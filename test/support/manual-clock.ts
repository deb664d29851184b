// A clock for tests: time moves only when `advance` is called (src/lifecycle/clock.ts's Clock).
import type { Clock, TimerHandle } from '../../src/lifecycle/clock.ts';

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
