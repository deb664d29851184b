// Issue #24, defect 1: a web page must not drive the admin API. At the default settings (the
// embedded default; a config file with no admin token; etcd mode with no admin token) headless
// Chromium opens two hostile pages:
//   - one of another origin: another port of 127.0.0.1, the same site as the admin listener;
//   - one reached through DNS rebinding: a name of the attacker's (rebind.evil.example, mapped to
//     127.0.0.1 by --host-resolver-rules) on the admin listener's own port, so the admin API is the
//     page's own origin and only the Host check can stop it. Its document is served by the test
//     (the attacker's answer before the name was rebound); everything after goes to the gateway.
// Each tries fetch (text/plain and bodyless POSTs in no-cors mode; JSON too when same-origin), form
// posts (urlencoded, and text/plain shaped as JSON) and image loads against /healthcheck/fail,
// /drain_listeners?graceful, POST /config/keys and a key's rotation, and reads /server_info,
// /config/providers and /metrics. Then nothing has changed: readiness 200, the process serving, no
// key created or rotated in etcd, nothing read by the page. The gateway's access log shows every
// one of those requests arrived and was refused: the test cannot pass because Chromium held a
// request back.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { hash } from 'node:crypto';
import { eventually, startGateway, type GatewayProcess, type LogLine } from '../support/gateway-process.ts';
import { chromiumCheck } from '../support/chromium.ts';
import { hostilePage, openHostilePages, pageTries, type HostilePages, type PageResults } from '../support/hostile-pages.ts';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';

const browser = chromiumCheck();
const REBIND_HOST = 'rebind.evil.example';
const sha256 = (text: string) => hash('sha256', text, 'base64');

let pages: HostilePages;

before(async () => {
  if (browser.skip) return;
  // The page of another origin: another port of 127.0.0.1, the same site as the admin listener.
  pages = await openHostilePages({ pageHost: '127.0.0.1', resolve: [REBIND_HOST] });
});

after(async () => {
  await pages?.close();
});

/** What a hostile page tries, in order: the reads, then the writes, the drain last (it would end the process). */
function attackPage(adminOrigin: string, options: { keys: boolean; sameOrigin: boolean }): string {
  const script = `${pageTries(adminOrigin)}
const KEYS = ${options.keys};
const SAME_ORIGIN = ${options.sameOrigin};
(async () => {
  await fetchTry('read_server_info', '/server_info');
  await fetchTry('read_providers', '/config/providers');
  await fetchTry('read_metrics', '/metrics');
  await imageTry('image_server_info', '/server_info');
  await imageTry('image_metrics', '/metrics');
  await fetchTry('fetch_healthcheck_fail', '/healthcheck/fail', { method: 'POST', mode: 'no-cors', headers: { 'content-type': 'text/plain' }, body: 'x' });
  await fetchTry('bodyless_healthcheck_fail', '/healthcheck/fail', { method: 'POST', mode: 'no-cors' });
  await formTry('form_healthcheck_fail', '/healthcheck/fail', 'application/x-www-form-urlencoded', { a: 'b' });
  if (SAME_ORIGIN) await fetchTry('json_healthcheck_fail', '/healthcheck/fail', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  if (KEYS) {
    await fetchTry('fetch_create_key', '/config/keys', { method: 'POST', mode: 'no-cors', headers: { 'content-type': 'text/plain' }, body: JSON.stringify({ name: 'pwned-fetch' }) });
    // A text/plain form whose body is JSON: {"name":"pwned-form","metadata":{"x":"="}}
    await formTry('form_create_key', '/config/keys', 'text/plain', { '{"name":"pwned-form","metadata":{"x":"': '"}}' });
    await fetchTry('fetch_rotate', '/config/keys/team/rotate', { method: 'POST', mode: 'no-cors' });
    if (SAME_ORIGIN) await fetchTry('json_create_key', '/config/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'pwned-json' }) });
  }
  await fetchTry('fetch_drain', '/drain_listeners?graceful', { method: 'POST', mode: 'no-cors', headers: { 'content-type': 'text/plain' }, body: 'x' });
  await formTry('form_drain', '/drain_listeners?graceful', 'text/plain', { a: 'b' });
  window.attackDone = results;
})();
`;
  return hostilePage(script);
}


/** Every path the pages try, as the access log names it. */
function triedPaths(keys: boolean): string[] {
  return ['/server_info', '/config/providers', '/metrics', '/healthcheck/fail', '/drain_listeners', ...(keys ? ['/config/keys', '/config/keys/team/rotate'] : [])];
}

/** The test's own requests, told apart from the page's in the access log. */
const CHECK = { 'x-request-id': 'test-check' };

/** The gateway is as it was: serving, ready, not draining, still running. */
async function assertUnchanged(gw: GatewayProcess, what: string): Promise<void> {
  assert.equal(gw.child.exitCode, null, `${what}: the gateway exited`);
  const ready = await fetch(`${gw.adminUrl}/readyz`, { headers: CHECK });
  assert.equal(ready.status, 200, `${what}: readiness ${ready.status} ${await ready.text()}`);
  const info = (await (await fetch(`${gw.adminUrl}/server_info`, { headers: CHECK })).json()) as { state: string; drain: unknown };
  assert.equal(info.state, 'serving', `${what}: state`);
  assert.equal(info.drain, null, `${what}: a drain started`);
}

/** Each path was asked for by the page, and every such request was refused with `status` and `code`: none answered 2xx. */
async function assertRefusedInLog(gw: GatewayProcess, paths: string[], status: number, code: string, since: number): Promise<void> {
  const admin = (l: LogLine) => l.event === 'access' && l.listener === 'admin';
  for (const path of paths) {
    await gw.waitForLog((l) => admin(l) && l.path === path && l.status === status && l.error === code, 15_000).catch((error: Error) => {
      throw new Error(`no refused ${path} (${status} ${code}) in the access log: the browser's request did not arrive or was not refused\n${error.message.slice(0, 500)}`);
    });
  }
  const answered = gw.logs.slice(since).filter((l) => admin(l) && l.downstream_request_id !== CHECK['x-request-id'] && paths.includes(String(l.path)) && Number(l.status) < 300);
  assert.deepEqual(answered, [], 'a request of the page was answered');
}

function assertNothingRead(results: PageResults, expectStatus: number | undefined): void {
  for (const name of ['read_server_info', 'read_providers', 'read_metrics']) {
    const result = results[name];
    assert.ok(typeof result === 'object', `${name}: ${JSON.stringify(result)}`);
    if (expectStatus === undefined) {
      // Another origin: no CORS header, so the browser gives the page nothing at all.
      assert.match(String(result.error), /TypeError/, `${name}: ${JSON.stringify(result).slice(0, 300)}`);
    } else {
      assert.equal(result.status, expectStatus, `${name}: ${JSON.stringify(result).slice(0, 300)}`);
      assert.doesNotMatch(String(result.body), /"pid"|"items"|sluice_/, `${name} read the answer`);
    }
  }
}

/** Both hostile pages against `gw`; `keys`: the pages also try to create and rotate keys. */
async function attackBoth(gw: GatewayProcess, keys: boolean): Promise<void> {
  const adminPort = new URL(gw.adminUrl).port;
  await assertUnchanged(gw, 'before');

  let since = gw.logs.length;
  const crossOrigin = await pages.visit(`${pages.origin}/attack.html`, attackPage(gw.adminUrl, { keys, sameOrigin: false }));
  await assertUnchanged(gw, 'after the page of another origin');
  await assertRefusedInLog(gw, triedPaths(keys), 403, 'cross_origin_request', since);
  assertNothingRead(crossOrigin, undefined);

  since = gw.logs.length;
  const rebound = await pages.visit(`http://${REBIND_HOST}:${adminPort}/rebind.html`, attackPage('', { keys, sameOrigin: true }));
  await assertUnchanged(gw, 'after the rebinding page');
  await assertRefusedInLog(gw, triedPaths(keys), 421, 'host_not_allowed', since);
  assertNothingRead(rebound, 421);
  if (keys) {
    const json = rebound.json_create_key;
    assert.ok(typeof json === 'object' && json.status === 421, `a same-origin JSON POST /config/keys: ${JSON.stringify(json)}`);
  }
}

describe('a web page against the admin API at the default settings', { skip: browser.skip }, () => {
  test('the embedded default: a page of another origin and a rebinding page change nothing and read nothing', async () => {
    const gw = await startGateway({ useDefault: true, env: { SLUICE_PROXY_ADDRESS: '127.0.0.1:0', SLUICE_ADMIN_ADDRESS: '127.0.0.1:0' } });
    try {
      await attackBoth(gw, false);
    } finally {
      await gw.stop();
    }
  });

  test('a config file with no admin token: the same', async () => {
    const gw = await startGateway({ config: { providers: [{ name: 'echo', type: 'echo' }], models: [{ name: 'echo', provider: 'echo' }] } });
    try {
      await attackBoth(gw, false);
      // The status page of the listener itself still loads and goes live.
      const page = await pages.chromium.context.newPage();
      try {
        await page.goto(`${gw.adminUrl}/status`);
        await eventually(async () => (await page.locator('#link').textContent()) === 'live', 10_000, 'the status page live');
      } finally {
        await page.close();
      }
    } finally {
      await gw.stop();
    }
  });

  describe('etcd mode with no admin token', { skip: etcdCheck().skip }, () => {
    let etcd: EtcdServer;
    before(async () => {
      etcd = await startEtcd();
    });
    after(async () => etcd?.close());

    test('no key is created or rotated, nothing is read', async () => {
      const prefix = `/sluice-browser-${process.pid}/`;
      const team = JSON.stringify({ key_sha256: sha256('sk-team-key-0123456789') });
      await etcd.put(`${prefix}providers/echo`, JSON.stringify({ type: 'echo' }));
      await etcd.put(`${prefix}models/echo`, JSON.stringify({ provider: 'echo' }));
      await etcd.put(`${prefix}keys/team`, team);
      const gw = await startGateway({ config: { etcd: { endpoints: [etcd.endpoint], prefix } } });
      try {
        await attackBoth(gw, true);
        const keys = (await etcd.etcdctl('get', '--prefix', '--keys-only', `${prefix}keys/`)).split('\n').filter((l) => l !== '');
        assert.deepEqual(keys, [`${prefix}keys/team`], 'no key was created');
        assert.equal(await etcd.get(`${prefix}keys/team`), team, 'the key was not rotated');
      } finally {
        await gw.stop();
      }
    });
  });
});
