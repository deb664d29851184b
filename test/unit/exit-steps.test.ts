// L9: the exit's steps and their order (lifecycle/exit-steps.ts), which the composition root runs
// and `sluice plan` counts: the order pinned, as Fastify pins its close hooks'.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { EXIT_STEPS, ExitSequence, exitBoundMs, exitStep, type ExitStepName } from '../../src/lifecycle/exit-steps.ts';

function deferred(): { promise: Promise<void>; resolve: () => void; reject: (error: Error) => void } {
  let resolve!: () => void;
  let reject!: (error: Error) => void;
  const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('the exit steps (L9)', () => {
  test('the order: everything that flushes side by side, then the workers, then the logs, last', () => {
    const sequence = new ExitSequence();
    for (const step of EXIT_STEPS) sequence.set(step.name, () => {});
    assert.deepEqual(sequence.stages(), [['upstream_pools', 'snapshot_write', 'usage_commit', 'ledger_flush', 'tracing_flush', 'status_page'], ['workers'], ['logs']]);
  });

  test('a stage starts once every step of the one before has settled, a failed one too; each step is told whether the end is forced', async () => {
    const events: string[] = [];
    const pending = new Map<ExitStepName, ReturnType<typeof deferred>>();
    const sequence = new ExitSequence();
    for (const step of EXIT_STEPS) {
      const d = deferred();
      pending.set(step.name, d);
      sequence.set(step.name, (forced) => {
        events.push(`${step.name} started${forced ? ' (forced)' : ''}`);
        return d.promise.then(() => void events.push(`${step.name} done`));
      });
    }
    const run = sequence.run(true);
    await tick();
    assert.deepEqual(events, ['upstream_pools started (forced)', 'snapshot_write started (forced)', 'usage_commit started (forced)', 'ledger_flush started (forced)', 'tracing_flush started (forced)', 'status_page started (forced)']);
    pending.get('status_page')!.resolve();
    pending.get('upstream_pools')!.resolve();
    pending.get('snapshot_write')!.reject(new Error('disk full'));
    pending.get('usage_commit')!.resolve();
    pending.get('ledger_flush')!.resolve();
    await tick();
    assert.ok(!events.includes('workers started (forced)'), 'the tracing flush has not settled yet');
    pending.get('tracing_flush')!.resolve();
    await tick();
    assert.equal(events.at(-1), 'workers started (forced)');
    pending.get('workers')!.resolve();
    await tick();
    assert.equal(events.at(-1), 'logs started (forced)');
    pending.get('logs')!.resolve();
    await run;
    assert.equal(events.at(-1), 'logs done');
  });

  test('a step that throws stops neither its stage nor the next, and is told of; a step given no work is skipped', async () => {
    const ran: string[] = [];
    const failed: string[] = [];
    await new ExitSequence()
      .set('snapshot_write', () => {
        throw new Error('sync failure');
      })
      .set('usage_commit', () => Promise.reject(new Error('redis gone')))
      .set('status_page', () => void ran.push('status_page'))
      .set('logs', () => void ran.push('logs'))
      .run(false, (name, error) => failed.push(`${name}: ${(error as Error).message}`));
    assert.deepEqual(ran, ['status_page', 'logs']);
    assert.deepEqual(failed, ['snapshot_write: sync failure', 'usage_commit: redis gone']);
  });

  test('the bounds the closers are given are the list\'s (what `sluice plan` adds up)', () => {
    assert.equal(exitBoundMs('snapshot_write'), 5000);
    assert.equal(exitBoundMs('usage_commit'), 5000);
    assert.equal(exitBoundMs('status_page'), 1000);
    assert.equal(exitStep('tracing_flush').boundSecs, 'tracing.flush_timeout_ms');
    assert.equal(exitBoundMs('upstream_pools'), 0);
  });
});
