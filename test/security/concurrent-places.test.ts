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
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { postJson } from '../support/http.ts';
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

/** A stream on a connection of its own: its status once its headers have come, and its whole text later. */
function openStream(body: string, headers: Record<string, string>): Promise<{ status: number; text: Promise<string> }> {
  return new Promise((resolve, reject) => {
    const req = request(`${gw.proxyUrl}/v1/chat/completions`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      const ended = new Promise<string>((done, failed) => {
        res.on('end', () => done(text));
        res.on('error', failed);
      });
      resolve({ status: res.statusCode ?? 0, text: ended });
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
    // The stream's answer has begun before the first try: it holds the place (else the try could take it first).
    const stream = await openStream(JSON.stringify({ model: 'slow', stream: true, messages: [{ role: 'user', content: 'hold the place' }] }), mockHeader({ chunks: 50, sseIntervalMs: 100 }));
    assert.equal(stream.status, 200);
    const refusal = await postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: 'm', messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${KEY}` });
    assert.equal(refusal.status, 429, refusal.body);
    assert.equal(refusal.headers['retry-after'], '1', JSON.stringify(refusal.headers));
    assert.equal(refusal.headers['retry-after-ms'], '1000');
    assert.match(refusal.body, /1 concurrent requests\. Try again in 1(\.0+)?s/);
    assert.match(await stream.text, /data: \[DONE\]/);
    assert.equal((await chatOnNewConnection(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }))).status, 200, 'the place is free once the stream has ended');
  });
});
