// Every proxy endpoint through the built gateway against the mock upstream: JSON and SSE, model
// rewriting, header handling, status relay.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream } from '../support/mock-upstream.ts';

let mock: MockUpstream;
let gw: GatewayProcess;

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [
        { name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-provider-secret-openai' },
        { name: 'claude', type: 'anthropic', base_url: mock.url, api_key: 'sk-ant-provider-secret' },
        { name: 'echo', type: 'echo' },
      ],
      models: [
        { name: 'gpt-test', provider: 'up' },
        { name: 'alias', provider: 'up', upstream_model: 'real-model' },
        { name: 'claude-test', provider: 'claude' },
        { name: 'echo', provider: 'echo' },
        { name: 'pre-*', provider: 'up' },
      ],
    },
  });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

function post(path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${gw.proxyUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

function sseData(text: string): string[] {
  return text
    .split('\n')
    .filter((l) => l.startsWith('data: '))
    .map((l) => l.slice(6));
}

describe('chat completions', () => {
  test('JSON answer relayed with status, headers and our x-request-id', async () => {
    mock.reset();
    const res = await post('/v1/chat/completions', { model: 'gpt-test', messages: [{ role: 'user', content: 'hi' }] }, { 'x-request-id': 'caller-1' });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { choices: { message: { content: string } }[]; model: string };
    assert.equal(body.choices[0]!.message.content, 'mock reply to: hi');
    assert.match(res.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
    assert.notEqual(res.headers.get('x-request-id'), 'caller-1');
    const seen = mock.received[0]!;
    assert.equal(seen.path, '/v1/chat/completions');
    assert.equal(seen.headers.authorization, 'Bearer sk-provider-secret-openai');
  });

  test('SSE is relayed chunk by chunk as it arrives', async () => {
    const res = await post(
      '/v1/chat/completions',
      { model: 'gpt-test', stream: true, messages: [{ role: 'user', content: 'stream me' }] },
      mockHeader({ chunks: 4, sseIntervalMs: 150 }),
    );
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const reader = res.body!.getReader();
    const first = await reader.read();
    const firstAt = Date.now();
    let rest = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      rest += Buffer.from(value).toString();
    }
    const spread = Date.now() - firstAt;
    // The first chunk reached us well before the stream ended: no buffering in between.
    assert.ok(spread >= 400, `stream arrived in one piece (spread ${spread} ms)`);
    const events = sseData(Buffer.from(first.value!).toString() + rest);
    assert.equal(events.at(-1), '[DONE]');
  });

  test('upstream_model replaces the model sent upstream; the client model picks the route', async () => {
    mock.reset();
    const res = await post('/v1/chat/completions', { model: 'alias', messages: [{ role: 'user', content: 'x' }] });
    assert.equal(res.status, 200);
    assert.equal((mock.received[0]!.json as { model: string }).model, 'real-model');
  });

  test('a prefix pattern routes matching names', async () => {
    mock.reset();
    const res = await post('/v1/chat/completions', { model: 'pre-anything', messages: [] });
    assert.equal(res.status, 200);
    assert.equal((mock.received[0]!.json as { model: string }).model, 'pre-anything');
  });

  test('request headers forwarded except hop-by-hop, host, client credentials and the provider account\'s', async () => {
    mock.reset();
    // node:http, because fetch will not send a `Connection` header of our choosing.
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(`${gw.proxyUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          authorization: 'Bearer client-key-should-not-pass',
          'x-api-key': 'client-x-api-key',
          'openai-organization': 'org-1',
          'openai-beta': 'assistants=v2',
          'x-custom': 'kept',
          'x-drop-me': 'gone',
          connection: 'keep-alive, x-drop-me',
        },
      }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      });
      req.on('error', reject);
      req.end(JSON.stringify({ model: 'gpt-test', messages: [] }));
    });
    assert.equal(status, 200);
    const h = mock.received[0]!.headers;
    assert.equal(h.authorization, 'Bearer sk-provider-secret-openai');
    assert.equal(h['x-api-key'], undefined);
    assert.equal(h['openai-organization'], undefined, 'the operator\'s provider account: not the client\'s to choose');
    assert.equal(h['openai-beta'], 'assistants=v2');
    assert.equal(h['x-custom'], 'kept');
    assert.equal(h['x-drop-me'], undefined);
    assert.notEqual(h.host, new URL(gw.proxyUrl).host);
  });

  test('upstream error statuses and headers are relayed', async () => {
    const res = await post('/v1/chat/completions', { model: 'gpt-test', messages: [] }, mockHeader({ status: 429, headers: { 'retry-after': '7' } }));
    assert.equal(res.status, 429);
    assert.equal(res.headers.get('retry-after'), '7');
    const body = (await res.json()) as { error: { message: string } };
    assert.ok(body.error.message);
  });

  test('hop-by-hop and response-splitting headers from upstream are dropped', async () => {
    const res = await post('/v1/chat/completions', { model: 'gpt-test', messages: [] }, mockHeader({ headers: { 'keep-alive': 'timeout=1', 'x-up': 'yes' } }));
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-up'), 'yes');
    assert.equal(res.headers.get('keep-alive'), null);
  });
});

describe('other endpoints', () => {
  test('completions JSON and stream', async () => {
    const res = await post('/v1/completions', { model: 'gpt-test', prompt: 'say' });
    assert.equal(res.status, 200);
    assert.equal(((await res.json()) as { object: string }).object, 'text_completion');
    const streamed = await post('/v1/completions', { model: 'gpt-test', prompt: 'say', stream: true });
    assert.equal(sseData(await streamed.text()).at(-1), '[DONE]');
  });

  test('embeddings', async () => {
    const res = await post('/v1/embeddings', { model: 'gpt-test', input: ['a', 'b'] });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { data: unknown[] };
    assert.equal(body.data.length, 2);
  });

  test('responses', async () => {
    mock.reset();
    const res = await post('/v1/responses', { model: 'gpt-test', input: 'hello' });
    assert.equal(res.status, 200);
    assert.equal(((await res.json()) as { object: string }).object, 'response');
    assert.equal(mock.received[0]!.path, '/v1/responses');
  });

  test('Anthropic messages: native path, x-api-key and anthropic-version injected, JSON and SSE', async () => {
    mock.reset();
    const res = await post('/v1/messages', { model: 'claude-test', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }, { 'x-api-key': 'client-key' });
    assert.equal(res.status, 200);
    assert.equal(((await res.json()) as { type: string }).type, 'message');
    const seen = mock.received[0]!;
    assert.equal(seen.path, '/v1/messages');
    assert.equal(seen.headers['x-api-key'], 'sk-ant-provider-secret');
    assert.equal(seen.headers['anthropic-version'], '2023-06-01');
    assert.equal(seen.headers.authorization, undefined);
    const streamed = await post('/v1/messages', { model: 'claude-test', max_tokens: 10, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const text = await streamed.text();
    assert.match(text, /event: message_start/);
    assert.match(text, /event: message_stop/);
  });

  test('an OpenAI-type model on /v1/messages is translated: the provider gets Chat Completions, the client an Anthropic message', async () => {
    mock.reset();
    const res = await post('/v1/messages', { model: 'gpt-test', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { type: string; role: string; content: { type: string }[] };
    assert.equal(body.type, 'message');
    assert.equal(body.content[0]!.type, 'text');
    assert.equal(mock.received[0]!.path, '/v1/chat/completions');
  });

  test('an embeddings request to an Anthropic-type model is a clear 400: there is no translation for it', async () => {
    const res = await post('/v1/embeddings', { model: 'claude-test', input: 'x' });
    assert.equal(res.status, 400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'unsupported_endpoint');
    assert.match(body.error.message, /does not serve \/v1\/embeddings/);
  });

  test('GET /v1/models lists the exact names, and for patterns only what the provider lists (none matches pre-*)', async () => {
    const res = await fetch(`${gw.proxyUrl}/v1/models`);
    assert.equal(res.status, 200);
    const body = (await res.json()) as { object: string; data: { id: string; object: string }[] };
    assert.equal(body.object, 'list');
    assert.deepEqual(body.data.map((m) => m.id).sort(), ['alias', 'claude-test', 'echo', 'gpt-test']);
  });

  test('the echo provider answers every endpoint locally', async () => {
    const chat = await post('/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'ping' }] });
    assert.equal(((await chat.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content, 'echo: ping');
    const msg = await post('/v1/messages', { model: 'echo', max_tokens: 5, messages: [{ role: 'user', content: 'ping' }] });
    assert.equal(((await msg.json()) as { content: { text: string }[] }).content[0]!.text, 'echo: ping');
    const emb = await post('/v1/embeddings', { model: 'echo', input: 'x' });
    assert.equal(((await emb.json()) as { data: { embedding: number[] }[] }).data[0]!.embedding.length, 16);
    const cmp = await post('/v1/completions', { model: 'echo', prompt: 'p' });
    assert.equal(cmp.status, 200);
    const rsp = await post('/v1/responses', { model: 'echo', input: 'p' });
    assert.equal(rsp.status, 200);
  });
});
