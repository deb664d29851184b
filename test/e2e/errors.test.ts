// Every way a request can fail, through the built gateway: each answer is an OpenAI-shaped error
// with the right status and a stable code, upstream failures are classified, aborted clients cancel
// their upstream request, malformed HTTP is refused, and the process survives all of it.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request, type IncomingMessage } from 'node:http';
import { connect, createServer, type AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { eventually, metricValue, scrape, startGateway, type GatewayProcess, type LogLine } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream, type MockRequest } from '../support/mock-upstream.ts';

const CLIENT_KEY = 'sk-client-key-1';
const NAMED_KEY = 'sk-client-key-named-2';
const PROVIDER_KEY = 'sk-provider-secret-errors';
const BODY_LIMIT = 4096;

let mock: MockUpstream;
/** Client keys, a small body limit, the default upstream timeout. */
let gw: GatewayProcess;
/** No client keys, upstream.timeout_ms 300. */
let slow: GatewayProcess;

/** A port that nobody listens on: bound by us, then released. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

before(async () => {
  mock = await startMockUpstream();
  const deadPort = await closedPort();
  gw = await startGateway({
    config: {
      providers: [
        { name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: PROVIDER_KEY },
        { name: 'dead', type: 'openai', base_url: `http://127.0.0.1:${deadPort}/v1`, api_key: PROVIDER_KEY },
      ],
      models: [
        { name: 'gpt-test', provider: 'up' },
        { name: 'gpt-dead', provider: 'dead' },
      ],
      keys: [CLIENT_KEY, { name: 'named', key: NAMED_KEY }],
      downstream: { request_body_limit_bytes: BODY_LIMIT },
    },
  });
  slow = await startGateway({
    config: {
      providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: PROVIDER_KEY }],
      models: [{ name: 'gpt-test', provider: 'up' }],
      upstream: { timeout_ms: 300 },
    },
  });
});

after(async () => {
  await gw?.stop();
  await slow?.stop();
  await mock?.close();
});

interface ErrorBody {
  error: { message: string; type: string; code: string };
}

/** A POST with the client key and a fresh caller request id (returned, to find the access log line). */
async function post(
  path: string,
  body: unknown,
  headers: Record<string, string | undefined> = {},
  target: GatewayProcess = gw,
): Promise<{ res: Response; rid: string }> {
  const rid = `errors-${randomUUID()}`;
  const all: Record<string, string | undefined> = { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}`, 'x-request-id': rid, ...headers };
  const res = await fetch(`${target.proxyUrl}${path}`, {
    method: 'POST',
    // `undefined` leaves a header out (e.g. no Authorization at all).
    headers: Object.fromEntries(Object.entries(all).filter((e): e is [string, string] => e[1] !== undefined)),
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { res, rid };
}

/** Asserts an OpenAI-shaped error answer and returns its body. */
async function assertError(res: Response, status: number, code: string, type?: string): Promise<ErrorBody> {
  assert.equal(res.status, status, `status (body: ${await res.clone().text()})`);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  const body = (await res.json()) as ErrorBody;
  assert.deepEqual(Object.keys(body), ['error']);
  assert.equal(typeof body.error.message, 'string');
  assert.ok(body.error.message.length > 0, 'error.message is empty');
  assert.equal(typeof body.error.type, 'string');
  assert.equal(body.error.code, code);
  if (type !== undefined) assert.equal(body.error.type, type);
  return body;
}

/** The access log line of the request the caller tagged with `rid`. */
function accessLine(rid: string, target: GatewayProcess = gw): Promise<LogLine> {
  return target.waitForLog((l) => l.event === 'access' && l.downstream_request_id === rid, 5000);
}

async function assertAccessError(rid: string, status: number, code: string, target: GatewayProcess = gw): Promise<void> {
  const line = await accessLine(rid, target);
  assert.equal(line.status, status, `access log status for ${code}`);
  assert.equal(line.error, code, `access log error for ${code}`);
}

const chat = (extra: Record<string, unknown> = {}) => ({ model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }], ...extra });

describe('request errors', () => {
  test('invalid JSON is 400 invalid_json', async () => {
    const { res, rid } = await post('/v1/chat/completions', '{"model": "gpt-test", ');
    await assertError(res, 400, 'invalid_json', 'invalid_request_error');
    await assertAccessError(rid, 400, 'invalid_json');
  });

  test('a body that is not an object is 400 (array, string, null)', async () => {
    for (const body of ['[1,2]', '"text"', 'null', '42']) {
      const { res, rid } = await post('/v1/chat/completions', body);
      await assertError(res, 400, 'invalid_body', 'invalid_request_error');
      await assertAccessError(rid, 400, 'invalid_body');
    }
  });

  test('a missing (or non-string) model is 400 model_required', async () => {
    for (const body of [{ messages: [] }, { model: 7, messages: [] }, { model: '', messages: [] }]) {
      const { res, rid } = await post('/v1/chat/completions', body);
      await assertError(res, 400, 'model_required', 'invalid_request_error');
      await assertAccessError(rid, 400, 'model_required');
    }
  });

  test('an unknown model is 404 model_not_found, and nothing goes upstream', async () => {
    mock.reset();
    const { res, rid } = await post('/v1/chat/completions', chat({ model: 'no-such-model' }));
    const body = await assertError(res, 404, 'model_not_found', 'not_found_error');
    assert.match(body.error.message, /no-such-model/);
    await assertAccessError(rid, 404, 'model_not_found');
    assert.equal(mock.received.length, 0);
  });

  test('an unknown path is 404 unknown_path', async () => {
    const rid = `errors-${randomUUID()}`;
    const res = await fetch(`${gw.proxyUrl}/v1/nothing-here`, { headers: { 'x-request-id': rid } });
    await assertError(res, 404, 'unknown_path', 'not_found_error');
    await assertAccessError(rid, 404, 'unknown_path');
  });

  test('a wrong method is 405 method_not_allowed with Allow', async () => {
    const rid = `errors-${randomUUID()}`;
    const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, { headers: { 'x-request-id': rid } });
    assert.equal(res.headers.get('allow'), 'POST');
    await assertError(res, 405, 'method_not_allowed');
    await assertAccessError(rid, 405, 'method_not_allowed');
    const models = await fetch(`${gw.proxyUrl}/v1/models`, { method: 'DELETE', headers: { authorization: `Bearer ${CLIENT_KEY}` } });
    await assertError(models, 405, 'method_not_allowed');
  });
});

describe('client keys', () => {
  test('a missing key is 401 missing_api_key', async () => {
    mock.reset();
    const { res, rid } = await post('/v1/chat/completions', chat(), { authorization: undefined });
    await assertError(res, 401, 'missing_api_key', 'authentication_error');
    await assertAccessError(rid, 401, 'missing_api_key');
    const models = await fetch(`${gw.proxyUrl}/v1/models`);
    await assertError(models, 401, 'missing_api_key');
    assert.equal(mock.received.length, 0);
  });

  test('a wrong key is 401 invalid_api_key, by either header', async () => {
    mock.reset();
    const bearer = await post('/v1/chat/completions', chat(), { authorization: 'Bearer sk-client-key-wrong' });
    await assertError(bearer.res, 401, 'invalid_api_key', 'authentication_error');
    await assertAccessError(bearer.rid, 401, 'invalid_api_key');
    const apiKey = await post('/v1/chat/completions', chat(), { authorization: undefined, 'x-api-key': 'sk-client-key-wrong' });
    await assertError(apiKey.res, 401, 'invalid_api_key');
    // A near miss (the right key with a suffix) and a non-Bearer scheme are wrong too.
    const suffix = await post('/v1/chat/completions', chat(), { authorization: `Bearer ${CLIENT_KEY}x` });
    await assertError(suffix.res, 401, 'invalid_api_key');
    const basic = await post('/v1/chat/completions', chat(), { authorization: `Basic ${CLIENT_KEY}` });
    await assertError(basic.res, 401, 'invalid_api_key');
    assert.equal(mock.received.length, 0);
  });

  test('the right key is accepted by Authorization: Bearer and by x-api-key, string and named forms', async () => {
    mock.reset();
    const bearer = await post('/v1/chat/completions', chat());
    assert.equal(bearer.res.status, 200);
    assert.equal(((await bearer.res.json()) as { object: string }).object, 'chat.completion');
    const apiKey = await post('/v1/chat/completions', chat(), { authorization: undefined, 'x-api-key': CLIENT_KEY });
    assert.equal(apiKey.res.status, 200);
    await apiKey.res.arrayBuffer();
    const named = await post('/v1/chat/completions', chat(), { authorization: `Bearer ${NAMED_KEY}` });
    assert.equal(named.res.status, 200);
    await named.res.arrayBuffer();
    const namedApiKey = await post('/v1/chat/completions', chat(), { authorization: undefined, 'x-api-key': NAMED_KEY });
    assert.equal(namedApiKey.res.status, 200);
    await namedApiKey.res.arrayBuffer();
    const models = await fetch(`${gw.proxyUrl}/v1/models`, { headers: { 'x-api-key': CLIENT_KEY } });
    assert.equal(models.status, 200);
    await models.arrayBuffer();
    assert.equal(mock.received.length, 4);
    for (const seen of mock.received) {
      assert.equal(seen.headers.authorization, `Bearer ${PROVIDER_KEY}`);
      assert.equal(seen.headers['x-api-key'], undefined);
    }
    const line = await accessLine(bearer.rid);
    assert.equal(line.status, 200);
    assert.equal(line.error, undefined);
  });
});

/** Sends a raw request with node:http and collects the answer; write errors after it are ignored. */
function rawPost(
  target: GatewayProcess,
  headers: Record<string, string | number>,
  writeBody: (req: ReturnType<typeof request>) => void | Promise<void>,
): Promise<{ status: number; headers: IncomingMessage['headers']; body: string }> {
  return new Promise((resolve, reject) => {
    let answered = false;
    const req = request(`${target.proxyUrl}/v1/chat/completions`, { method: 'POST', headers }, (res) => {
      answered = true;
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => {
        resolve({ status: res.statusCode!, headers: res.headers, body });
        req.destroy();
      });
      res.on('error', reject);
    });
    req.on('error', (error) => {
      if (!answered) reject(error);
    });
    void writeBody(req);
  });
}

describe('request body limit', () => {
  test('a Content-Length over the limit is 413 body_too_large, before the body is read', async () => {
    const rid = `errors-${randomUUID()}`;
    const body = JSON.stringify(chat({ padding: 'x'.repeat(BODY_LIMIT) }));
    assert.ok(Buffer.byteLength(body) > BODY_LIMIT);
    const answer = await rawPost(
      gw,
      { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}`, 'x-request-id': rid, 'content-length': Buffer.byteLength(body) },
      (req) => {
        req.end(body);
      },
    );
    assert.equal(answer.status, 413);
    const parsed = JSON.parse(answer.body) as ErrorBody;
    assert.equal(parsed.error.code, 'body_too_large');
    assert.equal(parsed.error.type, 'request_too_large');
    await assertAccessError(rid, 413, 'body_too_large');
  });

  test('a chunked body that grows past the limit is 413 body_too_large, even while the client is still uploading', async () => {
    const rid = `errors-${randomUUID()}`;
    // No Content-Length: the gateway only learns the size by reading. The client keeps writing
    // after the limit is passed; the gateway answers at once and reads and drops the rest (a
    // lingering read), so the client sees the 413 rather than a reset.
    const chunks = ['{"model":"gpt-test","padding":"', ...Array.from({ length: 64 }, () => 'y'.repeat(1024)), '"}'];
    const answer = await rawPost(
      gw,
      { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}`, 'x-request-id': rid, 'transfer-encoding': 'chunked' },
      async (req) => {
        for (const chunk of chunks) {
          req.write(chunk);
          await new Promise((r) => setImmediate(r));
        }
        req.end();
      },
    );
    assert.ok(chunks.join('').length > BODY_LIMIT);
    assert.equal(answer.status, 413);
    assert.equal((JSON.parse(answer.body) as ErrorBody).error.code, 'body_too_large');
    await assertAccessError(rid, 413, 'body_too_large');
  });

  test('a body just under the limit is accepted', async () => {
    const base = JSON.stringify(chat({ padding: '' }));
    const body = JSON.stringify(chat({ padding: 'z'.repeat(BODY_LIMIT - Buffer.byteLength(base) - 1) }));
    assert.ok(Buffer.byteLength(body) < BODY_LIMIT);
    const { res } = await post('/v1/chat/completions', body);
    assert.equal(res.status, 200);
    await res.arrayBuffer();
  });
});

describe('upstream failures', () => {
  test('a provider nobody listens on is 502 upstream_connect_failed', async () => {
    const before = metricValue(await scrape(gw), 'sluice_upstream_errors_total', { provider: 'dead', kind: 'connect' }) ?? 0;
    const { res, rid } = await post('/v1/chat/completions', chat({ model: 'gpt-dead' }));
    const body = await assertError(res, 502, 'upstream_connect_failed', 'upstream_error');
    assert.match(body.error.message, /dead/);
    assert.doesNotMatch(body.error.message, new RegExp(PROVIDER_KEY));
    await assertAccessError(rid, 502, 'upstream_connect_failed');
    const after = metricValue(await scrape(gw), 'sluice_upstream_errors_total', { provider: 'dead', kind: 'connect' });
    assert.equal(after, before + 1);
  });

  test('an upstream slower than upstream.timeout_ms is 504 upstream_timeout', async () => {
    const started = Date.now();
    const { res, rid } = await post('/v1/chat/completions', chat(), mockHeader({ headersDelayMs: 2000 }), slow);
    await assertError(res, 504, 'upstream_timeout', 'timeout_error');
    const elapsed = Date.now() - started;
    assert.ok(elapsed < 1900, `the timeout took ${elapsed} ms`);
    await assertAccessError(rid, 504, 'upstream_timeout', slow);
    const metrics = await scrape(slow);
    assert.ok((metricValue(metrics, 'sluice_upstream_errors_total', { provider: 'up', kind: 'timeout' }) ?? 0) >= 1);
  });

  for (const status of [500, 503, 429]) {
    test(`an upstream ${status} is relayed with its status and body`, async () => {
      const { res, rid } = await post('/v1/chat/completions', chat(), mockHeader({ status, headers: { 'x-upstream-said': String(status) } }));
      assert.equal(res.status, status);
      assert.equal(res.headers.get('x-upstream-said'), String(status));
      const body = (await res.json()) as { error: { message: string; type: string; param: null; code: null } };
      // The provider's own body, not one of ours.
      assert.equal(body.error.message, `mock upstream error ${status}`);
      assert.equal(body.error.param, null);
      await assertAccessError(rid, status, `upstream_status_${status}`);
    });
  }

  test('an upstream reset mid-stream ends the client stream with an error event and no [DONE]', async () => {
    const { res, rid } = await post('/v1/chat/completions', chat({ stream: true }), mockHeader({ chunks: 5, disconnectAfterEvents: 3 }));
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const text = await res.text();
    const blocks = text.split('\n\n').filter((b) => b.trim() !== '');
    // The two whole events before the reset went through as they were.
    const content = blocks.filter((b) => b.startsWith('data: {"id"'));
    assert.ok(content.length >= 2, `content events: ${content.length}`);
    const last = blocks.at(-1)!;
    assert.match(last, /^event: error\ndata: /);
    const error = JSON.parse(last.split('\ndata: ')[1]!) as ErrorBody;
    assert.equal(error.error.code, 'upstream_reset');
    assert.doesNotMatch(text, /\[DONE\]/);
    await assertAccessError(rid, 200, 'upstream_reset');
  });
});

function inFlight(metrics: string): number {
  return metricValue(metrics, 'sluice_in_flight_requests', { endpoint: 'chat_completions', protocol: 'http1' }) ?? 0;
}

const byMarker = (marker: string) => (r: MockRequest[]) => r.find((x) => (x.json as { marker?: string } | undefined)?.marker === marker);

describe('clients that leave', () => {
  test('a client that aborts while the upstream has not answered cancels the upstream request', async () => {
    const marker = randomUUID();
    const controller = new AbortController();
    const rid = `errors-${randomUUID()}`;
    const pending = fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}`, 'x-request-id': rid, ...mockHeader({ neverRespond: true }) },
      body: JSON.stringify(chat({ marker })),
      signal: controller.signal,
    });
    pending.catch(() => {});
    await mock.waitFor((r) => byMarker(marker)(r) !== undefined);
    assert.ok(inFlight(await scrape(gw)) >= 1, 'the waiting request is counted in flight');
    assert.equal(byMarker(marker)(mock.received)!.aborted, false);
    controller.abort();
    await assert.rejects(pending, { name: 'AbortError' });
    await mock.waitFor((r) => byMarker(marker)(r)!.aborted === true);
    await eventually(async () => inFlight(await scrape(gw)) === 0, 5000, 'in-flight back to 0');
    const line = await accessLine(rid);
    assert.equal(line.status, 499);
    assert.equal(line.error, 'client_gone');
  });

  test('a client that aborts mid-stream: the upstream answer is read on to its usage, then the request leaves in-flight', async () => {
    const marker = randomUUID();
    const controller = new AbortController();
    const rid = `errors-${randomUUID()}`;
    const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}`, 'x-request-id': rid, ...mockHeader({ chunks: 5, sseIntervalMs: 300 }) },
      body: JSON.stringify(chat({ marker, stream: true })),
      signal: controller.signal,
    });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    const first = await reader.read();
    assert.match(Buffer.from(first.value!).toString(), /^data: /);
    assert.ok(inFlight(await scrape(gw)) >= 1, 'the stream is counted in flight');
    assert.equal(byMarker(marker)(mock.received)!.aborted, false);
    controller.abort();
    await assert.rejects(reader.read());
    // Not cancelled: read to its end (limits.read_after_disconnect_secs bounds it), for its usage.
    await mock.waitFor((r) => byMarker(marker)(r)!.completed === true, 10_000);
    assert.equal(byMarker(marker)(mock.received)!.aborted, false);
    await eventually(async () => inFlight(await scrape(gw)) === 0, 10_000, 'in-flight back to 0');
    const line = await accessLine(rid);
    assert.equal(line.status, 200);
    assert.equal(line.error, 'client_gone');
    assert.equal(line.prompt_tokens, 11, 'the usage the mock reported');
    assert.equal(line.completion_tokens, 7);
  });
});

/** Sends raw bytes and reads until the server closes the connection. */
function rawExchange(url: string, bytes: string | Buffer): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) });
    let out = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (out += chunk));
    socket.on('error', (error: NodeJS.ErrnoException) => (error.code === 'ECONNRESET' && out ? resolve(out) : reject(error)));
    socket.on('close', () => resolve(out));
    socket.setTimeout(5000, () => socket.destroy(new Error(`no close within 5 s; got: ${out}`)));
    socket.write(bytes);
  });
}

function parseRaw(text: string): { status: number; body: ErrorBody } {
  const [head, body] = [text.slice(0, text.indexOf('\r\n\r\n')), text.slice(text.indexOf('\r\n\r\n') + 4)];
  const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(head)?.[1]);
  assert.match(head, /content-type: application\/json/i);
  return { status, body: JSON.parse(body) as ErrorBody };
}

describe('malformed HTTP', () => {
  test('Content-Length together with Transfer-Encoding is 400 with a JSON body', async () => {
    const answer = await rawExchange(
      gw.proxyUrl,
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
        'Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
    );
    const { status, body } = parseRaw(answer);
    assert.equal(status, 400);
    assert.equal(body.error.code, 'bad_request');
    assert.equal(body.error.type, 'invalid_request_error');
  });

  test('a folded header line (obs-fold, a smuggling vector) is 400 with a JSON body', async () => {
    const answer = await rawExchange(
      gw.proxyUrl,
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Folded: a\r\n  b\r\nContent-Length: 2\r\n\r\n{}',
    );
    const { status, body } = parseRaw(answer);
    assert.equal(status, 400);
    assert.equal(body.error.type, 'invalid_request_error');
  });

  test('two Content-Length headers that disagree are 400', async () => {
    const answer = await rawExchange(
      gw.proxyUrl,
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 9\r\n\r\n{}',
    );
    assert.equal(parseRaw(answer).status, 400);
  });

  test('a header over 16 KB is 431 with a JSON body', async () => {
    const answer = await rawExchange(gw.proxyUrl, `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20 * 1024)}\r\n\r\n`);
    const { status, body } = parseRaw(answer);
    assert.equal(status, 431);
    assert.equal(body.error.code, 'header_too_large');
  });

  test('garbage instead of a request line is 400', async () => {
    const answer = await rawExchange(gw.proxyUrl, 'NOT HTTP AT ALL\r\n\r\n');
    assert.equal(parseRaw(answer).status, 400);
  });
});

describe('afterwards', () => {
  test('both gateways are still alive and answer', async () => {
    for (const target of [gw, slow]) {
      assert.equal(target.child.exitCode, null);
      assert.equal(target.child.signalCode, null);
      const live = await fetch(`${target.proxyUrl}/livez`);
      assert.equal(live.status, 200);
      await live.arrayBuffer();
      const { res } = await post('/v1/chat/completions', chat(), {}, target);
      assert.equal(res.status, 200);
      assert.equal(((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content, 'mock reply to: hi');
    }
    assert.equal(gw.stderr(), '');
    assert.equal(slow.stderr(), '');
    assert.ok(!gw.logs.some((l) => l.event === 'handler_error'), 'a request handler threw');
    assert.equal(inFlight(await scrape(gw)), 0);
  });
});
