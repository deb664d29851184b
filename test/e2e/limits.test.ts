// Limits with the default store (memory), through the built gateway: x-ratelimit-* on every answer
// (JSON, stream, refusal), 429s in the caller's shape with Retry-After, concurrency, the counters
// kept across a reload that changes a limit, and one set of counters for all the workers of an
// instance (two workers must not allow twice a limit).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Agent } from 'undici';
import { metricValue, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { assertAnthropicError, assertOpenAiError } from '../support/reliability.ts';
import { writeFileSync } from 'node:fs';
import { stringify } from 'yaml';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const RPM = 'sk-limits-rpm-000000001';
const CONC = 'sk-limits-conc-00000001';
const TPM = 'sk-limits-tpm-000000001';
const BUDGET = 'sk-limits-budget-000001';

let mock: MockUpstream;
let gw: GatewayProcess;

const config = (rpm: number) => ({
  workers: 1,
  listeners: [
    { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
    { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
  ],
  providers: [
    { name: 'oa', type: 'openai', base_url: `${mock.url}/v1` },
    { name: 'an', type: 'anthropic', base_url: mock.url },
  ],
  models: [
    { name: 'mock-gpt', provider: 'oa' },
    { name: 'claude-mock', provider: 'an' },
  ],
  keys: [
    { name: 'rpm-key', key: RPM, limits: { rpm } },
    { name: 'conc-key', key: CONC, limits: { concurrent: 1 } },
    { name: 'tpm-key', key: TPM, limits: { tpm: 1000 } },
    { name: 'budget-key', key: BUDGET, budget: { usd: 0.00004, period: 'day' } },
  ],
  prices: { 'mock-gpt': { input: 1, output: 1 } },
  reload: { watch: false },
});

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({ config: config(3) });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

const chat = (key: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}, url = gw.proxyUrl) =>
  fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'mock-gpt', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], ...extra }),
  });
const message = (key: string) =>
  fetch(`${gw.proxyUrl}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'claude-mock', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }),
  });

describe('limits in memory', () => {
  test('x-ratelimit-* on a JSON answer and on a stream; the bucket settles to the real usage', async () => {
    const first = await chat(TPM);
    assert.equal(first.status, 200);
    await first.arrayBuffer();
    assert.equal(first.headers.get('x-ratelimit-limit-tokens'), '1000');
    const reserved = 1000 - Number(first.headers.get('x-ratelimit-remaining-tokens'));
    assert.ok(reserved > 10 && reserved < 100, `the reservation: ${reserved}`);
    assert.match(first.headers.get('x-ratelimit-reset-tokens')!, /^\d+(\.\d+)?(ms|s)$/);
    const stream = await chat(TPM, { stream: true }, mockHeader({ sseIntervalMs: 2 }));
    assert.equal(stream.status, 200);
    assert.equal(stream.headers.get('content-type'), 'text/event-stream');
    assert.ok(stream.headers.get('x-ratelimit-remaining-tokens'));
    await stream.text();
    // Each earlier request settled to its 18 tokens: what remains shows it (less this one's reservation).
    const third = await chat(TPM);
    await third.arrayBuffer();
    const remaining = Number(third.headers.get('x-ratelimit-remaining-tokens'));
    // (The bucket refills 1000/min: about 2 tokens in the time this takes.)
    assert.ok(Math.abs(1000 - 18 * 2 - reserved - remaining) <= 6, `remaining ${remaining}, reserved ${reserved}`);
  });

  test('over the RPM: 429 in the caller\'s shape with Retry-After, nothing sent upstream; a reload that changes the limit keeps the counter', async () => {
    for (let i = 0; i < 3; i++) {
      const res = await chat(RPM);
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('x-ratelimit-remaining-requests'), String(2 - i));
      await res.arrayBuffer();
    }
    mock.reset();
    const openai = await chat(RPM);
    assert.equal(openai.status, 429);
    assert.equal(openai.headers.get('x-ratelimit-limit-requests'), '3');
    assert.equal(openai.headers.get('x-ratelimit-remaining-requests'), '0');
    const retryAfter = Number(openai.headers.get('retry-after'));
    assert.ok(retryAfter >= 1 && retryAfter <= 20, `retry-after ${retryAfter}`);
    assert.ok(Number(openai.headers.get('retry-after-ms')) > 0);
    const error = assertOpenAiError(await openai.text(), 'rpm');
    assert.equal(error.code, 'rate_limit_exceeded');
    assert.match(error.message, /API key "rpm-key": 3 requests per minute/);
    const anthropic = await message(RPM);
    assert.equal(anthropic.status, 429);
    assert.equal(assertAnthropicError(await anthropic.text(), 'rpm').type, 'rate_limit_error');
    assert.equal(mock.received.length, 0);
    assert.equal(metricValue(await scrape(gw), 'sluice_rate_limited_total', { key: 'rpm-key', scope: 'key', limit: 'requests' }), 2);

    // Raised to 60: the bucket keeps its level (about empty). A reset counter would let a burst of 60 through.
    writeFileSync(gw.configFile, stringify(config(60)));
    gw.signal('SIGHUP');
    await gw.waitForLog((l) => l.event === 'config_reloaded');
    const statuses = [];
    for (let i = 0; i < 5; i++) {
      const res = await chat(RPM);
      statuses.push(res.status);
      await res.arrayBuffer();
    }
    assert.ok(statuses.filter((s) => s === 200).length <= 2, `after the reload: ${statuses.join(' ')}`);
    assert.equal((await chat(RPM)).headers.get('x-ratelimit-limit-requests'), '60');
  });

  test('concurrency: a second request while a stream runs is refused; the place comes back when it ends', async () => {
    const stream = await chat(CONC, { stream: true }, mockHeader({ sseIntervalMs: 100, chunks: 5 }));
    assert.equal(stream.status, 200);
    const refused = await chat(CONC);
    assert.equal(refused.status, 429);
    assert.match(assertOpenAiError(await refused.text(), 'conc').message, /1 concurrent requests/);
    await stream.text();
    assert.equal((await chat(CONC)).status, 200);
  });
});

describe('the official SDKs and a spent budget', () => {
  test('the openai and anthropic SDKs, with their default retries, send a spent budget\'s request once (x-should-retry: false) and raise their rate-limit error', { timeout: 30_000 }, async () => {
    // (Without x-should-retry the SDKs wait the Retry-After, the rest of the day: the test times out.)
    // One request (which may cost $0.00003: body / 4 and max_tokens 10, which fits) spends more than
    // the budget ($0.00005 of $0.00004): from then on, refused.
    assert.equal((await chat(BUDGET, {}, mockHeader({ usage: { prompt: 10, completion: 40 } }))).status, 200);
    const refusals = () => gw.logs.filter((l) => l.event === 'access' && l.key_name === 'budget-key' && l.status === 429).length;
    const before = refusals();
    const openai = new OpenAI({ baseURL: `${gw.proxyUrl}/v1`, apiKey: BUDGET });
    await assert.rejects(openai.chat.completions.create({ model: 'mock-gpt', messages: [{ role: 'user', content: 'hi' }] }), (error: unknown) => {
      assert.ok(error instanceof OpenAI.RateLimitError, String(error));
      assert.equal((error as InstanceType<typeof OpenAI.RateLimitError>).code, 'budget_exceeded');
      return true;
    });
    const anthropic = new Anthropic({ baseURL: gw.proxyUrl, apiKey: BUDGET });
    await assert.rejects(anthropic.messages.create({ model: 'mock-gpt', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }), Anthropic.RateLimitError);
    await gw.waitForLog(() => refusals() >= before + 2);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(refusals(), before + 2, 'each SDK sent its request once: no retry of a spent budget');
  });
});

describe('limits in memory with workers', () => {
  let group: GatewayProcess;
  before(async () => {
    group = await startGateway({ config: { ...config(6), workers: 2 } });
  });
  after(async () => {
    await group?.stop();
  });

  test('two workers share one set of counters: an RPM of 6 lets 6 through, not 12', async () => {
    // Connections of their own, so that the supervisor hands them to both workers.
    const agents = Array.from({ length: 6 }, () => new Agent({ connections: 1 }));
    const statuses: number[] = [];
    await Promise.all(
      agents.map(async (dispatcher) => {
        for (let i = 0; i < 4; i++) {
          const res = await fetch(`${group.proxyUrl}/v1/chat/completions`, {
            method: 'POST',
            dispatcher,
            headers: { authorization: `Bearer ${RPM}`, 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'mock-gpt', messages: [{ role: 'user', content: 'hi' }] }),
          } as RequestInit);
          statuses.push(res.status);
          await res.arrayBuffer();
        }
      }),
    );
    await Promise.all(agents.map((a) => a.close()));
    const ok = statuses.filter((s) => s === 200).length;
    assert.equal(ok, 6, `statuses: ${statuses.join(' ')}`);
    assert.equal(statuses.length - ok, 18);
    // Both workers served (else the test proves nothing): each counted some requests.
    const metrics = await scrape(group);
    assert.equal(metricValue(metrics, 'sluice_rate_limited_total', { key: 'rpm-key', scope: 'key', limit: 'requests' }), 18);
    await group.waitForLog((l) => l.event === 'access' && l.status === 429 && l.worker === 1);
    await group.waitForLog((l) => l.event === 'access' && l.status === 429 && l.worker === 2);
    const served = new Set(group.logs.filter((l) => l.event === 'access' && l.status === 200).map((l) => l.worker));
    assert.ok(served.size >= 1);
  });
});
