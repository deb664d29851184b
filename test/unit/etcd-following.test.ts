// Whether the gateway follows etcd, and how that is said (src/config/etcd-following.ts), on mocked
// timers: one line when it stops, one every 30 s while it lasts (how long, the last error, the
// revision serving), one when it follows again; never a secret. And which etcd errors are a
// refused token (sign in again at once) or a refusal (ask again only slowly).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Logger } from '../../src/telemetry/logger.ts';
import { EtcdFollowing, WARN_EVERY_MS } from '../../src/config/etcd-following.ts';
import { isRefusal, isTokenRefusal } from '../../src/config/etcd-client.ts';

type Line = Record<string, unknown> & { level: string; msg: string };

function recorder(): { log: Logger; lines: Line[] } {
  const lines: Line[] = [];
  const at = (level: string) => (fields: object, msg: string) => lines.push({ ...fields, level, msg } as Line);
  return { log: { info: at('info'), warn: at('warn'), error: at('error') } as unknown as Logger, lines };
}

describe('EtcdFollowing', () => {
  test('not following until the watch is created; a failure is said once, then every 30 s with how long and why; following again is said with how long it lasted', (t) => {
    t.mock.timers.enable({ apis: ['setInterval', 'Date'], now: Date.parse('2026-01-01T00:00:00Z') });
    const { log, lines } = recorder();
    let revision = 7;
    const following = new EtcdFollowing({ log, endpoints: ['http://127.0.0.1:2379'], secrets: ['hunter2-password'], serving: () => ({ revision, loaded: true }) });
    assert.deepEqual(following.info(), { following: false, since: '2026-01-01T00:00:00.000Z', last_error: null });
    following.resumed();
    assert.equal(following.following, true);
    assert.deepEqual(lines.map((l) => [l.event, l.msg]), [['etcd_connected', 'following etcd']]);
    t.mock.timers.tick(5000);
    following.lost(new Error('14 UNAVAILABLE: Connection dropped'));
    following.lost(new Error('14 UNAVAILABLE: No connection established'));
    assert.deepEqual(following.info(), { following: false, since: '2026-01-01T00:00:05.000Z', last_error: '14 UNAVAILABLE: No connection established' });
    assert.equal(lines.filter((l) => l.event === 'etcd_unavailable').length, 1, 'said once, not at every retry');
    t.mock.timers.tick(WARN_EVERY_MS - 1);
    assert.equal(lines.filter((l) => l.event === 'etcd_not_following').length, 0);
    t.mock.timers.tick(1);
    revision = 9;
    t.mock.timers.tick(WARN_EVERY_MS);
    const warnings = lines.filter((l) => l.event === 'etcd_not_following');
    assert.deepEqual(
      warnings.map((l) => [l.level, l.for_secs, l.last_error, l.revision]),
      [
        ['warn', 30, '14 UNAVAILABLE: No connection established', 7],
        ['warn', 60, '14 UNAVAILABLE: No connection established', 9],
      ],
    );
    assert.match(warnings[0]!.msg, /^not following etcd for 30 s \(14 UNAVAILABLE: No connection established\): serving revision 7; changes made in etcd meanwhile are not applied$/);
    t.mock.timers.tick(10_000);
    following.resumed();
    assert.deepEqual(following.info(), { following: true, since: '2026-01-01T00:01:15.000Z', last_error: null });
    assert.equal(lines.at(-1)!.event, 'etcd_connected');
    assert.equal(lines.at(-1)!.after_secs, 70);
    t.mock.timers.tick(WARN_EVERY_MS * 3);
    assert.equal(lines.filter((l) => l.event === 'etcd_not_following').length, 2, 'no warning once it follows again');
    following.close();
  });

  test('nothing read yet: the first failure is said (serving nothing), and the warnings count from the start', (t) => {
    t.mock.timers.enable({ apis: ['setInterval', 'Date'], now: 0 });
    const { log, lines } = recorder();
    const following = new EtcdFollowing({ log, endpoints: ['http://127.0.0.1:2379'], secrets: [], serving: () => ({ revision: 0, loaded: false }) });
    t.mock.timers.tick(1000);
    following.lost(new Error('etcdserver: authentication failed, invalid user ID or password'));
    assert.deepEqual([lines[0]!.event, lines[0]!.serving], ['etcd_unavailable', 'nothing yet']);
    t.mock.timers.tick(WARN_EVERY_MS);
    assert.equal(lines[1]!.for_secs, 31);
    assert.match(lines[1]!.msg, /nothing to serve yet/);
    following.close();
    t.mock.timers.tick(WARN_EVERY_MS * 2);
    assert.equal(lines.length, 2, 'closed: nothing more');
  });

  test('a secret in an error is never repeated; a long error is cut', (t) => {
    t.mock.timers.enable({ apis: ['setInterval', 'Date'], now: 0 });
    const { log, lines } = recorder();
    const following = new EtcdFollowing({ log, endpoints: [], secrets: ['', 'hunter2-password'], serving: () => ({ revision: 1, loaded: true }) });
    following.lost(new Error(`refused hunter2-password and hunter2-password again ${'x'.repeat(1000)}`));
    const error = following.info().last_error!;
    assert.ok(!error.includes('hunter2'), error);
    assert.match(error, /^refused \[redacted\] and \[redacted\] again x+…$/);
    assert.ok(error.length <= 301);
    t.mock.timers.tick(WARN_EVERY_MS);
    assert.ok(!JSON.stringify(lines).includes('hunter2'));
    following.close();
  });
});

describe('etcd errors', () => {
  const cases: [string, boolean, boolean][] = [
    // [message, a refused token, a refusal]
    ['Watcher canceled: rpc error: code = Unauthenticated desc = etcdserver: invalid auth token', true, true],
    ['etcdserver: invalid auth token', true, true],
    ['etcdserver: user name is empty', true, true],
    ['etcdserver: authentication failed, invalid user ID or password', false, true],
    ['Watcher canceled: etcdserver: permission denied', false, true],
    ['etcdserver: authentication is not enabled', false, true],
    ['14 UNAVAILABLE: No connection established', false, false],
    ['etcdserver: request timed out', false, false],
    ['the watch stream ended', false, false],
  ];
  for (const [message, token, refusal] of cases) {
    test(`"${message}": ${token ? 'sign in again' : 'not a token'}, ${refusal ? 'a refusal' : 'not a refusal'}`, () => {
      assert.equal(isTokenRefusal(new Error(message)), token);
      assert.equal(isRefusal(new Error(message)), refusal);
    });
  }
});
