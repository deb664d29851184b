// Routes with several targets, through the built gateway, against the mock upstream with failures
// injected per target (each target sends its own `x-mock` scenario as a target header): refused
// connections, resets, a slow first token, 429 with Retry-After, 5xx, an error event before the
// first content, a failure after it. The client must see one clean answer, or the last failure,
// never a mix; cooldowns and the half-open probe must show in /metrics and /server_info.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { writeFileSync } from 'node:fs';
import { stringify } from 'yaml';
import { randomUUID } from 'node:crypto';
import { eventually, metricValue, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockScenario, type MockUpstream } from '../support/mock-upstream.ts';
import { assertSettled, sseBlocks } from '../support/reliability.ts';

let mock: MockUpstream;
let refusedUrl: string;

/** A loopback port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

const scenario = (s: MockScenario) => JSON.stringify(s);
/** A target of provider `provider` that the mock answers with `mock` (and tags `x-target: name`). */
const target = (name: string, extra: Record<string, unknown> = {}, mockScenario?: MockScenario, provider = 'p') => ({
  provider,
  model: `model-${name}`,
  headers: { 'x-target': name, ...(mockScenario ? { 'x-mock': scenario(mockScenario) } : {}) },
  ...extra,
});

function providers(): Record<string, unknown>[] {
  return [
    { name: 'p', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-p' },
    { name: 'q', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-q' },
    { name: 'down', type: 'openai', base_url: refusedUrl, api_key: 'sk-down' },
    { name: 'anth', type: 'anthropic', base_url: mock.url, api_key: 'sk-anth' },
  ];
}

interface Answer {
  status: number;
  headers: Headers;
  text: string;
  rid: string;
}

async function chat(gw: GatewayProcess, model: string, body: Record<string, unknown> = {}, headers: Record<string, string> = {}): Promise<Answer> {
  const rid = randomUUID();
  const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': rid, ...headers },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }], ...body }),
  });
  return { status: res.status, headers: res.headers, text: await res.text(), rid };
}

/** The targets the mock saw for one client request, in order (the gateway sends its own request id upstream; the client's is matched through the access log). */
async function targetsSeen(gw: GatewayProcess, rid: string): Promise<string[]> {
  const line = await gw.waitForLog((l) => l.event === 'access' && l.downstream_request_id === rid);
  const ours = line.request_id as string;
  return mock.received.filter((r) => r.headers['x-request-id'] === ours).map((r) => String(r.headers['x-target']));
}

async function access(gw: GatewayProcess, rid: string): Promise<Record<string, unknown>> {
  return gw.waitForLog((l) => l.event === 'access' && l.downstream_request_id === rid);
}

before(async () => {
  mock = await startMockUpstream();
  refusedUrl = `http://127.0.0.1:${await closedPort()}/v1`;
});

after(async () => {
  await mock.close();
});

describe('fallback before the client sees anything', () => {
  let gw: GatewayProcess;
  before(async () => {
    const routes: Record<string, unknown>[] = [
      { name: 'refused', targets: [target('down', {}, undefined, 'down'), target('b')] },
      { name: 'reset', targets: [target('a', {}, { destroyBeforeHeaders: true }), target('b')] },
      { name: 'status-503', targets: [target('a', {}, { status: 503 }), target('b')] },
      { name: 'status-503-returned', targets: [target('a', {}, { status: 503 }), target('b')], retry: { fallback_on: ['connect'] } },
      {
        name: 'slow-first-token',
        targets: [
          target('a', {}, { sse: [{ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }, { choices: [{ index: 0, delta: { content: 'late' }, finish_reason: null }] }], sseIntervalMs: 10_000 }),
          target('b'),
        ],
        retry: { first_token_timeout_ms: 300 },
      },
      { name: 'cut-after-content', targets: [target('a', {}, { disconnectAfterEvents: 3, sseIntervalMs: 20 }), target('b')] },
      {
        name: 'error-event-before-content',
        targets: [
          target('a', {}, { sse: [{ event: 'message_start', data: { type: 'message_start', message: { id: 'msg_a', type: 'message', role: 'assistant', model: 'x', content: [], stop_reason: null, usage: { input_tokens: 1, output_tokens: 0 } } } }, { event: 'error', data: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } } }], sseDone: false }, 'anth'),
          target('b'),
        ],
      },
      // Own models: a 429 with Retry-After takes its target out, and targets are shared by provider and model.
      { name: 'all-429', targets: [target('a', { model: 'all429-a' }, { status: 429, headers: { 'retry-after': '1' } }), target('b', { model: 'all429-b' }, { status: 429, headers: { 'retry-after': '7' } })] },
      { name: 'bad-request', targets: [target('a', {}, { status: 400 }), target('b')] },
      // Tiers, not round robin: the failing target is always tried first.
      { name: 'listed', targets: [target('a', { model: 'listed-a' }, { status: 503 }), target('b', { model: 'listed-b', priority: 1 })] },
      { name: 'single', targets: [target('b', { model: 'single-b' })] },
      { name: 'context-length', targets: [target('a', {}, { status: 400, body: { error: { message: "This model's maximum context length is 8192 tokens", type: 'invalid_request_error', code: 'context_length_exceeded' } } }), target('b')], retry: { fallback_on: ['context_length'] } },
    ];
    gw = await startGateway({ config: { providers: providers(), models: routes, routing: { cooldown_failures: 0 }, prices: { 'listed-b': { input: 1, output: 2 } } } });
  });
  after(async () => {
    await gw.stop();
  });

  test('a refused connection is retried once after a backoff (retry_on: connect), then the next target answers', async () => {
    const answer = await chat(gw, 'refused');
    assert.equal(answer.status, 200);
    assert.match(answer.text, /mock reply to: hello/);
    assert.deepEqual(await targetsSeen(gw, answer.rid), ['b']);
    const attempts = (await access(gw, answer.rid)).attempts as { target: string; outcome: string; status?: number; ms: number }[];
    assert.deepEqual(attempts.map((a) => [a.target, a.outcome, a.status]), [['down/model-down', 'connect', undefined], ['down/model-down', 'connect', undefined], ['p/model-b', 'success', 200]]);
    const metrics = await scrape(gw);
    assert.equal(metricValue(metrics, 'sluice_upstream_attempts_total', { provider: 'down', model: 'model-down', outcome: 'connect' }), 2);
    assert.equal(metricValue(metrics, 'sluice_route_retries_total', { model: 'refused', kind: 'retry' }), 1);
    assert.equal(metricValue(metrics, 'sluice_route_retries_total', { model: 'refused', kind: 'fallback' }), 1);
  });

  test('a reset before the headers falls back; the client gets the second target\'s answer', async () => {
    const answer = await chat(gw, 'reset');
    assert.equal(answer.status, 200);
    assert.equal((JSON.parse(answer.text) as { model: string }).model, 'model-b');
    assert.deepEqual(await targetsSeen(gw, answer.rid), ['a', 'b']);
  });

  test('a 503 falls back by default; with server_error not in fallback_on it is returned as the provider sent it', async () => {
    const fell = await chat(gw, 'status-503');
    assert.equal(fell.status, 200);
    assert.deepEqual(await targetsSeen(gw, fell.rid), ['a', 'b']);
    const returned = await chat(gw, 'status-503-returned');
    assert.equal(returned.status, 503);
    assert.match(returned.text, /mock upstream error 503/);
    assert.deepEqual(await targetsSeen(gw, returned.rid), ['a']);
  });

  test('the access line lists every attempt (target, outcome, status, time); tokens and spend name the model that served them beside the route', async () => {
    const fell = await chat(gw, 'listed');
    assert.equal(fell.status, 200);
    const line = await access(gw, fell.rid);
    const attempts = line.attempts as { target: string; outcome: string; status?: number; ms: number }[];
    assert.deepEqual(attempts.map((a) => [a.target, a.outcome, a.status]), [['p/listed-a', 'server_error', 503], ['p/listed-b', 'success', 200]]);
    for (const a of attempts) assert.ok(typeof a.ms === 'number' && a.ms >= 0 && a.ms < 10_000, `ms: ${a.ms}`);
    assert.equal(line.provider, 'p');
    const metrics = await scrape(gw);
    assert.ok((metricValue(metrics, 'sluice_tokens_total', { model: 'listed', served_model: 'listed-b', type: 'completion' }) ?? 0) > 0, 'tokens of the route, served by listed-b');
    assert.equal(metricValue(metrics, 'sluice_tokens_total', { model: 'listed', served_model: 'listed-a' }), undefined, 'the failed target served nothing');
    assert.ok((metricValue(metrics, 'sluice_spend_usd_total', { model: 'listed', served_model: 'listed-b' }) ?? 0) > 0, 'spend of the route, served by listed-b');
    // One attempt: nothing more than the provider and status the line already has.
    const single = await chat(gw, 'single');
    assert.equal(single.status, 200);
    assert.equal((await access(gw, single.rid)).attempts, undefined);
  });

  test('a stream with no first content within first_token_timeout_ms falls back invisibly: one stream, all of it from the second target', async () => {
    const started = Date.now();
    const answer = await chat(gw, 'slow-first-token', { stream: true });
    assert.equal(answer.status, 200);
    assert.ok(Date.now() - started < 5000, 'the stalled target was not waited for');
    const chunks = sseBlocks(answer.text).filter((b) => b.startsWith('data: {'));
    assert.ok(chunks.length > 0);
    const models = new Set(chunks.map((b) => (JSON.parse(b.slice(6)) as { model: string }).model));
    assert.deepEqual([...models], ['model-b'], 'no chunk of the stalled target reached the client');
    assert.match(answer.text, /data: \[DONE\]/);
    assert.deepEqual(await targetsSeen(gw, answer.rid), ['a', 'b']);
    const metrics = await scrape(gw);
    assert.equal(metricValue(metrics, 'sluice_upstream_attempts_total', { provider: 'p', model: 'model-a', outcome: 'first_token_timeout' }), 1);
    await eventually(() => mock.received.some((r) => r.headers['x-target'] === 'a' && r.aborted), 5000, 'the stalled attempt was aborted upstream');
  });

  test('after the first content never switch: a stream cut mid-way ends with an error event, and no other target is tried', async () => {
    const answer = await chat(gw, 'cut-after-content', { stream: true });
    assert.equal(answer.status, 200);
    assert.match(answer.text, /"content":"mock"/);
    const last = sseBlocks(answer.text).at(-1)!;
    assert.match(last, /^event: error\ndata: /);
    assert.doesNotMatch(answer.text, /\[DONE\]/);
    assert.deepEqual(await targetsSeen(gw, answer.rid), ['a']);
  });

  test('an error event before the first content (Anthropic overloaded) falls back; the client sees only the second target\'s stream', async () => {
    const answer = await chat(gw, 'error-event-before-content', { stream: true });
    assert.equal(answer.status, 200);
    assert.doesNotMatch(answer.text, /Overloaded|message_start|event: error/);
    assert.match(answer.text, /data: \[DONE\]/);
    assert.deepEqual(await targetsSeen(gw, answer.rid), ['a', 'b']);
    assert.equal(metricValue(await scrape(gw), 'sluice_upstream_attempts_total', { provider: 'anth', model: 'model-a', outcome: 'stream_error' }), 1);
  });

  test('when every target fails, the last failure is returned as its provider sent it (429 with its Retry-After)', async () => {
    const answer = await chat(gw, 'all-429');
    assert.equal(answer.status, 429);
    assert.equal(answer.headers.get('retry-after'), '7');
    assert.match(answer.text, /mock upstream error 429/);
    assert.deepEqual(await targetsSeen(gw, answer.rid), ['a', 'b']);
  });

  test('a 400 is the client\'s own mistake: returned at once, no fallback', async () => {
    const answer = await chat(gw, 'bad-request');
    assert.equal(answer.status, 400);
    assert.deepEqual(await targetsSeen(gw, answer.rid), ['a']);
  });

  test('a context-length 400 falls back when the route lists context_length', async () => {
    const answer = await chat(gw, 'context-length');
    assert.equal(answer.status, 200);
    assert.deepEqual(await targetsSeen(gw, answer.rid), ['a', 'b']);
  });

  test('after all of it: nothing in flight, no connection left open', async () => {
    await assertSettled(gw, 'routing failures');
  });
});

describe('strategies', () => {
  let gw: GatewayProcess;
  before(async () => {
    gw = await startGateway({
      config: {
        providers: providers(),
        models: [
          { name: 'weighted', targets: [target('a', { weight: 3 }), target('b', { weight: 1 })] },
          { name: 'tiers', targets: [target('down', { priority: 0 }, undefined, 'down'), target('a', { priority: 1 }), target('b', { priority: 2 })], retry: { retry_on: [] } },
          { name: 'sticky', strategy: 'consistent_hash', hash_on: 'header:x-session', targets: [target('a'), target('b'), target('c')] },
          { name: 'fastest', strategy: 'lowest_latency', targets: [target('a', { model: 'fast-a' }, { headersDelayMs: 150 }), target('b', { model: 'fast-b' })] },
        ],
      },
    });
  });
  after(async () => {
    await gw.stop();
  });

  const seen = async (rid: string) => (await targetsSeen(gw, rid)).join(',');

  test('weights 3:1 split 40 requests exactly 30/10 (smooth weighted round robin)', async () => {
    const counts: Record<string, number> = {};
    for (let i = 0; i < 40; i++) {
      const answer = await chat(gw, 'weighted');
      assert.equal(answer.status, 200);
      const t = await seen(answer.rid);
      counts[t] = (counts[t] ?? 0) + 1;
    }
    assert.deepEqual(counts, { a: 30, b: 10 });
  });

  test('priority tiers: the first tier refuses, so the second answers; the third is never used', async () => {
    for (let i = 0; i < 4; i++) {
      const answer = await chat(gw, 'tiers');
      assert.equal(answer.status, 200);
      assert.equal(await seen(answer.rid), 'a');
    }
  });

  test('consistent hash: one session always reaches one target; sessions spread over all three', async () => {
    const chosen = new Map<string, string>();
    for (let s = 0; s < 24; s++) {
      for (let i = 0; i < 2; i++) {
        const answer = await chat(gw, 'sticky', {}, { 'x-session': `session-${s}` });
        const t = await seen(answer.rid);
        if (chosen.has(`session-${s}`)) assert.equal(t, chosen.get(`session-${s}`), `session-${s} moved`);
        chosen.set(`session-${s}`, t);
      }
    }
    assert.deepEqual(new Set(chosen.values()), new Set(['a', 'b', 'c']));
  });

  test('lowest latency: once both are measured, the faster target takes the requests', async () => {
    for (let i = 0; i < 2; i++) await chat(gw, 'fastest');
    const after: string[] = [];
    for (let i = 0; i < 6; i++) after.push(await seen((await chat(gw, 'fastest')).rid));
    assert.deepEqual(after, ['b', 'b', 'b', 'b', 'b', 'b']);
    const info = (await (await fetch(`${gw.adminUrl}/server_info`)).json()) as { targets: { provider: string; model: string; ewma_first_token_ms: number | null }[] };
    const a = info.targets.find((t) => t.model === 'fast-a')!;
    assert.ok(a.ewma_first_token_ms !== null && a.ewma_first_token_ms >= 150, `model-a's latency ${a.ewma_first_token_ms}`);
  });
});

describe('cooldown, half-open probe, Retry-After, retry budget', () => {
  let gw: GatewayProcess;
  let flaky: MockUpstream;
  before(async () => {
    flaky = await startMockUpstream();
    gw = await startGateway({
      config: {
        providers: [...providers(), { name: 'flaky', type: 'openai', base_url: `${flaky.url}/v1`, api_key: 'sk-f' }],
        models: [
          // Tiers, so that the probe is not left to the round robin.
          { name: 'cooling', targets: [target('f', { priority: 0 }, undefined, 'flaky'), target('b', { priority: 1 })] },
          { name: 'limited', targets: [target('a', {}, { status: 429, headers: { 'retry-after': '30' } }), target('b')] },
        ],
        routing: { cooldown_failures: 2, cooldown_secs: 1 },
      },
    });
  });
  after(async () => {
    await gw.stop();
    await flaky.close();
  });

  const state = async (provider: string, model: string) => metricValue(await scrape(gw), 'sluice_target_state', { provider, model });

  test('two failures in a row open the circuit (state 2, logged); after the cooldown one probe goes through and closes it', async () => {
    flaky.script({ status: 502 });
    for (let i = 0; i < 2; i++) assert.equal((await chat(gw, 'cooling')).status, 200);
    assert.equal(flaky.received.length, 2);
    assert.equal(await state('flaky', 'model-f'), 2);
    await gw.waitForLog((l) => l.event === 'target_cooldown' && l.provider === 'flaky');
    // While open, the target is left out: the requests go straight to b.
    const skipped = await chat(gw, 'cooling');
    assert.equal(skipped.status, 200);
    assert.equal(flaky.received.length, 2);
    assert.equal((await access(gw, skipped.rid)).attempts, undefined, 'one attempt only');
    flaky.script(undefined);
    await eventually(async () => (await state('flaky', 'model-f')) === 1, 3000, 'half-open after the cooldown');
    const probe = await chat(gw, 'cooling');
    assert.equal(probe.status, 200);
    assert.equal(flaky.received.length, 3, 'one probe');
    assert.equal(await state('flaky', 'model-f'), 0);
  });

  test('a 429 with Retry-After: 30 takes the target out for 30 s: the next requests never reach it', async () => {
    const first = await chat(gw, 'limited');
    assert.equal(first.status, 200);
    assert.deepEqual(await targetsSeen(gw, first.rid), ['a', 'b']);
    for (let i = 0; i < 3; i++) assert.deepEqual(await targetsSeen(gw, (await chat(gw, 'limited')).rid), ['b']);
    const info = (await (await fetch(`${gw.adminUrl}/server_info`)).json()) as { targets: { model: string; state: string; cooldown_remaining_ms: number }[] };
    const a = info.targets.find((t) => t.model === 'model-a')!;
    assert.equal(a.state, 'open');
    assert.ok(a.cooldown_remaining_ms > 25_000 && a.cooldown_remaining_ms <= 30_000, `cooldown left ${a.cooldown_remaining_ms} ms`);
  });
});

describe('the retry budget', () => {
  test('with the budget at zero no fallback is made: the failure is returned and counted as budget_exhausted', async () => {
    const gw = await startGateway({
      config: {
        providers: providers(),
        models: [{ name: 'r', targets: [target('a', {}, { status: 500 }), target('b')] }],
        routing: { retry_budget_percent: 0, min_retry_concurrency: 0 },
      },
    });
    try {
      const answer = await chat(gw, 'r');
      assert.equal(answer.status, 500);
      assert.deepEqual(await targetsSeen(gw, answer.rid), ['a']);
      assert.equal(metricValue(await scrape(gw), 'sluice_route_retries_total', { model: 'r', kind: 'budget_exhausted' }), 1);
      await gw.waitForLog((l) => l.event === 'retry_budget_exhausted' && l.route === 'r');
    } finally {
      await gw.stop();
    }
  });

  test('at the defaults (20 %, at least 3 at once) a lone failing request still falls back', async () => {
    const gw = await startGateway({ config: { providers: providers(), models: [{ name: 'r', targets: [target('a', {}, { status: 500 }), target('b')] }] } });
    try {
      const answer = await chat(gw, 'r');
      assert.equal(answer.status, 200);
      assert.deepEqual(await targetsSeen(gw, answer.rid), ['a', 'b']);
    } finally {
      await gw.stop();
    }
  });
});

describe('routing and the lifecycle', () => {
  test('E6: a reload that removes a target lets its stream finish; cooldown state survives the reload for a target that did not change', async () => {
    const config = (models: Record<string, unknown>[]) => ({
      workers: 1,
      listeners: [
        { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
        { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
      ],
      reload: { watch: false },
      providers: providers(),
      models,
    });
    const before = [
      { name: 'slow', targets: [target('s', {}, { chunks: 6, sseIntervalMs: 250 }, 'q')] },
      { name: 'limited', targets: [target('a', {}, { status: 429, headers: { 'retry-after': '60' } }), target('b')] },
    ];
    const gw = await startGateway({ config: config(before) });
    try {
      assert.equal((await chat(gw, 'limited')).status, 200);
      const marker = randomUUID();
      const stream = chat(gw, 'slow', { stream: true }, { 'x-marker': marker });
      await eventually(() => mock.received.some((r) => r.headers['x-marker'] === marker), 5000, 'the stream started');
      writeFileSync(gw.configFile, stringify(config([before[1]!])));
      gw.signal('SIGHUP');
      await gw.waitForLog((l) => l.event === 'config_reloaded');
      const answer = await stream;
      assert.equal(answer.status, 200);
      assert.match(answer.text, /data: \[DONE\]/, 'the stream of the removed route and provider finished whole');
      const info = (await (await fetch(`${gw.adminUrl}/server_info`)).json()) as { targets: { provider: string; model: string; state: string }[] };
      assert.equal(info.targets.find((t) => t.provider === 'p' && t.model === 'model-a')?.state, 'open', 'the cooldown survived the reload');
      assert.deepEqual(await targetsSeen(gw, (await chat(gw, 'limited')).rid), ['b']);
    } finally {
      await gw.stop();
    }
  });

  test('L5/L10: a request waiting between attempts counts as in flight: SIGTERM during a backoff lets it finish on the next target, then exit 0', async () => {
    const gw = await startGateway({
      config: {
        providers: providers(),
        models: [{ name: 'r', targets: [target('a', {}, { status: 503, headersDelayMs: 600 }), target('b', {}, { headersDelayMs: 300 })] }],
        shutdown: { min_drain_secs: 0 },
      },
    });
    const marker = randomUUID();
    const answer = chat(gw, 'r', {}, { 'x-marker': marker });
    await eventually(() => mock.received.some((r) => r.headers['x-marker'] === marker), 5000, 'the first attempt started');
    gw.signal('SIGTERM');
    const done = await answer;
    assert.equal(done.status, 200);
    assert.deepEqual(await targetsSeen(gw, done.rid), ['a', 'b']);
    const exit = await gw.exited;
    assert.equal(exit.code, 0);
  });
});
