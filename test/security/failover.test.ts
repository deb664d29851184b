// Issue #24, defect 10 and "Keep it caught": the failover cases on every client API, against the
// built gateway. Each route has two targets of different provider types (so the answer or the
// failure may have been translated); the first is scripted to fail: a silent upstream, stream
// headers then silence, a reset before content, a clean end without the final event before and
// after content, a cut after content, and every target down. The client must get the second
// target's complete answer, or the explicit error in its own API's shape (and never a stream that
// looks whole); the access line and the metrics must say which; nothing may stay counted (in
// flight, a `concurrent` lease). Timeouts are short only where the case is about a timeout; the
// rest run at the default routing settings.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { randomUUID } from 'node:crypto';
import { eventually, scrape, startGateway, type GatewayProcess, type LogLine } from '../support/gateway-process.ts';
import { startMockUpstream, type MockScenario, type MockUpstream } from '../support/mock-upstream.ts';
import { assertCallerError, inFlightTotal, sseBlocks, sumMetric } from '../support/reliability.ts';

type Api = 'chat' | 'completions' | 'responses' | 'messages';
type ProviderType = 'openai' | 'anthropic' | 'echo';

const PATHS: Record<Api, string> = { chat: '/v1/chat/completions', completions: '/v1/completions', responses: '/v1/responses', messages: '/v1/messages' };

/** The failing target's type, then the one that answers: both directions where both serve the API. */
const PAIRS: [Api, ProviderType, ProviderType][] = [
  ['chat', 'openai', 'anthropic'],
  ['chat', 'anthropic', 'openai'],
  ['completions', 'openai', 'echo'],
  ['responses', 'openai', 'anthropic'],
  ['responses', 'anthropic', 'openai'],
  ['messages', 'anthropic', 'openai'],
  ['messages', 'openai', 'anthropic'],
];

/** How many events of the mock's default stream, by the API the failing target speaks, come before its first content. */
const PREAMBLE: Record<string, number> = { chat: 0, completions: 0, responses: 2, messages: 1 };

interface Case {
  readonly name: string;
  readonly stream: boolean;
  /** The failing target's script, by the API it speaks. */
  script(upstreamApi: string): MockScenario;
  readonly retry?: Record<string, unknown>;
  /** Both targets refuse connections. */
  readonly allDown?: boolean;
  /** What the client must get: the fallback's answer, or an error after content (a committed stream), or an error answer. */
  readonly expect: { fallback: string } | { streamError: string; kind: string } | { status: number; error: string; kind: string };
}

const CASES: Case[] = [
  { name: 'a silent upstream (JSON)', stream: false, script: () => ({ neverRespond: true }), retry: { attempt_timeout_ms: 400 }, expect: { fallback: 'timeout' } },
  { name: 'a silent upstream (stream)', stream: true, script: () => ({ neverRespond: true }), retry: { attempt_timeout_ms: 400 }, expect: { fallback: 'timeout' } },
  { name: 'stream headers then silence', stream: true, script: () => ({ stallAfterEvents: 0 }), retry: { first_token_timeout_ms: 400 }, expect: { fallback: 'first_token_timeout' } },
  { name: 'a reset before the answer (JSON)', stream: false, script: () => ({ destroyBeforeHeaders: true }), expect: { fallback: 'reset' } },
  { name: 'a reset after the stream headers, before content', stream: true, script: () => ({ disconnectAfterEvents: 0 }), expect: { fallback: 'reset' } },
  { name: 'a clean end without the final event, before content', stream: true, script: (api) => ({ endAfterEvents: PREAMBLE[api]! }), expect: { fallback: 'stream_error' } },
  { name: 'a cut after content', stream: true, script: (api) => ({ disconnectAfterEvents: PREAMBLE[api]! + 3, sseIntervalMs: 20 }), expect: { streamError: 'upstream_reset', kind: 'reset' } },
  { name: 'a clean end without the final event, after content', stream: true, script: (api) => ({ endAfterEvents: PREAMBLE[api]! + 3 }), expect: { streamError: 'upstream_stream_cut', kind: 'stream_cut' } },
  { name: 'every target down (JSON)', stream: false, allDown: true, script: () => ({}), expect: { status: 502, error: 'upstream_connect_failed', kind: 'connect' } },
  { name: 'every target down (stream)', stream: true, allDown: true, script: () => ({}), expect: { status: 502, error: 'upstream_connect_failed', kind: 'connect' } },
];

/** The endpoint a provider of `type` is sent a request of the client's `api` on. */
function upstreamApi(api: Api, type: ProviderType): string {
  if (type === 'anthropic') return 'messages';
  if (api === 'messages') return 'chat';
  return api;
}

const routeName = (pair: number, c: number) => `route-${pair}-${c}`;
const KEY = 'sk-failover-one-at-a-time-0001';

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function body(api: Api, stream: boolean): Record<string, unknown> {
  switch (api) {
    case 'chat':
      return { model: '', messages: [{ role: 'user', content: 'hello' }], stream };
    case 'completions':
      return { model: '', prompt: 'hello', stream };
    case 'responses':
      return { model: '', input: 'hello', stream };
    case 'messages':
      return { model: '', max_tokens: 50, messages: [{ role: 'user', content: 'hello' }], stream };
  }
}

/** The client got a whole answer in its API's shape (JSON, or a stream that ends with its final event). */
function assertWhole(api: Api, stream: boolean, text: string, context: string): void {
  if (!stream) {
    const json = JSON.parse(text) as Record<string, unknown>;
    if (api === 'chat') assert.ok(((json.choices as { message: { content: string } }[])[0]!.message.content ?? '').length > 0, context);
    if (api === 'completions') assert.ok(((json.choices as { text: string }[])[0]!.text ?? '').length > 0, context);
    if (api === 'responses') assert.equal(json.status, 'completed', context);
    if (api === 'messages') assert.equal((json.content as { type: string }[])[0]!.type, 'text', context);
    return;
  }
  const blocks = sseBlocks(text);
  const last = blocks.at(-1) ?? '';
  if (api === 'chat' || api === 'completions') assert.equal(last.trim(), 'data: [DONE]', `${context}: ${text.slice(-300)}`);
  if (api === 'responses') assert.match(last, /^event: response\.completed/, context);
  if (api === 'messages') assert.match(last, /^event: message_stop/, context);
  assert.ok(!blocks.some((b) => /^event: error/m.test(b) || /"error":\{/.test(b)), `${context}: no error event in a whole answer`);
}

/** A stream that failed after content: it ends with the explicit error event of the client's API, and nothing makes it look whole. */
function assertStreamError(api: Api, text: string, code: string, context: string): void {
  const blocks = sseBlocks(text);
  assert.ok(blocks.length >= 2, `${context}: content came first: ${text.slice(0, 300)}`);
  const last = blocks.at(-1)!;
  assert.match(last, /^event: error\n/, `${context}: ${last}`);
  const data = JSON.parse(last.slice(last.indexOf('data: ') + 6)) as Record<string, unknown>;
  if (api === 'responses') {
    // The Responses API's error event (its SDK rejects the stream with it).
    assert.equal(data.type, 'error', context);
    assert.equal(data.code, code, context);
    assert.equal(typeof data.message, 'string', context);
    assert.equal(typeof data.sequence_number, 'number', context);
  } else assertCallerError(JSON.stringify(data), api === 'messages' ? 'anthropic' : 'openai', context, api === 'messages' ? undefined : code);
  for (const done of ['data: [DONE]', 'event: message_stop', 'event: response.completed', 'event: response.incomplete']) {
    assert.ok(!blocks.some((b) => b.startsWith(done)), `${context}: no ${done} in a cut stream`);
  }
}

describe('failover on every client API, at the default settings', () => {
  let mock: MockUpstream;
  let gw: GatewayProcess;

  before(async () => {
    mock = await startMockUpstream();
    const refused = (await closedPort()).toString();
    const providers = [
      { name: 'p-openai', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-p-openai' },
      { name: 'p-anthropic', type: 'anthropic', base_url: mock.url, api_key: 'sk-p-anthropic' },
      { name: 'p-echo', type: 'echo' },
      { name: 'down-openai', type: 'openai', base_url: `http://127.0.0.1:${refused}/v1`, api_key: 'sk-down' },
      { name: 'down-anthropic', type: 'anthropic', base_url: `http://127.0.0.1:${refused}`, api_key: 'sk-down' },
      { name: 'down-openai-2', type: 'openai', base_url: `http://127.0.0.1:${refused}/v1`, api_key: 'sk-down' },
    ];
    const models = PAIRS.flatMap(([api, failing, answering], p) =>
      CASES.map((c, i) => {
        const down = (type: ProviderType) => (type === 'echo' ? 'down-openai-2' : `down-${type}`);
        const targets = c.allDown
          ? [{ provider: down(failing), model: 'failing' }, { provider: down(answering), model: 'answering' }]
          : [
              { provider: `p-${failing}`, model: 'failing', headers: { 'x-mock': JSON.stringify(c.script(upstreamApi(api, failing))) } },
              { provider: `p-${answering}`, model: 'answering' },
            ];
        // Tried in this order: the first fails, the second answers.
        return { name: routeName(p, i), targets: targets.map((t, n) => ({ ...t, priority: n })), ...(c.retry ? { retry: c.retry } : {}) };
      }),
    );
    gw = await startGateway({
      config: {
        providers,
        models,
        // One request at a time on this key: a lease that stayed taken would refuse the next case.
        keys: [{ name: 'one-at-a-time', key: KEY, limits: { concurrent: 1 } }],
        routing: { cooldown_failures: 0 },
      },
    });
  });

  after(async () => {
    await gw?.stop();
    await mock?.close();
  });

  PAIRS.forEach(([api, failing, answering], p) => {
    CASES.forEach((c, i) => {
      test(`${api} (${failing} failing, ${answering} answering): ${c.name}`, { timeout: 30_000 }, async () => {
        const model = routeName(p, i);
        const failingProvider = c.allDown ? (failing === 'echo' ? 'down-openai-2' : `down-${failing}`) : `p-${failing}`;
        const before = await scrape(gw);
        const rid = randomUUID();
        const headers: Record<string, string> = { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, 'x-request-id': rid };
        if (api === 'messages') headers['anthropic-version'] = '2023-06-01';
        const res = await fetch(`${gw.proxyUrl}${PATHS[api]}`, { method: 'POST', headers, body: JSON.stringify({ ...body(api, c.stream), model }) });
        const text = await res.text();
        const context = `${api} ${c.name}: ${res.status} ${text.slice(0, 400)}`;
        const line: LogLine = await gw.waitForLog((l) => l.event === 'access' && l.downstream_request_id === rid);
        const after = await scrape(gw);
        const delta = (name: string, labels: Record<string, string>) =>
          sumMetric(after, name, (l) => Object.entries(labels).every(([k, v]) => l[k] === v)) - sumMetric(before, name, (l) => Object.entries(labels).every(([k, v]) => l[k] === v));
        const expect = c.expect;
        if ('fallback' in expect) {
          assert.equal(res.status, 200, context);
          assertWhole(api, c.stream, text, context);
          assert.equal(line.status, 200, context);
          assert.equal(line.error, undefined, `${context}: the access line has no error`);
          assert.equal(line.provider, `p-${answering}`, `${context}: the access line names the target that answered`);
          assert.equal(delta('sluice_upstream_attempts_total', { provider: failingProvider, outcome: expect.fallback }), 1, `${context}: the failed attempt is counted as ${expect.fallback}`);
          assert.equal(delta('sluice_upstream_errors_total', {}), 0, `${context}: no error reached the client`);
        } else if ('streamError' in expect) {
          assert.equal(res.status, 200, context);
          assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/, context);
          assertStreamError(api, text, expect.streamError, context);
          assert.equal(line.status, 200, context);
          assert.equal(line.error, expect.streamError, `${context}: the access line says why`);
          assert.equal(delta('sluice_upstream_errors_total', { provider: failingProvider, kind: expect.kind }), 1, `${context}: sluice_upstream_errors_total{kind="${expect.kind}"}`);
        } else {
          assert.equal(res.status, expect.status, context);
          assertCallerError(text, api === 'messages' ? 'anthropic' : 'openai', context, expect.error);
          assert.equal(line.status, expect.status, context);
          assert.equal(line.error, expect.error, context);
          assert.equal(delta('sluice_upstream_errors_total', { kind: expect.kind }), 1, `${context}: sluice_upstream_errors_total{kind="${expect.kind}"}`);
        }
        // Nothing stays counted: nothing in flight (and the key's one concurrent place is free again:
        // the next case, on the same key, would be refused otherwise).
        await eventually(async () => inFlightTotal(await scrape(gw)) === 0, 10_000, `${context}: nothing in flight`);
      });
    });
  });

  test('the key\'s concurrent place was given back after every case', async () => {
    const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ ...body('chat', false), model: routeName(0, 3) }),
    });
    assert.equal(res.status, 200, await res.text());
  });
});
