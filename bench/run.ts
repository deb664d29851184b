// Sluice benchmark: gateway overhead against a mock upstream, all on 127.0.0.1.
//
//   npm run bench                 5 rounds x 5 s per run (about 10 minutes)
//   npm run bench -- --quick      2 rounds x 2 s per run (about 2 minutes)
//   npm run bench -- --profile    also run the gateways under --cpu-prof and print the hottest functions
//   npm run bench -- --headline   also rewrite the headline table of BENCHMARKS.md (npm run bench:headline)
//   npm run bench -- --soak       only the soak: 1,000,000 requests through the production gateway, memory sampled
//                                 as it goes (about 5 minutes; results in bench/results/soak.md)
//
// It starts the mock upstream and three gateways (built dist/main.js) as separate processes: "bare" (no
// client keys, no access log), "production" (a client key required and sent, access log on, drained
// from a pipe) and "protocols" (as bare, with four proxy listeners: HTTP/1.1 cleartext, HTTP/1.1 over
// TLS, h2c and h2 over TLS; see bench/protocols.ts). wrk (or autocannon if wrk is missing) loads the
// HTTP/1.1 targets and h2load (Debian's nghttp2-client) the HTTP/2 ones, each target in turn, the order
// rotating every round, and the CPU time each server process spends (/proc/<pid>/stat utime+stime) is
// divided by the requests completed. HAProxy (Debian's haproxy, one thread, pinned like the gateways) is
// one more target when on PATH, as the reference C proxy. After the rounds: single-stream time to first
// byte, and the bare gateway's RSS idle, with 10,000 idle connections and 1,000 slow streams (see
// bench/extras.ts). Last, scaling: an echo-model gateway at 1 and at N = CPUs workers, alternating rounds, unpinned
// (bench/workers.ts). Medians across rounds go to stdout and bench/results/latest.md. Every gateway but the
// scaling ones runs `workers: 1`, so its CPU is one process's.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { stringify } from 'yaml';
import { cleanUp, killAll, launch, onPath, PIN, runToEnd, startMock, startServer as startProcess, stop, type Server as Process } from './processes.ts';
import { makePki } from '../test/support/certs.ts';
import {
  BASELINE, PROTOCOL_TARGETS, post, protocolListeners, protocolMethods, protocolSummary, protocolTable, runH2load,
  type Protocol, type ProtocolTarget,
} from './protocols.ts';
import { memory, memoryLines, rssMb, startHaproxy, ttfb, ttfbTable, warmIdleRss, type MemoryResult } from './extras.ts';
import { measureGroup, scalingTable, type ScalingSample } from './workers.ts';
import { runWrk, WRK_DONE } from './wrk.ts';
import { cpuTicks, median, type Load, fixed as n } from './stats.ts';
import { topSelf } from './cpu-profile.ts';
import { commitMeasured, headline, writeHeadline } from './headline.ts';

const ROOT = resolve(import.meta.dirname, '..');
const RESULTS = join(ROOT, 'bench', 'results');
const PROFILES = join(RESULTS, 'profiles');
const FLAGS = process.argv.slice(2);
const QUICK = FLAGS.includes('--quick');
const PROFILE = FLAGS.includes('--profile');
const SOAK = FLAGS.includes('--soak');
/** Rewrites the headline table of BENCHMARKS.md (bench/headline.ts) with this run's figures. */
const HEADLINE = FLAGS.includes('--headline');
/** Requests in a soak run (SOAK_REQUESTS overrides, for a shorter try). */
const SOAK_REQUESTS = Number(process.env.SOAK_REQUESTS) || 1_000_000;
const S = { rounds: QUICK ? 2 : 5, seconds: QUICK ? 2 : 5, warmupSeconds: 1, connections: 64, threads: 1 };
const CLIENT_KEY = 'sk-bench-client-key-0123456789';
const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;
const WRK = onPath('wrk');
const H2LOAD_FOUND = onPath('h2load');
const OPENSSL_FOUND = onPath('openssl'); // to make the TLS test certificates
const HAPROXY_FOUND = onPath('haproxy');
const TTFB_N = QUICK ? 100 : 300;
const CPU_COUNT = availableParallelism();
const ALL_CPUS = `0-${CPU_COUNT - 1}`;
const SCALING = { threads: 2, connections: 64, cpu: ALL_CPUS };
const IDLE_CONNS = 10_000;
const SLOW_STREAMS = 1_000;

interface Server extends Process { urls: Record<string, string> }
interface Target {
  name: string; // direct, bare, production, haproxy; or a ProtocolTarget name
  group: 'overhead' | 'protocols';
  url: string;
  gateway: Server | undefined;
  key?: string;
  protocol: Protocol;
  tls: boolean;
}
interface Case { name: string; body: string; mock?: string }
export interface Sample { rps: number; p50: number; p99: number; mean: number; gwCpu: number; mockCpu: number }

const CASES: Case[] = [
  { name: 'chat', body: JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16 }) },
  {
    name: 'chat stream (50 chunks)',
    body: JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'Say hello' }], stream: true }),
    mock: JSON.stringify({ chunks: 50 }),
  },
];

// --- child processes ------------------------------------------------------------------------------

const TMP = mkdtempSync(join(tmpdir(), 'sluice-bench-')); // generated configs, the wrk script, request bodies
cleanUp.push(TMP); // and the test PKI's directory, later

/** A server of processes.ts, with its listeners' URLs by name. */
async function startServer(name: string, args: string[], urlFrom: (line: Record<string, unknown>) => string | undefined, cpu = '0'): Promise<Server> {
  return { ...(await startProcess(name, args, urlFrom, cpu)), urls: {} };
}

/** `extraListeners` are proxy listeners besides `proxy`; every listener's URL ends up in `urls` (by name). */
async function startGateway(name: 'bare' | 'production' | 'protocols', mockUrl: string, extraListeners: { name: string; tls?: object }[] = []): Promise<Server> {
  const production = name === 'production';
  const config = {
    workers: 1,
    listeners: [
      { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
      ...extraListeners,
      { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
    ],
    providers: [{ name: 'mock', type: 'openai', base_url: `${mockUrl}/v1`, api_key: 'sk-upstream-bench' }],
    models: [{ name: 'bench', provider: 'mock' }],
    keys: production ? [{ name: 'bench', key: CLIENT_KEY }] : [],
    shutdown: { min_drain_secs: 0, max_drain_secs: 5 },
    log: { level: 'info', access_log: production },
  };
  const file = join(TMP, `${name}.yaml`);
  writeFileSync(file, stringify(config));
  const prof = PROFILE ? ['--cpu-prof', '--cpu-prof-dir', PROFILES, '--cpu-prof-name', `${name}.cpuprofile`] : [];
  const tls = new Set(extraListeners.filter((l) => l.tls).map((l) => l.name));
  const urls: Record<string, string> = {};
  const server = await startServer(name, [...prof, 'dist/main.js', '--config', file], (l) => {
    const listener = String(l.listener);
    if (l.event === 'listener_started') urls[listener] = `${tls.has(listener) ? 'https' : 'http'}://${String(l.address)}`;
    return l.event === 'ready' ? urls.proxy : undefined;
  });
  return { ...server, urls };
}

/** A gateway of `workers` processes on every CPU, answering the bench model with the echo provider. */
async function startScalingGateway(workers: number): Promise<Server> {
  const config = {
    workers,
    listeners: [{ name: 'proxy', address: '127.0.0.1:0', role: 'proxy' }, { name: 'admin', address: '127.0.0.1:0', role: 'admin' }],
    providers: [{ name: 'echo', type: 'echo' }],
    models: [{ name: 'bench', provider: 'echo' }],
    shutdown: { min_drain_secs: 0, max_drain_secs: 5 },
    log: { level: 'info', access_log: false },
  };
  const file = join(TMP, `workers-${workers}.yaml`);
  writeFileSync(file, stringify(config));
  let url: string | undefined;
  return startServer(`workers-${workers}`, ['dist/main.js', '--config', file], (l) => {
    if (l.event === 'listener_started' && l.role === 'proxy') url = `http://${String(l.address)}`;
    return l.event === 'ready' && l.worker === undefined ? url : undefined;
  }, ALL_CPUS);
}

/** SIGTERM (so --cpu-prof writes its profile), SIGKILL after 10 s. */
// --- load generation ----------------------------------------------------------------------------

const WRK_SCRIPT = `
wrk.method = "POST"
wrk.body = os.getenv("BENCH_BODY")
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("BENCH_KEY")
if key ~= nil and key ~= "" then wrk.headers["Authorization"] = "Bearer " .. key end
local mock = os.getenv("BENCH_MOCK")
if mock ~= nil and mock ~= "" then wrk.headers["x-mock"] = mock end
${WRK_DONE}`;

/** The request headers of a target and case (wrk's script sets the same from its environment). */
function headersFor(target: Target, c: Case): Record<string, string> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (target.key) headers.authorization = `Bearer ${target.key}`;
  if (c.mock) headers['x-mock'] = c.mock;
  return headers;
}


async function wrk(target: Target, c: Case, seconds: number, luaFile: string, shape = { threads: S.threads, connections: S.connections, cpu: '1' }): Promise<Load> {
  const env = { BENCH_BODY: c.body, BENCH_KEY: target.key ?? '', BENCH_MOCK: c.mock ?? '' };
  return runWrk(`${target.url}/v1/chat/completions`, luaFile, seconds, shape, env);
}

async function autocannon(target: Target, c: Case, seconds: number): Promise<Load> {
  const headers = headersFor(target, c);
  const script = `import ac from 'autocannon'; const r = await ac(JSON.parse(process.env.BENCH_OPTS));
    process.stdout.write(JSON.stringify({ requests: r.requests.total, errors: r.errors + r.timeouts, non2xx: r.non2xx, p50: r.latency.p50, p99: r.latency.p99, mean: r.latency.average, duration: r.duration }));`;
  const opts = { url: `${target.url}/v1/chat/completions`, method: 'POST', body: c.body, headers, connections: S.connections, duration: seconds };
  // Like wrk, no certificate check on the TLS target.
  const env = { BENCH_OPTS: JSON.stringify(opts), ...(target.tls ? { NODE_TLS_REJECT_UNAUTHORIZED: '0' } : {}) };
  const child = launch('1', process.execPath, ['--input-type=module', '-e', script], env);
  const r = JSON.parse(await runToEnd(child, (seconds + 20) * 1000)) as Record<string, number>;
  return { requests: r.requests!, seconds: r.duration!, errors: r.errors!, non2xx: r.non2xx!, p50Ms: r.p50!, p99Ms: r.p99!, meanMs: r.mean! };
}

function h2load(target: Target, c: Case, seconds: number): Promise<Load> {
  const exec = (args: string[]) => runToEnd(launch('1', 'h2load', args), (seconds + 20) * 1000);
  return runH2load(exec, { url: `${target.url}/v1/chat/completions`, tls: target.tls, seconds, body: c.body, headers: headersFor(target, c), dir: TMP });
}

// --- measurement --------------------------------------------------------------------------------

/**
 * One POST per target and case, in the target's protocol (the certificate checked against `ca`), to
 * fail fast on a wrong config rather than benchmark error responses.
 */
async function check(target: Target, c: Case, ca: Buffer | undefined): Promise<void> {
  const headers = headersFor(target, c);
  const path = '/v1/chat/completions';
  let status: number;
  let text: string;
  if (target.protocol === 'http1' && !target.tls) {
    const res = await fetch(`${target.url}${path}`, { method: 'POST', headers, body: c.body });
    [status, text] = [res.status, await res.text()];
  } else {
    ({ status, text } = await post(target.url, path, target.protocol, headers, c.body, ca));
  }
  const events = text.split('\n').filter((l) => l.startsWith('data:')).length;
  if (status !== 200 || (c.mock !== undefined && events < 50)) {
    throw new Error(`sanity check failed for ${target.name} / ${c.name}: HTTP ${status}, ${events} SSE events: ${text.slice(0, 300)}`);
  }
}

async function measure(target: Target, c: Case, mock: Process, luaFile: string): Promise<Sample> {
  const load = (seconds: number) =>
    target.protocol === 'h2' ? h2load(target, c, seconds) : WRK ? wrk(target, c, seconds, luaFile) : autocannon(target, c, seconds);
  await load(S.warmupSeconds);
  const gw0 = target.gateway ? cpuTicks(target.gateway.pid) : 0;
  const mock0 = cpuTicks(mock.pid);
  const r = await load(S.seconds);
  const gw1 = target.gateway ? cpuTicks(target.gateway.pid) : 0;
  const mock1 = cpuTicks(mock.pid);
  if (r.errors > 0 || r.non2xx > 0) {
    process.stderr.write(`  warning: ${target.name}/${c.name}: ${r.errors} socket errors, ${r.non2xx} non-2xx responses\n`);
  }
  const usPerReq = (ticks: number) => (r.requests > 0 ? (ticks / CLK_TCK) * 1e6 / r.requests : NaN);
  loads.push(loadavg()[0]!);
  return { rps: r.requests / r.seconds, p50: r.p50Ms, p99: r.p99Ms, mean: r.meanMs, gwCpu: usPerReq(gw1 - gw0), mockCpu: usPerReq(mock1 - mock0) };
}

/** The 1-minute load average after each measurement. */
const loads: number[] = [];

// --- reporting ----------------------------------------------------------------------------------

type Results = Map<string, Map<string, Sample[]>>; // case → target → one sample per round

function table(results: Results, targets: Target[]): string {
  const rows = [
    '| case | target | req/s | p50 ms | p99 ms | gateway CPU µs/req | mock CPU µs/req | req/s vs direct | p50 vs direct | p99 vs direct |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
    for (const [caseName, byTarget] of results) {
    const direct = byTarget.get('direct')!;
    for (const t of targets) {
      const samples = byTarget.get(t.name)!;
      const m = (f: (s: Sample) => number) => median(samples.map(f));
      // Ratios are taken per round, then the median: slow drift of the machine cancels out.
      const ratio = (f: (s: Sample) => number) => median(samples.map((s, i) => f(s) / f(direct[i]!)));
      const vs = (f: (s: Sample) => number) => (t.name === 'direct' ? '1' : `${n(ratio(f), 2)}×`);
      rows.push(
        `| ${caseName} | ${t.name} | ${n(m((s) => s.rps))} | ${n(m((s) => s.p50), 2)} | ${n(m((s) => s.p99), 2)} | ` +
          `${t.gateway ? n(m((s) => s.gwCpu)) : '–'} | ${n(m((s) => s.mockCpu))} | ${vs((s) => s.rps)} | ${vs((s) => s.p50)} | ${vs((s) => s.p99)} |`,
      );
    }
  }
  return rows.join('\n');
}

function summary(results: Results): string {
  const chat = results.get(CASES[0]!.name)!;
  const added = (name: string) => median(chat.get(name)!.map((s) => s.gwCpu));
  const verdict = (us: number) => (us <= 150 ? 'meets' : 'misses');
  const lines = ['bare', 'production']
    .map((t) => `- Gateway CPU added per non-streaming request, ${t}: **${added(t).toFixed(0)} µs** (${verdict(added(t))} the ≤150 µs target)`);
  for (const [caseName, byTarget] of results) {
    const haproxy = byTarget.get('haproxy');
    if (!haproxy) continue;
    // Per-round ratios, then the median, as in the table.
    const ratio = (t: string) => median(byTarget.get(t)!.map((s, i) => s.gwCpu / haproxy[i]!.gwCpu));
    const r = (t: string) => `${t} **${ratio(t).toFixed(2)}×** (${ratio(t) <= 3 ? 'meets' : 'misses'} ≤3×)`;
    lines.push(`- Gateway CPU / HAProxy CPU per request, ${caseName}: ${r('bare')}, ${r('production')}`);
  }
  return lines.join('\n');
}

function machineInfo(generator: string, loadBefore: string, protocols: ProtocolTarget[]): string {
  const model = /^model name\s*:\s*(.*)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? 'unknown';
  const range = (xs: number[]) => `${Math.min(...xs).toFixed(2)}–${Math.max(...xs).toFixed(2)}`;
  return [
    `- Date: ${new Date().toISOString()}`,
    `- CPU: ${model}, ${cpus().length} cores; Node ${process.version}; clock ticks ${CLK_TCK}/s`,
    `- Load generator: ${generator}, ${S.connections} keep-alive connections, ${S.threads} thread; ` +
      `${S.rounds} rounds × ${S.seconds} s per target and case after a ${S.warmupSeconds} s warm-up, order rotated every round; medians shown`,
    PIN
      ? '- Pinning: load generator on CPU 1, gateways and mock on CPU 0 (taskset)'
      : '- Pinning: none (taskset missing or fewer than 2 CPUs): generator and servers share the CPUs',
    `- Gateways: "bare" = no client keys, access log off; "production" = client key required and sent, access log on (stdout drained through a pipe); metrics always on${PROFILE ? '; **run under --cpu-prof, so slower than usual**' : ''}`,
    ...protocolMethods(protocols),
    ...(HAPROXY_FOUND
      ? [`- HAProxy (${spawnSync('haproxy', ['-v'], { encoding: 'utf8' }).stdout.split('\n')[0]!.split(' - ')[0]}): \`haproxy -db\`, \`nbthread 1\`, mode http, keep-alive both sides, ` +
          'one backend server (the mock), no health checks, pinned to CPU 0 like the gateways; its "gateway CPU" column is HAProxy\'s own CPU per request']
      : ['- HAProxy: not on PATH, rows skipped (Debian package haproxy)']),
    `- Time to first byte: ${TTFB_N} sequential streaming requests (after 30 unmeasured) per target over one keep-alive connection each, the targets interleaved request by request, ` +
      'from the bench process (node:http, on CPU 1 with the load generator idle), from req.end() to the first body chunk',
    `- Memory: VmRSS of the "bare" gateway from /proc/<pid>/status 2 s after a 500-request warm-up before the load rounds, and again after the load rounds and 2 s idle; then with up to ${IDLE_CONNS} ` +
      `keep-alive connections opened by the bench process (one non-streaming request each, then idle 2 s); then with ${SLOW_STREAMS} ` +
      'streams on top (mock `x-mock: {"chunks":100,"sseIntervalMs":100}`, 10 s each, measured 1 s after all got their first chunk)',
    `- Load average (1 min): ${range(loads)} during the run (after each measurement); ${loadBefore} before, ${loadavg()[0]!.toFixed(2)} after (other work on the machine skews everything)`,
    '- Caveat: numbers from a shared 2-core VM are noisy (±10-20% between runs); compare ratios, not absolute values.',
  ].join('\n');
}

/** VmRSS (MB) of the embedded default (no config file) at one process, 3 s after it is ready and never asked anything. */
async function embeddedIdleRss(): Promise<number> {
  let url: string | undefined;
  const server = await startProcess('embedded', ['dist/main.js'], (l) => {
    if (l.event === 'listener_started' && l.listener === 'proxy') url = `http://${String(l.address)}`;
    return l.event === 'ready' ? url : undefined;
  }, '0', { SLUICE_WORKERS: '1', SLUICE_CONFIG: '' });
  await new Promise((r) => setTimeout(r, 3000));
  const rss = rssMb(server.pid);
  await stop(server);
  return rss;
}

// --- HAProxy, time to first byte, memory (bench/extras.ts) ---------------------------------------

async function startHaproxyServer(mockUrl: string): Promise<Server | undefined> {
  if (!HAPROXY_FOUND) {
    process.stderr.write('bench: haproxy not on PATH, skipping the HAProxy rows (Debian package haproxy)\n');
    return undefined;
  }
  const h = await startHaproxy(launch, mockUrl, TMP);
  return { name: 'haproxy', child: h.child, pid: h.pid, url: h.url, urls: {} };
}

/** Sequential streaming requests over one connection per target, from this process (on CPU 1). */
function measureTtfb(targets: Target[]): Promise<Map<string, number[]>> {
  const c = CASES[1]!;
  process.stderr.write(`ttfb: ${TTFB_N} streaming requests per target, interleaved: ${targets.map((t) => t.name).join(', ')}\n`);
  return ttfb(targets.map((t) => ({ name: t.name, url: t.url, headers: headersFor(t, c) })), c.body, TTFB_N);
}

async function measureMemory(gateway: Server): Promise<MemoryResult> {
  const stream = { name: 'slow stream', body: CASES[1]!.body, mock: JSON.stringify({ chunks: 100, sseIntervalMs: 100 }) };
  const target: Target = { name: 'bare', group: 'overhead', url: gateway.url, gateway, protocol: 'http1', tls: false };
  process.stderr.write(`memory: bare gateway at ${rssMb(gateway.pid).toFixed(1)} MB, opening ${IDLE_CONNS} idle connections and ${SLOW_STREAMS} slow streams\n`);
  const m = await memory(gateway.pid, gateway.url, CASES[0]!.body, headersFor(target, stream), stream.body, IDLE_CONNS, SLOW_STREAMS);
  process.stderr.write(`memory: ${JSON.stringify(m)}\n`);
  return m;
}

// --- workers (bench/workers.ts) -----------------------------------------------------------------

/** The gateway at 1 and at CPU_COUNT workers, alternating rounds, wrk on every CPU too. */
async function measureScaling(luaFile: string): Promise<ScalingSample[]> {
  const counts = [1, CPU_COUNT];
  const groups = new Map<number, Server>();
  for (const n of counts) groups.set(n, await startScalingGateway(n));
  const c = CASES[0]!;
  const samples: ScalingSample[] = [];
  for (let round = 0; round < S.rounds; round++) {
    for (const n of round % 2 ? [...counts].reverse() : counts) {
      const server = groups.get(n)!;
      const target: Target = { name: `workers-${n}`, group: 'overhead', url: server.url, gateway: server, protocol: 'http1', tls: false };
      await wrk(target, c, S.warmupSeconds, luaFile, SCALING);
      const sample = await measureGroup(n, server.pid, CLK_TCK, () => wrk(target, c, S.seconds, luaFile, SCALING));
      samples.push(sample);
      process.stderr.write(`workers round ${round + 1}/${S.rounds} workers ${n}: ${sample.rps.toFixed(0)} req/s  p50 ${sample.p50.toFixed(2)} ms  group ${sample.cpuUs.toFixed(0)} µs/req\n`);
    }
  }
  await Promise.all([...groups.values()].map(stop));
  return samples;
}

function scalingNote(): string {
  return `wrk ${SCALING.threads} threads, ${SCALING.connections} keep-alive connections, ${S.rounds} rounds × ${S.seconds} s alternating, medians. ` +
    `Gateways and wrk all share the machine's ${CPU_COUNT} CPUs: the load generator takes a large part of them, so this shows how ` +
    'much more one instance serves with its workers, not a per-core limit. "group CPU" sums the supervisor and the workers.';
}

// --- soak ---------------------------------------------------------------------------------------

interface SoakPoint { requests: number; rssMb: number; heapMb: number; seconds: number }

/** The gateway's V8 heap in use, from its own metrics. */
async function heapUsedMb(admin: string): Promise<number> {
  const text = await (await fetch(`${admin}/metrics`)).text();
  return Number(/^nodejs_heap_size_used_bytes (\S+)$/m.exec(text)?.[1]) / 1024 / 1024;
}

/**
 * SOAK_REQUESTS requests through the production gateway (client key, access log, metrics), in 10 s
 * wrk runs alternating non-streaming and 50-chunk streaming chat; RSS and heap after each run, and
 * once more after 5 s idle.
 */
async function soak(luaFile: string, generator: string): Promise<void> {
  const mock = await startMock();
  const gateway = await startGateway('production', mock.url);
  const admin = gateway.urls.admin ?? '';
  const target: Target = { name: 'production', group: 'overhead', url: gateway.url, gateway, key: CLIENT_KEY, protocol: 'http1', tls: false };
  for (const c of CASES) await check(target, c, undefined);
  const started = Date.now();
  const point = async (requests: number): Promise<SoakPoint> => ({ requests, rssMb: rssMb(gateway.pid), heapMb: await heapUsedMb(admin), seconds: (Date.now() - started) / 1000 });
  const points: SoakPoint[] = [await point(0)];
  let total = 0;
  let errors = 0;
  for (let i = 0; total < SOAK_REQUESTS; i++) {
    const r = await wrk(target, CASES[i % CASES.length]!, 10, luaFile);
    total += r.requests;
    errors += r.errors + r.non2xx;
    points.push(await point(total));
    process.stderr.write(`soak: ${total} requests, RSS ${points.at(-1)!.rssMb.toFixed(1)} MB, heap ${points.at(-1)!.heapMb.toFixed(1)} MB, ${errors} errors\n`);
  }
  await new Promise((r) => setTimeout(r, 5000));
  const idle = await point(total);
  await Promise.all([gateway, mock].map(stop));
  const rows = ['| requests | elapsed s | RSS MB | heap used MB |', '|--:|--:|--:|--:|'];
  const every = Math.max(1, Math.floor(points.length / 10));
  for (const [i, p] of points.entries()) {
    if (i % every === 0 || i === points.length - 1) rows.push(`| ${p.requests} | ${p.seconds.toFixed(0)} | ${p.rssMb.toFixed(1)} | ${p.heapMb.toFixed(1)} |`);
  }
  rows.push(`| ${idle.requests} (5 s idle) | ${idle.seconds.toFixed(0)} | ${idle.rssMb.toFixed(1)} | ${idle.heapMb.toFixed(1)} |`);
  // The heap in use is a sawtooth (garbage waits for the next GC): its lowest sample in each quarter
  // of the run is what survives, and would climb with a leak.
  const quarter = (q: number) => points.filter((p) => p.requests > (total * q) / 4 && p.requests <= (total * (q + 1)) / 4);
  const lows = [0, 1, 2, 3].map((q) => Math.min(...quarter(q).map((p) => p.heapMb)).toFixed(1));
  const half = points.find((p) => p.requests >= total / 2)!;
  const md = `# Sluice soak\n\n- Date: ${new Date().toISOString()}; Node ${process.version}; ${generator}, ${S.connections} connections\n` +
    `- Production gateway (client key, access log drained through a pipe, metrics), \`workers: 1\`; 10 s runs alternating non-streaming and 50-chunk streaming chat\n` +
    `- ${total} requests, ${errors} errors or non-2xx\n\n${rows.join('\n')}\n\n` +
    `- Lowest heap in use in each quarter of the run: ${lows.join(', ')} MB.\n` +
    `- RSS at ${half.requests} requests: ${half.rssMb.toFixed(1)} MB; at the end: ${points.at(-1)!.rssMb.toFixed(1)} MB.\n`;
  process.stdout.write(`\n${md}`);
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, 'soak.md'), md);
}

// --- main ---------------------------------------------------------------------------------------

/** The "protocols" gateway and its targets, less those whose tool (h2load, openssl) is missing. */
async function startProtocolsGateway(mockUrl: string): Promise<{ gateway?: Server; targets: ProtocolTarget[]; ca?: Buffer }> {
  if (!H2LOAD_FOUND) process.stderr.write('bench: h2load not on PATH, skipping the HTTP/2 rows (Debian package nghttp2-client)\n');
  if (!OPENSSL_FOUND) process.stderr.write('bench: openssl not on PATH, skipping the TLS rows (Debian package openssl)\n');
  const targets = PROTOCOL_TARGETS.filter((t) => (t.protocol !== 'h2' || H2LOAD_FOUND) && (!t.tls || OPENSSL_FOUND));
  if (targets.every((t) => t.name === BASELINE)) return { targets: [] }; // nothing to compare
  const pki = targets.some((t) => t.tls) ? makePki() : undefined;
  if (pki) cleanUp.push(pki.dir);
  const gateway = await startGateway('protocols', mockUrl, protocolListeners(targets, pki?.server));
  return { gateway, targets, ca: pki?.caPem };
}

async function main(): Promise<void> {
  const unknown = FLAGS.filter((f) => !['--quick', '--profile', '--soak', '--headline'].includes(f));
  if (unknown.length > 0) {
    process.stderr.write(`usage: npm run bench [-- --quick] [-- --profile] [-- --soak] [-- --headline] (unknown: ${unknown.join(' ')})\n`);
    process.exit(2);
  }
  // Our own work (draining the access log) goes to the generator's CPU, not the servers'.
  if (PIN) spawnSync('taskset', ['-a', '-p', '-c', '1', String(process.pid)], { stdio: 'ignore' });
  const generator = WRK ? spawnSync('wrk', ['-v'], { encoding: 'utf8' }).stdout.split('\n')[0]!.split(' [')[0]! : 'autocannon';
  if (!WRK) process.stderr.write('bench: wrk not on PATH, using autocannon (npm install --save-dev autocannon)\n');
  if (!PIN) process.stderr.write('bench: not pinning to CPUs (taskset missing or a single CPU)\n');

  const loadBefore = loadavg()[0]!.toFixed(2);
  const luaFile = join(TMP, 'post.lua');
  writeFileSync(luaFile, WRK_SCRIPT);
  if (SOAK) return soak(luaFile, generator);
  if (PROFILE) mkdirSync(PROFILES, { recursive: true });

  const mock = await startMock();
  const bare = await startGateway('bare', mock.url);
  const production = await startGateway('production', mock.url);
  const plain = { group: 'overhead', protocol: 'http1', tls: false } as const;
  const targets: Target[] = [
    { name: 'direct', url: mock.url, gateway: undefined, ...plain },
    { name: 'bare', url: bare.url, gateway: bare, ...plain },
    { name: 'production', url: production.url, gateway: production, key: CLIENT_KEY, ...plain },
  ];
  const haproxy = await startHaproxyServer(mock.url);
  if (haproxy) targets.push({ name: 'haproxy', url: haproxy.url, gateway: haproxy, ...plain });
  // The floor of any Node gateway (bench/floor-proxy.ts): what Node and undici cost by themselves.
  const floor: Server = { ...(await startProcess('node-floor', ['bench/floor-proxy.ts', mock.url], (l) => l.floor as string | undefined)), urls: {} };
  targets.push({ name: 'node-floor', url: floor.url, gateway: floor, ...plain });
  const { gateway: protocols, targets: protocolTargets, ca } = await startProtocolsGateway(mock.url);
  for (const t of protocolTargets) {
    targets.push({ name: t.name, group: 'protocols', url: protocols!.urls[t.listener]!, gateway: protocols, protocol: t.protocol, tls: t.tls });
  }
  for (const t of targets) for (const c of CASES) await check(t, c, ca);
  const warmRss = await warmIdleRss(bare.pid, { name: 'bare', url: bare.url, headers: headersFor(targets[1]!, CASES[0]!) }, CASES[0]!.body);

  const results: Results = new Map(CASES.map((c) => [c.name, new Map(targets.map((t) => [t.name, [] as Sample[]]))]));
  for (let round = 0; round < S.rounds; round++) {
    const order = targets.map((_, i) => targets[(i + round) % targets.length]!);
    for (const c of CASES) {
      for (const t of order) {
        const s = await measure(t, c, mock, luaFile);
        results.get(c.name)!.get(t.name)!.push(s);
        process.stderr.write(
          `round ${round + 1}/${S.rounds} ${c.name.padEnd(24)} ${t.name.padEnd(10)} ${s.rps.toFixed(0).padStart(6)} req/s  ` +
            `p50 ${s.p50.toFixed(2)} ms  p99 ${s.p99.toFixed(2)} ms  gateway ${t.gateway ? s.gwCpu.toFixed(0) : "-"} µs/req  mock ${s.mockCpu.toFixed(0)} µs/req\n`,
        );
      }
    }
  }

  const ttfbResults = await measureTtfb(targets.filter((t) => t.group === 'overhead'));
  const mem = { warm: warmRss, ...(await measureMemory(bare)) };
  const embeddedRss = await embeddedIdleRss();

  const gateways = [bare, production, ...(protocols ? [protocols] : [])];
  await Promise.all([...gateways, ...(haproxy ? [haproxy] : []), floor, mock].map(stop));
  const scaling = WRK && CPU_COUNT >= 2 ? await measureScaling(luaFile) : [];

  const overhead = targets.filter((t) => t.group === 'overhead');
  let md = `# Sluice benchmark\n\n${machineInfo(generator, loadBefore, protocolTargets)}\n\n` +
    `## Gateway vs direct${haproxy ? ' (and HAProxy)' : ''}\n\n${table(results, overhead)}\n\n${summary(results)}\n` +
    `\n## Single-stream time to first byte (streaming chat, 50 chunks)\n\n${ttfbTable(ttfbResults, TTFB_N)}\n` +
    `\n## Memory (bare gateway, VmRSS)\n\n${memoryLines(mem, IDLE_CONNS)}\n`;
  if (scaling.length > 0) md += `\n## Workers: 1 → ${CPU_COUNT} processes (echo model, nothing pinned)\n\n${scalingTable(scaling)}\n\n${scalingNote()}\n`;
  if (protocolTargets.length > 0) {
    md += `\n## TLS and HTTP/2 (gateway "protocols", each protocol vs its HTTP/1.1 cleartext listener)\n\n${protocolTable(results, protocolTargets)}\n\n` +
      `${protocolSummary(results.get(CASES[0]!.name)!, protocolTargets)}\n`;
  }
  md += `\n## Idle memory of the embedded default\n\n- One process (\`workers: 1\`), 3 s after it is ready, no request: **${embeddedRss.toFixed(1)} MB** VmRSS\n`;
  process.stdout.write(`\n${md}`);
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, 'latest.md'), md);
  process.stdout.write(`\nwritten to ${join('bench', 'results', 'latest.md')}\n`);
  if (HEADLINE && haproxy) {
    const block = headline(
      { results, chat: CASES[0]!.name, stream: CASES[1]!.name, ttfb: ttfbResults, embeddedRss, connections: S.connections, rounds: S.rounds, seconds: S.seconds, quick: QUICK },
      commitMeasured(ROOT),
    );
    writeHeadline(join(ROOT, 'BENCHMARKS.md'), block);
    process.stdout.write(`\n${block}\n\nwritten to the head of BENCHMARKS.md\n`);
  }
  if (PROFILE) {
    for (const { name } of gateways) {
      const file = join(PROFILES, `${name}.cpuprofile`);
      process.stdout.write(`\nTop 15 self-time functions, ${name} gateway (${file}):\n${topSelf(file)}\n`);
    }
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  killAll();
  process.exit(1);
});
