// Client keys, limits and spend (issue 16) measured: the overhead per request of a key check, of a
// key's limits and budget on the memory store, and of the same on the Redis store, beside the plain
// relay, a direct connection and HAProxy, in the same run.
//
//   npm run build && node bench/limits.ts            5 rounds x 4 s per target and case (about 6 minutes)
//   npm run build && node bench/limits.ts --quick    2 rounds x 2 s (about 2 minutes)
//
// All on 127.0.0.1. It starts the mock upstream (test/support/mock-upstream.ts), HAProxy (when on
// PATH) in front of it, redis-server on a free port (no persistence), and THREE gateways (the built
// dist/main.js, each `workers: 1`, access log off, the same providers, models and prices):
//   open    no client keys: the plain relay
//   memory  keys `bare` (no limits) and `limited`, limits.store memory
//   redis   the same keys, limits.store redis (on_store_error closed: a store failure is a 503, which aborts)
// A gateway with keys refuses a request without one, so the open relay needs its own process. The
// rows that differ by the limits alone (bare → limited) share a process; the `bare` key is measured
// on both keyed gateways, and the two rows show what the choice of process alone moves.
// `limited` has limits { rpm: 100000000, tpm: 1000000000, concurrent: 100000 } and budget
// { usd: 1000000 }: a request takes from two buckets (rpm, tpm) and a concurrency lease and checks
// the budget; it gives back its token reservation and its lease, and adds its spend, when it ends.
// Nothing is ever refused.
// Each target is measured non-streaming and streaming (the mock sends 50 content chunks back to back:
// `x-mock: {"chunks":50}`), the targets interleaved and their order rotated every round; wrk (one
// thread, 32 keep-alive connections) on CPU 1, the servers (gateways, HAProxy, mock, Redis) on CPU 0
// (taskset). CPU per request is each process's utime + stime from /proc/<pid>/stat over the requests
// completed; Redis's is read the same way, and its commands per request from INFO commandstats.
// Every target is checked first (2xx, rate-limit headers exactly on the limited rows); a non-2xx
// answer under load aborts; after the rounds, the gateways' /metrics must show no refusal and no
// store error, and Redis must hold the key's spend. Then single-request latency: sequential
// non-streaming requests on one keep-alive connection per target, the targets taking turns.
// The tables go to stdout and to bench/results/limits.md.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { freePort } from '../test/support/haproxy.ts';
import { cleanUp, killAll, launch, onPath, PIN, startMock, startServer, stop, type Server } from './processes.ts';
import { percentile, rssMb, startHaproxy, ttfb } from './extras.ts';
import { cpuTicks, median, perRoundMedian, type Load, fixed as n } from './stats.ts';
import { interleavedRounds, runWrk, wrkPostScript } from './wrk.ts';

const ROOT = resolve(import.meta.dirname, '..');
const RESULTS = join(ROOT, 'bench', 'results');
const FLAGS = process.argv.slice(2);
const QUICK = FLAGS.includes('--quick');
const S = { rounds: QUICK ? 2 : 5, seconds: QUICK ? 2 : 4, warmupSeconds: 1, connections: 32, threads: 1 };
/** Sequential single requests per target (after 100 unmeasured). */
const SINGLE_N = QUICK ? 300 : 1000;
const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;
const HAPROXY_FOUND = onPath('haproxy');
const STREAM_MOCK = JSON.stringify({ chunks: 50 });
const KEYS = { bare: 'sk-bench-bare-key', limited: 'sk-bench-limited-key' };
const LIMITS = { rpm: 100_000_000, tpm: 1_000_000_000, concurrent: 100_000 };
const BUDGET = { usd: 1_000_000 };
const REDIS_PREFIX = 'sluice:';
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

type Via = 'direct' | 'haproxy' | 'open' | 'memory' | 'redis';
interface Target {
  name: string;
  what: string;
  via: Via;
  key: keyof typeof KEYS | undefined;
}

const TARGETS: Target[] = [
  { name: 'direct', what: 'wrk → mock', via: 'direct', key: undefined },
  { name: 'haproxy', what: 'HAProxy → mock', via: 'haproxy', key: undefined },
  { name: 'plain', what: 'open gateway (no keys): the plain relay', via: 'open', key: undefined },
  { name: 'key', what: 'key without limits (memory gateway)', via: 'memory', key: 'bare' },
  { name: 'memory limits', what: 'key with limits + budget, memory store', via: 'memory', key: 'limited' },
  { name: 'key (redis gw)', what: 'key without limits (Redis gateway: no Redis call)', via: 'redis', key: 'bare' },
  { name: 'redis limits', what: 'key with limits + budget, Redis store', via: 'redis', key: 'limited' },
];
const GATEWAY_VIAS: Via[] = ['open', 'memory', 'redis'];

interface Mode { name: string; stream: boolean }
const MODES: Mode[] = [
  { name: 'non-streaming', stream: false },
  { name: 'stream (50 chunks)', stream: true },
];

function body(stream: boolean): string {
  const text = 'Say hello to everyone on the benchmark team, in one short sentence, please.';
  return JSON.stringify({ model: 'plain', messages: [{ role: 'user', content: text }], max_tokens: 16, ...(stream ? { stream: true } : {}) });
}

function headers(t: Target, stream: boolean): Record<string, string> {
  const h: Record<string, string> = { 'content-type': 'application/json' };
  if (t.key !== undefined) h.authorization = `Bearer ${KEYS[t.key]}`;
  if (stream) h['x-mock'] = STREAM_MOCK;
  return h;
}

// --- child processes ------------------------------------------------------------------------------

const TMP = mkdtempSync(join(tmpdir(), 'sluice-bench-limits-'));
cleanUp.push(TMP);

interface Gateway extends Server { admin: string }

function startGateway(via: Via, mockUrl: string, redisUrl: string): Promise<Gateway> {
  const keyed = via !== 'open';
  const config = {
    workers: 1,
    listeners: [
      { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
      { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
    ],
    providers: [{ name: 'oa', type: 'openai', base_url: `${mockUrl}/v1`, api_key: 'sk-upstream-bench' }],
    models: [{ name: 'plain', provider: 'oa' }],
    keys: keyed
      ? [
          { name: 'bare', key: KEYS.bare },
          { name: 'limited', key: KEYS.limited, limits: LIMITS, budget: BUDGET },
        ]
      : [],
    limits: via === 'redis' ? { store: 'redis', redis: { url: redisUrl, key_prefix: REDIS_PREFIX }, on_store_error: 'closed' } : { store: 'memory' },
    // The mock answers with the model asked (`plain`): priced, so that the budget is spent.
    prices: { plain: { input: 2.5, output: 10 } },
    shutdown: { min_drain_secs: 0, max_drain_secs: 5 },
    log: { level: 'info', access_log: false },
  };
  const file = join(TMP, `gateway-${via}.yaml`);
  writeFileSync(file, stringify(config));
  const urls: Record<string, string> = {};
  return startServer(`gateway ${via}`, ['dist/main.js', '--config', file], (l) => {
    if (l.event === 'listener_started' && typeof l.listener === 'string') urls[l.listener] = `http://${String(l.address)}`;
    return l.event === 'ready' ? urls.proxy : undefined;
  }).then((s) => ({ ...s, name: via, admin: urls.admin! }));
}

interface Redis extends Server { port: number }

/** redis-server on a free loopback port, no persistence, pinned like the other servers. */
async function startRedis(): Promise<Redis> {
  const port = await freePort();
  const child = launch('0', 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning']);
  child.stdout!.on('data', () => {});
  child.stderr!.on('data', () => {});
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`redis-server exited (code ${child.exitCode}) at start`);
    if (spawnSync('redis-cli', ['-p', String(port), 'PING'], { encoding: 'utf8' }).stdout.trim() === 'PONG') break;
    if (i > 200) throw new Error('redis-server did not answer PING within 10 s');
    await sleep(50);
  }
  return { name: 'redis', child, pid: child.pid!, url: `redis://127.0.0.1:${port}`, port };
}

const redisCli = (r: Redis, ...args: string[]): string => execFileSync('redis-cli', ['-p', String(r.port), ...args], { encoding: 'utf8', maxBuffer: 1 << 30 }).trim();

/**
 * From INFO commandstats: the Lua scripts Redis ran (EVAL, EVALSHA: one round trip each), the
 * commands those scripts called (counted too), and the µs Redis spent in the scripts by its own count.
 */
function redisCommands(r: Redis): { scripts: number; inner: number; usec: number } {
  const out = { scripts: 0, inner: 0, usec: 0 };
  for (const m of redisCli(r, 'INFO', 'commandstats').matchAll(/^cmdstat_([\w|]+):calls=(\d+),usec=(\d+)/gm)) {
    if (m[1] === 'info') continue; // our own reads
    if (m[1]!.startsWith('eval')) {
      out.scripts += Number(m[2]);
      out.usec += Number(m[3]);
    } else {
      out.inner += Number(m[2]);
    }
  }
  return out;
}

// --- load generation (wrk, one Lua script per target and mode) ---------------------------------

function wrkScript(t: Target, mode: Mode): string {
  return wrkPostScript(body(mode.stream), headers(t, mode.stream));
}

const wrk = (url: string, luaFile: string, seconds: number): Promise<Load> => runWrk(url, luaFile, seconds, S);

// --- checks ---------------------------------------------------------------------------------------

/** 2xx in chat's shape, 50 chunks for a stream, and x-ratelimit-* headers exactly when the key has limits. */
async function check(t: Target, url: string, mode: Mode): Promise<void> {
  const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: headers(t, mode.stream), body: body(mode.stream) });
  const text = await res.text();
  const events = text.split('\n').filter((l) => l.startsWith('data:')).length;
  const shaped = mode.stream ? text.includes('"chat.completion.chunk"') && text.includes('data: [DONE]') : text.includes('"chat.completion"');
  const limited = res.headers.get('x-ratelimit-remaining-requests') !== null && res.headers.get('x-ratelimit-remaining-tokens') !== null;
  const wantLimited = t.key === 'limited';
  if (res.status < 200 || res.status > 299 || !shaped || (mode.stream && events < 50) || (t.via !== 'direct' && t.via !== 'haproxy' && limited !== wantLimited)) {
    throw new Error(
      `check failed for ${t.name} / ${mode.name}: HTTP ${res.status}, ${events} SSE data lines, shape ${shaped ? 'ok' : 'wrong'}, ` +
        `rate-limit headers ${limited ? 'present' : 'absent'}: ${text.slice(0, 400)}`,
    );
  }
}

/** A counter of a gateway's /metrics, summed over its labels. */
async function metric(g: Gateway, name: string): Promise<number> {
  const text = await (await fetch(`${g.admin}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  return sum;
}

// --- measurement ----------------------------------------------------------------------------------

interface Sample { rps: number; p50: number; p99: number; cpu: number; mockCpu: number; redisCpu: number; redisScripts: number; redisInner: number; redisUsec: number }
const loads: number[] = [];

async function measure(t: Target, url: string, server: Server | undefined, mock: Server, redis: Redis | undefined, luaFile: string): Promise<Sample> {
  const full = `${url}/v1/chat/completions`;
  await wrk(full, luaFile, S.warmupSeconds);
  const cmd0 = redis ? redisCommands(redis) : undefined;
  const cpu0 = server ? cpuTicks(server.pid) : 0;
  const mock0 = cpuTicks(mock.pid);
  const redis0 = redis ? cpuTicks(redis.pid) : 0;
  const r = await wrk(full, luaFile, S.seconds);
  const cpu1 = server ? cpuTicks(server.pid) : 0;
  const mock1 = cpuTicks(mock.pid);
  const redis1 = redis ? cpuTicks(redis.pid) : 0;
  const cmd1 = redis ? redisCommands(redis) : undefined;
  if (r.non2xx > 0) throw new Error(`${t.name}: ${r.non2xx} non-2xx responses under load`);
  if (r.errors > 0) process.stderr.write(`  warning: ${t.name}: ${r.errors} socket errors\n`);
  const usPerReq = (ticks: number) => (r.requests > 0 ? ((ticks / CLK_TCK) * 1e6) / r.requests : NaN);
  loads.push(loadavg()[0]!);
  return {
    rps: r.requests / r.seconds, p50: r.p50Ms, p99: r.p99Ms,
    cpu: server ? usPerReq(cpu1 - cpu0) : NaN, mockCpu: usPerReq(mock1 - mock0), redisCpu: redis ? usPerReq(redis1 - redis0) : NaN,
    // The warm-up's last settlements can land in the window: a few more scripts than requests × 2.
    redisScripts: cmd0 && cmd1 ? (cmd1.scripts - cmd0.scripts) / r.requests : NaN,
    redisInner: cmd0 && cmd1 ? (cmd1.inner - cmd0.inner) / r.requests : NaN,
    redisUsec: cmd0 && cmd1 ? (cmd1.usec - cmd0.usec) / r.requests : NaN,
  };
}

// --- reporting --------------------------------------------------------------------------------------

type Results = Map<string, Map<string, Sample[]>>; // mode → target → one sample per round
const isGateway = (t: Target) => GATEWAY_VIAS.includes(t.via);

function table(results: Results): string {
  const rows = [
    '| case | target | what | req/s | p50 ms | p99 ms | server CPU µs/req | Redis CPU µs/req | CPU vs plain | CPU + Redis vs plain | CPU vs HAProxy |',
    '|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const [mode, byTarget] of results) {
    for (const t of TARGETS) {
      const samples = byTarget.get(t.name);
      if (!samples) continue;
      const m = (f: (s: Sample) => number) => median(samples.map(f));
      // Per-round ratios, then the median: slow drift of the machine cancels out.
      const ratio = (base: string, f: (s: Sample) => number) => {
        const b = byTarget.get(base);
        return b ? `${n(perRoundMedian(samples, b, (s, o) => f(s) / o.cpu), 2)}×` : '–';
      };
      const gw = isGateway(t);
      const redis = t.name === 'redis limits';
      rows.push(
        `| ${mode} | ${t.name} | ${t.what} | ${n(m((s) => s.rps))} | ${n(m((s) => s.p50), 2)} | ${n(m((s) => s.p99), 2)} | ` +
          `${t.via === 'direct' ? '–' : n(m((s) => s.cpu))} | ${redis ? n(m((s) => s.redisCpu)) : '–'} | ` +
          `${!gw ? '–' : t.name === 'plain' ? '1' : ratio('plain', (s) => s.cpu)} | ${redis ? ratio('plain', (s) => s.cpu + s.redisCpu) : '–'} | ` +
          `${t.name === 'haproxy' ? '1' : gw ? ratio('haproxy', (s) => s.cpu) : '–'} |`,
      );
    }
  }
  return rows.join('\n');
}

function summary(results: Results): string {
  const lines: string[] = [];
  for (const [mode, byTarget] of results) {
    // Per-round differences, then the median.
    const diff = (name: string, base: string, f: (s: Sample) => number) => {
      return perRoundMedian(byTarget.get(name)!, byTarget.get(base)!, (s, o) => f(s) - f(o));
    };
    const cpu = (s: Sample) => s.cpu;
    const p50 = (s: Sample) => s.p50;
    const redis = byTarget.get('redis limits')!;
    lines.push(
      `- ${mode}: gateway CPU per request added (per-round differences, median): key check over the plain relay ${n(diff('key', 'plain', cpu), 1)} µs; ` +
        `memory-store limits over the key alone ${n(diff('memory limits', 'key', cpu), 1)} µs; Redis-store limits over the key alone (same process) ` +
        `${n(diff('redis limits', 'key (redis gw)', cpu), 1)} µs in the gateway + ${n(median(redis.map((s) => s.redisCpu)), 1)} µs in Redis ` +
        `(${n(median(redis.map((s) => s.redisScripts)), 2)} Lua scripts per request calling ${n(median(redis.map((s) => s.redisInner)), 1)} commands, ` +
        `${n(median(redis.map((s) => s.redisUsec)), 1)} µs inside the scripts by Redis's own count); ` +
        `the same key on the two keyed processes differs by ${n(diff('key (redis gw)', 'key', cpu), 1)} µs. ` +
        `p50 under load added: key ${n(diff('key', 'plain', p50), 2)} ms, memory limits ${n(diff('memory limits', 'key', p50), 2)} ms, ` +
        `Redis limits ${n(diff('redis limits', 'key (redis gw)', p50), 2)} ms.`,
    );
  }
  return lines.join('\n');
}

function singleTable(res: Map<string, number[]>): string {
  const p = (name: string, q: number) => percentile(res.get(name)!, q);
  const rows = ['| target | requests | p50 ms | p90 ms | p99 ms | added over plain p50 ms | added over plain p99 ms |', '|---|--:|--:|--:|--:|--:|--:|'];
  for (const [name, xs] of res) {
    const add = (q: number) => (name === 'plain' || name === 'direct' || name === 'haproxy' ? '–' : (p(name, q) - p('plain', q)).toFixed(3));
    rows.push(`| ${name} | ${xs.length} | ${p(name, 50).toFixed(3)} | ${p(name, 90).toFixed(3)} | ${p(name, 99).toFixed(3)} | ${add(50)} | ${add(99)} |`);
  }
  return rows.join('\n');
}

function machineInfo(generator: string, loadBefore: string, redisVersion: string, checks: string): string {
  const model = /^model name\s*:\s*(.*)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? 'unknown';
  const range = (xs: number[]) => `${Math.min(...xs).toFixed(2)}–${Math.max(...xs).toFixed(2)}`;
  const haproxy = HAPROXY_FOUND ? spawnSync('haproxy', ['-v'], { encoding: 'utf8' }).stdout.split('\n')[0]!.split(' - ')[0]! : '';
  return [
    `- Date: ${new Date().toISOString()}; \`node bench/limits.ts${QUICK ? ' --quick' : ''}\``,
    `- CPU: ${model}, ${cpus().length} cores; Node ${process.version}; clock ticks ${CLK_TCK}/s`,
    `- Build: ${BUILD}`,
    `- Load generator: ${generator}, ${S.connections} keep-alive connections, ${S.threads} thread; ${S.rounds} rounds × ${S.seconds} s per target and case ` +
      `after a ${S.warmupSeconds} s warm-up, the order rotated every round; medians; ratios and differences are per-round ratios' and differences' medians`,
    PIN ? '- Pinning: wrk on CPU 1; gateways, HAProxy, mock and Redis on CPU 0 (taskset)' : '- Pinning: none (taskset missing or fewer than 2 CPUs)',
    '- Three gateways (each `workers: 1`, access log off, one provider on the mock, model `plain`, priced): `open` (no keys); `memory` (keys `bare` and ' +
      '`limited`, limits.store memory); `redis` (the same keys, limits.store redis, on_store_error closed)',
    `- \`limited\`: limits ${JSON.stringify(LIMITS)}, budget ${JSON.stringify(BUDGET)} (USD per month); requests ask max_tokens 16`,
    `- ${redisVersion}: \`--save '' --appendonly no\`, loopback TCP; its CPU column is its own (utime + stime), its commands per request from INFO commandstats`,
    HAPROXY_FOUND
      ? `- HAProxy (${haproxy}): \`nbthread 1\`, keep-alive both sides, one backend (the mock), pinned like the gateways; its CPU column is its own`
      : '- HAProxy: not on PATH, rows skipped (Debian package haproxy)',
    '- Streams: the mock sends 50 content chunks back to back (`x-mock: {"chunks":50}`); every gateway asks the upstream for the usage and strips it again',
    `- Checks: ${checks}`,
    `- Load average (1 min): ${range(loads)} during the run; ${loadBefore} before`,
  ].join('\n');
}

// --- main -------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const unknown = FLAGS.filter((f) => f !== '--quick');
  if (unknown.length > 0) {
    process.stderr.write(`usage: node bench/limits.ts [--quick] (unknown: ${unknown.join(' ')})\n`);
    process.exit(2);
  }
  for (const [cmd, pkg] of [['wrk', 'wrk'], ['redis-server', 'redis-server'], ['redis-cli', 'redis-tools']]) {
    if (!onPath(cmd!)) throw new Error(`${cmd} not on PATH (Debian package ${pkg})`);
  }
  if (PIN) spawnSync('taskset', ['-a', '-p', '-c', '1', String(process.pid)], { stdio: 'ignore' });
  else process.stderr.write('bench: not pinning to CPUs (taskset missing or a single CPU)\n');
  if (!HAPROXY_FOUND) process.stderr.write('bench: haproxy not on PATH, skipping the HAProxy row (Debian package haproxy)\n');
  const generator = spawnSync('wrk', ['-v'], { encoding: 'utf8' }).stdout.split('\n')[0]!.split(' [')[0]!;
  const redisVersion = `Redis ${/v=(\S+)/.exec(spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).stdout)?.[1] ?? '?'}`;
  const loadBefore = loadavg()[0]!.toFixed(2);

  const mock = await startMock();
  const redis = await startRedis();
  const gateways = new Map<Via, Gateway>();
  for (const via of GATEWAY_VIAS) gateways.set(via, await startGateway(via, mock.url, redis.url));
  const haproxy = HAPROXY_FOUND ? await startHaproxy(launch, mock.url, TMP) : undefined;
  const haproxyServer: Server | undefined = haproxy && { name: 'haproxy', ...haproxy };
  const where = (t: Target): { url: string; server: Server | undefined } =>
    t.via === 'direct' ? { url: mock.url, server: undefined } : t.via === 'haproxy' ? { url: haproxyServer!.url, server: haproxyServer } : { url: gateways.get(t.via)!.url, server: gateways.get(t.via) };
  const targets = TARGETS.filter((t) => t.via !== 'haproxy' || haproxyServer);

  for (const t of targets) for (const mode of MODES) await check(t, where(t).url, mode);
  if (Number(redisCli(redis, 'DBSIZE')) === 0) throw new Error('the Redis gateway wrote nothing to Redis');
  const results: Results = await interleavedRounds(
    targets,
    MODES,
    S.rounds,
    TMP,
    wrkScript,
    (t, _mode, luaFile) => {
      const { url, server } = where(t);
      return measure(t, url, server, mock, t.name === 'redis limits' ? redis : undefined, luaFile);
    },
    (round, mode, t, s) =>
      process.stderr.write(
        `round ${round + 1}/${S.rounds} ${mode.name.padEnd(18)} ${t.name.padEnd(15)} ${s.rps.toFixed(0).padStart(6)} req/s  ` +
          `p50 ${s.p50.toFixed(2)} ms  p99 ${s.p99.toFixed(2)} ms  cpu ${n(s.cpu)} µs/req  mock ${s.mockCpu.toFixed(0)} µs/req` +
          `${Number.isFinite(s.redisCpu) ? `  redis ${s.redisCpu.toFixed(1)} µs/req, ${s.redisScripts.toFixed(2)} scripts/req` : ''}\n`,
      ),
  );

  process.stderr.write(`single requests: ${SINGLE_N} sequential non-streaming requests per target, interleaved\n`);
  const single = await ttfb(targets.map((t) => ({ name: t.name, url: where(t).url, headers: headers(t, false) })), body(false), SINGLE_N, 100);

  // Nothing was refused or let through uncounted, and the spend reached the store.
  const problems: string[] = [];
  for (const g of gateways.values()) {
    const refused = await metric(g, 'sluice_rate_limited_total');
    const storeErrors = await metric(g, 'sluice_limit_store_errors_total');
    if (refused > 0 || storeErrors > 0) problems.push(`gateway ${g.name}: ${refused} refused, ${storeErrors} store errors`);
  }
  const spendKeys = redisCli(redis, '--scan', '--pattern', `${REDIS_PREFIX}sp:*`).split('\n').filter(Boolean);
  const spent = spendKeys.reduce((sum, k) => sum + Number(redisCli(redis, 'GET', k)), 0);
  if (spendKeys.length === 0 || !(spent > 0)) problems.push(`no spend in Redis (keys: ${spendKeys.join(', ') || 'none'})`);
  if (problems.length > 0) throw new Error(`after the run: ${problems.join('; ')}`);
  const checks =
    'every target answered 2xx in chat\'s shape (50 chunks for a stream), x-ratelimit-* headers on the `limited` rows only; no non-2xx under load; ' +
    `after the run the gateways counted 0 refusals and 0 store errors, and Redis held $${n(spent / 1e6, 2)} of spend for \`limited\``;

  // What the run left in Redis: every settlement leaves a marker (settled:<lease>) for 2 minutes.
  const settled = redisCli(redis, '--scan', '--pattern', `${REDIS_PREFIX}settled:*`).split('\n').filter(Boolean);
  const memoryMb = Number(/^used_memory:(\d+)/m.exec(redisCli(redis, 'INFO', 'memory'))?.[1]) / 2 ** 20;
  const left =
    `Redis after the run: ${redisCli(redis, 'DBSIZE')} keys, ${settled.length} of them \`${REDIS_PREFIX}settled:<request id>\` markers ` +
    `(TTL ${settled[0] === undefined ? '–' : redisCli(redis, 'PTTL', settled[0])} ms for one), used_memory ${n(memoryMb, 1)} MiB`;
  process.stderr.write(`${left}\n`);
  // The memory store keeps what the Redis store keeps in Redis: its size shows in the gateway's RSS.
  const rss = `Gateway RSS after the run: ${[...gateways.values()].map((g) => `${g.name} ${n(rssMb(g.pid), 1)} MiB`).join(', ')}`;
  process.stderr.write(`${rss}\n`);

  await Promise.all([...gateways.values(), mock, ...(haproxyServer ? [haproxyServer] : [])].map(stop));
  await stop(redis);

  const md = `# Sluice client keys, limits and spend benchmark (#16)\n\n${machineInfo(generator, loadBefore, redisVersion, checks)}\n- ${left}\n- ${rss}\n\n` +
    `## Keys and limits beside the plain relay${haproxyServer ? ', a direct connection and HAProxy' : ' and a direct connection'}\n\n${table(results)}\n\n${summary(results)}\n` +
    `\n## Single-request latency (non-streaming, ${SINGLE_N} sequential requests per target after 100 unmeasured, one keep-alive connection each, the targets taking turns; ` +
    'from the bench process on CPU 1, req.end() to the first body chunk)\n\n' +
    `${singleTable(single)}\n`;
  process.stdout.write(`\n${md}`);
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, 'limits.md'), md);
  process.stdout.write(`\nwritten to ${join('bench', 'results', 'limits.md')}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  killAll();
  process.exit(1);
});
