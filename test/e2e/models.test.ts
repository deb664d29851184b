// Model discovery through the built gateway with the official SDKs: `/v1/models` lists what a
// client can call (exact names, and for patterns what the provider's own list offers), answers
// `/v1/models/{id}`, speaks Anthropic's list shape to Anthropic clients, falls back to the exact
// names when a provider cannot be asked; and `POST /v1/messages/count_tokens` is relayed.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, MOCK_ANTHROPIC_MODELS, type MockUpstream } from '../support/mock-upstream.ts';

const CLIENT_KEY = 'sk-client-key-models-1';
const OPENAI_PROVIDER_KEY = 'sk-provider-openai-models-secret';
const ANTHROPIC_PROVIDER_KEY = 'sk-ant-provider-models-secret';

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
        // Nothing listens on port 1: its list cannot be fetched.
        { name: 'down', type: 'openai', base_url: 'http://127.0.0.1:1/v1' },
        { name: 'local', type: 'echo' },
      ],
      models: [
        { name: 'gpt-test', provider: 'up' },
        { name: 'org/model-x', provider: 'up' },
        { name: 'claude-test', provider: 'claude' },
        { name: 'dead-exact', provider: 'down' },
        { name: 'gpt-*', provider: 'up' },
        // Longer prefix: gpt-4o-mini goes to echo, so `up` must not list it.
        { name: 'gpt-4o-mini*', provider: 'local' },
        { name: 'claude-*', provider: 'claude' },
        { name: 'dead-*', provider: 'down' },
        { name: 'echo-*', provider: 'local' },
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

const EXPECTED = [
  // exact names, in config order
  'gpt-test', 'org/model-x', 'claude-test', 'dead-exact',
  // `gpt-*` on up: the mock lists mock-gpt, mock-claude, gpt-4o, gpt-4o-mini, text-embedding-3-small
  'gpt-4o',
  // `claude-*` on claude, in the provider's order (mock-claude has no route)
  'claude-sonnet-4-5', 'claude-haiku-4-5', 'claude-opus-4-1',
];

describe('GET /v1/models', () => {
  test('the OpenAI SDK lists exact names and what each pattern reaches on its provider', async () => {
    mock.reset();
    const models = [];
    for await (const model of openai.models.list()) models.push(model);
    assert.deepEqual(models.map((m) => m.id), EXPECTED);
    const byId = new Map(models.map((m) => [m.id, m]));
    assert.equal(byId.get('gpt-4o')!.owned_by, 'up');
    assert.equal(byId.get('gpt-4o')!.created, 1_700_000_000);
    assert.equal(byId.get('claude-sonnet-4-5')!.owned_by, 'claude');
    assert.equal(byId.get('claude-sonnet-4-5')!.created, Date.parse('2025-09-29T00:00:00Z') / 1000);
    assert.equal(byId.get('gpt-test')!.object, 'model');
    // The providers were asked with their own credentials, never the client's key.
    const asked = mock.received.filter((r) => r.method === 'GET');
    assert.deepEqual(asked.map((r) => r.path).sort(), ['/v1/models', '/v1/models?limit=1000']);
    for (const r of asked) {
      assert.ok(!JSON.stringify(r.headers).includes(CLIENT_KEY));
      if (r.path === '/v1/models') assert.equal(r.headers.authorization, `Bearer ${OPENAI_PROVIDER_KEY}`);
      else {
        assert.equal(r.headers['x-api-key'], ANTHROPIC_PROVIDER_KEY);
        assert.equal(r.headers['anthropic-version'], '2023-06-01');
      }
    }
  });

  test('the provider lists are cached: listing again asks no provider', async () => {
    await openai.models.list();
    mock.reset();
    for (let i = 0; i < 3; i++) assert.deepEqual((await openai.models.list()).data.map((m) => m.id), EXPECTED);
    assert.deepEqual(mock.received.filter((r) => r.method === 'GET').map((r) => r.path), []);
  });

  test('a provider that cannot be reached leaves its pattern out, keeps its exact names, and is logged once', async () => {
    for (let i = 0; i < 2; i++) await openai.models.list();
    const ids = (await openai.models.list()).data.map((m) => m.id);
    assert.ok(ids.includes('dead-exact'));
    // The log line is read from the process's stdout: wait for it rather than race it.
    await gw.waitForLog((l) => l.event === 'models_list_failed');
    const failed = gw.logs.filter((l) => l.event === 'models_list_failed');
    assert.equal(failed.length, 1, JSON.stringify(failed));
    assert.equal(failed[0]!.provider, 'down');
    assert.equal(failed[0]!.reason, 'ECONNREFUSED');
  });

  test('the Anthropic SDK gets Anthropic\'s shape, page by page', async () => {
    const models = [];
    for await (const model of anthropic.models.list({ limit: 3 })) models.push(model);
    assert.deepEqual(models.map((m) => m.id), EXPECTED);
    const sonnet = models.find((m) => m.id === 'claude-sonnet-4-5')!;
    assert.deepEqual(sonnet, { type: 'model', id: 'claude-sonnet-4-5', display_name: 'Claude Sonnet 4.5', created_at: '2025-09-29T00:00:00Z' });
    const exact = models.find((m) => m.id === 'gpt-test')!;
    assert.deepEqual(exact, { type: 'model', id: 'gpt-test', display_name: 'gpt-test', created_at: '1970-01-01T00:00:00Z' });
    // One page as the API gives it: has_more, first_id, last_id.
    const res = await fetch(`${gw.proxyUrl}/v1/models?limit=2&after_id=gpt-test`, { headers: { 'x-api-key': CLIENT_KEY, 'anthropic-version': '2023-06-01' } });
    assert.equal(res.status, 200);
    const page = (await res.json()) as { data: { id: string }[]; has_more: boolean; first_id: string; last_id: string };
    assert.deepEqual(page.data.map((m) => m.id), ['org/model-x', 'claude-test']);
    assert.deepEqual([page.has_more, page.first_id, page.last_id], [true, 'org/model-x', 'claude-test']);
    const last = (await (await fetch(`${gw.proxyUrl}/v1/models?before_id=gpt-4o&limit=1`, { headers: { 'x-api-key': CLIENT_KEY, 'anthropic-version': '2023-06-01' } })).json()) as { data: { id: string }[]; has_more: boolean };
    assert.deepEqual([last.data.map((m) => m.id), last.has_more], [['dead-exact'], true]);
  });

  test('a bad page parameter is a 400 in Anthropic\'s shape', async () => {
    const res = await fetch(`${gw.proxyUrl}/v1/models?limit=0`, { headers: { 'x-api-key': CLIENT_KEY, 'anthropic-version': '2023-06-01' } });
    assert.equal(res.status, 400);
    const body = (await res.json()) as { type: string; error: { type: string; message: string } };
    assert.equal(body.type, 'error');
    assert.equal(body.error.type, 'invalid_request_error');
    assert.match(body.error.message, /limit/);
  });
});

describe('GET /v1/models/{id}', () => {
  test('a model a client can call is found, by either SDK', async () => {
    const exact = await openai.models.retrieve('gpt-test');
    assert.deepEqual({ ...exact }, { id: 'gpt-test', object: 'model', created: 0, owned_by: 'up' });
    const listed = await openai.models.retrieve('gpt-4o');
    assert.equal(listed.owned_by, 'up');
    assert.equal(listed.created, 1_700_000_000);
    const claude = await anthropic.models.retrieve('claude-haiku-4-5');
    assert.deepEqual({ ...claude }, { type: 'model', id: 'claude-haiku-4-5', display_name: 'Claude Haiku 4.5', created_at: '2025-10-01T00:00:00Z' });
    // A pattern on a provider that keeps no list (echo) or cannot be asked: the route decides.
    assert.equal((await openai.models.retrieve('echo-anything')).owned_by, 'local');
    assert.equal((await openai.models.retrieve('dead-whatever')).owned_by, 'down');
  });

  test('an id may contain "/", escaped or not', async () => {
    assert.equal((await openai.models.retrieve('org/model-x')).id, 'org/model-x');
    const raw = await fetch(`${gw.proxyUrl}/v1/models/org/model-x`, { headers: { authorization: `Bearer ${CLIENT_KEY}` } });
    assert.equal(raw.status, 200);
    assert.equal(((await raw.json()) as { id: string }).id, 'org/model-x');
  });

  test('a model no route reaches, or that its pattern\'s provider does not list, is a 404 in the caller\'s shape', async () => {
    await assert.rejects(openai.models.retrieve('nothing-here'), (error: unknown) => {
      assert.ok(error instanceof OpenAI.NotFoundError, String(error));
      assert.equal((error.error as { code: string }).code, 'model_not_found');
      return true;
    });
    await assert.rejects(openai.models.retrieve('gpt-does-not-exist'), (error: unknown) => {
      assert.ok(error instanceof OpenAI.NotFoundError, String(error));
      assert.match(error.message, /provider "up", which does not list it/);
      return true;
    });
    await assert.rejects(anthropic.models.retrieve('claude-nope'), (error: unknown) => {
      assert.ok(error instanceof Anthropic.NotFoundError, String(error));
      assert.deepEqual((error.error as { error: { type: string } }).error.type, 'not_found_error');
      assert.match(error.message, /claude-nope/);
      return true;
    });
  });

  test('the client key is required, and other methods are refused', async () => {
    const res = await fetch(`${gw.proxyUrl}/v1/models/gpt-test`);
    assert.equal(res.status, 401);
    const del = await fetch(`${gw.proxyUrl}/v1/models/gpt-test`, { method: 'DELETE', headers: { authorization: `Bearer ${CLIENT_KEY}` } });
    assert.equal(del.status, 405);
  });
});

describe('POST /v1/messages/count_tokens', () => {
  test('relayed to an Anthropic-type provider with its credentials, counted under its own endpoint', async () => {
    mock.reset();
    const count = await anthropic.messages.countTokens({ model: 'claude-test', messages: [{ role: 'user', content: 'twelve chars' }] });
    assert.equal(count.input_tokens, 'twelve chars'.length);
    const seen = mock.received.at(-1)!;
    assert.equal(seen.path, '/v1/messages/count_tokens');
    assert.equal(seen.headers['x-api-key'], ANTHROPIC_PROVIDER_KEY);
    assert.ok(!JSON.stringify(seen.headers).includes(CLIENT_KEY));
    await gw.waitForLog((l) => l.event === 'access' && l.path === '/v1/messages/count_tokens');
    const metrics = await (await fetch(`${gw.adminUrl}/metrics`)).text();
    assert.match(metrics, /sluice_requests_total\{endpoint="count_tokens",status="200",model="claude-test",key="key-0"\} 1/);
  });

  test('the echo provider counts locally; an OpenAI-type model is a clear 400 the SDK shows', async () => {
    const echo = await anthropic.messages.countTokens({ model: 'echo-x', messages: [{ role: 'user', content: 'three words here' }] });
    assert.equal(echo.input_tokens, 3);
    await assert.rejects(anthropic.messages.countTokens({ model: 'gpt-test', messages: [{ role: 'user', content: 'x' }] }), (error: unknown) => {
      assert.ok(error instanceof Anthropic.BadRequestError, String(error));
      assert.match(error.message, /does not serve \/v1\/messages\/count_tokens/);
      assert.equal((error.error as { error: { type: string } }).error.type, 'invalid_request_error');
      return true;
    });
  });
});

test('the mock\'s Anthropic list is what the claude-* expectations assume', () => {
  assert.deepEqual(MOCK_ANTHROPIC_MODELS.map((m) => m.id).filter((id) => id.startsWith('claude-')), EXPECTED.filter((id) => id.startsWith('claude-') && id !== 'claude-test'));
});
