// /v1/realtime: WebSocket sessions proxied to an OpenAI-type provider, checked before the
// handshake, counted in flight until they close (L7), and closed with 1001 on a forced drain (L8).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect as connectTcp } from 'node:net';
import { WebSocket } from 'ws';
import { startGateway, eventually, metricValue, scrape, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import type { RealtimeSessionRecord } from '../support/mock-realtime.ts';

const CLIENT_KEY = 'sk-client-realtime-1';
let mock: MockUpstream;

before(async () => {
  mock = await startMockUpstream();
});
after(async () => {
  await mock?.close();
});

function config(shutdown: Record<string, unknown> = { min_drain_secs: 0 }) {
  return {
    providers: [
      { name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream-realtime' },
      { name: 'echo', type: 'echo' },
    ],
    models: [
      { name: 'rt', provider: 'up', upstream_model: 'gpt-realtime-mock' },
      // The mock's scripted handshakes, asked for by a target's headers (no query parameter but model reaches it).
      { name: 'rt-403', targets: [{ provider: 'up', model: 'gpt-realtime-mock', headers: { 'x-mock-status': '403' } }] },
      { name: 'rt-hang', targets: [{ provider: 'up', model: 'gpt-realtime-mock', headers: { 'x-mock-hang': '1' } }] },
      { name: 'echo', provider: 'echo' },
    ],
    keys: [CLIENT_KEY],
    shutdown: { progress_log_secs: 0.5, ...shutdown },
  };
}

interface Session {
  ws: WebSocket;
  messages: { type: string; [k: string]: unknown }[];
  closed: Promise<{ code: number; reason: string }>;
  next(type: string): Promise<Record<string, unknown>>;
}

function connect(gw: GatewayProcess, query: string, options: { headers?: Record<string, string>; protocols?: string[] } = {}): Promise<Session> {
  const url = `${gw.proxyUrl.replace('http:', 'ws:')}/v1/realtime${query}`;
  const ws = new WebSocket(url, options.protocols ?? [], { headers: options.headers ?? { authorization: `Bearer ${CLIENT_KEY}` } });
  const messages: Session['messages'] = [];
  const waiters: (() => void)[] = [];
  ws.on('message', (data) => {
    messages.push(JSON.parse(data.toString()) as Session['messages'][number]);
    for (const wake of waiters.splice(0)) wake();
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  const next = async (type: string) => {
    for (;;) {
      const found = messages.find((m) => m.type === type);
      if (found) return found;
      await Promise.race([new Promise<void>((r) => waiters.push(r)), closed.then(() => Promise.reject(new Error(`closed before ${type}`)))]);
    }
  };
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve({ ws, messages, closed, next }));
    ws.once('unexpected-response', (_req, res) => reject(Object.assign(new Error(`status ${res.statusCode}`), { status: res.statusCode })));
    ws.once('error', reject);
  });
}

async function rejectedStatus(gw: GatewayProcess, query: string, headers: Record<string, string> = { authorization: `Bearer ${CLIENT_KEY}` }): Promise<number> {
  try {
    const session = await connect(gw, query, { headers });
    session.ws.close();
    return 101;
  } catch (error) {
    return (error as { status?: number }).status ?? -1;
  }
}

test('a realtime session relays frames both ways, with the provider key and upstream model, and records usage', async () => {
  const gw = await startGateway({ config: config() });
  try {
    mock.reset();
    const session = await connect(gw, '?model=rt');
    const created = await session.next('session.created');
    assert.equal((created.session as { model: string }).model, 'gpt-realtime-mock');
    session.ws.send(JSON.stringify({ type: 'response.create' }));
    await session.next('response.done');
    session.ws.send(JSON.stringify({ type: 'response.create' }));
    await eventually(() => session.messages.filter((m) => m.type === 'response.done').length === 2, 3000);
    const upstream = mock.received.find((r) => r.path.startsWith('/v1/realtime')) as RealtimeSessionRecord;
    assert.equal(upstream.headers.authorization, 'Bearer sk-upstream-realtime');
    assert.equal(upstream.messages.length, 2);
    const inFlight = async () => metricValue(await scrape(gw), 'sluice_in_flight_requests', { endpoint: 'realtime', protocol: 'websocket' });
    assert.equal(await inFlight(), 1);
    session.ws.close(1000);
    await session.closed;
    await eventually(async () => (await inFlight()) === 0, 3000, 'realtime in-flight back to 0');
    const line = await gw.waitForLog((l) => l.event === 'access' && l.path === '/v1/realtime');
    assert.equal(line.status, 101);
    assert.equal(line.prompt_tokens, 10);
    assert.equal(line.completion_tokens, 14);
    assert.equal(line.model, 'rt');
    const text = await scrape(gw);
    assert.equal(metricValue(text, 'sluice_tokens_total', { model: 'rt', type: 'completion' }), 14);
  } finally {
    await gw.stop();
  }
});

test('auth and routing are checked before the handshake: 401, 404, 400', async () => {
  const gw = await startGateway({ config: config() });
  try {
    assert.equal(await rejectedStatus(gw, '?model=rt', {}), 401);
    assert.equal(await rejectedStatus(gw, '?model=rt', { authorization: 'Bearer wrong-key-123' }), 401);
    assert.equal(await rejectedStatus(gw, '?model=nope'), 404);
    assert.equal(await rejectedStatus(gw, ''), 400);
    assert.equal(await rejectedStatus(gw, '?model=echo'), 400);
    // The browser form: the key as a subprotocol.
    const session = await connect(gw, '?model=rt', { headers: {}, protocols: ['realtime', `openai-insecure-api-key.${CLIENT_KEY}`] });
    assert.equal(session.ws.protocol, 'realtime');
    await session.next('session.created');
    session.ws.close();
    await session.closed;
  } finally {
    await gw.stop();
  }
});

/** Sends one raw request and reads until the server closes: the client's bytes are exactly these. */
function rawExchange(gw: GatewayProcess, request: string): Promise<{ status: number; head: string; body: string }> {
  const url = new URL(gw.proxyUrl);
  return new Promise((resolve, reject) => {
    const socket = connectTcp(Number(url.port), url.hostname, () => socket.write(request));
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const split = text.indexOf('\r\n\r\n');
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? -1), head: text.slice(0, split), body: text.slice(split + 4) });
    });
  });
}

function upgradeRequest(headers: Record<string, string | undefined>, method = 'GET', path = '/v1/realtime?model=rt'): string {
  const all: Record<string, string | undefined> = {
    host: 'gateway',
    connection: 'Upgrade',
    upgrade: 'websocket',
    'sec-websocket-version': '13',
    'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
    authorization: `Bearer ${CLIENT_KEY}`,
    ...headers,
  };
  const lines = Object.entries(all).flatMap(([name, value]) => (value === undefined ? [] : [`${name}: ${value}`]));
  return `${method} ${path} HTTP/1.1\r\n${lines.join('\r\n')}\r\n\r\n`;
}

test('R1/L10: malformed handshakes get a 4xx in the OpenAI shape, the process lives on and in-flight returns to 0', async () => {
  const gw = await startGateway({ config: config() });
  try {
    mock.reset();
    const inFlight = async () => metricValue(await scrape(gw), 'sluice_in_flight_requests', { endpoint: 'realtime', protocol: 'websocket' }) ?? 0;
    const cases: [string, string, number][] = [
      // Once an uncaught SyntaxError from the WebSocket library that ended the process (exit 70).
      ['duplicated subprotocol', upgradeRequest({ 'sec-websocket-protocol': 'x, x' }), 400],
      ['subprotocol that is not a token', upgradeRequest({ 'sec-websocket-protocol': 'a b, {c}' }), 400],
      ['empty subprotocol list', upgradeRequest({ 'sec-websocket-protocol': ', ,' }), 400],
      // Once a 400 from the library after the upstream had opened, with in-flight left at 1 for ever.
      ['missing key', upgradeRequest({ 'sec-websocket-key': undefined }), 400],
      ['invalid key', upgradeRequest({ 'sec-websocket-key': 'short' }), 400],
      ['unsupported version', upgradeRequest({ 'sec-websocket-version': '12' }), 400],
      ['missing version', upgradeRequest({ 'sec-websocket-version': undefined }), 400],
      ['POST', upgradeRequest({}, 'POST'), 405],
    ];
    for (const [name, request, expected] of cases) {
      const answer = await rawExchange(gw, request);
      assert.equal(answer.status, expected, `${name}: ${answer.head}`);
      const error = (JSON.parse(answer.body) as { error: { code: string; type: string } }).error;
      assert.equal(error.type, 'invalid_request_error', name);
      assert.equal(gw.child.exitCode, null, `${name}: the process is alive`);
    }
    assert.equal(mock.received.filter((r) => r.path.startsWith('/v1/realtime')).length, 0, 'no upstream socket was opened for a malformed handshake');
    await eventually(async () => (await inFlight()) === 0, 3000, 'realtime in-flight back to 0');
    // The gateway still serves a proper session, and a drain with nothing in flight ends at once.
    const session = await connect(gw, '?model=rt', { protocols: ['realtime'] });
    await session.next('session.created');
    session.ws.close(1000);
    await session.closed;
    await eventually(async () => (await inFlight()) === 0, 3000, 'in-flight back to 0 after the session');
    gw.signal('SIGTERM');
    const exit = await gw.exited;
    assert.equal(exit.code, 0);
  } finally {
    await gw.stop();
  }
});

test('an Upgrade other than websocket is served as the plain request it also is', async () => {
  const gw = await startGateway({ config: config() });
  try {
    const body = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
    const answer = await rawExchange(
      gw,
      `POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\nconnection: Upgrade, HTTP2-Settings, close\r\nupgrade: h2c\r\nhttp2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\nauthorization: Bearer ${CLIENT_KEY}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    assert.equal(answer.status, 200, answer.head);
    assert.match(answer.body, /chat\.completion/);
  } finally {
    await gw.stop();
  }
});

test('an upstream that refuses the handshake has its status relayed', async () => {
  const gw = await startGateway({ config: config() });
  try {
    assert.equal(await rejectedStatus(gw, '?model=rt-403'), 403);
  } finally {
    await gw.stop();
  }
});

test('L7: a WebSocket session keeps the process up until it closes, and an upgrade during the drain succeeds', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 0.3 }) });
  try {
    const first = await connect(gw, '?model=rt');
    await first.next('session.created');
    gw.signal('SIGTERM');
    await gw.waitForLog((l) => l.event === 'drain_started');
    const second = await connect(gw, '?model=rt');
    await second.next('session.created');
    second.ws.send(JSON.stringify({ type: 'response.create' }));
    await second.next('response.done');
    // Well past the window: still up, because two sessions are in flight.
    await gw.waitForLog((l) => l.event === 'drain_progress' && Number(l.elapsed_secs) >= 1);
    let exited = false;
    void gw.exited.then(() => (exited = true));
    assert.equal(exited, false);
    first.ws.send(JSON.stringify({ type: 'response.create' }));
    await first.next('response.done');
    first.ws.close(1000);
    await first.closed;
    second.ws.close(1000);
    await second.closed;
    const exit = await gw.exited;
    assert.equal(exit.code, 0);
  } finally {
    await gw.stop();
  }
});

test('L8: a handshake still waiting for its upstream when the drain is forced is refused with a 503 drain_forced', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 0 }) });
  try {
    mock.reset();
    const pending = rawExchange(gw, upgradeRequest({}, 'GET', '/v1/realtime?model=rt-hang'));
    await eventually(async () => metricValue(await scrape(gw), 'sluice_in_flight_requests', { endpoint: 'realtime', protocol: 'websocket' }) === 1, 3000, 'handshake in flight');
    gw.signal('SIGTERM');
    await gw.waitForLog((l) => l.event === 'drain_progress');
    const secondAt = Date.now();
    gw.signal('SIGTERM');
    const answer = await pending;
    assert.equal(answer.status, 503, answer.head);
    assert.equal((JSON.parse(answer.body) as { error: { code: string } }).error.code, 'drain_forced');
    const exit = await gw.exited;
    assert.equal(exit.code, 1);
    assert.ok(exit.at - secondAt < 1500, `exit took ${exit.at - secondAt} ms after the second signal`);
  } finally {
    await gw.stop();
  }
});

test('L8: a second signal closes open sessions with 1001 and the process exits', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 0 }) });
  try {
    const session = await connect(gw, '?model=rt');
    await session.next('session.created');
    gw.signal('SIGTERM');
    await gw.waitForLog((l) => l.event === 'drain_started');
    gw.signal('SIGTERM');
    const closed = await session.closed;
    assert.equal(closed.code, 1001);
    assert.notEqual((await gw.exited).code, 0);
  } finally {
    await gw.stop();
  }
});
