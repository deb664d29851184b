// A realtime session is a client's like any request: it was admitted by nothing (found in the
// review of issue #24). A key limited to one concurrent request opened five sessions at once, one
// limited to one request a minute opened seven, and one whose budget was spent opened more; no
// session was ever charged. Now a handshake passes the limiter (the memory store, the default)
// before any upstream socket: over a limit it is a 429 in the OpenAI shape, with Retry-After; a
// session holds its concurrency place until both its sockets close, and is settled then with the
// usage of every response.done (tokens and, when its model has a price, spend). While it is open it
// holds against its key's budget what a request without max_tokens may cost.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { eventually, metricValue, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { websocketHandshake } from '../support/http.ts';
import { assertOpenAiError, assertSettled } from '../support/reliability.ts';

const KEYS = {
  concurrent: 'sk-realtime-one-at-a-time',
  rpm: 'sk-realtime-two-a-minute-0',
  budget: 'sk-realtime-one-dollar-000',
  cached: 'sk-realtime-cached-tokens',
};
/** $0.90 a response: 5,000 input tokens at $100 a million, 2,000 output at $200. */
const PRICE = { input: 100, output: 200 };
const BUDGET_USAGE = { total_tokens: 7000, input_tokens: 5000, output_tokens: 2000 };
const RESPONSE_MICROS = BUDGET_USAGE.input_tokens * PRICE.input + BUDGET_USAGE.output_tokens * PRICE.output;
/** What a session holds while it is open: 4,096 output tokens (limits.budget_hold_output_tokens) at $200 a million. */
const HOLD_MICROS = 4096 * PRICE.output;
/** Cached prompt tokens at a hundredth of the input price. */
const CACHED_PRICE = { input: 100, output: 10, cached_input: 1 };
/** A Realtime response.done's usage, as OpenAI reports it: the cached tokens under input_token_details ("token", singular). */
const CACHED_USAGE = {
  total_tokens: 1010,
  input_tokens: 1000,
  output_tokens: 10,
  input_token_details: { cached_tokens: 800, text_tokens: 1000, audio_tokens: 0, cached_tokens_details: { text_tokens: 800, audio_tokens: 0 } },
  output_token_details: { text_tokens: 10, audio_tokens: 0 },
};

let mock: MockUpstream;
let gw: GatewayProcess;

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream' }],
      models: [{ name: 'gpt-realtime*', provider: 'up' }],
      prices: { 'gpt-realtime': PRICE, 'gpt-realtime-cached': CACHED_PRICE },
      keys: [
        { name: 'concurrent', key: KEYS.concurrent, limits: { concurrent: 1 } },
        { name: 'rpm', key: KEYS.rpm, limits: { rpm: 2 } },
        { name: 'budget', key: KEYS.budget, budget: { usd: 1, period: 'day' } },
        { name: 'cached', key: KEYS.cached },
      ],
    },
  });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

const TARGET = '/v1/realtime?model=gpt-realtime';
const sessionsUpstream = () => mock.received.filter((r) => r.path.startsWith('/v1/realtime')).length;

/** Opens a session with `key`; resolves once it is open (the upstream's session.created received). */
function openSession(key: string, target = TARGET): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${gw.proxyUrl.replace('http', 'ws')}${target}`, ['realtime'], { headers: { authorization: `Bearer ${key}` } });
    ws.once('message', () => resolve(ws));
    ws.once('unexpected-response', (_req, res) => reject(new Error(`refused: ${res.statusCode}`)));
    ws.once('error', reject);
  });
}

/** One response in the session (its response.done, with the mock's usage or `usage`), then the session closed. */
async function respondAndClose(ws: WebSocket, usage?: unknown): Promise<void> {
  const done = new Promise<void>((resolve) => ws.on('message', (data) => String(data).includes('response.done') && resolve()));
  ws.send(JSON.stringify({ type: 'response.create', ...(usage === undefined ? {} : { mock_usage: usage }) }));
  await done;
  const closed = new Promise((resolve) => ws.once('close', resolve));
  ws.close();
  await closed;
}

/** A handshake refused by a limit: a 429 in the OpenAI shape with Retry-After, and no upstream socket opened for it. Its message. */
async function assertRefused(key: string, code: string): Promise<string> {
  const before = sessionsUpstream();
  const answer = await websocketHandshake(gw.proxyUrl, TARGET, { authorization: `Bearer ${key}` });
  assert.equal(answer.status, 429, `${answer.head}\n${answer.body}`);
  assert.equal(assertOpenAiError(answer.body, code).code, code, answer.body);
  assert.match(answer.head, /\r\nretry-after: \d+/i, answer.head);
  assert.equal(sessionsUpstream(), before, 'an upstream socket was opened for a refused handshake');
  return assertOpenAiError(answer.body, code).message;
}

describe('realtime sessions under a key\'s limits, at the default store', () => {
  test('concurrent: 1 — a second session is refused while the first is open, and admitted once it closed', async () => {
    const first = await openSession(KEYS.concurrent);
    await assertRefused(KEYS.concurrent, 'rate_limit_exceeded');
    await respondAndClose(first);
    // The place is given back when the session's sockets have closed.
    const second = await eventually(() => openSession(KEYS.concurrent).catch(() => undefined), 5000, 'a session after the first closed');
    await respondAndClose(second!);
  });

  test('rpm: 2 — the third handshake within the minute is refused', async () => {
    for (let i = 0; i < 2; i++) await respondAndClose(await openSession(KEYS.rpm));
    await assertRefused(KEYS.rpm, 'rate_limit_exceeded');
  });

  test('a $1 budget: an open session holds $0.82 of it (a second is refused meanwhile), is charged its response ($0.90); then too little is left for another', async () => {
    const since = gw.logs.length;
    const first = await openSession(KEYS.budget);
    // $0.82 held + $0.82 > $1.
    const held = await assertRefused(KEYS.budget, 'budget_exceeded');
    assert.match(held, new RegExp(`\\$${HOLD_MICROS / 1e6} of it held by its requests in progress`), held);
    await respondAndClose(first, BUDGET_USAGE);
    const line = await gw.waitForLog((l) => gw.logs.indexOf(l) >= since && l.event === 'access' && l.key_name === 'budget' && l.status === 101, 5000);
    assert.equal(line.prompt_tokens, BUDGET_USAGE.input_tokens, JSON.stringify(line));
    assert.equal(line.completion_tokens, BUDGET_USAGE.output_tokens, JSON.stringify(line));
    assert.equal(line.cost_usd, RESPONSE_MICROS / 1e6, JSON.stringify(line));
    const spent = metricValue(await scrape(gw), 'sluice_spend_usd_total', { key: 'budget' });
    assert.equal(spent, RESPONSE_MICROS / 1e6, 'sluice_spend_usd_total of the budget key');
    // $0.90 spent + $0.82 > $1.
    assert.match(await assertRefused(KEYS.budget, 'budget_exceeded'), /has \$0\.1 left of its budget of \$1 for this day, and this request may cost up to \$0\.8192/);
  });

  test('cached prompt tokens (Realtime reports them as input_token_details.cached_tokens) are counted and priced at cached_input', async () => {
    const since = gw.logs.length;
    const ws = await openSession(KEYS.cached, '/v1/realtime?model=gpt-realtime-cached');
    await respondAndClose(ws, CACHED_USAGE);
    await respondAndClose(await openSession(KEYS.cached, '/v1/realtime?model=gpt-realtime-cached'), CACHED_USAGE);
    const lines = await eventually(() => {
      const found = gw.logs.slice(since).filter((l) => l.event === 'access' && l.key_name === 'cached' && l.status === 101);
      return found.length === 2 ? found : undefined;
    }, 5000, 'two access lines of the cached key');
    // 200 fresh tokens at $100 a million, 800 cached at $1, 10 output at $10.
    const micros = (CACHED_USAGE.input_tokens - 800) * CACHED_PRICE.input + 800 * CACHED_PRICE.cached_input + CACHED_USAGE.output_tokens * CACHED_PRICE.output;
    for (const line of lines!) {
      assert.equal(line.cached_tokens, 800, JSON.stringify(line));
      assert.equal(line.cost_usd, micros / 1e6, JSON.stringify(line));
    }
  });

  test('afterwards nothing is in flight', async () => {
    await assertSettled(gw, 'after the sessions');
  });
});
