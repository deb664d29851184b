// What a client key may do, through the built gateway: the models it may call (403 in the caller's
// shape, /v1/models filtered), its expiry and its enabled flag (401 saying which), and its name,
// never the key, in the access log and the metrics.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { metricValue, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { assertAnthropicError, assertOpenAiError } from '../support/reliability.ts';

const LIMITED = 'sk-limited-key-000000001';
const EXPIRED = 'sk-expired-key-000000002';
const DISABLED = 'sk-disabled-key-00000003';
const FULL = 'sk-full-key-0000000000004';

let mock: MockUpstream;
let gw: GatewayProcess;

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [
        { name: 'oa', type: 'openai', base_url: `${mock.url}/v1` },
        { name: 'an', type: 'anthropic', base_url: mock.url },
      ],
      models: [
        { name: 'mock-gpt', provider: 'oa' },
        { name: 'gpt-4o', provider: 'oa' },
        { name: 'claude-*', provider: 'an' },
      ],
      keys: [
        { name: 'search-team', key: LIMITED, models: ['mock-gpt', 'claude-*'], metadata: { team: 'search' } },
        { name: 'old', key: EXPIRED, expires_at: '2020-01-01T00:00:00Z' },
        { name: 'paused', key: DISABLED, enabled: false },
        { name: 'ops', key: FULL },
      ],
    },
  });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

const chat = (key: string, model: string) =>
  fetch(`${gw.proxyUrl}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }) });
const message = (key: string, model: string) =>
  fetch(`${gw.proxyUrl}/v1/messages`, { method: 'POST', headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' }, body: JSON.stringify({ model, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }) });

describe('a key\'s models', () => {
  test('a key limited to some models calls them; any other is a 403 in the caller\'s shape, and nothing reaches the provider', async () => {
    assert.equal((await chat(LIMITED, 'mock-gpt')).status, 200);
    assert.equal((await message(LIMITED, 'claude-sonnet-4-5')).status, 200);
    mock.reset();
    const openai = await chat(LIMITED, 'gpt-4o');
    assert.equal(openai.status, 403);
    const error = assertOpenAiError(await openai.text(), '403 chat');
    assert.equal(error.code, 'model_not_allowed');
    assert.equal(error.type, 'permission_error');
    assert.match(error.message, /"search-team" may not use model "gpt-4o"/);
    const anthropic = await message(LIMITED, 'gpt-4o');
    assert.equal(anthropic.status, 403);
    assert.equal(assertAnthropicError(await anthropic.text(), '403 messages').type, 'permission_error');
    assert.equal(mock.received.length, 0);
    assert.equal((await chat(FULL, 'gpt-4o')).status, 200, 'a key without a models list calls every model');
  });

  test('/v1/models lists only what the key may call; a model it may not is not found', async () => {
    const list = await fetch(`${gw.proxyUrl}/v1/models`, { headers: { authorization: `Bearer ${LIMITED}` } });
    const ids = ((await list.json()) as { data: { id: string }[] }).data.map((m) => m.id);
    assert.ok(ids.includes('mock-gpt'));
    assert.ok(!ids.includes('gpt-4o'), `listed: ${ids.join(', ')}`);
    const full = ((await (await fetch(`${gw.proxyUrl}/v1/models`, { headers: { authorization: `Bearer ${FULL}` } })).json()) as { data: { id: string }[] }).data.map((m) => m.id);
    assert.ok(full.includes('gpt-4o'));
    assert.equal((await fetch(`${gw.proxyUrl}/v1/models/gpt-4o`, { headers: { authorization: `Bearer ${LIMITED}` } })).status, 404);
    assert.equal((await fetch(`${gw.proxyUrl}/v1/models/gpt-4o`, { headers: { authorization: `Bearer ${FULL}` } })).status, 200);
  });
});

describe('expiry and the enabled flag', () => {
  test('an expired key and a disabled key are refused with a 401 that says which, in both shapes', async () => {
    const expired = await chat(EXPIRED, 'mock-gpt');
    assert.equal(expired.status, 401);
    assert.equal(assertOpenAiError(await expired.text(), 'expired').code, 'api_key_expired');
    const disabled = await message(DISABLED, 'claude-x');
    assert.equal(disabled.status, 401);
    const body = assertAnthropicError(await disabled.text(), 'disabled');
    assert.equal(body.type, 'authentication_error');
    assert.match(body.message, /"paused" is disabled/);
  });
});

describe('the key\'s name in the access log and the metrics, never the key', () => {
  test('access lines and sluice_requests_total carry the key name; no raw key anywhere in the output or /metrics', async () => {
    const answer = await chat(LIMITED, 'mock-gpt');
    const rid = answer.headers.get('x-request-id');
    await answer.text();
    const line = await gw.waitForLog((l) => l.event === 'access' && l.request_id === rid);
    assert.equal(line.key_name, 'search-team');
    await chat(EXPIRED, 'mock-gpt');
    await gw.waitForLog((l) => l.event === 'access' && l.key_name === 'old' && l.status === 401);
    const metrics = await scrape(gw);
    assert.ok((metricValue(metrics, 'sluice_requests_total', { key: 'search-team', status: '200' }) ?? 0) >= 1);
    assert.ok((metricValue(metrics, 'sluice_requests_total', { key: 'old', status: '401' }) ?? 0) >= 1);
    assert.ok((metricValue(metrics, 'sluice_tokens_total', { key: 'search-team', type: 'prompt' }) ?? 0) > 0);
    for (const secret of [LIMITED, EXPIRED, DISABLED, FULL]) {
      assert.ok(!gw.stdout().includes(secret) && !gw.stderr().includes(secret), 'no raw key in the output');
      assert.ok(!metrics.includes(secret), 'no raw key in /metrics');
    }
  });
});
