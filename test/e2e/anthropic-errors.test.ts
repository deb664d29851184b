// Sluice's own errors in the caller's shape, through the built gateway: on the Anthropic routes
// (`/v1/messages`, `/v1/messages/count_tokens`, and `/v1/models` for a client that sends
// `anthropic-version`) they are Anthropic's `{"type":"error","error":{"type","message"}}`, so the
// Anthropic SDK raises its typed error with our message; the OpenAI routes keep OpenAI's shape.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { assertAnthropicError, assertOpenAiError, sseBlocks } from '../support/reliability.ts';

const CLIENT_KEY = 'sk-client-key-anthropic-errors';

let mock: MockUpstream;
let gw: GatewayProcess;

function config(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    providers: [
      { name: 'up', type: 'openai', base_url: `${mock.url}/v1` },
      { name: 'claude', type: 'anthropic', base_url: mock.url },
      // Nothing listens on port 1.
      { name: 'gone', type: 'anthropic', base_url: 'http://127.0.0.1:1' },
    ],
    models: [
      { name: 'gpt-test', provider: 'up' },
      { name: 'claude-test', provider: 'claude' },
      { name: 'claude-gone', provider: 'gone' },
    ],
    keys: [CLIENT_KEY],
    downstream: { request_body_limit_bytes: 1024 },
    ...extra,
  };
}

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({ config: config() });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

const message = (model: string) => ({ model, max_tokens: 5, messages: [{ role: 'user' as const, content: 'hi' }] });

function anthropicClient(apiKey = CLIENT_KEY): Anthropic {
  return new Anthropic({ baseURL: gw.proxyUrl, apiKey, maxRetries: 0 });
}

/** Asserts the SDK raised `kind` with our message and Anthropic's error `type`. */
function sdkError(kind: new (...args: never[]) => Error, type: string, message: RegExp) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof kind, `expected ${kind.name}, got ${String(error)}`);
    const apiError = error as InstanceType<typeof Anthropic.APIError>;
    // The body is Anthropic's error shape, so the SDK reads its parts: our message and type.
    assert.deepEqual(Object.keys(apiError.error as object).sort(), ['error', 'type']);
    assert.equal((apiError.error as { type: string }).type, 'error');
    assert.equal(apiError.type, type);
    assert.match(apiError.apiMessage ?? '', message);
    return true;
  };
}

describe('the Anthropic SDK sees our errors as its own', () => {
  test('a wrong key is an AuthenticationError with our message', async () => {
    await assert.rejects(anthropicClient('sk-wrong-key-123').messages.create(message('claude-test')), sdkError(Anthropic.AuthenticationError, 'authentication_error', /invalid API key/));
    await assert.rejects(anthropicClient('sk-wrong-key-123').messages.countTokens(message('claude-test')), sdkError(Anthropic.AuthenticationError, 'authentication_error', /invalid API key/));
    await assert.rejects(anthropicClient('sk-wrong-key-123').models.list(), sdkError(Anthropic.AuthenticationError, 'authentication_error', /invalid API key/));
  });

  test('an unknown model is a NotFoundError; what an OpenAI-type model cannot be asked (extended thinking) is a BadRequestError naming it', async () => {
    await assert.rejects(anthropicClient().messages.create(message('no-such-model')), sdkError(Anthropic.NotFoundError, 'not_found_error', /model "no-such-model" is not configured/));
    await assert.rejects(
      anthropicClient().messages.create({ ...message('gpt-test'), max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 1024 } }),
      sdkError(Anthropic.BadRequestError, 'invalid_request_error', /parameter "thinking"/),
    );
  });

  test('a body over the limit is a 413 request_too_large', async () => {
    const big = { ...message('claude-test'), messages: [{ role: 'user' as const, content: 'x'.repeat(4096) }] };
    await assert.rejects(anthropicClient().messages.create(big), sdkError(Anthropic.APIError, 'request_too_large', /exceeds the limit of 1024 bytes/));
  });

  test('a provider that cannot be reached is a 502 api_error naming it', async () => {
    await assert.rejects(anthropicClient().messages.create(message('claude-gone')), (error: unknown) => {
      assert.equal((error as { status?: number }).status, 502);
      return sdkError(Anthropic.InternalServerError, 'api_error', /could not connect to provider "gone"/)(error);
    });
  });

  test('a body that is not JSON, raw: Anthropic\'s shape with invalid_request_error', async () => {
    const res = await fetch(`${gw.proxyUrl}/v1/messages`, { method: 'POST', headers: { 'x-api-key': CLIENT_KEY, 'content-type': 'application/json' }, body: '{"model":' });
    assert.equal(res.status, 400);
    assert.equal(assertAnthropicError(await res.text(), 'bad JSON').type, 'invalid_request_error');
  });

  test('a stream the upstream cuts ends with an error event in Anthropic\'s shape', async () => {
    const res = await fetch(`${gw.proxyUrl}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': CLIENT_KEY, 'content-type': 'application/json', ...mockHeader({ disconnectAfterEvents: 2 }) },
      body: JSON.stringify({ ...message('claude-test'), stream: true }),
    });
    assert.equal(res.status, 200);
    const last = sseBlocks(await res.text()).at(-1)!;
    assert.match(last, /^event: error$/m);
    assert.equal(assertAnthropicError(last.slice(last.indexOf('data: ') + 6), 'stream error').type, 'api_error');
  });
});

describe('the OpenAI routes keep OpenAI\'s shape', () => {
  test('a wrong key on /v1/chat/completions is an OpenAI AuthenticationError with code invalid_api_key, even with anthropic-version', async () => {
    const openai = new OpenAI({ baseURL: `${gw.proxyUrl}/v1`, apiKey: 'sk-wrong-key-123', maxRetries: 0, defaultHeaders: { 'anthropic-version': '2023-06-01' } });
    await assert.rejects(openai.chat.completions.create({ model: 'gpt-test', messages: [{ role: 'user', content: 'x' }] }), (error: unknown) => {
      assert.ok(error instanceof OpenAI.AuthenticationError, String(error));
      assert.equal(error.code, 'invalid_api_key');
      return true;
    });
  });

  test('/v1/models answers an OpenAI client (no anthropic-version) in OpenAI\'s shape', async () => {
    const res = await fetch(`${gw.proxyUrl}/v1/models`);
    assert.equal(res.status, 401);
    assert.equal(assertOpenAiError(await res.text(), 'models without a key').code, 'missing_api_key');
  });
});

test('L8: a /v1/messages request the forced drain ends gets its 503 in Anthropic\'s shape', async () => {
  const drained = await startGateway({ config: config({ shutdown: { min_drain_secs: 0 } }) });
  try {
    mock.reset();
    const pending = fetch(`${drained.proxyUrl}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': CLIENT_KEY, 'content-type': 'application/json', ...mockHeader({ headersDelayMs: 60_000 }) },
      body: JSON.stringify(message('claude-test')),
    }).then(async (res) => ({ status: res.status, body: await res.text() }));
    await mock.waitFor((r) => r.some((x) => x.path === '/v1/messages'));
    drained.signal('SIGTERM');
    await drained.waitForLog((l) => l.event === 'drain_started');
    drained.signal('SIGTERM');
    const answer = await pending;
    assert.equal(answer.status, 503, answer.body);
    const error = assertAnthropicError(answer.body, 'drain forced');
    assert.equal(error.type, 'api_error');
    assert.match(error.message, /shutting down/);
    assert.equal((await drained.exited).code, 1);
  } finally {
    await drained.stop();
  }
});
