// The usage ledger (issue 28) measured: what a `ledger` section costs per request, beside no ledger,
// a direct connection and HAProxy, in the same run; and whether the spool and the store keep up with
// the gateway at its maximum rate (the lag under load, the catch-up after it).
//
//   npm run build && node bench/ledger.ts            5 rounds x 4 s per target and case (about 6 minutes)
//   npm run build && node bench/ledger.ts --quick    2 rounds x 2 s (about 1.5 minutes)
//
// All on 127.0.0.1. It starts the mock upstream (test/support/mock-upstream.ts), HAProxy (when on
// PATH) in front of it, a PostgreSQL of its own (test/support/postgres.ts: a cluster made by initdb
// in a temporary directory; its rows are skipped, with a note, when PostgreSQL is not installed), and
// FOUR gateways (the built dist/main.js, each `workers: 1`, access log off, one provider on the
// mock, one client key `bench`, the model priced so that each record has a cost), started anew
// before every round (SIGTERM, its ledger flushed, then the same config again): each target's
// samples come from as many processes as there are rounds, because one process's JIT history alone
// moves its CPU per request by several µs (three gateways of one config differed by up to 8.5 µs):
//   off            no ledger section
//   sqlite         `ledger: {}`: the spool and the SQLite file beside the config, in the bench's temp dir
//   postgres       `ledger: { store: postgres }` on that PostgreSQL (the spool in the temp dir)
//   sqlite-always  `ledger: { fsync: always }`
// Every request carries the key, names a `user` and sends `x-sluice-tags: bench`. Each target is
// measured non-streaming and streaming (50 chunks) under wrk's saturating load, and non-streaming
// paced (about 1,500 requests a second: the p99 of a gateway that is not saturated; see MODES),
// the targets interleaved and their order rotated
// every round; wrk (one thread, 32 keep-alive connections) and PostgreSQL on CPU 1, the gateways,
// HAProxy and the mock on CPU 0 (taskset). CPU per request is utime + stime from /proc over the
// requests completed: the gateway's (its SQLite thread included, and shown apart: the process's
// worker threads; its main thread, the event loop that serves the requests, shown apart too), and
// PostgreSQL's (the postmaster, its children, and the children it reaped).
// During each timed run every gateway's admin /metrics is read every 200 ms (`off`'s too, so that the
// reading costs all alike): the highest `sluice_ledger_lag_records` and `_seconds`; after the run it
// is read every 10 ms until the lag is 0: the catch-up, before the next target is measured.
// Every target is checked first (2xx in chat's shape, 50 chunks for a stream); a non-2xx answer
// under load aborts. After the rounds each store is counted directly (the SQLite file read-only,
// PostgreSQL with psql): it must hold exactly the records its gateway counted (the key's
// sluice_requests_total = sluice_ledger_records_total = rows), each with the key, the user and the
// tag, at least one per answer wrk and the checks got and at most one more per connection per wrk
// run (the requests in flight when wrk stopped), none dropped or corrupt; otherwise the bench fails.
// (The gateway's counts are summed over its processes: each is read before it is stopped.)
// The tables go to stdout and to bench/results/ledger.md.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { metricValue } from '../test/support/gateway-process.ts';
import { postgresCheck, startPostgres, type PostgresServer } from '../test/support/postgres.ts';
import { cleanUp, killAll, launch, onPath, PIN, startMock, startServer, stop, type Server } from './processes.ts';
import { startHaproxy } from './extras.ts';
import { cpuTicks, median, perRoundMedian, type Load, fixed as n } from './stats.ts';
import { interleavedRounds, runWrk, wrkPostScript } from './wrk.ts';

const ROOT = resolve(import.meta.dirname, '..');
const RESULTS = join(ROOT, 'bench', 'results');
const FLAGS = process.argv.slice(2);
const QUICK = FLAGS.includes('--quick');
const S = { rounds: QUICK ? 2 : 5, seconds: QUICK ? 2 : 4, warmupSeconds: 1, connections: 32, threads: 1 };
const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;
const HAPROXY_FOUND = onPath('haproxy');
const POSTGRES_MISSING = postgresCheck().skip;
const STREAM_MOCK = JSON.stringify({ chunks: 50 });
const KEY = { name: 'bench', key: 'sk-bench-ledger-key-0123' };
const USER = 'bench-user';
const TAG = 'bench';
/** The admin /metrics during a timed run, and after it until the lag is 0 (at most CATCH_UP_LIMIT_MS). */
const SAMPLE_MS = 200;
const CATCH_UP_POLL_MS = 10;
const CATCH_UP_LIMIT_MS = 60_000;
/** What was measured: the commit, whether src/ had changes on top, and when dist/ was built. */
const BUILD = ((): string => {
  const git = (...args: string[]) => spawnSync('git', args, { cwd: ROOT, encoding: 'utf8' }).stdout.trim();
  const dirty = git('status', '--porcelain', '--', 'src') !== '' ? ' (src/ had uncommitted changes at the time)' : '';
  const built = statSync(join(ROOT, 'dist', 'app.js')).mtime;
  const [lastSrc, lastSrcAt] = git('log', '-1', '--format=%h %cI', '--', 'src').split(' ');
  const stale = lastSrcAt !== undefined && Date.parse(lastSrcAt) > built.getTime() ? `; OLDER than the last commit to src/ (${lastSrc}, ${lastSrcAt})` : '';
  return `dist/main.js built ${built.toISOString()}; HEAD ${git('rev-parse', '--short', 'HEAD') || 'unknown'}${dirty}${stale}`;
})();

// --- what is measured ---------------------------------------------------------------------------

type Via = 'direct' | 'haproxy' | 'off' | 'sqlite' | 'postgres' | 'sqlite-always';
interface Target { name: Via; what: string }
const TARGETS: Target[] = [
  { name: 'direct', what: 'wrk → mock' },
  { name: 'haproxy', what: 'HAProxy → mock' },
  { name: 'off', what: 'gateway, no ledger section' },
  { name: 'sqlite', what: 'gateway, `ledger: {}` (SQLite, fsync batch)' },
  { name: 'postgres', what: 'gateway, `ledger: { store: postgres }`' },
  { name: 'sqlite-always', what: 'gateway, `ledger: { fsync: always }` (SQLite)' },
];
const LEDGERS: Via[] = ['sqlite', 'postgres', 'sqlite-always'];
const GATEWAYS: Via[] = ['off', ...LEDGERS];

/** `pauseMs`: each connection waits this long after an answer before its next request (wrk's `delay`). */
interface Mode { name: string; stream: boolean; pauseMs?: number }
/**
 * Saturated (wrk as fast as the target answers: its p99 is mostly queueing, and any CPU added shows
 * in it), and paced: 32 connections pausing 20 ms after each answer, about 1,500 requests a second,
 * under half of what the slowest gateway here takes, so that its p99 is a request's own latency,
 * as at the load a gateway is run at.
 */
const MODES: Mode[] = [
  { name: 'non-streaming', stream: false },
  { name: 'stream (50 chunks)', stream: true },
  { name: 'non-streaming, paced', stream: false, pauseMs: 20 },
];

const body = (stream: boolean): string =>
  JSON.stringify({
    model: 'plain',
    messages: [{ role: 'user', content: 'Say hello to everyone on the benchmark team, in one short sentence, please.' }],
    max_tokens: 16,
    user: USER,
    ...(stream ? { stream: true } : {}),
  });
const headers = (stream: boolean): Record<string, string> => ({
  'content-type': 'application/json',
  authorization: `Bearer ${KEY.key}`,
  'x-sluice-tags': TAG,
  ...(stream ? { 'x-mock': STREAM_MOCK } : {}),
});

// --- child processes ------------------------------------------------------------------------------

const TMP = mkdtempSync(join(tmpdir(), 'sluice-bench-ledger-'));
cleanUp.push(TMP);

interface Gateway extends Server {
  admin: string;
  /** The SQLite file of a SQLite ledger. */
  sqlite?: string;
}

function ledgerSection(via: Via, postgresUrl: string | undefined): object {
  if (via === 'sqlite') return { ledger: {} };
  if (via === 'sqlite-always') return { ledger: { fsync: 'always' } };
  if (via === 'postgres') return { ledger: { store: 'postgres', postgres: { url: postgresUrl } } };
  return {};
}

function startGateway(via: Via, mockUrl: string, postgresUrl: string | undefined): Promise<Gateway> {
  const config = {
    workers: 1,
    listeners: [
      { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
      { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
    ],
    providers: [{ name: 'oa', type: 'openai', base_url: `${mockUrl}/v1`, api_key: 'sk-upstream-bench' }],
    models: [{ name: 'plain', provider: 'oa' }],
    keys: [KEY],
    // The mock answers with the model asked (`plain`): priced, so that each record carries a cost.
    prices: { plain: { input: 2.5, output: 10 } },
    shutdown: { min_drain_secs: 0, max_drain_secs: 5 },
    log: { level: 'info', access_log: false },
    ...ledgerSection(via, postgresUrl),
  };
  // The ledger's files default to beside the config file: `<file>.ledger.sqlite`, `<file>.ledger-spool/`.
  const file = join(TMP, `gateway-${via}.yaml`);
  writeFileSync(file, stringify(config));
  const urls: Record<string, string> = {};
  return startServer(`gateway ${via}`, ['dist/main.js', '--config', file], (l) => {
    if (l.event === 'listener_started' && typeof l.listener === 'string') urls[l.listener] = `http://${String(l.address)}`;
    return l.event === 'ready' ? urls.proxy : undefined;
  }).then((s) => ({ ...s, name: via, admin: urls.admin!, ...(via === 'sqlite' || via === 'sqlite-always' ? { sqlite: `${file}.ledger.sqlite` } : {}) }));
}

/** The fields of /proc/<path>/stat after the command's name: [0] is field 3 (state), [1] the ppid. */
function procStat(path: string): string[] {
  const stat = readFileSync(`/proc/${path}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/**
 * utime + stime of two of the process's threads: its main thread (the event loop, where requests
 * are served) and its worker threads (Node names them WorkerThread: a SQLite ledger's store
 * thread). The rest of the process's CPU is V8's helpers (the garbage collector's) and libuv's
 * pool (file writes).
 */
function threadTicks(pid: number): { loop: number; workers: number } {
  let workers = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      if (readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim() !== 'WorkerThread') continue;
      const f = procStat(`${pid}/task/${tid}`);
      workers += Number(f[11]) + Number(f[12]);
    } catch {
      // the thread ended
    }
  }
  const main = procStat(`${pid}/task/${pid}`);
  return { loop: Number(main[11]) + Number(main[12]), workers };
}

/** The pids whose parent is `pid`. */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (Number(procStat(entry)[1]) === pid) out.push(Number(entry));
    } catch {
      // gone
    }
  }
  return out;
}

/** The server of a PostgreSQL and the pid of its postmaster (from its data directory's postmaster.pid). */
interface Postgres { server: PostgresServer; postmaster: number; version: string }

async function startBenchPostgres(): Promise<Postgres> {
  const server = await startPostgres();
  try {
    const data = await server.psql("SELECT setting FROM pg_settings WHERE name = 'data_directory'");
    const postmaster = Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
    if (!Number.isInteger(postmaster) || postmaster <= 1) throw new Error(`PostgreSQL: no postmaster pid in ${data}/postmaster.pid`);
    // Beside wrk, like any service the gateway calls (its backends, forked later, inherit this).
    if (PIN) for (const pid of [postmaster, ...childrenOf(postmaster)]) spawnSync('taskset', ['-a', '-p', '-c', '1', String(pid)], { stdio: 'ignore' });
    return { server, postmaster, version: await server.psql('SHOW server_version') };
  } catch (error) {
    await server.close();
    throw error;
  }
}

/**
 * PostgreSQL's CPU in clock ticks: the postmaster's and its live children's utime + stime, and the
 * children it reaped (its cutime + cstime: a backend that ended keeps counting).
 */
function postgresTicks(pg: Postgres): number {
  const own = procStat(String(pg.postmaster));
  let sum = cpuTicks(pg.postmaster) + Number(own[13]) + Number(own[14]);
  for (const pid of childrenOf(pg.postmaster)) {
    try {
      sum += cpuTicks(pid);
    } catch {
      // ended since: counted in cutime from now on
    }
  }
  return sum;
}

// --- the ledger's lag, read from /metrics -------------------------------------------------------

async function metrics(g: Gateway): Promise<string> {
  return (await fetch(`${g.admin}/metrics`)).text();
}

interface Lag { records: number; seconds: number }

/** The ledger's lag now; undefined when the gateway has no ledger. */
async function lagOf(g: Gateway): Promise<Lag | undefined> {
  const text = await metrics(g);
  const records = metricValue(text, 'sluice_ledger_lag_records');
  return records === undefined ? undefined : { records, seconds: metricValue(text, 'sluice_ledger_lag_seconds') ?? NaN };
}

/** Reads the lag every SAMPLE_MS until the returned function is called; that resolves with the highest seen (NaN: no ledger). */
function sampleLag(g: Gateway): () => Promise<Lag> {
  const abort = new AbortController();
  const max: Lag = { records: -Infinity, seconds: -Infinity };
  const t0 = performance.now();
  const loop = (async () => {
    for (let i = 1; !abort.signal.aborted; i++) {
      const lag = await lagOf(g);
      if (lag) max.records = Math.max(max.records, lag.records);
      if (lag) max.seconds = Math.max(max.seconds, lag.seconds);
      await sleep(Math.max(0, t0 + i * SAMPLE_MS - performance.now()), undefined, { signal: abort.signal }).catch(() => {});
    }
  })();
  return async () => {
    abort.abort();
    await loop;
    return { records: Number.isFinite(max.records) ? max.records : NaN, seconds: Number.isFinite(max.seconds) ? max.seconds : NaN };
  };
}

/** Milliseconds from `since` until the lag is 0 (NaN: no ledger); throws when it is not within CATCH_UP_LIMIT_MS. */
async function catchUp(g: Gateway, since: number): Promise<number> {
  for (;;) {
    const lag = await lagOf(g);
    if (lag === undefined) return NaN;
    if (lag.records === 0) return performance.now() - since;
    if (performance.now() - since > CATCH_UP_LIMIT_MS) throw new Error(`${g.name}: the ledger still lags ${lag.records} records ${CATCH_UP_LIMIT_MS / 1000} s after the load`);
    await sleep(CATCH_UP_POLL_MS);
  }
}

// --- checks ---------------------------------------------------------------------------------------

/** Per gateway: the answers its clients got (wrk and the checks), the wrk runs, wrk's socket errors. */
const answered = new Map<Via, { answers: number; runs: number; errors: number }>(GATEWAYS.map((v) => [v, { answers: 0, runs: 0, errors: 0 }]));

function counted(t: Target, r: Load): void {
  const a = answered.get(t.name);
  if (!a) return;
  a.answers += r.requests;
  a.runs++;
  a.errors += r.errors;
}

/** 2xx in chat's shape, 50 chunks for a stream. */
async function check(t: Target, url: string, mode: Mode): Promise<void> {
  const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: headers(mode.stream), body: body(mode.stream) });
  const text = await res.text();
  const events = text.split('\n').filter((l) => l.startsWith('data:')).length;
  const shaped = mode.stream ? text.includes('"chat.completion.chunk"') && text.includes('data: [DONE]') : text.includes('"chat.completion"');
  if (res.status !== 200 || !shaped || (mode.stream && events < 50)) throw new Error(`check failed for ${t.name} / ${mode.name}: HTTP ${res.status}: ${text.slice(0, 300)}`);
  const a = answered.get(t.name);
  if (a) a.answers++;
}

interface Stored { rows: number; ok: number; complete: number }

/** Counts the records, those of a 200, and those with the key, the user and the tag. */
const COUNT_SQL =
  'SELECT count(*) AS rows, sum(CASE WHEN status = 200 THEN 1 ELSE 0 END) AS ok, ' +
  `sum(CASE WHEN key = '${KEY.name}' AND "user" = '${USER}' AND CAST(tags AS TEXT) LIKE '%"${TAG}"%' THEN 1 ELSE 0 END) AS complete FROM ledger_requests`;

/** The store's own count, read without the gateway: the SQLite file read-only, or psql. */
async function stored(g: Gateway, pg: Postgres | undefined): Promise<Stored> {
  if (g.sqlite) {
    const db = new DatabaseSync(g.sqlite, { readOnly: true });
    try {
      const row = db.prepare(COUNT_SQL).get() as Record<string, number | null>;
      return { rows: Number(row.rows), ok: Number(row.ok ?? 0), complete: Number(row.complete ?? 0) };
    } finally {
      db.close();
    }
  }
  const [rows, ok, complete] = (await pg!.server.psql(COUNT_SQL)).split('|').map((x) => Number(x || 0));
  return { rows: rows!, ok: ok!, complete: complete! };
}

/** Sum of a counter's samples whose labels include `labels`. */
function counterSum(text: string, name: string, labels: Record<string, string>): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

interface Counts { finished: number; spooled: number; dropped: number; corrupt: number }
const NO_COUNTS: Counts = { finished: 0, spooled: 0, dropped: 0, corrupt: 0 };
const added = (a: Counts, b: Counts): Counts => ({ finished: a.finished + b.finished, spooled: a.spooled + b.spooled, dropped: a.dropped + b.dropped, corrupt: a.corrupt + b.corrupt });

/** What a gateway's processes stopped so far counted (each read once its lag was 0, before its SIGTERM). */
const retired = new Map<Via, Counts>();

/** A gateway's counts now, once its ledger has caught up. */
async function countsOf(g: Gateway): Promise<Counts> {
  await catchUp(g, performance.now());
  const text = await metrics(g);
  return {
    finished: counterSum(text, 'sluice_requests_total', { key: KEY.name }),
    spooled: metricValue(text, 'sluice_ledger_records_total') ?? NaN,
    dropped: metricValue(text, 'sluice_ledger_dropped_total') ?? NaN,
    corrupt: metricValue(text, 'sluice_ledger_corrupt_total') ?? NaN,
  };
}

/** Stops every gateway (a ledger's counts kept first) and starts the same again, checked (the measurements warm it up). */
async function restartGateways(gateways: Map<Via, Gateway>, mockUrl: string, pg: Postgres | undefined): Promise<void> {
  for (const [via, g] of gateways) {
    if (LEDGERS.includes(via)) retired.set(via, added(retired.get(via) ?? NO_COUNTS, await countsOf(g)));
    await stop(g);
    const fresh = await startGateway(via, mockUrl, pg?.server.url);
    gateways.set(via, fresh);
    const t = TARGETS.find((x) => x.name === via)!;
    for (const mode of MODES) await check(t, fresh.url, mode);
  }
}

/** Every ledger's store against what its gateway counted and its clients were answered; one line each, and the failures. */
async function verify(gateways: Map<Via, Gateway>, pg: Postgres | undefined): Promise<{ lines: string[]; failures: string[] }> {
  const lines: string[] = [];
  const failures: string[] = [];
  for (const via of LEDGERS) {
    const g = gateways.get(via);
    if (!g) continue;
    const { finished, spooled, dropped, corrupt } = added(retired.get(via) ?? NO_COUNTS, await countsOf(g));
    const s = await stored(g, pg);
    const a = answered.get(via)!;
    const slack = a.runs * S.connections + a.errors;
    const wrong: string[] = [];
    if (s.rows !== finished || s.rows !== spooled) wrong.push(`${s.rows} rows in the store, the gateway finished ${finished} requests of the key and spooled ${spooled} records`);
    if (s.ok < a.answers) wrong.push(`${s.ok} records of a 200, fewer than the ${a.answers} answers its clients got`);
    if (s.rows > a.answers + slack) wrong.push(`${s.rows} records, more than the ${a.answers} answers and ${slack} requests cut by wrk's stops`);
    if (s.complete !== s.rows) wrong.push(`${s.rows - s.complete} records without the key, the user or the tag`);
    if (dropped !== 0 || corrupt !== 0) wrong.push(`${dropped} dropped, ${corrupt} corrupt`);
    failures.push(...wrong.map((w) => `${via}: ${w}`));
    lines.push(`${via} ${s.rows} records (${s.ok} of a 200) for ${a.answers} answers in ${a.runs} wrk runs and the checks; the gateway finished ${finished} and spooled ${spooled}` + (wrong.length > 0 ? ' — WRONG' : ''));
  }
  return { lines, failures };
}

// --- measurement ----------------------------------------------------------------------------------

interface Sample { rps: number; p50: number; p99: number; cpu: number; loopCpu: number; threadCpu: number; storeCpu: number; maxLag: number; maxLagSeconds: number; catchUpMs: number }
const loads: number[] = [];

async function measure(t: Target, url: string, server: Server | undefined, gateway: Gateway | undefined, pg: Postgres | undefined, luaFile: string): Promise<Sample> {
  const full = `${url}/v1/chat/completions`;
  const warm = await runWrk(full, luaFile, S.warmupSeconds, S);
  counted(t, warm);
  if (warm.non2xx > 0) throw new Error(`${t.name}: ${warm.non2xx} non-2xx responses in the warm-up`);
  const store = t.name === 'postgres' ? pg : undefined;
  const cpu0 = server ? cpuTicks(server.pid) : 0;
  const thread0 = gateway ? threadTicks(gateway.pid) : undefined;
  const store0 = store ? postgresTicks(store) : 0;
  const stopSampling = gateway ? sampleLag(gateway) : undefined;
  const r = await runWrk(full, luaFile, S.seconds, S);
  const ended = performance.now();
  const cpu1 = server ? cpuTicks(server.pid) : 0;
  const thread1 = gateway ? threadTicks(gateway.pid) : undefined;
  const store1 = store ? postgresTicks(store) : 0;
  const lag = stopSampling ? await stopSampling() : { records: NaN, seconds: NaN };
  const catchUpMs = gateway ? await catchUp(gateway, ended) : NaN;
  counted(t, r);
  if (r.non2xx > 0) throw new Error(`${t.name}: ${r.non2xx} non-2xx responses under load`);
  if (r.errors > 0) process.stderr.write(`  warning: ${t.name}: ${r.errors} socket errors\n`);
  const usPerReq = (ticks: number) => (r.requests > 0 ? ((ticks / CLK_TCK) * 1e6) / r.requests : NaN);
  loads.push(loadavg()[0]!);
  return {
    rps: r.requests / r.seconds, p50: r.p50Ms, p99: r.p99Ms,
    cpu: server ? usPerReq(cpu1 - cpu0) : NaN, loopCpu: thread0 && thread1 ? usPerReq(thread1.loop - thread0.loop) : NaN,
    threadCpu: thread0 && thread1 ? usPerReq(thread1.workers - thread0.workers) : NaN, storeCpu: store ? usPerReq(store1 - store0) : NaN,
    maxLag: lag.records, maxLagSeconds: lag.seconds, catchUpMs,
  };
}

// --- tables ---------------------------------------------------------------------------------------

type Results = Map<string, Map<string, Sample[]>>;
const isGateway = (t: Target) => GATEWAYS.includes(t.name);
const isLedger = (t: Target) => LEDGERS.includes(t.name);
const isSqlite = (t: Target) => t.name === 'sqlite' || t.name === 'sqlite-always';

function table(results: Results): string {
  const rows = [
    '| case | target | what | req/s | p50 ms | p99 ms | gateway CPU µs/req | of which event loop | of which SQLite thread | CPU vs off | CPU − off µs/req | event loop − off µs/req | PostgreSQL CPU µs/req | max lag records | max lag s | catch-up ms |',
    '|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const [mode, byTarget] of results) {
    const off = byTarget.get('off');
    for (const t of TARGETS) {
      const samples = byTarget.get(t.name);
      if (!samples || samples.length === 0) continue;
      const m = (f: (s: Sample) => number) => median(samples.map(f));
      const vsOff = (f: (s: Sample, o: Sample) => number, digits: number) => (off && off.length > 0 ? n(perRoundMedian(samples, off, f), digits) : '–');
      const ledger = isLedger(t);
      rows.push(
        `| ${mode} | ${t.name} | ${t.what} | ${n(m((s) => s.rps))} | ${n(m((s) => s.p50), 2)} | ${n(m((s) => s.p99), 2)} | ` +
          `${t.name === 'direct' ? '–' : n(m((s) => s.cpu))} | ${isGateway(t) ? n(m((s) => s.loopCpu)) : '–'} | ${isSqlite(t) ? n(m((s) => s.threadCpu)) : '–'} | ` +
          `${!isGateway(t) ? '–' : t.name === 'off' ? '1' : `${vsOff((s, o) => s.cpu / o.cpu, 2)}×`} | ` +
          `${!isGateway(t) ? '–' : t.name === 'off' ? '0' : vsOff((s, o) => s.cpu - o.cpu, 1)} | ` +
          `${!isGateway(t) ? '–' : t.name === 'off' ? '0' : vsOff((s, o) => s.loopCpu - o.loopCpu, 1)} | ` +
          `${t.name === 'postgres' ? n(m((s) => s.storeCpu)) : '–'} | ` +
          `${ledger ? n(m((s) => s.maxLag)) : '–'} | ${ledger ? n(m((s) => s.maxLagSeconds), 3) : '–'} | ${ledger ? n(m((s) => s.catchUpMs)) : '–'} |`,
      );
    }
  }
  return rows.join('\n');
}

/** Per mode and ledger: the CPU added over `off` against the issue's 10 µs, the p99 beside off's, the lag. */
function summary(results: Results): string {
  const lines: string[] = [];
  for (const [mode, byTarget] of results) {
    const off = byTarget.get('off')!;
    for (const via of LEDGERS) {
      const samples = byTarget.get(via);
      if (!samples || samples.length === 0) continue;
      const diff = perRoundMedian(samples, off, (s, o) => s.cpu - o.cpu);
      const loop = perRoundMedian(samples, off, (s, o) => s.loopCpu - o.loopCpu);
      const p99 = perRoundMedian(samples, off, (s, o) => s.p99 - o.p99);
      const worst = Math.max(...samples.map((s) => s.catchUpMs));
      const store = via === 'postgres' ? `, and PostgreSQL's own ${n(median(samples.map((s) => s.storeCpu)), 1)} µs` : '';
      lines.push(
        `- ${mode}, ${via}: gateway CPU per request over off ${n(diff, 1)} µs (bound 10 µs: ${diff <= 10 ? 'meets' : 'misses'}), its event loop's ${n(loop, 1)} µs${store}; ` +
          `p99 ${n(median(samples.map((s) => s.p99)), 2)} ms against off's ${n(median(off.map((s) => s.p99)), 2)} ms (per-round difference ${n(p99, 2)} ms); ` +
          `lag at most ${n(Math.max(...samples.map((s) => s.maxLag)))} records (${n(Math.max(...samples.map((s) => s.maxLagSeconds)), 3)} s) under load, 0 again ${n(worst)} ms after it at the latest.`,
      );
    }
  }
  return lines.join('\n');
}

function machineInfo(generator: string, loadBefore: string, pg: Postgres | undefined, checks: string[]): string {
  const model = /^model name\s*:\s*(.*)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? 'unknown';
  const range = (xs: number[]) => `${Math.min(...xs).toFixed(2)}–${Math.max(...xs).toFixed(2)}`;
  const haproxy = HAPROXY_FOUND ? spawnSync('haproxy', ['-v'], { encoding: 'utf8' }).stdout.split('\n')[0]!.split(' - ')[0]! : '';
  const disk = spawnSync('findmnt', ['-T', TMP, '-no', 'FSTYPE,SOURCE'], { encoding: 'utf8' }).stdout.trim().replace(/\s+/, ' on ') || 'unknown';
  return [
    `- Date: ${new Date().toISOString()}; \`node bench/ledger.ts${QUICK ? ' --quick' : ''}\``,
    `- CPU: ${model}, ${cpus().length} cores; Node ${process.version}; clock ticks ${CLK_TCK}/s`,
    `- Build: ${BUILD}`,
    `- Load generator: ${generator}, ${S.connections} keep-alive connections, ${S.threads} thread; ${S.rounds} rounds × ${S.seconds} s per target and case ` +
      `after a ${S.warmupSeconds} s warm-up, the order rotated every round, the gateways started anew before each; medians; ratios and differences are per-round ratios' and differences' medians`,
    PIN ? '- Pinning: wrk and PostgreSQL on CPU 1; gateways, HAProxy and mock on CPU 0 (taskset)' : '- Pinning: none (taskset missing or fewer than 2 CPUs)',
    '- Gateways (each `workers: 1`, access log off, one provider on the mock, one client key, the model priced): `off` (no ledger section), ' +
      '`sqlite` (`ledger: {}`), `postgres` (`ledger: { store: postgres }`, pool_size 4), `sqlite-always` (`ledger: { fsync: always }`); every request carries the key, ' +
      `\`user: ${USER}\` and \`x-sluice-tags: ${TAG}\``,
    `- Ledger files (spools, SQLite): the bench's temp dir, ${disk}`,
    pg
      ? `- PostgreSQL ${pg.version}: a cluster of its own on loopback TCP with test/support/postgres.ts's settings (fsync=off, full_page_writes=off: commits do not wait for the disk); ` +
        'its CPU column is the postmaster\'s and its children\'s (utime + stime, the reaped ones included)'
      : `- PostgreSQL: ${String(POSTGRES_MISSING)}; its rows skipped`,
    HAPROXY_FOUND ? `- HAProxy (${haproxy}): \`nbthread 1\`, keep-alive both sides, pinned like the gateways` : '- HAProxy: not on PATH, rows skipped (Debian package haproxy)',
    `- Lag: each gateway's admin /metrics read every ${SAMPLE_MS} ms during the timed runs (off's too); the catch-up from wrk's end until \`sluice_ledger_lag_records\` is 0 (read every ${CATCH_UP_POLL_MS} ms). ` +
      '`sluice_ledger_lag_seconds` is the age of the oldest unshipped record\'s mark, and a mark spans up to 100 ms of appends: it reads up to 0.1 s more than the real delay',
    `- Checks (the stores read directly): ${checks.join('; ')}`,
    `- Load average (1 min): ${range(loads)} during the run; ${loadBefore} before`,
  ].join('\n');
}

// --- main -------------------------------------------------------------------------------------------

let postgres: Postgres | undefined;

async function main(): Promise<void> {
  const unknown = FLAGS.filter((f) => f !== '--quick');
  if (unknown.length > 0) {
    process.stderr.write(`usage: node bench/ledger.ts [--quick] (unknown: ${unknown.join(' ')})\n`);
    process.exit(2);
  }
  if (!onPath('wrk')) throw new Error('wrk not on PATH (Debian package wrk)');
  if (PIN) spawnSync('taskset', ['-a', '-p', '-c', '1', String(process.pid)], { stdio: 'ignore' });
  const generator = spawnSync('wrk', ['-v'], { encoding: 'utf8' }).stdout.split('\n')[0]!.split(' [')[0]!;
  const loadBefore = loadavg()[0]!.toFixed(2);
  if (POSTGRES_MISSING) process.stderr.write(`bench: ${POSTGRES_MISSING}; the postgres rows are skipped\n`);

  const mock = await startMock();
  postgres = POSTGRES_MISSING ? undefined : await startBenchPostgres();
  const gateways = new Map<Via, Gateway>();
  for (const via of GATEWAYS) if (via !== 'postgres' || postgres) gateways.set(via, await startGateway(via, mock.url, postgres?.server.url));
  const haproxy = HAPROXY_FOUND ? await startHaproxy(launch, mock.url, TMP) : undefined;
  const haproxyServer: Server | undefined = haproxy && { name: 'haproxy', ...haproxy };
  const where = (t: Target): { url: string; server: Server | undefined; gateway: Gateway | undefined } =>
    t.name === 'direct'
      ? { url: mock.url, server: undefined, gateway: undefined }
      : t.name === 'haproxy'
        ? { url: haproxyServer!.url, server: haproxyServer, gateway: undefined }
        : { url: gateways.get(t.name)!.url, server: gateways.get(t.name), gateway: gateways.get(t.name) };
  const targets = TARGETS.filter((t) => (t.name !== 'haproxy' || haproxyServer) && (t.name !== 'postgres' || postgres));

  for (const t of targets) for (const mode of MODES) await check(t, where(t).url, mode);
  const results: Results = await interleavedRounds(
    targets,
    MODES,
    S.rounds,
    TMP,
    (_t, mode) => wrkPostScript(body(mode.stream), headers(mode.stream)) + (mode.pauseMs !== undefined ? `\ndelay = function() return ${mode.pauseMs} end\n` : ''),
    (t, _mode, luaFile) => measure(t, where(t).url, where(t).server, where(t).gateway, postgres, luaFile),
    (round, mode, t, s) =>
      process.stderr.write(
        `round ${round + 1}/${S.rounds} ${mode.name.padEnd(18)} ${t.name.padEnd(13)} ${s.rps.toFixed(0).padStart(6)} req/s  p50 ${s.p50.toFixed(2)} ms  p99 ${s.p99.toFixed(2)} ms  ` +
          `cpu ${n(s.cpu)} µs/req  loop ${n(s.loopCpu)}  thread ${n(s.threadCpu)}  pg ${n(s.storeCpu)}  lag ${n(s.maxLag)} (${n(s.maxLagSeconds, 3)} s)  catch-up ${n(s.catchUpMs)} ms\n`,
      ),
    async (round) => {
      if (round > 0) await restartGateways(gateways, mock.url, postgres);
    },
  );
  const verified = await verify(gateways, postgres);
  await Promise.all([...gateways.values(), mock, ...(haproxyServer ? [haproxyServer] : [])].map(stop));
  await postgres?.server.close();

  const md =
    `# Sluice usage ledger benchmark (#28)\n\n${machineInfo(generator, loadBefore, postgres, verified.lines)}\n\n` +
    `## The ledger on and off beside the gateway's neighbours\n\n${table(results)}\n\n${summary(results)}\n`;
  process.stdout.write(`\n${md}`);
  if (verified.failures.length > 0) throw new Error(`the stores do not hold what was answered:\n  ${verified.failures.join('\n  ')}\n(results not written)`);
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, 'ledger.md'), md);
  process.stdout.write(`\nwritten to ${join('bench', 'results', 'ledger.md')}\n`);
}

main().catch(async (err: unknown) => {
  process.stderr.write(`bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  killAll();
  await postgres?.server.close().catch(() => {});
  process.exit(1);
});
