// The clocks the lifecycle runs on: the system clock (real timers that never keep the process
// alive) and the ManualClock the unit tests drive.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { systemClock, systemRandom, Timers, type Clock, type TimerHandle } from '../../src/lifecycle/clock.ts';
import { ManualClock } from '../support/manual-clock.ts';

describe('ManualClock', () => {
  test('timers fire in the order they are due, not the order they were set', () => {
    const clock = new ManualClock();
    const fired: string[] = [];
    clock.after(30, () => fired.push(`c@${clock.now()}`));
    clock.after(10, () => fired.push(`a@${clock.now()}`));
    clock.every(20, () => fired.push(`b@${clock.now()}`));
    clock.after(25, () => fired.push(`d@${clock.now()}`));
    clock.advance(45);
    assert.deepEqual(fired, ['a@10', 'b@20', 'd@25', 'c@30', 'b@40']);
  });
});

describe('Timers: the timers of a process, cancelled together at its exit', () => {
  /** A ManualClock that counts the timers it holds that are not cancelled and not yet fired. */
  function counting(): { clock: ManualClock & Clock; live: () => number } {
    const clock = new ManualClock();
    let live = 0;
    const wrap = (set: (ms: number, fn: () => void) => TimerHandle, once: boolean) => (ms: number, fn: () => void): TimerHandle => {
      live++;
      let done = false;
      const handle = set(ms, () => {
        if (once && !done) {
          done = true;
          live--;
        }
        fn();
      });
      return {
        cancel: () => {
          if (!done) live--;
          done = true;
          handle.cancel();
        },
      };
    };
    const after = clock.after.bind(clock);
    const every = clock.every.bind(clock);
    clock.after = wrap(after, true);
    clock.every = wrap(every, false);
    return { clock, live: () => live };
  }

  test('after() runs once and leaves the set; every() repeats; cancelAll() stops what is left, once', () => {
    const { clock, live } = counting();
    const timers = new Timers(clock);
    const fired: string[] = [];
    timers.after(10, () => fired.push(`once@${clock.now()}`));
    timers.after(100, () => fired.push('late'));
    timers.every(20, () => fired.push(`every@${clock.now()}`));
    assert.equal(live(), 3);
    clock.advance(45);
    assert.deepEqual(fired, ['once@10', 'every@20', 'every@40']);
    assert.equal(live(), 2, 'the fired one-shot is gone; the late one and the repeating one remain');
    timers.cancelAll();
    assert.equal(live(), 0);
    clock.advance(1000);
    assert.deepEqual(fired, ['once@10', 'every@20', 'every@40'], 'nothing fires after cancelAll');
    timers.cancelAll();
    assert.equal(live(), 0, 'a second cancelAll cancels nothing twice');
  });

  test('a one-shot that fired is not cancelled again by cancelAll', () => {
    const clock = new ManualClock();
    const timers = new Timers(clock);
    let cancels = 0;
    const after = clock.after.bind(clock);
    clock.after = (ms, fn) => {
      const handle = after(ms, fn);
      return { cancel: () => (cancels++, handle.cancel()) };
    };
    timers.after(1, () => {});
    clock.advance(1);
    timers.cancelAll();
    assert.equal(cancels, 0);
  });
});

describe('systemClock', () => {
  test('now() is monotonic milliseconds', () => {
    const first = systemClock.now();
    assert.equal(typeof first, 'number');
    assert.ok(first >= 0);
    let last = first;
    for (let i = 0; i < 1000; i++) {
      const next = systemClock.now();
      assert.ok(next >= last);
      last = next;
    }
  });

  test('after() runs once; a cancelled after() or every() never runs; every() repeats until cancelled', async () => {
    const fired: string[] = [];
    const cancelledOnce = systemClock.after(1, () => fired.push('cancelled after'));
    const cancelledEvery = systemClock.every(1, () => fired.push('cancelled every'));
    cancelledOnce.cancel();
    cancelledEvery.cancel();
    let ticks = 0;
    await new Promise<void>((resolve) => {
      const tick = systemClock.every(2, () => {
        if (++ticks === 3) {
          tick.cancel();
          resolve();
        }
      });
    });
    await new Promise<void>((resolve) => systemClock.after(5, () => resolve()));
    assert.equal(ticks, 3);
    assert.deepEqual(fired, []);
  });

  test('its timers do not keep the process alive (a drain timer must not delay an exit)', () => {
    const clockUrl = new URL('../../src/lifecycle/clock.ts', import.meta.url).href;
    const script = `import { systemClock } from ${JSON.stringify(clockUrl)};
      systemClock.after(60_000, () => process.exit(3));
      systemClock.every(60_000, () => process.exit(4));`;
    const started = Date.now();
    const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { timeout: 10_000 });
    assert.equal(child.status, 0, `exit ${child.status} ${child.signal ?? ''} after ${Date.now() - started} ms ${String(child.stderr)}`);
  });

  test('systemRandom gives numbers in [0, 1)', () => {
    const values = Array.from({ length: 200 }, () => systemRandom());
    for (const v of values) assert.ok(typeof v === 'number' && v >= 0 && v < 1, String(v));
    assert.ok(new Set(values).size > 100, 'not a constant');
  });
});
