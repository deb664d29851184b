// The official clients, as installed and unchanged, through the built gateway with a client key:
// the gateway must look like OpenAI to `openai` and like Anthropic to `@anthropic-ai/sdk`, and the
// upstream must see the provider's key, never the client's.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';

const CLIENT_KEY = 'sk-client-key-sdk-1';
const OPENAI_PROVIDER_KEY = 'sk-provider-openai-sdk-secret';
const ANTHROPIC_PROVIDER_KEY = 'sk-ant-provider-sdk-secret';

let mock: MockUpstream;
let gw: GatewayProcess;
let openai: OpenAI;
let anthropic: Anthropic;

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [
        { name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: OPENAI_PROVIDER_KEY },
        { name: 'claude', type: 'anthropic', base_url: mock.url, api_key: ANTHROPIC_PROVIDER_KEY },
        { name: 'local', type: 'echo' },
      ],
      models: [
        { name: 'gpt-test', provider: 'up' },
        { name: 'embed-test', provider: 'up' },
        { name: 'claude-test', provider: 'claude' },
        { name: 'echo', provider: 'local' },
      ],
      keys: [CLIENT_KEY],
    },
  });
  openai = new OpenAI({ baseURL: `${gw.proxyUrl}/v1`, apiKey: CLIENT_KEY, maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: gw.proxyUrl, apiKey: CLIENT_KEY, maxRetries: 0 });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

/** Every recorded upstream request carries the provider key and no trace of the client key. */
function assertUpstreamCredentials(expectedPaths: string[]): void {
  assert.deepEqual(mock.received.map((r) => r.path), expectedPaths);
  for (const seen of mock.received) {
    if (seen.path === '/v1/messages') {
      assert.equal(seen.headers['x-api-key'], ANTHROPIC_PROVIDER_KEY);
      assert.equal(seen.headers.authorization, undefined);
    } else {
      assert.equal(seen.headers.authorization, `Bearer ${OPENAI_PROVIDER_KEY}`);
      assert.equal(seen.headers['x-api-key'], undefined);
    }
    const all = JSON.stringify(seen.headers) + seen.body;
    assert.ok(!all.includes(CLIENT_KEY), `the client key reached the upstream on ${seen.path}`);
  }
}

describe('openai SDK', () => {
  test('chat completion', async () => {
    mock.reset();
    const completion = await openai.chat.completions.create({ model: 'gpt-test', messages: [{ role: 'user', content: 'ping' }] });
    assert.equal(completion.object, 'chat.completion');
    assert.equal(completion.choices[0]!.message.content, 'mock reply to: ping');
    assert.equal(completion.usage?.total_tokens, 18);
    assert.equal((mock.received[0]!.json as { model: string }).model, 'gpt-test');
    assertUpstreamCredentials(['/v1/chat/completions']);
  });

  test('chat completion, streamed', async () => {
    mock.reset();
    const stream = await openai.chat.completions.create({
      model: 'gpt-test',
      messages: [{ role: 'user', content: 'stream please' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let chunks = 0;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      chunks++;
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, 'mock reply to: stream please');
    assert.ok(chunks >= 5, `only ${chunks} chunks`);
    assert.equal(usage?.completion_tokens, 7);
    assertUpstreamCredentials(['/v1/chat/completions']);
  });

  test('embeddings (the SDK asks for base64 and decodes it)', async () => {
    mock.reset();
    const result = await openai.embeddings.create({ model: 'embed-test', input: ['one', 'two'] });
    assert.equal(result.data.length, 2);
    assert.equal(result.data[0]!.embedding.length, 8);
    assert.ok(result.data[0]!.embedding.every((v) => typeof v === 'number' && v >= -1 && v < 1));
    assert.notDeepEqual(result.data[0]!.embedding, result.data[1]!.embedding);
    assertUpstreamCredentials(['/v1/embeddings']);
  });

  test('models.list() returns the configured models', async () => {
    mock.reset();
    const ids: string[] = [];
    for await (const model of openai.models.list()) ids.push(model.id);
    assert.deepEqual(ids.sort(), ['claude-test', 'echo', 'embed-test', 'gpt-test']);
    // Answered by the gateway itself.
    assert.equal(mock.received.length, 0);
  });

  test('responses.create', async () => {
    mock.reset();
    const response = await openai.responses.create({ model: 'gpt-test', input: 'hello' });
    assert.equal(response.object, 'response');
    assert.equal(response.status, 'completed');
    assert.equal(response.output_text, 'mock');
    assertUpstreamCredentials(['/v1/responses']);
  });

  test('against the echo provider: chat, stream, embeddings, responses', async () => {
    mock.reset();
    const completion = await openai.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'hello echo' }] });
    assert.equal(completion.choices[0]!.message.content, 'echo: hello echo');
    const stream = await openai.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'one two three' }], stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    assert.equal(text, 'echo: one two three');
    const emb = await openai.embeddings.create({ model: 'echo', input: 'x', encoding_format: 'float' });
    assert.equal(emb.data[0]!.embedding.length, 16);
    const response = await openai.responses.create({ model: 'echo', input: 'respond' });
    assert.equal(response.output_text, 'echo: respond');
    assert.equal(mock.received.length, 0);
  });

  test('a wrong client key throws AuthenticationError (401)', async () => {
    mock.reset();
    const wrong = new OpenAI({ baseURL: `${gw.proxyUrl}/v1`, apiKey: 'sk-not-the-client-key', maxRetries: 0 });
    await assert.rejects(wrong.chat.completions.create({ model: 'gpt-test', messages: [{ role: 'user', content: 'x' }] }), (error: unknown) => {
      assert.ok(error instanceof OpenAI.AuthenticationError, `got ${String(error)}`);
      assert.equal(error.status, 401);
      assert.equal(error.code, 'invalid_api_key');
      assert.equal(error.type, 'authentication_error');
      assert.match(error.headers?.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
      return true;
    });
    await assert.rejects(wrong.models.list(), OpenAI.AuthenticationError);
    assert.equal(mock.received.length, 0);
  });

  test('an unknown model throws NotFoundError (404)', async () => {
    await assert.rejects(openai.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }), (error: unknown) => {
      assert.ok(error instanceof OpenAI.NotFoundError, `got ${String(error)}`);
      assert.equal(error.code, 'model_not_found');
      return true;
    });
  });
});

describe('@anthropic-ai/sdk', () => {
  const params = { model: 'claude-test', max_tokens: 64, messages: [{ role: 'user' as const, content: 'hi' }] };

  test('messages.create', async () => {
    mock.reset();
    const message = await anthropic.messages.create(params);
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.deepEqual(message.content, [{ type: 'text', text: 'mock reply' }]);
    assert.equal(message.stop_reason, 'end_turn');
    assert.deepEqual(message.usage, { input_tokens: 10, output_tokens: 6 });
    // The SDK's own anthropic-version is kept (the gateway only fills it in when absent).
    assert.match(String(mock.received[0]!.headers['anthropic-version']), /^\d{4}-\d{2}-\d{2}$/);
    assertUpstreamCredentials(['/v1/messages']);
  });

  test('messages.stream(...).finalMessage()', async () => {
    mock.reset();
    const stream = anthropic.messages.stream(params);
    let streamed = '';
    stream.on('text', (delta) => (streamed += delta));
    const message = await stream.finalMessage();
    assert.equal(streamed, 'mock reply');
    assert.deepEqual(message.content, [{ type: 'text', text: 'mock reply' }]);
    assert.equal(message.usage.output_tokens, 6);
    assert.equal(message.stop_reason, 'end_turn');
    assertUpstreamCredentials(['/v1/messages']);
  });

  test('against the echo provider: create and stream', async () => {
    mock.reset();
    const message = await anthropic.messages.create({ ...params, model: 'echo', messages: [{ role: 'user', content: 'bonjour' }] });
    assert.deepEqual(message.content, [{ type: 'text', text: 'echo: bonjour' }]);
    const final = await anthropic.messages.stream({ ...params, model: 'echo', messages: [{ role: 'user', content: 'a b c' }] }).finalMessage();
    assert.deepEqual(final.content, [{ type: 'text', text: 'echo: a b c' }]);
    assert.equal(final.stop_reason, 'end_turn');
    assert.equal(mock.received.length, 0);
  });

  test('a wrong client key throws AuthenticationError (401)', async () => {
    mock.reset();
    const wrong = new Anthropic({ baseURL: gw.proxyUrl, apiKey: 'sk-not-the-client-key', maxRetries: 0 });
    await assert.rejects(wrong.messages.create(params), (error: unknown) => {
      assert.ok(error instanceof Anthropic.AuthenticationError, `got ${String(error)}`);
      assert.equal(error.status, 401);
      return true;
    });
    assert.equal(mock.received.length, 0);
  });
});
