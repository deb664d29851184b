// Issue 24, leftovers: credentials in a URL of the config. A canary is put where an operator puts a
// credential in a URL (the userinfo, the query), then searched for on every surface (test/support/
// canary.ts): log lines, answers, /server_info, /readyz, the status events, what `sluice validate`
// and `sluice get` print.
// - etcd.endpoints with `user:password@`: the endpoints were logged (`etcd_unavailable`,
//   `etcd_not_following`), named the config source and the readiness reason (`waiting for etcd
//   (…)`, a 503 to every client), and etcd's gRPC client, which reads no userinfo, failed with the
//   password in its error (`last_error` in /server_info and the status page). Such an endpoint is now
//   refused (credentials have etcd.username and etcd.password), without being quoted.
// - A provider's base_url with a key in its userinfo or query, expanded from the environment in a
//   file: `GET /config/providers` and `sluice get` showed it. They show it redacted, and `sluice
//   apply` refuses the redacted form back.
// - The Redis URL (`redis://:password@host`) and the OTLP endpoint: logged redacted.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { runSluice, startGateway, writeConfig, type GatewayProcess } from '../support/gateway-process.ts';
import { httpRequest, postJson } from '../support/http.ts';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { freePort } from '../support/haproxy.ts';
import { watchStatus } from '../support/status-stream.ts';
import { findCanaries, newCanary } from '../support/canary.ts';

const skip = etcdCheck().skip;
const CANARY = newCanary('urlc');
const NO_ADMIN_ENV = { SLUICE_CONFIG: undefined, SLUICE_ADMIN_TOKEN: undefined };

let mock: MockUpstream;
before(async () => {
  mock = await startMockUpstream();
});
after(async () => {
  await mock?.close();
});

/** Resolves true once the gateway says `ready` (ready or not: its listeners are up), false if it exits first. */
async function started(gw: GatewayProcess): Promise<boolean> {
  const ready = gw.waitForLog((l) => l.event === 'ready', 30_000).then(
    () => true,
    () => false,
  );
  return Promise.race([ready, gw.exited.then(() => false)]);
}

function listenerUrl(gw: GatewayProcess, name: string): string {
  const line = gw.logs.find((l) => l.event === 'listener_started' && l.listener === name);
  return `http://${String(line?.address)}`;
}

function assertNoCanary(surfaces: Map<string, string>): void {
  const findings = findCanaries(surfaces, [CANARY]);
  assert.deepEqual(findings, [], `the canary was found:\n${findings.map((f) => `  ${f.surface} (${f.form}): …${f.context}…`).join('\n')}`);
}

describe('etcd.endpoints with a user and password', { skip }, () => {
  let etcd: EtcdServer;
  before(async () => {
    etcd = await startEtcd();
  });
  after(async () => {
    await etcd?.close();
  });

  test('refused by validate and at start, naming the field and where credentials go; the password is on no surface', { timeout: 60_000 }, async () => {
    const endpoint = etcd.endpoint.replace('http://', `http://root:${CANARY}@`);
    const config = { etcd: { endpoints: [endpoint], prefix: '/url-secrets/' } };
    const surfaces = new Map<string, string>();
    const validate = await runSluice(['validate', '--config', writeConfig(config)]);
    surfaces.set('sluice validate', validate.stdout + validate.stderr);
    const gw = await startGateway({ config, waitReady: false });
    try {
      if (await started(gw)) {
        // It started: everything it shows of its config source is a surface.
        const proxy = listenerUrl(gw, 'proxy');
        const admin = listenerUrl(gw, 'admin');
        const watcher = await watchStatus(admin);
        await gw.waitForLog((l) => l.event === 'etcd_unavailable', 10_000).catch(() => undefined);
        const answers = [
          await postJson(`${proxy}/v1/chat/completions`, { model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
          await httpRequest(`${admin}/server_info`),
          await httpRequest(`${admin}/readyz?verbose`),
          await httpRequest(`${admin}/config/providers`),
        ];
        await watcher.waitFor((e) => e.name === 'status', 5000).catch(() => undefined);
        watcher.close();
        surfaces.set('answers', answers.map((a) => `${a.status} ${a.body}`).join('\n'));
        surfaces.set('status events', JSON.stringify(watcher.events));
      }
      await gw.stop();
      surfaces.set('log', gw.stdout() + gw.stderr());
      assertNoCanary(surfaces);
      assert.equal((await gw.exited).code, 1, 'the gateway refuses to start');
      for (const output of [validate.stderr, gw.stdout() + gw.stderr()]) {
        assert.match(output, /etcd\.endpoints\[0\]: expected only a scheme, a host and a port/);
        assert.match(output, /etcd\.username and etcd\.password/);
      }
      assert.equal(validate.code, 1);
    } finally {
      await gw.stop();
    }
  });

  test('a provider written with a base_url holding a key: shown redacted by the admin API and sluice get; apply refuses the redacted form', { timeout: 60_000 }, async () => {
    const gw = await startGateway({ config: { etcd: { endpoints: [etcd.endpoint], prefix: '/url-secrets-ok/' } } });
    try {
      const baseUrl = `${mock.url.replace('http://', `http://u:${CANARY}@`)}/v1?api-key=${CANARY}`;
      const put = await httpRequest(`${gw.adminUrl}/config/providers/keyed`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ type: 'openai', base_url: baseUrl }) });
      assert.equal(put.status, 201, put.body);
      const seen = [put.body];
      for (const path of ['/config/providers', '/config/providers/keyed', '/server_info']) seen.push((await httpRequest(`${gw.adminUrl}${path}`)).body);
      const yaml = await runSluice(['get', 'providers', '-o', 'yaml', '--admin', gw.adminUrl], { env: NO_ADMIN_ENV });
      for (const output of [[], ['-o', 'json']]) seen.push((await runSluice(['get', 'providers', ...output, '--admin', gw.adminUrl], { env: NO_ADMIN_ENV })).stdout);
      seen.push(yaml.stdout, yaml.stderr);
      assertNoCanary(new Map([['admin API and sluice get', seen.join('\n')], ['log', gw.stdout() + gw.stderr()]]));
      assert.ok(seen[2]!.includes(`${mock.url.replace('http://', 'http://[redacted]@')}/v1?[redacted]`), seen[2]);
      // What get printed, applied back: refused, naming base_url, nothing written.
      const file = writeConfig(yaml.stdout);
      const apply = await runSluice(['apply', '-f', file, '--admin', gw.adminUrl], { env: NO_ADMIN_ENV });
      assert.equal(apply.code, 1, apply.stdout + apply.stderr);
      assert.match(apply.stderr, /base_url/);
    } finally {
      await gw.stop();
    }
  });
});

describe('URLs of a config file', () => {
  test('a base_url with a key from ${VAR} in its userinfo and query, a Redis URL with a password, an OTLP endpoint with a token: on no surface', { timeout: 60_000 }, async () => {
    const [redisPort, otlpPort] = await Promise.all([freePort(), freePort()]);
    const gw = await startGateway({
      config: {
        providers: [{ name: 'up', type: 'openai', base_url: `${mock.url.replace('http://', 'http://user:${SLUICE_URL_CANARY}@')}/v1?api-key=\${SLUICE_URL_CANARY}` }],
        models: [{ name: 'm', provider: 'up' }],
        limits: { store: 'redis', redis: { url: `redis://:\${SLUICE_URL_CANARY}@127.0.0.1:${redisPort}/0`, connect_timeout_ms: 200 } },
        tracing: { enabled: true, endpoint: `http://otel:\${SLUICE_URL_CANARY}@127.0.0.1:${otlpPort}/v1/traces?token=\${SLUICE_URL_CANARY}` },
      },
      env: { SLUICE_URL_CANARY: CANARY, OTEL_BSP_SCHEDULE_DELAY: '100' },
    });
    try {
      const seen: string[] = [];
      // A request through the provider (the store unreachable lets it through, uncounted): logs, a span that fails to export.
      const call = await postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: 'm', messages: [{ role: 'user', content: 'hi' }] });
      seen.push(`${call.status} ${call.body}`);
      for (const path of ['/config/providers', '/config/providers/up', '/server_info', '/readyz?verbose', '/metrics']) seen.push((await httpRequest(`${gw.adminUrl}${path}`)).body);
      for (const output of [[], ['-o', 'json'], ['-o', 'yaml']]) {
        const get = await runSluice(['get', 'providers', ...output, '--admin', gw.adminUrl], { env: NO_ADMIN_ENV });
        assert.equal(get.code, 0, get.stderr);
        seen.push(get.stdout, get.stderr);
      }
      await gw.waitForLog((l) => l.event === 'traces_export_failed', 15_000);
      const unreachable = await gw.waitForLog((l) => l.event === 'limit_store_unreachable');
      assertNoCanary(new Map([['admin API and sluice get', seen.join('\n')], ['log', gw.stdout() + gw.stderr()]]));
      // Where they point is still said, and that something was withheld.
      assert.equal(unreachable.store, `redis://[redacted]@127.0.0.1:${redisPort}/0`);
      const tracing = gw.logs.find((l) => l.event === 'tracing_started');
      assert.equal(tracing?.endpoint, `http://[redacted]@127.0.0.1:${otlpPort}/v1/traces?[redacted]`);
      assert.ok(seen[1]!.includes(`"base_url":"${mock.url.replace('http://', 'http://[redacted]@')}/v1?[redacted]"`), seen[1]);
      assert.equal(call.status, 200, 'the provider serves (its base_url as configured)');
    } finally {
      await gw.stop();
    }
  });
});
