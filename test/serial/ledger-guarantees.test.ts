// The usage ledger's guarantees under load, against the built program with a real SQLite file and a
// real PostgreSQL (started here on a free port): a SIGTERM at the default ledger settings leaves
// every answered request in the store; after a SIGKILL the next start ships what the dead process
// spooled; PostgreSQL down for 30 s loses nothing (said once, caught up after); three gateways on one
// database add up per team; workers recycled and a hot restart lose and double nothing; a full
// spool refuses (503 ledger_full) or drops (counted, logged at most every 10 s). Each client keeps
// the `x-request-id` and the usage of every answer it got; the store is read directly (node:sqlite,
// read-only, or psql), never only through the gateway's API. Timing-heavy: about a minute and a half.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Agent, request } from 'undici';
import { eventually, metricValue, scrape, startGateway, stopWithGenerations, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { postgresCheck, startPostgres, type PostgresServer } from '../support/postgres.ts';

const KEYS = {
  a1: 'sk-guarantee-a1-0123456789',
  a2: 'sk-guarantee-a2-0123456789',
  b1: 'sk-guarantee-b1-0123456789',
  b2: 'sk-guarantee-b2-0123456789',
  /** A key whose metadata makes each record about 4 KB: a spool of 1 MB fills within a few hundred requests. */
  big: 'sk-guarantee-big-012345678',
} as const;
type KeyName = keyof typeof KEYS;
const TEAM_OF: Record<KeyName, string> = { a1: 'alpha', a2: 'alpha', b1: 'beta', b2: 'beta', big: '' };
/** Per million tokens: tokens × price is micro-dollars. */
const PRICE = { input: 3, output: 7 };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

let mock: MockUpstream;
const dirs: string[] = [];
before(async () => {
  mock = await startMockUpstream({ record: false });
});
after(async () => {
  await mock?.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-ledger-guarantees-'));
  dirs.push(dir);
  return dir;
}

function config(ledger: Record<string, unknown>, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    workers: 1,
    shutdown: { min_drain_secs: 1 },
    log: { level: 'info', access_log: false },
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' }],
    models: [{ name: 'm', provider: 'up' }],
    prices: { m: PRICE },
    teams: [{ name: 'alpha' }, { name: 'beta' }],
    keys: [
      { name: 'a1', key: KEYS.a1, team: 'alpha' },
      { name: 'a2', key: KEYS.a2, team: 'alpha' },
      { name: 'b1', key: KEYS.b1, team: 'beta' },
      { name: 'b2', key: KEYS.b2, team: 'beta' },
      { name: 'big', key: KEYS.big, metadata: { note: 'x'.repeat(3500) } },
    ],
    ledger,
    ...extra,
  };
}

/** A request its client got a whole answer to. */
interface Answered {
  id: string;
  status: number;
  code: string;
  key: KeyName;
  prompt: number;
  completion: number;
  /** Epoch ms when the answer was complete. */
  doneAt: number;
}

/** What clients saw: whole answers, and requests cut (sent, or maybe sent, and no whole answer). */
interface LoadResult {
  answered: Answered[];
  /** Requests that may have reached the gateway without a whole answer (a reset, a stream cut short). */
  cut: number;
  /** Connections refused: nothing was sent. */
  refused: number;
  /** The first few reasons of the cuts. */
  reasons: string[];
}

interface LoadOptions {
  /** The gateways' proxy URLs: client i sends to urls[i % n]. */
  urls: readonly string[];
  clients: number;
  keys: readonly KeyName[];
  /** Pause between a client's requests (default 0). */
  pauseMs?: number;
  /** Every `streamEvery`-th request of a client is a stream (default 3; 0: none). */
  streamEvery?: number;
}

interface Load {
  readonly result: LoadResult;
  /** Resolves once `n` more answers have come. */
  answers(n: number, timeoutMs?: number): Promise<void>;
  stop(): Promise<LoadResult>;
}

/** The usage an answer reported: a JSON body's, or a stream's `usage` chunk. */
function usageOf(text: string): { prompt: number; completion: number } {
  const read = (json: string) => {
    const usage = (JSON.parse(json) as { usage?: { prompt_tokens: number; completion_tokens: number } | null }).usage;
    return usage ? { prompt: usage.prompt_tokens, completion: usage.completion_tokens } : undefined;
  };
  if (text.startsWith('{')) return read(text) ?? { prompt: 0, completion: 0 };
  let found = { prompt: 0, completion: 0 };
  for (const line of text.split('\n')) if (line.startsWith('data: {')) found = read(line.slice(6)) ?? found;
  return found;
}

/**
 * Clients sending back to back, each on its own keep-alive connection, JSON answers and short
 * streams with usage that varies from request to request; each answer kept with its id and usage.
 */
function startLoad(options: LoadOptions): Load {
  const result: LoadResult = { answered: [], cut: 0, refused: 0, reasons: [] };
  const streamEvery = options.streamEvery ?? 3;
  let running = true;
  const agents: Agent[] = [];
  const clients = Array.from({ length: options.clients }, async (_, c) => {
    const agent = new Agent({ connections: 1, keepAliveTimeout: 30_000 });
    agents.push(agent);
    for (let i = 0; running; i++) {
      const url = options.urls[c % options.urls.length]!;
      const key = options.keys[(c + i) % options.keys.length]!;
      const stream = streamEvery > 0 && i % streamEvery === streamEvery - 1;
      const usage = { prompt: 5 + ((c * 31 + i * 7) % 40), completion: 1 + ((c * 17 + i * 13) % 30) };
      const scenario = stream ? { usage, chunks: 4, sseIntervalMs: 15 } : { usage, headersDelayMs: (c * 7 + i * 11) % 25 };
      const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: `client ${c} request ${i}` }], ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}) });
      let id: string | undefined;
      try {
        const res = await request(`${url}/v1/chat/completions`, {
          method: 'POST',
          dispatcher: agent,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${KEYS[key]}`, ...mockHeader(scenario) },
          body,
        });
        id = String(res.headers['x-request-id']);
        const text = await res.body.text();
        // A stream the gateway had to end early carries an error event instead of its end.
        if (res.statusCode === 200 && stream && !text.trimEnd().endsWith('data: [DONE]')) throw new Error(`stream ${id} cut: ${text.slice(-120)}`);
        const code = res.statusCode === 200 ? '' : String((JSON.parse(text) as { error?: { code?: string } }).error?.code ?? '');
        result.answered.push({ id, status: res.statusCode, code, key, ...(res.statusCode === 200 ? usageOf(text) : { prompt: 0, completion: 0 }), doneAt: Date.now() });
        if (res.statusCode === 503) await sleep(20);
      } catch (error) {
        const code = (error as { code?: string }).code;
        if (code === 'ECONNREFUSED') {
          result.refused++;
          await sleep(20);
        } else {
          result.cut++;
          if (result.reasons.length < 8) result.reasons.push(`${code ?? ''} ${(error as Error).message}`.trim());
        }
      }
      if (options.pauseMs) await sleep(options.pauseMs);
    }
  });
  return {
    result,
    async answers(n, timeoutMs = 20_000) {
      const target = result.answered.length + n;
      await eventually(() => result.answered.length >= target, timeoutMs, `${n} more answers`);
    },
    async stop() {
      running = false;
      await Promise.all(clients);
      await Promise.all(agents.map((a) => a.destroy()));
      return result;
    },
  };
}

/** The ids of the SQLite store and how many rows it has (a connection of the test's own, read-only). */
function sqliteIds(file: string): { ids: Set<string>; rows: number; distinct: number } {
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    const ids = new Set(db.prepare('SELECT id FROM ledger_requests').all().map((r) => String(r.id)));
    const counts = db.prepare('SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d FROM ledger_requests').get() as { n: number; d: number };
    return { ids, rows: Number(counts.n), distinct: Number(counts.d) };
  } finally {
    db.close();
  }
}

async function pgIds(pg: PostgresServer, database: string): Promise<{ ids: Set<string>; rows: number; distinct: number }> {
  const [rows, distinct] = (await pg.psql('SELECT COUNT(*), COUNT(DISTINCT id) FROM ledger_requests', database)).split('|').map(Number);
  const text = await pg.psql('SELECT id FROM ledger_requests', database);
  return { ids: new Set(text === '' ? [] : text.split('\n')), rows: rows!, distinct: distinct! };
}

/**
 * Every answered id is in the store, none twice, and what the store has that no client was answered
 * is at most what the clients saw cut.
 */
function assertComplete(store: { ids: Set<string>; rows: number; distinct: number }, load: LoadResult, answered: readonly Answered[] = load.answered): void {
  const missing = answered.filter((a) => !store.ids.has(a.id));
  assert.deepEqual(missing.map((a) => `${a.id} (status ${a.status}, done ${a.doneAt})`), [], `${missing.length} of ${answered.length} answered requests are not in the store`);
  assert.equal(store.rows, store.distinct, 'no record twice');
  const answeredIds = new Set(load.answered.map((a) => a.id));
  const unknown = [...store.ids].filter((id) => !answeredIds.has(id));
  assert.ok(unknown.length <= load.cut, `${unknown.length} records no client was answered, ${load.cut} requests cut: ${load.reasons.join('; ')}`);
}

async function lag(gw: GatewayProcess): Promise<number | undefined> {
  return metricValue(await scrape(gw), 'sluice_ledger_lag_records');
}

const pg = postgresCheck();

describe('SQLite', () => {
  test('4. L9 (docs/graceful-shutdown.md, the exit step ledger_flush): SIGTERM under load at the default ledger settings: after the exit every answered id is in the store, none twice', { timeout: 60_000 }, async () => {
    // `ledger: {}`: the SQLite file and the spool beside the config file, fsync batch, 1 GiB, drop.
    const gw = await startGateway({ config: config({}) });
    const file = `${gw.configFile}.ledger.sqlite`;
    dirs.push(join(gw.configFile, '..'));
    const load = startLoad({ urls: [gw.proxyUrl], clients: 8, keys: ['a1', 'a2', 'b1', 'b2'] });
    let lock: DatabaseSync | undefined;
    try {
      await sleep(2000);
      await load.answers(50);
      // The store slow at the signal: kept busy by a writer of the test's own (it writes nothing)
      // through the drain window, so that records wait in the spool until the last moments.
      lock = new DatabaseSync(file);
      lock.exec('BEGIN IMMEDIATE');
      await sleep(500);
      const waiting = (await lag(gw)) ?? 0;
      assert.ok(waiting > 50, `${waiting} records waiting at the signal`);
      gw.signal('SIGTERM');
      // Through the window (1 s) the clients go on; then they stop, and the gateway exits once nothing is in flight.
      await sleep(1500);
      lock.exec('ROLLBACK');
      lock.close();
      lock = undefined;
      const [exit] = await Promise.all([gw.exited, load.stop()]);
      assert.equal(exit.code, 0, gw.stderr().slice(-2000));
      const result = await load.stop();
      assert.ok(result.answered.length >= 200, `${result.answered.length} answers`);
      assert.ok(result.answered.every((a) => a.status === 200), `statuses: ${[...new Set(result.answered.map((a) => a.status))].join(', ')}`);
      // Requests answered right up to the exit: the flush is what put the last ones in the store.
      const last = Math.max(...result.answered.map((a) => a.doneAt));
      assert.ok(exit.at - last < 1000, `the last answer ${exit.at - last} ms before the exit`);
      assert.ok(!gw.logs.some((l) => l.event === 'ledger_flush_incomplete'), 'the flush shipped everything');
      assertComplete(sqliteIds(file), result);
    } finally {
      lock?.close();
      await load.stop();
      await gw.stop();
    }
  });

  test('5. SIGKILL under load: the next start on the same files ships what was spooled; every id answered 100 ms before the kill is in the store, none twice', { timeout: 60_000 }, async () => {
    const dir = tempDir();
    const ledger = { sqlite_path: join(dir, 'ledger.sqlite'), spool_dir: join(dir, 'spool') };
    const first = await startGateway({ config: config(ledger) });
    const load = startLoad({ urls: [first.proxyUrl], clients: 8, keys: ['a1', 'b1'] });
    let second: GatewayProcess | undefined;
    let lock: DatabaseSync | undefined;
    try {
      await sleep(1000);
      await load.answers(50);
      await eventually(() => sqliteIds(ledger.sqlite_path).rows > 0, 10_000, 'the first records in the store');
      // The store kept busy by a writer of the test's own (it writes nothing): what is answered from
      // now on waits in the spool, and only the spool has it when the process is killed.
      lock = new DatabaseSync(ledger.sqlite_path);
      lock.exec('BEGIN IMMEDIATE');
      await sleep(1500);
      const waiting = (await lag(first)) ?? 0;
      assert.ok(waiting > 100, `${waiting} records waiting in the spool at the kill`);
      const killedAt = Date.now();
      first.signal('SIGKILL');
      await first.exited;
      lock.exec('ROLLBACK');
      lock.close();
      lock = undefined;
      const result = await load.stop();
      const before = result.answered.filter((a) => a.doneAt < killedAt - 100);
      assert.ok(before.length >= 200, `${before.length} answers before the kill`);
      second = await startGateway({ config: config(ledger) });
      const started = second;
      // Caught up: no lag, and the store's count still.
      let count = -1;
      await eventually(
        async () => {
          const now = sqliteIds(ledger.sqlite_path).rows;
          const settled = (await lag(started)) === 0 && now === count;
          count = now;
          return settled;
        },
        20_000,
        'the new gateway to ship the spool',
      );
      const store = sqliteIds(ledger.sqlite_path);
      assertComplete(store, { ...result, cut: result.cut + result.answered.length - before.length }, before);
      const claimed = metricValue(await scrape(started), 'sluice_ledger_shipped_total') ?? 0;
      assert.ok(claimed >= waiting * 0.9, `the new gateway shipped what the dead one left (${claimed} of ${waiting})`);
      // The store was there all along (only still opening when the orphans were first sent): no outage to tell of.
      assert.deepEqual(started.logs.filter((l) => l.event === 'ledger_store_unavailable').map((l) => l.reason), [], 'no ledger_store_unavailable from a start whose store opens');
    } finally {
      lock?.close();
      await load.stop();
      await first.stop();
      await second?.stop();
    }
  });

  test('8. workers recycled and a hot restart under load: every answered id is in the store, none twice; records name the worker and the generation', { timeout: 90_000 }, async () => {
    const dir = tempDir();
    const ledger = { sqlite_path: join(dir, 'ledger.sqlite'), spool_dir: join(dir, 'spool') };
    const gw = await startGateway({
      config: config(ledger, {
        workers: 2,
        workers_recycle: { max_requests: 150 },
        hot_restart: { enabled: true, start_timeout_secs: 30 },
        shutdown: { min_drain_secs: 0 },
      }),
    });
    const load = startLoad({ urls: [gw.proxyUrl], clients: 8, keys: ['a1', 'a2', 'b1', 'b2'] });
    try {
      await gw.waitForLog((l) => l.event === 'worker_recycled', 30_000);
      gw.signal('SIGUSR2');
      await gw.waitForLog((l) => l.event === 'hot_restart_done' && l.to_generation === 2, 30_000);
      await gw.waitForLog((l) => l.event === 'generation_exited' && l.exited_generation === 1, 30_000);
      await load.answers(300, 30_000);
      const result = await load.stop();
      gw.signal('SIGTERM');
      const exit = await gw.exited;
      assert.equal(exit.code, 0, gw.stderr().slice(-2000));
      assert.deepEqual(result.reasons, [], 'no request cut');
      assert.equal(result.refused, 0, 'no connection refused');
      assert.ok(result.answered.every((a) => a.status === 200));
      const store = sqliteIds(ledger.sqlite_path);
      assertComplete(store, result);
      const db = new DatabaseSync(ledger.sqlite_path, { readOnly: true });
      const places = db.prepare('SELECT worker, generation, COUNT(*) AS n FROM ledger_requests GROUP BY worker, generation ORDER BY worker, generation').all();
      db.close();
      const seen = places.map((p) => `${String(p.worker)}/${String(p.generation)}`);
      assert.deepEqual(seen, ['1/1', '1/2', '2/1', '2/2'], `worker/generation of the records: ${JSON.stringify(places)}`);
    } finally {
      await load.stop();
      await stopWithGenerations(gw);
    }
  });
});

describe('PostgreSQL', { skip: pg.skip }, () => {
  let server: PostgresServer;
  let databases = 0;
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server?.close();
  });
  const database = async () => {
    const name = `guarantees_${++databases}`;
    return { name, url: await server.createDatabase(name) };
  };
  const postgresLedger = (url: string, extra: Record<string, unknown> = {}) => ({ store: 'postgres', postgres: { url }, spool_dir: join(tempDir(), 'spool'), ...extra });

  test('6. PostgreSQL down for 30 s under load: the lag grows, the outage is logged once; back: the lag goes to 0 and every answered id is there, none twice', { timeout: 120_000 }, async () => {
    const db = await database();
    const gw = await startGateway({ config: config(postgresLedger(db.url)) });
    const load = startLoad({ urls: [gw.proxyUrl], clients: 4, keys: ['a1', 'b2'], pauseMs: 20 });
    try {
      await load.answers(50);
      await eventually(async () => (metricValue(await scrape(gw), 'sluice_ledger_shipped_total') ?? 0) >= 20, 10_000, 'shipping before the outage');
      const downAt = Date.now();
      await server.stop();
      let highest = 0;
      while (Date.now() - downAt < 30_000) {
        highest = Math.max(highest, (await lag(gw)) ?? 0);
        await sleep(1000);
      }
      const during = load.result.answered.filter((a) => a.doneAt > downAt).length;
      assert.ok(during > 100, `${during} answers during the outage`);
      assert.ok(highest > 0, `sluice_ledger_lag_records rose (highest ${highest})`);
      const since = (event: string, from: number, to = Infinity) => gw.logs.filter((l) => l.event === event && Date.parse(String(l.time)) >= from && Date.parse(String(l.time)) < to);
      assert.equal(since('ledger_store_unavailable', downAt).length, 1, 'the outage is logged once, not once per retry');
      await server.start();
      await load.answers(50);
      const result = await load.stop();
      await eventually(async () => (await lag(gw)) === 0, 30_000, 'the lag back to 0');
      assert.ok(result.answered.every((a) => a.status === 200));
      assert.equal(result.cut, 0, result.reasons.join('; '));
      assertComplete(await pgIds(server, db.name), result);
      assert.equal(since('ledger_store_recovered', downAt).length, 1, 'the recovery is logged once');
      assert.equal(since('ledger_store_unavailable', downAt).length, 1);
      // A store that was up from the start had no outage before this one: nothing said of one.
      assert.deepEqual(since('ledger_store_unavailable', 0, downAt).map((l) => l.reason), [], 'no ledger_store_unavailable while the store was up (at the start, while it opened)');
    } finally {
      await load.stop();
      await gw.stop();
      if (!server.running) await server.start();
    }
  });

  test('7. three gateways on one PostgreSQL: per-team tokens and cost in the database, and GET /usage?group_by=team, equal what the clients were answered', { timeout: 60_000 }, async () => {
    const db = await database();
    const startedAt = Date.now();
    const gateways = await Promise.all([0, 1, 2].map(() => startGateway({ config: config(postgresLedger(db.url)) })));
    const load = startLoad({ urls: gateways.map((g) => g.proxyUrl), clients: 6, keys: ['a1', 'b1', 'a2', 'b2'] });
    try {
      await sleep(2000);
      await load.answers(100);
      const result = await load.stop();
      assert.equal(result.cut, 0, result.reasons.join('; '));
      assert.ok(result.answered.every((a) => a.status === 200));
      await eventually(async () => (await pgIds(server, db.name)).rows === result.answered.length, 15_000, 'every record in PostgreSQL');
      const expected = new Map<string, { prompt: number; completion: number; micros: number; requests: number }>();
      for (const a of result.answered) {
        const team = TEAM_OF[a.key];
        const sums = expected.get(team) ?? { prompt: 0, completion: 0, micros: 0, requests: 0 };
        sums.prompt += a.prompt;
        sums.completion += a.completion;
        sums.micros += a.prompt * PRICE.input + a.completion * PRICE.output;
        sums.requests++;
        expected.set(team, sums);
      }
      assert.deepEqual([...expected.keys()].sort(), ['alpha', 'beta']);
      const fromPg = (await server.psql('SELECT team, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(cost_micros) FROM ledger_requests GROUP BY team ORDER BY team', db.name)).split('\n');
      assert.deepEqual(
        fromPg,
        ['alpha', 'beta'].map((team) => {
          const s = expected.get(team)!;
          return `${team}|${s.requests}|${s.prompt}|${s.completion}|${s.micros}`;
        }),
      );
      // Each of the three shipped its own part.
      for (const g of gateways) assert.ok((metricValue(await scrape(g), 'sluice_ledger_shipped_total') ?? 0) > 0, 'every gateway shipped records');
      const res = await fetch(`${gateways[1]!.adminUrl}/usage?group_by=team&from=${startedAt - 1000}&to=${Date.now() + 60_000}`);
      const usage = (await res.json()) as { rows: { team: string; requests: number; prompt_tokens: number; completion_tokens: number; cost_usd: number }[] };
      assert.deepEqual(
        usage.rows.map((r) => [r.team, r.requests, r.prompt_tokens, r.completion_tokens]).sort(),
        ['alpha', 'beta'].map((team) => [team, expected.get(team)!.requests, expected.get(team)!.prompt, expected.get(team)!.completion]),
      );
      for (const row of usage.rows) assert.ok(Math.abs(row.cost_usd - expected.get(row.team)!.micros / 1e6) < 1e-9, `${row.team}: ${row.cost_usd}`);
    } finally {
      await load.stop();
      await Promise.all(gateways.map((g) => g.stop()));
    }
  });

  test('9a. on_full refuse, a spool of 1 MB and PostgreSQL stopped: 503 ledger_full once the spool is full; served again once the store is back and the spool drained', { timeout: 90_000 }, async () => {
    const db = await database();
    const gw = await startGateway({ config: config(postgresLedger(db.url, { spool_max_mb: 1, on_full: 'refuse' })) });
    // Eight clients: batches of the spool big enough that its count of bytes is tested while one is written.
    const load = startLoad({ urls: [gw.proxyUrl], clients: 8, keys: ['big'], streamEvery: 0 });
    try {
      await load.answers(20);
      await eventually(async () => (metricValue(await scrape(gw), 'sluice_ledger_shipped_total') ?? 0) >= 20, 10_000, 'shipping before the outage');
      const downAt = Date.now();
      await server.stop();
      const refused = () => load.result.answered.filter((a) => a.status === 503);
      await eventually(() => refused().length >= 20, 30_000, '503s once the spool is full');
      assert.ok(refused().every((a) => a.code === 'ledger_full'), `codes: ${[...new Set(refused().map((a) => a.code))].join(', ')}`);
      const firstRefusal = load.result.answered.indexOf(refused()[0]!);
      const servedBefore = load.result.answered.slice(0, firstRefusal).filter((a) => a.status === 200 && a.doneAt > downAt).length;
      // 0.95 of 1 MiB in records of about 4.4 KB each, less what the segment being written holds of records shipped before.
      assert.ok(servedBefore >= 100 && servedBefore <= 300, `${servedBefore} served in the outage before the first refusal`);
      assert.ok((metricValue(await scrape(gw), 'sluice_ledger_refused_total') ?? 0) >= 20);
      await server.start();
      const backAt = load.result.answered.length;
      await eventually(() => load.result.answered.slice(backAt).filter((a) => a.status === 200).length >= 20, 30_000, 'served again');
      const result = await load.stop();
      await eventually(async () => (await lag(gw)) === 0, 20_000, 'the lag back to 0');
      // Every request served has its record: a full spool refused requests, it never dropped a record.
      assert.equal(metricValue(await scrape(gw), 'sluice_ledger_dropped_total'), 0, 'refused, never dropped');
      assertComplete(await pgIds(server, db.name), result, result.answered.filter((a) => a.status === 200));
    } finally {
      await load.stop();
      await gw.stop();
      if (!server.running) await server.start();
    }
  });

  test('9b. on_full drop, a spool of 1 MB and PostgreSQL stopped: requests go on, sluice_ledger_dropped_total rises, ledger_spool_full at most once per 10 s', { timeout: 90_000 }, async () => {
    const db = await database();
    const gw = await startGateway({ config: config(postgresLedger(db.url, { spool_max_mb: 1, on_full: 'drop' })) });
    const load = startLoad({ urls: [gw.proxyUrl], clients: 4, keys: ['big'], streamEvery: 0, pauseMs: 5 });
    try {
      await load.answers(20);
      await eventually(async () => (metricValue(await scrape(gw), 'sluice_ledger_shipped_total') ?? 0) >= 20, 10_000, 'shipping before the outage');
      await server.stop();
      const dropped = async () => metricValue(await scrape(gw), 'sluice_ledger_dropped_total') ?? 0;
      await eventually(async () => (await dropped()) > 0, 30_000, 'records dropped');
      const fullAt = Date.now();
      const first = await dropped();
      await sleep(12_000);
      const later = await dropped();
      assert.ok(later > first, `dropped_total rose: ${first} → ${later}`);
      const during = load.result.answered.filter((a) => a.doneAt > fullAt);
      assert.ok(during.length > 100 && during.every((a) => a.status === 200), `${during.length} answers after the spool was full, all 200`);
      const lines = gw.logs.filter((l) => l.event === 'ledger_spool_full');
      const times = lines.map((l) => Date.parse(String(l.time)));
      assert.ok(lines.length >= 2 && lines.length <= 3, `${lines.length} ledger_spool_full lines in about 12 s`);
      for (let i = 1; i < times.length; i++) assert.ok(times[i]! - times[i - 1]! >= 10_000, `ledger_spool_full lines ${times[i]! - times[i - 1]!} ms apart`);
      assert.ok(lines.slice(1).every((l) => Number(l.dropped) > 1), 'each later line counts the records dropped since the one before');
      await load.stop();
    } finally {
      await load.stop();
      await gw.stop();
      if (!server.running) await server.start();
    }
  });
});
