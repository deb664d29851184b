// `sluice usage` against the built program with a SQLite ledger: after requests of two keys (one of
// a team) through the mock upstream, `-o json`, `-o csv` and the table each give what GET /usage
// answers for the same range and groups, totals included; a read-only admin token may ask; a
// gateway without a ledger is one line with its code and exit code 1.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventually, runSluice, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';

const TOKEN = 'usage-cli-token-0123456789abcdef';
const READ_TOKEN = 'usage-cli-reader-0123456789abcdef';
const ALICE = 'sk-alice-0123456789abcdef';
const BOB = 'sk-bob-0123456789abcdef';
/** A range holding every request of the test, the same for the command and the API. */
const FROM = '2020-01-01';
const TO = '2100-01-01T00:00:00Z';

let mock: MockUpstream;
let dir: string;

before(async () => {
  mock = await startMockUpstream();
  dir = mkdtempSync(join(tmpdir(), 'sluice-usage-cli-'));
});
after(async () => {
  await mock?.close();
  rmSync(dir, { recursive: true, force: true });
});

function config(ledger: boolean) {
  return {
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' }],
    models: [{ name: 'gpt-4o-mini', provider: 'up' }, { name: 'gpt-4o', provider: 'up' }],
    prices: { 'gpt-4o-mini': { input: 1000, output: 1000 }, 'gpt-4o': { input: 0.15, output: 0.6 } },
    teams: [{ name: 'research' }],
    keys: [
      { name: 'alice', key: ALICE, team: 'research' },
      { name: 'bob', key: BOB },
    ],
    admin: { tokens: [{ name: 'ops', token: TOKEN }, { name: 'viewer', token: READ_TOKEN, scope: 'read' }] },
    ...(ledger ? { ledger: { store: 'sqlite', sqlite_path: join(dir, 'ledger.sqlite'), spool_dir: join(dir, 'spool') } } : {}),
  };
}

async function chat(gw: GatewayProcess, key: string, model: string, user?: string): Promise<void> {
  const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], ...(user ? { user } : {}) }),
  });
  const text = await res.text();
  assert.equal(res.status, 200, text);
}

interface Totals {
  requests: number;
  errors: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  cost_usd: number;
}
interface Usage {
  from: string;
  to: string;
  group_by: string[];
  bucket: string | null;
  rows: (Totals & Record<string, unknown>)[];
  totals: Totals;
}

/** GET /usage with these parameters. */
async function usage(gw: GatewayProcess, query: Record<string, string>): Promise<Usage> {
  const res = await fetch(`${gw.adminUrl}/usage?${new URLSearchParams({ from: FROM, to: TO, ...query })}`, { headers: { authorization: `Bearer ${TOKEN}` } });
  assert.equal(res.status, 200);
  return (await res.json()) as Usage;
}

/** `sluice usage` at this gateway, with no config file and no token in the environment. */
function sluiceUsage(gw: GatewayProcess, args: string[], token = TOKEN) {
  return runSluice(['usage', '--url', gw.adminUrl, '--token', token, '--from', FROM, '--to', TO, ...args], { env: { SLUICE_CONFIG: undefined, SLUICE_ADMIN_TOKEN: undefined } });
}

/** RFC 4180 records of a CSV text with no quoted line break (a name's controls are "?"). */
function csvRecords(text: string): string[][] {
  assert.ok(text.endsWith('\r\n'));
  return text
    .slice(0, -2)
    .split('\r\n')
    .map((line) => [...line.matchAll(/(?:^|,)("(?:[^"]|"")*"|[^,]*)/g)].map((m) => (m[1]!.startsWith('"') ? m[1]!.slice(1, -1).replaceAll('""', '"') : m[1]!)));
}

const money = (usd: number) => Math.round(usd * 1e6);

describe('sluice usage against a gateway with a ledger', () => {
  let gw: GatewayProcess;
  before(async () => {
    gw = await startGateway({ config: config(true) });
    for (let i = 0; i < 3; i++) await chat(gw, ALICE, 'gpt-4o-mini');
    await chat(gw, ALICE, 'gpt-4o', '=cmd|" /C calc"!A0');
    for (let i = 0; i < 2; i++) await chat(gw, BOB, 'gpt-4o-mini');
    await chat(gw, BOB, 'gpt-4o', 'two, "quoted"');
    await eventually(
      async () => {
        const res = await fetch(`${gw.adminUrl}/requests?limit=500`, { headers: { authorization: `Bearer ${TOKEN}` } });
        return ((await res.json()) as { items: unknown[] }).items.length === 7;
      },
      15_000,
      'the ledger listing the 7 requests',
    );
  });
  after(async () => gw?.stop());

  test('-o json: the API answer itself', async () => {
    for (const by of ['key', 'team,model', 'user']) {
      const run = await sluiceUsage(gw, ['--by', by, '-o', 'json']);
      assert.equal(run.code, 0, run.stderr);
      assert.equal(run.stderr, '');
      const api = await usage(gw, { group_by: by });
      assert.deepEqual(JSON.parse(run.stdout), api);
      assert.equal(api.totals.requests, 7);
    }
    const daily = await sluiceUsage(gw, ['--by', 'key', '--bucket', 'day', '-o', 'json']);
    assert.deepEqual(JSON.parse(daily.stdout), await usage(gw, { group_by: 'key', bucket: 'day' }));
  });

  test('-o csv: a record per row of the API, adding up to its totals', async () => {
    const run = await sluiceUsage(gw, ['--by', 'key,user', '-o', 'csv']);
    assert.equal(run.code, 0, run.stderr);
    const api = await usage(gw, { group_by: 'key,user' });
    const [header, ...records] = csvRecords(run.stdout);
    assert.deepEqual(header, ['key', 'user', 'requests', 'errors', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cost_usd']);
    // The user names as sent, a formula defused.
    assert.deepEqual(
      records.map((r) => r.slice(0, 2)),
      api.rows.map((r) => [r.key, String(r.user).replace(/^=/, "'=")]),
    );
    assert.ok(records.some((r) => r[1] === 'two, "quoted"'));
    assert.ok(records.some((r) => r[1] === '\'=cmd|" /C calc"!A0'));
    const sum = (index: number) => records.reduce((total, r) => total + Number(r[index]), 0);
    const { cost_usd, ...counts } = api.totals;
    assert.deepEqual({ requests: sum(2), errors: sum(3), prompt_tokens: sum(4), completion_tokens: sum(5), cached_tokens: sum(6), cost_micros: money(sum(7)) }, { ...counts, cost_micros: money(cost_usd) });
  });

  test('the table: a row per key and the TOTAL line of the API', async () => {
    const run = await sluiceUsage(gw, ['--by', 'team,key']);
    assert.equal(run.code, 0, run.stderr);
    const api = await usage(gw, { group_by: 'team,key' });
    const lines = run.stdout.trimEnd().split('\n');
    assert.match(lines[0]!, /^usage from 2020-01-01T00:00:00\.000Z to 2100-01-01T00:00:00\.000Z by team,key$/);
    assert.deepEqual(lines[2]!.split(/\s+/), ['TEAM', 'KEY', 'REQUESTS', 'ERRORS', 'TOKENS_IN', 'TOKENS_OUT', 'COST']);
    const dollars = (usd: number) => {
      const [whole, decimals] = usd.toFixed(6).split('.');
      return `$${whole}.${decimals!.replace(/0+$/, '').padEnd(2, '0')}`;
    };
    const line = (cells: unknown[]) => cells.map(String);
    assert.deepEqual(
      lines.slice(3).map((l) => l.split(/\s+/)),
      [
        ...api.rows.map((r) => line([r.team === '' ? '-' : r.team, r.key, r.requests, r.errors, r.prompt_tokens, r.completion_tokens, dollars(r.cost_usd)])),
        line(['TOTAL', api.totals.requests, api.totals.errors, api.totals.prompt_tokens, api.totals.completion_tokens, dollars(api.totals.cost_usd)]),
      ],
    );
    assert.deepEqual(api.rows.map((r) => [r.team, r.key, r.requests]), [['research', 'alice', 4], ['', 'bob', 3]]);
  });

  test('a read-only admin token may ask; a wrong one is refused in one line', async () => {
    const read = await sluiceUsage(gw, ['-o', 'json'], READ_TOKEN);
    assert.equal(read.code, 0, read.stderr);
    assert.deepEqual((JSON.parse(read.stdout) as Usage).totals, (await usage(gw, {})).totals);
    const wrong = await sluiceUsage(gw, [], 'not-the-token-0123456789');
    assert.equal(wrong.code, 1);
    assert.equal(wrong.stdout, '');
    assert.match(wrong.stderr, /^sluice usage: GET \/usage: 401 invalid_admin_token: .*\n$/);
  });
});

test('sluice usage against a gateway without a ledger: one line with the code, exit 1', async () => {
  const gw = await startGateway({ config: config(false) });
  try {
    const run = await sluiceUsage(gw, []);
    assert.equal(run.code, 1);
    assert.equal(run.stdout, '');
    assert.match(run.stderr, /^sluice usage: GET \/usage: 404 ledger_not_enabled: the usage ledger is not enabled[^\n]*\n$/);
  } finally {
    await gw.stop();
  }
});
