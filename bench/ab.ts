// Two builds of the gateway side by side, to measure what a change costs on the request path, case
// by case:
//   npm run build && node bench/ab.ts A_CHECKOUT [B_CHECKOUT] [--rounds N] [--seconds S] [--cases a,b]
//     [--a-flags="--node-flag ..."] [--b-flags="..."]
// A_CHECKOUT is another checkout with its own `dist/` (a `git worktree` of the commit before the
// change, built, with `node_modules` beside it); B_CHECKOUT defaults to this one. Both gateways run
// the same config (client keys, access log to a pipe, metrics: "production" in bench/run.ts) against
// one mock upstream, pinned to CPU 0, with wrk on CPU 1. Every case runs on both in every round,
// the order of the two rotated each round, so that a drift of the machine falls on both; both
// gateways are started anew before every round (and warmed up), so that each build's samples come
// from as many processes as rounds: one process's JIT history alone moves its CPU per request by
// several µs (three gateways of one build and config differed by up to 8.5 µs). Prints
// the gateway CPU per request for each round and case, then per case the medians and the median
// of the per-round ratio B/A, as a Markdown table for BENCHMARKS.md.
//
// The cases: a JSON chat; a 50-chunk chat stream (the client asks no usage: it is asked upstream
// and hidden again); the same stream with `include_usage`; the stream translated (an OpenAI client
// on an Anthropic-type upstream); and the JSON chat and stream with a key whose limits and budget
// are counted (the memory store). A feature a config does not use must cost nothing: compare the
// plain cases of two builds; a feature's own case says what it costs when used.
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { cleanUp, startMock, stop, type Server } from './processes.ts';
import { caseScript, pickCases, startCaseGateway, type Case } from './cases.ts';
import { cpuTicks, fixed, median, perRoundMedian } from './stats.ts';
import { interleavedRounds, runWrk } from './wrk.ts';

const ROOT = resolve(import.meta.dirname, '..');
const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    rounds: { type: 'string', default: '6' },
    seconds: { type: 'string', default: '5' },
    cases: { type: 'string' },
    // Node flags for one side only (the same build twice with a V8 flag on one side, for example).
    'a-flags': { type: 'string', default: '' },
    'b-flags': { type: 'string', default: '' },
  },
});
if (positionals.length < 1 || positionals.length > 2) {
  process.stderr.write('usage: node bench/ab.ts A_CHECKOUT [B_CHECKOUT] [--rounds N] [--seconds S] [--cases chat,stream,...]\n');
  process.exit(2);
}
const CHECKOUTS = { A: resolve(positionals[0]!), B: resolve(positionals[1] ?? ROOT) } as const;
const ROUNDS = Number(values.rounds);
const SECONDS = Number(values.seconds);
const TICK_US = 1e6 / Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim() || 100);
const TMP = mkdtempSync(join(tmpdir(), 'sluice-ab-'));
cleanUp.push(TMP);
const CASES = pickCases(values.cases);

const mock = await startMock();
const flags = (text: string): string[] => text.split(' ').filter(Boolean);
type Build = { name: 'A' | 'B' };
const targets: Build[] = [{ name: 'A' }, { name: 'B' }];
const start = (name: 'A' | 'B'): Promise<Server> => startCaseGateway(name, CHECKOUTS[name], mock.url, TMP, flags(values[name === 'A' ? 'a-flags' : 'b-flags']));
const servers = new Map<string, Server>();
const script = (_t: Build, c: Case): string => caseScript(c);
const measure = async (t: Build, c: Case, lua: string): Promise<number> => {
  const server = servers.get(t.name)!;
  const before = cpuTicks(server.pid);
  const load = await runWrk(`${server.url}/v1/chat/completions`, lua, SECONDS, { threads: 1, connections: 32 });
  if (load.errors > 0 || load.non2xx > 0 || load.requests === 0) throw new Error(`${t.name}, ${c.name}: ${load.errors} errors, ${load.non2xx} non-2xx of ${load.requests}`);
  return ((cpuTicks(server.pid) - before) * TICK_US) / load.requests;
};
/** Both gateways started anew, then one short round of every case on both, not counted. */
const freshGateways = async (): Promise<void> => {
  for (const t of targets) {
    const old = servers.get(t.name);
    if (old) await stop(old);
    servers.set(t.name, await start(t.name));
  }
  await interleavedRounds(targets, CASES, 1, TMP, script, async (t, _c, lua) => runWrk(`${servers.get(t.name)!.url}/v1/chat/completions`, lua, 1, { threads: 1, connections: 32 }), () => {});
};
const results = await interleavedRounds(
  targets,
  CASES,
  ROUNDS,
  TMP,
  script,
  measure,
  (round, c, t, us) => process.stderr.write(`round ${round + 1} ${c.id} ${t.name}: ${fixed(us, 1)} µs/req\n`),
  freshGateways,
);

const rows = CASES.map((c) => {
  const a = results.get(c.name)!.get('A')!;
  const b = results.get(c.name)!.get('B')!;
  const ratios = b.map((x, i) => x / a[i]!);
  return `| ${c.name} | ${fixed(median(a))} | ${fixed(median(b))} | **${fixed(perRoundMedian(b, a, (x, y) => x / y), 3)}** | ${fixed(Math.min(...ratios), 2)}–${fixed(Math.max(...ratios), 2)} |`;
});
process.stdout.write(
  [
    `A: ${CHECKOUTS.A}`,
    `B: ${CHECKOUTS.B}`,
    `${ROUNDS} rounds × ${SECONDS} s per case and build, order rotated each round, both gateways started anew before each; gateway CPU µs per request, medians`,
    '',
    '| case | A µs/req | B µs/req | B/A (per-round median) | B/A range |',
    '|---|--:|--:|--:|--:|',
    ...rows,
    '',
  ].join('\n'),
);
process.exit(0);
