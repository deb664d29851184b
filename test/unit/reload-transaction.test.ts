// The reload transaction (E6a): every participant prepares, then all commit in order or every one
// prepared aborts in the reverse order; one transaction at a time; the triggers coalesce; a
// worker's settlement may come before its prepare is over.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ReloadRefused, ReloadTransaction, type ConfigChange, type ReloadParticipant } from '../../src/reload/transaction.ts';
import { ReloadTriggers } from '../../src/reload/triggers.ts';
import { RemoteSettlements } from '../../src/reload/remote-settlement.ts';
import { ConfigError } from '../../src/config/load.ts';
import type { Config } from '../../src/config/schema.ts';
import type { Logger } from '../../src/telemetry/logger.ts';

const change = (trigger = 'SIGHUP'): ConfigChange => ({ full: {} as Config, own: {} as Config, trigger });

/** A participant that writes what happens to it into `journal`. */
function part(name: string, journal: string[], behaviour: { refuse?: string; throwAtCommit?: boolean; prepareGate?: Promise<void> } = {}): ReloadParticipant {
  return {
    name,
    prepare: async () => {
      journal.push(`${name}:prepare`);
      await behaviour.prepareGate;
      if (behaviour.refuse) throw new ReloadRefused(behaviour.refuse, { part: name });
      return {
        commit: () => {
          journal.push(`${name}:commit`);
          if (behaviour.throwAtCommit) throw new Error(`${name} broke`);
        },
        abort: () => {
          journal.push(`${name}:abort`);
        },
      };
    },
  };
}

const options = (journal: string[], draining = () => false) => ({
  refuseCommit: () => (draining() ? 'draining' : undefined),
  stepFailed: (participant: string, step: string) => journal.push(`failed:${participant}:${step}`),
});

test('every part prepares in order, then every part commits in the same order', async () => {
  const journal: string[] = [];
  const transaction = new ReloadTransaction([part('routing', journal), part('settings', journal), part('listeners', journal), part('workers', journal)], options(journal));
  assert.deepEqual(await transaction.run(change()), { ok: true });
  assert.deepEqual(journal, ['routing:prepare', 'settings:prepare', 'listeners:prepare', 'workers:prepare', 'routing:commit', 'settings:commit', 'listeners:commit', 'workers:commit']);
});

test('a part that refuses: the parts prepared before it abort in the reverse order, and nothing commits', async () => {
  const journal: string[] = [];
  const transaction = new ReloadTransaction([part('routing', journal), part('listeners', journal), part('workers', journal, { refuse: 'worker 1: no' }), part('last', journal)], options(journal));
  const outcome = await transaction.run(change());
  assert.deepEqual(outcome, { ok: false, reason: 'worker 1: no', fields: { part: 'workers' } });
  assert.deepEqual(journal, ['routing:prepare', 'listeners:prepare', 'workers:prepare', 'listeners:abort', 'routing:abort']);
});

test('a process that began draining after the prepare aborts every part instead of committing', async () => {
  const journal: string[] = [];
  let draining = false;
  const transaction = new ReloadTransaction([part('routing', journal), part('listeners', journal)], options(journal, () => draining));
  const prepared = await transaction.prepare(change());
  draining = true;
  assert.deepEqual(prepared.commit(), { ok: false, reason: 'draining', fields: {} });
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(journal, ['routing:prepare', 'listeners:prepare', 'listeners:abort', 'routing:abort']);
  assert.throws(() => prepared.commit(), /already settled/);
});

test('a commit that throws is reported; the other parts still switch, and the reload counts as failed', async () => {
  const journal: string[] = [];
  const transaction = new ReloadTransaction([part('routing', journal, { throwAtCommit: true }), part('listeners', journal)], options(journal));
  const outcome = await transaction.run(change());
  assert.equal(outcome.ok, false);
  assert.match((outcome as { reason: string }).reason, /routing/);
  assert.deepEqual(journal, ['routing:prepare', 'listeners:prepare', 'routing:commit', 'failed:routing:commit', 'listeners:commit']);
});

test('one transaction at a time: a second prepare waits until the first is settled', async () => {
  const journal: string[] = [];
  const transaction = new ReloadTransaction([part('only', journal)], options(journal));
  const first = await transaction.prepare(change('first'));
  let secondPrepared = false;
  const second = transaction.prepare(change('second')).then((p) => {
    secondPrepared = true;
    return p;
  });
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(secondPrepared, false, 'the second waited for the first');
  assert.deepEqual(journal, ['only:prepare']);
  await first.abort();
  (await second).commit();
  assert.equal(secondPrepared, true);
  assert.deepEqual(journal, ['only:prepare', 'only:abort', 'only:prepare', 'only:commit']);
  // A failed prepare gives the turn back too.
  const failing = new ReloadTransaction([part('bad', journal, { refuse: 'no' })], options(journal));
  await assert.rejects(failing.prepare(change()), /no/);
  await assert.rejects(failing.prepare(change()), /no/);
});

const silent = { warn() {}, error() {}, info() {} } as unknown as Logger;

test('triggers that come during a reload become one more reload; a file change is not hidden by a later etcd change', async () => {
  const applied: string[] = [];
  const gates: (() => void)[] = [];
  const triggers = new ReloadTriggers({
    load: (trigger) => ({ trigger }) as unknown as Config,
    apply: (next) => {
      applied.push((next as unknown as { trigger: string }).trigger);
      return new Promise<boolean>((resolve) => gates.push(() => resolve(true)));
    },
    rejected: () => assert.fail('nothing is rejected'),
    applied: () => {},
    draining: () => false,
    log: silent,
  });
  triggers.request('SIGHUP');
  triggers.request('file');
  triggers.request('etcd');
  triggers.request('etcd');
  assert.deepEqual(applied, ['SIGHUP']);
  gates.shift()!();
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(applied, ['SIGHUP', 'file'], 'one more reload, the file change kept over the etcd ones after it');
  gates.shift()!();
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(applied, ['SIGHUP', 'file']);
});

test('a config that is not valid is rejected and counted; draining, nothing is read', () => {
  const rejected: string[] = [];
  let loads = 0;
  let draining = false;
  const triggers = new ReloadTriggers({
    load: () => {
      loads++;
      throw new ConfigError('bad.yaml', [{ path: 'models.0', message: 'bad' }]);
    },
    apply: () => assert.fail('not applied'),
    rejected: (trigger, reason) => rejected.push(`${trigger}: ${reason}`),
    applied: () => {},
    draining: () => draining,
    log: silent,
  });
  triggers.request('SIGHUP');
  assert.deepEqual(rejected, ['SIGHUP: models.0: bad']);
  draining = true;
  triggers.request('SIGHUP');
  assert.equal(loads, 1);
});

test("a worker's settlement that comes before its prepare is over is applied once it is; one for a failed prepare is forgotten", () => {
  const settled: string[] = [];
  const settlements = new RemoteSettlements<string>((prepared, settlement) => settled.push(`${prepared}:${settlement}`));
  settlements.prepared(1, 'one');
  assert.deepEqual(settled, []);
  settlements.settled(1, 'commit');
  settlements.settled(2, 'abort');
  assert.deepEqual(settled, ['one:commit']);
  settlements.prepared(2, 'two');
  assert.deepEqual(settled, ['one:commit', 'two:abort']);
  settlements.settled(3, 'commit');
  settlements.failed(3);
  settlements.prepared(3, 'three');
  assert.deepEqual(settled, ['one:commit', 'two:abort'], 'the word on a failed prepare does not settle a later one of the same id');
  settlements.settled(1, 'commit');
  assert.deepEqual(settled, ['one:commit', 'two:abort'], 'a settled reload is not settled twice');
});
