// Traces (issue 17) measured: what `tracing.enabled` costs per request, off (the default) and on
// (every request traced; and 1 % sampled), beside a direct connection and HAProxy, in the same run.
//
//   npm run build && node bench/tracing.ts            5 rounds x 4 s per target and case (about 5 minutes)
//   npm run build && node bench/tracing.ts --quick    2 rounds x 2 s (about 1 minute)
//
// All on 127.0.0.1. It starts the mock upstream (test/support/mock-upstream.ts), HAProxy (when on
// PATH) in front of it, an OTLP/HTTP sink (test/support/otlp-receiver.ts run directly: it decodes
// and counts the spans, keeps none), and THREE gateways (the built dist/main.js, each `workers: 1`,
// access log off, one provider on the mock, no client keys):
//   off      no tracing section: the default
//   on       tracing.enabled, sample_ratio 1: a SERVER and a CLIENT span per request, exported
//   sampled  tracing.enabled, sample_ratio 0.01
// The SDK's own batching settings (OTEL_BSP_*: 5 s or 512 spans a batch, a queue of 2048). Each
// target is measured non-streaming and streaming (50 chunks), the targets interleaved and their
// order rotated every round; wrk (one thread, 32 keep-alive connections) and the sink on CPU 1,
// the gateways, HAProxy and the mock on CPU 0 (taskset). CPU per request is each process's utime +
// stime from /proc/<pid>/stat over the requests completed; spans per request are the sink's count
// over the same window. Every target is checked first (2xx in chat's shape, 50 chunks for a
// stream; on the traced gateway, its spans reach the sink); a non-2xx answer under load aborts.
// The tables go to stdout and to bench/results/tracing.md.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { cleanUp, killAll, launch, onPath, PIN, startMock, startServer, stop, type Server } from './processes.ts';
import { startHaproxy } from './extras.ts';
import { cpuTicks, median, perRoundMedian, fixed as n } from './stats.ts';
import { interleavedRounds, runWrk, wrkPostScript } from './wrk.ts';

const ROOT = resolve(import.meta.dirname, '..');
const RESULTS = join(ROOT, 'bench', 'results');
const FLAGS = process.argv.slice(2);
const QUICK = FLAGS.includes('--quick');
const S = { rounds: QUICK ? 2 : 5, seconds: QUICK ? 2 : 4, warmupSeconds: 1, connections: 32, threads: 1 };
const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;
const HAPROXY_FOUND = onPath('haproxy');
const STREAM_MOCK = JSON.stringify({ chunks: 50 });
const BUILD = ((): string => {
  const git = (...args: string[]) => spawnSync('git', args, { cwd: ROOT, encoding: 'utf8' }).stdout.trim();
  const dirty = git('status', '--porcelain', '--', 'src') !== '' ? ' (src/ had uncommitted changes at the time)' : '';
  return `dist/main.js built ${statSync(join(ROOT, 'dist', 'app.js')).mtime.toISOString()}; HEAD ${git('rev-parse', '--short', 'HEAD') || 'unknown'}${dirty}`;
})();

type Via = 'direct' | 'haproxy' | 'off' | 'on' | 'sampled';
interface Target { name: Via; what: string }
const TARGETS: Target[] = [
  { name: 'direct', what: 'wrk → mock' },
  { name: 'haproxy', what: 'HAProxy → mock' },
  { name: 'off', what: 'gateway, tracing off (the default)' },
  { name: 'on', what: 'gateway, tracing on, every request (2 spans) exported' },
  { name: 'sampled', what: 'gateway, tracing on, sample_ratio 0.01' },
];
const GATEWAYS: Via[] = ['off', 'on', 'sampled'];

interface Mode { name: string; stream: boolean }
const MODES: Mode[] = [
  { name: 'non-streaming', stream: false },
  { name: 'stream (50 chunks)', stream: true },
];

const body = (stream: boolean): string =>
  JSON.stringify({ model: 'plain', messages: [{ role: 'user', content: 'Say hello to everyone on the benchmark team, in one short sentence, please.' }], max_tokens: 16, ...(stream ? { stream: true } : {}) });
const headers = (stream: boolean): Record<string, string> => ({ 'content-type': 'application/json', ...(stream ? { 'x-mock': STREAM_MOCK } : {}) });

const TMP = mkdtempSync(join(tmpdir(), 'sluice-bench-tracing-'));
cleanUp.push(TMP);

function startGateway(via: Via, mockUrl: string, sinkUrl: string): Promise<Server> {
  const config = {
    workers: 1,
    listeners: [
      { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
      { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
    ],
    providers: [{ name: 'oa', type: 'openai', base_url: `${mockUrl}/v1`, api_key: 'sk-upstream-bench' }],
    models: [{ name: 'plain', provider: 'oa' }],
    shutdown: { min_drain_secs: 0, max_drain_secs: 5 },
    log: { level: 'info', access_log: false },
    ...(via === 'off' ? {} : { tracing: { enabled: true, endpoint: sinkUrl, sample_ratio: via === 'sampled' ? 0.01 : 1 } }),
  };
  const file = join(TMP, `gateway-${via}.yaml`);
  writeFileSync(file, stringify(config));
  return startServer(`gateway ${via}`, ['dist/main.js', '--config', file], (l) => (l.event === 'listener_started' && l.listener === 'proxy' ? `http://${String(l.address)}` : undefined)).then((s) => ({ ...s, name: via }));
}

async function sinkSpans(sink: Server): Promise<number> {
  const stats = (await (await fetch(sink.url.replace('/v1/traces', '/stats'))).json()) as { spans: number };
  return stats.spans;
}

async function check(t: Target, url: string, mode: Mode, sink: Server): Promise<void> {
  const before = await sinkSpans(sink);
  const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: headers(mode.stream), body: body(mode.stream) });
  const text = await res.text();
  const events = text.split('\n').filter((l) => l.startsWith('data:')).length;
  const shaped = mode.stream ? text.includes('"chat.completion.chunk"') && text.includes('data: [DONE]') : text.includes('"chat.completion"');
  if (res.status !== 200 || !shaped || (mode.stream && events < 50)) throw new Error(`check failed for ${t.name} / ${mode.name}: HTTP ${res.status}: ${text.slice(0, 300)}`);
  if (t.name !== 'on') return;
  // The traced gateway's spans reach the sink (within the SDK's 5 s export delay).
  for (let i = 0; (await sinkSpans(sink)) < before + 2; i++) {
    if (i > 150) throw new Error(`check failed for ${t.name} / ${mode.name}: no spans reached the sink`);
    await sleep(50);
  }
}

interface Sample { rps: number; p50: number; p99: number; cpu: number; sinkCpu: number; spans: number }
const loads: number[] = [];

async function measure(url: string, server: Server | undefined, sink: Server, luaFile: string): Promise<Sample> {
  const full = `${url}/v1/chat/completions`;
  await runWrk(full, luaFile, S.warmupSeconds, S);
  const cpu0 = server ? cpuTicks(server.pid) : 0;
  const sink0 = cpuTicks(sink.pid);
  const spans0 = await sinkSpans(sink);
  const r = await runWrk(full, luaFile, S.seconds, S);
  const cpu1 = server ? cpuTicks(server.pid) : 0;
  const sink1 = cpuTicks(sink.pid);
  const spans1 = await sinkSpans(sink);
  if (r.non2xx > 0) throw new Error(`${r.non2xx} non-2xx responses under load`);
  const usPerReq = (ticks: number) => (r.requests > 0 ? ((ticks / CLK_TCK) * 1e6) / r.requests : NaN);
  loads.push(loadavg()[0]!);
  return { rps: r.requests / r.seconds, p50: r.p50Ms, p99: r.p99Ms, cpu: server ? usPerReq(cpu1 - cpu0) : NaN, sinkCpu: usPerReq(sink1 - sink0), spans: (spans1 - spans0) / r.requests };
}

type Results = Map<string, Map<string, Sample[]>>;
const isGateway = (t: Target) => GATEWAYS.includes(t.name);

function table(results: Results): string {
  const rows = [
    '| case | target | what | req/s | p50 ms | p99 ms | server CPU µs/req | CPU vs off | CPU vs HAProxy | spans exported /req | sink CPU µs/req |',
    '|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const [mode, byTarget] of results) {
    for (const t of TARGETS) {
      const samples = byTarget.get(t.name);
      if (!samples || samples.length === 0) continue;
      const m = (f: (s: Sample) => number) => median(samples.map(f));
      const ratio = (base: string) => {
        const b = byTarget.get(base);
        return b && b.length > 0 ? `${n(perRoundMedian(samples, b, (s, o) => s.cpu / o.cpu), 2)}×` : '–';
      };
      const traced = t.name === 'on' || t.name === 'sampled';
      rows.push(
        `| ${mode} | ${t.name} | ${t.what} | ${n(m((s) => s.rps))} | ${n(m((s) => s.p50), 2)} | ${n(m((s) => s.p99), 2)} | ${t.name === 'direct' ? '–' : n(m((s) => s.cpu))} | ` +
          `${!isGateway(t) ? '–' : t.name === 'off' ? '1' : ratio('off')} | ${t.name === 'haproxy' ? '1' : isGateway(t) ? ratio('haproxy') : '–'} | ` +
          `${traced ? n(m((s) => s.spans), 3) : '–'} | ${traced ? n(m((s) => s.sinkCpu)) : '–'} |`,
      );
    }
  }
  return rows.join('\n');
}

function summary(results: Results): string {
  const lines: string[] = [];
  for (const [mode, byTarget] of results) {
    const diff = (name: string, base: string) => {
      return perRoundMedian(byTarget.get(name)!, byTarget.get(base)!, (s, o) => s.cpu - o.cpu);
    };
    const haproxy = byTarget.get('haproxy');
    lines.push(
      `- ${mode}: gateway CPU per request added over tracing off (per-round differences, median): every request traced and exported ${n(diff('on', 'off'), 1)} µs; ` +
        `1 % sampled ${n(diff('sampled', 'off'), 1)} µs` +
        (haproxy && haproxy.length > 0 ? `; tracing off over HAProxy ${n(diff('off', 'haproxy'), 1)} µs.` : '.'),
    );
  }
  return lines.join('\n');
}

function machineInfo(generator: string, loadBefore: string): string {
  const model = /^model name\s*:\s*(.*)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? 'unknown';
  const range = (xs: number[]) => `${Math.min(...xs).toFixed(2)}–${Math.max(...xs).toFixed(2)}`;
  const haproxy = HAPROXY_FOUND ? spawnSync('haproxy', ['-v'], { encoding: 'utf8' }).stdout.split('\n')[0]!.split(' - ')[0]! : '';
  return [
    `- Date: ${new Date().toISOString()}; \`node bench/tracing.ts${QUICK ? ' --quick' : ''}\``,
    `- CPU: ${model}, ${cpus().length} cores; Node ${process.version}; clock ticks ${CLK_TCK}/s`,
    `- Build: ${BUILD}`,
    `- Load generator: ${generator}, ${S.connections} keep-alive connections, ${S.threads} thread; ${S.rounds} rounds × ${S.seconds} s per target and case ` +
      `after a ${S.warmupSeconds} s warm-up, the order rotated every round; medians; ratios and differences are per-round ratios' and differences' medians`,
    PIN ? '- Pinning: wrk and the OTLP sink on CPU 1; gateways, HAProxy and mock on CPU 0 (taskset)' : '- Pinning: none (taskset missing or fewer than 2 CPUs)',
    '- Three gateways (each `workers: 1`, access log off, one provider on the mock, no keys): `off` (no tracing section), `on` (sample_ratio 1), `sampled` (sample_ratio 0.01); the SDK\'s default batching',
    HAPROXY_FOUND ? `- HAProxy (${haproxy}): \`nbthread 1\`, keep-alive both sides, pinned like the gateways` : '- HAProxy: not on PATH, rows skipped (Debian package haproxy)',
    `- Load average (1 min): ${range(loads)} during the run; ${loadBefore} before`,
  ].join('\n');
}

async function main(): Promise<void> {
  const unknown = FLAGS.filter((f) => f !== '--quick');
  if (unknown.length > 0) {
    process.stderr.write(`usage: node bench/tracing.ts [--quick] (unknown: ${unknown.join(' ')})\n`);
    process.exit(2);
  }
  if (!onPath('wrk')) throw new Error('wrk not on PATH (Debian package wrk)');
  if (PIN) spawnSync('taskset', ['-a', '-p', '-c', '1', String(process.pid)], { stdio: 'ignore' });
  const generator = spawnSync('wrk', ['-v'], { encoding: 'utf8' }).stdout.split('\n')[0]!.split(' [')[0]!;
  const loadBefore = loadavg()[0]!.toFixed(2);

  const mock = await startMock();
  const sink = await startServer('otlp sink', ['test/support/otlp-receiver.ts'], (l) => l.otlp_receiver as string | undefined, '1');
  const gateways = new Map<Via, Server>();
  for (const via of GATEWAYS) gateways.set(via, await startGateway(via, mock.url, sink.url));
  const haproxy = HAPROXY_FOUND ? await startHaproxy(launch, mock.url, TMP) : undefined;
  const haproxyServer: Server | undefined = haproxy && { name: 'haproxy', ...haproxy };
  const where = (t: Target): { url: string; server: Server | undefined } =>
    t.name === 'direct' ? { url: mock.url, server: undefined } : t.name === 'haproxy' ? { url: haproxyServer!.url, server: haproxyServer } : { url: gateways.get(t.name)!.url, server: gateways.get(t.name) };
  const targets = TARGETS.filter((t) => t.name !== 'haproxy' || haproxyServer);

  for (const t of targets) for (const mode of MODES) await check(t, where(t).url, mode, sink);
  const results: Results = await interleavedRounds(
    targets,
    MODES,
    S.rounds,
    TMP,
    (_t, mode) => wrkPostScript(body(mode.stream), headers(mode.stream)),
    (t, _mode, luaFile) => measure(where(t).url, where(t).server, sink, luaFile),
    (round, mode, t, s) =>
      process.stderr.write(
        `round ${round + 1}/${S.rounds} ${mode.name.padEnd(18)} ${t.name.padEnd(8)} ${s.rps.toFixed(0).padStart(6)} req/s  p50 ${s.p50.toFixed(2)} ms  p99 ${s.p99.toFixed(2)} ms  ` +
          `cpu ${n(s.cpu)} µs/req  spans ${s.spans.toFixed(3)}/req  sink ${n(s.sinkCpu)} µs/req\n`,
      ),
  );
  await Promise.all([...gateways.values(), mock, sink, ...(haproxyServer ? [haproxyServer] : [])].map(stop));

  const md =
    `# Sluice traces benchmark (#17)\n\n${machineInfo(generator, loadBefore)}\n\n` +
    `## Tracing off and on beside the gateway's neighbours\n\n${table(results)}\n\n${summary(results)}\n`;
  process.stdout.write(`\n${md}`);
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, 'tracing.md'), md);
  process.stdout.write(`\nwritten to ${join('bench', 'results', 'tracing.md')}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  killAll();
  process.exit(1);
});
