// E6: a config reload under load - a listener's settings changed, a provider removed, a client
// key rotated - loses no request; a bad config is refused and the last good one keeps serving.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { stringify } from 'yaml';
import { Agent, request } from 'undici';
import { startGateway, eventually, metricValue, scrape, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream } from '../support/mock-upstream.ts';

let mock: MockUpstream;
before(async () => {
  mock = await startMockUpstream({ record: false });
});
after(async () => {
  await mock?.close();
});

const OLD_KEY = 'sk-client-old-0001';
const NEW_KEY = 'sk-client-new-0002';

function config(step: 'a' | 'b' | 'c', proxyAddress: string) {
  return {
    listeners: [
      { name: 'proxy', address: proxyAddress, role: 'proxy', ...(step === 'a' ? {} : { protocols: ['http1', 'h2'] }) },
      { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
    ],
    providers: [
      { name: 'main', type: 'openai', base_url: `${mock.url}/v1` },
      ...(step === 'a' ? [{ name: 'legacy', type: 'openai', base_url: `${mock.url}/v1` }] : []),
    ],
    models: [{ name: 'm', provider: 'main' }, ...(step === 'a' ? [{ name: 'legacy-model', provider: 'legacy' }] : [])],
    keys: step === 'a' ? [OLD_KEY] : step === 'b' ? [OLD_KEY, NEW_KEY] : [NEW_KEY],
    downstream: { drain_timeout_secs: 0.3 },
  };
}

async function reload(gw: GatewayProcess, text: string): Promise<void> {
  const before = gw.logs.filter((l) => l.event === 'config_reloaded' || l.event === 'config_reload_failed').length;
  writeFileSync(gw.configFile, text);
  gw.signal('SIGHUP');
  await eventually(() => gw.logs.filter((l) => l.event === 'config_reloaded' || l.event === 'config_reload_failed').length > before, 5000, 'reload outcome');
}

test('E6: a reload under load (listener settings changed, provider removed, key rotated) loses no request', { timeout: 60_000 }, async () => {
  // The proxy listener needs a fixed address for the reloaded config to name the same socket.
  const probe = await startGateway({ config: config('a', '127.0.0.1:0') });
  const port = new URL(probe.proxyUrl).port;
  await probe.stop();
  const address = `127.0.0.1:${port}`;
  const gw = await startGateway({ config: config('a', address) });
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 16 });
  let key = OLD_KEY;
  let running = true;
  let ok = 0;
  const failures: string[] = [];
  const worker = async (i: number) => {
    while (running) {
      const stream = i % 2 === 0;
      try {
        const res = await request(`${gw.proxyUrl}/v1/chat/completions`, {
          method: 'POST',
          dispatcher: agent,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...mockHeader(stream ? { chunks: 6, sseIntervalMs: 40 } : { headersDelayMs: 30 }) },
          body: JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content: 'x' }] }),
        });
        const text = await res.body.text();
        if (res.statusCode !== 200) failures.push(`status ${res.statusCode}: ${text.slice(0, 160)}`);
        else if (stream && !text.includes('[DONE]')) failures.push('stream incomplete');
        else ok++;
      } catch (error) {
        failures.push(`error: ${(error as Error).message}`);
      }
    }
  };
  try {
    const workers = Array.from({ length: 8 }, (_, i) => worker(i));
    // A long stream on the provider about to be removed: it must finish on what it started with.
    const legacyStream = request(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${OLD_KEY}`, ...mockHeader({ chunks: 15, sseIntervalMs: 100 }) },
      body: JSON.stringify({ model: 'legacy-model', stream: true, messages: [{ role: 'user', content: 'x' }] }),
    }).then(async (res) => ({ status: res.statusCode, text: await res.body.text() }));
    await eventually(() => ok > 20, 5000, 'load running');

    // Step b: the listener gains h2 (new settings, same socket), the legacy provider goes, a new key is added.
    await reload(gw, stringify(config('b', address)));
    assert.ok(gw.logs.some((l) => l.event === 'config_reloaded'));
    assert.ok(gw.logs.some((l) => l.event === 'listener_reconfigured' && l.listener === 'proxy'));
    key = NEW_KEY;
    const atB = ok;
    await eventually(() => ok > atB + 20, 5000, 'load after the first reload');
    const gone = await request(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${NEW_KEY}` },
      body: JSON.stringify({ model: 'legacy-model', messages: [] }),
    });
    assert.equal(gone.statusCode, 404, 'the removed model is no longer routed');
    await gone.body.text();

    // Step c: the old key is retired.
    await reload(gw, stringify(config('c', address)));
    const atC = ok;
    await eventually(() => ok > atC + 20, 5000, 'load after the second reload');
    const oldKey = await request(`${gw.proxyUrl}/v1/models`, { headers: { authorization: `Bearer ${OLD_KEY}` } });
    assert.equal(oldKey.statusCode, 401);
    await oldKey.body.text();

    // A broken config is refused; the last good one keeps serving.
    await reload(gw, 'listeners: [ { name: proxy, address: nowhere } ]\n');
    const rejected = gw.logs.find((l) => l.event === 'config_reload_failed')!;
    assert.ok(Array.isArray(rejected.problems) && (rejected.problems as unknown[]).length > 0);
    const metrics = await scrape(gw);
    assert.equal(metricValue(metrics, 'sluice_config_last_reload_successful'), 0);
    assert.equal(metricValue(metrics, 'sluice_config_reloads_total', { result: 'failure' }), 1);
    const atD = ok;
    await eventually(() => ok > atD + 10, 5000, 'load after the rejected reload');

    running = false;
    await Promise.all(workers);
    const legacy = await legacyStream;
    assert.equal(legacy.status, 200);
    assert.ok(legacy.text.includes('data: [DONE]'), 'the stream on the removed provider finished');
    assert.deepEqual(failures, []);
    assert.ok(ok > 60, `${ok} requests`);
  } finally {
    running = false;
    await agent.close();
    await gw.stop();
  }
});
