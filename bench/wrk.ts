// wrk for the benchmarks: a POST script (fixed body and headers) whose `done` prints one
// BENCH_RESULT line, a run of it read back as a Load, and the interleaved rounds that measure
// several targets alike.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { launch, runToEnd } from './processes.ts';
import type { Load } from './stats.ts';

/** wrk's `done`: the totals and latencies as one JSON line. */
export const WRK_DONE = `done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('BENCH_RESULT {"requests":%d,"duration_us":%d,"errors":%d,"non2xx":%d,"p50_us":%d,"p99_us":%d,"mean_us":%d}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99), latency.mean))
end
`;

const lua = (s: string): string => `[==[${s}]==]`;

/** A wrk script that POSTs `body` with `headers`. */
export function wrkPostScript(body: string, headers: Record<string, string>): string {
  return ['wrk.method = "POST"', `wrk.body = ${lua(body)}`, ...Object.entries(headers).map(([k, v]) => `wrk.headers[ ${lua(k)} ] = ${lua(v)}`), WRK_DONE].join('\n');
}

/** Runs wrk (script `luaFile`, which ends with WRK_DONE) against `url` for `seconds`, on `cpu`. */
export async function runWrk(url: string, luaFile: string, seconds: number, shape: { threads: number; connections: number; cpu?: string }, env?: Record<string, string>): Promise<Load> {
  const args = [`-t${shape.threads}`, `-c${shape.connections}`, `-d${seconds}s`, '--timeout', '10s', '-s', luaFile, url];
  const out = await runToEnd(launch(shape.cpu ?? '1', 'wrk', args, env), (seconds + 20) * 1000, 'wrk');
  const line = out.split('\n').find((l) => l.startsWith('BENCH_RESULT '));
  if (!line) throw new Error(`no BENCH_RESULT in wrk output:\n${out}`);
  const r = JSON.parse(line.slice('BENCH_RESULT '.length)) as Record<string, number>;
  return {
    requests: r.requests!, seconds: r.duration_us! / 1e6, errors: r.errors!, non2xx: r.non2xx!,
    p50Ms: r.p50_us! / 1e3, p99Ms: r.p99_us! / 1e3, meanMs: r.mean_us! / 1e3,
  };
}

/**
 * Interleaved rounds: every target in every mode, once per round, the targets' order rotated each
 * round so that none is always measured first or last. `script(target, mode)` is the wrk script
 * (written once to `dir`); `measure` runs it; `beforeRound`, when given, runs before each round (a
 * bench that restarts its servers does it there). Results: mode → target → one sample per round.
 */
export async function interleavedRounds<T extends { name: string }, M extends { name: string }, S>(
  targets: readonly T[],
  modes: readonly M[],
  rounds: number,
  dir: string,
  script: (t: T, mode: M) => string,
  measure: (t: T, mode: M, luaFile: string) => Promise<S>,
  report: (round: number, mode: M, t: T, sample: S) => void,
  beforeRound?: (round: number) => Promise<void>,
): Promise<Map<string, Map<string, S[]>>> {
  const scripts = new Map<string, string>();
  for (const t of targets) {
    for (const [i, mode] of modes.entries()) {
      const file = join(dir, `${t.name.replace(/[^a-z]/g, '_')}-${i}.lua`);
      writeFileSync(file, script(t, mode));
      scripts.set(`${t.name}\0${mode.name}`, file);
    }
  }
  const results = new Map(modes.map((m) => [m.name, new Map(targets.map((t) => [t.name, [] as S[]]))]));
  for (let round = 0; round < rounds; round++) {
    await beforeRound?.(round);
    const order = targets.map((_, i) => targets[(i + round) % targets.length]!);
    for (const mode of modes) {
      for (const t of order) {
        const sample = await measure(t, mode, scripts.get(`${t.name}\0${mode.name}`)!);
        results.get(mode.name)!.get(t.name)!.push(sample);
        report(round, mode, t, sample);
      }
    }
  }
  return results;
}
