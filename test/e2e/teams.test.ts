// Teams through the built gateway: keys of one team share its rate limits, its concurrency, its
// budget and its per-user budgets (a user named by OpenAI's `user` or Anthropic's
// `metadata.user_id`); a request passes its key's limits and its team's in one step or counts in
// none; a reload's change of a team's limits applies to the next requests. With etcd, teams are
// resources: written and read through the admin API and `sluice apply`, a key naming a team that
// does not exist refused at write, a team in use kept.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { defaultListeners, eventually, metricValue, runSluice, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { assertAnthropicError, assertOpenAiError } from '../support/reliability.ts';
import { httpRequest, postJson, type RawResponse } from '../support/http.ts';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';

const TOKEN = 'teams-admin-token-0123456789';
const auth = { authorization: `Bearer ${TOKEN}` };

/** Client keys, by the name each has in the config. */
const KEY = {
  red1: 'sk-team-red-0000000001',
  red2: 'sk-team-red-0000000002',
  blue: 'sk-team-blue-000000001',
  own1: 'sk-team-own-0000000001',
  green: 'sk-team-green-00000001',
  spend1: 'sk-team-spend-0000001',
  spend2: 'sk-team-spend-0000002',
  thrifty: 'sk-team-thrifty-00001',
  users: 'sk-team-users-0000001',
  solo: 'sk-team-solo-00000001',
  busy1: 'sk-team-busy-00000001',
  busy2: 'sk-team-busy-00000002',
} as const;

/**
 * Each request the mock answers with this usage costs $0.1 at the price below ($1000 per million
 * tokens, input and output): 100 tokens. What one may cost before it runs (its hold: the body's
 * size / 4 and its max_tokens, at that price) is about $0.05, so a budget of $0.2 lets two through.
 */
const USAGE = mockHeader({ usage: { prompt: 10, completion: 90 } });
const PRICE = { input: 1000, output: 1000 };

let mock: MockUpstream;
let gw: GatewayProcess;

const config = () => ({
  workers: 1,
  admin: { tokens: [{ name: 'ops', token: TOKEN }] },
  providers: [
    { name: 'oa', type: 'openai', base_url: `${mock.url}/v1` },
    { name: 'an', type: 'anthropic', base_url: mock.url },
  ],
  models: [
    { name: 'mock-gpt', provider: 'oa' },
    { name: 'claude-mock', provider: 'an' },
  ],
  teams: [
    { name: 'red', limits: { rpm: 3 }, metadata: { cost_center: 'cc-1' } },
    { name: 'blue', limits: { rpm: 3 } },
    { name: 'green', limits: { rpm: 3 } },
    { name: 'spenders', budget: { usd: 0.2 } },
    { name: 'thrifty', budget: { usd: 0.2 } },
    { name: 'per-user', user_budget: { usd: 0.1, period: 'day' } },
    { name: 'busy', limits: { concurrent: 2 } },
  ],
  keys: [
    { name: 'red-1', key: KEY.red1, team: 'red' },
    { name: 'red-2', key: KEY.red2, team: 'red' },
    { name: 'blue-1', key: KEY.blue, team: 'blue' },
    { name: 'own-1', key: KEY.own1, team: 'green', limits: { rpm: 1 } },
    { name: 'green-1', key: KEY.green, team: 'green' },
    { name: 'spend-1', key: KEY.spend1, team: 'spenders' },
    { name: 'spend-2', key: KEY.spend2, team: 'spenders' },
    { name: 'thrifty-1', key: KEY.thrifty, team: 'thrifty' },
    { name: 'users-1', key: KEY.users, team: 'per-user' },
    { name: 'solo', key: KEY.solo, user_budget: { usd: 0.1, period: 'day' } },
    { name: 'busy-1', key: KEY.busy1, team: 'busy' },
    { name: 'busy-2', key: KEY.busy2, team: 'busy' },
  ],
  prices: { 'mock-gpt': PRICE, 'claude-mock': PRICE },
  reload: { watch: false },
});

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({ config: config() });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

/** A chat completion; the whole answer is read (so that its spend is settled before the next). */
async function chat(key: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}, url = gw.proxyUrl): Promise<{ status: number; text: string }> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'mock-gpt', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], ...extra }),
  });
  return { status: res.status, text: await res.text() };
}

/** An Anthropic message, naming `user` as Anthropic's `metadata.user_id`. */
async function message(key: string, user: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const res = await fetch(`${gw.proxyUrl}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'claude-mock', max_tokens: 10, metadata: { user_id: user }, messages: [{ role: 'user', content: 'hi' }] }),
  });
  return { status: res.status, text: await res.text() };
}

/** A per-user budget's refusal: the user (in quotes or not), whose budget it is, spent. */
const USER_SPENT = (user: string, of: string) => new RegExp(`^user "?${user}"? of ${of} has spent its budget of \\$0\\.1 for this day$`);

/** The statuses of `count` chat completions in a row. */
async function statuses(key: string, count: number): Promise<number[]> {
  const seen: number[] = [];
  for (let i = 0; i < count; i++) seen.push((await chat(key)).status);
  return seen;
}

describe('a team\'s rate limits', () => {
  test('two keys of a team with rpm 3: the 4th request across both is a 429 naming the team; a key of another team is not affected', async () => {
    assert.deepEqual([(await chat(KEY.red1)).status, (await chat(KEY.red2)).status, (await chat(KEY.red1)).status], [200, 200, 200]);
    mock.reset();
    const refused = await chat(KEY.red2);
    assert.equal(refused.status, 429);
    const error = assertOpenAiError(refused.text, 'team rpm');
    assert.equal(error.code, 'rate_limit_exceeded');
    assert.match(error.message, /^Rate limit reached for team "red": 3 requests per minute\./);
    assert.equal((await chat(KEY.red1)).status, 429, 'the other key of the team too');
    assert.equal(mock.received.length, 0, 'nothing refused reached the provider');
    assert.deepEqual(await statuses(KEY.blue, 3), [200, 200, 200], 'another team counts on its own');
    assert.equal(metricValue(await scrape(gw), 'sluice_rate_limited_total', { key: 'red-2', scope: 'team', limit: 'requests' }), 1);
  });

  test('all or none: a request its key\'s own rpm refuses takes nothing of the team\'s bucket', async () => {
    // own-1 (rpm 1) and green-1 share team green (rpm 3). own-1's first takes one of the team's 3.
    assert.equal((await chat(KEY.own1)).status, 200);
    for (let i = 0; i < 3; i++) {
      const refused = await chat(KEY.own1);
      assert.equal(refused.status, 429);
      assert.match(assertOpenAiError(refused.text, 'own rpm').message, /^Rate limit reached for API key "own-1": 1 requests per minute\./);
    }
    // Had the three refusals counted in the team's bucket, it would be empty now.
    assert.deepEqual(await statuses(KEY.green, 2), [200, 200], 'the team still has the 2 places its key\'s refusals did not take');
    const full = await chat(KEY.green);
    assert.equal(full.status, 429);
    assert.match(assertOpenAiError(full.text, 'team full').message, /team "green"/);
  });

  test('a team\'s concurrent limit counts the requests of all its keys', async () => {
    const slow = mockHeader({ sseIntervalMs: 150, chunks: 5 });
    const open = (key: string) =>
      fetch(`${gw.proxyUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...slow },
        body: JSON.stringify({ model: 'mock-gpt', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      });
    const first = await open(KEY.busy1);
    const second = await open(KEY.busy2);
    assert.deepEqual([first.status, second.status], [200, 200]);
    for (const key of [KEY.busy1, KEY.busy2]) {
      const refused = await chat(key);
      assert.equal(refused.status, 429);
      assert.match(assertOpenAiError(refused.text, 'team concurrent').message, /^Rate limit reached for team "busy": 2 concurrent requests\./);
    }
    await first.text();
    assert.equal((await chat(KEY.busy2)).status, 200, 'a place is free once a stream ends');
    await second.text();
  });
});

describe('a team\'s budget', () => {
  test('two keys spend the team\'s budget; then both are refused saying the team has spent it; another team is not', async () => {
    assert.equal((await chat(KEY.spend1, {}, USAGE)).status, 200);
    assert.equal((await chat(KEY.spend2, {}, USAGE)).status, 200);
    for (const key of [KEY.spend1, KEY.spend2]) {
      const refused = await chat(key);
      assert.equal(refused.status, 429);
      const error = assertOpenAiError(refused.text, 'team budget');
      assert.equal(error.code, 'budget_exceeded');
      assert.equal(error.message, 'team "spenders" has spent its budget of $0.2 for this month');
    }
    assert.equal((await chat(KEY.thrifty, {}, USAGE)).status, 200, 'another team\'s budget is its own');
    assert.equal(metricValue(await scrape(gw), 'sluice_rate_limited_total', { key: 'spend-2', scope: 'team', limit: 'budget' }), 1);
  });

  test('per-user budgets of a team: alice is refused once she has spent hers, bob of the same key still passes; Anthropic\'s metadata.user_id is the user too', async () => {
    assert.equal((await chat(KEY.users, { user: 'alice' }, USAGE)).status, 200);
    const alice = await chat(KEY.users, { user: 'alice' });
    assert.equal(alice.status, 429);
    const error = assertOpenAiError(alice.text, 'alice');
    assert.equal(error.code, 'budget_exceeded');
    assert.match(error.message, USER_SPENT('alice', 'team "per-user"'));
    assert.equal((await chat(KEY.users, { user: 'bob' }, USAGE)).status, 200, 'bob has a budget of his own');
    assert.equal((await chat(KEY.users)).status, 200, 'a request naming no user has no per-user budget');
    // The same user through Anthropic's API: alice has spent hers; carol spends hers there.
    const aliceAnthropic = await message(KEY.users, 'alice');
    assert.equal(aliceAnthropic.status, 429);
    assert.match(assertAnthropicError(aliceAnthropic.text, 'alice anthropic').message, USER_SPENT('alice', 'team "per-user"'));
    assert.equal((await message(KEY.users, 'carol', USAGE)).status, 200);
    const carol = await message(KEY.users, 'carol');
    assert.equal(carol.status, 429);
    assert.match(assertAnthropicError(carol.text, 'carol').message, USER_SPENT('carol', 'team "per-user"'));
    assert.equal((await chat(KEY.users, { user: 'carol' })).status, 429, 'carol, spent through one API, is refused through the other');
  });

  test('a key\'s own user_budget counts each user of that key', async () => {
    assert.equal((await chat(KEY.solo, { user: 'alice' }, USAGE)).status, 200);
    const alice = await chat(KEY.solo, { user: 'alice' });
    assert.equal(alice.status, 429);
    assert.match(assertOpenAiError(alice.text, 'solo alice').message, USER_SPENT('alice', 'API key "solo"'));
    assert.equal((await chat(KEY.solo, { user: 'bob' })).status, 200);
  });
});

describe('teams in file mode', () => {
  test('the admin API lists the file\'s teams and refuses to write them (the file is the source of truth)', async () => {
    const list = await httpRequest(`${gw.adminUrl}/config/teams`, { headers: auth });
    assert.equal(list.status, 200, list.body);
    const body = JSON.parse(list.body) as { kind: string; source: string; items: { name: string }[] };
    assert.equal(body.kind, 'teams');
    assert.equal(body.source, 'file');
    assert.deepEqual(body.items.map((t) => t.name), ['red', 'blue', 'green', 'spenders', 'thrifty', 'per-user', 'busy']);
    const red = JSON.parse((await httpRequest(`${gw.adminUrl}/config/teams/red`, { headers: auth })).body) as { item: Record<string, unknown> };
    assert.deepEqual(red.item, { name: 'red', limits: { rpm: 3 }, metadata: { cost_center: 'cc-1' } });
    const put = await httpRequest(`${gw.adminUrl}/config/teams/new`, { method: 'PUT', headers: { ...auth, 'content-type': 'application/json' }, body: '{}' });
    assert.equal(put.status, 409);
    assert.equal(JSON.parse(put.body).error.code, 'read_only_source');
  });
});

describe('a reload', () => {
  let reloaded: GatewayProcess;
  const reloadConfig = (limits: Record<string, number> | undefined) => ({
    workers: 1,
    listeners: defaultListeners(),
    providers: [{ name: 'oa', type: 'openai', base_url: `${mock.url}/v1` }],
    models: [{ name: 'mock-gpt', provider: 'oa' }],
    teams: [{ name: 'changing', ...(limits ? { limits } : {}) }],
    keys: [
      { name: 'changing-1', key: KEY.red1, team: 'changing' },
      { name: 'changing-2', key: KEY.red2, team: 'changing' },
    ],
    reload: { watch: false },
  });
  before(async () => {
    reloaded = await startGateway({ config: reloadConfig(undefined) });
  });
  after(async () => {
    await reloaded?.stop();
  });

  test('a team\'s limits changed by a reload apply to the next requests', async () => {
    const send = async (key: string) => (await chat(key, {}, {}, reloaded.proxyUrl)).status;
    for (let i = 0; i < 4; i++) assert.equal(await send(i % 2 === 0 ? KEY.red1 : KEY.red2), 200, 'no team limit yet');
    writeFileSync(reloaded.configFile, stringify(reloadConfig({ rpm: 2 })));
    reloaded.signal('SIGHUP');
    await reloaded.waitForLog((l) => l.event === 'config_reloaded');
    assert.deepEqual([await send(KEY.red1), await send(KEY.red2)], [200, 200]);
    const refused = await chat(KEY.red1, {}, {}, reloaded.proxyUrl);
    assert.equal(refused.status, 429);
    assert.match(assertOpenAiError(refused.text, 'after reload').message, /^Rate limit reached for team "changing": 2 requests per minute\./);
  });
});

// ---------------------------------------------------------------------------------------------
// Teams as resources, with a real etcd

const skip = etcdCheck().skip;
const LOAD_KEY = 'sk-teams-etcd-load-000001';

describe('teams in etcd, through the admin API and sluice apply', { skip }, () => {
  let etcd: EtcdServer;
  let egw: GatewayProcess;
  const prefix = `/sluice-teams-${process.pid}/`;
  before(async () => {
    etcd = await startEtcd();
    await etcd.put(`${prefix}providers/echo`, JSON.stringify({ type: 'echo' }));
    await etcd.put(`${prefix}models/base`, JSON.stringify({ provider: 'echo' }));
    await etcd.put(`${prefix}keys/load`, JSON.stringify({ key: LOAD_KEY }));
    egw = await startGateway({
      config: {
        admin: { tokens: [{ name: 'ops', token: TOKEN }] },
        etcd: { endpoints: [etcd.endpoint], prefix, request_timeout_ms: 1000, dial_timeout_ms: 1000 },
        shutdown: { min_drain_secs: 0 },
      },
    });
  });
  after(async () => {
    await egw?.stop();
    await etcd?.close();
  });

  const admin = (method: string, path: string, body?: unknown): Promise<RawResponse> =>
    httpRequest(`${egw.adminUrl}${path}`, { method, headers: { ...auth, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  const json = (res: RawResponse) => JSON.parse(res.body) as Record<string, any>;
  const send = (key: string) => postJson(`${egw.proxyUrl}/v1/chat/completions`, { model: 'base', messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${key}` });

  test('PUT, GET and DELETE /config/teams/<name>; a key naming an unknown team is 400 naming it; a team in use is 409 resource_in_use', async () => {
    const created = await admin('PUT', '/config/teams/search', { limits: { rpm: 2 }, budget: { usd: 50 }, metadata: { owner: 'search' } });
    assert.equal(created.status, 201, created.body);
    assert.equal(json(created).applied, true);
    assert.deepEqual(JSON.parse((await etcd.get(`${prefix}teams/search`))!), { limits: { rpm: 2 }, budget: { usd: 50 }, metadata: { owner: 'search' }, name: 'search' });
    const got = await admin('GET', '/config/teams/search');
    assert.equal(got.status, 200);
    assert.deepEqual(json(got).item, { name: 'search', limits: { rpm: 2 }, budget: { usd: 50 }, metadata: { owner: 'search' } });
    assert.equal(got.headers.etag, `"${json(got).revision}"`);

    const orphan = await admin('PUT', '/config/keys/orphan', { key: 'sk-teams-orphan-0000001', team: 'ghost' });
    assert.equal(orphan.status, 400, orphan.body);
    assert.equal(json(orphan).error.code, 'invalid_resource');
    assert.equal(json(orphan).error.message, 'keys/orphan: team: no team "ghost" (known: "search")');
    const orphanCreated = await admin('POST', '/config/keys', { name: 'orphan', team: 'ghost' });
    assert.equal(orphanCreated.status, 400);
    assert.match(json(orphanCreated).error.message, /team "ghost"/);
    assert.equal(await etcd.get(`${prefix}keys/orphan`), undefined, 'nothing reached etcd');
    const badTeam = await admin('PUT', '/config/teams/bad', { limits: { rpm: 0 } });
    assert.equal(badTeam.status, 400);
    assert.match(json(badTeam).error.message, /^teams\/bad: limits\.rpm: /);

    const member = await admin('PUT', '/config/keys/searcher', { key: 'sk-teams-searcher-00001', team: 'search' });
    assert.equal(member.status, 201, member.body);
    // The team's rpm of 2, from etcd, counts the key.
    assert.deepEqual([(await send('sk-teams-searcher-00001')).status, (await send('sk-teams-searcher-00001')).status], [200, 200]);
    const refused = await send('sk-teams-searcher-00001');
    assert.equal(refused.status, 429);
    assert.match(json(refused).error.message, /^Rate limit reached for team "search": 2 requests per minute\./);

    const inUse = await admin('DELETE', '/config/teams/search');
    assert.equal(inUse.status, 409, inUse.body);
    assert.equal(json(inUse).error.code, 'resource_in_use');
    assert.match(json(inUse).error.message, /^team "search" is used by keys "searcher"/);
    assert.ok(await etcd.get(`${prefix}teams/search`), 'the team is still there');

    const spare = await admin('PUT', '/config/teams/spare', {});
    assert.equal(spare.status, 201);
    const listed = await admin('GET', '/config/teams');
    assert.deepEqual(json(listed).items.map((t: { name: string }) => t.name), ['search', 'spare']);
    assert.equal(json(listed).source, 'etcd');
    assert.equal((await admin('DELETE', '/config/teams/spare')).status, 200);
    assert.equal((await admin('GET', '/config/teams/spare')).status, 404);
    await egw.waitForLog((l) => l.event === 'config_write' && l.resource === 'teams/spare' && l.action === 'delete');
  });

  test('a key whose team is deleted in etcd directly is left out (logged with the team), not served without its team\'s limits', async () => {
    assert.equal((await admin('PUT', '/config/teams/fragile', {})).status, 201);
    assert.equal((await admin('PUT', '/config/keys/fragile-key', { key: 'sk-teams-fragile-000001', team: 'fragile' })).status, 201);
    assert.equal((await send('sk-teams-fragile-000001')).status, 200);
    await etcd.del(`${prefix}teams/fragile`);
    await eventually(async () => (await send('sk-teams-fragile-000001')).status === 401, 2000, 'the key without its team refused');
    const line = await egw.waitForLog((l) => l.event === 'resource_rejected' && l.resource === 'keys/fragile-key');
    assert.match(String(line.reason), /team: no team "fragile"/);
    assert.equal((await send(LOAD_KEY)).status, 200, 'every other key serves');
  });

  test('sluice apply -f writes a team and a key of it (the key listed first in the file); apply again: unchanged; sluice get teams', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'sluice-teams-')), 'resources.yaml');
    writeFileSync(file, stringify({ keys: [{ name: 'applied-member', key: 'sk-teams-applied-00001', team: 'applied' }], teams: [{ name: 'applied', limits: { rpm: 1 }, user_budget: { usd: 5, period: 'day' } }] }));
    const common = ['--admin', egw.adminUrl, '--token', TOKEN];
    const sluice = (args: string[]) => runSluice(args, { env: { SLUICE_CONFIG: undefined, SLUICE_ADMIN_TOKEN: undefined } });
    const first = await sluice(['apply', '-f', file, ...common]);
    assert.equal(first.code, 0, first.stderr);
    assert.deepEqual(first.stdout.trimEnd().split('\n'), ['teams/applied created', 'keys/applied-member created']);
    assert.equal((await send('sk-teams-applied-00001')).status, 200);
    const limited = await send('sk-teams-applied-00001');
    assert.equal(limited.status, 429);
    assert.match(json(limited).error.message, /team "applied"/);
    const again = await sluice(['apply', '-f', file, ...common]);
    assert.equal(again.code, 0, again.stderr);
    assert.deepEqual(again.stdout.trimEnd().split('\n'), ['teams/applied unchanged', 'keys/applied-member unchanged']);
    const table = await sluice(['get', 'teams', 'applied', ...common]);
    assert.equal(table.code, 0, table.stderr);
    assert.match(table.stdout, /^NAME\s+LIMITS\s+BUDGET\s+USER_BUDGET\s+REVISION\napplied\s+rpm=1\s+-\s+\$5\/day\s+\d+\n$/);
    const keys = await sluice(['get', 'keys', 'applied-member', ...common]);
    assert.match(keys.stdout, /^NAME\s+TEAM\s+MODELS[^\n]*\napplied-member\s+applied\s+all\s/);
  });
});
