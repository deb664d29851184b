// `workers: 2` against the built program: the supervisor keeps the admin listener, its workers share
// the proxy listener, and a drain, a forced drain, a health-check change, a reload and a dead worker
// are all handled by the group as one gateway.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { stringify } from 'yaml';
import { eventually, metricValue, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream } from '../support/mock-upstream.ts';
import { httpRequest, postJson, postJsonKeepAlive } from '../support/http.ts';
import { Agent, request as undiciRequest } from 'undici';
import { sumMetric } from '../support/reliability.ts';
import { freePort } from '../support/haproxy.ts';
import { connect as http2Connect, type ClientHttp2Session } from 'node:http2';
import { makePki } from '../support/certs.ts';
import { requireTool } from '../support/system-tool.ts';

const openssl = requireTool('openssl', 'openssl');

let mock: MockUpstream;

before(async () => {
  mock = await startMockUpstream();
});
after(async () => {
  await mock?.close();
});

function config(extra: Record<string, unknown> = {}) {
  return {
    workers: 2,
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' }],
    models: [{ name: 'm', provider: 'up' }],
    ...extra,
  };
}

const chat = (extra: Record<string, unknown> = {}) => ({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra });

interface WorkerInfo {
  worker: number;
  pid: number;
  state: string;
  ready: boolean;
  in_flight: number;
  drain: { exit: boolean } | null;
}

async function workersOf(gw: GatewayProcess): Promise<WorkerInfo[]> {
  const info = JSON.parse((await httpRequest(`${gw.adminUrl}/server_info`)).body) as { workers: WorkerInfo[] };
  return info.workers;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** `count` requests, each on its own connection (so they spread over the workers), all answered. */
async function statuses(url: string, count: number, headers: Record<string, string> = {}): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < count; i++) out.push((await httpRequest(url, { headers })).status);
  return out;
}

async function streamText(url: string, body: unknown, headers: Record<string, string>): Promise<string> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  assert.equal(res.status, 200);
  let text = '';
  const decoder = new TextDecoder();
  for await (const chunk of res.body!) text += decoder.decode(chunk, { stream: true });
  return text;
}

test('both workers serve the proxy listener; the admin listener reports and counts the whole group', async () => {
  const gw = await startGateway({ config: config() });
  try {
    const workers = await workersOf(gw);
    assert.equal(workers.length, 2);
    const pids = new Set(workers.map((w) => w.pid));
    assert.equal(pids.size, 2);
    assert.ok(!pids.has(gw.child.pid!), 'workers are processes of their own');
    assert.ok(workers.every((w) => w.ready && w.state === 'serving'));
    for (let i = 0; i < 30; i++) assert.equal((await postJson(`${gw.proxyUrl}/v1/chat/completions`, chat())).status, 200);
    // Every connection was accepted by one of the two workers, in turn.
    const served = await eventually(() => {
      const seen = new Set(gw.logs.filter((l) => l.event === 'access' && l.listener === 'proxy').map((l) => l.worker));
      return seen.size === 2 ? seen : undefined;
    }, 5000, 'access lines from both workers');
    assert.deepEqual([...served!].sort(), [1, 2]);
    const metrics = await scrape(gw);
    assert.equal(sumMetric(metrics, 'sluice_requests_total', (l) => l.endpoint === 'chat_completions' && l.status === '200'), 30);
    assert.equal(metricValue(metrics, 'sluice_workers', { state: 'ready' }), 2);
    assert.equal(metricValue(metrics, 'sluice_draining'), 0);
    const verbose = JSON.parse((await httpRequest(`${gw.adminUrl}/readyz?verbose`)).body) as { checks: { name: string; status: string }[] };
    assert.deepEqual(verbose.checks.find((c) => c.name === 'workers_ready'), { name: 'workers_ready', status: 'pass' });
  } finally {
    await gw.stop();
  }
});

test('the workers share stdout without tearing a line: 600 concurrent requests, 600 whole access lines', async () => {
  const gw = await startGateway({ config: config() });
  try {
    const agent = new Agent({ connections: 24 });
    const body = JSON.stringify(chat({ messages: [{ role: 'user', content: 'é'.repeat(300) }] }));
    const statuses = await Promise.all(
      Array.from({ length: 600 }, async () => {
        const res = await undiciRequest(`${gw.proxyUrl}/v1/chat/completions`, { method: 'POST', body, headers: { 'content-type': 'application/json' }, dispatcher: agent });
        await res.body.text();
        return res.statusCode;
      }),
    );
    await agent.close();
    assert.ok(statuses.every((s) => s === 200));
    const access = () => gw.logs.filter((l) => l.event === 'access' && l.listener === 'proxy');
    await eventually(() => access().length === 600, 5000, '600 access lines');
    assert.deepEqual(gw.logs.filter((l) => l.event === 'unparsed'), []);
    assert.deepEqual(new Set(access().map((l) => l.worker)), new Set([1, 2]));
  } finally {
    await gw.stop();
  }
});

test('L1/L2/L3/L5: SIGTERM drains the group as one: every worker fails readiness, serves the window, finishes its streams, and the group exits 0 after the last one', async () => {
  const gw = await startGateway({ config: config({ shutdown: { min_drain_secs: 1, progress_log_secs: 1 } }) });
  try {
    const pids = (await workersOf(gw)).map((w) => w.pid);
    const before = mock.received.length;
    const scenario = mockHeader({ chunks: 25, sseIntervalMs: 100 });
    // Two streams on two connections: one per worker, as the supervisor hands connections out in turn.
    const streams = [0, 1].map(() => streamText(`${gw.proxyUrl}/v1/chat/completions`, chat({ stream: true }), scenario).then((text) => ({ text, at: Date.now() })));
    await eventually(() => mock.received.length >= before + 2, 5000, 'both streams upstream');
    const streaming = await workersOf(gw);
    assert.ok(streaming.every((w) => w.in_flight === 1), `a stream on each worker: ${JSON.stringify(streaming)}`);
    gw.signal('SIGTERM');
    // L1 on every worker: each of several fresh connections (alternating workers) reads 503.
    await eventually(async () => (await statuses(`${gw.proxyUrl}/readyz`, 4)).every((s) => s === 503), 2000, 'proxy readyz 503 on every worker');
    assert.equal((await httpRequest(`${gw.adminUrl}/readyz`)).status, 503);
    // L2: inside the window, new connections are still served, with Connection: close (L3), though
    // the client asks to keep them.
    for (let i = 0; i < 4; i++) {
      const during = await postJsonKeepAlive(`${gw.proxyUrl}/v1/chat/completions`, chat());
      assert.equal(during.status, 200);
      assert.equal(during.headers.connection, 'close');
    }
    const finished = await Promise.all(streams);
    for (const { text } of finished) {
      assert.ok(text.trimEnd().endsWith('data: [DONE]'), `stream complete: ${text.slice(-200)}`);
      assert.ok(!text.includes('event: error'));
    }
    const exit = await gw.exited;
    assert.equal(exit.code, 0, gw.stderr());
    assert.ok(exit.at >= Math.max(...finished.map((f) => f.at)), 'the group outlived its streams');
    for (const pid of pids) assert.equal(alive(pid), false, `worker ${pid} exited`);
    const exits = gw.logs.filter((l) => l.event === 'process_exit');
    assert.deepEqual(exits.map((l) => l.worker ?? 'supervisor').sort(), [1, 2, 'supervisor']);
    assert.ok(exits.every((l) => l.exit_code === 0));
  } finally {
    await gw.stop();
  }
});

test('L8: a second signal forces the whole group: streams end with an error event and the group exits 1 at once', async () => {
  const gw = await startGateway({ config: config({ shutdown: { min_drain_secs: 30 } }) });
  try {
    const pids = (await workersOf(gw)).map((w) => w.pid);
    const before = mock.received.length;
    const stream = streamText(`${gw.proxyUrl}/v1/chat/completions`, chat({ stream: true }), mockHeader({ chunks: 200, sseIntervalMs: 100 }));
    await eventually(() => mock.received.length > before, 5000, 'stream upstream');
    gw.signal('SIGTERM');
    await eventually(() => gw.logs.filter((l) => l.event === 'drain_started').length === 3, 3000, 'drain_started in the supervisor and both workers');
    const forcedAt = Date.now();
    gw.signal('SIGTERM');
    const text = await stream;
    assert.match(text, /event: error/);
    const exit = await gw.exited;
    assert.equal(exit.code, 1);
    assert.ok(exit.at - forcedAt < 3000, `exited ${exit.at - forcedAt} ms after the second signal`);
    for (const pid of pids) assert.equal(alive(pid), false, `worker ${pid} exited`);
  } finally {
    await gw.stop();
  }
});

test('E4: the admin health-check override and a drain without exit reach every worker', async () => {
  const gw = await startGateway({ config: config({ shutdown: { min_drain_secs: 30, drain_time_secs: 1, progress_log_secs: 0.25 } }) });
  try {
    assert.deepEqual(await statuses(`${gw.proxyUrl}/readyz`, 4), [200, 200, 200, 200]);
    assert.equal((await httpRequest(`${gw.adminUrl}/healthcheck/fail`, { method: 'POST' })).status, 200);
    await eventually(async () => (await statuses(`${gw.proxyUrl}/readyz`, 4)).every((s) => s === 503), 2000, 'every worker not ready');
    assert.equal((await httpRequest(`${gw.adminUrl}/healthcheck/ok`, { method: 'POST' })).status, 200);
    await eventually(async () => (await statuses(`${gw.proxyUrl}/readyz`, 4)).every((s) => s === 200), 2000, 'every worker ready again');

    assert.equal((await httpRequest(`${gw.adminUrl}/drain_listeners?graceful&skip_exit`, { method: 'POST' })).status, 200);
    const workers = await eventually(async () => {
      const list = await workersOf(gw);
      return list.every((w) => w.drain && w.drain.exit === false) ? list : undefined;
    }, 2000, 'every worker draining without exit');
    assert.equal(workers!.length, 2);
    // skip_exit: past the drain time everyone is still there, not ready, and still answers.
    for (const slot of [1, 2]) await gw.waitForLog((l) => l.event === 'drain_progress' && l.worker === slot && Number(l.elapsed_secs) >= 1.5);
    assert.equal(gw.child.exitCode, null);
    assert.ok((await workersOf(gw)).every((w) => w.state === 'draining'));
    assert.equal((await httpRequest(`${gw.adminUrl}/readyz`)).status, 503);
    // A signal widens the drain to exiting, for the whole group.
    gw.signal('SIGTERM');
    assert.equal((await gw.exited).code, 0);
  } finally {
    await gw.stop();
  }
});

test('a worker that dies while serving is restarted; the other keeps serving meanwhile', async () => {
  const gw = await startGateway({ config: config() });
  try {
    const [victim, survivor] = await workersOf(gw);
    process.kill(victim!.pid, 'SIGKILL');
    const died = await gw.waitForLog((l) => l.event === 'worker_exited' && l.worker === victim!.worker);
    assert.equal(died.level, 'error');
    assert.equal(died.signal, 'SIGKILL');
    // Meanwhile, every request is served (by the survivor).
    for (let i = 0; i < 6; i++) assert.equal((await postJson(`${gw.proxyUrl}/v1/chat/completions`, chat())).status, 200);
    await gw.waitForLog((l) => l.event === 'worker_ready' && l.worker === victim!.worker && l.worker_pid !== victim!.pid);
    const after = await eventually(async () => {
      const list = await workersOf(gw);
      return list.every((w) => w.ready) ? list : undefined;
    }, 5000, 'both workers ready');
    assert.equal(after!.find((w) => w.worker === survivor!.worker)!.pid, survivor!.pid);
    assert.notEqual(after!.find((w) => w.worker === victim!.worker)!.pid, victim!.pid);
    assert.equal(metricValue(await scrape(gw), 'sluice_worker_restarts'), 1);
    assert.deepEqual(await statuses(`${gw.proxyUrl}/readyz`, 4), [200, 200, 200, 200]);
  } finally {
    await gw.stop();
  }
});

test('E6: SIGHUP: the supervisor checks the new config, every worker applies it; a bad one reaches no worker', async () => {
  // Fixed ports: a reload that turned port 0 into the port in use would be a change of address.
  const listeners = [
    { name: 'proxy', address: `127.0.0.1:${await freePort()}`, role: 'proxy' },
    { name: 'admin', address: `127.0.0.1:${await freePort()}`, role: 'admin' },
  ];
  // SIGHUP alone: the file watch (reload.watch) would reload each write by itself.
  const gw = await startGateway({ config: config({ listeners, reload: { watch: false } }) });
  try {
    const key = 'sk-client-0123456789';
    writeFileSync(gw.configFile, stringify(config({ listeners, keys: [key], reload: { watch: false } })));
    gw.signal('SIGHUP');
    await eventually(() => gw.logs.filter((l) => l.event === 'config_reloaded').length === 3, 5000, 'config_reloaded in all three processes');
    const url = `${gw.proxyUrl}/v1/chat/completions`;
    for (let i = 0; i < 4; i++) assert.equal((await postJson(url, chat())).status, 401);
    for (let i = 0; i < 4; i++) assert.equal((await postJson(url, chat(), { authorization: `Bearer ${key}` })).status, 200);

    writeFileSync(gw.configFile, 'workers: 2\nlisteners: []\n');
    gw.signal('SIGHUP');
    await gw.waitForLog((l) => l.event === 'config_reload_failed');
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(gw.logs.filter((l) => l.event === 'config_reload_failed').length, 1, 'only the supervisor read the bad file');
    for (let i = 0; i < 4; i++) assert.equal((await postJson(url, chat(), { authorization: `Bearer ${key}` })).status, 200);
    assert.equal(metricValue(await scrape(gw), 'sluice_config_last_reload_successful'), 0);
  } finally {
    await gw.stop();
  }
});

test('the group does not start (exit 1) when its workers cannot bind the proxy address', async () => {
  const blocker = createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const { port } = blocker.address() as { port: number };
  const gw = await startGateway({
    config: config({ listeners: [{ name: 'proxy', address: `127.0.0.1:${port}`, role: 'proxy' }, { name: 'admin', address: '127.0.0.1:0', role: 'admin' }] }),
    waitReady: false,
  });
  try {
    const exit = await gw.exited;
    assert.equal(exit.code, 1);
    const failed = gw.logs.find((l) => l.event === 'start_failed' && l.worker === undefined);
    assert.ok(failed, gw.stdout());
    assert.match(String(failed.msg), /EADDRINUSE/);
  } finally {
    blocker.close();
    await gw.stop();
  }
});

test('workers whose supervisor is killed finish what they hold and exit instead of staying orphaned', async () => {
  const gw = await startGateway({ config: config() });
  try {
    const pids = (await workersOf(gw)).map((w) => w.pid);
    gw.signal('SIGKILL');
    await gw.exited;
    await eventually(() => pids.every((pid) => !alive(pid)), 5000, 'workers gone');
  } finally {
    await gw.stop();
  }
});

test('L4: over TLS with HTTP/2 (ALPN) too: each worker serves its sessions, and the drain sends every session GOAWAY', { skip: openssl.skip }, async () => {
  const pki = makePki();
  const gw = await startGateway({
    config: config({
      listeners: [
        { name: 'proxy', address: '127.0.0.1:0', role: 'proxy', tls: { cert_file: pki.server.cert, key_file: pki.server.key }, protocols: ['h2'] },
        { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
      ],
      shutdown: { min_drain_secs: 1 },
      downstream: { drain_timeout_secs: 0.5 },
    }),
  });
  const sessions: ClientHttp2Session[] = [];
  try {
    const url = gw.proxyUrl.replace('http:', 'https:');
    for (let i = 0; i < 4; i++) {
      const session = http2Connect(url, { ca: pki.caPem, servername: 'localhost' });
      await new Promise<void>((resolve, reject) => {
        session.once('connect', () => resolve());
        session.once('error', reject);
      });
      sessions.push(session);
    }
    const post = (session: ClientHttp2Session) =>
      new Promise<number>((resolve, reject) => {
        const stream = session.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' });
        let status = 0;
        stream.on('response', (h) => (status = Number(h[':status'])));
        stream.on('data', () => {});
        stream.on('end', () => resolve(status));
        stream.on('error', reject);
        stream.end(JSON.stringify(chat()));
      });
    assert.deepEqual(await Promise.all(sessions.map(post)), [200, 200, 200, 200]);
    const served = new Set(gw.logs.filter((l) => l.event === 'access' && l.listener === 'proxy').map((l) => l.worker));
    await eventually(() => {
      for (const l of gw.logs) if (l.event === 'access' && l.listener === 'proxy') served.add(l.worker);
      return served.size === 2;
    }, 5000, 'h2 requests served by both workers');
    const goaways = sessions.map((session) => new Promise<void>((resolve) => session.once('goaway', () => resolve())));
    gw.signal('SIGTERM');
    await Promise.all(goaways);
    assert.equal((await gw.exited).code, 0);
  } finally {
    for (const session of sessions) session.destroy();
    await gw.stop();
  }
});

test('O1: the supervisor logs its drain_started (the group\'s sums) before its process_exit, which is its last line, even when the group exits at once', async () => {
  // No window and nothing in flight: the workers exit as soon as they are told to drain, which may
  // be before they answer the supervisor's query for the group's numbers.
  for (let round = 0; round < 4; round++) {
    const gw = await startGateway({ config: config({ shutdown: { min_drain_secs: 0 } }) });
    try {
      gw.signal('SIGTERM');
      assert.equal((await gw.exited).code, 0, gw.stderr());
      const own = gw.logs.filter((l) => l.worker === undefined && typeof l.event === 'string');
      const events = own.map((l) => l.event);
      const started = events.indexOf('drain_started');
      assert.ok(started >= 0, `the supervisor logged drain_started: ${events.join(', ')}`);
      assert.ok(started < events.indexOf('process_exit'), `drain_started before process_exit: ${events.join(', ')}`);
      assert.equal(events.at(-1), 'process_exit', `process_exit is the supervisor's last line: ${events.join(', ')}`);
      assert.equal(own[started]!.in_flight, 0);
    } finally {
      await gw.stop();
    }
  }
});

test('O1: config_reloaded counts every listener of the group (admin and proxy) in every process', async () => {
  const listeners = [
    { name: 'proxy', address: `127.0.0.1:${await freePort()}`, role: 'proxy' },
    { name: 'admin', address: `127.0.0.1:${await freePort()}`, role: 'admin' },
  ];
  const gw = await startGateway({ config: config({ listeners, reload: { watch: false } }) });
  try {
    writeFileSync(gw.configFile, stringify(config({ listeners, keys: ['sk-client-0123456789'], reload: { watch: false } })));
    gw.signal('SIGHUP');
    const lines = (await eventually(() => {
      const found = gw.logs.filter((l) => l.event === 'config_reloaded');
      return found.length === 3 ? found : undefined;
    }, 10_000, 'config_reloaded in all three processes'))!;
    assert.deepEqual(lines.map((l) => [l.worker ?? 'supervisor', l.listeners, l.keys]).sort(), [[1, 2, 1], [2, 2, 1], ['supervisor', 2, 1]]);
  } finally {
    await gw.stop();
  }
});
