// Issue 24, a leftover of defect 9: an error answer that names what the client sent (a model, a
// path, a parameter's name) echoed it whole: a 5 MB model name came back as a 5 MB 404. Each value
// is now quoted up to 256 characters with its length ("… (5242880 characters)"), in the caller's
// API shape, at the default settings: unknown and refused models (OpenAI and Anthropic routes), a
// model routed to a provider that does not serve the endpoint, unknown paths (HTTP and WebSocket),
// a realtime parameter's name, a translator's refusal of an unknown parameter (both directions), and
// an upstream's error that quotes the client, translated. Then the same answers fuzzed: random
// sizes and characters, every answer small and well formed, nothing left in flight.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { httpRequest, postJson, websocketHandshake, type RawResponse } from '../support/http.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { assertCallerError, assertSettled } from '../support/reliability.ts';

const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 20261203);
const RUNS = Number(process.env.SLUICE_FUZZ_RUNS ?? 40);
const HUGE = 5 * 1024 * 1024;
/** Longer than Node's 16 KB header limit allows for a request line: a path stays under it. */
const LONG_PATH = 12_000;
/** An answer quoting a capped value stays well under this (the message, the shape, a 256-character quote). */
const SMALL = 2048;
const ALL = { authorization: 'Bearer sk-errors-all-0123456789' };
const LIMITED = { authorization: 'Bearer sk-errors-limited-0123' };

let mock: MockUpstream;
let gw: GatewayProcess;
before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [
        { name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' },
        { name: 'anth', type: 'anthropic', base_url: mock.url, api_key: 'sk-anth' },
      ],
      models: [
        { name: 'known', provider: 'up' },
        { name: 'claude-*', provider: 'anth' },
      ],
      keys: [
        { name: 'all', key: ALL.authorization.slice(7) },
        { name: 'limited', key: LIMITED.authorization.slice(7), models: ['known'] },
      ],
    },
  });
});
after(async () => {
  await gw?.stop();
  await mock?.close();
});

/** The answer is an error of `status` in the caller's shape, small, quoting a cut value with its length `length`. */
function assertCapped(res: RawResponse, what: string, status: number, dialect: 'openai' | 'anthropic', length: number): void {
  assert.equal(res.status, status, `${what}: ${res.body.slice(0, 300)}`);
  assert.ok(res.body.length < SMALL, `${what}: an answer of ${res.body.length} characters`);
  assertCallerError(res.body, dialect, what);
  assert.ok(res.body.includes(`(${length} characters)`), `${what}: the quote says how long the value was: ${res.body}`);
}

const chat = (model: string, extra: object = {}) => ({ model, messages: [{ role: 'user', content: 'hi' }], ...extra });
const messages = (model: string, extra: object = {}) => ({ model, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }], ...extra });

test('a 5 MB model name: unknown (OpenAI and Anthropic routes), not allowed to the key, routed to a provider that does not serve the endpoint', async () => {
  const model = 'm'.repeat(HUGE);
  assertCapped(await postJson(`${gw.proxyUrl}/v1/chat/completions`, chat(model), ALL), 'unknown model, chat', 404, 'openai', HUGE);
  assertCapped(await postJson(`${gw.proxyUrl}/v1/messages`, messages(model), ALL), 'unknown model, messages', 404, 'anthropic', HUGE);
  assertCapped(await postJson(`${gw.proxyUrl}/v1/chat/completions`, chat(model), LIMITED), 'a model the key may not use', 403, 'openai', HUGE);
  const claude = `claude-${'c'.repeat(HUGE)}`;
  assertCapped(await postJson(`${gw.proxyUrl}/v1/embeddings`, { model: claude, input: 'hi' }, ALL), 'an Anthropic model on /v1/embeddings', 400, 'openai', claude.length);
  await assertSettled(gw, 'after the model names');
});

test('a long path (HTTP and WebSocket), a long model in /v1/models/{id}, a long realtime parameter name', async () => {
  const path = `/v1/${'p'.repeat(LONG_PATH)}`;
  assertCapped(await httpRequest(`${gw.proxyUrl}${path}`, { method: 'POST', headers: ALL }), 'unknown path', 404, 'openai', path.length);
  const id = 'i'.repeat(LONG_PATH);
  assertCapped(await httpRequest(`${gw.proxyUrl}/v1/models/${id}`, { headers: ALL }), 'unknown model id', 404, 'openai', id.length);
  const ws = await websocketHandshake(gw.proxyUrl, path, ALL);
  assert.equal(ws.status, 404);
  assert.ok(ws.body.length < SMALL, `WebSocket 404 of ${ws.body.length} characters`);
  assert.ok(ws.body.includes(`(${path.length} characters)`), ws.body.slice(0, 400));
  const name = 'n'.repeat(LONG_PATH);
  const realtime = await websocketHandshake(gw.proxyUrl, `/v1/realtime?model=known&${name}=1`, ALL);
  assert.equal(realtime.status, 400);
  assert.ok(realtime.body.length < SMALL, `realtime 400 of ${realtime.body.length} characters`);
  assert.ok(realtime.body.includes(`(${name.length} characters)`), realtime.body.slice(0, 400));
  await assertSettled(gw, 'after the paths');
});

test("a translator's refusal of a 1 MB parameter name (both directions), and an upstream's error that quotes the client, translated", async () => {
  const key = 'k'.repeat(1024 * 1024);
  // Anthropic client → OpenAI provider: messages-to-chat refuses an unknown parameter.
  const toChat = await postJson(`${gw.proxyUrl}/v1/messages`, messages('known', { [key]: 1 }), ALL);
  assert.equal(toChat.status, 400, toChat.body.slice(0, 300));
  assert.ok(toChat.body.length < 2 * SMALL, `messages → chat: ${toChat.body.length} characters`);
  assertCallerError(toChat.body, 'anthropic', 'messages → chat');
  // OpenAI client → Anthropic provider: chat-to-messages refuses it, with `param` (capped too).
  const toMessages = await postJson(`${gw.proxyUrl}/v1/chat/completions`, chat('claude-x', { [key]: 1 }), ALL);
  assert.equal(toMessages.status, 400, toMessages.body.slice(0, 300));
  assert.ok(toMessages.body.length < 2 * SMALL, `chat → messages: ${toMessages.body.length} characters`);
  const param = (JSON.parse(toMessages.body) as { error: { param?: string } }).error.param;
  assert.ok(param !== undefined && param.length < 300 && param.endsWith(`(${key.length} characters)`), `param: ${param?.slice(0, 300)}`);
  // The provider quotes what it was sent (10,000 characters, the most a header carries to the mock); the answer is translated with its message bounded.
  const echoed = `The model \`${'e'.repeat(10_000)}\` does not exist`;
  const translated = await postJson(`${gw.proxyUrl}/v1/messages`, messages('known'), { ...ALL, ...mockHeader({ status: 404, body: { error: { message: echoed, type: 'invalid_request_error', code: 'model_not_found' } } }) });
  assert.equal(translated.status, 404, translated.body.slice(0, 300));
  assertCallerError(translated.body, 'anthropic', 'translated upstream error');
  assert.ok(translated.body.length < SMALL, `translated upstream error: ${translated.body.length} characters`);
  assert.ok(translated.body.includes(`(${echoed.length} characters)`), translated.body.slice(0, 300));
  await assertSettled(gw, 'after the translations');
});

test('fuzzed: model names and paths of any size and characters; every answer small, in its shape; nothing left in flight', { timeout: 120_000 }, async () => {
  const text = fc.oneof(
    fc.string({ unit: 'binary', maxLength: 600 }),
    fc.tuple(fc.constantFrom('m', '😀', '"', '\\', 'é', '\u0000'), fc.integer({ min: 200, max: 400_000 })).map(([unit, n]) => unit.repeat(n)),
  );
  await fc.assert(
    fc.asyncProperty(text, fc.constantFrom('chat', 'messages', 'path'), async (value, where) => {
      let res: RawResponse;
      if (where === 'path') {
        const segment = encodeURIComponent(value).slice(0, LONG_PATH);
        res = await httpRequest(`${gw.proxyUrl}/v1/x${segment}`, { method: 'POST', headers: ALL });
      } else if (where === 'chat') res = await postJson(`${gw.proxyUrl}/v1/chat/completions`, chat(value), ALL);
      else res = await postJson(`${gw.proxyUrl}/v1/messages`, messages(value), ALL);
      assert.ok(res.status >= 400 && res.status < 500, `${where}: ${res.status}`);
      assert.ok(res.body.length < SMALL + 6 * 256, `${where}: an answer of ${res.body.length} characters`);
      assertCallerError(res.body, where === 'messages' ? 'anthropic' : 'openai', where);
    }),
    { seed: SEED, numRuns: RUNS },
  );
  await assertSettled(gw, 'after the fuzzing');
});
