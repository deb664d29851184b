// The promise itself: a rolling restart of two instances behind a real HAProxy (health check on
// /readyz) under mixed JSON and SSE load loses nothing. The control run replaces the drain with
// what a process without one does on SIGTERM (it dies at once), and must lose requests, which
// shows the test can fail.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Agent, request } from 'undici';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream } from '../support/mock-upstream.ts';
import { requireTool } from '../support/system-tool.ts';
import { startHaproxy, freePort } from '../support/haproxy.ts';

const haproxy = requireTool('haproxy', 'haproxy');
let mock: MockUpstream;

before(async () => {
  mock = await startMockUpstream({ record: false });
});
after(async () => {
  await mock?.close();
});

async function instance(port: number): Promise<GatewayProcess> {
  return startGateway({
    config: {
      listeners: [
        { name: 'proxy', address: `127.0.0.1:${port}`, role: 'proxy' },
        { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
      ],
      providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }],
      models: [{ name: 'm', provider: 'up' }],
      // The window covers HAProxy's detection (one failed check every 200 ms) with margin.
      shutdown: { min_drain_secs: 1.5 },
      log: { level: 'info', access_log: true },
    },
  });
}

interface LoadResult {
  ok: number;
  failures: string[];
}

/** Workers sending a mix of JSON (with upstream delays) and SSE streams until stopped. */
function runLoad(url: string, workers: number): { stop(): Promise<LoadResult> } {
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: workers });
  const result: LoadResult = { ok: 0, failures: [] };
  let running = true;
  const one = async (i: number) => {
    const stream = i % 3 === 0;
    const headers = {
      'content-type': 'application/json',
      ...mockHeader(stream ? { chunks: 8, sseIntervalMs: 60 } : { headersDelayMs: (i * 37) % 250 }),
    };
    const body = JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content: `req ${i}` }] });
    try {
      const res = await request(`${url}/v1/chat/completions`, { method: 'POST', headers, body, dispatcher: agent });
      const text = await res.body.text();
      if (res.statusCode !== 200) result.failures.push(`status ${res.statusCode}: ${text.slice(0, 200)}`);
      else if (stream && (!text.includes('data: [DONE]') || text.includes('event: error'))) result.failures.push(`stream incomplete: …${text.slice(-120)}`);
      else result.ok++;
    } catch (error) {
      result.failures.push(`error: ${(error as Error).message}`);
    }
  };
  let counter = 0;
  const loops = Array.from({ length: workers }, async () => {
    while (running) await one(counter++);
  });
  return {
    async stop() {
      running = false;
      await Promise.all(loops);
      await agent.close();
      return result;
    },
  };
}

async function servedSince(gw: GatewayProcess, from: number): Promise<void> {
  await gw.waitForLog((l) => l.event === 'access' && l.path === '/v1/chat/completions' && gw.logs.indexOf(l) >= from, 10_000);
}

async function rollingRestart(kill: 'drain' | 'no-drain'): Promise<LoadResult> {
  const ports = [await freePort(), await freePort()];
  const gateways = [await instance(ports[0]!), await instance(ports[1]!)];
  const lb = await startHaproxy([
    { name: 'a', port: ports[0]! },
    { name: 'b', port: ports[1]! },
  ]);
  const replacements: GatewayProcess[] = [];
  try {
    const load = runLoad(lb.url, 8);
    for (const gw of gateways) await servedSince(gw, 0);
    for (let i = 0; i < 2; i++) {
      const old = gateways[i]!;
      if (kill === 'drain') old.signal('SIGTERM');
      else old.signal('SIGKILL');
      await old.exited;
      const fresh = await instance(ports[i]!);
      replacements.push(fresh);
      // The balancer has found the new instance and sends it traffic before the next one goes.
      await servedSince(fresh, 0);
    }
    return await load.stop();
  } finally {
    await lb.stop();
    for (const gw of [...gateways, ...replacements]) await gw.stop();
  }
}

test('rolling restart of two instances behind HAProxy under mixed load loses no request', { skip: haproxy.skip, timeout: 60_000 }, async () => {
  const result = await rollingRestart('drain');
  assert.deepEqual(result.failures, []);
  assert.ok(result.ok > 50, `only ${result.ok} requests completed`);
});

test('control: the same restart without a drain (the process dies on SIGTERM) loses requests', { skip: haproxy.skip, timeout: 60_000 }, async () => {
  const result = await rollingRestart('no-drain');
  assert.ok(result.failures.length > 0, `no request lost in ${result.ok} without a drain: the rolling test could not fail`);
});
