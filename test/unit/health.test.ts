// /livez and /readyz answers (L1): liveness never fails while the process runs; readiness names
// what fails, briefly by default and check by check when verbose.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { liveness, readiness } from '../../src/lifecycle/health.ts';

describe('L1 health answers', () => {
  test('L1: /livez is 200 {"status":"live"}', () => {
    const answer = liveness();
    assert.equal(answer.status, 200);
    assert.deepEqual(JSON.parse(answer.body), { status: 'live' });
  });

  test('L1: /readyz is 200 {"status":"ready"} when every check passes (and with no checks)', () => {
    for (const checks of [[], [{ name: 'listeners_up', ok: true }, { name: 'not_draining', ok: true }]]) {
      const answer = readiness(checks, false);
      assert.equal(answer.status, 200);
      assert.deepEqual(JSON.parse(answer.body), { status: 'ready' });
    }
  });

  test('L1: /readyz is 503 naming the first failing check when one fails', () => {
    const answer = readiness(
      [
        { name: 'listeners_up', ok: true },
        { name: 'not_draining', ok: false },
        { name: 'upstreams', ok: false },
      ],
      false,
    );
    assert.equal(answer.status, 503);
    assert.deepEqual(JSON.parse(answer.body), { status: 'not_ready', reason: 'not_draining' });
  });

  test('L1: verbose /readyz lists every check with pass or fail, 200 when all pass and 503 otherwise', () => {
    const passing = readiness([{ name: 'listeners_up', ok: true }], true);
    assert.equal(passing.status, 200);
    assert.deepEqual(JSON.parse(passing.body), { status: 'ready', checks: [{ name: 'listeners_up', status: 'pass' }] });
    const failing = readiness(
      [
        { name: 'listeners_up', ok: true },
        { name: 'not_draining', ok: false },
      ],
      true,
    );
    assert.equal(failing.status, 503);
    assert.deepEqual(JSON.parse(failing.body), {
      status: 'not_ready',
      checks: [
        { name: 'listeners_up', status: 'pass' },
        { name: 'not_draining', status: 'fail' },
      ],
    });
  });
});

describe('a check that says why it fails', () => {
  test('its detail is given while it fails (plain and verbose), and never while it passes', () => {
    const detail = 'auth.require_key is on and no client key exists';
    const failing = readiness([{ name: 'config_loaded', ok: true }, { name: 'client_keys', ok: false, detail }], false);
    assert.deepEqual(JSON.parse(failing.body), { status: 'not_ready', reason: 'client_keys', detail });
    const verbose = readiness([{ name: 'client_keys', ok: false, detail }], true);
    assert.deepEqual(JSON.parse(verbose.body).checks, [{ name: 'client_keys', status: 'fail', detail }]);
    const passing = readiness([{ name: 'client_keys', ok: true, detail }], true);
    assert.deepEqual(JSON.parse(passing.body), { status: 'ready', checks: [{ name: 'client_keys', status: 'pass' }] });
  });
});
