// A request is counted from its key, not from its body (found in the review of issue #24). A key
// with `concurrent: 1, rpm: 5` held 50 requests in flight by sending their bodies slowly (each
// bounded only by request_timeout_secs, 300 s), and its normal request still got 200: a request was
// not counted in any limit until its body was read. Now a key's `concurrent` place is taken when
// its key is checked, before the body: at the default settings (the memory store; `workers: 2`,
// the supervisor's store over IPC; Redis), of 50 slow bodies one holds the place and 49 are refused
// 429 at once, a normal request is refused while the slow one lasts, and the place is free as soon
// as the slow client goes. Whatever way a request ends before its admission (its client gone
// mid-body, a body too large, invalid JSON, an unknown model, ...: fuzzed), its place is given back.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import fc from 'fast-check';
import { eventually, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { assertOpenAiError, assertSettled } from '../support/reliability.ts';
import { postJson } from '../support/http.ts';
import { redisCheck, startRedis, type RedisServer } from '../support/redis.ts';

const KEY = 'sk-slow-body-one-at-a-time';
/** The fuzzed key: one place and no rate (each case ends with a normal request). */
const FUZZ_KEY = 'sk-slow-body-fuzzed-endings';
const SLOW = 50;
const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 20261224);
const RUNS = Number(process.env.SLUICE_FUZZ_RUNS ?? 40);

/** A request whose headers are sent and whose body stops after its first bytes; `answer` is the first bytes the gateway sends back ('' if it closes first). */
function slowBody(url: string, key = KEY, head = 1000, sent = '{"model":"m","messages":[{"role"'): { socket: Socket; answer: Promise<string> } {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  socket.on('error', () => {});
  socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: ${hostname}:${port}\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${head}\r\n\r\n${sent}`);
  const answer = new Promise<string>((resolve) => {
    let data = '';
    socket.on('data', (chunk: Buffer) => {
      data += chunk.toString('latin1');
      if (data.includes('\r\n\r\n{')) resolve(data);
    });
    socket.once('close', () => resolve(data));
  });
  return { socket, answer };
}

const chat = (gw: GatewayProcess, key = KEY) => postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${key}` });

/** The place is free: a normal request gets 200 (at once, or within a few seconds: a closed socket is seen by the gateway a moment later). */
async function placeIsFree(gw: GatewayProcess, what: string, key = KEY): Promise<void> {
  let last = '';
  await eventually(async () => {
    const res = await chat(gw, key);
    last = `${res.status} ${res.body}`;
    return res.status === 200;
  }, 5000, `${what}: a normal request passes`).catch((error: Error) => {
    throw new Error(`${error.message}; last answer ${last}`);
  });
}

const skipRedis = redisCheck().skip;
const STORES = [
  { name: 'the memory store', workers: 1, redis: false },
  { name: 'workers: 2', workers: 2, redis: false },
  { name: 'Redis', workers: 1, redis: true },
] as const;

for (const store of STORES) {
  describe(`slow bodies under a key's concurrent limit, ${store.name}`, { skip: store.redis ? skipRedis : false }, () => {
    let mock: MockUpstream;
    let redis: RedisServer | undefined;
    let gw: GatewayProcess;

    before(async () => {
      mock = await startMockUpstream({ record: false });
      if (store.redis) redis = await startRedis();
      gw = await startGateway({
        config: {
          workers: store.workers,
          providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream' }],
          models: [{ name: 'm', provider: 'up' }],
          keys: [
            { name: 'slow', key: KEY, models: ['m'], limits: { concurrent: 1, rpm: 5 } },
            { name: 'fuzzed', key: FUZZ_KEY, models: ['m'], limits: { concurrent: 1 } },
          ],
          ...(redis ? { limits: { store: 'redis', redis: { url: redis.url, key_prefix: 'slow:' } } } : {}),
        },
      });
    });

    after(async () => {
      await gw?.stop();
      await mock?.close();
      await redis?.close();
    });

    test(`${SLOW} slow bodies: one holds the place, ${SLOW - 1} are refused 429 before their bodies, a normal request too; the place is free once the slow client goes`, { timeout: 60_000 }, async () => {
      const slow: { socket: Socket; answer: Promise<string> }[] = [];
      for (let i = 0; i < SLOW; i++) slow.push(slowBody(gw.proxyUrl));
      try {
        const answered = new Set<number>();
        slow.forEach((s, i) => void s.answer.then(() => answered.add(i)));
        // (Before the fix none was ever answered: each waited for its body.)
        await eventually(() => answered.size >= SLOW - 1, 15_000, `${SLOW - 1} slow bodies answered`).catch(() => undefined);
        const normal = await chat(gw);
        console.log(`# ${store.name}: ${answered.size} of ${SLOW} slow bodies refused at once, the normal request ${normal.status}`);
        assert.equal(normal.status, 429, `a normal request while a slow body holds the key's only place: ${normal.body}`);
        assert.match(normal.body, /1 concurrent requests/);
        assert.equal(answered.size, SLOW - 1, 'exactly one slow body holds the place');
        for (const i of answered) {
          const text = await slow[i]!.answer;
          assert.match(text, /^HTTP\/1\.1 429 /, text.slice(0, 300));
          const error = assertOpenAiError(text.slice(text.indexOf('\r\n\r\n') + 4), 'slow body');
          assert.equal(error.code, 'rate_limit_exceeded');
          assert.match(error.message, /^Rate limit reached for API key "slow": 1 concurrent requests\./);
        }
      } finally {
        for (const s of slow) s.socket.destroy();
      }
      await placeIsFree(gw, 'the slow clients gone');
      await assertSettled(gw, 'after the slow bodies');
    });

    test('every way a request ends before its admission gives its place back (fuzzed)', { timeout: 120_000 }, async () => {
      const ending = fc.oneof(
        fc.record({ kind: fc.constant('gone mid-body' as const), sent: fc.nat(30) }),
        fc.record({ kind: fc.constant('half-closed mid-body' as const), sent: fc.nat(30) }),
        fc.record({ kind: fc.constant('body' as const), body: fc.oneof(fc.constantFrom('{', '[]', 'null', '{}', '{"model":""}', '{"model":"unknown"}', '{"model":"other"}', '{"model":"m"'), fc.string({ maxLength: 40 })) }),
        fc.record({ kind: fc.constant('too large' as const), declared: fc.integer({ min: 10_485_761, max: 2 ** 40 }) }),
      );
      await fc.assert(
        fc.asyncProperty(ending, async (end) => {
          if (end.kind === 'too large') {
            const { socket, answer } = slowBody(gw.proxyUrl, FUZZ_KEY, end.declared, '');
            assert.match(await answer, /^HTTP\/1\.1 413 /);
            socket.destroy();
          } else if (end.kind === 'body') {
            const body = Buffer.from(end.body);
            const { socket, answer } = slowBody(gw.proxyUrl, FUZZ_KEY, body.length, end.body);
            assert.match(await answer, /^HTTP\/1\.1 (4\d\d|200) /);
            socket.destroy();
          } else {
            const { socket, answer } = slowBody(gw.proxyUrl, FUZZ_KEY, 1000, '{"model":"m","messages":[{"role":"user","content":"hi"}]}'.slice(0, end.sent));
            await new Promise((resolve) => setTimeout(resolve, 20));
            if (end.kind === 'gone mid-body') socket.destroy();
            else socket.end();
            await answer;
            socket.destroy();
          }
          await placeIsFree(gw, JSON.stringify(end), FUZZ_KEY);
        }),
        { seed: SEED, numRuns: RUNS },
      );
      await assertSettled(gw, 'after the early ends');
    });
  });
}
