// Budgets held against requests running at once (found in the review of issue #24). Nothing of a
// request's cost was held against its key's budget while it ran: 20 requests of $0.40 sent together
// on an untouched $1 budget were all let through and spent $8. Now each request holds what it may
// cost (its prompt, body / 4, and its max_tokens, or limits.budget_hold_output_tokens (4,096) when
// it sets none, at its model's price) from its admission to its settlement, where its real cost
// replaces it; a request is refused (429 budget_exceeded) when spent + held + its hold would pass
// the budget. At the default settings, on the memory store, Redis and `workers: 2` (the
// supervisor's store over IPC): of 20 such requests at once, the two whose holds fit are let
// through; the spend stays within the budget plus what the real costs passed their holds. A hold
// whose request died (its worker SIGKILLed; its gateway SIGKILLed, with Redis) is given back when
// its lease expires (limits.lease_secs, 30 s), and a hold carries across a hot restart.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { eventually, scrape, startGateway, stopWithGenerations, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { inFlightTotal, sumMetric } from '../support/reliability.ts';
import { httpRequest, type RawResponse } from '../support/http.ts';
import { redisCheck, startRedis, type RedisServer } from '../support/redis.ts';
import { freePort } from '../support/haproxy.ts';

const BURST = 20;
const BUDGET_USD = 1;
/** Output tokens at $400 a million: 1,000 of them are $0.40 (prompts are free here, so a hold is its output alone). */
const DEAR = { input: 0, output: 400 };
/** At $100 a million: a request without max_tokens holds 4,096 tokens, $0.4096. */
const PLAIN = { input: 0, output: 100 };
/** limits.budget_hold_output_tokens, the default. */
const DEFAULT_HOLD_TOKENS = 4096;

interface Scenario {
  readonly key: string;
  readonly model: 'dear' | 'plain';
  readonly maxTokens: number | undefined;
  /** The completion tokens each answer really used. */
  readonly completion: number;
}

const SCENARIOS: Record<string, Scenario> = {
  'max_tokens 1,000 at $400 a million: holds $0.40, costs $0.40': { key: 'max-tokens', model: 'dear', maxTokens: 1000, completion: 1000 },
  'no max_tokens at $100 a million: holds 4,096 tokens ($0.4096), costs $0.40': { key: 'default-output', model: 'plain', maxTokens: undefined, completion: 4000 },
  'no max_tokens, costing more than its hold ($0.80 for $0.4096): the overrun is what the real costs passed their holds': { key: 'over-hold', model: 'plain', maxTokens: undefined, completion: 8000 },
};

const priceOf = (s: Scenario) => (s.model === 'dear' ? DEAR : PLAIN);
const holdOf = (s: Scenario) => (s.maxTokens ?? DEFAULT_HOLD_TOKENS) * priceOf(s).output;
const costOf = (s: Scenario) => s.completion * priceOf(s).output;
const secret = (name: string) => `sk-budget-hold-${name}-0000`;

function config(mock: MockUpstream, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream' }],
    models: [{ name: '*', provider: 'up' }],
    prices: { dear: DEAR, plain: PLAIN },
    keys: [...Object.values(SCENARIOS).map((s) => s.key), 'dies', 'restart'].map((name) => ({ name, key: secret(name), budget: { usd: BUDGET_USD, period: 'day' } })),
    ...extra,
  };
}

function chat(gw: GatewayProcess, key: string, model: string, maxTokens: number | undefined, usage: { prompt: number; completion: number }, delayMs = 0): Promise<RawResponse> {
  return httpRequest(`${gw.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...mockHeader({ usage, headersDelayMs: delayMs }) },
    body: JSON.stringify({ model, ...(maxTokens === undefined ? {} : { max_tokens: maxTokens }), messages: [{ role: 'user', content: 'hi' }] }),
  });
}

const errorOf = (res: RawResponse) => (JSON.parse(res.body) as { error: { code: string; message: string } }).error;

async function spendOf(gw: GatewayProcess, key: string): Promise<number> {
  return Math.round(sumMetric(await scrape(gw), 'sluice_spend_usd_total', (l) => l.key === key) * 1e6);
}

/** Sends the scenario's burst at once (each held 1.5 s upstream); checks what was let through and spent. */
async function burst(gw: GatewayProcess, s: Scenario): Promise<void> {
  const results = await Promise.all(Array.from({ length: BURST }, () => chat(gw, secret(s.key), s.model, s.maxTokens, { prompt: 20, completion: s.completion }, 1500)));
  const admitted = results.filter((r) => r.status === 200).length;
  const refused = results.filter((r) => r.status === 429);
  assert.equal(admitted + refused.length, BURST, `statuses ${JSON.stringify(results.map((r) => r.status))}`);
  await eventually(async () => inFlightTotal(await scrape(gw)) === 0, 10_000, 'the burst settled');
  const spent = await eventually(async () => {
    const micros = await spendOf(gw, s.key);
    return micros === admitted * costOf(s) ? micros : undefined;
  }, 5000, `the spend of ${admitted} requests`);
  // The bound the docs state: the budget, plus what each request let through cost beyond its hold.
  const bound = BUDGET_USD * 1e6 + admitted * Math.max(0, costOf(s) - holdOf(s));
  console.log(`# ${s.key}: ${admitted} of ${BURST} let through at once, $${spent! / 1e6} spent on a $${BUDGET_USD} budget (bound $${bound / 1e6})`);
  assert.equal(admitted, Math.floor((BUDGET_USD * 1e6) / holdOf(s)), 'exactly the requests whose holds fit');
  assert.ok(spent! <= bound, `spent $${spent! / 1e6}, more than the bound $${bound / 1e6}`);
  for (const r of refused) {
    const error = errorOf(r);
    assert.equal(error.code, 'budget_exceeded', r.body);
    assert.match(error.message, new RegExp(`^API key "${s.key}" has \\$[\\d.]+ left of its budget of \\$1 for this day, `), r.body);
  }
  // The first refusals come while the admitted requests run: their holds say so, and a retry in a second may pass.
  const held = refused.find((r) => /held by its requests in progress/.test(r.body));
  assert.ok(held, 'a refusal names what the requests in progress hold');
  assert.equal(held.headers['retry-after'], '1');
}

const skipRedis = redisCheck().skip;
const STORES = [
  { name: 'the memory store', workers: 1, redis: false },
  { name: 'Redis', workers: 1, redis: true },
  { name: 'the memory store with workers: 2', workers: 2, redis: false },
] as const;

for (const store of STORES) {
  describe(`${BURST} requests at once on a $1 budget, ${store.name}`, { skip: store.redis ? skipRedis : false }, () => {
    let mock: MockUpstream;
    let redis: RedisServer | undefined;
    let gw: GatewayProcess;

    before(async () => {
      mock = await startMockUpstream({ record: false });
      if (store.redis) redis = await startRedis();
      gw = await startGateway({ config: config(mock, { workers: store.workers, ...(redis ? { limits: { store: 'redis', redis: { url: redis.url, key_prefix: 'hold:' } } } : {}) }) });
    });

    after(async () => {
      await gw?.stop();
      await mock?.close();
      await redis?.close();
    });

    for (const [name, scenario] of Object.entries(SCENARIOS)) {
      test(name, { timeout: 60_000 }, async () => {
        if (!redis) return burst(gw, scenario);
        // In Redis, beside the spend: the holds of the requests let through, one member each ("lease|micro-dollars").
        const holds = `hold:sh:${scenario.key}:${new Date().toISOString().slice(0, 10)}`;
        const seen = { most: 0, members: '' };
        let watching = true;
        const watch = (async () => {
          while (watching) {
            const count = Number(/\d+/.exec(await redis!.cli('ZCARD', holds))?.[0]);
            if (count > seen.most) Object.assign(seen, { most: count, members: await redis!.cli('ZRANGE', holds, '0', '-1') });
            await new Promise((resolve) => setTimeout(resolve, 50));
          }
        })();
        try {
          await burst(gw, scenario);
        } finally {
          watching = false;
          await watch;
        }
        assert.equal(seen.most, 2, 'two holds in Redis while the requests ran');
        assert.ok(seen.members.includes(`|${holdOf(scenario)}"`), seen.members);
        assert.equal(await redis.cli('ZCARD', holds), '(integer) 0', 'the holds were replaced by the spend');
      });
    }
  });
}

describe('a hold whose request died is given back when its lease expires (30 s), not before', { concurrency: true }, () => {
  // One mock per test: the two run at once, and each counts the requests its own gateway sent.
  const mocks: MockUpstream[] = [];
  let redis: RedisServer | undefined;
  const gateways: GatewayProcess[] = [];

  before(async () => {
    if (!skipRedis) redis = await startRedis();
  });

  after(async () => {
    await Promise.all(gateways.map((g) => g.stop()));
    await Promise.all(mocks.map((m) => m.close()));
    await redis?.close();
  });

  async function ownMock(): Promise<MockUpstream> {
    const mock = await startMockUpstream();
    mocks.push(mock);
    return mock;
  }

  /**
   * Two requests (max_tokens 999: $0.3996 each) hold $0.7992 of the budget, upstream for a minute;
   * `kill` ends them; then a $0.40 request is asked every second (of `probe()`) until it passes.
   */
  async function diesHolding(mock: MockUpstream, gw: GatewayProcess, kill: () => Promise<void>, probe: () => GatewayProcess): Promise<void> {
    const dying = [0, 1].map(() => chat(gw, secret('dies'), 'dear', 999, { prompt: 20, completion: 999 }, 60_000).catch(() => undefined));
    await mock.waitFor((received) => received.filter((r) => String(r.body).includes('"max_tokens":999')).length === 2, 10_000);
    const refused = await chat(gw, secret('dies'), 'dear', 1000, { prompt: 20, completion: 1000 });
    assert.equal(refused.status, 429, refused.body);
    assert.match(errorOf(refused).message, /\$0\.7992 of it held by its requests in progress/);
    await kill();
    const killedAt = Date.now();
    await Promise.all(dying);
    const refusals: string[] = [];
    await eventually(async () => {
      const res = await chat(probe(), secret('dies'), 'dear', 1000, { prompt: 20, completion: 1000 });
      if (res.status === 200) return true;
      refusals.push(res.body);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      return false;
    }, 60_000, 'the holds given back');
    const after = (Date.now() - killedAt) / 1000;
    console.log(`# the dead requests' holds were given back ${after.toFixed(1)} s after the kill (${refusals.length} refusals before)`);
    // Renewed every 10 s, a hold lasts 20 to 30 s after the last renewal.
    assert.ok(after >= 15, `given back after ${after} s: before its lease could have expired`);
    for (const body of refusals) if (body.includes('budget_exceeded')) assert.match(body, /\$0\.7992 of it held by its requests in progress/);
    assert.ok(refusals.some((body) => body.includes('budget_exceeded')), 'refused while the dead requests\' holds lasted');
  }

  test('workers: 2, the memory store: both workers SIGKILLed while their requests hold $0.80', { timeout: 120_000 }, async () => {
    // A fixed port: while no worker is left the supervisor closes the proxy socket, and binds it again for the new workers.
    const listeners = [
      { name: 'proxy', address: `127.0.0.1:${await freePort()}`, role: 'proxy' },
      { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
    ];
    const mock = await ownMock();
    const gw = await startGateway({ config: config(mock, { workers: 2, listeners }) });
    gateways.push(gw);
    await diesHolding(
      mock,
      gw,
      async () => {
        for (const line of gw.logs.filter((l) => l.event === 'worker_ready')) process.kill(Number(line.worker_pid), 'SIGKILL');
      },
      () => gw,
    );
  });

  test('Redis: the gateway SIGKILLed while its requests hold $0.80; another gateway on the same Redis', { timeout: 120_000, skip: skipRedis }, async () => {
    const limits = { store: 'redis', redis: { url: redis!.url, key_prefix: 'dead:' } };
    const mock = await ownMock();
    const first = await startGateway({ config: config(mock, { limits }) });
    const second = await startGateway({ config: config(mock, { limits }) });
    gateways.push(first, second);
    await diesHolding(mock, first, () => first.stop(), () => second);
  });
});

describe('a hold carries across a hot restart', () => {
  let mock: MockUpstream;
  let gw: GatewayProcess | undefined;

  before(async () => {
    mock = await startMockUpstream();
  });

  after(async () => {
    if (gw) await stopWithGenerations(gw);
    await mock?.close();
  });

  test('a request of generation 1 holds $0.80 while it runs: generation 2 refuses $0.40 meanwhile, and once it has ended its cost is spent there', { timeout: 120_000 }, async () => {
    gw = await startGateway({ config: config(mock, { hot_restart: { enabled: true } }) });
    const key = secret('restart');
    // 15 s upstream: longer than a restart takes on a loaded machine (checked below).
    const running = chat(gw, key, 'dear', 2000, { prompt: 20, completion: 2000 }, 15_000);
    let done = false;
    void running.then(() => (done = true), () => (done = true));
    await mock.waitFor((received) => received.some((r) => String(r.body).includes('"max_tokens":2000')), 10_000);
    gw.signal('SIGUSR2');
    await gw.waitForLog((l) => l.event === 'hot_restart_done' && l.to_generation === 2, 60_000);
    const refused = await chat(gw, key, 'dear', 1000, { prompt: 20, completion: 1000 });
    const line = await gw.waitForLog((l) => l.event === 'access' && l.request_id === refused.headers['x-request-id']);
    assert.equal(line.generation, 2);
    assert.equal(refused.status, 429, refused.body);
    assert.match(errorOf(refused).message, /\$0\.8 of it held by its requests in progress/);
    assert.ok(!done, 'generation 1\'s request was still running when generation 2 was asked');
    assert.equal((await running).status, 200);
    // $0.80 spent (the hold replaced by the cost, in generation 2's store): $0.20 more fits, $0.40 does not.
    await eventually(async () => (await chat(gw!, key, 'dear', 500, { prompt: 20, completion: 500 })).status === 200, 5000, '$0.20 after the $0.80 settled');
    // The $0.20 fits whether generation 1's settlement has reached generation 2's store or its hold
    // is still there ($1 - $0.80 held); $0.40 never fits. Once the settlement is in, it is refused
    // for the budget spent, no longer for a hold.
    await eventually(async () => {
      const over = await chat(gw!, key, 'dear', 1000, { prompt: 20, completion: 1000 });
      assert.equal(over.status, 429, over.body);
      return /has \$0 left|has spent its budget/.test(errorOf(over).message);
    }, 5000, 'generation 1\'s $0.80 spent in generation 2\'s store');
  });
});
