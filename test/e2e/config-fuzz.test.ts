// Hostile input on the configuration paths of issue 14 (R1: nothing ends the process or leaves a
// count raised): random requests on the admin API's resource routes (methods, paths, percent-
// encodings, preconditions, bodies, `${VAR}`s of variables allowed and not in every kind of field),
// and random values written straight into etcd under the gateway's prefix. Every answer is a clear 4xx (or 503 while etcd does not answer) in the API's
// error shape, never a 500; the gateway keeps serving, and nothing stays in flight.
// Reproducible: a fixed seed (SLUICE_FUZZ_SEED) and SLUICE_FUZZ_RUNS runs per property (default 200).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { hash } from 'node:crypto';
import fc from 'fast-check';
import { eventually, metricValue, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { request } from 'node:http';
import { postJson } from '../support/http.ts';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';

const skip = etcdCheck().skip;
const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 20261201);
const RUNS = Number(process.env.SLUICE_FUZZ_RUNS ?? 200);
const TOKEN = 'fuzz-admin-token-0123456789abcdef';
const LOAD_KEY = 'sk-fuzz-load-0123456789';
const PREFIX = '/fuzz/';

let etcd: EtcdServer;
let gw: GatewayProcess;

before(async () => {
  if (skip) return;
  etcd = await startEtcd();
  await etcd.put(`${PREFIX}providers/echo`, JSON.stringify({ type: 'echo' }));
  await etcd.put(`${PREFIX}models/base`, JSON.stringify({ provider: 'echo' }));
  await etcd.put(`${PREFIX}keys/load`, JSON.stringify({ key_sha256: hash('sha256', LOAD_KEY, 'base64') }));
  gw = await startGateway({
    config: { admin: { token: TOKEN }, etcd: { endpoints: [etcd.endpoint], prefix: PREFIX, allowed_env: ['SLUICE_FUZZ_ALLOWED', 'SLUICE_FUZZ_UNSET_ALLOWED'] }, log: { access_log: false } },
    env: { SLUICE_FUZZ_ALLOWED: 'fuzz-allowed-value', SLUICE_FUZZ_UNSET_ALLOWED: undefined },
  });
});
after(async () => {
  await gw?.stop();
  await etcd?.close();
});

const serves = async () =>
  (await postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: 'base', messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${LOAD_KEY}` })).status === 200;

async function settled(): Promise<void> {
  assert.ok(await serves(), 'the gateway still serves "base"');
  const metrics = await scrape(gw);
  // (The scrape itself is in flight on the admin listener.)
  assert.ok((metricValue(metrics, 'sluice_in_flight_requests', { endpoint: 'config' }) ?? 0) === 0, 'nothing left in flight on the resource routes');
  assert.equal(gw.child.exitCode, null, 'the process runs');
}

const segment = fc.oneof(
  fc.constantFrom('providers', 'models', 'keys', 'fz-d', 'rotate', '', '..', '.', '%2E%2E', '%', '%2F', '%ZZ', '%C3%28', '%00', '*', 'a%2Fb', '%F0%9F%98%80'),
  fc.string({ maxLength: 12 }).map(encodeURIComponent),
  fc.string({ minLength: 200, maxLength: 400 }).map(encodeURIComponent),
);

/** A request with its target sent as written (a URL parser would resolve "..", even encoded). */
function send(method: string, target: string, headers: Record<string, string>, payload: string | undefined): Promise<{ status: number; body: string }> {
  const { hostname, port } = new URL(gw.adminUrl);
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, method, path: target, headers, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(payload);
  });
}
/** Text with `${VAR}` references, escapes and near misses: of a variable allowed, allowed but unset, not allowed. */
const withVariables = fc.oneof(
  fc.constantFrom('${SLUICE_FUZZ_ALLOWED}', '${SLUICE_FUZZ_ALLOWED:-d}', '${SLUICE_FUZZ_UNSET_ALLOWED}', '${SLUICE_FUZZ_UNSET_ALLOWED:-}', '${HOME}', '$${HOME}', '${', '${1X}', '${A:-${B}}', 'pre-${SLUICE_FUZZ_ALLOWED}-post', '$$'),
  fc.tuple(fc.string({ maxLength: 6 }), fc.constantFrom('${', '}', '$$', ':-', 'SLUICE_FUZZ_ALLOWED', 'HOME', '${SLUICE_FUZZ_ALLOWED}'), fc.string({ maxLength: 6 })).map((parts) => parts.join('')),
);
const variableFields = fc.oneof(
  fc.record({ type: fc.constantFrom('openai', 'echo'), api_key: withVariables, headers: fc.dictionary(fc.string({ maxLength: 8 }), withVariables, { maxKeys: 2 }), base_url: withVariables, anthropic_version: withVariables }, { requiredKeys: ['type'] }),
  fc.record({ provider: fc.constantFrom('echo', '${SLUICE_FUZZ_ALLOWED}'), upstream_model: withVariables, retry: fc.record({ max_attempts: withVariables }) }, { requiredKeys: ['provider'] }),
  fc.record({ targets: fc.array(fc.record({ provider: fc.constant('echo'), model: withVariables, headers: fc.dictionary(fc.string({ maxLength: 8 }), withVariables, { maxKeys: 2 }) }), { minLength: 1, maxLength: 2 }) }),
  fc.record({ key: withVariables, key_sha256: withVariables, metadata: fc.dictionary(fc.string({ maxLength: 8 }), withVariables, { maxKeys: 2 }), limits: fc.record({ rpm: withVariables }) }, { requiredKeys: [] }),
);
const body = fc.oneof(
  variableFields.map((v) => JSON.stringify(v)),
  fc.constantFrom('{"provider":"echo"}', '{"type":"echo"}', '{"key":"sk-fuzz-valid-key-2"}', '{"name":"fz-b"}'),
  fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
  fc.record({ type: fc.constantFrom('openai', 'anthropic', 'echo', 'x'), base_url: fc.oneof(fc.webUrl(), fc.string()), api_key: fc.string(), provider: fc.constantFrom('echo', 'none', ''), key: fc.string(), key_sha256: fc.string(), name: fc.string() }, { requiredKeys: [] }).map((v) => JSON.stringify(v)),
  // Valid resources of each kind, so that writes go through (and then the next ones conflict, replace, delete).
  fc.constantFrom('{"type":"echo"}', '{"provider":"echo"}', '{"provider":"echo"}', '{"provider":"echo"}', '{"provider":"echo","upstream_model":"x"}', '{"key":"sk-fuzz-valid-key-1"}', '{"name":"fz-a"}'),
  fc.string({ maxLength: 64 }),
  fc.constant('{"a":'.repeat(200)),
);

/** Routed models: targets, strategies and retry settings, valid and not. */
const routedModel = fc
    .record(
      {
        targets: fc.oneof(
          fc.array(
            fc.record(
              {
                provider: fc.constantFrom('echo', 'none', ''),
                model: fc.oneof(fc.string(), fc.integer()),
                weight: fc.oneof(fc.integer({ min: -2, max: 2000 }), fc.string()),
                priority: fc.integer({ min: -1, max: 200 }),
                timeout_ms: fc.oneof(fc.nat(), fc.double()),
                headers: fc.dictionary(fc.string({ maxLength: 8 }), fc.oneof(fc.string(), fc.integer())),
              },
              { requiredKeys: ['provider'] },
            ),
            { maxLength: 4 },
          ),
          fc.jsonValue({ maxDepth: 2 }),
        ),
        provider: fc.constantFrom('echo', undefined),
        strategy: fc.constantFrom('round_robin', 'least_in_flight', 'lowest_latency', 'consistent_hash', 'random', 7),
        hash_on: fc.oneof(fc.constantFrom('header:x-session', 'body:user', 'body:metadata.user_id', 'cookie:x'), fc.string()),
        retry: fc.record(
          {
            max_attempts: fc.integer({ min: -1, max: 20 }),
            retry_on: fc.array(fc.oneof(fc.constantFrom('connect', 'reset', 'rate_limited', 'nope'), fc.integer({ min: 100, max: 700 })), { maxLength: 3 }),
            fallback_on: fc.oneof(fc.array(fc.constantFrom('server_error', 'context_length', 429)), fc.string()),
            first_token_timeout_ms: fc.oneof(fc.nat(), fc.constant(-5)),
          },
          { requiredKeys: [] },
        ),
      },
      { requiredKeys: ['targets'] },
    )
    .map((v) => JSON.stringify(v));

describe('fuzz: the configuration paths', { skip }, () => {
  test('random requests on the resource routes: a 4xx (or 2xx) in the API shape, never a 500; the gateway serves on', async () => {
    console.log(`config fuzz: seed ${SEED}, ${RUNS} runs per property`);
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(
        fc.oneof({ weight: 4, arbitrary: fc.constant('PUT') }, { weight: 2, arbitrary: fc.constantFrom('GET', 'DELETE', 'POST') }, { weight: 1, arbitrary: fc.constantFrom('PATCH', 'HEAD') }),
        fc.oneof(
          // Mostly well-formed routes with hostile names, so that runs reach validation and etcd.
          { weight: 6, arbitrary: fc.tuple(fc.constantFrom('providers', 'models', 'keys'), fc.oneof(fc.constantFrom('fz-a', 'fz-b', 'fz-c'), segment), fc.constantFrom([], [], [], ['rotate'], [''])).map(([k, n, rest]) => [k, n, ...rest]) },
          { weight: 1, arbitrary: fc.constantFrom(['keys'], ['providers'], ['models']) },
          { weight: 2, arbitrary: fc.array(segment, { minLength: 0, maxLength: 4 }) },
        ),
        fc.option(body, { nil: undefined, freq: 8 }),
        fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.oneof(fc.constant('*'), fc.nat({ max: 50 }).map((n) => `"${n}"`), fc.string({ maxLength: 10 })) }),
        fc.oneof({ weight: 6, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.oneof(fc.constant('*'), fc.string({ maxLength: 10 })) }),
        fc.oneof({ weight: 5, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }),
        async (method, segments, payload, ifMatch, ifNoneMatch, authorized) => {
          const headers: Record<string, string> = { 'content-type': 'application/json' };
          if (authorized) headers.authorization = `Bearer ${TOKEN}`;
          if (ifMatch !== undefined) headers['if-match'] = ifMatch.replace(/[^\x20-\x7e]/g, '');
          if (ifNoneMatch !== undefined) headers['if-none-match'] = ifNoneMatch.replace(/[^\x20-\x7e]/g, '');
          const res = await send(method, `/config/${segments.join('/')}`, headers, payload !== undefined && method !== 'GET' && method !== 'HEAD' ? payload : undefined);
          statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
          assert.ok(res.status < 500 || res.status === 503, `${method} /config/${segments.join('/')} answered ${res.status}: ${res.body.slice(0, 200)}`);
          if (!authorized) assert.equal(res.status, 401);
          if (res.status >= 400 && method !== 'HEAD') {
            const error = (JSON.parse(res.body) as { error: { message: string; code: string } }).error;
            assert.ok(error.message && error.code, res.body);
          }
        },
      ),
      { seed: SEED, numRuns: RUNS, verbose: 1 },
    );
    console.log(`config fuzz: answers ${JSON.stringify(Object.fromEntries(statuses))}`);
    // The runs reached past the token check into validation, and some writes went through. (The
    // resources "base", "echo" and "load" that the checks below use are never named.)
    for (const status of [200, 400, 401, 404]) assert.ok(statuses.has(status), `some answers were ${status}: ${JSON.stringify(Object.fromEntries(statuses))}`);
    assert.ok(statuses.has(201), `some writes reached etcd: ${JSON.stringify(Object.fromEntries(statuses))}`);
    assert.ok(!gw.logs.some((l) => l.event === 'handler_error'), 'no handler failed');
    await settled();
  });

  test('random routed models (targets, strategies, retries) written through the API: 2xx or a 400 naming the field, never a 500', async () => {
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('fz-r1', 'fz-r2', 'fz-r3'), fc.oneof(routedModel, fc.constant('{"targets":[{"provider":"echo","model":"a","weight":2},{"provider":"echo","priority":1}],"strategy":"least_in_flight"}')), async (name, payload) => {
        const res = await send('PUT', `/config/models/${name}`, { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` }, payload);
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        assert.ok(res.status === 200 || res.status === 201 || res.status === 400 || res.status === 409, `PUT /config/models/${name} answered ${res.status}: ${res.body.slice(0, 200)}`);
        if (res.status === 400) assert.ok((JSON.parse(res.body) as { error: { message: string } }).error.message, res.body);
      }),
      { seed: SEED, numRuns: Math.max(20, Math.floor(RUNS / 2)), verbose: 1 },
    );
    console.log(`config fuzz, routed models: answers ${JSON.stringify(Object.fromEntries(statuses))}`);
    assert.ok(statuses.has(400) && (statuses.has(200) || statuses.has(201)), `both valid and invalid models were written: ${JSON.stringify(Object.fromEntries(statuses))}`);
    assert.ok(!gw.logs.some((l) => l.event === 'handler_error'), 'no handler failed');
    await settled();
  });

  test('random key policies (models, expires_at, enabled, metadata, limits, budget) through POST /config/keys: 201 or a 400 naming the field, never a 500; the keys made then answer 200, 401, 403 or 429', async () => {
    const statuses = new Map<number, number>();
    const count = fc.oneof({ weight: 6, arbitrary: fc.integer({ min: 1, max: 5 }) }, fc.constantFrom(0, -2, 1e12, 0.5, '3', null), fc.jsonValue({ maxDepth: 1 }));
    const rate = fc.record({ rpm: count, tpm: count, concurrent: count }, { requiredKeys: [] });
    const limits = fc.oneof(
      { weight: 3, arbitrary: fc.record({ rpm: fc.integer({ min: 1, max: 3 }), tpm: fc.integer({ min: 1, max: 200 }), concurrent: fc.integer({ min: 1, max: 2 }) }, { requiredKeys: [] }) },
      fc.record({ rpm: count, tpm: count, concurrent: count, models: fc.oneof(fc.dictionary(fc.constantFrom('base', 'gpt-*', ''), rate, { maxKeys: 2 }), fc.jsonValue({ maxDepth: 2 })) }, { requiredKeys: [] }),
      fc.jsonValue({ maxDepth: 2 }),
    );
    const budget = fc.oneof({ weight: 3, arbitrary: fc.record({ usd: fc.double({ min: 0.000001, max: 10, noNaN: true }), period: fc.constantFrom('day', 'month') }) }, fc.record({ usd: fc.oneof(fc.double({ min: -1, max: 1e6, noNaN: true }), fc.constant(0)), period: fc.constantFrom('day', 'month', 'week', 7) }, { requiredKeys: [] }), fc.jsonValue({ maxDepth: 1 }));
    const made: string[] = [];
    const policy = fc.record(
      {
        models: fc.oneof(fc.array(fc.oneof(fc.constantFrom('base', 'gpt-*', '*', ''), fc.string({ maxLength: 20 })), { maxLength: 5 }), fc.jsonValue({ maxDepth: 2 })),
        expires_at: fc.oneof(fc.constantFrom('2099-01-01', '2099-01-01T00:00:00Z', '2027-02-30', 'next tuesday', '-5', '1.5', '2099-13-01', ''), fc.date({ noInvalidDate: true }).map((d) => d.toISOString()), fc.jsonValue({ maxDepth: 1 })),
        enabled: fc.oneof(fc.boolean(), fc.constantFrom('true', 'no', 0)),
        metadata: fc.oneof(fc.dictionary(fc.string({ maxLength: 8 }), fc.string({ maxLength: 8 }), { maxKeys: 3 }), fc.jsonValue({ maxDepth: 2 })),
        limits,
        budget,
      },
      { requiredKeys: [] },
    );
    let n = 0;
    await fc.assert(
      fc.asyncProperty(policy, async (fields) => {
        const res = await send('POST', '/config/keys', { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` }, JSON.stringify({ ...fields, name: `fz-key-${n++}` }));
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        assert.ok(res.status === 201 || res.status === 400, `POST /config/keys answered ${res.status}: ${res.body.slice(0, 200)}`);
        if (res.status === 400) assert.ok((JSON.parse(res.body) as { error: { message: string } }).error.message, res.body);
        else made.push((JSON.parse(res.body) as { key: string }).key);
      }),
      { seed: SEED, numRuns: Math.max(20, Math.floor(RUNS / 2)), verbose: 1 },
    );
    console.log(`config fuzz, key policies: answers ${JSON.stringify(Object.fromEntries(statuses))}`);
    assert.ok(statuses.has(400) && statuses.has(201), `both valid and invalid policies were written: ${JSON.stringify(Object.fromEntries(statuses))}`);
    await settled();
    // Every key made, with whatever limits and budget it got, is answered: 200, or a refusal of the client's (never a 5xx).
    const answers = new Map<number, number>();
    for (const key of made) {
      for (let i = 0; i < 2; i++) {
        const res = await postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: 'base', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${key}` });
        answers.set(res.status, (answers.get(res.status) ?? 0) + 1);
        assert.ok([200, 401, 403, 429].includes(res.status), `a fuzzed key's request answered ${res.status}: ${res.body.slice(0, 200)}`);
      }
    }
    console.log(`config fuzz, requests with the keys made: ${JSON.stringify(Object.fromEntries(answers))}`);
    assert.ok(!gw.logs.some((l) => l.event === 'handler_error'), 'no handler failed');
    await settled();
  });

  test('random values written straight into etcd: each invalid one rejected alone, the gateway serves on', async () => {
    const seenBefore = gw.logs.filter((l) => l.event === 'resource_rejected').length;
    let written = 0;
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('providers', 'models', 'keys', 'nonsense', ''), fc.string({ minLength: 1, maxLength: 16 }), body, async (kind, name, value) => {
        // Never the resources the check below relies on.
        if (['base', 'echo', 'load'].includes(name)) return;
        await etcd.put(`${PREFIX}${kind}/${name}`, value);
        written++;
      }),
      { seed: SEED, numRuns: Math.min(RUNS, 100), verbose: 1 },
    );
    const revision = await etcd.revision();
    await eventually(async () => metricValue(await scrape(gw), 'sluice_config_revision') === revision, 10_000, 'every write seen');
    assert.ok(gw.logs.filter((l) => l.event === 'resource_rejected').length > seenBefore, `${written} values written, some rejected`);
    assert.ok(!gw.logs.some((l) => l.event === 'handler_error'), 'no handler failed');
    await settled();
  });
});
