// A `preset` on an `openai` provider, through the built gateway: the parameters the server
// refuses are dropped and named in `sluice-dropped-params`, renamed ones take its name, a server
// that refuses `stream_options` is never sent it (a stream's usage is then estimated, and still
// charged), and a translated Anthropic client is not told of the gateway's own stream_options.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { startGateway, scrape, metricValue, eventually, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';

let mock: MockUpstream;
let gw: GatewayProcess;

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [
        { name: 'mistral', type: 'openai', preset: 'mistral', base_url: `${mock.url}/v1`, api_key: 'sk-mistral-test' },
        { name: 'vllm', type: 'openai', preset: 'vllm', base_url: `${mock.url}/v1` },
      ],
      models: [
        { name: 'mistral-small', provider: 'mistral' },
        { name: 'local', provider: 'vllm' },
      ],
    },
  });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

const post = (path: string, body: object, headers: Record<string, string> = {}) =>
  request(`${gw.proxyUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

describe('openai presets', () => {
  test('mistral: refused parameters dropped and named, seed and max_completion_tokens renamed', async () => {
    const res = await post('/v1/chat/completions', { model: 'mistral-small', messages: [{ role: 'user', content: 'hi' }], seed: 7, max_completion_tokens: 20, logit_bias: { 1: 1 }, user: 'u1', temperature: 0.2 });
    await res.body.text();
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['sluice-dropped-params'], 'logit_bias, user');
    const sent = mock.received.at(-1)!.json as Record<string, unknown>;
    assert.equal(sent.random_seed, 7);
    assert.equal(sent.max_tokens, 20);
    for (const gone of ['seed', 'max_completion_tokens', 'logit_bias', 'user']) assert.ok(!(gone in sent), `${gone} was sent`);
    assert.equal(sent.temperature, 0.2);
  });

  test('mistral: a stream is never sent stream_options; its usage is estimated and charged', async () => {
    const before = metricValue(await scrape(gw), 'sluice_tokens_total', { model: 'mistral-small', provider: 'mistral', type: 'completion' }) ?? 0;
    const res = await post('/v1/chat/completions', { model: 'mistral-small', stream: true, messages: [{ role: 'user', content: 'count to five' }] });
    const text = await res.body.text();
    assert.equal(res.statusCode, 200);
    assert.ok(text.includes('[DONE]'));
    assert.equal(res.headers['sluice-dropped-params'], undefined, 'the client sent nothing refused');
    const sent = mock.received.at(-1)!.json as Record<string, unknown>;
    assert.ok(!('stream_options' in sent), 'stream_options reached a server that refuses it');
    await eventually(async () => (metricValue(await scrape(gw), 'sluice_tokens_total', { model: 'mistral-small', provider: 'mistral', type: 'completion' }) ?? 0) > before, 5000, 'completion tokens charged');
  });

  test("mistral: a client's own stream_options is dropped and named", async () => {
    const res = await post('/v1/chat/completions', { model: 'mistral-small', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hi' }] });
    await res.body.text();
    assert.equal(res.headers['sluice-dropped-params'], 'stream_options');
    assert.ok(!('stream_options' in (mock.received.at(-1)!.json as object)));
  });

  test('an Anthropic client translated to mistral: the translation is adapted, and its own stream_options is not named', async () => {
    const res = await post('/v1/messages', { model: 'mistral-small', max_tokens: 16, stream: true, messages: [{ role: 'user', content: 'hi' }] }, { 'anthropic-version': '2023-06-01' });
    const text = await res.body.text();
    assert.equal(res.statusCode, 200, text);
    assert.ok(text.includes('message_stop'));
    assert.equal(res.headers['sluice-dropped-params'], undefined);
    const sent = mock.received.at(-1)!.json as Record<string, unknown>;
    assert.ok(!('stream_options' in sent));
    assert.ok(!('max_completion_tokens' in sent));
  });

  test('vllm: everything passes, stream usage asked for as for openai', async () => {
    const res = await post('/v1/chat/completions', { model: 'local', stream: true, seed: 3, logit_bias: { 1: 1 }, messages: [{ role: 'user', content: 'hi' }] });
    await res.body.text();
    assert.equal(res.headers['sluice-dropped-params'], undefined);
    const sent = mock.received.at(-1)!.json as Record<string, unknown>;
    assert.deepEqual(sent.stream_options, { include_usage: true });
    assert.equal(sent.seed, 3);
  });
});
