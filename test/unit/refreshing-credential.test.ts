// A cloud credential kept fresh (providers/refreshing-credential.ts): one fetch shared by the
// requests that wait for it; the one held given at once while fresh; a refresh started in the
// background ahead of expiry (the earlier of 5 minutes and half the lifetime) while the one held
// is still given; an expired one waited for; a failure said once, answered with the gateway's 503,
// and not asked again for a second; a recovery said. Time is the manual clock's and a wall clock
// the test moves.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { RefreshingCredential, type Expiring } from '../../src/providers/refreshing-credential.ts';
import { GatewayError } from '../../src/api/errors.ts';
import { ManualClock } from '../support/manual-clock.ts';

function setUp(lifetimeMs: number) {
  const clock = new ManualClock();
  let wall = 1_000_000;
  const said: string[] = [];
  let fetches = 0;
  let failing = false;
  let pending: ((value: Expiring<string>) => void) | undefined;
  let held = false;
  const credential = new RefreshingCredential<string>({
    provider: 'cloud',
    source: 'token',
    fetch: () => {
      fetches++;
      if (failing) return Promise.reject(new Error('endpoint down'));
      const value = { value: `token-${fetches}`, expiresAt: wall + lifetimeMs };
      if (held) return new Promise((resolve) => (pending = () => resolve(value)));
      return Promise.resolve(value);
    },
    events: {
      credentialsFailed: (provider, source, reason) => said.push(`failed ${provider} ${source} ${reason}`),
      credentialsRecovered: (provider, source) => said.push(`recovered ${provider} ${source}`),
    },
    clock,
    wallNow: () => wall,
  });
  return {
    credential,
    clock,
    said,
    fetches: () => fetches,
    advance: (ms: number) => {
      wall += ms;
      clock.advance(ms);
    },
    fail: (on: boolean) => (failing = on),
    hold: (on: boolean) => (held = on),
    release: () => pending?.(undefined as never),
  };
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('RefreshingCredential', () => {
  test('requests waiting for the first credential share one fetch; a fresh one is given without another', async () => {
    const t = setUp(3_600_000);
    const [a, b, c] = await Promise.all([t.credential.get(), t.credential.get(), t.credential.get()]);
    assert.deepEqual([a, b, c], ['token-1', 'token-1', 'token-1']);
    assert.equal(t.fetches(), 1);
    t.advance(60_000);
    assert.equal(await t.credential.get(), 'token-1');
    assert.equal(t.fetches(), 1);
  });

  test('five minutes before expiry a refresh starts in the background; the one held is given meanwhile', async () => {
    const t = setUp(3_600_000);
    await t.credential.get();
    t.advance(3_600_000 - 5 * 60_000 - 1);
    assert.equal(await t.credential.get(), 'token-1');
    assert.equal(t.fetches(), 1, 'not yet');
    t.advance(1);
    t.hold(true);
    assert.equal(await t.credential.get(), 'token-1', 'given at once, not waited for');
    assert.equal(t.fetches(), 2, 'the refresh started');
    t.release();
    await tick();
    assert.equal(await t.credential.get(), 'token-2');
  });

  test('a short lifetime is refreshed at half of it', async () => {
    const t = setUp(60_000);
    await t.credential.get();
    t.advance(29_000);
    await t.credential.get();
    assert.equal(t.fetches(), 1);
    t.advance(1_000);
    await t.credential.get();
    assert.equal(t.fetches(), 2);
  });

  test('an expired credential is never given: the request waits for a new one', async () => {
    const t = setUp(60_000);
    await t.credential.get();
    t.advance(60_000);
    t.hold(true);
    let got: string | undefined;
    const waiting = t.credential.get().then((value) => (got = value));
    await tick();
    assert.equal(got, undefined, 'waits');
    t.release();
    await waiting;
    assert.equal(got, 'token-2');
  });

  test("a failure is said once, answered with the gateway's 503, not asked again for a second; a recovery is said", async () => {
    const t = setUp(60_000);
    t.fail(true);
    for (let i = 0; i < 3; i++) {
      await assert.rejects(t.credential.get(), (error: unknown) => {
        assert.ok(error instanceof GatewayError);
        assert.equal(error.status, 503);
        assert.equal(error.code, 'upstream_credentials_unavailable');
        assert.doesNotMatch(error.message, /endpoint down/, 'the reason is for the log, not the client');
        return true;
      });
    }
    assert.equal(t.fetches(), 1, 'requests within the pause fail at once');
    assert.deepEqual(t.said, ['failed cloud token Error: endpoint down']);
    t.advance(1_000);
    await assert.rejects(t.credential.get());
    assert.equal(t.fetches(), 2);
    assert.equal(t.said.length, 1, 'said once until it recovers');
    t.fail(false);
    t.advance(1_000);
    assert.equal(await t.credential.get(), 'token-3');
    assert.deepEqual(t.said.at(-1), 'recovered cloud token');
  });

  test('a refresh that fails keeps the credential held until it expires', async () => {
    const t = setUp(60_000);
    await t.credential.get();
    t.advance(30_000);
    t.fail(true);
    assert.equal(await t.credential.get(), 'token-1');
    await tick();
    assert.equal(t.said.length, 1);
    assert.equal(await t.credential.get(), 'token-1', 'still good');
    t.advance(30_000);
    await assert.rejects(t.credential.get());
  });
});
