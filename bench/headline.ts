// The headline of BENCHMARKS.md: issue #25's targets against what one `bench/run.ts` run measured,
// with the run's date and commit. Written between the two markers below by `--headline`, so that
// the table at the top of BENCHMARKS.md is always a run's output, never typed by hand.
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { median } from './stats.ts';
import { percentile } from './extras.ts';

export const BEGIN = '<!-- headline: written by `npm run bench:headline`; do not edit by hand -->';
export const END = '<!-- headline end -->';

interface CpuSample { gwCpu: number; p99: number }

export interface HeadlineInputs {
  /** Per case name, per target name, the samples of each round (same order across targets). */
  readonly results: ReadonlyMap<string, ReadonlyMap<string, readonly CpuSample[]>>;
  readonly chat: string;
  readonly stream: string;
  /** Time to first byte per target (ms), the single-stream measurement. */
  readonly ttfb: ReadonlyMap<string, readonly number[]>;
  /** VmRSS (MB) of the embedded default at `workers: 1`, idle. */
  readonly embeddedRss: number;
  readonly connections: number;
  readonly rounds: number;
  readonly seconds: number;
  readonly quick: boolean;
}

/** The commit measured: its short hash, and whether the tree had changes beside it. */
export function commitMeasured(root: string): string {
  const git = (...args: string[]) => spawnSync('git', args, { cwd: root, encoding: 'utf8' }).stdout.trim();
  const hash = git('rev-parse', '--short', 'HEAD') || 'unknown';
  // (BENCHMARKS.md and bench/results/ are what a run writes: not changes to what was measured.)
  return git('status', '--porcelain', '--untracked-files=no', '--', '.', ':!BENCHMARKS.md', ':!bench/results') === '' ? hash : `${hash} (with uncommitted changes)`;
}

export function headline(input: HeadlineInputs, commit: string, date = new Date()): string {
  const perRound = (caseName: string, target: string, f: (s: CpuSample) => number) => {
    const byTarget = input.results.get(caseName)!;
    const haproxy = byTarget.get('haproxy')!;
    return median(byTarget.get(target)!.map((s, i) => f(s) / f(haproxy[i]!)));
  };
  const us = (caseName: string, target: string) => median(input.results.get(caseName)!.get(target)!.map((s) => s.gwCpu));
  const yes = (ok: boolean) => (ok ? 'yes' : '**no**');
  const rows: string[] = [];
  for (const [label, caseName] of [['chat', input.chat], ['50-chunk stream', input.stream]] as const) {
    const ratio = perRound(caseName, 'production', (s) => s.gwCpu);
    const floor = input.results.get(caseName)!.has('node-floor') ? `; a minimal Node proxy ${perRound(caseName, 'node-floor', (s) => s.gwCpu).toFixed(2)}×` : '';
    rows.push(
      `| ${label}: gateway CPU ≤ 3× HAProxy's per request, production features | **${ratio.toFixed(2)}×** (${us(caseName, 'production').toFixed(0)} µs vs ${us(caseName, 'haproxy').toFixed(0)} µs; bare ${perRound(caseName, 'bare', (s) => s.gwCpu).toFixed(2)}×${floor}) | ${yes(ratio <= 3)} |`,
    );
  }
  const direct = input.ttfb.get('direct')!;
  const added = percentile([...input.ttfb.get('production')!], 50) - percentile([...direct], 50);
  rows.push(`| time to first byte added ≤ 0.3 ms (p50, production, one stream at a time) | **${added.toFixed(3)} ms** | ${yes(added <= 0.3)} |`);
  const p99 = perRound(input.chat, 'production', (s) => s.p99);
  rows.push(`| chat p99 at ${input.connections} connections ≤ 2× HAProxy's | **${p99.toFixed(2)}×** | ${yes(p99 <= 2)} |`);
  rows.push(`| idle RSS ≤ 80 MB, one process (the embedded default, \`workers: 1\`) | **${input.embeddedRss.toFixed(1)} MB** | ${yes(input.embeddedRss <= 80)} |`);
  return [
    BEGIN,
    `## Targets at a glance (issue #25; ${date.toISOString().slice(0, 16).replace('T', ' ')} UTC, commit \`${commit}\`)`,
    '',
    `\`npm run bench${input.quick ? ' -- --quick' : ''}\` with \`--headline\`: ${input.rounds} rounds × ${input.seconds} s per target, interleaved, wrk with ${input.connections} connections, gateways \`workers: 1\` pinned beside HAProxy; ratios are medians of per-round ratios. Regenerate with \`npm run bench:headline\`.`,
    '',
    '| target | measured | met? |',
    '|---|---|---|',
    ...rows,
    END,
  ].join('\n');
}

/** Replaces the headline block of `file` (BENCHMARKS.md) with `block`; the block goes after the first paragraph when there is none yet. */
export function writeHeadline(file: string, block: string): void {
  const text = readFileSync(file, 'utf8');
  const begin = text.indexOf(BEGIN);
  const end = text.indexOf(END);
  let next: string;
  if (begin !== -1 && end > begin) next = text.slice(0, begin) + block + text.slice(end + END.length);
  else {
    const at = text.indexOf('\n## ');
    next = at === -1 ? `${text}\n${block}\n` : `${text.slice(0, at + 1)}${block}\n\n${text.slice(at + 1)}`;
  }
  writeFileSync(file, next);
}
