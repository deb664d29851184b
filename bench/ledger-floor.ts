// The usage ledger's floor (#28): what each step of a record's way costs at the least on this
// machine, each step alone in a loop over the same records in one process, with nothing else
// running in it. On the event loop: the record's JSON (V8's JSON.stringify, and a serializer of
// our own beside it, checked to write the same text), and the spool's whole `append` (the JSON,
// its line encoded into the pending buffer, its CRC-32). In the SQLite store's thread, as
// sqlite-thread.ts does them: the lines' checksums, their parse, the rows' values, and node:sqlite's
// insert of each row into a table of the ledger's 30 columns three ways: no key and no index, the
// key only, and the ledger's own schema (the key and its three indexes); then the SQLite store's
// own thread doing its whole `insertLines` of each batch (that thread's CPU, read from /proc). A
// step's figure is a floor for any ledger that does that step: the whole path costs at least
// their sum. With PostgreSQL installed (Debian's postgresql; a server of its own on
// a loopback port, test/support/postgres.ts), also what the PostgreSQL store's INSERT of a batch's
// lines (one JSON text the server reads) costs the server: its backend's CPU per record.
//
//   npm run build && node bench/ledger-floor.ts [--records N] [--rounds N]
// Writes bench/results/ledger-floor.md.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { parseArgs } from 'node:util';
import { DatabaseSync, type SQLInputValue } from 'node:sqlite';
import type { LedgerRecord } from '../src/ledger/record.ts';
import { idMaker, sampleRecord } from './ledger-sample.ts';
import { median } from './stats.ts';
import { postgresCheck, startPostgres } from '../test/support/postgres.ts';

const ROOT = resolve(import.meta.dirname, '..');
const { values } = parseArgs({ options: { records: { type: 'string', default: '50000' }, rounds: { type: 'string', default: '5' } } });
const N = Number(values.records);
const ROUNDS = Number(values.rounds);
/** Records per transaction, as the shipper sends them (a batch of at most 500). */
const BATCH = 500;

const dist = async <T>(path: string): Promise<T> => (await import(join(ROOT, 'dist', path))) as T;
const { encodeLine, checkLines, recordsOf } = await dist<typeof import('../src/ledger/line.ts')>('ledger/line.js');
const { COLUMNS, col, recordRow, POSTGRES_JSON_INSERT } = await dist<typeof import('../src/ledger/store.ts')>('ledger/store.js');
const { migrationSql, schemaTableSql } = await dist<typeof import('../src/ledger/migrations.ts')>('ledger/migrations.js');
const { Spool } = await dist<typeof import('../src/ledger/spool.ts')>('ledger/spool.js');
const { openLedgerStore } = await dist<typeof import('../src/ledger/open-store.ts')>('ledger/open-store.js');

const newId = await idMaker('v7');
const start = Date.now();
const records: LedgerRecord[] = Array.from({ length: N }, (_, i) => sampleRecord(newId, start + i));
const lines = records.map((r) => encodeLine(r));
/** The lines as the shipper hands them over: a chunk of whole lines per batch. */
const chunks: Buffer[] = [];
for (let i = 0; i < N; i += BATCH) chunks.push(Buffer.from(lines.slice(i, i + BATCH).join('')));
/** Each batch's lines as `checkLines` gives them to the parse: their JSON. */
const jsonBatches: string[][] = chunks.map((c) => checkLines(c).lines);
const parsed = recordsOf(checkLines(Buffer.from(lines.join(''))).lines).records;
const rows = parsed.map((r) => recordRow(r, 'sqlite') as SQLInputValue[]);

/** A JSON serializer of our own for the record (template strings; a string checked for what JSON escapes). */
const ESCAPED = /[\u0000-\u001f"\\\ud800-\udfff]/;
const str = (v: string): string => (ESCAPED.test(v) ? JSON.stringify(v) : `"${v}"`);
function ownJson(r: LedgerRecord): string {
  let attempts = '[';
  for (let i = 0; i < r.attempts.length; i++) {
    const a = r.attempts[i]!;
    attempts += `${i > 0 ? ',' : ''}{"target":${str(a.target)},"outcome":${str(a.outcome)}${a.status === undefined ? '' : `,"status":${a.status}`},"ms":${a.ms}}`;
  }
  attempts += ']';
  const tags = `[${r.tags.map(str).join(',')}]`;
  return (
    `{"id":${str(r.id)},"kind":${str(r.kind)},"started_at":${r.started_at},"first_byte_ms":${r.first_byte_ms},"ended_at":${r.ended_at},` +
    `"key":${str(r.key)},"team":${str(r.team)},"user":${str(r.user)},"metadata":${JSON.stringify(r.metadata)},"tags":${tags},` +
    `"api":${str(r.api)},"endpoint":${str(r.endpoint)},"model":${str(r.model)},"route":${str(r.route)},"provider":${str(r.provider)},` +
    `"served_model":${str(r.served_model)},"attempts":${attempts},"status":${r.status},"error":${str(r.error)},` +
    `"prompt_tokens":${r.prompt_tokens},"completion_tokens":${r.completion_tokens},"cached_tokens":${r.cached_tokens},` +
    `"cache_write_tokens":${r.cache_write_tokens},"usage_estimated":${r.usage_estimated},"cost_micros":${r.cost_micros},` +
    `"bytes_in":${r.bytes_in},"bytes_out":${r.bytes_out},"listener":${str(r.listener)},"worker":${r.worker},"generation":${r.generation}}`
  );
}
if (ownJson(records[0]!) !== JSON.stringify(records[0])) throw new Error('the serializer of our own does not write what JSON.stringify writes');

/** /proc's CPU times are in clock ticks. */
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

const TMP = mkdtempSync(join(tmpdir(), 'sluice-ledger-floor-'));
process.on('exit', () => rmSync(TMP, { recursive: true, force: true }));

/** A fresh database file: the ledger's schema, or a table of its columns made by `ddl`. */
function database(name: string, ddl?: string): DatabaseSync {
  const db = new DatabaseSync(join(TMP, `${name}.sqlite`));
  // As the store's thread opens it (sqlite-thread.ts).
  db.exec('PRAGMA journal_mode = WAL');
  db.exec('PRAGMA synchronous = NORMAL');
  if (ddl !== undefined) db.exec(ddl);
  else {
    db.exec(schemaTableSql('sqlite'));
    for (const sql of migrationSql(0, 'sqlite', Date.now())) db.exec(sql);
  }
  return db;
}
const INSERT = `INSERT INTO ledger_requests (${COLUMNS.map(col).join(', ')}) VALUES (${COLUMNS.map(() => '?').join(', ')})`;
/** The store's own statement (sqlite-thread.ts): a record already there is skipped. */
const INSERT_ONCE = `${INSERT} ON CONFLICT (id) DO NOTHING`;
const columnsDdl = (id: string) => `CREATE TABLE ledger_requests (${COLUMNS.map((c) => (c === 'id' ? id : col(c))).join(', ')})`;

/** Each row inserted by `sql`, BATCH to a transaction. */
function insertAll(db: DatabaseSync, sql: string, each: (i: number) => SQLInputValue[]): void {
  const insert = db.prepare(sql);
  for (let i = 0; i < N; i += BATCH) {
    db.exec('BEGIN IMMEDIATE');
    for (let j = i; j < Math.min(N, i + BATCH); j++) insert.run(...each(j));
    db.exec('COMMIT');
  }
}

/** What a step times, and whose CPU (this thread's unless `cpu` says otherwise: µs so far). */
interface Work {
  work(): unknown;
  cpu?: () => number;
}

interface Step {
  readonly name: string;
  readonly where: 'event loop' | 'store thread';
  /** Makes what the step needs (a database file, a store) before the timing; its work is timed. */
  run(round: number): Work | Promise<Work>;
}

let sink = 0;
/** Where the JSON steps copy their text (as the spool's append copies it into its pending buffer). */
const scratch = Buffer.alloc(1 << 16);
/** Each database file its own name. */
let databases = 0;
/** Closed after each round, out of the timing. */
const closing: (() => Promise<void>)[] = [];

/** A step that is a loop over what was made before the timing. */
const loop = (name: string, where: Step['where'], body: () => void): Step => ({ name, where, run: () => ({ work: body }) });

/** A step that inserts every row into a fresh database (the ledger's schema, or `ddl`'s table) with `sql`. */
const inserting = (name: string, ddl: string | undefined, sql: string, values: (i: number) => SQLInputValue[]): Step => ({
  name,
  where: 'store thread',
  run: (round) => {
    const db = database(`db-${++databases}-${round}`, ddl);
    return {
      work: () => {
        insertAll(db, sql, values);
        db.close();
      },
    };
  },
});

const STEPS: Step[] = [
  loop("the record's JSON (`JSON.stringify`), copied into a buffer as UTF-8", 'event loop', () => {
    for (const r of records) sink += scratch.write(JSON.stringify(r), 0);
  }),
  loop("the record's JSON by a serializer of our own (the same text), copied into a buffer as UTF-8", 'event loop', () => {
    // The copy counts: a text made of pieces is joined when it is first read whole.
    for (const r of records) sink += scratch.write(ownJson(r), 0);
  }),
  {
    name: "the spool's `append` (the JSON, the line encoded into the pending buffer, its CRC-32; written later)",
    where: 'event loop',
    run: (round) => {
      const spool = new Spool({ dir: join(TMP, `spool-${round}`), fsyncMs: 3_600_000 });
      closing.push(() => spool.close());
      return {
        work: () => {
          for (const r of records) spool.append(r);
        },
      };
    },
  },
  loop("the lines' checksums (`checkLines`)", 'store thread', () => {
    for (const c of chunks) sink += checkLines(c).lines.length;
  }),
  loop('the lines parsed (`JSON.parse`, `recordsOf`)', 'store thread', () => {
    for (const batch of jsonBatches) sink += recordsOf(batch).records.length;
  }),
  loop("the rows' values (`recordRow`)", 'store thread', () => {
    for (const r of parsed) sink += recordRow(r, 'sqlite').length;
  }),
  inserting('insert, one column (`id`) of a table with no key and no index', columnsDdl('id'), 'INSERT INTO ledger_requests (id) VALUES (?)', (i) => [rows[i]![0]!]),
  inserting('insert, the 30 columns, no key and no index', columnsDdl('id'), INSERT, (i) => rows[i]!),
  inserting('insert, the 30 columns, the key (`id`) only', columnsDdl('id TEXT PRIMARY KEY'), INSERT_ONCE, (i) => rows[i]!),
  inserting("insert, the ledger's schema (the key and three indexes)", undefined, INSERT_ONCE, (i) => rows[i]!),
  {
    name: "the SQLite store's own thread, whole: `insertLines` of each batch (checksums, parse, values, insert into the ledger's schema)",
    where: 'store thread',
    run: async (round) => {
      const store = await openLedgerStore({ kind: 'sqlite', path: join(TMP, `store-${round}.sqlite`) });
      closing.push(() => store.close());
      return {
        work: async () => {
          for (const chunk of chunks) await store.insertLines(chunk);
        },
        cpu: workerThreadsUs,
      };
    },
  },
];

/** CPU µs so far of this thread. */
function thisThreadUs(): number {
  const t = process.threadCpuUsage();
  return t.user + t.system;
}

/** CPU µs so far of this process's worker threads (Node names them WorkerThread): the SQLite store's thread. */
function workerThreadsUs(): number {
  let ticks = 0;
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      if (readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim() !== 'WorkerThread') continue;
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(f[11]) + Number(f[12]);
    } catch {
      // the thread ended
    }
  }
  return (ticks / CLK_TCK) * 1e6;
}

/** CPU µs per record of one step's work, on the thread it names. */
async function timed(step: Work): Promise<number> {
  const cpu = step.cpu ?? thisThreadUs;
  const t0 = cpu();
  await step.work();
  return (cpu() - t0) / N;
}

const samples = new Map<Step, number[]>();
for (let round = 0; round < ROUNDS; round++) {
  for (const step of STEPS) {
    const s = await timed(await step.run(round));
    let list = samples.get(step);
    if (!list) samples.set(step, (list = []));
    list.push(s);
    process.stdout.write(`round ${round + 1}/${ROUNDS} ${s.toFixed(2).padStart(6)} µs/record  ${step.name}\n`);
  }
  for (const close of closing.splice(0)) await close();
}
if (sink === 0) throw new Error('nothing was measured');

/**
 * The same batch read as `jsonb`, its numbers as `numeric` and rounded: the PostgreSQL store's
 * statement until 2026-12-04, measured beside the store's own in the same server, round by round.
 */
const JSONB_NUMERIC_INSERT = ((): string => {
  const json = new Set<string>(['metadata', 'tags', 'attempts']);
  const numbers = new Set<string>(['started_at', 'first_byte_ms', 'ended_at', 'status', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cache_write_tokens', 'cost_micros', 'bytes_in', 'bytes_out', 'worker', 'generation']);
  const type = (name: string) => (json.has(name) ? 'jsonb' : name === 'usage_estimated' ? 'boolean' : numbers.has(name) ? 'numeric' : 'text');
  const value = (name: string) => {
    const c = `r.${col(name)}`;
    if (json.has(name)) return name === 'metadata' ? c : `COALESCE(${c}, '[]'::jsonb)`;
    if (name === 'usage_estimated') return `COALESCE(${c}, false)`;
    if (name === 'first_byte_ms' || name === 'cost_micros') return `round(${c})::bigint`;
    if (numbers.has(name)) return `COALESCE(round(${c}), 0)::bigint`;
    return `COALESCE(${c}, '')`;
  };
  return (
    `INSERT INTO ledger_requests (${COLUMNS.map(col).join(', ')}) SELECT ${COLUMNS.map(value).join(', ')} ` +
    `FROM jsonb_to_recordset($1::jsonb) AS r(${COLUMNS.map((name) => `${col(name)} ${type(name)}`).join(', ')}) WHERE r.id IS NOT NULL ON CONFLICT (id) DO NOTHING`
  );
})();

const POSTGRES_STATEMENTS = [
  { name: "the PostgreSQL store's INSERT of a batch's lines: one JSON text the server reads as `json`, numbers as `bigint`", sql: POSTGRES_JSON_INSERT },
  { name: 'the same batch read as `jsonb`, numbers as `numeric`, rounded (the statement before)', sql: JSONB_NUMERIC_INSERT },
];

/** Each PostgreSQL statement for every batch, on one connection, in turn each round: its backend's CPU per record, a sample a round. */
async function postgresInserts(): Promise<number[][] | undefined> {
  if (postgresCheck().skip !== false) return undefined;
  const pg = createRequire(import.meta.url)('pg') as typeof import('pg');
  const server = await startPostgres();
  try {
    // The store's own open: its schema, migrated.
    await (await openLedgerStore({ kind: 'postgres', url: server.url })).close();
    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    const pid = Number((await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
    const ticks = () => {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return Number(f[11]) + Number(f[12]);
    };
    const texts = jsonBatches.map((batch) => `[${batch.join(',')}]`);
    const out: number[][] = POSTGRES_STATEMENTS.map(() => []);
    for (let round = 0; round < ROUNDS; round++) {
      // The order turned every round.
      const order = round % 2 === 0 ? [0, 1] : [1, 0];
      for (const i of order) {
        await client.query('TRUNCATE ledger_requests CASCADE');
        await client.query('CHECKPOINT');
        const t0 = ticks();
        for (const text of texts) await client.query(POSTGRES_STATEMENTS[i]!.sql, [text]);
        const us = (((ticks() - t0) / CLK_TCK) * 1e6) / N;
        const rows = Number((await client.query<{ n: string }>('SELECT COUNT(*) AS n FROM ledger_requests')).rows[0]!.n);
        if (rows !== N) throw new Error(`PostgreSQL holds ${rows} records, not ${N}`);
        out[i]!.push(us);
        process.stdout.write(`round ${round + 1}/${ROUNDS} ${us.toFixed(2).padStart(6)} µs/record  PostgreSQL: ${POSTGRES_STATEMENTS[i]!.name}\n`);
      }
    }
    await client.end();
    return out;
  } finally {
    await server.close();
  }
}
const postgres = await postgresInserts();

const med = (step: Step) => median(samples.get(step)!);
const byName = (prefix: string) => STEPS.find((s) => s.name.startsWith(prefix))!;
const loopFloor = med(byName('the spool'));
const threadFloor = med(byName("the SQLite store's own thread"));
const sqliteVersion = String((new DatabaseSync(':memory:').prepare('SELECT sqlite_version() AS v').get() as { v: string }).v);
const head = (() => {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
  } catch {
    return 'unknown';
  }
})();
const report = [
  '# Sluice usage ledger: the floor of a record\'s way (#28)',
  '',
  `- Date: ${new Date().toISOString()}; \`node bench/ledger-floor.ts\`; HEAD ${head} (its build in dist/)`,
  `- CPU: ${cpus()[0]?.model ?? 'unknown'}, ${cpus().length} cores; Node ${process.version}; SQLite ${sqliteVersion} (node:sqlite); WAL, synchronous NORMAL, as the store opens it`,
  `- ${N} records of a plain chat request (bench/ledger-sample.ts, about ${Math.round(lines[0]!.length)} bytes a line), each step alone in a loop over all of them, ${BATCH} rows to a transaction; ${ROUNDS} rounds, medians; CPU per record of the thread that ran the loop (process.threadCpuUsage), or for the store's own thread its CPU in /proc (clock ticks of 1/${CLK_TCK} s)`,
  '',
  '| where | step | µs/record | min | max |',
  '|---|---|--:|--:|--:|',
  ...STEPS.map((step) => {
    const xs = samples.get(step)!;
    return `| ${step.where} | ${step.name} | ${med(step).toFixed(2)} | ${Math.min(...xs).toFixed(2)} | ${Math.max(...xs).toFixed(2)} |`;
  }),
  ...(postgres
    ? POSTGRES_STATEMENTS.map((statement, i) => {
        const xs = postgres[i]!;
        return `| PostgreSQL server (its backend's CPU) | ${statement.name} | ${median(xs).toFixed(2)} | ${Math.min(...xs).toFixed(2)} | ${Math.max(...xs).toFixed(2)} |`;
      })
    : [`| PostgreSQL server | not measured: ${postgresCheck().skip} | | | |`]),
  '',
  `The event loop's floor is the spool's \`append\`: ${loopFloor.toFixed(1)} µs a record (a record's JSON and its copy alone: ${med(STEPS[0]!).toFixed(1)}); ` +
    `the store thread's, its whole \`insertLines\`: ${threadFloor.toFixed(1)} µs. Together ${(loopFloor + threadFloor).toFixed(1)} µs a record, ` +
    'before the record is built from the request, the spool\'s writes, the shipper\'s reads and any cost of sharing the CPU with the gateway.',
  '',
].join('\n');
writeFileSync(join(ROOT, 'bench/results/ledger-floor.md'), report);
process.stdout.write(`\n${report}`);
