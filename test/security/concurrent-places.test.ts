// A key's `concurrent` place is free for the client's next request as soon as the client has its
// answer (found while fixing issue #24). A client that sends its requests one after another, each
// on a new connection, with a key of `concurrent: 1`, at the default `workers` setting of a group
// (`workers: 2`: its next request may go to the other worker, whose store is the supervisor's over
// IPC): the place was given back when the response had closed, after its last bytes were written,
// so the other worker's request sometimes reached the supervisor first and was refused, and told to
// retry in about 30 s (the soonest lease expiry). Now the place is given back before the last bytes
// are written, and a refusal by a `concurrent` limit says to retry in a second.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { eventually, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { httpRequest, postJson } from '../support/http.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { assertSettled } from '../support/reliability.ts';

const KEY = 'sk-one-request-at-a-time';
const REQUESTS = Number(process.env.SLUICE_SEQUENTIAL_REQUESTS ?? 2000);

let mock: MockUpstream;
let gw: GatewayProcess;

before(async () => {
  mock = await startMockUpstream({ record: false });
  gw = await startGateway({
    config: {
      workers: 2,
      providers: [
        { name: 'echo', type: 'echo' },
        { name: 'up', type: 'openai', base_url: `${mock.url}/v1` },
      ],
      models: [
        { name: 'm', provider: 'echo' },
        { name: 'slow', provider: 'up' },
      ],
      keys: [{ name: 'sequential', key: KEY, limits: { concurrent: 1 } }],
      log: { access_log: false },
    },
  });
});
after(async () => {
  await gw?.stop();
  await mock?.close();
});

/** One chat request on a connection of its own (no agent: the next one may go to the other worker); its status. */
function chatOnNewConnection(body: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${gw.proxyUrl}/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe("a key's concurrent place, one request after another (workers: 2)", () => {
  test(`${REQUESTS} requests one after another, each on a new connection: none is refused`, { timeout: 120_000 }, async () => {
    const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'next' }] });
    const refused: string[] = [];
    for (let i = 0; i < REQUESTS; i++) {
      const answer = await chatOnNewConnection(body);
      if (answer.status !== 200) refused.push(`request ${i + 1}: ${answer.status} ${answer.body.slice(0, 200)}`);
    }
    assert.deepEqual(refused, [], `${refused.length} of ${REQUESTS} refused although the client's previous request had its answer`);
    await assertSettled(gw, 'after the sequential requests');
  });

  test('a request refused by a concurrent limit is told to retry in a second, not at the lease expiry', { timeout: 60_000 }, async () => {
    const stream = httpRequest(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, ...mockHeader({ chunks: 30, sseIntervalMs: 100 }) },
      body: JSON.stringify({ model: 'slow', stream: true, messages: [{ role: 'user', content: 'hold the place' }] }),
    });
    let refusal: Awaited<ReturnType<typeof postJson>> | undefined;
    await eventually(async () => (refusal = await postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: 'm', messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${KEY}` })).status === 429, 5000, 'the place taken by the stream');
    assert.equal(refusal!.headers['retry-after'], '1', JSON.stringify(refusal!.headers));
    assert.equal(refusal!.headers['retry-after-ms'], '1000');
    assert.match(refusal!.body, /1 concurrent requests\. Try again in 1(\.0+)?s/);
    assert.equal((await stream).status, 200);
    await eventually(async () => (await chatOnNewConnection(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }))).status === 200, 5000, 'the place free once the stream ended');
  });
});
