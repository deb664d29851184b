// The ledger's PostgreSQL store (src/ledger/postgres-store.ts) against a real PostgreSQL started
// here: inserts count each id once and a batch is one transaction; usage sums and request pages
// agree with the same computed here from the records; prune, claims across two stores (two
// gateways), migrations; and the server going away (stopped, or silent) and coming back. The
// database is read with psql, not through the store's own client.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { crc32 } from 'node:zlib';
import { createServer, type Socket } from 'node:net';
import { openLedgerStore } from '../../src/ledger/open-store.ts';
import { LEDGER_SCHEMA_VERSION, MIGRATIONS } from '../../src/ledger/migrations.ts';
import type { LedgerRecord } from '../../src/ledger/record.ts';
import { encodeLine } from '../../src/ledger/line.ts';
import { insertStatement, USAGE_GROUPS, type LedgerStore, type RequestsQuery, type UsageQuery, type UsageRow } from '../../src/ledger/store.ts';
import { postgresCheck, startPostgres, type PostgresServer } from '../support/postgres.ts';

const skip = postgresCheck().skip;

let pg: PostgresServer;
before(async () => {
  if (skip) return;
  pg = await startPostgres();
});

const opened: LedgerStore[] = [];
after(async () => {
  await Promise.all(opened.map((s) => s.close()));
  await pg?.close();
});

let databases = 0;
/** A new database (each test its own). */
async function database(): Promise<{ url: string; name: string }> {
  const name = `ledger_${++databases}`;
  return { url: await pg.createDatabase(name), name };
}

async function open(url: string): Promise<LedgerStore> {
  const store = await openLedgerStore({ kind: 'postgres', url });
  opened.push(store);
  return store;
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

async function allPages(store: LedgerStore, q: RequestsQuery): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await store.requests({ ...q, ...(cursor ? { cursor } : {}) });
    assert.ok(page.items.length <= q.limit);
    ids.push(...page.items.map((i) => i.id));
    cursor = page.next_cursor ?? undefined;
  } while (cursor);
  return ids;
}

describe('the PostgreSQL ledger store', { skip }, () => {
  test('inserts each id once: the same batch twice, overlapping batches, an id twice in one batch; resolves with how many were new', async () => {
    const db = await database();
    const store = await open(db.url);
    const records = sample(750);
    assert.equal(await store.insert(records.slice(0, 500)), 500);
    assert.equal(await store.insert(records.slice(0, 500)), 0);
    assert.equal(await store.insert(records.slice(250, 750)), 250);
    assert.equal(await store.insert([records[0]!, record({ id: 'twice' }), record({ id: 'twice', key: 'other' })]), 1);
    assert.equal(await store.insert([]), 0);
    assert.equal(await pg.psql('SELECT COUNT(*), COUNT(DISTINCT id) FROM ledger_requests', db.name), '751|751');
    assert.equal(await pg.psql("SELECT key FROM ledger_requests WHERE id = 'twice'", db.name), 'alpha');
  });

  test("the spool's lines, as the shipper hands them: the good ones go in once; a flipped byte, a line that is no record and one whose JSON is cut short are counted as corrupt", async () => {
    const store = await open((await database()).url);
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

  test("the spool's good lines go in as one JSON text the server reads, never record by record; their bodies too, each once", async () => {
    const db = await database();
    const store = await open(db.url);
    // Record by record (each line parsed here and each value bound) is only for a batch the server refuses.
    store.insert = () => Promise.reject(new Error('the lines went in record by record'));
    const records = sample(400, 5, 'fast').map((r, i) =>
      i % 2 === 0 ? { ...r, bodies: { request_body: `{"n":${i}}`, response_body: 'ok', request_truncated: false, response_truncated: i % 4 === 0, encoding: 'utf8' as const } } : r,
    );
    const bytes = Buffer.from(records.map(encodeLine).join(''));
    assert.deepEqual(await store.insertLines(bytes), { added: 400, corrupt: 0 });
    assert.deepEqual(await store.insertLines(bytes), { added: 0, corrupt: 0 }, 'sent again: nothing twice');
    for (const r of records.slice(0, 5)) assert.deepEqual(await store.request(r.id), r);
    assert.equal(await pg.psql('SELECT COUNT(*), COUNT(DISTINCT id), SUM(CASE WHEN response_truncated THEN 1 ELSE 0 END) FROM ledger_bodies', db.name), '200|200|100');
  });

  test("lines the server refuses as data go in record by record, rounded and cleaned: a number with a fraction or past a bigint (an older Sluice's spool, a provider's odd usage), a NUL, a lone surrogate", async () => {
    const db = await database();
    const store = await open(db.url);
    const odd = [
      record({ id: 'fraction', first_byte_ms: 12.5, prompt_tokens: 3.7 }),
      record({ id: 'huge', completion_tokens: 1e300, cost_micros: 2 ** 70 }),
      record({ id: 'nul', user: 'a\u0000b' }),
      record({ id: 'surrogate', tags: ['x\ud800'] }),
    ];
    for (const r of odd) {
      const batch = [...sample(10, 6, r.id), r];
      assert.deepEqual(await store.insertLines(Buffer.from(batch.map(encodeLine).join(''))), { added: 11, corrupt: 0 }, r.id);
    }
    const fraction = await store.request('fraction');
    assert.deepEqual([fraction?.first_byte_ms, fraction?.prompt_tokens], [13, 4]);
    const huge = await store.request('huge');
    assert.deepEqual([huge?.completion_tokens, huge?.cost_micros], [Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER]);
    assert.equal((await store.request('nul'))?.user, 'a\uFFFDb');
    assert.deepEqual((await store.request('surrogate'))?.tags, ['x\uFFFD']);
    assert.equal(await pg.psql('SELECT COUNT(*), COUNT(DISTINCT id) FROM ledger_requests', db.name), '44|44');
  });

  test('a batch is one transaction: one record refused (by a trigger), none of the batch is there (500, and 1500 in several statements)', async () => {
    const db = await database();
    const store = await open(db.url);
    await pg.psql(
      `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.id = 'poison' THEN RAISE EXCEPTION 'poison refused'; END IF; RETURN NEW; END $$;
       CREATE TRIGGER refuse BEFORE INSERT ON ledger_requests FOR EACH ROW EXECUTE FUNCTION refuse();`,
      db.name,
    );
    const small = [...sample(499), record({ id: 'poison' })];
    await assert.rejects(store.insert(small), /poison refused/);
    const large = [...sample(1400, 2, 'big'), record({ id: 'poison' }), ...sample(99, 3, 'after')];
    await assert.rejects(store.insert(large), /poison refused/);
    assert.equal(await pg.psql('SELECT COUNT(*) FROM ledger_requests', db.name), '0');
    assert.equal(await store.insert(large.filter((r) => r.id !== 'poison')), 1499, 'the store goes on after a refused batch');
  });

  test('a record reads back whole: attempts, tags, metadata and nulls as inserted; the columns have the types of the design', async () => {
    const db = await database();
    const store = await open(db.url);
    const records = [
      record({ id: 'full' }),
      record({ id: 'nulls', first_byte_ms: null, cost_micros: null, metadata: null, tags: [], attempts: [], usage_estimated: true, kind: 'realtime', worker: 3, generation: 2 }),
      record({ id: 'unicode', user: 'zoë ✓', metadata: { 'team name': 'ünïcode', quote: '"\'\\' }, tags: ['a,b', 'ç'], attempts: [{ target: 'an/c', outcome: 'timeout', ms: 10_000 }, { target: 'oa/g', outcome: 'success', status: 200, ms: 12.5 }] }),
      record({ id: 'big', started_at: 4_102_444_800_000, ended_at: 4_102_444_800_001, prompt_tokens: 3_000_000_000, cost_micros: 9_000_000_000_000 }),
    ];
    await store.insert(records);
    for (const r of records) assert.deepEqual(await store.request(r.id), r);
    assert.equal(await store.request('missing'), undefined);
    const types = await pg.psql(
      "SELECT column_name || ':' || data_type FROM information_schema.columns WHERE table_name = 'ledger_requests' AND column_name IN ('started_at', 'ended_at', 'cost_micros', 'attempts', 'metadata', 'tags', 'usage_estimated') ORDER BY column_name",
      db.name,
    );
    assert.deepEqual(types.split('\n'), ['attempts:jsonb', 'cost_micros:bigint', 'ended_at:bigint', 'metadata:jsonb', 'started_at:bigint', 'tags:jsonb', 'usage_estimated:boolean']);
    assert.equal(await pg.psql("SELECT attempts->1->>'ms', tags->>0, metadata->>'team name' FROM ledger_requests WHERE id = 'unicode'", db.name), '12.5|a,b|ünïcode');
  });

  test("a NUL or a lone surrogate (PostgreSQL refuses both) is made U+FFFD: one client's `user` never blocks a batch", async () => {
    const db = await database();
    const store = await open(db.url);
    assert.equal(await store.insert([record({ id: 'odd', user: 'a\u0000b\ud800', tags: ['x\u0000'], metadata: { 'k\u0000': 'v\udc00' } }), record({ id: 'plain' })]), 2);
    const back = await store.request('odd');
    assert.equal(back?.user, 'a\uFFFDb\uFFFD');
    assert.deepEqual(back?.tags, ['x\uFFFD']);
    assert.deepEqual(back?.metadata, { 'k\uFFFD': 'v\uFFFD' });
  });

  describe('queries', () => {
    const records = sample(3000);
    const from = T0 + 3_600_000;
    // Off the samples' 10-minute grid: only 'at-to' starts there.
    const to = T0 + 2 * 86_400_000 + 300_000;
    records.push(record({ id: 'at-from', started_at: from, cost_micros: 1 }), record({ id: 'at-to', started_at: to, cost_micros: 1_000_000 }));
    for (let i = 0; i < 12; i++) records.push(record({ id: `same-${i}`, started_at: T0 + 86_400_000 }));
    const all = { from: T0 - 1, to: T0 + 4 * 86_400_000 };
    let store: LedgerStore;

    before(async () => {
      if (skip) return;
      store = await open((await database()).url);
      await store.insert(records);
    });

    test('usage: every subset of key/team/model/provider/user, without a bucket and by hour and by day, sums as the records do', async () => {
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

    test('usage totals: errors are status >= 400, a missing price counts 0, the bounds are [from, to), buckets UTC', async () => {
      const [total] = await store.usage({ from, to, groupBy: [] });
      const inRange = records.filter((r) => r.started_at >= from && r.started_at < to);
      assert.equal(total?.requests, inRange.length);
      assert.equal(total?.errors, inRange.filter((r) => r.status >= 400).length);
      assert.equal(total?.cost_usd, inRange.reduce((sum, r) => sum + (r.cost_micros ?? 0), 0) / 1e6);
      const [edge] = await store.usage({ from: to, to: to + 1, groupBy: [] });
      assert.deepEqual(edge, { requests: 1, errors: 0, prompt_tokens: 11, completion_tokens: 7, cached_tokens: 0, cost_usd: 1 });
      assert.deepEqual(await store.usage({ from: 0, to: 1000, groupBy: [] }), []);
      const days = await store.usage({ from: T0, to: T0 + 2 * 86_400_000, groupBy: [], bucket: 'day' });
      assert.deepEqual(
        days.map((d) => d.bucket),
        ['2025-05-01T00:00:00.000Z', '2025-05-02T00:00:00.000Z', '2025-05-03T00:00:00.000Z'],
      );
    });

    test('requests: each filter narrows, newest first', async () => {
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

    test('requests: the cursor pages through every record exactly once, equal start times included; a summary has attempt_count', async () => {
      assert.deepEqual(await allPages(store, { ...all, limit: 7 }), expectedIds(records, all));
      assert.deepEqual(await allPages(store, { ...all, errors: true, tag: 'night', limit: 5 }), expectedIds(records, { ...all, errors: true, tag: 'night' }));
      const same = { from: T0 + 86_400_000, to: T0 + 86_400_001 };
      assert.deepEqual(await allPages(store, { ...same, limit: 5 }), expectedIds(records, same));
      const page = await store.requests({ ...all, limit: 500 });
      const item = page.items.find((i) => records.find((r) => r.id === i.id)!.attempts.length === 2)!;
      const { attempts, metadata: _, ...rest } = records.find((r) => r.id === item.id)!;
      assert.deepEqual(item, { ...rest, attempt_count: attempts.length });
    });
  });

  test('prune deletes at most `limit`, the oldest first, of the records that ended before the time', async () => {
    const store = await open((await database()).url);
    const records = Array.from({ length: 10 }, (_, i) => record({ id: `p${i}`, started_at: T0 + i * 1000, ended_at: T0 + i * 1000 + 500 }));
    records.push(record({ id: 'long', started_at: T0 - 5000, ended_at: T0 + 60_000 }));
    await store.insert(records);
    const before = T0 + 6000;
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

    test('inserted with their records in one transaction, once by id (1500 in several statements); read back with them', async () => {
      const db = await database();
      const store = await open(db.url);
      const records = sample(1500, 4, 'bb').map((r, i) => (i % 4 === 3 ? r : { ...r, bodies: bodies(i) }));
      records.push(record({ id: 'binary', bodies: bodies(0, { request_body: Buffer.from([0xff, 0, 1]).toString('base64'), encoding: 'base64' }) }));
      assert.equal(await store.insert(records), 1501);
      assert.equal(await store.insert(records.slice(0, 10)), 0);
      assert.equal(await store.insert([{ ...records[0]!, bodies: bodies(99) }]), 0);
      for (const r of [...records.slice(0, 8), records.at(-1)!]) assert.deepEqual(await store.request(r.id), r, r.id);
      assert.equal(await pg.psql('SELECT COUNT(*), COUNT(DISTINCT id) FROM ledger_bodies', db.name), '1126|1126');
      assert.equal(await pg.psql(`SELECT request_truncated, response_truncated, encoding, ended_at FROM ledger_bodies WHERE id = '${records[0]!.id}'`, db.name), `t|t|utf8|${records[0]!.ended_at}`);
      await pg.psql(
        `CREATE FUNCTION refuse_body() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.id = 'poison' THEN RAISE EXCEPTION 'poison body refused'; END IF; RETURN NEW; END $$;
         CREATE TRIGGER refuse_body BEFORE INSERT ON ledger_bodies FOR EACH ROW EXECUTE FUNCTION refuse_body();`,
        db.name,
      );
      await assert.rejects(store.insert([record({ id: 'first', bodies: bodies(1) }), record({ id: 'poison', bodies: bodies(2) })]), /poison body refused/);
      assert.equal(await pg.psql("SELECT COUNT(*) FROM ledger_requests WHERE id IN ('first', 'poison')", db.name), '0', 'the records of a batch whose body was refused are not there either');
    });

    test('pruneBodies deletes at most `limit` bodies, the oldest first, the records kept; pruning records takes their bodies', async () => {
      const db = await database();
      const store = await open(db.url);
      const records = Array.from({ length: 10 }, (_, i) => record({ id: `b${i}`, started_at: T0 + i * 1000, ended_at: T0 + i * 1000 + 500, bodies: bodies(i) }));
      await store.insert(records);
      const before = T0 + 6000;
      const withBodies = async () => (await pg.psql('SELECT id FROM ledger_bodies ORDER BY id', db.name)).split('\n').filter(Boolean);
      assert.equal(await store.pruneBodies(before, 4), 4);
      assert.deepEqual(await withBodies(), ['b4', 'b5', 'b6', 'b7', 'b8', 'b9']);
      assert.equal(await store.pruneBodies(before, 4), 2);
      assert.equal(await store.pruneBodies(before, 4), 0);
      assert.equal(await pg.psql('SELECT COUNT(*) FROM ledger_requests', db.name), '10', 'every record kept');
      assert.equal((await store.request('b0'))!.bodies, undefined);
      assert.deepEqual((await store.request('b7'))!.bodies, bodies(7));
      assert.equal(await store.prune(T0 + 8000, 100), 8);
      assert.deepEqual(await withBodies(), ['b8', 'b9']);
    });
  });

  test('claim is true once, then false, also for a second store (another gateway) on the same database, and under a race', async () => {
    const { url } = await database();
    const [one, two] = await Promise.all([open(url), open(url)]);
    assert.equal(await one!.claim('budget:alpha:2025-05:80'), true);
    assert.equal(await one!.claim('budget:alpha:2025-05:80'), false);
    assert.equal(await two!.claim('budget:alpha:2025-05:80'), false);
    assert.equal(await two!.claim('budget:alpha:2025-05:100'), true);
    const racing = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? one! : two!).claim('raced')));
    assert.equal(racing.filter(Boolean).length, 1);
  });

  describe('migrations', () => {
    test('a fresh database gets the schema (three stores opening it at once); opening it again changes nothing', async () => {
      const db = await database();
      const [first] = await Promise.all([open(db.url), open(db.url), open(db.url)]);
      await first!.insert([record({ id: 'kept' })]);
      const steps = MIGRATIONS.map((step) => String(step.version)).join('\n');
      assert.equal(steps.split('\n').at(-1), String(LEDGER_SCHEMA_VERSION));
      assert.equal(await pg.psql('SELECT version FROM ledger_schema ORDER BY version', db.name), steps);
      const indexes = await pg.psql("SELECT indexname FROM pg_indexes WHERE tablename LIKE 'ledger%' ORDER BY indexname", db.name);
      assert.deepEqual(indexes.split('\n'), ['ledger_bodies_ended', 'ledger_bodies_pkey', 'ledger_claims_pkey', 'ledger_requests_key_started', 'ledger_requests_pkey', 'ledger_requests_started', 'ledger_requests_team_started', 'ledger_schema_pkey']);
      const again = await open(db.url);
      assert.equal(await pg.psql('SELECT version FROM ledger_schema ORDER BY version', db.name), steps);
      assert.equal((await again.request('kept'))?.id, 'kept');
    });

    test('1 to 2 on a database a Sluice of version 1 made: its records kept, ledger_bodies added, bodies inserted and read back', async () => {
      const db = await database();
      const insert = insertStatement([record({ id: 'from-v1' })], 'postgres');
      // The row of version 1, its values inline (psql takes no parameters).
      const literal = (v: string | number | boolean | null) => (v === null ? 'NULL' : typeof v === 'string' ? `'${v.replaceAll("'", "''")}'` : String(v));
      const values = insert.sql.replace(/\$(\d+)/g, (_, n: string) => literal(insert.values[Number(n) - 1]!));
      await pg.psql(
        [
          'CREATE TABLE ledger_schema (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)',
          ...MIGRATIONS.find((step) => step.version === 1)!.sql('postgres'),
          'INSERT INTO ledger_schema (version, applied_at) VALUES (1, 0)',
          values,
        ].join(';\n'),
        db.name,
      );
      assert.equal(await pg.psql("SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'ledger_bodies'", db.name), '0');
      const store = await open(db.url);
      assert.equal(await pg.psql('SELECT version FROM ledger_schema ORDER BY version', db.name), '1\n2');
      assert.deepEqual(await store.request('from-v1'), record({ id: 'from-v1' }), 'a record of version 1 reads back as it was, without bodies');
      const types = await pg.psql("SELECT column_name || ':' || data_type FROM information_schema.columns WHERE table_name = 'ledger_bodies' ORDER BY ordinal_position", db.name);
      assert.deepEqual(types.split('\n'), ['id:text', 'request_body:text', 'response_body:text', 'request_truncated:boolean', 'response_truncated:boolean', 'encoding:text', 'ended_at:bigint']);
      const withBodies = record({ id: 'with-bodies', bodies: { request_body: '{"a":"zoë ✓"}', response_body: 'data: x\n\n', request_truncated: false, response_truncated: true, encoding: 'utf8' } });
      assert.equal(await store.insert([withBodies]), 1);
      assert.deepEqual(await store.request('with-bodies'), withBodies);
    });

    test('a database a newer Sluice migrated is refused, with a message that says so', async () => {
      const db = await database();
      await (await open(db.url)).close();
      await pg.psql('INSERT INTO ledger_schema (version, applied_at) VALUES (99, 0)', db.name);
      await assert.rejects(openLedgerStore({ kind: 'postgres', url: db.url }), new RegExp(`schema version 99, newer than this Sluice's ${LEDGER_SCHEMA_VERSION}`));
    });
  });

  describe('the server going away', () => {
    let server: PostgresServer;
    before(async () => {
      if (skip) return;
      server = await startPostgres();
    });
    after(() => server?.close());

    /** Connections the stores hold, counted by the server. */
    const connections = async () => Number(await server.psql("SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = 'sluice-ledger'"));

    test('stopped: each call rejects within the connect timeout, the process goes on; started again: the next insert goes in, no connection leaked', { timeout: 30_000 }, async () => {
      const store = await openLedgerStore({ kind: 'postgres', url: server.url, poolSize: 4 });
      opened.push(store);
      const records = sample(60, 9, 'outage');
      // Connections open and idle in the pool when the server stops: their end must not crash the process.
      await Promise.all([0, 1, 2, 3].map((i) => store.insert(records.slice(i * 5, i * 5 + 5))));
      assert.ok((await connections()) >= 1);
      await server.stop();
      await new Promise((resolve) => setTimeout(resolve, 200));
      for (let i = 0; i < 10; i++) {
        const startedAt = performance.now();
        await assert.rejects(store.insert(records.slice(20 + i, 21 + i)));
        assert.ok(performance.now() - startedAt < 2500, `rejected after ${(performance.now() - startedAt).toFixed(0)} ms`);
      }
      await assert.rejects(store.usage({ from: 0, to: Date.now(), groupBy: [] }));
      await assert.rejects(store.claim('down'));
      await server.start();
      // More calls than the pool has connections: a client leaked by a failure would leave them waiting.
      const added = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => store.insert(records.slice(30 + i * 5, 35 + i * 5))));
      assert.deepEqual(added, [5, 5, 5, 5, 5, 5]);
      assert.equal(await server.psql("SELECT COUNT(*) FROM ledger_requests WHERE id LIKE 'outage-%'"), '50');
      assert.ok((await connections()) <= 4, 'at most the pool');
    });

    test('silent (a server that accepts and never answers): a call rejects after the 2 s connect timeout; back: it goes on', { timeout: 15_000 }, async (t) => {
      const store = await openLedgerStore({ kind: 'postgres', url: server.url, poolSize: 2 });
      opened.push(store);
      await server.stop();
      const sockets = new Set<Socket>();
      const silent = createServer((socket) => {
        sockets.add(socket);
        socket.on('error', () => {});
      });
      const quiet = async () => {
        for (const s of sockets) s.destroy();
        if (silent.listening) await new Promise((resolve) => silent.close(resolve));
      };
      t.after(quiet);
      await new Promise<void>((resolve) => silent.listen(server.port, '127.0.0.1', resolve));
      const startedAt = performance.now();
      await assert.rejects(store.insert([record({ id: 'silent-1' })]), /timeout/i);
      const took = performance.now() - startedAt;
      assert.ok(took >= 1900 && took < 3500, `rejected after ${took.toFixed(0)} ms`);
      await quiet();
      await server.start();
      assert.equal(await store.insert([record({ id: 'silent-2' })]), 1);
    });
  });
});
