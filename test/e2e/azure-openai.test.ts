// An `azure_openai` provider, through the built gateway, against the Azure OpenAI mock (which
// test/e2e/azure-mock-sdk.test.ts holds to the official client): the deployment path and its
// api-version, or the v1 API; the `api-key` header and never a client's; Azure's streams (a first
// chunk with no choices) relayed whole with their usage charged; an Anthropic client translated;
// the content filter as its own failure class; a 429 that falls back before the first token; a
// stream that finishes during a drain.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startGateway, scrape, metricValue, eventually, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockAzureOpenAI, FILTER_OUTPUT, FILTER_PROMPT, MOCK_AZURE_HEADER, type MockAzureOpenAI } from '../support/mock-azure-openai.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';

const CLIENT_KEY = 'sk-client-azure-test-1';
const API_VERSION = '2024-10-21';

let azure: MockAzureOpenAI;
let fallback: MockUpstream;
let gw: GatewayProcess;
let openai: OpenAI;
let anthropic: Anthropic;

before(async () => {
  azure = await startMockAzureOpenAI({ chunks: 4, usage: { prompt: 11, completion: 5, cached: 3 } });
  fallback = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [
        { name: 'azure', type: 'azure_openai', base_url: azure.url, api_key: azure.apiKey, api_version: API_VERSION },
        { name: 'azure-v1', type: 'azure_openai', base_url: azure.url, api_key: azure.apiKey },
        { name: 'other', type: 'openai', base_url: `${fallback.url}/v1`, api_key: 'sk-other-provider' },
      ],
      models: [
        { name: 'gpt-4o-mini', provider: 'azure' },
        { name: 'embed', provider: 'azure', upstream_model: 'text-embedding-3-small' },
        { name: 'v1-chat', provider: 'azure-v1', upstream_model: 'gpt-4o-mini' },
        {
          name: 'filtered-falls-back',
          targets: [
            { provider: 'azure', model: 'gpt-4o-mini', priority: 0 },
            { provider: 'other', model: 'other-model', priority: 1 },
          ],
          retry: { fallback_on: ['content_filter', 'rate_limited'] },
        },
        {
          name: 'throttled-falls-back',
          targets: [
            { provider: 'azure', model: 'gpt-4o-mini', priority: 0, headers: { [MOCK_AZURE_HEADER]: 'rate_limited' } },
            { provider: 'other', model: 'other-model', priority: 1 },
          ],
        },
      ],
      keys: [CLIENT_KEY],
      routing: { cooldown_failures: 0 },
    },
  });
  openai = new OpenAI({ baseURL: `${gw.proxyUrl}/v1`, apiKey: CLIENT_KEY, maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: gw.proxyUrl, apiKey: CLIENT_KEY, maxRetries: 0 });
});

after(async () => {
  await gw?.stop();
  await azure?.close();
  await fallback?.close();
});

/** The Azure requests since `from`, with no token requests. */
const since = (from: number) => azure.requests.slice(from).filter((r) => !r.path.includes('/oauth2/'));

describe('azure_openai', () => {
  test('chat goes to the deployment with the api-version and the provider key; the client key never leaves', async () => {
    const from = azure.requests.length;
    const answer = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] }, { headers: { 'api-key': CLIENT_KEY } });
    assert.equal(answer.choices[0]!.finish_reason, 'stop');
    assert.equal(answer.usage?.prompt_tokens, 11);
    const [seen, ...more] = since(from);
    assert.equal(more.length, 0);
    assert.equal(seen!.path, '/openai/deployments/gpt-4o-mini/chat/completions');
    assert.deepEqual(seen!.query, { 'api-version': API_VERSION });
    assert.equal(seen!.headers['api-key'], azure.apiKey, 'the provider key, in place of the api-key the client sent');
    assert.equal(seen!.headers.authorization, undefined);
    assert.ok(!seen!.raw.includes(CLIENT_KEY) && !JSON.stringify(seen!.headers).includes(CLIENT_KEY));
  });

  test('without api_version, the v1 API: the deployment in the body', async () => {
    const from = azure.requests.length;
    const answer = await openai.chat.completions.create({ model: 'v1-chat', messages: [{ role: 'user', content: 'hello' }] });
    assert.equal(answer.choices[0]!.message.role, 'assistant');
    const [seen] = since(from);
    assert.equal(seen!.path, '/openai/v1/chat/completions');
    assert.deepEqual(seen!.query, {});
    assert.equal((seen!.body as { model: string }).model, 'gpt-4o-mini');
  });

  test("a stream with Azure's first chunk (no choices) is relayed whole; its usage, asked by the gateway, is hidden and charged", async () => {
    const before = metricValue(await scrape(gw), 'sluice_tokens_total', { model: 'gpt-4o-mini', provider: 'azure', type: 'prompt', key: 'key-0' }) ?? 0;
    const stream = await openai.chat.completions.create({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'count' }] });
    let text = '';
    let chunks = 0;
    let usage = false;
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) usage = true;
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'stop');
    assert.ok(text.length > 0);
    assert.equal(usage, false, 'the client did not ask for usage');
    assert.ok(chunks >= 6, `the annotations-only first chunk, the role, content and final chunks (${chunks})`);
    const seen = azure.requests.at(-1)!;
    assert.deepEqual((seen.body as { stream_options?: unknown }).stream_options, { include_usage: true }, 'the gateway asked for usage');
    await eventually(async () => (metricValue(await scrape(gw), 'sluice_tokens_total', { model: 'gpt-4o-mini', provider: 'azure', type: 'prompt', key: 'key-0' }) ?? 0) === before + 11, 5000, 'prompt tokens charged');
  });

  test('an Anthropic client is translated to the deployment, JSON and stream', async () => {
    const message = await anthropic.messages.create({ model: 'gpt-4o-mini', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(message.stop_reason, 'end_turn');
    assert.equal(message.usage.cache_read_input_tokens, 3);
    assert.equal(message.usage.input_tokens, 8, 'Anthropic counts the cached tokens apart');
    const events: string[] = [];
    const stream = anthropic.messages.stream({ model: 'gpt-4o-mini', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] });
    for await (const event of stream) events.push(event.type);
    const final = await stream.finalMessage();
    assert.equal(events[0], 'message_start');
    assert.equal(events.at(-1), 'message_stop');
    assert.ok(final.content.length > 0);
    assert.equal(azure.requests.at(-1)!.path, '/openai/deployments/gpt-4o-mini/chat/completions');
  });

  test('an answer the filter cut comes back as such: finish_reason content_filter, an Anthropic refusal', async () => {
    const answer = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: FILTER_OUTPUT }] });
    assert.equal(answer.choices[0]!.finish_reason, 'content_filter');
    const message = await anthropic.messages.create({ model: 'gpt-4o-mini', max_tokens: 64, messages: [{ role: 'user', content: FILTER_OUTPUT }] });
    assert.equal(message.stop_reason, 'refusal');
  });

  test("a prompt the filter refused is the content_filter class: Azure's 400 to the client, counted, no cooldown", async () => {
    const before = metricValue(await scrape(gw), 'sluice_upstream_attempts_total', { provider: 'azure', model: 'gpt-4o-mini', outcome: 'content_filter' }) ?? 0;
    const refused = await openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: FILTER_PROMPT }] }).catch((error: unknown) => error);
    assert.ok(refused instanceof OpenAI.BadRequestError, String(refused));
    assert.equal(refused.code, 'content_filter');
    const after = metricValue(await scrape(gw), 'sluice_upstream_attempts_total', { provider: 'azure', model: 'gpt-4o-mini', outcome: 'content_filter' });
    assert.equal(after, before + 1);
    const claude = await anthropic.messages.create({ model: 'gpt-4o-mini', max_tokens: 16, messages: [{ role: 'user', content: FILTER_PROMPT }] }).catch((error: unknown) => error);
    assert.ok(claude instanceof Anthropic.BadRequestError, 'in the caller\'s shape');
  });

  test('with content_filter in fallback_on, a refused prompt goes to the next target', async () => {
    const from = fallback.received.length;
    const answer = await openai.chat.completions.create({ model: 'filtered-falls-back', messages: [{ role: 'user', content: FILTER_PROMPT }] });
    assert.equal(answer.choices[0]!.message.role, 'assistant');
    assert.equal(fallback.received.length, from + 1);
    assert.equal((JSON.parse(fallback.received.at(-1)!.body) as { model: string }).model, 'other-model');
  });

  test("Azure's 429 falls back to the next target before the stream's first token", async () => {
    const fromAzure = azure.requests.length;
    const stream = await openai.chat.completions.create({ model: 'throttled-falls-back', stream: true, messages: [{ role: 'user', content: 'go' }] });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    assert.ok(text.length > 0);
    const tried = since(fromAzure);
    assert.equal(tried.length, 1);
    assert.equal(tried[0]!.headers[MOCK_AZURE_HEADER], 'rate_limited');
    const metrics = await scrape(gw);
    assert.ok((metricValue(metrics, 'sluice_upstream_attempts_total', { provider: 'azure', model: 'gpt-4o-mini', outcome: 'rate_limited' }) ?? 0) >= 1);
  });

  test('embeddings go to the embedding deployment', async () => {
    const from = azure.requests.length;
    const answer = await openai.embeddings.create({ model: 'embed', input: 'words' });
    assert.ok(answer.data[0]!.embedding.length > 0);
    assert.equal(since(from)[0]!.path, '/openai/deployments/text-embedding-3-small/embeddings');
  });

  test('the key is in no log line, and the errors name no key', () => {
    for (const line of gw.logs) assert.ok(!JSON.stringify(line).includes(azure.apiKey), JSON.stringify(line));
  });
});
