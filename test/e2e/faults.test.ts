// Faults that errors.test.ts does not cover, through the built gateway: an upstream that stalls in
// the middle of a stream or a JSON body, upstream answers that are malformed or enormous (bodies
// and headers), clients that leave in the middle of their request body, clients that send their
// body or headers too slowly (request timeout, slowloris), and pipelined HTTP/1.1 requests. After
// every test the gateway must be back at its baseline: nothing in flight, no open connection on the
// proxy listener, still running and answering /livez.
import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { eventually, metricValue, scrape, startGateway, type GatewayProcess, type LogLine } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockRequest, type MockUpstream } from '../support/mock-upstream.ts';
import { assertOpenAiError, assertSettled, parseResponses, rawExchange, requestOnce, sseBlocks, type Answer } from '../support/reliability.ts';

/** upstream.timeout_ms of the main gateway: the longest wait for headers and between chunks. */
const UPSTREAM_TIMEOUT_MS = 800;
/** How long the scripted stalls last: long enough that only the gateway's timeout can end them. */
const STALL_MS = 6000;

let mock: MockUpstream;
let odd: OddUpstream;
/** Mock providers (OpenAI and Anthropic dialects) and the odd upstream; upstream.timeout_ms 800
 *  (used by the stall tests only). */
let gw: GatewayProcess;
/** The same providers with the default upstream timeouts, for every other test: an 800 ms limit
 *  would make them depend on how busy the machine is. */
let roomy: GatewayProcess;
/** downstream.request_timeout_secs 1 and headers_timeout_secs 1. */
let strict: GatewayProcess;

// ---------------------------------------------------------------------------------------------
// An upstream for what the mock cannot script: response heads larger than any request header can
// describe, bodies of many megabytes, and a JSON body that stops half-way. The `x-odd` request
// header (forwarded by the gateway like any client header) chooses: `big-headers:N`,
// `big-body:N`, `big-body-chunked:N`, `stall-json`.

interface OddUpstream {
  url: string;
  server: Server;
  /** Requests seen, with whether the gateway closed the connection before the answer ended. */
  seen: { odd: string; marker: string | undefined; closedEarly: boolean }[];
  body(size: number): Buffer;
}

const bodies = new Map<number, Buffer>();
/** A JSON chat completion of exactly `size` bytes whose content is random base64. */
function bigBody(size: number): Buffer {
  let body = bodies.get(size);
  if (body) return body;
  const head = '{"id":"chatcmpl-odd","object":"chat.completion","model":"odd","choices":[{"index":0,"message":{"role":"assistant","content":"';
  const tail = '"},"finish_reason":"stop"}]}';
  const filler = randomBytes(Math.ceil((size * 3) / 4)).toString('base64').slice(0, size - head.length - tail.length);
  body = Buffer.from(head + filler + tail);
  assert.equal(body.length, size);
  bodies.set(size, body);
  return body;
}

async function startOddUpstream(): Promise<OddUpstream> {
  const seen: OddUpstream['seen'] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const odd = String(req.headers['x-odd'] ?? '');
      const record = { odd, marker: req.headers['x-fault-marker'] as string | undefined, closedEarly: false };
      seen.push(record);
      res.on('close', () => {
        if (!res.writableFinished) record.closedEarly = true;
      });
      const [kind, arg] = odd.split(':');
      const size = Number(arg);
      if (kind === 'big-headers') {
        const body = '{"id":"chatcmpl-odd","object":"chat.completion","choices":[]}';
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-big': 'h'.repeat(size) });
        res.end(body);
      } else if (kind === 'big-body') {
        const body = bigBody(size);
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
        res.end(body);
      } else if (kind === 'big-body-chunked') {
        const body = bigBody(size);
        res.writeHead(200, { 'content-type': 'application/json' });
        let at = 0;
        const pump = () => {
          while (at < body.length) {
            const piece = body.subarray(at, at + 65_536);
            at += piece.length;
            if (!res.write(piece)) return void res.once('drain', pump);
          }
          res.end();
        };
        pump();
      } else if (kind === 'stall-json') {
        const body = bigBody(4096);
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
        res.write(body.subarray(0, 1000)); // then nothing: the gateway's body timeout must end it
      } else {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"odd upstream: unknown x-odd","type":"invalid_request_error","code":null}}');
      }
    });
  });
  server.headersTimeout = 0;
  server.requestTimeout = 0;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, server, seen, body: bigBody };
}

/** The mock (OpenAI and Anthropic dialects) and the odd upstream, with `upstream` settings. */
function proxyConfig(upstream: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    providers: [
      { name: 'up', type: 'openai', base_url: `${mock.url}/v1` },
      { name: 'claude', type: 'anthropic', base_url: mock.url },
      { name: 'odd', type: 'openai', base_url: `${odd.url}/v1` },
    ],
    models: [
      { name: 'gpt-test', provider: 'up' },
      { name: 'claude-test', provider: 'claude' },
      { name: 'odd-test', provider: 'odd' },
    ],
    upstream,
  };
}

before(async () => {
  mock = await startMockUpstream();
  odd = await startOddUpstream();
  gw = await startGateway({ config: proxyConfig({ timeout_ms: UPSTREAM_TIMEOUT_MS }) });
  roomy = await startGateway({ config: proxyConfig() });
  strict = await startGateway({
    config: {
      providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }],
      models: [{ name: 'gpt-test', provider: 'up' }],
      downstream: { request_timeout_secs: 1, headers_timeout_secs: 1 },
    },
  });
});

after(async () => {
  await gw?.stop();
  await roomy?.stop();
  await strict?.stop();
  await mock?.close();
  odd?.server.closeAllConnections();
  await new Promise<void>((resolve) => (odd ? odd.server.close(() => resolve()) : resolve()));
});

// Every test leaves both gateways as it found them.
afterEach(async () => {
  await assertSettled(gw, 'main gateway');
  await assertSettled(roomy, 'roomy gateway');
  await assertSettled(strict, 'strict gateway');
});

// ---------------------------------------------------------------------------------------------

/** A POST on its own connection (Connection: close), collecting the whole answer even if cut. */
function post(target: GatewayProcess, path: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  return requestOnce(`${target.proxyUrl}${path}`, {
    body: typeof body === 'string' ? body : JSON.stringify(body),
    headers: { 'content-type': 'application/json', ...headers },
  });
}

const chat = (extra: Record<string, unknown> = {}) => ({ model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }], ...extra });
const anthropicMessage = (extra: Record<string, unknown> = {}) => ({ model: 'claude-test', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }], ...extra });

/** The text of a chat completion stream: its deltas' content, concatenated. */
function chatStreamText(blocks: string[]): string {
  let text = '';
  for (const block of blocks) {
    if (!block.startsWith('data: {')) continue;
    const event = JSON.parse(block.slice('data: '.length)) as { choices: { delta?: { content?: string } }[] };
    text += event.choices[0]?.delta?.content ?? '';
  }
  return text;
}

function accessLine(target: GatewayProcess, rid: string): Promise<LogLine> {
  return target.waitForLog((l) => l.event === 'access' && l.downstream_request_id === rid, 8000);
}

const withMarker = (marker: string) => (r: MockRequest) => r.headers['x-fault-marker'] === marker;

/** Headers that tag one request: our request id (for the access log) and a marker (for the mock). */
function tags(): { rid: string; marker: string; headers: Record<string, string> } {
  const rid = `faults-${randomUUID()}`;
  const marker = randomUUID();
  return { rid, marker, headers: { 'x-request-id': rid, 'x-fault-marker': marker } };
}

async function upstreamErrors(target: GatewayProcess, provider: string, kind: string): Promise<number> {
  return metricValue(await scrape(target), 'sluice_upstream_errors_total', { provider, kind }) ?? 0;
}

// ---------------------------------------------------------------------------------------------

describe('an upstream that stalls after the headers', () => {
  test('a chat stream silent for longer than upstream.timeout_ms ends with an SSE error event, no [DONE], and the upstream request is cancelled', async () => {
    const { rid, marker, headers } = tags();
    const timeoutsBefore = await upstreamErrors(gw, 'up', 'timeout');
    const answer = await post(gw, '/v1/chat/completions', chat({ stream: true }), { ...headers, ...mockHeader({ chunks: 4, sseIntervalMs: STALL_MS }) });
    assert.equal(answer.status, 200);
    assert.match(String(answer.headers['content-type']), /^text\/event-stream/);
    // Ended by the gateway's timer, long before the mock's next event.
    assert.ok(answer.elapsedMs < STALL_MS - 1000, `the stream took ${answer.elapsedMs} ms to end`);
    assert.ok(answer.elapsedMs >= UPSTREAM_TIMEOUT_MS - 50, `the stream ended after only ${answer.elapsedMs} ms`);
    const text = answer.body.toString('utf8');
    const blocks = sseBlocks(text);
    assert.match(blocks[0]!, /^data: \{"id":"chatcmpl-mock-/, 'the first event went through before the stall');
    const last = blocks.at(-1)!;
    assert.match(last, /^event: error\ndata: /);
    const error = assertOpenAiError(last.slice(last.indexOf('data: ') + 6), 'stream error event');
    assert.equal(error.code, 'upstream_timeout');
    assert.equal(error.type, 'timeout_error');
    assert.doesNotMatch(text, /\[DONE\]/);
    const line = await accessLine(gw, rid);
    assert.equal(line.status, 200);
    assert.equal(line.error, 'upstream_timeout');
    await mock.waitFor((r) => r.find(withMarker(marker))?.aborted === true, 5000);
    assert.equal(await upstreamErrors(gw, 'up', 'timeout'), timeoutsBefore + 1);
  });

  test('an Anthropic stream silent for too long ends with an Anthropic-shaped error event and no message_stop', async () => {
    const { rid, marker, headers } = tags();
    const answer = await post(gw, '/v1/messages', anthropicMessage({ stream: true }), { ...headers, ...mockHeader({ chunks: 3, sseIntervalMs: STALL_MS }) });
    assert.equal(answer.status, 200);
    assert.ok(answer.elapsedMs < STALL_MS - 1000, `the stream took ${answer.elapsedMs} ms to end`);
    const text = answer.body.toString('utf8');
    const blocks = sseBlocks(text);
    assert.match(blocks[0]!, /^event: message_start\n/);
    const last = blocks.at(-1)!;
    assert.match(last, /^event: error\ndata: /);
    const payload = JSON.parse(last.slice(last.indexOf('data: ') + 6)) as { type: string; error: { type: string; message: string } };
    assert.equal(payload.type, 'error');
    assert.equal(payload.error.type, 'timeout_error');
    assert.equal(typeof payload.error.message, 'string');
    assert.doesNotMatch(text, /message_stop/);
    assert.equal((await accessLine(gw, rid)).error, 'upstream_timeout');
    await mock.waitFor((r) => r.find(withMarker(marker))?.aborted === true, 5000);
  });

  test('a JSON body that stops half-way is cut (never completed, never padded) and the upstream connection is closed', async () => {
    const { rid, marker, headers } = tags();
    const answer = await post(gw, '/v1/chat/completions', chat({ model: 'odd-test' }), { ...headers, 'x-odd': 'stall-json' });
    assert.equal(answer.status, 200);
    assert.equal(answer.headers['content-length'], '4096');
    assert.equal(answer.complete, false, 'the client must see a cut, not a complete body');
    assert.equal(answer.body.length, 1000, 'the bytes sent before the stall are relayed, nothing else');
    assert.ok(answer.elapsedMs < STALL_MS, `the cut took ${answer.elapsedMs} ms`);
    const line = await accessLine(gw, rid);
    assert.equal(line.status, 200);
    assert.equal(line.error, 'upstream_timeout');
    await eventually(() => odd.seen.find((s) => s.marker === marker)?.closedEarly === true, 5000, 'the odd upstream saw its connection closed');
  });
});

describe('malformed upstream answers are relayed as they are', () => {
  const cases: { name: string; rawBody: string; contentType?: string }[] = [
    { name: 'truncated JSON', rawBody: '{"id":"chatcmpl-broken","choices":[{"message":' },
    { name: 'truncated JSON that mentions usage', rawBody: '{"id":"x","usage":{"prompt_tokens":3,"completion_tokens":' },
    { name: 'usage of the wrong types', rawBody: '{"id":"x","usage":{"prompt_tokens":"three","completion_tokens":null,"total_tokens":[1]}}' },
    { name: 'HTML under a JSON content type', rawBody: '<html><body>502 Bad Gateway</body></html>' },
    { name: 'binary garbage', rawBody: '\u0000\u0001\u001f\u00ff{"usage":' },
    { name: 'an empty body', rawBody: '' },
    { name: 'plain text', rawBody: 'upstream says no', contentType: 'text/plain' },
  ];
  for (const c of cases) {
    test(`200 with ${c.name}`, async () => {
      const { rid, headers } = tags();
      const answer = await post(roomy, '/v1/chat/completions', chat(), { ...headers, ...mockHeader({ rawBody: c.rawBody, ...(c.contentType ? { contentType: c.contentType } : {}) }) });
      assert.equal(answer.status, 200);
      assert.equal(answer.complete, true);
      assert.equal(answer.body.toString('utf8'), c.rawBody);
      assert.equal(answer.headers['content-type'], c.contentType ?? 'application/json');
      const line = await accessLine(roomy, rid);
      assert.equal(line.status, 200);
      assert.equal(line.error, undefined);
    });
  }

  test('a malformed SSE stream (broken JSON, odd fields, CRLF) is relayed byte for byte; without [DONE] it was cut, and ends with an error event of its own', async () => {
    const { rid, headers } = tags();
    const stream =
      'data: {broken json\n\n' +
      'event: \ndata:\n\n' +
      ': a comment only\n\n' +
      'data: {"usage": {"prompt_tokens": "x", "completion_tokens": {}}}\n\n' +
      'data: {"usage": \n\n' +
      'retry: abc\nid: \u0001\n\n' +
      'a line without a colon\n\n' +
      'data: {"choices":[]}\r\n\r\n' +
      'data: "usage"';
    const answer = await post(roomy, '/v1/chat/completions', chat({ stream: true }), { ...headers, ...mockHeader({ rawBody: stream, contentType: 'text/event-stream' }) });
    assert.equal(answer.status, 200);
    assert.equal(answer.complete, true);
    const text = answer.body.toString('utf8');
    assert.equal(text.slice(0, stream.length), stream);
    // The unfinished last event is closed, then the error event follows as an event of its own.
    assert.equal(text.slice(stream.length, stream.length + 2), '\n\n');
    const last = sseBlocks(text).at(-1)!;
    assert.match(last, /^event: error\ndata: /);
    assert.equal(assertOpenAiError(last.slice(last.indexOf('data: ') + 6), 'cut').code, 'upstream_stream_cut');
    const line = await accessLine(roomy, rid);
    assert.equal(line.status, 200);
    assert.equal(line.error, 'upstream_stream_cut');
    // No usage came: the prompt is estimated (the output had no text), and marked so.
    assert.equal(line.usage_estimated, true);
    assert.equal(line.completion_tokens, 0);
  });

  test('scripted SSE events that are not JSON, and usage that is null or a string, are relayed', async () => {
    const { headers } = tags();
    const sse = ['not json', { event: 'weird', data: '{"usage":null}' }, { data: '{"usage":"lots"}' }, '', 'data: looks like a nested prefix'];
    const answer = await post(roomy, '/v1/chat/completions', chat({ stream: true }), { ...headers, ...mockHeader({ sse }) });
    assert.equal(answer.status, 200);
    const blocks = sseBlocks(answer.body.toString('utf8'));
    assert.deepEqual(blocks, ['data: not json', 'event: weird\ndata: {"usage":null}', 'data: {"usage":"lots"}', 'data: ', 'data: data: looks like a nested prefix', 'data: [DONE]']);
  });

  // Regression (found by this file; fixed in 80474b4): a negative count made Counter.inc throw in
  // the response's close listener, an uncaught exception that ended the process with 70.
  test('an upstream reporting negative token counts does not take the gateway down', async () => {
    // A throwaway gateway: if it dies, the other tests keep theirs.
    const victim = await startGateway({
      config: { providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }], models: [{ name: 'gpt-test', provider: 'up' }] },
    });
    try {
      for (const scenario of [
        { body: { id: 'x', object: 'chat.completion', choices: [], usage: { prompt_tokens: -5, completion_tokens: 2 } } },
        { sse: [{ id: 'x', choices: [], usage: { prompt_tokens: 3, completion_tokens: -1 } }] },
      ]) {
        const answer = await post(victim, '/v1/chat/completions', chat({ stream: 'sse' in scenario }), mockHeader(scenario));
        assert.equal(answer.status, 200);
        const live = await fetch(`${victim.proxyUrl}/livez`).then((r) => r.status, (e: Error) => `unreachable: ${e.message}`);
        assert.equal(live, 200, `the gateway died (exit ${victim.child.exitCode}); stderr: ${victim.stderr().slice(0, 500)}`);
      }
      assert.equal(victim.child.exitCode, null);
    } finally {
      await victim.stop();
    }
  });
});

describe('enormous upstream answers', () => {
  test('response headers of 12 KB are relayed intact', async () => {
    const answer = await post(roomy, '/v1/chat/completions', chat({ model: 'odd-test' }), { 'x-odd': 'big-headers:12000' });
    assert.equal(answer.status, 200);
    assert.equal(answer.headers['x-big'], 'h'.repeat(12000));
    assert.equal(JSON.parse(answer.body.toString('utf8')).id, 'chatcmpl-odd');
  });

  test('response headers over 16 KB (larger than undici accepts) are a 502 OpenAI-shaped error, not a hang or a crash', async () => {
    const { rid, headers } = tags();
    const answer = await post(roomy, '/v1/chat/completions', chat({ model: 'odd-test' }), { ...headers, 'x-odd': 'big-headers:65536' });
    assert.equal(answer.status, 502, answer.body.toString('utf8'));
    const error = assertOpenAiError(answer.body.toString('utf8'), 'oversized upstream headers');
    assert.match(error.code, /^upstream_/);
    assert.doesNotMatch(answer.body.toString('utf8'), /hhhh/, 'the upstream header is not echoed');
    const line = await accessLine(roomy, rid);
    assert.equal(line.status, 502);
    assert.equal(line.error, error.code);
  });

  for (const kind of ['big-body', 'big-body-chunked']) {
    test(`a 16 MiB JSON body (${kind === 'big-body' ? 'Content-Length' : 'chunked'}) is relayed byte for byte`, async () => {
      const size = 16 * 1024 * 1024;
      const { rid, headers } = tags();
      const answer = await post(roomy, '/v1/chat/completions', chat({ model: 'odd-test' }), { ...headers, 'x-odd': `${kind}:${size}` });
      assert.equal(answer.status, 200);
      assert.equal(answer.complete, true);
      assert.equal(answer.body.length, size);
      const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex');
      assert.equal(digest(answer.body), digest(odd.body(size)));
      if (kind === 'big-body') assert.equal(answer.headers['content-length'], String(size));
      const line = await accessLine(roomy, rid);
      assert.equal(line.status, 200);
      assert.equal(line.error, undefined);
    });
  }

  test('a 6 MiB prompt comes back in a 6 MiB answer, JSON and SSE, intact', async () => {
    const content = randomBytes(4.5 * 1024 * 1024).toString('base64'); // 6 MiB of text
    const json = await post(roomy, '/v1/chat/completions', chat({ messages: [{ role: 'user', content }] }));
    assert.equal(json.status, 200);
    const parsed = JSON.parse(json.body.toString('utf8')) as { choices: { message: { content: string } }[] };
    assert.equal(parsed.choices[0]!.message.content, `mock reply to: ${content}`);

    const sse = await post(roomy, '/v1/chat/completions', chat({ stream: true, messages: [{ role: 'user', content }] }), mockHeader({ chunks: 4 }));
    assert.equal(sse.status, 200);
    const blocks = sseBlocks(sse.body.toString('utf8'));
    assert.equal(blocks.at(-1), 'data: [DONE]');
    assert.equal(chatStreamText(blocks), `mock reply to: ${content}`);
  });
});

// ---------------------------------------------------------------------------------------------

/** Sends `head`, then `parts` one by one (`gapMs` apart), then destroys the socket. */
async function sendThenLeave(target: GatewayProcess, head: string, parts: string[], mode: 'destroy' | 'half-close'): Promise<void> {
  await rawExchange(target.proxyUrl, head, {
    timeoutMs: 5000,
    drive: async (socket: Socket) => {
      for (const part of parts) {
        await new Promise<void>((resolve) => socket.write(part, () => resolve()));
      }
      if (mode === 'destroy') socket.destroy();
      else socket.end();
    },
  });
}

describe('clients that leave before their body is sent', () => {
  const body = JSON.stringify(chat({ padding: 'p'.repeat(4000) }));
  const half = body.slice(0, Math.floor(body.length / 2));
  const variants: { name: string; head: (t: { rid: string; marker: string }) => string; parts: string[]; mode: 'destroy' | 'half-close' }[] = [
    {
      name: 'Content-Length, half the body, then a reset',
      head: (t) => `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nX-Request-Id: ${t.rid}\r\nX-Fault-Marker: ${t.marker}\r\n\r\n`,
      parts: [half],
      mode: 'destroy',
    },
    {
      name: 'chunked, one chunk, then a reset',
      head: (t) => `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nX-Request-Id: ${t.rid}\r\nX-Fault-Marker: ${t.marker}\r\n\r\n`,
      parts: [`${half.length.toString(16)}\r\n${half}\r\n`],
      mode: 'destroy',
    },
    {
      name: 'Content-Length, half the body, then a half-close (FIN)',
      head: (t) => `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nX-Request-Id: ${t.rid}\r\nX-Fault-Marker: ${t.marker}\r\n\r\n`,
      parts: [half],
      mode: 'half-close',
    },
  ];
  for (const v of variants) {
    test(`${v.name}: no upstream request, the exchange is logged as client_gone, nothing left in flight`, async () => {
      const t = tags();
      await sendThenLeave(roomy, v.head(t), v.parts, v.mode);
      const line = await accessLine(roomy, t.rid);
      assert.equal(line.status, 499);
      assert.equal(line.error, 'client_gone');
      // A request sent after it has been answered; had the cut one gone upstream, it would be there.
      const probe = await post(roomy, '/v1/chat/completions', chat(), { 'x-fault-marker': `probe-${t.marker}` });
      assert.equal(probe.status, 200);
      await mock.waitFor((r) => r.some(withMarker(`probe-${t.marker}`)));
      assert.equal(mock.received.filter(withMarker(t.marker)).length, 0, 'the incomplete request reached the upstream');
    });
  }
});

describe('clients that are too slow (strict gateway: request and header timeouts of 1 s)', () => {
  test('a body sent slower than request_timeout_secs gets 408 request_timeout (or a close) and never goes upstream', async () => {
    const t = tags();
    const body = JSON.stringify(chat({ padding: 'q'.repeat(200) }));
    let stop = false;
    const result = await rawExchange(
      strict.proxyUrl,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nX-Request-Id: ${t.rid}\r\nX-Fault-Marker: ${t.marker}\r\n\r\n`,
      {
        timeoutMs: 8000,
        drive: async (socket) => {
          // One byte every 100 ms: the whole body would take ~25 s.
          for (let i = 0; i < body.length && !stop && !socket.destroyed; i++) {
            socket.write(body[i]!);
            await new Promise((r) => setTimeout(r, 100));
          }
        },
      },
    );
    stop = true;
    assert.equal(result.closed, true, 'the gateway closed the connection');
    assert.ok(result.elapsedMs < 5000, `closed after ${result.elapsedMs} ms`);
    const [res] = parseResponses(result.data);
    if (res) {
      assert.equal(res.status, 408);
      assert.equal(assertOpenAiError(res.body.toString('utf8'), 'slow body').code, 'request_timeout');
    }
    assert.equal(mock.received.filter(withMarker(t.marker)).length, 0);
    const line = await accessLine(strict, t.rid);
    assert.equal(line.error === 'request_timeout' || line.error === 'client_gone', true, `access log error: ${String(line.error)}`);
  });

  test('the access log of a request cut by request_timeout_secs records 408 request_timeout, what the client got', async () => {
    const t = tags();
    const result = await rawExchange(
      strict.proxyUrl,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\nX-Request-Id: ${t.rid}\r\n\r\n{"model":`,
      { timeoutMs: 8000 },
    );
    assert.equal(result.closed, true);
    const [res] = parseResponses(result.data);
    assert.equal(res?.status, 408);
    const line = await accessLine(strict, t.rid);
    assert.equal(line.status, 408);
    assert.equal(line.error, 'request_timeout');
  });

  test('slowloris: 20 connections trickling header bytes are all closed by headers_timeout_secs, and others are still served meanwhile', async () => {
    const trickle = async (socket: Socket) => {
      const head = 'GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(200);
      for (let i = 0; i < head.length && !socket.destroyed; i++) {
        socket.write(head[i]!);
        await new Promise((r) => setTimeout(r, 150));
      }
    };
    const started = Date.now();
    const pending = Array.from({ length: 20 }, () => rawExchange(strict.proxyUrl, undefined, { timeoutMs: 10_000, drive: trickle }));
    // While they hang on, a normal client is served at once.
    const served = await post(strict, '/v1/chat/completions', chat());
    assert.equal(served.status, 200);
    const results = await Promise.all(pending);
    for (const result of results) {
      assert.equal(result.closed, true, 'a slowloris connection was still open after 10 s');
      assert.ok(result.elapsedMs < 5000, `a slowloris connection lasted ${result.elapsedMs} ms`);
      const [res] = parseResponses(result.data);
      if (res) assert.equal(res.status, 408);
    }
    console.log(`slowloris: 20 connections closed within ${Date.now() - started} ms`);
  });

  test('connections that send nothing at all are closed by headers_timeout_secs', async () => {
    const results = await Promise.all(Array.from({ length: 20 }, () => rawExchange(strict.proxyUrl, undefined, { timeoutMs: 10_000 })));
    for (const result of results) {
      assert.equal(result.closed, true);
      assert.ok(result.elapsedMs < 5000, `a silent connection lasted ${result.elapsedMs} ms`);
    }
  });

  test('slowloris on a reused keep-alive connection (after one good request) is closed too', async () => {
    const result = await rawExchange(strict.proxyUrl, 'GET /livez HTTP/1.1\r\nHost: x\r\n\r\n', {
      timeoutMs: 10_000,
      drive: async (socket) => {
        // Wait for the first answer, then start a second request and never finish its headers.
        await new Promise<void>((resolve) => socket.once('data', () => resolve()));
        const head = 'GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'b'.repeat(200);
        for (let i = 0; i < head.length && !socket.destroyed; i++) {
          socket.write(head[i]!);
          await new Promise((r) => setTimeout(r, 150));
        }
      },
    });
    assert.equal(result.closed, true, 'the connection was still open after 10 s');
    assert.ok(result.elapsedMs < 5000, `closed after ${result.elapsedMs} ms`);
    const responses = parseResponses(result.data);
    assert.equal(responses[0]?.status, 200);
    if (responses[1]) assert.equal(responses[1].status, 408);
  });
});

// ---------------------------------------------------------------------------------------------

function rawPost(path: string, body: string, headers: Record<string, string> = {}, last = false): string {
  const lines = [`POST ${path} HTTP/1.1`, 'Host: x', 'Content-Type: application/json', `Content-Length: ${Buffer.byteLength(body)}`];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  if (last) lines.push('Connection: close');
  return `${lines.join('\r\n')}\r\n\r\n${body}`;
}

describe('pipelined HTTP/1.1 requests', () => {
  test('five requests in one write (a slow one first, JSON, SSE, Anthropic, health) are all answered, in order', async () => {
    const bytes =
      rawPost('/v1/chat/completions', JSON.stringify(chat({ messages: [{ role: 'user', content: 'first' }] })), mockHeader({ headersDelayMs: 300 })) +
      'GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n' +
      rawPost('/v1/chat/completions', JSON.stringify(chat({ stream: true, messages: [{ role: 'user', content: 'third' }] }))) +
      rawPost('/v1/messages', JSON.stringify(anthropicMessage({ messages: [{ role: 'user', content: 'fourth' }] }))) +
      'GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
    const result = await rawExchange(roomy.proxyUrl, bytes, { timeoutMs: 10_000 });
    assert.equal(result.closed, true, 'the connection closes after the last (Connection: close) answer');
    const responses = parseResponses(result.data);
    assert.equal(responses.length, 5, result.data.toString('utf8').slice(0, 2000));
    for (const r of responses) assert.equal(r.complete, true);
    assert.deepEqual(responses.map((r) => r.status), [200, 200, 200, 200, 200]);
    const first = JSON.parse(responses[0]!.body.toString('utf8')) as { choices: { message: { content: string } }[] };
    assert.equal(first.choices[0]!.message.content, 'mock reply to: first');
    assert.deepEqual((JSON.parse(responses[1]!.body.toString('utf8')) as { data: { id: string }[] }).data.map((m) => m.id), ['gpt-test', 'claude-test', 'odd-test']);
    assert.match(responses[2]!.headers['content-type']!, /^text\/event-stream/);
    const third = sseBlocks(responses[2]!.body.toString('utf8'));
    assert.equal(third.at(-1), 'data: [DONE]');
    assert.equal(chatStreamText(third), 'mock reply to: third');
    assert.equal((JSON.parse(responses[3]!.body.toString('utf8')) as { type: string }).type, 'message');
    assert.equal(JSON.parse(responses[4]!.body.toString('utf8')).status, 'live');
    const ids = new Set(responses.map((r) => r.headers['x-request-id']));
    assert.equal(ids.size, 5, 'each answer carries its own request id');
  });

  test('errors in the middle of a pipeline (bad JSON, unknown path, unknown model) do not disturb the requests around them', async () => {
    const bytes =
      rawPost('/v1/chat/completions', JSON.stringify(chat({ messages: [{ role: 'user', content: 'one' }] }))) +
      rawPost('/v1/chat/completions', '{"model": "gpt-test", ') +
      'GET /v1/nowhere HTTP/1.1\r\nHost: x\r\n\r\n' +
      rawPost('/v1/chat/completions', JSON.stringify(chat({ model: 'nope' }))) +
      rawPost('/v1/chat/completions', JSON.stringify(chat({ messages: [{ role: 'user', content: 'five' }] })), {}, true);
    const result = await rawExchange(roomy.proxyUrl, bytes, { timeoutMs: 10_000 });
    assert.equal(result.closed, true);
    const responses = parseResponses(result.data);
    assert.deepEqual(responses.map((r) => r.status), [200, 400, 404, 404, 200]);
    assert.match(responses[0]!.body.toString('utf8'), /mock reply to: one/);
    assert.equal(assertOpenAiError(responses[1]!.body.toString('utf8'), 'bad JSON').code, 'invalid_json');
    assert.equal(assertOpenAiError(responses[2]!.body.toString('utf8'), 'unknown path').code, 'unknown_path');
    assert.equal(assertOpenAiError(responses[3]!.body.toString('utf8'), 'unknown model').code, 'model_not_found');
    assert.match(responses[4]!.body.toString('utf8'), /mock reply to: five/);
  });
});

describe('afterwards', () => {
  test('every gateway is alive, wrote nothing on stderr and logged no handler error', async () => {
    for (const target of [gw, roomy, strict]) {
      const answer = await post(target, '/v1/chat/completions', chat());
      assert.equal(answer.status, 200);
      assert.equal(target.stderr(), '');
      assert.ok(!target.logs.some((l) => l.event === 'handler_error'), 'a request handler threw');
    }
  });
});
