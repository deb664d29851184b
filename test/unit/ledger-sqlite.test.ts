// The ledger's SQLite store (src/ledger/sqlite-store.ts) on a real file: inserts count each id once
// and a batch is one transaction; usage sums and request pages agree with the same computed here
// from the records; prune, claims, migrations; and the statements run off the event loop, with two
// stores (two workers' processes) writing one file at once. The database is read back with a
// connection of the test's own, not through the store. Last, the admin API's query parameters.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { crc32 } from 'node:zlib';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { openLedgerStore } from '../../src/ledger/open-store.ts';
import { LEDGER_SCHEMA_VERSION, MIGRATIONS } from '../../src/ledger/migrations.ts';
import { parseRequestsQuery, parseUsageQuery } from '../../src/ledger/query-params.ts';
import type { LedgerRecord } from '../../src/ledger/record.ts';
import { encodeLine } from '../../src/ledger/line.ts';
import { insertStatement, USAGE_GROUPS, type LedgerStore, type RequestsQuery, type UsageQuery, type UsageRow } from '../../src/ledger/store.ts';

const dir = mkdtempSync(join(tmpdir(), 'sluice-ledger-'));
after(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;
const freshPath = () => join(dir, `ledger-${++files}.db`);

const opened: LedgerStore[] = [];
after(() => Promise.all(opened.map((s) => s.close())));
async function open(path = freshPath()): Promise<LedgerStore> {
  const store = await openLedgerStore({ kind: 'sqlite', path });
  opened.push(store);
  return store;
}

/** The file read with a connection of the test's own. */
function sql<T = Record<string, unknown>>(path: string, query: string): T[] {
  const db = new DatabaseSync(path, { timeout: 5000 });
  try {
    return db.prepare(query).all().map((row) => ({ ...row }) as T);
  } finally {
    db.close();
  }
}

const T0 = Date.UTC(2025, 4, 1, 10, 17); // 2025-05-01T10:17Z

function record(over: Partial<LedgerRecord> = {}): LedgerRecord {
  return {
    id: 'r-1',
    kind: 'request',
    started_at: T0,
    first_byte_ms: 120,
    ended_at: T0 + 900,
    key: 'alpha',
    team: 'blue',
    user: '',
    metadata: { env: 'prod' },
    tags: ['batch'],
    api: 'openai',
    endpoint: 'chat',
    model: 'gpt-x',
    route: 'gpt-x',
    provider: 'oa',
    served_model: 'gpt-x-2025',
    attempts: [{ target: 'oa/gpt-x-2025', outcome: 'success', status: 200, ms: 880 }],
    status: 200,
    error: '',
    prompt_tokens: 11,
    completion_tokens: 7,
    cached_tokens: 0,
    cache_write_tokens: 0,
    usage_estimated: false,
    cost_micros: 18_000,
    bytes_in: 300,
    bytes_out: 900,
    listener: 'proxy',
    worker: 0,
    generation: 0,
    ...over,
  };
}

/** Deterministic records over three days: several keys, teams, models, providers and users; errors; prices missing; equal start times. */
function sample(count: number, seed = 1, prefix = 's'): LedgerRecord[] {
  let state = seed;
  const next = () => {
    state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
    return state / 2_147_483_648;
  };
  const pick = <T,>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
  return Array.from({ length: count }, (_, i) => {
    // Starts on a 10-minute grid: many records share one.
    const started = T0 + Math.floor(next() * 3 * 24 * 6) * 600_000;
    const status = pick([200, 200, 200, 200, 400, 429, 500, 502]);
    return record({
      id: `${prefix}-${String(i).padStart(5, '0')}`,
      started_at: started,
      ended_at: started + Math.floor(next() * 5000),
      first_byte_ms: status === 200 ? Math.floor(next() * 500) : null,
      key: pick(['alpha', 'beta', 'gamma']),
      team: pick(['blue', 'red', '']),
      user: pick(['', 'ann', 'bob']),
      model: pick(['gpt-x', 'claude-y']),
      provider: pick(['oa', 'an', '']),
      status,
      error: status === 200 ? '' : `e${status}`,
      // 'nightly' is not 'night': a tag is matched whole.
      tags: next() < 0.3 ? ['batch', 'night'] : next() < 0.3 ? ['night'] : next() < 0.3 ? ['nightly'] : [],
      prompt_tokens: Math.floor(next() * 1000),
      completion_tokens: Math.floor(next() * 1000),
      cached_tokens: Math.floor(next() * 100),
      cost_micros: next() < 0.2 ? null : Math.floor(next() * 50_000),
      usage_estimated: next() < 0.1,
      attempts: next() < 0.2 ? [{ target: 'an/claude', outcome: 'rate_limited', status: 429, ms: 30 }, { target: 'oa/gpt', outcome: 'success', status: 200, ms: 400 }] : [{ target: 'oa/gpt', outcome: 'success', ms: 400 }],
      metadata: next() < 0.5 ? null : { env: pick(['prod', 'dev']) },
    });
  });
}

/** The usage of `records`, computed here. */
function expectedUsage(records: readonly LedgerRecord[], q: UsageQuery): UsageRow[] {
  const size = q.bucket === 'hour' ? 3_600_000 : 86_400_000;
  const rows = new Map<string, UsageRow & { micros: number }>();
  for (const r of records) {
    if (r.started_at < q.from || r.started_at >= q.to) continue;
    const keys: Partial<UsageRow> = {};
    if (q.bucket) keys.bucket = new Date(Math.floor(r.started_at / size) * size).toISOString();
    for (const g of USAGE_GROUPS) if (q.groupBy.includes(g)) keys[g] = r[g];
    const id = JSON.stringify(keys);
    const row = rows.get(id) ?? { ...keys, requests: 0, errors: 0, prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0, cost_usd: 0, micros: 0 };
    row.requests++;
    if (r.status >= 400) row.errors++;
    row.prompt_tokens += r.prompt_tokens;
    row.completion_tokens += r.completion_tokens;
    row.cached_tokens += r.cached_tokens;
    row.micros += r.cost_micros ?? 0;
    rows.set(id, row);
  }
  return [...rows.values()].map(({ micros, ...row }) => ({ ...row, cost_usd: micros / 1e6 }));
}

const byKeys = (rows: UsageRow[]) => [...rows].sort((a, b) => (JSON.stringify([a.bucket, a.key, a.team, a.model, a.provider, a.user]) < JSON.stringify([b.bucket, b.key, b.team, b.model, b.provider, b.user]) ? -1 : 1));

/** The ids `q` selects from `records`, newest first, computed here (no limit, no cursor). */
function expectedIds(records: readonly LedgerRecord[], q: Omit<RequestsQuery, 'limit'>): string[] {
  return records
    .filter(
      (r) =>
        (q.from === undefined || r.started_at >= q.from) &&
        (q.to === undefined || r.started_at < q.to) &&
        (['key', 'team', 'model', 'provider', 'user', 'error'] as const).every((f) => q[f] === undefined || r[f] === q[f]) &&
        (q.status === undefined || r.status === q.status) &&
        (q.errors === undefined || r.status >= 400 === q.errors) &&
        (q.tag === undefined || r.tags.includes(q.tag)),
    )
    .sort((a, b) => b.started_at - a.started_at || (a.id < b.id ? 1 : -1))
    .map((r) => r.id);
}

/** Every page of `q`, followed by its cursors. */
async function allPages(store: LedgerStore, q: RequestsQuery): Promise<{ ids: string[]; pages: number }> {
  const ids: string[] = [];
  let cursor: string | undefined;
  let pages = 0;
  do {
    const page = await store.requests({ ...q, ...(cursor ? { cursor } : {}) });
    assert.ok(page.items.length <= q.limit);
    ids.push(...page.items.map((i) => i.id));
    cursor = page.next_cursor ?? undefined;
    pages++;
  } while (cursor);
  return { ids, pages };
}

describe('inserts', () => {
  test("the spool's lines, as the shipper hands them: the good ones go in once; a flipped byte, a line that is no record and one whose JSON is cut short are counted as corrupt", async () => {
    const store = await open();
    const records = sample(300);
    const good = records.map(encodeLine);
    const flipped = Buffer.from(encodeLine(record({ id: 'flipped' })));
    flipped[120] = flipped[120]! ^ 0x01;
    // Its checksum right, its JSON cut short (written by something else than a spool): skipped, never holding up the batch.
    const cut = '{"id":"cut","kind":';
    const broken = `${crc32(cut).toString(16).padStart(8, '0')} ${cut}\n`;
    const bytes = Buffer.concat([Buffer.from(good.slice(0, 100).join('')), flipped, Buffer.from(`${good.slice(100, 200).join('')}${broken}${good.slice(200).join('')}not a record\n`)]);
    assert.deepEqual(await store.insertLines(bytes), { added: 300, corrupt: 3 });
    assert.deepEqual(await store.insertLines(bytes), { added: 0, corrupt: 3 }, 'sent again (a retry after an unknown outcome): nothing twice');
    assert.deepEqual(await store.insertLines(Buffer.alloc(0)), { added: 0, corrupt: 0 });
    assert.equal(await store.request('flipped'), undefined);
    assert.deepEqual(await store.request(records[123]!.id), records[123]);
  });

  test('each id once: the same batch twice, overlapping batches and an id twice in one batch; resolves with how many were new', async () => {
    const path = freshPath();
    const store = await open(path);
    const records = sample(750);
    assert.equal(await store.insert(records.slice(0, 500)), 500);
    assert.equal(await store.insert(records.slice(0, 500)), 0);
    assert.equal(await store.insert(records.slice(250, 750)), 250);
    assert.equal(await store.insert([records[0]!, record({ id: 'twice' }), record({ id: 'twice', key: 'other' })]), 1);
    assert.equal(await store.insert([]), 0);
    const [count] = sql<{ n: number; ids: number }>(path, 'SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS ids FROM ledger_requests');
    assert.deepEqual(count, { n: 751, ids: 751 });
    assert.equal(sql<{ key: string }>(path, "SELECT key FROM ledger_requests WHERE id = 'twice'")[0]!.key, 'alpha');
  });

  test('a batch of 500 is one transaction: one record refused (by a trigger), none of the batch is there', async () => {
    const path = freshPath();
    const store = await open(path);
    const db = new DatabaseSync(path);
    db.exec("CREATE TRIGGER refuse BEFORE INSERT ON ledger_requests WHEN NEW.id = 'poison' BEGIN SELECT RAISE(ABORT, 'poison refused'); END");
    db.close();
    const batch = [...sample(499), record({ id: 'poison' })];
    await assert.rejects(store.insert(batch), /poison refused/);
    assert.equal(sql<{ n: number }>(path, 'SELECT COUNT(*) AS n FROM ledger_requests')[0]!.n, 0);
    assert.equal(await store.insert(batch.slice(0, 499)), 499, 'the store goes on after a refused batch');
  });

  test('a record reads back whole: attempts, tags, metadata and nulls as inserted', async () => {
    const store = await open();
    const records = [
      record({ id: 'full' }),
      record({ id: 'nulls', first_byte_ms: null, cost_micros: null, metadata: null, tags: [], attempts: [], usage_estimated: true, kind: 'realtime', worker: 3, generation: 2 }),
      record({ id: 'unicode', user: 'zoë ✓', metadata: { 'team name': 'ünïcode', quote: '"\'\\' }, tags: ['a,b', 'ç'], attempts: [{ target: 'an/c', outcome: 'timeout', ms: 10_000 }, { target: 'oa/g', outcome: 'success', status: 200, ms: 12.5 }] }),
    ];
    await store.insert(records);
    for (const r of records) assert.deepEqual(await store.request(r.id), r);
    assert.equal(await store.request('missing'), undefined);
  });

  test("strings PostgreSQL would refuse (NUL, a lone surrogate) are made U+FFFD, so one client's `user` never blocks a batch", async () => {
    const store = await open();
    await store.insert([record({ id: 'odd', user: 'a\u0000b\ud800', tags: ['x\u0000'], metadata: { 'k\u0000': 'v' } })]);
    const back = await store.request('odd');
    assert.equal(back?.user, 'a\uFFFDb\uFFFD');
    assert.deepEqual(back?.tags, ['x\uFFFD']);
    assert.deepEqual(back?.metadata, { 'k\uFFFD': 'v' });
  });
});

describe('usage', () => {
  const records = sample(3000);
  // On the bounds: `from` is in, `to` is out.
  const from = T0 + 3_600_000;
  // Off the samples' 10-minute grid: only 'at-to' starts there.
  const to = T0 + 2 * 86_400_000 + 300_000;
  records.push(record({ id: 'at-from', started_at: from, cost_micros: 1 }), record({ id: 'at-to', started_at: to, cost_micros: 1_000_000 }));
  let store: LedgerStore;

  test('every subset of key/team/model/provider/user, without a bucket and by hour and by day, sums as the records do', async () => {
    store = await open();
    await store.insert(records);
    let compared = 0;
    for (let mask = 0; mask < 1 << USAGE_GROUPS.length; mask++) {
      const groupBy = USAGE_GROUPS.filter((_, i) => mask & (1 << i));
      for (const bucket of [undefined, 'hour', 'day'] as const) {
        const q: UsageQuery = { from, to, groupBy, ...(bucket ? { bucket } : {}) };
        const rows = await store.usage(q);
        assert.deepEqual(byKeys(rows), byKeys(expectedUsage(records, q)), JSON.stringify(q));
        assert.deepEqual(rows, byKeys(rows), 'ordered by bucket, then group');
        compared += rows.length;
      }
    }
    assert.ok(compared > 1000, `rows compared: ${compared}`);
  });

  test('the totals: errors are status >= 400, a missing price counts 0, the bounds are [from, to)', async () => {
    const [total] = await store.usage({ from, to, groupBy: [] });
    const inRange = records.filter((r) => r.started_at >= from && r.started_at < to);
    assert.equal(total?.requests, inRange.length);
    assert.equal(total?.errors, inRange.filter((r) => r.status >= 400).length);
    assert.ok(inRange.some((r) => r.cost_micros === null));
    assert.equal(total?.cost_usd, inRange.reduce((sum, r) => sum + (r.cost_micros ?? 0), 0) / 1e6);
    assert.ok(inRange.some((r) => r.id === 'at-from') && !inRange.some((r) => r.id === 'at-to'));
    const [edge] = await store.usage({ from: to, to: to + 1, groupBy: [] });
    assert.deepEqual(edge, { requests: 1, errors: 0, prompt_tokens: 11, completion_tokens: 7, cached_tokens: 0, cost_usd: 1 });
    assert.deepEqual(await store.usage({ from: 0, to: 1000, groupBy: ['key'] }), []);
    assert.deepEqual(await store.usage({ from: 0, to: 1000, groupBy: [] }), []);
  });

  test('buckets are UTC hours and days, named by their start', async () => {
    const days = await store.usage({ from: T0, to: T0 + 2 * 86_400_000, groupBy: [], bucket: 'day' });
    assert.deepEqual(
      days.map((d) => d.bucket),
      ['2025-05-01T00:00:00.000Z', '2025-05-02T00:00:00.000Z', '2025-05-03T00:00:00.000Z'],
    );
    const hours = await store.usage({ from: T0, to: T0 + 3_600_000, groupBy: [], bucket: 'hour' });
    assert.deepEqual(
      hours.map((h) => h.bucket),
      ['2025-05-01T10:00:00.000Z', '2025-05-01T11:00:00.000Z'],
    );
  });
});

describe('requests', () => {
  const records = sample(1200, 7);
  // Twelve records that start in the same millisecond: only the id orders them.
  for (let i = 0; i < 12; i++) records.push(record({ id: `same-${i}`, started_at: T0 + 86_400_000 }));
  let store: LedgerStore;
  const all = { from: T0 - 1, to: T0 + 4 * 86_400_000 };

  test('each filter narrows, newest first (started_at desc, id desc)', async () => {
    store = await open();
    await store.insert(records);
    const filters: Omit<RequestsQuery, 'limit'>[] = [
      all,
      { from: T0 + 86_400_000, to: T0 + 2 * 86_400_000 },
      { ...all, key: 'beta' },
      { ...all, team: '' },
      { ...all, team: 'red' },
      { ...all, model: 'claude-y' },
      { ...all, provider: 'an' },
      { ...all, user: 'ann' },
      { ...all, status: 429 },
      { ...all, errors: true },
      { ...all, errors: false },
      { ...all, error: 'e502' },
      { ...all, tag: 'batch' },
      { ...all, tag: 'night', key: 'gamma', errors: true },
      { ...all, key: 'nobody' },
    ];
    for (const q of filters) {
      const expected = expectedIds(records, q);
      const page = await store.requests({ ...q, limit: 500 });
      assert.deepEqual(
        page.items.map((i) => i.id),
        expected.slice(0, 500),
        JSON.stringify(q),
      );
      assert.ok(q === all || expected.length < records.length, `${JSON.stringify(q)} narrows`);
    }
  });

  test('the cursor pages through every record exactly once, equal start times included', async () => {
    const expected = expectedIds(records, all);
    const { ids, pages } = await allPages(store, { ...all, limit: 7 });
    assert.deepEqual(ids, expected);
    assert.equal(pages, Math.ceil(expected.length / 7));
    const filtered = await allPages(store, { ...all, errors: true, tag: 'night', limit: 5 });
    assert.deepEqual(filtered.ids, expectedIds(records, { ...all, errors: true, tag: 'night' }));
    // Pages of 5 over the twelve of one millisecond.
    const same = await allPages(store, { from: T0 + 86_400_000, to: T0 + 86_400_001, limit: 5 });
    assert.deepEqual(same.ids, expectedIds(records, { from: T0 + 86_400_000, to: T0 + 86_400_001 }));
    assert.equal(same.ids.length, 12 + records.filter((r) => r.started_at === T0 + 86_400_000 && !r.id.startsWith('same-')).length);
  });

  test('a summary is the record without attempts and metadata, with attempt_count', async () => {
    const page = await store.requests({ ...all, limit: 500 });
    const item = page.items.find((i) => records.find((r) => r.id === i.id)!.attempts.length === 2)!;
    const { attempts, metadata, ...rest } = records.find((r) => r.id === item.id)!;
    assert.deepEqual(item, { ...rest, attempt_count: attempts.length });
    assert.ok(metadata === null || typeof metadata === 'object');
  });

  test('a cursor that is not one the store gave is refused, and the store goes on', async () => {
    await assert.rejects(store.requests({ limit: 5, cursor: 'bm90LWEtY3Vyc29y' }), /cursor/);
    assert.equal((await store.requests({ ...all, limit: 5 })).items.length, 5);
  });
});

test('prune deletes at most `limit`, the oldest first, of the records that ended before the time', async () => {
  const store = await open();
  const records = Array.from({ length: 10 }, (_, i) => record({ id: `p${i}`, started_at: T0 + i * 1000, ended_at: T0 + i * 1000 + 500 }));
  // Started first, but still running at the time: not pruned.
  records.push(record({ id: 'long', started_at: T0 - 5000, ended_at: T0 + 60_000 }));
  await store.insert(records);
  const before = T0 + 6000; // p0..p5 ended before it
  assert.equal(await store.prune(before, 4), 4);
  const left = async () => (await store.requests({ from: 0, to: T0 + 86_400_000, limit: 500 })).items.map((i) => i.id).sort();
  assert.deepEqual(await left(), ['long', 'p4', 'p5', 'p6', 'p7', 'p8', 'p9']);
  assert.equal(await store.prune(before, 4), 2);
  assert.equal(await store.prune(before, 4), 0);
  assert.deepEqual(await left(), ['long', 'p6', 'p7', 'p8', 'p9']);
});

describe('bodies (ledger.bodies)', () => {
  const bodies = (n: number, over: Partial<NonNullable<LedgerRecord['bodies']>> = {}): NonNullable<LedgerRecord['bodies']> => ({
    request_body: `{"model":"m","n":${n},"text":"zoë ✓"}`,
    response_body: `data: {"n":${n}}\n\n`,
    request_truncated: n % 2 === 0,
    response_truncated: n % 3 === 0,
    encoding: 'utf8',
    ...over,
  });

  test('inserted with their records, once by id; read back with them; a record without bodies has none', async () => {
    const path = freshPath();
    const store = await open(path);
    const records = sample(40).map((r, i) => (i % 4 === 3 ? r : { ...r, bodies: bodies(i) }));
    records.push(record({ id: 'binary', bodies: bodies(0, { request_body: Buffer.from([0xff, 0, 1]).toString('base64'), encoding: 'base64' }) }));
    assert.equal(await store.insert(records), 41);
    // The same batch again, and the same id with other bodies: nothing changes.
    assert.equal(await store.insert(records), 0);
    assert.equal(await store.insert([{ ...records[0]!, bodies: bodies(99) }]), 0);
    for (const r of records) assert.deepEqual(await store.request(r.id), r, r.id);
    assert.equal((await store.request(records[3]!.id))!.bodies, undefined);
    const [count] = sql<{ n: number; ids: number }>(path, 'SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS ids FROM ledger_bodies');
    assert.deepEqual(count, { n: 31, ids: 31 });
    const [row] = sql(path, `SELECT request_truncated, response_truncated, encoding, ended_at FROM ledger_bodies WHERE id = '${records[0]!.id}'`);
    assert.deepEqual(row, { request_truncated: 1, response_truncated: 1, encoding: 'utf8', ended_at: records[0]!.ended_at });
    // A summary of /requests has no bodies.
    const page = await store.requests({ from: 0, to: T0 + 10 * 86_400_000, limit: 500 });
    assert.ok(page.items.every((item) => !('bodies' in item)));
  });

  test('a body refused (by a trigger) fails its whole batch: the records are not there either', async () => {
    const path = freshPath();
    const store = await open(path);
    const db = new DatabaseSync(path);
    db.exec("CREATE TRIGGER refuse BEFORE INSERT ON ledger_bodies WHEN NEW.id = 'poison' BEGIN SELECT RAISE(ABORT, 'poison body refused'); END");
    db.close();
    const batch = [...sample(20).map((r, i) => ({ ...r, bodies: bodies(i) })), record({ id: 'poison', bodies: bodies(1) })];
    await assert.rejects(store.insert(batch), /poison body refused/);
    assert.equal(sql<{ n: number }>(path, 'SELECT COUNT(*) AS n FROM ledger_requests')[0]!.n, 0);
    assert.equal(sql<{ n: number }>(path, 'SELECT COUNT(*) AS n FROM ledger_bodies')[0]!.n, 0);
  });

  test('pruneBodies deletes at most `limit` bodies, the oldest first, of records that ended before the time; the records stay', async () => {
    const path = freshPath();
    const store = await open(path);
    const records = Array.from({ length: 10 }, (_, i) => record({ id: `b${i}`, started_at: T0 + i * 1000, ended_at: T0 + i * 1000 + 500, bodies: bodies(i) }));
    records.push(record({ id: 'plain', started_at: T0 - 9000, ended_at: T0 - 8000 }));
    await store.insert(records);
    const before = T0 + 6000; // b0..b5 ended before it
    const withBodies = () => sql<{ id: string }>(path, 'SELECT id FROM ledger_bodies ORDER BY id').map((r) => r.id);
    assert.equal(await store.pruneBodies(before, 4), 4);
    assert.deepEqual(withBodies(), ['b4', 'b5', 'b6', 'b7', 'b8', 'b9']);
    assert.equal(await store.pruneBodies(before, 4), 2);
    assert.equal(await store.pruneBodies(before, 4), 0);
    assert.deepEqual(withBodies(), ['b6', 'b7', 'b8', 'b9']);
    assert.equal(sql<{ n: number }>(path, 'SELECT COUNT(*) AS n FROM ledger_requests')[0]!.n, 11, 'every record kept');
    assert.equal((await store.request('b0'))!.bodies, undefined);
    assert.deepEqual((await store.request('b6'))!.bodies, bodies(6));
  });

  test("pruning records takes their bodies with them", async () => {
    const path = freshPath();
    const store = await open(path);
    await store.insert(Array.from({ length: 6 }, (_, i) => record({ id: `c${i}`, started_at: T0 + i * 1000, ended_at: T0 + i * 1000 + 500, bodies: bodies(i) })));
    assert.equal(await store.prune(T0 + 3000, 100), 3);
    assert.deepEqual(sql<{ id: string }>(path, 'SELECT id FROM ledger_bodies ORDER BY id').map((r) => r.id), ['c3', 'c4', 'c5']);
  });
});

test('claim is true once, then false, also for a second store on the same file', async () => {
  const path = freshPath();
  const one = await open(path);
  const two = await open(path);
  assert.equal(await one.claim('budget:alpha:2025-05:80'), true);
  assert.equal(await one.claim('budget:alpha:2025-05:80'), false);
  assert.equal(await two.claim('budget:alpha:2025-05:80'), false);
  assert.equal(await two.claim('budget:alpha:2025-05:100'), true);
  assert.equal(await one.claim('budget:alpha:2025-05:100'), false);
  const racing = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? one : two).claim('raced')));
  assert.equal(racing.filter(Boolean).length, 1);
});

describe('migrations', () => {
  test('a fresh file gets the schema; opening it again changes nothing', async () => {
    const path = freshPath();
    const first = await open(path);
    await first.insert([record({ id: 'kept' })]);
    await first.close();
    const schema = () => sql<{ version: number }>(path, 'SELECT version FROM ledger_schema ORDER BY version');
    const steps = MIGRATIONS.map((step) => ({ version: step.version }));
    assert.deepEqual(schema(), steps);
    assert.equal(steps.at(-1)!.version, LEDGER_SCHEMA_VERSION);
    const tables = sql<{ name: string }>(path, "SELECT name FROM sqlite_master WHERE type IN ('table', 'index') AND name LIKE 'ledger%' ORDER BY name").map((t) => t.name);
    assert.deepEqual(tables, ['ledger_bodies', 'ledger_bodies_ended', 'ledger_claims', 'ledger_requests', 'ledger_requests_key_started', 'ledger_requests_started', 'ledger_requests_team_started', 'ledger_schema']);
    const again = await open(path);
    assert.deepEqual(schema(), steps);
    assert.equal((await again.request('kept'))?.id, 'kept');
    assert.equal(sql<{ journal_mode: string }>(path, 'PRAGMA journal_mode')[0]!.journal_mode, 'wal');
  });

  test('two stores opening one new file at once: both open, the schema made once', async () => {
    const path = freshPath();
    await Promise.all([open(path), open(path), open(path)]);
    assert.deepEqual(sql(path, 'SELECT version FROM ledger_schema ORDER BY version'), MIGRATIONS.map((step) => ({ version: step.version })));
  });

  test('1 to 2 on a file a Sluice of version 1 made: its records kept, ledger_bodies added, bodies inserted and read back', async () => {
    const path = freshPath();
    // The file as the first version left it: step 1 only, with a record.
    const db = new DatabaseSync(path);
    db.exec('CREATE TABLE ledger_schema (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)');
    for (const statement of MIGRATIONS.find((step) => step.version === 1)!.sql('sqlite')) db.exec(statement);
    db.exec('INSERT INTO ledger_schema (version, applied_at) VALUES (1, 0)');
    const old = record({ id: 'from-v1' });
    const insert = insertStatement([old], 'sqlite');
    db.prepare(insert.sql).run(...(insert.values as (string | number | null)[]));
    db.close();
    const store = await open(path);
    assert.deepEqual(sql(path, 'SELECT version FROM ledger_schema ORDER BY version'), [{ version: 1 }, { version: 2 }]);
    assert.deepEqual(await store.request('from-v1'), old, 'a record of version 1 reads back as it was, without bodies');
    const withBodies = record({ id: 'with-bodies', bodies: { request_body: '{"a":1}', response_body: 'data: x\n\n', request_truncated: false, response_truncated: true, encoding: 'utf8' } });
    assert.equal(await store.insert([withBodies]), 1);
    assert.deepEqual(await store.request('with-bodies'), withBodies);
  });

  test('a file a newer Sluice migrated is refused, with a message that says so', async () => {
    const path = freshPath();
    await (await open(path)).close();
    const db = new DatabaseSync(path);
    db.exec('INSERT INTO ledger_schema (version, applied_at) VALUES (99, 0)');
    db.close();
    await assert.rejects(openLedgerStore({ kind: 'sqlite', path }), (error: Error) => {
      assert.match(error.message, new RegExp(`schema version 99, newer than this Sluice's ${LEDGER_SCHEMA_VERSION}`));
      return true;
    });
  });

  test('a path that cannot be opened rejects the open', async () => {
    await assert.rejects(openLedgerStore({ kind: 'sqlite', path: join(dir, 'no', 'such', 'dir', 'x.db') }), /unable to open|open/);
  });
});

describe('off the event loop', () => {
  /**
   * While `work` runs, a 1 ms interval: the longest wait between two ticks, and the most CPU time
   * this thread used between two ticks (work done on it; a wait on a busy machine, whose CPUs went
   * to other processes, uses none).
   */
  async function ticks(work: () => Promise<void>): Promise<{ gap: number; cpu: number }> {
    let last = performance.now();
    let lastCpu = process.threadCpuUsage();
    const worst = { gap: 0, cpu: 0 };
    const tick = () => {
      const now = performance.now();
      const cpu = process.threadCpuUsage();
      worst.gap = Math.max(worst.gap, now - last);
      worst.cpu = Math.max(worst.cpu, (cpu.user + cpu.system - lastCpu.user - lastCpu.system) / 1000);
      last = now;
      lastCpu = cpu;
    };
    const timer = setInterval(tick, 1);
    await work();
    clearInterval(timer);
    tick();
    return worst;
  }

  test('20,000 records in batches of 500, and queries over them: a 1 ms interval never waits more than 20 ms', async () => {
    // Work on this thread would hold it at every batch (a 500-row insert is about 20 ms of CPU). A
    // machine busy with other work can hold a process too: up to three rounds for one without a
    // wait over 20 ms, unless the machine is busier than its CPUs. Either way, this thread works
    // less than 10 ms between two ticks (handing a batch's bytes to the thread is well under 1 ms).
    const rounds: { gap: number; cpu: number }[] = [];
    const overloaded = () => loadavg()[0]! > availableParallelism();
    for (let round = 0; round < 3 && !rounds.some((r) => r.gap < 20 && r.cpu < 10); round++) {
      const store = await open();
      const records = sample(20_000, 3, 'loop');
      // As the shipper sends them: each batch as the spool's lines (made before the clock starts).
      const batches: Buffer[] = [];
      for (let i = 0; i < records.length; i += 500) batches.push(Buffer.from(records.slice(i, i + 500).map(encodeLine).join('')));
      const startedAt = performance.now();
      rounds.push(
        await ticks(async () => {
          let added = 0;
          for (const batch of batches) added += (await store.insertLines(batch)).added;
          const rows = await store.usage({ from: 0, to: T0 + 10 * 86_400_000, groupBy: ['key', 'model', 'user'], bucket: 'hour' });
          const page = await store.requests({ from: 0, to: T0 + 10 * 86_400_000, tag: 'night', limit: 500 });
          assert.equal(added, 20_000);
          assert.ok(rows.length > 100 && page.items.length === 500);
        }),
      );
      const { gap, cpu } = rounds.at(-1)!;
      console.log(`round ${round + 1}: 20,000 records inserted and queried in ${(performance.now() - startedAt).toFixed(0)} ms; between two ticks of the 1 ms interval at most ${gap.toFixed(1)} ms, and ${cpu.toFixed(1)} ms of this thread's CPU (load average ${loadavg()[0]!.toFixed(1)} on ${availableParallelism()} CPUs)`);
      await store.close();
    }
    const seen = rounds.map((r) => `${r.gap.toFixed(1)} ms (CPU ${r.cpu.toFixed(1)} ms)`).join(', ');
    // One round of three is enough: work done on this thread (an insert) would show in every round.
    assert.ok(rounds.some((r) => r.cpu < 10), `this thread worked between two ticks: ${seen}`);
    assert.ok(rounds.some((r) => r.gap < 20) || overloaded(), `the event loop was held: ${seen}`);
  });

  test('two stores (two processes) writing one file at once: every batch of both goes in', async () => {
    const path = freshPath();
    const [one, two] = await Promise.all([open(path), open(path)]);
    const write = async (store: LedgerStore, records: LedgerRecord[]) => {
      let added = 0;
      for (let i = 0; i < records.length; i += 100) added += await store.insert(records.slice(i, i + 100));
      return added;
    };
    const [a, b] = await Promise.all([write(one!, sample(4000, 5, 'one')), write(two!, sample(4000, 6, 'two'))]);
    assert.deepEqual([a, b], [4000, 4000]);
    assert.equal(sql<{ n: number }>(path, 'SELECT COUNT(*) AS n FROM ledger_requests')[0]!.n, 8000);
  });

  test('its thread runs 10 nicer than the process (Linux): when it and the event loop want one CPU, the requests go first', { skip: process.platform !== 'linux' && 'thread priorities are read from /proc' }, async () => {
    const niceOf = (stat: string): number => Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
    const threads = () =>
      readdirSync('/proc/self/task').map((tid) => ({ tid, name: readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim(), nice: niceOf(readFileSync(`/proc/self/task/${tid}/stat`, 'utf8')) }));
    const own = niceOf(readFileSync('/proc/self/stat', 'utf8'));
    const before = new Set(threads().map((t) => t.tid));
    const store = await open();
    await store.usage({ from: 0, to: 1, groupBy: [], bucket: 'day' });
    const added = threads().filter((t) => !before.has(t.tid) && t.name === 'WorkerThread');
    assert.deepEqual(
      added.map((t) => t.nice),
      [Math.min(19, own + 10)],
      "the store's thread, 10 nicer than this process",
    );
    assert.equal(niceOf(readFileSync('/proc/thread-self/stat', 'utf8')), own, 'this thread (the event loop) keeps its priority');
    await store.close();
  });
});

test('after close, calls are refused; close twice is fine', async () => {
  const store = await open();
  await store.close();
  await store.close();
  await assert.rejects(store.insert([record()]), /closed/);
});

describe("the admin API's query parameters (src/ledger/query-params.ts)", () => {
  const NOW = Date.UTC(2025, 4, 10, 12);
  const usage = (qs: string) => parseUsageQuery(new URLSearchParams(qs), NOW);
  const requests = (qs: string) => parseRequestsQuery(new URLSearchParams(qs), NOW);
  const refused = (parsed: { ok: boolean; message?: string }, pattern: RegExp) => {
    assert.equal(parsed.ok, false);
    assert.match((parsed as { message: string }).message, pattern);
  };

  test('defaults: usage over the last 7 days, requests over the last 24 hours, 50 a page', () => {
    assert.deepEqual(usage(''), { ok: true, query: { from: NOW - 7 * 86_400_000, to: NOW, groupBy: [] } });
    assert.deepEqual(requests(''), { ok: true, query: { from: NOW - 86_400_000, to: NOW, limit: 50 } });
    assert.deepEqual(usage('to=2025-05-03'), { ok: true, query: { from: Date.UTC(2025, 3, 26), to: Date.UTC(2025, 4, 3), groupBy: [] } });
  });

  test('from and to: ISO dates and date-times (UTC without an offset) or epoch ms', (t) => {
    // A server whose zone is not UTC: a date-time without an offset is still UTC.
    const zone = process.env.TZ;
    process.env.TZ = 'America/New_York';
    t.after(() => (zone === undefined ? delete process.env.TZ : (process.env.TZ = zone)));
    const q = (qs: string) => {
      const parsed = usage(qs);
      assert.ok(parsed.ok, JSON.stringify(parsed));
      return [parsed.query.from, parsed.query.to];
    };
    assert.deepEqual(q('from=2025-05-01&to=2025-05-02'), [Date.UTC(2025, 4, 1), Date.UTC(2025, 4, 2)]);
    assert.deepEqual(q('from=2025-05-01T09:30:00Z&to=2025-05-01T12:00:00.250%2B02:00'), [Date.UTC(2025, 4, 1, 9, 30), Date.UTC(2025, 4, 1, 10, 0, 0, 250)]);
    // The offset's + not percent-encoded (a space once decoded).
    assert.deepEqual(q('from=2025-05-01T08:30:00-01:00&to=2025-05-01T12:00:00+02:00'), [Date.UTC(2025, 4, 1, 9, 30), Date.UTC(2025, 4, 1, 10)]);
    assert.deepEqual(q('from=2025-05-01T10:30&to=1746100000000'), [Date.UTC(2025, 4, 1, 10, 30), 1_746_100_000_000]);
    refused(usage('from=yesterday'), /^from: "yesterday" is neither an ISO 8601/);
    refused(usage('to=2025-02-30'), /^to: "2025-02-30" is not a valid date/);
    refused(usage('from=2025-05-01T25:00Z'), /^from: .* not a valid date/);
    refused(usage('from=2025-05-02&to=2025-05-01'), /^from: must be before to/);
    refused(usage('from=1&from=2'), /^from: given 2 times/);
  });

  test('group_by and bucket', () => {
    const parsed = usage('group_by=team,key,team&bucket=day');
    assert.ok(parsed.ok);
    assert.deepEqual(parsed.query.groupBy, ['team', 'key']);
    assert.equal(parsed.query.bucket, 'day');
    refused(usage('group_by=key,region'), /^group_by: "region" is not one of key, team, model, provider, user/);
    refused(usage('group_by=key,,team'), /^group_by: "" is not one of/);
    refused(usage('bucket=week'), /^bucket: "week" is not hour or day/);
    refused(usage('grup_by=key'), /^grup_by: not a parameter here/);
  });

  test('the filters, limit and cursor of /requests', () => {
    const parsed = requests('key=alpha&team=&model=m&provider=p&user=ann&error=rate_limited&tag=night&status=429&errors=true&limit=500');
    assert.deepEqual(parsed, {
      ok: true,
      query: { from: NOW - 86_400_000, to: NOW, limit: 500, key: 'alpha', team: '', model: 'm', provider: 'p', user: 'ann', error: 'rate_limited', tag: 'night', status: 429, errors: true },
    });
    refused(requests('limit=501'), /^limit: "501" is not a whole number from 1 to 500/);
    refused(requests('limit=0'), /^limit: /);
    refused(requests('limit=ten'), /^limit: /);
    refused(requests('status=42'), /^status: "42" is not a whole number from 100 to 599/);
    refused(requests('errors=maybe'), /^errors: "maybe" is not true or false/);
    refused(requests('cursor=!!'), /^cursor: not a cursor this API gave/);
    refused(requests(`cursor=${Buffer.from('[1,2]').toString('base64url')}`), /^cursor: /);
    refused(requests('bucket=day'), /^bucket: not a parameter here/);
  });

  test("a later page asked without from keeps the first page's (the clock has moved on meanwhile)", async () => {
    const store = await open();
    const first = requests('limit=2');
    assert.ok(first.ok);
    await store.insert([0, 1, 2].map((i) => record({ id: `c${i}`, started_at: first.query.from! + i })));
    const page = await store.requests(first.query);
    assert.deepEqual(page.items.map((i) => i.id), ['c2', 'c1']);
    const later = parseRequestsQuery(new URLSearchParams({ cursor: page.next_cursor! }), NOW + 3_600_000);
    assert.ok(later.ok);
    assert.equal(later.query.from, first.query.from);
    assert.deepEqual((await store.requests(later.query)).items.map((i) => i.id), ['c0']);
  });
});

test('a SQLite store never loads the PostgreSQL client', async () => {
  await open();
  const loaded = Object.keys(createRequire(import.meta.url).cache);
  assert.deepEqual(
    loaded.filter((path) => /[\\/]node_modules[\\/](pg|pg-pool|pg-protocol)[\\/]/.test(path)),
    [],
  );
});
