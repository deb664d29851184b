// Routes and translation (issue 15) measured: the overhead per request of a route with three
// targets and of each translation direction, beside the plain relay, a direct connection and
// HAProxy, in the same run; and single-stream time to first byte through each translation, to show
// that a translated stream is not buffered.
//
//   npm run build && node bench/routing.ts            5 rounds x 5 s per target and case (about 9 minutes)
//   npm run build && node bench/routing.ts --quick    2 rounds x 2 s (about 2 minutes)
//
// All on 127.0.0.1. It starts the mock upstream (test/support/mock-upstream.ts), HAProxy (when on
// PATH) in front of it, and ONE gateway (the built dist/main.js, `workers: 1`, no client keys,
// access log off) with providers `oa`, `oa2`, `oa3` (openai, all on the mock) and `an` (anthropic,
// on the mock), and the models:
//   plain          → oa                       /v1/chat/completions: the plain relay
//   three          → targets oa, oa2, oa3     /v1/chat/completions: a route of three targets, round robin
//   claude         → an                       /v1/chat/completions: chat → Messages; /v1/responses: Responses → Messages
//   gpt            → oa                       /v1/messages: Messages → chat
//   claude-native  → an                       /v1/messages natively: the baseline of the Anthropic-shaped rows
// Each target is measured non-streaming and streaming (the mock sends 50 content chunks back to back:
// `x-mock: {"chunks":50}`), the targets interleaved and their order rotated every round; wrk (one
// thread, 32 keep-alive connections) on CPU 1, the servers on CPU 0 (taskset). CPU per request is
// the gateway's (or HAProxy's) utime + stime from /proc/<pid>/stat over the requests completed.
// Every target and case is checked first (2xx, the answer in the client's shape, 50 chunks for a
// stream): a failing setup aborts before anything is measured; a non-2xx answer under load aborts too.
// After the rounds, from this process (node:http, one keep-alive connection per target, the targets
// taking turns request by request): single-stream time to first byte of the 50-chunk stream; paced
// streams (10 chunks 10 ms apart), whose first byte must come long before their last (no buffering);
// and time to first byte by the number of chunks the mock sends back to back (a translation rewrites
// what one upstream read brought before writing it). The tables go to stdout and to
// bench/results/routing.md.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { stringify } from 'yaml';
import { cleanUp, killAll, launch, onPath, PIN, startMock, startServer, stop, type Server } from './processes.ts';
import { percentile, startHaproxy } from './extras.ts';
import { cpuTicks, median, type Load, fixed as n } from './stats.ts';
import { interleavedRounds, runWrk, wrkPostScript } from './wrk.ts';

const ROOT = resolve(import.meta.dirname, '..');
const RESULTS = join(ROOT, 'bench', 'results');
const FLAGS = process.argv.slice(2);
const QUICK = FLAGS.includes('--quick');
const S = { rounds: QUICK ? 2 : 5, seconds: QUICK ? 2 : 5, warmupSeconds: 1, connections: 32, threads: 1 };
const TTFB_N = QUICK ? 200 : 500;
/** Paced streams per target (the buffering check): 10 chunks 10 ms apart. */
const PACED = { n: 15, chunks: 10, intervalMs: 10 };
/** Time to first byte by the number of chunks the mock sends back to back (so they arrive in one read or few). */
const BURSTS = { chunks: [1, 10, 50, 200], n: QUICK ? 100 : 200, targets: ['plain', 'messages native', 'chat→messages', 'messages→chat', 'responses→messages'] };
const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;
const HAPROXY_FOUND = onPath('haproxy');
const STREAM_MOCK = JSON.stringify({ chunks: 50 });
/** What was measured: the commit, whether src/ had changes on top, and when dist/ was built (read at start-up, as the gateway loads it). */
const BUILD = ((): string => {
  const git = (...args: string[]) => spawnSync('git', args, { cwd: ROOT, encoding: 'utf8' }).stdout.trim();
  const dirty = git('status', '--porcelain', '--', 'src') !== '' ? ' with uncommitted changes in src/' : '';
  return `dist/main.js built ${statSync(join(ROOT, 'dist', 'app.js')).mtime.toISOString()} from ${git('rev-parse', '--short', 'HEAD') || 'unknown'}${dirty}`;
})();

// --- what is measured ---------------------------------------------------------------------------

type Api = 'chat' | 'messages' | 'responses';
const PATHS: Record<Api, string> = { chat: '/v1/chat/completions', messages: '/v1/messages', responses: '/v1/responses' };

interface Target {
  name: string;
  /** The client's API → the provider's, for the table. */
  route: string;
  api: Api;
  model: string;
  /** Served by the gateway ('gateway'), HAProxy, or the mock itself. */
  via: 'direct' | 'haproxy' | 'gateway';
  /** The API the mock is asked in (after any translation). */
  upstream: 'chat' | 'messages';
}

const TARGETS: Target[] = [
  { name: 'direct', route: 'chat → mock', api: 'chat', model: 'plain', via: 'direct', upstream: 'chat' },
  { name: 'haproxy', route: 'chat → HAProxy → mock', api: 'chat', model: 'plain', via: 'haproxy', upstream: 'chat' },
  { name: 'plain', route: 'chat → openai (one target)', api: 'chat', model: 'plain', via: 'gateway', upstream: 'chat' },
  { name: 'three', route: 'chat → openai (three targets, round robin)', api: 'chat', model: 'three', via: 'gateway', upstream: 'chat' },
  { name: 'chat→messages', route: 'chat → anthropic (translated)', api: 'chat', model: 'claude', via: 'gateway', upstream: 'messages' },
  { name: 'messages→chat', route: 'messages → openai (translated)', api: 'messages', model: 'gpt', via: 'gateway', upstream: 'chat' },
  { name: 'responses→messages', route: 'responses → anthropic (translated)', api: 'responses', model: 'claude', via: 'gateway', upstream: 'messages' },
  { name: 'messages native', route: 'messages → anthropic', api: 'messages', model: 'claude-native', via: 'gateway', upstream: 'messages' },
];
/** Time to first byte only: the mock's own Messages stream, the reference of the rows whose upstream is Anthropic. */
const DIRECT_MESSAGES: Target = { name: 'direct messages', route: 'messages → mock', api: 'messages', model: 'claude-native', via: 'direct', upstream: 'messages' };
/** The time-to-first-byte targets (no HAProxy: run.ts measures it). */
const TTFB_TARGETS = ['direct', 'direct messages', 'plain', 'three', 'chat→messages', 'messages→chat', 'responses→messages', 'messages native'];
/** The direct connection to the API a target's upstream request is in. */
const directFor = (t: Target): string => (t.upstream === 'chat' ? 'direct' : 'direct messages');
const TRANSLATED = ['chat→messages', 'messages→chat', 'responses→messages'];

interface Mode { name: string; stream: boolean }
const MODES: Mode[] = [
  { name: 'non-streaming', stream: false },
  { name: 'stream (50 chunks)', stream: true },
];

function body(t: Target, stream: boolean): string {
  const s = stream ? { stream: true } : {};
  // Long enough that each of the mock's 50 chunks carries text (an empty one is dropped by a translation).
  const text = 'Say hello to everyone on the benchmark team, in one short sentence, please.';
  switch (t.api) {
    case 'chat':
      return JSON.stringify({ model: t.model, messages: [{ role: 'user', content: text }], max_tokens: 16, ...s });
    case 'messages':
      return JSON.stringify({ model: t.model, max_tokens: 16, messages: [{ role: 'user', content: text }], ...s });
    case 'responses':
      return JSON.stringify({ model: t.model, input: text, max_output_tokens: 16, ...s });
  }
}

function headers(t: Target, mock: string | undefined): Record<string, string> {
  const h: Record<string, string> = { 'content-type': 'application/json' };
  if (t.api === 'messages') h['anthropic-version'] = '2023-06-01'; // as Anthropic's clients send it
  if (mock !== undefined) h['x-mock'] = mock;
  return h;
}

// --- child processes ------------------------------------------------------------------------------

const TMP = mkdtempSync(join(tmpdir(), 'sluice-bench-routing-'));
cleanUp.push(TMP);

function startGateway(mockUrl: string): Promise<Server> {
  const openai = (name: string) => ({ name, type: 'openai', base_url: `${mockUrl}/v1`, api_key: 'sk-upstream-bench' });
  const config = {
    workers: 1,
    listeners: [
      { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
      { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
    ],
    providers: [openai('oa'), { name: 'an', type: 'anthropic', base_url: mockUrl, api_key: 'x' }, openai('oa2'), openai('oa3')],
    models: [
      { name: 'plain', provider: 'oa' },
      { name: 'three', targets: [{ provider: 'oa' }, { provider: 'oa2' }, { provider: 'oa3' }] },
      { name: 'claude', provider: 'an' },
      { name: 'gpt', provider: 'oa' },
      { name: 'claude-native', provider: 'an' },
    ],
    keys: [],
    shutdown: { min_drain_secs: 0, max_drain_secs: 5 },
    log: { level: 'info', access_log: false },
  };
  const file = join(TMP, 'gateway.yaml');
  writeFileSync(file, stringify(config));
  let proxy: string | undefined;
  return startServer('gateway', ['dist/main.js', '--config', file], (l) => {
    if (l.event === 'listener_started' && l.listener === 'proxy') proxy = `http://${String(l.address)}`;
    return l.event === 'ready' ? proxy : undefined;
  });
}

// --- load generation (wrk, one Lua script per target and mode) ---------------------------------

function wrkScript(t: Target, mode: Mode): string {
  return wrkPostScript(body(t, mode.stream), headers(t, mode.stream ? STREAM_MOCK : undefined));
}

const wrk = (url: string, luaFile: string, seconds: number): Promise<Load> => runWrk(url, luaFile, seconds, S);

// --- checks ---------------------------------------------------------------------------------------

/** The answer is in the client's API's shape (so a translation really happened). */
function shapeOk(api: Api, stream: boolean, text: string): boolean {
  if (!stream) {
    const j = JSON.parse(text) as Record<string, unknown>;
    if (api === 'chat') return Array.isArray(j.choices) && j.object === 'chat.completion';
    if (api === 'messages') return j.type === 'message' && Array.isArray(j.content);
    return j.object === 'response' && Array.isArray(j.output);
  }
  if (api === 'chat') return text.includes('"chat.completion.chunk"') && text.includes('data: [DONE]');
  if (api === 'messages') return text.includes('event: message_start') && text.includes('event: message_stop');
  return text.includes('event: response.created') && text.includes('event: response.completed');
}

async function check(t: Target, url: string, mode: Mode): Promise<void> {
  const res = await fetch(`${url}${PATHS[t.api]}`, { method: 'POST', headers: headers(t, mode.stream ? STREAM_MOCK : undefined), body: body(t, mode.stream) });
  const text = await res.text();
  const events = text.split('\n').filter((l) => l.startsWith('data:')).length;
  let shaped = false;
  try {
    shaped = shapeOk(t.api, mode.stream, text);
  } catch {
    // not JSON
  }
  if (res.status < 200 || res.status > 299 || !shaped || (mode.stream && events < 50)) {
    throw new Error(`check failed for ${t.name} / ${mode.name}: HTTP ${res.status}, ${events} SSE data lines, shape ${shaped ? 'ok' : 'wrong'}: ${text.slice(0, 400)}`);
  }
}

// --- measurement ----------------------------------------------------------------------------------

interface Sample { rps: number; p50: number; p99: number; cpu: number; mockCpu: number }
/** The 1-minute load average after each measurement. */
const loads: number[] = [];

async function measure(t: Target, url: string, server: Server | undefined, mock: Server, luaFile: string): Promise<Sample> {
  const full = `${url}${PATHS[t.api]}`;
  await wrk(full, luaFile, S.warmupSeconds);
  const cpu0 = server ? cpuTicks(server.pid) : 0;
  const mock0 = cpuTicks(mock.pid);
  const r = await wrk(full, luaFile, S.seconds);
  const cpu1 = server ? cpuTicks(server.pid) : 0;
  const mock1 = cpuTicks(mock.pid);
  if (r.non2xx > 0) throw new Error(`${t.name}: ${r.non2xx} non-2xx responses under load`);
  if (r.errors > 0) process.stderr.write(`  warning: ${t.name}: ${r.errors} socket errors\n`);
  const usPerReq = (ticks: number) => (r.requests > 0 ? ((ticks / CLK_TCK) * 1e6) / r.requests : NaN);
  loads.push(loadavg()[0]!);
  return { rps: r.requests / r.seconds, p50: r.p50Ms, p99: r.p99Ms, cpu: server ? usPerReq(cpu1 - cpu0) : NaN, mockCpu: usPerReq(mock1 - mock0) };
}

// --- single-stream time to first byte ---------------------------------------------------------------

interface Timing { first: number; last: number }

/** From req.end() to the first body chunk, and to the end of the body (ms). */
function timeStream(url: string, t: Target, agent: Agent, mock: string): Promise<Timing> {
  const payload = body(t, true);
  const h = { ...headers(t, mock), 'content-length': String(Buffer.byteLength(payload)) };
  return new Promise((done, fail) => {
    let first = NaN;
    const req = httpRequest(new URL(PATHS[t.api], url), { method: 'POST', agent, headers: h }, (res) => {
      res.on('data', () => {
        if (Number.isNaN(first)) first = Number(process.hrtime.bigint() - t0) / 1e6;
      });
      res.once('end', () => {
        const last = Number(process.hrtime.bigint() - t0) / 1e6;
        if (res.statusCode === 200) done({ first, last });
        else fail(new Error(`${t.name}: HTTP ${res.statusCode}`));
      });
    });
    req.once('error', fail);
    const t0 = process.hrtime.bigint();
    req.end(payload);
  });
}

/**
 * `n` sequential streaming requests per target (after `warmup` unmeasured), one keep-alive
 * connection per target, the targets interleaved request by request.
 */
async function timeStreams(targets: { t: Target; url: string }[], mock: string, n: number, warmup: number): Promise<Map<string, Timing[]>> {
  const agents = targets.map(() => new Agent({ keepAlive: true, maxSockets: 1 }));
  const out = new Map(targets.map(({ t }) => [t.name, [] as Timing[]]));
  try {
    for (let i = 0; i < warmup + n; i++) {
      for (const [j, { t, url }] of targets.entries()) {
        const timing = await timeStream(url, t, agents[j]!, mock);
        if (i >= warmup) out.get(t.name)!.push(timing);
      }
    }
  } finally {
    agents.forEach((a) => a.destroy());
  }
  return out;
}

// --- reporting --------------------------------------------------------------------------------------

type Results = Map<string, Map<string, Sample[]>>; // mode → target → one sample per round

function table(results: Results): string {
  const rows = [
    '| case | target | client API → provider | req/s | p50 ms | p99 ms | gateway CPU µs/req | mock CPU µs/req | CPU vs plain | CPU vs HAProxy | CPU vs native messages |',
    '|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const [mode, byTarget] of results) {
    for (const t of TARGETS) {
      const samples = byTarget.get(t.name);
      if (!samples) continue;
      const m = (f: (s: Sample) => number) => median(samples.map(f));
      // Per-round ratios, then the median: slow drift of the machine cancels out.
      const ratio = (base: string) => {
        const b = byTarget.get(base);
        return b ? `${n(median(samples.map((s, i) => s.cpu / b[i]!.cpu)), 2)}×` : '–';
      };
      const gw = t.via === 'gateway';
      const vsPlain = !gw ? '–' : t.name === 'plain' ? '1' : ratio('plain');
      const vsHaproxy = t.name === 'haproxy' ? '1' : gw && t.api === 'chat' ? ratio('haproxy') : '–';
      const vsNative = t.name === 'messages native' ? '1' : TRANSLATED.includes(t.name) ? ratio('messages native') : '–';
      rows.push(
        `| ${mode} | ${t.name} | ${t.route} | ${n(m((s) => s.rps))} | ${n(m((s) => s.p50), 2)} | ${n(m((s) => s.p99), 2)} | ` +
          `${t.via === 'direct' ? '–' : n(m((s) => s.cpu))} | ${n(m((s) => s.mockCpu))} | ${vsPlain} | ${vsHaproxy} | ${vsNative} |`,
      );
    }
  }
  return rows.join('\n');
}

function summary(results: Results): string {
  const lines: string[] = [];
  for (const [mode, byTarget] of results) {
    const plain = byTarget.get('plain')!;
    // Per-round differences, then the median.
    const added = (name: string) => median(byTarget.get(name)!.map((s, i) => s.cpu - plain[i]!.cpu));
    const perChunk = (us: number) => (mode === MODES[1]!.name ? ` (${n(us / 50, 1)} µs per chunk)` : '');
    const parts = ['three', ...TRANSLATED].map((name) => `${name} ${n(added(name))} µs${perChunk(added(name))}`);
    lines.push(`- Gateway CPU per request added over the plain relay (${n(median(plain.map((s) => s.cpu)))} µs), ${mode}: ${parts.join(', ')}`);
  }
  return lines.join('\n');
}

const byName = (name: string): Target => [...TARGETS, DIRECT_MESSAGES].find((x) => x.name === name)!;
const firstByte = (res: Map<string, Timing[]>, name: string, q: number): number => percentile(res.get(name)!.map((x) => x.first), q);

function ttfbTable(res: Map<string, Timing[]>): string {
  const p = (name: string, q: number) => firstByte(res, name, q);
  const rows = [
    '| target | client API → provider | requests | p50 ms | p99 ms | added over plain p50 ms | added over plain p99 ms | ' +
      'added over direct to the same upstream API p50 ms | p99 ms |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const [name, xs] of res) {
    const t = byName(name);
    const gw = t.via === 'gateway';
    const add = (base: string, q: number) => (gw && name !== base ? (p(name, q) - p(base, q)).toFixed(3) : '–');
    rows.push(
      `| ${name} | ${t.route} | ${xs.length} | ${p(name, 50).toFixed(3)} | ${p(name, 99).toFixed(3)} | ${add('plain', 50)} | ${add('plain', 99)} | ` +
        `${add(directFor(t), 50)} | ${add(directFor(t), 99)} |`,
    );
  }
  return rows.join('\n');
}

/** Time to first byte added by each gateway target over the direct connection to its upstream API, against the ≤ 0.5 ms p50 target. */
function ttfbSummary(res: Map<string, Timing[]>): string {
  const parts = TTFB_TARGETS.map(byName).filter((t) => t.via === 'gateway').map((t) => {
    const added = firstByte(res, t.name, 50) - firstByte(res, directFor(t), 50);
    return `${t.name} ${added.toFixed(3)} ms${added <= 0.5 ? '' : ' (misses)'}`;
  });
  return `- Time to first byte added over the direct connection to the same upstream API, p50 (target ≤ 0.5 ms): ${parts.join(', ')}`;
}

function pacedTable(res: Map<string, Timing[]>): string {
  const rows = ['| target | streams | first byte ms (median) | last byte ms (median) |', '|---|--:|--:|--:|'];
  for (const [name, xs] of res) {
    rows.push(`| ${name} | ${xs.length} | ${median(xs.map((x) => x.first)).toFixed(2)} | ${median(xs.map((x) => x.last)).toFixed(1)} |`);
  }
  return rows.join('\n');
}

function burstTable(res: Map<number, Map<string, Timing[]>>): string {
  const rows = [`| chunks | ${BURSTS.targets.join(' | ')} |`, `|--:|${BURSTS.targets.map(() => '--:').join('|')}|`];
  for (const [chunks, byTarget] of res) {
    rows.push(`| ${chunks} | ${BURSTS.targets.map((name) => percentile(byTarget.get(name)!.map((x) => x.first), 50).toFixed(3)).join(' | ')} |`);
  }
  return rows.join('\n');
}

function machineInfo(generator: string, loadBefore: string): string {
  const model = /^model name\s*:\s*(.*)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? 'unknown';
  const range = (xs: number[]) => `${Math.min(...xs).toFixed(2)}–${Math.max(...xs).toFixed(2)}`;
  const haproxy = HAPROXY_FOUND ? spawnSync('haproxy', ['-v'], { encoding: 'utf8' }).stdout.split('\n')[0]!.split(' - ')[0]! : '';
  return [
    `- Date: ${new Date().toISOString()}; \`node bench/routing.ts${QUICK ? ' --quick' : ''}\``,
    `- CPU: ${model}, ${cpus().length} cores; Node ${process.version}; clock ticks ${CLK_TCK}/s`,
    `- Build: ${BUILD}`,
    `- Load generator: ${generator}, ${S.connections} keep-alive connections, ${S.threads} thread; ${S.rounds} rounds × ${S.seconds} s per target and case ` +
      `after a ${S.warmupSeconds} s warm-up, the order rotated every round; medians; ratios are per-round ratios' medians`,
    PIN ? '- Pinning: wrk on CPU 1; gateway, HAProxy and mock on CPU 0 (taskset)' : '- Pinning: none (taskset missing or fewer than 2 CPUs)',
    '- One gateway (`workers: 1`, no client keys, access log off); providers oa, oa2, oa3 (openai) and an (anthropic), all on the mock',
    '- Streams: the mock sends 50 content chunks back to back (`x-mock: {"chunks":50}`); in OpenAI\'s shape each carries 1–2 characters of a ' +
      '90-character answer, in Anthropic\'s 40 of the 50 text deltas are empty (its answer is always "mock reply"): every row parses 50 upstream chunks',
    HAPROXY_FOUND
      ? `- HAProxy (${haproxy}): \`nbthread 1\`, keep-alive both sides, one backend (the mock), pinned like the gateway; its CPU column is its own`
      : '- HAProxy: not on PATH, rows skipped (Debian package haproxy)',
    `- Time to first byte: ${TTFB_N} sequential streaming requests (50 chunks, after 30 unmeasured) per target, one keep-alive connection each, ` +
      'targets interleaved request by request, from the bench process (node:http, CPU 1, wrk idle), req.end() to the first body chunk',
    `- Load average (1 min): ${range(loads)} during the run; ${loadBefore} before`,
  ].join('\n');
}

// --- main -------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const unknown = FLAGS.filter((f) => f !== '--quick');
  if (unknown.length > 0) {
    process.stderr.write(`usage: node bench/routing.ts [--quick] (unknown: ${unknown.join(' ')})\n`);
    process.exit(2);
  }
  if (!onPath('wrk')) throw new Error('wrk not on PATH (Debian package wrk)');
  if (PIN) spawnSync('taskset', ['-a', '-p', '-c', '1', String(process.pid)], { stdio: 'ignore' });
  else process.stderr.write('bench: not pinning to CPUs (taskset missing or a single CPU)\n');
  if (!HAPROXY_FOUND) process.stderr.write('bench: haproxy not on PATH, skipping the HAProxy row (Debian package haproxy)\n');
  const generator = spawnSync('wrk', ['-v'], { encoding: 'utf8' }).stdout.split('\n')[0]!.split(' [')[0]!;
  const loadBefore = loadavg()[0]!.toFixed(2);

  const mock = await startMock();
  const gateway = await startGateway(mock.url);
  const haproxy = HAPROXY_FOUND ? await startHaproxy(launch, mock.url, TMP) : undefined;
  const haproxyServer: Server | undefined = haproxy && { name: 'haproxy', ...haproxy };
  const where = (t: Target): { url: string; server: Server | undefined } =>
    t.via === 'direct' ? { url: mock.url, server: undefined } : t.via === 'haproxy' ? { url: haproxyServer!.url, server: haproxyServer } : { url: gateway.url, server: gateway };
  const targets = TARGETS.filter((t) => t.via !== 'haproxy' || haproxyServer);

  // Every target and mode answers 2xx in its client's shape before anything is measured.
  for (const t of [...targets, DIRECT_MESSAGES]) for (const mode of MODES) await check(t, where(t).url, mode);
  const results: Results = await interleavedRounds(
    targets,
    MODES,
    S.rounds,
    TMP,
    wrkScript,
    (t, _mode, luaFile) => {
      const { url, server } = where(t);
      return measure(t, url, server, mock, luaFile);
    },
    (round, mode, t, s) =>
      process.stderr.write(
        `round ${round + 1}/${S.rounds} ${mode.name.padEnd(18)} ${t.name.padEnd(18)} ${s.rps.toFixed(0).padStart(6)} req/s  ` +
          `p50 ${s.p50.toFixed(2)} ms  p99 ${s.p99.toFixed(2)} ms  cpu ${n(s.cpu)} µs/req  mock ${s.mockCpu.toFixed(0)} µs/req\n`,
      ),
  );

  const ttfbTargets = TTFB_TARGETS.map(byName).map((t) => ({ t, url: where(t).url }));
  process.stderr.write(`ttfb: ${TTFB_N} streaming requests per target, interleaved: ${TTFB_TARGETS.join(', ')}\n`);
  const ttfb = await timeStreams(ttfbTargets, STREAM_MOCK, TTFB_N, 30);
  process.stderr.write(`paced: ${PACED.n} streams per target of ${PACED.chunks} chunks ${PACED.intervalMs} ms apart\n`);
  const paced = await timeStreams(ttfbTargets, JSON.stringify({ chunks: PACED.chunks, sseIntervalMs: PACED.intervalMs }), PACED.n, 1);
  process.stderr.write(`bursts: ${BURSTS.n} streaming requests per target and burst size (${BURSTS.chunks.join(', ')} chunks)\n`);
  const bursts = new Map<number, Map<string, Timing[]>>();
  for (const chunks of BURSTS.chunks) {
    bursts.set(chunks, await timeStreams(BURSTS.targets.map(byName).map((t) => ({ t, url: where(t).url })), JSON.stringify({ chunks }), BURSTS.n, 20));
  }
  await Promise.all([gateway, mock, ...(haproxyServer ? [haproxyServer] : [])].map(stop));

  const md = `# Sluice routing and translation benchmark (#15)\n\n${machineInfo(generator, loadBefore)}\n\n` +
    `## Gateway routes beside the plain relay${haproxyServer ? ', a direct connection and HAProxy' : ' and a direct connection'}\n\n${table(results)}\n\n${summary(results)}\n` +
    `\n## Single-stream time to first byte (streaming, 50 chunks back to back)\n\n${ttfbTable(ttfb)}\n\n${ttfbSummary(ttfb)}\n` +
    `\n## Buffering check (streams of ${PACED.chunks} chunks ${PACED.intervalMs} ms apart: a buffered stream's first byte would come with its last)\n\n${pacedTable(paced)}\n` +
    `\n## Time to first byte by burst size (chunks sent back to back, ${BURSTS.n} requests per target and size, p50 ms)\n\n${burstTable(bursts)}\n`;
  process.stdout.write(`\n${md}`);
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, 'routing.md'), md);
  process.stdout.write(`\nwritten to ${join('bench', 'results', 'routing.md')}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  killAll();
  process.exit(1);
});
