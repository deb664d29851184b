// E6: a config reload under load - a listener's settings changed, a provider removed, a client
// key rotated - loses no request; a bad config is refused and the last good one keeps serving.
// E6a: a reload that cannot be applied (address in use, certificate missing) changes nothing.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { connect, createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { Agent, request } from 'undici';
import { startGateway, eventually, metricValue, scrape, type GatewayProcess } from '../support/gateway-process.ts';
import { isRefused } from '../support/http.ts';
import { makePki } from '../support/certs.ts';
import { requireTool } from '../support/system-tool.ts';

const openssl = requireTool('openssl', 'openssl');
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
    // SIGHUP is the trigger: with the file also watched, a write and its SIGHUP can be two reloads
    // on a busy machine, and the refused config at the end would count twice.
    reload: { watch: false },
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

// ---- E6a: all or nothing ----

/** A port held by a plain TCP server, so that binding it fails with EADDRINUSE. */
async function holdPort(): Promise<{ server: Server; address: string }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, address: `127.0.0.1:${(server.address() as { port: number }).port}` };
}

/** A free port: bound once, then released. */
async function freeAddress(): Promise<string> {
  const { server, address } = await holdPort();
  await new Promise((resolve) => server.close(resolve));
  return address;
}

/** `extraModel` adds a model in the same file: it must apply only if the whole reload does. */
function e6aConfig(options: { proxy: Record<string, unknown>; extraModel?: boolean; extraListeners?: Record<string, unknown>[]; workers?: number }) {
  return {
    workers: options.workers ?? 1,
    // SIGHUP is the trigger here: with the file also watched, a write and its SIGHUP could be two
    // reloads (the watch's settle time can pass before the signal is handled on a busy machine),
    // and each failure counts.
    reload: { watch: false },
    listeners: [{ name: 'proxy', role: 'proxy', ...options.proxy }, { name: 'admin', address: '127.0.0.1:0', role: 'admin' }, ...(options.extraListeners ?? [])],
    providers: [{ name: 'main', type: 'openai', base_url: `${mock.url}/v1` }],
    models: [{ name: 'm', provider: 'main' }, ...(options.extraModel ? [{ name: 'new-model', provider: 'main' }] : [])],
  };
}

async function chatStatus(baseUrl: string, model: string): Promise<number> {
  const agent = new Agent({ keepAliveTimeout: 10_000 });
  try {
    const res = await request(`${baseUrl}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }] }),
    });
    await res.body.text();
    return res.statusCode;
  } finally {
    await agent.close();
  }
}

async function readyzStatus(gw: GatewayProcess): Promise<number> {
  const res = await fetch(`${gw.adminUrl}/readyz`);
  await res.text();
  return res.status;
}

/** Sends SIGHUP with `config` in the file; returns the outcome line, which must be `event`. */
async function reloadWith(gw: GatewayProcess, config: object, event: 'config_reloaded' | 'config_reload_failed'): Promise<Record<string, unknown>> {
  const start = gw.logs.length;
  writeFileSync(gw.configFile, stringify(config));
  gw.signal('SIGHUP');
  const line = await gw.waitForLog((l) => (l.event === 'config_reloaded' || l.event === 'config_reload_failed') && gw.logs.indexOf(l) >= start, 15_000);
  assert.equal(line.event, event, JSON.stringify(line));
  return line;
}

/** Asserts that the previous configuration serves exactly as before the failed reload. */
async function assertUnchanged(gw: GatewayProcess, proxyUrl: string, failuresBefore: number): Promise<void> {
  assert.equal(await chatStatus(proxyUrl, 'm'), 200, 'the old listener still serves');
  assert.equal(await chatStatus(proxyUrl, 'new-model'), 404, 'the routing change in the same file did not apply');
  assert.equal(await readyzStatus(gw), 200, '/readyz stays 200');
  const metrics = await scrape(gw);
  assert.equal(metricValue(metrics, 'sluice_config_reloads_total', { result: 'failure' }), failuresBefore + 1, 'the failure is counted');
  assert.equal(metricValue(metrics, 'sluice_config_last_reload_successful'), 0);
}

test('E6a: a reload moving a listener to an address in use changes nothing; the next valid reload applies', { timeout: 60_000 }, async () => {
  const busy = await holdPort();
  const gw = await startGateway({ config: e6aConfig({ proxy: { address: '127.0.0.1:0' } }) });
  try {
    const proxyUrl = gw.proxyUrl;
    assert.equal(await chatStatus(proxyUrl, 'm'), 200);

    const failed = await reloadWith(gw, e6aConfig({ proxy: { address: busy.address }, extraModel: true }), 'config_reload_failed');
    assert.match(String(failed.reason), /EADDRINUSE/);
    await assertUnchanged(gw, proxyUrl, 0);
    const info = (await (await fetch(`${gw.adminUrl}/server_info`)).json()) as { listeners: { name: string; accepting: boolean }[] };
    assert.ok(info.listeners.find((l) => l.name === 'proxy')?.accepting, 'the proxy listener still accepts');
    assert.ok(String(failed.reason).includes(busy.address) && String(failed.reason).includes('"proxy"'), `the reason names the listener and address: ${String(failed.reason)}`);

    // The next valid reload (the same move, to a free port) applies normally.
    const target = await freeAddress();
    await reloadWith(gw, e6aConfig({ proxy: { address: target }, extraModel: true }), 'config_reloaded');
    assert.equal(await chatStatus(`http://${target}`, 'new-model'), 200, 'the new listener serves the new model');
    assert.equal(await readyzStatus(gw), 200);
    assert.ok(await isRefused(proxyUrl), 'the old address is closed');
    assert.equal(metricValue(await scrape(gw), 'sluice_config_last_reload_successful'), 1);
  } finally {
    busy.server.close();
    await gw.stop();
  }
});

test('E6a: a reload naming a missing TLS certificate is refused whole; the old config keeps serving', { timeout: 60_000 }, async () => {
  // A fixed address, so that the reloaded config names the same socket.
  const address = await freeAddress();
  const gw = await startGateway({ config: e6aConfig({ proxy: { address } }) });
  try {
    const proxyUrl = gw.proxyUrl;
    const missing = { cert_file: join(gw.configFile, '..', 'missing.crt'), key_file: join(gw.configFile, '..', 'missing.key') };

    // TLS switched on for the proxy listener (same address), with a certificate that does not exist.
    const onProxy = await reloadWith(gw, e6aConfig({ proxy: { address, tls: missing }, extraModel: true }), 'config_reload_failed');
    assert.match(String(onProxy.reason), /missing\.crt/);
    await assertUnchanged(gw, proxyUrl, 0);
    assert.match(String(onProxy.reason), /"proxy"/, 'the reason names the listener');

    // A new TLS listener next to the others, with the same missing certificate: nothing starts.
    const extra = { name: 'secure', address: '127.0.0.1:0', role: 'proxy', tls: missing };
    const onNew = await reloadWith(gw, e6aConfig({ proxy: { address }, extraModel: true, extraListeners: [extra] }), 'config_reload_failed');
    assert.match(String(onNew.reason), /secure.*missing\.crt/);
    await assertUnchanged(gw, proxyUrl, 1);
    assert.ok(!gw.logs.some((l) => l.event === 'listener_started' && l.listener === 'secure'));

    // The next valid reload applies: the new model is served on the same socket.
    await reloadWith(gw, e6aConfig({ proxy: { address }, extraModel: true }), 'config_reloaded');
    assert.equal(await chatStatus(proxyUrl, 'new-model'), 200);
    assert.equal(await readyzStatus(gw), 200);
  } finally {
    await gw.stop();
  }
});

test('E6a: a listener renamed on the same address is replaced without losing the address', { timeout: 60_000 }, async () => {
  const gw = await startGateway({ config: e6aConfig({ proxy: { address: '127.0.0.1:0' } }) });
  try {
    const address = new URL(gw.proxyUrl).host;
    const renamed = e6aConfig({ proxy: { address }, extraModel: true });
    renamed.listeners[0]!.name = 'ingress';
    await reloadWith(gw, renamed, 'config_reloaded');
    assert.ok(gw.logs.some((l) => l.event === 'listener_started' && l.listener === 'ingress' && l.address === address));
    assert.equal(await chatStatus(gw.proxyUrl, 'new-model'), 200);
    assert.equal(await readyzStatus(gw), 200);
  } finally {
    await gw.stop();
  }
});

test('E6a: TLS switched on for a listener on the same address: the new listener takes the socket (not one connection refused) and serves', { skip: openssl.skip, timeout: 60_000 }, async () => {
  const pki = makePki();
  const address = await freeAddress();
  const gw = await startGateway({ config: e6aConfig({ proxy: { address } }) });
  const plain = new Agent({ keepAliveTimeout: 30_000 });
  const secure = new Agent({ connect: { ca: pki.caPem } });
  try {
    // A request in flight on the plain listener across the switch finishes normally.
    const slow = request(`http://${address}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: plain,
      headers: { 'content-type': 'application/json', ...mockHeader({ headersDelayMs: 3000 }) },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
    }).then(async (res) => ({ status: res.statusCode, connection: res.headers.connection, text: await res.body.text() }));
    // (The /server_info request counts itself.)
    await eventually(async () => ((await (await fetch(`${gw.adminUrl}/server_info`)).json()) as { in_flight: number }).in_flight === 2, 5000, 'request in flight');
    // Clients connecting all through the switch: the new listener takes the old one's socket, so
    // not one connection is refused (the socket never closes).
    let hammering = true;
    const connects = { tried: 0, refused: 0 };
    const hammer = (async () => {
      const [host, port] = address.split(':');
      while (hammering) {
        connects.tried++;
        await new Promise<void>((resolve) => {
          const s = connect(Number(port), host);
          s.once('connect', () => (s.destroy(), resolve()));
          s.once('error', (e: NodeJS.ErrnoException) => {
            if (e.code === 'ECONNREFUSED') connects.refused++;
            resolve();
          });
        });
      }
    })();
    await reloadWith(gw, e6aConfig({ proxy: { address, tls: { cert_file: pki.server.cert, key_file: pki.server.key } }, extraModel: true }), 'config_reloaded');
    await new Promise((r) => setTimeout(r, 100));
    hammering = false;
    await hammer;
    assert.ok(connects.tried > 20, `connections tried during the switch: ${connects.tried}`);
    assert.equal(connects.refused, 0, `refused during the switch: ${connects.refused} of ${connects.tried}`);
    const res = await request(`https://${address}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: secure,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'new-model', messages: [{ role: 'user', content: 'x' }] }),
    });
    await res.body.text();
    assert.equal(res.statusCode, 200, 'the TLS listener serves the new routing');
    assert.equal(await readyzStatus(gw), 200);
    const done = await slow;
    assert.equal(done.status, 200, 'the request on the old socket finished');
    assert.equal(done.connection, 'close', 'and its connection was retired');
  } finally {
    await plain.close();
    await secure.close();
    await gw.stop();
  }
});

test('E6a: with workers, a reload that a worker cannot apply changes nothing anywhere and the supervisor reports it', { timeout: 60_000 }, async () => {
  const busy = await holdPort();
  const gw = await startGateway({ config: e6aConfig({ proxy: { address: '127.0.0.1:0' }, workers: 2 }) });
  try {
    const proxyUrl = gw.proxyUrl;
    // The supervisor's line (no `worker` field) says which worker failed and why.
    const before = gw.logs.length;
    writeFileSync(gw.configFile, stringify(e6aConfig({ proxy: { address: busy.address }, extraModel: true, workers: 2 })));
    gw.signal('SIGHUP');
    const failed = await gw.waitForLog((l) => l.event === 'config_reload_failed' && l.worker === undefined && gw.logs.indexOf(l) >= before, 20_000);
    assert.match(String(failed.reason), /worker \d: .*EADDRINUSE/);
    assert.ok(!gw.logs.slice(before).some((l) => l.event === 'config_reloaded'), 'no process switched');
    for (let i = 0; i < 4; i++) assert.equal(await chatStatus(proxyUrl, 'new-model'), 404, 'no worker took the new routing');
    await assertUnchanged(gw, proxyUrl, 0);

    // The next valid reload applies in every process.
    const target = await freeAddress();
    const reloaded = gw.logs.filter((l) => l.event === 'config_reloaded').length;
    writeFileSync(gw.configFile, stringify(e6aConfig({ proxy: { address: target }, extraModel: true, workers: 2 })));
    gw.signal('SIGHUP');
    await eventually(() => gw.logs.filter((l) => l.event === 'config_reloaded').length === reloaded + 3, 20_000, 'config_reloaded in all three processes');
    for (let i = 0; i < 4; i++) assert.equal(await chatStatus(`http://${target}`, 'new-model'), 200);
    assert.equal(await readyzStatus(gw), 200);
  } finally {
    busy.server.close();
    await gw.stop();
  }
});
