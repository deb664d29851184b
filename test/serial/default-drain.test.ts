// A drain at the DEFAULT settings, against the built program: no `shutdown` or `downstream` keys,
// so the window is 30 s, the per-connection drain timeout 5 s, and the proactive drain (E2) runs
// in the last third of the drain time (20-25 s in). Every other drain test uses a window of 15 s or
// less, below where the proactive drain starts; this one runs about 45 s and lives with the serial
// tests. Rules from docs/graceful-shutdown.md: L1, L2, L3, L4, L5, L7, E2, E3, L9.
//
// Opened before SIGTERM and kept going through the drain:
//  - a Realtime WebSocket session exchanging a message every 2 s until 40 s (L7, E3: the drain
//    never resets it; the client closes it itself);
//  - an SSE stream over HTTP/1.1 that lasts 34 s, past the window (L5: completes with [DONE]);
//  - an HTTP/2 (h2c) session with an SSE stream of 32 s: it gets GOAWAY, the stream completes (L4);
//  - an idle pooled keep-alive HTTP/1.1 client sending a request every second (L2, L3: every one
//    served 200 with `Connection: close`, though the client asks to keep its connections, and none
//    lost on a reused connection);
//  - a fresh HTTP/2 session every 2 s (served 200 inside and after the window).
// Then the process exits 0 by itself once the session is closed (L5, L9).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Agent } from 'node:http';
import { connect as http2Connect, type ClientHttp2Session } from 'node:http2';
import { WebSocket } from 'ws';
import { startGateway, eventually, scrape, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream } from '../support/mock-upstream.ts';
import { httpRequest, postJsonKeepAlive } from '../support/http.ts';

let mock: MockUpstream;

before(async () => {
  mock = await startMockUpstream();
});
after(async () => {
  await mock?.close();
});

/** Only what points the gateway at the mock (and a second, h2c-only listener): every drain setting is the default. */
function config() {
  return {
    listeners: [
      { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
      { name: 'h2c', address: '127.0.0.1:0', role: 'proxy', protocols: ['h2'] },
      { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
    ],
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' }],
    models: [{ name: 'm', provider: 'up' }],
  };
}

const chat = (extra: Record<string, unknown> = {}) => ({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** The timeline, in ms after the signal. */
const SESSION_UNTIL_MS = 40_000;
const SSE_CHUNKS = 68; // x 500 ms: 34 s, past the 30 s window
const H2_SSE_CHUNKS = 64; // x 500 ms: 32 s

interface RealtimeSession {
  ws: WebSocket;
  /** `response.done` messages received so far. */
  done(): number;
  /** Set when the socket closed, with its code and reason. */
  closedWith(): { code: number; reason: string; at: number } | undefined;
  closed: Promise<{ code: number; reason: string; at: number }>;
}

function openRealtime(gw: GatewayProcess): Promise<RealtimeSession> {
  const ws = new WebSocket(`${gw.proxyUrl.replace('http:', 'ws:')}/v1/realtime?model=m`);
  let done = 0;
  let closedWith: { code: number; reason: string; at: number } | undefined;
  ws.on('message', (data) => {
    if ((JSON.parse(data.toString()) as { type?: string }).type === 'response.done') done++;
  });
  const closed = new Promise<{ code: number; reason: string; at: number }>((resolve) =>
    ws.on('close', (code, reason) => resolve((closedWith = { code, reason: reason.toString(), at: Date.now() }))),
  );
  ws.on('error', () => {});
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve({ ws, done: () => done, closedWith: () => closedWith, closed }));
    ws.once('unexpected-response', (_req, res) => reject(new Error(`realtime handshake answered ${res.statusCode}`)));
    ws.once('error', reject);
  });
}

function h2Session(url: string): Promise<ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2Connect(url);
    session.once('connect', () => resolve(session));
    session.once('error', reject);
  });
}

function h2Post(session: ClientHttp2Session, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json', ...headers });
    let status = 0;
    let text = '';
    stream.setEncoding('utf8');
    stream.on('response', (h) => (status = Number(h[':status'])));
    stream.on('data', (chunk: string) => (text += chunk));
    stream.on('end', () => resolve({ status, body: text }));
    stream.on('error', reject);
    stream.end(JSON.stringify(body));
  });
}

function assertCompleteStream(body: string, chunks: number, what: string): void {
  const events = body.split('\n').filter((l) => l.startsWith('data: '));
  assert.ok(!body.includes('event: error'), `${what}: an error event: ${body.slice(-300)}`);
  assert.equal(events.at(-1), 'data: [DONE]', `${what}: no [DONE] at the end: ${body.slice(-300)}`);
  assert.ok(events.filter((e) => e.includes('"content"')).length >= chunks, `${what}: ${events.length} events, want ${chunks} content chunks`);
}

/** Downstream connections closed so far, by listener and reason (for failure messages). */
async function closeReasons(gw: GatewayProcess): Promise<string> {
  try {
    const lines = (await scrape(gw)).split('\n').filter((l) => l.startsWith('sluice_connections_closed_total{'));
    return `connections closed: ${lines.map((l) => l.replace('sluice_connections_closed_total', '')).join(', ')}`;
  } catch (error) {
    return `(no metrics: ${String(error)})`;
  }
}

interface PooledResult {
  sentAt: number;
  status?: number;
  connection?: string | undefined;
  error?: string;
}

test('L1/L2/L3/L4/L5/L7/E2/E3 at the default settings (window 30 s, drain timeouts 5 s, proactive drain): the Realtime session, an SSE stream, HTTP/2 and an idle pooled client all get through a drain of about 40 s; the process then exits 0', { timeout: 120_000 }, async () => {
  const gw = await startGateway({ config: config() });
  const h2Url = gw.urls.h2c!;
  const pool = new Agent({ keepAlive: true, maxSockets: 4 });
  const sessions: ClientHttp2Session[] = [];
  let stop = false;
  try {
    assert.ok(h2Url, 'the h2c listener started');
    const url = `${gw.proxyUrl}/v1/chat/completions`;
    // The idle pooled client: four kept-alive connections, idle when the signal comes.
    const warm = await Promise.all(Array.from({ length: 4 }, () => postJsonKeepAlive(url, chat(), {}, pool)));
    for (const res of warm) {
      assert.equal(res.status, 200);
      assert.equal(res.headers.connection, 'keep-alive', 'control: before the drain the pooled client keeps its connections');
    }
    const realtime = await openRealtime(gw);
    const h2 = await h2Session(h2Url);
    sessions.push(h2);
    const goaways: number[] = [];
    h2.on('goaway', (_code: number, lastStreamId: number) => goaways.push(lastStreamId));
    h2.on('error', () => {});
    const before = mock.received.length;
    const sse = fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...mockHeader({ chunks: SSE_CHUNKS, sseIntervalMs: 500 }) },
      body: JSON.stringify(chat({ stream: true })),
    })
      .then(async (res) => ({ status: res.status, body: await res.text(), at: Date.now(), error: undefined }))
      .catch((error: unknown) => ({ status: 0, body: '', at: Date.now(), error: `${String(error)} (${String((error as Error).cause)})` }));
    const h2Sse = h2Post(h2, chat({ stream: true }), mockHeader({ chunks: H2_SSE_CHUNKS, sseIntervalMs: 500 }))
      .then((r) => ({ ...r, at: Date.now(), error: undefined }))
      .catch((error: unknown) => ({ status: 0, body: '', at: Date.now(), error: String(error) }));
    // Both streams have reached the upstream before the signal.
    const upstreamHas = (chunks: number) => (r: typeof mock.received) => r.slice(before).some((x) => String(x.headers['x-mock']).includes(`"chunks":${chunks},`));
    await mock.waitFor(upstreamHas(SSE_CHUNKS), 5000);
    await mock.waitFor(upstreamHas(H2_SSE_CHUNKS), 5000);

    const signalledAt = Date.now();
    gw.signal('SIGTERM');
    // L1: not ready at once, still live.
    await eventually(async () => (await httpRequest(`${gw.proxyUrl}/readyz`)).status === 503, 2000, '/readyz 503 after the signal');
    const readyAfter = Date.now() - signalledAt;
    assert.ok(readyAfter < 1000, `/readyz turned 503 ${readyAfter} ms after the signal`);
    assert.equal((await httpRequest(`${gw.proxyUrl}/livez`)).status, 200, '/livez stays 200');
    await gw.waitForLog((l) => l.event === 'drain_started');
    const drainSeenAt = Date.now();
    const elapsed = () => Date.now() - signalledAt;

    // (c) The pooled client: one request a second, on whichever kept-alive connection it has.
    const pooled: PooledResult[] = [];
    const pooledLoop = (async () => {
      while (!stop && elapsed() < SESSION_UNTIL_MS + 5000) {
        const result: PooledResult = { sentAt: Date.now() };
        try {
          const res = await postJsonKeepAlive(url, chat(), {}, pool);
          result.status = res.status;
          result.connection = res.headers.connection;
        } catch (error) {
          result.error = String(error);
        }
        pooled.push(result);
        await sleep(result.sentAt + 1000 - Date.now());
      }
    })();

    // (d) A fresh HTTP/2 session every 2 s, as a client told to go away (GOAWAY) does.
    const h2Results: { at: number; status?: number; error?: string }[] = [];
    const h2Loop = (async () => {
      while (!stop && elapsed() < SESSION_UNTIL_MS + 5000) {
        const at = Date.now();
        try {
          const session = await h2Session(h2Url);
          sessions.push(session);
          session.on('error', () => {});
          h2Results.push({ at, status: (await h2Post(session, chat())).status });
          session.close();
        } catch (error) {
          h2Results.push({ at, error: String(error) });
        }
        await sleep(at + 2000 - Date.now());
      }
    })();

    // (a) The Realtime session exchanges a message every 2 s until 40 s; the drain must not end it.
    let exchanges = 0;
    while (elapsed() < SESSION_UNTIL_MS) {
      const sentAt = Date.now();
      const want = realtime.done() + 1;
      realtime.ws.send(JSON.stringify({ type: 'response.create' }));
      await eventually(
        () => realtime.done() >= want || realtime.closedWith() !== undefined,
        5000,
        `response.done on the Realtime session ${sentAt - signalledAt} ms into the drain`,
      );
      const closed = realtime.closedWith();
      if (closed) assert.fail(`the drain closed the Realtime session (code ${closed.code}, reason "${closed.reason}") ${closed.at - signalledAt} ms after the signal; ${await closeReasons(gw)}`);
      exchanges++;
      await sleep(sentAt + 2000 - Date.now());
    }
    assert.ok(exchanges >= 15, `only ${exchanges} Realtime exchanges`);

    // The streams outlasted the window and ended normally.
    const sseResult = await sse;
    assert.equal(sseResult.error, undefined, `the HTTP/1.1 SSE stream was cut ${sseResult.at - signalledAt} ms into the drain; ${await closeReasons(gw)}`);
    assert.equal(sseResult.status, 200);
    assertCompleteStream(sseResult.body, SSE_CHUNKS, 'HTTP/1.1 SSE stream');
    assert.ok(sseResult.at - signalledAt > 30_000, `the SSE stream ended ${sseResult.at - signalledAt} ms into the drain, inside the window`);
    const h2SseResult = await h2Sse;
    assert.equal(h2SseResult.error, undefined, `the HTTP/2 SSE stream was cut ${h2SseResult.at - signalledAt} ms into the drain; ${await closeReasons(gw)}`);
    assert.equal(h2SseResult.status, 200);
    assertCompleteStream(h2SseResult.body, H2_SSE_CHUNKS, 'HTTP/2 SSE stream');
    // L4: the session open before the drain got one GOAWAY with its real last stream id.
    assert.ok(goaways.length >= 1 && goaways.every((id) => id > 0 && id < 2 ** 31 - 1), `GOAWAYs seen: ${JSON.stringify(goaways)}`);

    stop = true;
    await Promise.all([pooledLoop, h2Loop]);
    pool.destroy();
    // (c) Nothing lost, and every response during the drain retired its connection (L2, L3).
    const during = pooled.filter((r) => r.sentAt >= drainSeenAt);
    const failures = pooled.filter((r) => r.error !== undefined || r.status !== 200);
    assert.deepEqual(failures, [], 'the pooled client lost requests');
    assert.ok(during.length >= 30, `only ${during.length} pooled requests during the drain`);
    assert.ok(during.some((r) => r.sentAt - signalledAt > SESSION_UNTIL_MS - 2000), 'the pooled client ran until the session closed');
    const kept = during.filter((r) => r.connection !== 'close');
    assert.deepEqual(kept, [], 'responses during the drain without Connection: close');
    // (d) HTTP/2 clients were served throughout, inside and after the window.
    assert.deepEqual(h2Results.filter((r) => r.error !== undefined || r.status !== 200), [], 'HTTP/2 requests failed');
    assert.ok(h2Results.some((r) => r.at - signalledAt > 30_000), 'HTTP/2 requests after the window');

    // The session is still up: the client ends it, and the process then exits 0 by itself.
    assert.equal(gw.child.exitCode, null, 'the process exited while the session was open');
    const reasons = await closeReasons(gw);
    const closingAt = Date.now();
    realtime.ws.close(1000, 'client done');
    const closed = await realtime.closed;
    assert.equal(closed.code, 1000, `the session closed with ${closed.code} "${closed.reason}"`);
    for (const session of sessions) session.close();
    await eventually(() => gw.child.exitCode !== null || gw.child.signalCode !== null, 15_000, 'the process to exit by itself after the session closed');
    const exit = await gw.exited;
    assert.equal(exit.code, 0, gw.stderr());
    console.log(
      `default drain: exit ${exit.at - signalledAt} ms after the signal (${exit.at - closingAt} ms after the session closed); ` +
        `${exchanges} Realtime exchanges, ${during.length} pooled requests and ${h2Results.length} HTTP/2 requests during the drain; ${reasons}`,
    );
  } finally {
    stop = true;
    pool.destroy();
    for (const session of sessions) session.destroy();
    await gw.stop();
  }
});
