// Issue 24, a leftover: a duration above 2^31-1 ms was accepted, and Node fires such a timer after
// 1 ms, so `timeout_ms: 3000000000` written through the admin API made every attempt of the route
// time out at once (504 before the provider could answer). Every duration field is now bounded (24
// days; test/unit/durations.test.ts walks them all): through the admin API the write is a 400 naming
// the field and the bound, never the value; written with etcdctl it is rejected the same way, in a
// `resource_rejected` line; in a file the gateway does not start, and `sluice validate` says why.
// The bound itself is accepted and serves. At the default settings otherwise.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { eventually, metricValue, runSluice, scrape, startGateway, writeConfig, type GatewayProcess } from '../support/gateway-process.ts';
import { httpRequest, postJson } from '../support/http.ts';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { MAX_DURATION_MS } from '../../src/config/schema.ts';

const skip = etcdCheck().skip;
const OVER = 3_000_000_000;
/** The provider answers after this long: an attempt that times out at once never sees it. */
const SLOW = mockHeader({ headersDelayMs: 300 });
const BOUND = `expected at most ${MAX_DURATION_MS} milliseconds`;

let mock: MockUpstream;
before(async () => {
  mock = await startMockUpstream();
});
after(async () => {
  await mock?.close();
});

const chat = (model: string) => ({ model, messages: [{ role: 'user', content: 'hi' }] });

describe('a duration through the admin API and etcd', { skip }, () => {
  let etcd: EtcdServer;
  let gw: GatewayProcess;
  const prefix = `/durations-${process.pid}/`;
  before(async () => {
    etcd = await startEtcd();
    await etcd.put(`${prefix}providers/up`, JSON.stringify({ type: 'openai', base_url: `${mock.url}/v1` }));
    // etcd mode requires a client key by default.
    await etcd.put(`${prefix}keys/load`, JSON.stringify({ key: 'sk-durations-0123456789' }));
    gw = await startGateway({ config: { etcd: { endpoints: [etcd.endpoint], prefix } } });
  });
  after(async () => {
    await gw?.stop();
    await etcd?.close();
  });
  const key = { authorization: 'Bearer sk-durations-0123456789' };
  const put = (name: string, body: object) => httpRequest(`${gw.adminUrl}/config/models/${name}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  test('PUT timeout_ms 3000000000: 400 naming the field and the bound, not the value; nothing written', async () => {
    for (const [name, body, field] of [
      ['slow-target', { targets: [{ provider: 'up', timeout_ms: OVER }] }, 'targets[0].timeout_ms'],
      ['slow-retry', { provider: 'up', retry: { attempt_timeout_ms: OVER } }, 'retry.attempt_timeout_ms'],
      ['slow-first-token', { provider: 'up', retry: { first_token_timeout_ms: OVER } }, 'retry.first_token_timeout_ms'],
    ] as const) {
      const res = await put(name, body);
      assert.equal(res.status, 400, `${name}: ${res.status} ${res.body}`);
      const error = (JSON.parse(res.body) as { error: { code: string; message: string } }).error;
      assert.equal(error.code, 'invalid_resource');
      assert.ok(error.message.includes(`${field}: ${BOUND}`), error.message);
      assert.ok(!error.message.includes(String(OVER)), `the value is quoted: ${error.message}`);
      // Not written: the route does not exist.
      const call = await postJson(`${gw.proxyUrl}/v1/chat/completions`, chat(name), { ...key, ...SLOW });
      assert.equal(call.status, 404, `${name}: ${call.status} ${call.body}`);
    }
  });

  test('written with etcdctl: rejected in a resource_rejected line naming the field and the bound; the bound itself serves', async () => {
    await etcd.put(`${prefix}models/from-etcdctl`, JSON.stringify({ targets: [{ provider: 'up', timeout_ms: OVER }] }));
    const line = await gw.waitForLog((l) => l.event === 'resource_rejected' && l.resource === 'models/from-etcdctl');
    assert.ok(String(line.reason).includes(`targets[0].timeout_ms: ${BOUND}`), String(line.reason));
    assert.ok(!JSON.stringify(line).includes(String(OVER)));
    const refused = await postJson(`${gw.proxyUrl}/v1/chat/completions`, chat('from-etcdctl'), { ...key, ...SLOW });
    assert.equal(refused.status, 404, refused.body);

    const at = await put('at-the-bound', { targets: [{ provider: 'up', timeout_ms: MAX_DURATION_MS }], retry: { attempt_timeout_ms: MAX_DURATION_MS, total_timeout_ms: MAX_DURATION_MS } });
    assert.equal(at.status, 201, at.body);
    await eventually(async () => (metricValue(await scrape(gw), 'sluice_config_revision') ?? 0) >= (await etcd.revision()), 10_000, 'the write served');
    const started = Date.now();
    const served = await postJson(`${gw.proxyUrl}/v1/chat/completions`, chat('at-the-bound'), { ...key, ...SLOW });
    assert.equal(served.status, 200, served.body);
    assert.ok(Date.now() - started >= 250, 'the answer came after the provider\'s delay');
    assert.doesNotMatch(gw.stderr(), /TimeoutOverflowWarning/);
  });
});

describe('a duration in a config file', () => {
  test('timeout_ms 3000000000: the gateway does not start, and sluice validate names the field and the bound', async () => {
    const config = { providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }], models: [{ name: 'slow', targets: [{ provider: 'up', timeout_ms: OVER }] }] };
    const gw = await startGateway({ config, waitReady: false });
    try {
      const exit = await Promise.race([gw.exited, gw.waitForLog((l) => l.event === 'ready', 30_000).then(() => undefined)]);
      if (exit === undefined) {
        // It started: what it does with the route is the defect.
        const started = Date.now();
        const proxy = `http://${String(gw.logs.find((l) => l.event === 'listener_started' && l.listener === 'proxy')?.address)}`;
        const res = await postJson(`${proxy}/v1/chat/completions`, chat('slow'), SLOW);
        assert.fail(`the gateway started with timeout_ms ${OVER}; a call answered ${res.status} after ${Date.now() - started} ms: ${res.body.slice(0, 200)}; stderr: ${gw.stderr().slice(0, 300)}`);
      }
      assert.equal(exit.code, 1);
      assert.match(gw.stdout() + gw.stderr(), new RegExp(`models\\[0\\]\\.targets\\[0\\]\\.timeout_ms: ${BOUND}`));
    } finally {
      await gw.stop();
    }
    const validate = await runSluice(['validate', '--config', writeConfig(config)]);
    assert.equal(validate.code, 1, validate.stdout);
    assert.ok(validate.stderr.includes(`models[0].targets[0].timeout_ms: ${BOUND}`), validate.stderr);
  });
});
