// A recycled worker's requests are charged (#24, found with defect 7): with `workers_recycle`, a
// worker past its bound keeps serving until its replacement does, then drains; its requests still
// ask the supervisor's memory store (limits.store memory, the default) to admit and settle them. The
// supervisor ignored every limit message of a worker no longer in its slot: the worker's settlement
// timed out and was dropped, so what a stream ending during the drain cost was never charged.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { httpRequest, type RawResponse } from '../support/http.ts';

const BUDGET = 'sk-recycle-budget-00001';

let mock: MockUpstream;
let gw: GatewayProcess | undefined;

before(async () => {
  mock = await startMockUpstream({ record: false });
});
after(async () => {
  await gw?.stop();
  await mock?.close();
});

function chat(key: string | undefined, headers: Record<string, string> = {}, stream = false): Promise<RawResponse> {
  return httpRequest(`${gw!.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
    body: JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content: 'hi' }] }),
  });
}

test('a stream that ends in a recycled worker, during its drain, is charged to its key\'s budget', async () => {
  gw = await startGateway({
    config: {
      workers: 2,
      workers_recycle: { max_requests: 2 },
      providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }],
      models: [{ name: 'm', provider: 'up' }],
      prices: { m: { input: 1, output: 1 } },
      // The stream ($0.01001 at $1 per million; it may cost about $0.0041, which fits) spends more
      // than this budget; the other key has none.
      keys: [{ name: 'budget-key', key: BUDGET, budget: { usd: 0.01, period: 'day' } }, { name: 'free', key: 'sk-recycle-free-000001' }],
    },
  });
  // The stream outlasts the recycling of its worker (15 s; checked below).
  let streaming = true;
  const stream = chat(BUDGET, mockHeader({ chunks: 150, sseIntervalMs: 100, usage: { prompt: 10, completion: 10_000 } }), true);
  stream.then(() => (streaming = false), () => (streaming = false));
  // Two more requests on each worker: both pass max_requests and are replaced.
  for (let i = 0; i < 4; i++) assert.equal((await chat('sk-recycle-free-000001')).status, 200);
  for (const slot of [1, 2]) await gw.waitForLog((l) => l.event === 'worker_recycled' && l.worker === slot, 30_000);
  assert.ok(streaming, 'the stream was still running when its worker began to drain');
  const done = await stream;
  assert.equal(done.status, 200);
  assert.match(done.body, /data: \[DONE\]/);
  for (const slot of [1, 2]) await gw.waitForLog((l) => l.event === 'worker_exited' && l.worker === slot && l.recycled === true, 30_000);
  const after = await chat(BUDGET);
  assert.equal(after.status, 429, `the stream's cost was charged: ${after.body}`);
  assert.equal((JSON.parse(after.body) as { error: { code: string } }).error.code, 'budget_exceeded');
  assert.deepEqual(gw.logs.filter((l) => l.event === 'limit_store_error'), [], 'no limit message of a recycled worker went unanswered');
});
