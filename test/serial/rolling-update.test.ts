// The promise itself: a rolling restart of two instances behind a real HAProxy (health check on
// /readyz) under mixed JSON and SSE load loses nothing. The control run replaces the drain with
// what a process without one does on SIGTERM (it dies at once), and must lose requests, which
// shows the test can fail.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Agent, request } from 'undici';
import { connect as http2Connect, type ClientHttp2Session } from 'node:http2';
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

type Protocol = 'http1' | 'h2';

async function instance(port: number, protocol: Protocol, workers: number): Promise<GatewayProcess> {
  return startGateway({
    config: {
      workers,
      listeners: [
        // HTTP/1.1 for HAProxy's health checks, h2c (prior knowledge) for its HTTP/2 traffic.
        { name: 'proxy', address: `127.0.0.1:${port}`, role: 'proxy', protocols: ['http1', 'h2'] },
        { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
      ],
      providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }],
      models: [{ name: 'm', provider: 'up' }],
      // The window covers HAProxy's detection (two failed checks, 200 ms apart) with a wide margin:
      // the suite runs tests in parallel on two cores, which slows checks down.
      shutdown: { min_drain_secs: 3 },
      log: { level: 'info', access_log: true },
    },
  });
}

interface LoadResult {
  ok: number;
  failures: string[];
}

/** One POST over a shared HTTP/2 session to the balancer (reconnecting when it goes away). */
function http2Client(url: string) {
  let session: ClientHttp2Session | undefined;
  const current = () => {
    if (!session || session.closed || session.destroyed) {
      session = http2Connect(url);
      session.on('error', () => {});
    }
    return session;
  };
  return {
    post(headers: Record<string, string>, body: string): Promise<{ status: number; text: string }> {
      return new Promise((resolve, reject) => {
        const stream = current().request({ ':method': 'POST', ':path': '/v1/chat/completions', ...headers });
        let status = 0;
        let text = '';
        stream.setEncoding('utf8');
        stream.on('response', (h) => (status = Number(h[':status'])));
        stream.on('data', (chunk: string) => (text += chunk));
        stream.on('end', () => resolve({ status, text }));
        stream.on('error', reject);
        stream.end(body);
      });
    },
    close() {
      session?.close();
    },
  };
}

/** Workers sending a mix of JSON (with upstream delays) and SSE streams until stopped. */
function runLoad(url: string, workers: number, protocol: Protocol): { stop(): Promise<LoadResult> } {
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: workers });
  const h2 = protocol === 'h2' ? http2Client(url) : undefined;
  const result: LoadResult = { ok: 0, failures: [] };
  let running = true;
  const post = async (headers: Record<string, string>, body: string) => {
    if (h2) return h2.post(headers, body);
    const res = await request(`${url}/v1/chat/completions`, { method: 'POST', headers, body, dispatcher: agent });
    return { status: res.statusCode, text: await res.body.text() };
  };
  const one = async (i: number) => {
    const stream = i % 3 === 0;
    const headers = {
      'content-type': 'application/json',
      ...mockHeader(stream ? { chunks: 8, sseIntervalMs: 60 } : { headersDelayMs: (i * 37) % 250 }),
    };
    const body = JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content: `req ${i}` }] });
    try {
      const { status, text } = await post(headers, body);
      if (status !== 200) result.failures.push(`status ${status}: ${text.slice(0, 200)}`);
      else if (stream && (!text.includes('data: [DONE]') || text.includes('event: error'))) result.failures.push(`stream incomplete: …${text.slice(-120)}`);
      else result.ok++;
    } catch (error) {
      result.failures.push(`error: ${(error as Error).message}`);
      // A failing client must not spin.
      await new Promise((r) => setTimeout(r, 20));
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
      h2?.close();
      return result;
    },
  };
}

async function servedSince(gw: GatewayProcess, from: number): Promise<void> {
  await gw.waitForLog((l) => l.event === 'access' && l.path === '/v1/chat/completions' && gw.logs.indexOf(l) >= from, 10_000);
}

async function rollingRestart(kill: 'drain' | 'no-drain', protocol: Protocol = 'http1', workers = 1): Promise<LoadResult> {
  const ports = [await freePort(), await freePort()];
  const gateways = [await instance(ports[0]!, protocol, workers), await instance(ports[1]!, protocol, workers)];
  const lb = await startHaproxy(
    [
      { name: 'a', port: ports[0]! },
      { name: 'b', port: ports[1]! },
    ],
    { http2: protocol === 'h2' },
  );
  const replacements: GatewayProcess[] = [];
  const load = runLoad(lb.url, 8, protocol);
  try {
    for (const gw of gateways) await servedSince(gw, 0);
    for (let i = 0; i < 2; i++) {
      const old = gateways[i]!;
      if (kill === 'drain') old.signal('SIGTERM');
      else old.signal('SIGKILL');
      await old.exited;
      const fresh = await instance(ports[i]!, protocol, workers);
      replacements.push(fresh);
      // The balancer has found the new instance and sends it traffic before the next one goes.
      await servedSince(fresh, 0);
    }
    const result = await load.stop();
    // For whoever has to find out why a request was lost: HAProxy's log of every answer that was
    // not a clean 200 (status and termination flags).
    if (result.failures.length > 0 && kill === 'drain') {
      const unusual = lb.output().split('\n').filter((line) => line.includes(' HTTP/') && !(/ 200 /.test(line) && / ---- /.test(line)));
      console.log(`haproxy lines for non-200 answers:\n${unusual.slice(0, 20).join('\n')}`);
    }
    return result;
  } catch (error) {
    await load.stop();
    throw error;
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

test('the same rolling restart with HTTP/2 from client to HAProxy and from HAProxy to the gateways loses no request', { skip: haproxy.skip, timeout: 60_000 }, async () => {
  const result = await rollingRestart('drain', 'h2');
  assert.deepEqual(result.failures, []);
  assert.ok(result.ok > 50, `only ${result.ok} requests completed`);
});

test('the same rolling restart with two worker processes per instance loses no request', { skip: haproxy.skip, timeout: 60_000 }, async () => {
  const result = await rollingRestart('drain', 'http1', 2);
  assert.deepEqual(result.failures, []);
  assert.ok(result.ok > 50, `only ${result.ok} requests completed`);
});

test('control: the same restart without a drain (the process dies on SIGTERM) loses requests', { skip: haproxy.skip, timeout: 60_000 }, async () => {
  const result = await rollingRestart('no-drain');
  assert.ok(result.failures.length > 0, `no request lost in ${result.ok} without a drain: the rolling test could not fail`);
});
