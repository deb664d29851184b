// Issue 24, defect 8: `/v1/realtime?model=allowed&model=other` was checked against the key's
// allow-list on its first `model` and forwarded with both. A repeated query parameter (any name,
// compared once decoded) refuses the handshake with a 400 before any upstream socket, and the
// upstream gets only what was checked: `model` (the route's upstream name) and a valid `intent`.
// Anything else is refused by name. The query string is fuzzed (SLUICE_FUZZ_SEED, SLUICE_FUZZ_RUNS).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { eventually, metricValue, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { websocketHandshake } from '../support/http.ts';
import { assertOpenAiError } from '../support/reliability.ts';

const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 20261203);
const RUNS = Number(process.env.SLUICE_FUZZ_RUNS ?? 80);
const KEY = 'sk-realtime-narrow-key-0001';
const AUTH = { authorization: `Bearer ${KEY}` };

let mock: MockUpstream;
let gw: GatewayProcess;

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream' }],
      // Neither route rewrites the name: the upstream gets the model the client sent, as checked.
      models: [
        { name: 'allowed', provider: 'up' },
        { name: 'other', provider: 'up' },
      ],
      keys: [{ name: 'narrow', key: KEY, models: ['allowed'] }],
    },
  });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

/** The realtime sessions the mock has seen, by the request target it received. */
const upstreamTargets = () => mock.received.filter((r) => r.path.startsWith('/v1/realtime')).map((r) => r.path);

async function refused(target: string, status: number, param: string): Promise<void> {
  const before = upstreamTargets().length;
  const answer = await websocketHandshake(gw.proxyUrl, target, AUTH);
  assert.equal(answer.status, status, `${target}: ${answer.head}\n${answer.body}`);
  const error = assertOpenAiError(answer.body, target) as { code: string; param?: string; message: string };
  assert.equal(error.code, 'invalid_parameter', target);
  assert.equal(error.param, param, target);
  assert.equal(upstreamTargets().length, before, `${target}: no upstream socket was opened`);
}

async function accepted(target: string, forwarded: string): Promise<void> {
  const before = upstreamTargets().length;
  const answer = await websocketHandshake(gw.proxyUrl, target, AUTH);
  assert.equal(answer.status, 101, `${target}: ${answer.head}\n${answer.body}`);
  await mock.waitFor(() => upstreamTargets().length > before);
  assert.equal(upstreamTargets()[before], forwarded, target);
}

describe('repeated and unknown query parameters on /v1/realtime', () => {
  test('model=allowed&model=other is a 400 before any upstream socket (it was checked on the first and forwarded with both)', async () => {
    await refused('/v1/realtime?model=allowed&model=other', 400, 'model');
    await refused('/v1/realtime?model=other&model=allowed', 400, 'model');
    // The same name once decoded.
    await refused('/v1/realtime?model=allowed&mod%65l=other', 400, 'model');
    await refused('/v1/realtime?model=allowed&intent=realtime&intent=transcription', 400, 'intent');
  });

  test('only model and intent are forwarded; any other parameter is refused by name', async () => {
    await refused('/v1/realtime?model=allowed&api-version=2025-01-01', 400, 'api-version');
    await refused('/v1/realtime?model=allowed&Model=other', 400, 'Model');
    await refused('/v1/realtime?call_id=rtc_123&model=allowed', 400, 'call_id');
    await refused('/v1/realtime?model=allowed&intent=everything', 400, 'intent');
    await accepted('/v1/realtime?model=allowed', '/v1/realtime?model=allowed');
    await accepted('/v1/realtime?intent=transcription&model=allowed', '/v1/realtime?model=allowed&intent=transcription');
  });

  test('the key\'s allow-list still holds on the one model checked', async () => {
    const answer = await websocketHandshake(gw.proxyUrl, '/v1/realtime?model=other', AUTH);
    assert.equal(answer.status, 403);
    assert.equal(assertOpenAiError(answer.body).code, 'model_not_allowed');
  });
});

describe('fuzzed realtime query strings', () => {
  test('every answer is a 101 that forwarded exactly what was checked, or a 4xx with no upstream socket; nothing is left in flight', async () => {
    console.log(`realtime query fuzz: seed ${SEED}, ${RUNS} runs (set SLUICE_FUZZ_SEED / SLUICE_FUZZ_RUNS to change)`);
    // Bytes the HTTP parser takes in a request target: no space, no control character, no '#'.
    const text = fc.string({ unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$\'()*+,;:@/?%=&[]'.split('')), maxLength: 12 });
    const name = fc.oneof(fc.constantFrom('model', 'intent', 'call_id', 'Model', 'mod%65l', '%6D%6F%64%65%6C', 'model%00', 'model[]', 'mock_status', ''), text);
    const value = fc.oneof(fc.constantFrom('allowed', 'other', 'transcription', 'realtime', '', 'allowed%26model%3Dother', 'allowed;model=other', '%FF', '%zz', 'allowed%00'), text);
    const anyPair = fc.tuple(name, fc.option(value, { nil: undefined }));
    // Most cases start from a model the key may use, so that accepted handshakes are checked too.
    const modelPair = fc.tuple(fc.constantFrom('model', 'model', 'mod%65l'), fc.constantFrom<string | undefined>('allowed', 'allowed', 'allowed', 'all%6Fwed', 'other', undefined));
    const intentPair = fc.tuple(fc.constant('intent'), fc.constantFrom<string | undefined>('realtime', 'transcription', 'bogus', undefined));
    const likely = fc
      .tuple(modelPair, fc.array(fc.oneof({ weight: 3, arbitrary: intentPair }, { weight: 1, arbitrary: modelPair }, { weight: 2, arbitrary: anyPair }), { maxLength: 2 }), fc.nat())
      .map(([model, rest, at]) => rest.toSpliced(at % (rest.length + 1), 0, model));
    const separator = fc.oneof({ weight: 6, arbitrary: fc.constant('&') }, { weight: 1, arbitrary: fc.constantFrom('&&', ';') });
    const query = fc
      .tuple(fc.oneof({ weight: 2, arbitrary: likely }, { weight: 1, arbitrary: fc.array(anyPair, { maxLength: 5 }) }), separator)
      .map(([pairs, sep]) => pairs.map(([n, v]) => (v === undefined ? n : `${n}=${v}`)).join(sep));
    let opened = 0;
    await fc.assert(
      fc.asyncProperty(query, async (q) => {
        const target = `/v1/realtime?${q}`;
        const sent = new URLSearchParams(q);
        const before = upstreamTargets().length;
        const answer = await websocketHandshake(gw.proxyUrl, target, AUTH);
        assert.equal(gw.child.exitCode, null, 'the process lives');
        if (answer.status !== 101) {
          assert.ok(answer.status >= 400 && answer.status < 500, `${target}: ${answer.head}`);
          assertOpenAiError(answer.body, target);
          assert.equal(upstreamTargets().length, before, `${target}: no upstream socket for a refusal`);
          const names = [...sent.keys()];
          if (new Set(names).size !== names.length) assert.equal(answer.status, 400, `${target}: a repeated parameter`);
          return;
        }
        // Accepted: the client sent one model, allowed for the key, and nothing unknown or repeated.
        opened++;
        assert.deepEqual(sent.getAll('model'), ['allowed'], target);
        for (const n of sent.keys()) assert.ok(n === 'model' || n === 'intent', `${target}: accepted with "${n}"`);
        await mock.waitFor(() => upstreamTargets().length > before);
        const forwarded = new URL(upstreamTargets()[before]!, 'http://upstream').searchParams;
        assert.deepEqual([...forwarded.keys()].filter((n) => n !== 'model' && n !== 'intent'), [], `${target}: forwarded ${forwarded}`);
        assert.deepEqual(forwarded.getAll('model'), ['allowed'], `${target}: forwarded ${forwarded}`);
        assert.ok(forwarded.getAll('intent').length <= 1 && ['realtime', 'transcription', undefined].includes(forwarded.get('intent') ?? undefined), `${target}: forwarded ${forwarded}`);
      }),
      { seed: SEED, numRuns: RUNS, verbose: 1 },
    );
    console.log(`realtime query fuzz: ${opened} of ${RUNS} handshakes accepted`);
    await eventually(async () => (metricValue(await scrape(gw), 'sluice_in_flight_requests', { endpoint: 'realtime', protocol: 'websocket' }) ?? 0) === 0, 5000, 'realtime in-flight back to 0');
  });
});
