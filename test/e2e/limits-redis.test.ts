// Limits shared by a fleet through a real Redis (started here on a loopback port): three gateways
// hold one RPM and one TPM limit together (three with the memory store each allow three times as
// much); budgets in both API shapes, a stream's tokens counted; Redis stopped under load (open and
// closed) and back; SIGTERM commits the usage of the streams it drains; SIGKILL's lease comes back.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { eventually, metricValue, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { assertAnthropicError, assertOpenAiError } from '../support/reliability.ts';
import { redisCheck, startRedis, type RedisServer } from '../support/redis.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';
import { Agent, fetch as undiciFetch } from 'undici';

const skip = redisCheck().skip;
const USAGE_TOKENS = 18; // the mock's usage: 11 prompt + 7 completion

let mock: MockUpstream;
let redis: RedisServer;
const started: GatewayProcess[] = [];

before(async () => {
  if (skip) return;
  mock = await startMockUpstream();
  redis = await startRedis();
});

after(async () => {
  await Promise.all(started.map((g) => g.stop()));
  await mock?.close();
  await redis?.close();
});

type Keys = Record<string, unknown>[];

async function gateway(keys: Keys, limits: Record<string, unknown> = {}, extra: Record<string, unknown> = {}): Promise<GatewayProcess> {
  const gw = await startGateway({
    config: {
      providers: [
        { name: 'oa', type: 'openai', base_url: `${mock.url}/v1` },
        { name: 'an', type: 'anthropic', base_url: mock.url },
      ],
      models: [
        { name: 'mock-gpt', provider: 'oa' },
        { name: 'claude-mock', provider: 'an' },
      ],
      keys,
      limits: { store: 'redis', redis: { url: redis.url, key_prefix: 'test:' }, ...limits },
      // $1 per thousand tokens: the mock's 18 tokens cost $0.018.
      prices: { 'mock-gpt': { input: 1000, output: 1000 }, 'claude-mock': { input: 1000, output: 1000 } },
      shutdown: { min_drain_secs: 0 },
      ...extra,
    },
  });
  started.push(gw);
  return gw;
}

const chat = (gw: GatewayProcess, key: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
  fetch(`${gw.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'mock-gpt', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }], ...extra }),
  });
const message = (gw: GatewayProcess, key: string, extra: Record<string, unknown> = {}) =>
  fetch(`${gw.proxyUrl}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'claude-mock', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }], ...extra }),
  });

/** `clients` clients per gateway, each sending requests one after another for `ms`: what got through, and the tokens it used. */
async function load(gws: GatewayProcess[], key: string, ms: number, clients = 1): Promise<{ ok: number; limited: number; other: number; tokens: number; seconds: number }> {
  const totals = { ok: 0, limited: 0, other: 0, tokens: 0, seconds: 0 };
  const startedAt = Date.now();
  await Promise.all(
    gws.flatMap((gw) => Array.from({ length: clients }, () => gw)).map(async (gw) => {
      while (Date.now() - startedAt < ms) {
        const res = await chat(gw, key);
        if (res.status === 200) {
          totals.ok++;
          const usage = ((await res.json()) as { usage: { total_tokens: number } }).usage;
          totals.tokens += usage.total_tokens;
        } else {
          if (res.status === 429) totals.limited++;
          else totals.other++;
          await res.arrayBuffer();
        }
      }
    }),
  );
  totals.seconds = (Date.now() - startedAt) / 1000;
  return totals;
}

describe('limits shared through Redis', { skip }, () => {
  test('three gateways hold one RPM limit together; with the memory store each, they allow three times as much', async () => {
    const key = { name: 'fleet-rpm', key: 'sk-fleet-rpm-00000001', limits: { rpm: 30 } };
    const fleet = await Promise.all([gateway([key]), gateway([key]), gateway([key])]);
    const shared = await load(fleet, key.key, 4000, 4);
    // A bucket of 30, refilled at 0.5 a second: 30 + 0.5 × elapsed got through, whichever gateway took them.
    const allowed = 30 + (30 * shared.seconds) / 60;
    console.log(`shared RPM 30 over ${shared.seconds.toFixed(2)} s on 3 gateways, 12 clients at once: ${shared.ok} let through (the bucket allows ${allowed.toFixed(1)}), ${shared.limited} refused`);
    assert.equal(shared.other, 0);
    assert.ok(Math.abs(shared.ok - allowed) <= 2, `let through ${shared.ok}, expected ${allowed.toFixed(1)} ± 2`);
    assert.ok(shared.limited > 0);

    const alone = await Promise.all([0, 1, 2].map(() => gateway([key], { store: 'memory', redis: undefined })));
    const separate = await load(alone, key.key, 4000, 4);
    console.log(`memory store on each of 3 gateways: ${separate.ok} let through`);
    assert.ok(separate.ok >= 3 * 30, `each gateway alone allows its own 30: ${separate.ok}`);
    await Promise.all([...fleet, ...alone].map((g) => g.stop()));
  });

  test('three gateways hold one TPM limit together: reservations at the start, settled with the real usage', async () => {
    const key = { name: 'fleet-tpm', key: 'sk-fleet-tpm-00000001', limits: { tpm: 900 } };
    const fleet = await Promise.all([gateway([key]), gateway([key]), gateway([key])]);
    const shared = await load(fleet, key.key, 4000);
    const allowance = 900 + (900 * shared.seconds) / 60;
    // Up to one reservation per gateway is still out when the bucket is read (≈ 40 tokens each), and a request's usage is only known at its end.
    const tolerance = 3 * 40 + USAGE_TOKENS;
    console.log(`shared TPM 900 over ${shared.seconds.toFixed(2)} s: ${shared.tokens} tokens used by ${shared.ok} requests (the bucket allows ${allowance.toFixed(0)}, tolerance ${tolerance})`);
    assert.equal(shared.other, 0);
    assert.ok(Math.abs(shared.tokens - allowance) <= tolerance, `used ${shared.tokens}, expected ${allowance.toFixed(0)} ± ${tolerance}`);
    await Promise.all(fleet.map((g) => g.stop()));
  });

  test('a budget: spend in Redis from JSON answers and streams; spent, a 429 in both API shapes, no SDK retry', async () => {
    const key = { name: 'budgeted', key: 'sk-budgeted-0000000001', budget: { usd: 0.065, period: 'month' } };
    const [a, b] = await Promise.all([gateway([key]), gateway([key])]);
    assert.equal((await chat(a, key.key)).status, 200);
    // A stream whose client did not ask for usage: the gateway asks for it, counts it, and hides it.
    const stream = await chat(b, key.key, { stream: true }, mockHeader({ sseIntervalMs: 2 }));
    assert.equal(stream.status, 200);
    assert.doesNotMatch(await stream.text(), /"usage"/);
    const month = new Date().toISOString().slice(0, 7);
    await eventually(async () => (await redis.cli('GET', `test:sp:budgeted:${month}`)) === '"36000"', 5000, 'two requests of $0.018 in Redis');
    // The mock's Anthropic usage is 10 + 6 tokens: $0.016, and $0.052 in all. Each request may cost
    // $0.024 or $0.025 (its prompt, body / 4, and max_tokens 4, at $1,000 a million): over the budget from now on.
    assert.equal((await message(a, key.key)).status, 200);
    await eventually(async () => (await redis.cli('GET', `test:sp:budgeted:${month}`)) === '"52000"', 5000, 'three requests in Redis');
    const openai = await chat(b, key.key);
    assert.equal(openai.status, 429);
    assert.equal(openai.headers.get('x-should-retry'), 'false');
    assert.ok(Number(openai.headers.get('retry-after')) > 0);
    const error = assertOpenAiError(await openai.text(), 'budget');
    assert.equal(error.code, 'budget_exceeded');
    assert.equal(error.type, 'insufficient_quota');
    assert.match(error.message, /"budgeted" has \$0\.013 left of its budget of \$0\.065 for this month, and this request may cost up to \$0\.024 \(its prompt, and its max_tokens/);
    const anthropic = await message(a, key.key);
    assert.equal(anthropic.status, 429);
    assert.equal(assertAnthropicError(await anthropic.text(), 'budget').type, 'rate_limit_error');
    const metrics = await scrape(a);
    assert.equal(metricValue(metrics, 'sluice_rate_limited_total', { key: 'budgeted', scope: 'key', limit: 'budget' }), 1);
    assert.equal(metricValue(metrics, 'sluice_spend_usd_total', { key: 'budgeted', model: 'mock-gpt' }), 0.018);
    assert.equal(metricValue(metrics, 'sluice_spend_usd_total', { key: 'budgeted', model: 'claude-mock' }), 0.016);
    const line = await a.waitForLog((l) => l.event === 'access' && l.model === 'claude-mock' && l.status === 200);
    assert.equal(line.cost_usd, 0.016);
    assert.equal(line.key_name, 'budgeted');
    await Promise.all([a.stop(), b.stop()]);
  });

  test('workers: 2 on Redis: GET /budgets (the supervisor\'s admin API) reads what both workers spent from Redis, and a team\'s too; L9: its client is closed at the exit with the workers\'', async () => {
    const team = { name: 'crew', budget: { usd: 10, period: 'day' } };
    const key = { name: 'worked', key: 'sk-worked-00000000001', team: 'crew', budget: { usd: 5, period: 'day' } };
    const gw = await gateway([key], {}, { workers: 2, teams: [team] });
    // A connection each: the supervisor hands connections to its workers in turn.
    for (let i = 0; i < 10; i++) {
      const agent = new Agent();
      const res = await undiciFetch(`${gw.proxyUrl}/v1/chat/completions`, {
        method: 'POST',
        dispatcher: agent,
        headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mock-gpt', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }),
      });
      assert.equal(res.status, 200);
      await res.text();
      await agent.close();
    }
    const workers = () => new Set(gw.logs.filter((l) => l.event === 'access' && l.key_name === 'worked').map((l) => l.worker));
    await eventually(() => workers().size === 2, 5000, 'both workers served');
    const day = new Date().toISOString().slice(0, 10);
    await eventually(async () => (await redis.cli('GET', `test:sp:worked:${day}`)) === '"180000"', 5000, 'ten requests of $0.018 in Redis');
    const res = await fetch(`${gw.adminUrl}/budgets`);
    assert.equal(res.status, 200);
    const { budgets } = (await res.json()) as { budgets: { scope: string; name: string; spent_usd: number; left_usd: number }[] };
    const spent = Object.fromEntries(budgets.map((b) => [`${b.scope}:${b.name}`, [b.spent_usd, b.left_usd]]));
    assert.deepEqual(spent, { 'key:worked': [0.18, 4.82], 'team:crew': [0.18, 9.82] });
    // L9 (docs/graceful-shutdown.md: "the etcd and Redis clients closed"): each client says QUIT at
    // the exit, the supervisor's for the budgets as well as each worker's (a process that only dies
    // sends none).
    const quits = async () => Number(/cmdstat_quit:calls=(\d+)/.exec(await redis.cli('INFO', 'commandstats'))?.[1] ?? 0);
    const before = await quits();
    gw.signal('SIGTERM');
    assert.equal((await gw.exited).code, 0);
    assert.equal(await quits(), before + 3, 'two workers\' clients and the supervisor\'s');
    assert.deepEqual(gw.logs.filter((l) => l.event === 'exit_step_failed'), []);
  });

  test('Redis stopped under load: on_store_error open lets requests through, closed refuses them (503); no crash, nothing left in flight; back: limits hold again', async () => {
    const key = { name: 'outage', key: 'sk-outage-000000000001', limits: { rpm: 5 } };
    const open = await gateway([key]);
    const closed = await gateway([key], { on_store_error: 'closed' });
    for (let i = 0; i < 5; i++) assert.equal((await chat(open, key.key)).status, 200);
    assert.equal((await chat(closed, key.key)).status, 429, 'the two share the bucket');
    await redis.stop();
    const during = await Promise.all(Array.from({ length: 20 }, (_, i) => chat(i % 2 ? closed : open, key.key)));
    const statuses = await Promise.all(during.map(async (r) => [r.status, await r.text()] as const));
    for (const [i, [status, body]] of statuses.entries()) {
      if (i % 2) {
        assert.equal(status, 503, body);
        assert.equal(assertOpenAiError(body, 'closed').code, 'limit_store_unavailable');
      } else assert.equal(status, 200, body);
    }
    const refused = await message(closed, key.key);
    assert.equal(refused.status, 503);
    assertAnthropicError(await refused.text(), 'closed, anthropic');
    const metrics = await scrape(open);
    assert.ok((metricValue(metrics, 'sluice_limit_store_errors_total', { operation: 'acquire', outcome: 'allowed' }) ?? 0) >= 10);
    assert.ok((metricValue(await scrape(closed), 'sluice_limit_store_errors_total', { operation: 'acquire', outcome: 'refused' }) ?? 0) >= 10);
    await open.waitForLog((l) => l.event === 'limit_store_error');
    assert.ok(!open.stdout().includes(redis.url.replace('redis://', 'redis://x')), 'never the URL with credentials');
    for (const gw of [open, closed]) {
      const text = await scrape(gw);
      for (const endpoint of ['chat_completions', 'messages']) assert.equal(metricValue(text, 'sluice_in_flight_requests', { endpoint, protocol: 'http1' }) ?? 0, 0, endpoint);
    }
    await redis.start();
    // Back (an empty Redis: its counters were in memory only): the limit holds again.
    await eventually(async () => (await chat(closed, key.key)).status === 200, 10_000, 'the closed gateway serves again');
    // Each gateway's client reconnects on its own (at most every 2 s): until the open one has, its
    // requests pass uncounted, without x-ratelimit-* headers.
    await eventually(
      async () => {
        const r = await chat(open, key.key);
        await r.text();
        return r.headers.has('x-ratelimit-limit-requests');
      },
      10_000,
      'the open gateway counts again',
    );
    const after = await Promise.all(Array.from({ length: 8 }, () => chat(open, key.key)));
    const codes = after.map((r) => r.status);
    assert.ok(codes.includes(429) && codes.filter((c) => c === 200).length <= 4, `limited again: ${codes.join(' ')}`);
    assert.equal(open.child.exitCode, null);
    await Promise.all([open.stop(), closed.stop()]);
  });

  test('L9: SIGTERM while streams run: they finish, and their usage is in Redis when the process has exited', async (t) => {
    const key = { name: 'draining', key: 'sk-draining-0000000001', limits: { tpm: 100_000, concurrent: 10 }, budget: { usd: 100 } };
    // Redis 400 ms away: the streams' settlements are still on their way when the drain ends, so
    // the exit must wait for them (an exit that does not is caught here).
    const slow = await startTcpProxy({ host: '127.0.0.1', port: redis.port }, { delayMs: 400 });
    t.after(() => slow.close());
    const gw = await gateway([key], { redis: { url: slow.url.replace('http:', 'redis:'), key_prefix: 'test:', command_timeout_ms: 3000 } });
    const streams = Array.from({ length: 3 }, () => chat(gw, key.key, { stream: true }, mockHeader({ sseIntervalMs: 200, chunks: 6 })));
    const responses = await Promise.all(streams);
    await eventually(async () => (await redis.cli('ZCARD', 'test:cc:k:draining:cc')) === '(integer) 3', 5000, 'three leases held');
    gw.signal('SIGTERM');
    const bodies = await Promise.all(responses.map((r) => r.text()));
    for (const body of bodies) assert.match(body, /data: \[DONE\]\n\n$/);
    const exit = await gw.exited;
    assert.equal(exit.code, 0);
    const month = new Date().toISOString().slice(0, 7);
    // Read after the exit: nothing can have been written later.
    assert.equal(await redis.cli('GET', `test:sp:draining:${month}`), `"${3 * USAGE_TOKENS * 1000}"`);
    assert.equal(await redis.cli('ZCARD', 'test:cc:k:draining:cc'), '(integer) 0', 'every lease given back');
    const level = Number(JSON.parse(await redis.cli('HGET', 'test:rl:k:draining:tpm', 'l')));
    assert.ok(level > 100_000 - 3 * USAGE_TOKENS - 5 && level <= 100_000, `the reservations were settled to the usage: level ${level}`);
  });

  test('SIGKILL mid-stream: the lease comes back after lease_secs; renewed leases outlive it while their stream runs', async () => {
    const key = { name: 'killed', key: 'sk-killed-000000000001', limits: { concurrent: 1 }, budget: { usd: 100 } };
    const [victim, other] = await Promise.all([gateway([key], { lease_secs: 2 }), gateway([key], { lease_secs: 2 })]);
    // A stream of 5 s holds the one place past two lease periods: renewals keep it.
    const long = await chat(victim, key.key, { stream: true }, mockHeader({ sseIntervalMs: 1000, chunks: 5 }));
    assert.equal(long.status, 200);
    const reader = long.body!.getReader();
    await reader.read();
    await new Promise((resolve) => setTimeout(resolve, 2500));
    const blocked = await chat(other, key.key);
    assert.equal(blocked.status, 429, 'the renewed lease still holds the place');
    assert.match(assertOpenAiError(await blocked.text(), 'concurrent').message, /1 concurrent requests/);
    victim.child.kill('SIGKILL');
    await victim.exited;
    await reader.cancel().catch(() => undefined);
    const killedAt = Date.now();
    const back = await eventually(async () => ((await chat(other, key.key)).status === 200 ? Date.now() : undefined), 6000, 'the place comes back');
    const waited = back! - killedAt;
    console.log(`place given back ${waited} ms after the SIGKILL (lease_secs 2)`);
    assert.ok(waited <= 2600, `back within the lease: ${waited} ms`);
    const month = new Date().toISOString().slice(0, 7);
    // Charged once: the request that completed; the killed stream's usage never arrived, and nothing was charged in its place.
    assert.equal(await redis.cli('GET', `test:sp:killed:${month}`), `"${USAGE_TOKENS * 1000}"`);
    await other.stop();
  });
});
