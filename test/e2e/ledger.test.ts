// The usage ledger (`ledger`) against the built program with a real SQLite file: the record of each
// request that reached its admission, field by field, against what its client was answered (a JSON
// answer and a stream, two keys, one of a team, a `user`, tags, a fallback with both attempts, a
// 429 of a key's rpm; a 401 is not recorded); the admin routes over the same data (/usage by key,
// team and day, /requests filtered and paged, /requests/{id}, the admin tokens); and a config
// without `ledger` writing nothing at all. The store is read directly (node:sqlite, read-only),
// never only through the gateway's own API. The timing-heavy guarantees (a SIGTERM, a SIGKILL, an
// outage of PostgreSQL, workers, a full spool) are test/serial/ledger-guarantees.test.ts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { eventually, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';

const TOKEN = 'ledger-e2e-admin-0123456789abcdef';
const READER = 'ledger-e2e-reader-0123456789abcdef';
const KEYS = {
  alice: 'sk-ledger-alice-0123456789',
  bob: 'sk-ledger-bob-00123456789',
  limited: 'sk-ledger-limited-0123456',
  pager: 'sk-ledger-pager-012345678',
} as const;
type KeyName = keyof typeof KEYS;
const TEAM_OF: Record<KeyName, string> = { alice: 'research', bob: '', limited: '', pager: '' };

/** Per million tokens, so tokens × price is micro-dollars. */
const PRICES: Record<string, { input: number; output: number }> = {
  'mock-gpt': { input: 3, output: 5 },
  'second-target': { input: 7, output: 11 },
};

/** What a client was answered, as it saw it. */
interface Answer {
  /** The `x-request-id` the gateway answered with. */
  id: string;
  key: KeyName | 'bad';
  status: number;
  /** The usage in the answer (0 when none). */
  prompt: number;
  completion: number;
  /** The error code of an error answer ('' none). */
  code: string;
  /** The served model the micro-dollars are priced by. */
  priced: string;
  tags: string[];
  user: string;
  bodyBytes: number;
  /** Epoch ms around the exchange, as the client saw it. */
  sentAt: number;
  doneAt: number;
}

interface SendOptions {
  key: KeyName | 'bad';
  model?: string;
  stream?: boolean;
  user?: string;
  tags?: string[];
  usage?: { prompt: number; completion: number };
}

/** The usage of an answer: a JSON body's, or a stream's last `usage` chunk. */
function usageOf(text: string, stream: boolean): { prompt: number; completion: number } {
  const pick = (u: unknown) => {
    const usage = u as { prompt_tokens?: number; completion_tokens?: number } | null | undefined;
    return usage ? { prompt: usage.prompt_tokens ?? 0, completion: usage.completion_tokens ?? 0 } : undefined;
  };
  if (!stream) {
    try {
      return pick((JSON.parse(text) as { usage?: unknown }).usage) ?? { prompt: 0, completion: 0 };
    } catch {
      return { prompt: 0, completion: 0 };
    }
  }
  let found = { prompt: 0, completion: 0 };
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const usage = pick((JSON.parse(line.slice(6)) as { usage?: unknown }).usage);
    if (usage) found = usage;
  }
  return found;
}

/** One chat completion; resolves with what the client was answered. */
async function send(gw: GatewayProcess, options: SendOptions): Promise<Answer> {
  const model = options.model ?? 'mock-gpt';
  const body = JSON.stringify({
    model,
    messages: [{ role: 'user', content: 'hello ledger' }],
    ...(options.stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    ...(options.user ? { user: options.user } : {}),
  });
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    authorization: `Bearer ${options.key === 'bad' ? 'sk-ledger-wrong-000000000' : KEYS[options.key]}`,
    ...(options.tags ? { 'x-sluice-tags': options.tags.join(',') } : {}),
    ...(options.usage ? mockHeader({ usage: options.usage }) : {}),
  };
  const sentAt = Date.now();
  const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, { method: 'POST', headers, body });
  const text = await res.text();
  const doneAt = Date.now();
  const id = res.headers.get('x-request-id');
  assert.ok(id, `an x-request-id on every answer (status ${res.status})`);
  const ok = res.status === 200;
  const code = ok ? '' : String((JSON.parse(text) as { error?: { code?: string } }).error?.code ?? '');
  return {
    id,
    key: options.key,
    status: res.status,
    ...(ok ? usageOf(text, options.stream === true) : { prompt: 0, completion: 0 }),
    code,
    priced: model === 'fallback' ? 'second-target' : model,
    tags: options.tags ?? [],
    user: options.user ?? '',
    bodyBytes: Buffer.byteLength(body),
    sentAt,
    doneAt,
  };
}

/** Micro-dollars of an answer at the configured prices (0 when it reported no usage). */
const microsOf = (a: Answer) => a.prompt * PRICES[a.priced]!.input + a.completion * PRICES[a.priced]!.output;

/** A stored row, its JSON columns parsed. */
type Row = Record<string, unknown> & { id: string; tags: string[]; attempts: { target: string; outcome: string; status?: number; ms: number }[]; metadata: Record<string, string> | null };

/** Rows of the SQLite store, read with a connection of the test's own (read-only). */
function query(file: string, sql: string, ...params: (string | number)[]): Record<string, unknown>[] {
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    return db.prepare(sql).all(...params) as Record<string, unknown>[];
  } finally {
    db.close();
  }
}

function rowsOf(file: string, ids: readonly string[]): Map<string, Row> {
  const out = new Map<string, Row>();
  if (!existsSync(file)) return out;
  for (const row of query(file, `SELECT * FROM ledger_requests WHERE id IN (${ids.map(() => '?').join(',')})`, ...ids)) {
    out.set(String(row.id), {
      ...row,
      tags: JSON.parse(String(row.tags)) as string[],
      attempts: JSON.parse(String(row.attempts)) as Row['attempts'],
      metadata: row.metadata === null ? null : (JSON.parse(String(row.metadata)) as Record<string, string>),
    } as Row);
  }
  return out;
}

/** Waits until every one of `ids` is in the store (shipped); resolves with their rows. */
async function stored(file: string, ids: readonly string[], timeoutMs = 15_000): Promise<Map<string, Row>> {
  let rows = new Map<string, Row>();
  await eventually(
    () => {
      rows = rowsOf(file, ids);
      return rows.size === ids.length;
    },
    timeoutMs,
    `${ids.length} records in the store`,
  ).catch((error: unknown) => {
    throw new Error(`${(error as Error).message}; missing: ${ids.filter((id) => !rows.has(id)).join(', ')}`);
  });
  return rows;
}

/** GET on the admin listener, with the admin token unless another (or none: null) is given. */
async function admin(gw: GatewayProcess, path: string, token: string | null = TOKEN): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${gw.adminUrl}${path}`, token === null ? {} : { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

let mock: MockUpstream;
before(async () => {
  mock = await startMockUpstream({ record: false });
});
after(async () => {
  await mock?.close();
});

function config(ledger: Record<string, unknown> | undefined) {
  return {
    workers: 1,
    shutdown: { min_drain_secs: 0 },
    providers: [{ name: 'oa', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' }],
    models: [
      { name: 'mock-gpt', provider: 'oa' },
      {
        name: 'fallback',
        targets: [
          { provider: 'oa', model: 'first-target', headers: mockHeader({ status: 503 }) },
          { provider: 'oa', model: 'second-target' },
        ],
      },
    ],
    prices: PRICES,
    teams: [{ name: 'research' }],
    keys: [
      { name: 'alice', key: KEYS.alice, team: 'research', metadata: { cost_center: 'cc-7' } },
      { name: 'bob', key: KEYS.bob },
      { name: 'limited', key: KEYS.limited, limits: { rpm: 1 } },
      { name: 'pager', key: KEYS.pager },
    ],
    admin: { tokens: [{ name: 'ops', token: TOKEN }, { name: 'viewer', token: READER, scope: 'read' }] },
    ...(ledger ? { ledger } : {}),
  };
}

describe('the ledger with SQLite', () => {
  let dir: string;
  let file: string;
  let gw: GatewayProcess;
  const answers: Answer[] = [];
  let startedAt: number;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-ledger-e2e-'));
    file = join(dir, 'ledger.sqlite');
    startedAt = Date.now();
    gw = await startGateway({ config: config({ store: 'sqlite', sqlite_path: file, spool_dir: join(dir, 'spool') }) });
  });
  after(async () => {
    await gw?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('each request that reached admission has its record, field by field as its client was answered; a 401 has none', async () => {
    const json = await send(gw, { key: 'alice', user: 'user-7', tags: ['a', 'b'], usage: { prompt: 13, completion: 21 } });
    const stream = await send(gw, { key: 'bob', stream: true, tags: ['a', 'b'], usage: { prompt: 17, completion: 5 } });
    const fallback = await send(gw, { key: 'alice', model: 'fallback', usage: { prompt: 4, completion: 9 } });
    const allowed = await send(gw, { key: 'limited' });
    const limited = await send(gw, { key: 'limited' });
    const unauthorized = await send(gw, { key: 'bad' });
    answers.push(json, stream, fallback, allowed, limited);
    assert.deepEqual([json, stream, fallback, allowed, limited, unauthorized].map((a) => a.status), [200, 200, 200, 200, 429, 401]);
    assert.deepEqual([json.prompt, json.completion, stream.prompt, stream.completion, fallback.prompt, fallback.completion], [13, 21, 17, 5, 4, 9], 'the clients got the scripted usage');
    assert.equal(limited.code, 'rate_limit_exceeded');
    assert.equal(new Set(answers.map((a) => a.id).concat(unauthorized.id)).size, 6, 'an id of its own for each');

    const rows = await stored(file, answers.map((a) => a.id));
    for (const a of answers) {
      const r = rows.get(a.id)!;
      const what = `${a.id} (${a.key}, status ${a.status})`;
      assert.equal(r.kind, 'request', what);
      assert.equal(r.status, a.status, what);
      assert.equal(r.error, a.code, what);
      assert.equal(r.key, a.key, what);
      assert.equal(r.team, TEAM_OF[a.key as KeyName], what);
      assert.equal(r.user, a.user, what);
      assert.deepEqual(r.tags, a.tags, what);
      assert.equal(r.api, 'openai', what);
      assert.equal(r.endpoint, 'chat_completions', what);
      assert.equal(r.listener, 'proxy', what);
      assert.equal(r.worker, 0, what);
      assert.equal(r.generation, 0, what);
      assert.equal(r.prompt_tokens, a.prompt, what);
      assert.equal(r.completion_tokens, a.completion, what);
      assert.equal(r.bytes_in, a.bodyBytes, what);
      assert.ok(Number(r.bytes_out) > 0, what);
      const started = Number(r.started_at);
      const ended = Number(r.ended_at);
      assert.ok(started >= a.sentAt - 2 && started <= ended, `${what}: started ${started}, sent ${a.sentAt}, ended ${ended}`);
      assert.ok(ended <= a.doneAt + 1000, `${what}: ended ${ended}, the client done at ${a.doneAt}`);
      assert.ok(r.first_byte_ms !== null && Number(r.first_byte_ms) >= 0 && Number(r.first_byte_ms) <= ended - started + 1, `${what}: first byte ${String(r.first_byte_ms)} ms of ${ended - started}`);
      if (a.status === 200) {
        assert.equal(r.cost_micros, microsOf(a), what);
        assert.equal(r.usage_estimated, 0, what);
        assert.equal(r.provider, 'oa', what);
        assert.equal(r.served_model, a.priced, what);
      }
    }
    assert.deepEqual(rows.get(json.id)!.metadata, { cost_center: 'cc-7' }, "the key's metadata");
    assert.equal(rows.get(stream.id)!.metadata, null);
    assert.equal(rows.get(json.id)!.model, 'mock-gpt');
    assert.equal(rows.get(fallback.id)!.route, 'fallback');
    assert.deepEqual(
      rows.get(json.id)!.attempts.map((t) => [t.target, t.outcome, t.status]),
      [['oa/mock-gpt', 'success', 200]],
    );
    // The fallback: both attempts, the failed one first.
    assert.deepEqual(
      rows.get(fallback.id)!.attempts.map((t) => [t.target, t.outcome, t.status]),
      [
        ['oa/first-target', 'server_error', 503],
        ['oa/second-target', 'success', 200],
      ],
    );
    assert.ok(rows.get(fallback.id)!.attempts.every((t) => t.ms >= 0));
    // The refusal: nothing was sent upstream, nothing counted or priced.
    const refused = rows.get(limited.id)!;
    assert.deepEqual(refused.attempts, []);
    assert.equal(refused.cost_micros, null);
    // The 401 never reached admission: no record.
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(rowsOf(file, [unauthorized.id]).size, 0, 'a 401 is not recorded');
    assert.equal(query(file, 'SELECT COUNT(*) AS n FROM ledger_requests')[0]!.n, answers.length, 'nothing else recorded');
    // The record's `provider` is the provider that served, '' when none did (a refusal at admission).
    assert.deepEqual([refused.provider, refused.served_model], ['', ''], 'a refused request names no provider');
  });

  test('GET /usage by key, by team and by day: totals as the clients were answered', async () => {
    assert.ok(answers.length > 0, 'runs after the records test');
    const range = `from=${startedAt - 60_000}&to=${Date.now() + 60_000}`;
    const expected = (group: (a: Answer) => string) => {
      const sums = new Map<string, { requests: number; errors: number; prompt_tokens: number; completion_tokens: number; micros: number }>();
      for (const a of answers) {
        const s = sums.get(group(a)) ?? { requests: 0, errors: 0, prompt_tokens: 0, completion_tokens: 0, micros: 0 };
        s.requests++;
        if (a.status >= 400) s.errors++;
        s.prompt_tokens += a.prompt;
        s.completion_tokens += a.completion;
        if (a.status === 200) s.micros += microsOf(a);
        sums.set(group(a), s);
      }
      return sums;
    };
    const check = (rows: Record<string, unknown>[], field: 'key' | 'team', sums: ReturnType<typeof expected>) => {
      assert.deepEqual(rows.map((r) => r[field]).sort(), [...sums.keys()].sort());
      for (const row of rows) {
        const s = sums.get(String(row[field]))!;
        assert.deepEqual(
          [row.requests, row.errors, row.prompt_tokens, row.completion_tokens, row.cached_tokens],
          [s.requests, s.errors, s.prompt_tokens, s.completion_tokens, 0],
          `${field} ${String(row[field])}`,
        );
        assert.ok(Math.abs(Number(row.cost_usd) - s.micros / 1e6) < 1e-9, `${field} ${String(row[field])}: ${String(row.cost_usd)} vs ${s.micros / 1e6}`);
      }
    };
    const byKey = await admin(gw, `/usage?group_by=key&${range}`);
    assert.equal(byKey.status, 200, JSON.stringify(byKey.body));
    check(byKey.body.rows as Record<string, unknown>[], 'key', expected((a) => a.key));
    const byTeam = await admin(gw, `/usage?group_by=team&${range}`);
    check(byTeam.body.rows as Record<string, unknown>[], 'team', expected((a) => TEAM_OF[a.key as KeyName]));
    const totals = byTeam.body.totals as Record<string, number>;
    assert.equal(totals.requests, answers.length);
    assert.equal(totals.prompt_tokens, answers.reduce((n, a) => n + a.prompt, 0));
    assert.equal(totals.completion_tokens, answers.reduce((n, a) => n + a.completion, 0));
    assert.ok(Math.abs(totals.cost_usd! - answers.reduce((n, a) => n + (a.status === 200 ? microsOf(a) : 0), 0) / 1e6) < 1e-9);

    const byDay = await admin(gw, `/usage?bucket=day&${range}`);
    const days = byDay.body.rows as { bucket: string; requests: number; prompt_tokens: number }[];
    const utcDay = (ms: number) => new Date(Math.floor(ms / 86_400_000) * 86_400_000).toISOString();
    assert.deepEqual(days.map((d) => d.bucket), [...new Set(answers.map((a) => utcDay(a.sentAt)))].sort(), 'a UTC day each');
    for (const day of days) {
      const of = answers.filter((a) => utcDay(a.sentAt) === day.bucket);
      assert.equal(day.requests, of.length);
      assert.equal(day.prompt_tokens, of.reduce((n, a) => n + a.prompt, 0));
    }
  });

  test('GET /requests: filters by key, errors and tag; a cursor pages through 120 requests of 50 each, each id once; /requests/{id}', async () => {
    assert.ok(answers.length > 0, 'runs after the records test');
    const ids = async (q: string) => {
      const res = await admin(gw, `/requests?${q}`);
      assert.equal(res.status, 200, `${q}: ${JSON.stringify(res.body)}`);
      return (res.body.items as { id: string }[]).map((i) => i.id).sort();
    };
    const expect = (keep: (a: Answer) => boolean) => answers.filter(keep).map((a) => a.id).sort();
    assert.deepEqual(await ids('key=alice'), expect((a) => a.key === 'alice'));
    assert.deepEqual(await ids('team=research'), expect((a) => a.key === 'alice'));
    assert.deepEqual(await ids('errors=true'), expect((a) => a.status >= 400));
    assert.deepEqual(await ids('status=429'), expect((a) => a.status === 429));
    assert.deepEqual(await ids('tag=a'), expect((a) => a.tags.includes('a')));
    assert.deepEqual(await ids('tag=b&key=bob'), expect((a) => a.tags.includes('b') && a.key === 'bob'));
    assert.deepEqual(await ids('tag=c'), []);

    // 120 more, then paged 50 at a time.
    const paged: Answer[] = [];
    await Promise.all(
      Array.from({ length: 6 }, async (_, lane) => {
        for (let i = lane; i < 120; i += 6) paged.push(await send(gw, { key: 'pager', usage: { prompt: 1 + (i % 5), completion: 2 } }));
      }),
    );
    assert.ok(paged.every((a) => a.status === 200));
    answers.push(...paged);
    await stored(file, paged.map((a) => a.id));
    const seen: string[] = [];
    const sizes: number[] = [];
    let cursor: string | null = null;
    do {
      const res = await admin(gw, `/requests?key=pager&limit=50${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`);
      assert.equal(res.status, 200, JSON.stringify(res.body));
      const items = res.body.items as { id: string; started_at: number }[];
      sizes.push(items.length);
      seen.push(...items.map((i) => i.id));
      cursor = res.body.next_cursor as string | null;
    } while (cursor !== null && sizes.length < 10);
    assert.deepEqual(sizes.slice(0, 3), [50, 50, 20]);
    assert.ok(sizes.length <= 4 && sizes.slice(3).every((n) => n === 0), `pages: ${sizes.join(', ')}`);
    assert.equal(new Set(seen).size, seen.length, 'no id twice');
    assert.deepEqual(seen.sort(), paged.map((a) => a.id).sort(), 'every id once');

    // One request, with its attempts, as the store has it.
    const fallback = answers.find((a) => a.priced === 'second-target')!;
    const one = await admin(gw, `/requests/${fallback.id}`);
    assert.equal(one.status, 200);
    const request = one.body.request as Row;
    const row = rowsOf(file, [fallback.id]).get(fallback.id)!;
    for (const field of ['id', 'key', 'team', 'status', 'prompt_tokens', 'completion_tokens', 'cost_micros', 'started_at', 'ended_at', 'first_byte_ms', 'bytes_in', 'bytes_out', 'provider', 'served_model', 'route', 'model'] as const) {
      assert.equal(request[field], row[field], field);
    }
    assert.deepEqual(request.attempts, row.attempts);
    assert.deepEqual(request.metadata, { cost_center: 'cc-7' });
    assert.equal(request.usage_estimated, false);
    const unknown = await admin(gw, '/requests/no-such-request');
    assert.equal(unknown.status, 404);
    assert.equal((unknown.body.error as { code: string }).code, 'unknown_request');
    // The OpenAPI document's `status=error`: every status >= 400.
    assert.deepEqual(await ids('status=error'), expect((a) => a.status >= 400));
  });

  test('a read-scope admin token may GET the routes; without a token, or with a wrong one, 401', async () => {
    const id = answers[0]!.id;
    for (const path of ['/usage?group_by=key', '/requests?limit=5', `/requests/${id}`, '/budgets']) {
      assert.equal((await admin(gw, path, READER)).status, 200, `${path} with the read token`);
      const none = await admin(gw, path, null);
      assert.equal(none.status, 401, `${path} without a token`);
      assert.equal((none.body.error as { code: string }).code, 'invalid_admin_token');
      assert.equal((await admin(gw, path, 'not-the-token-0123456789')).status, 401, `${path} with a wrong token`);
    }
  });
});

describe('without a ledger', () => {
  test('no file is written (no spool, no SQLite file), no ledger metric; the routes answer 404 ledger_not_enabled; with `ledger: {}` the files appear', async () => {
    const gw = await startGateway({ config: config(undefined) });
    const dir = dirname(gw.configFile);
    try {
      for (let i = 0; i < 5; i++) assert.equal((await send(gw, { key: 'alice', stream: i % 2 === 1 })).status, 200);
      for (const path of ['/usage', '/requests', '/requests/some-id']) {
        const res = await admin(gw, path);
        assert.equal(res.status, 404, path);
        assert.equal((res.body.error as { code: string }).code, 'ledger_not_enabled', path);
      }
      assert.doesNotMatch(await scrape(gw), /^sluice_ledger_/m);
      gw.signal('SIGTERM');
      assert.equal((await gw.exited).code, 0, gw.stderr());
      assert.deepEqual(readdirSync(dir), ['sluice.yaml'], 'nothing beside the config file');
      assert.ok(!gw.logs.some((l) => typeof l.event === 'string' && l.event.startsWith('ledger_')), 'no ledger log line');
    } finally {
      await gw.stop();
    }
    // The control: the same config with the ledger's defaults writes its files beside the config file.
    const on = await startGateway({ config: config({}) });
    try {
      const id = (await send(on, { key: 'alice' })).id;
      const file = join(dirname(on.configFile), 'sluice.yaml.ledger.sqlite');
      await stored(file, [id]);
      assert.deepEqual(readdirSync(dirname(on.configFile)).filter((n) => n.startsWith('sluice.yaml.ledger')).sort().slice(0, 2), ['sluice.yaml.ledger-spool', 'sluice.yaml.ledger.sqlite']);
    } finally {
      await on.stop();
      rmSync(dirname(on.configFile), { recursive: true, force: true });
    }
  });
});
