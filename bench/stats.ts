// What every part of the bench measures with: a process's CPU time from /proc, a load run's result,
// the median the tables show, and how a number is written in them.
import { readFileSync } from 'node:fs';

/** One load-generator run: what wrk, autocannon and h2load all report. */
export interface Load { requests: number; seconds: number; errors: number; non2xx: number; p50Ms: number; p99Ms: number; meanMs: number }

/** utime + stime of a process, in clock ticks. */
export function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // fields[0] is field 3 (state)
  return Number(fields[11]) + Number(fields[12]);
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** A number in a table: `digits` decimals, or '–' when there is none (NaN, Infinity). */
export function fixed(x: number, digits = 0): string {
  return Number.isFinite(x) ? x.toFixed(digits) : '–';
}

/**
 * `samples` against `base`, round by round (the same index is the same round), then the median:
 * the slow drift of a machine falls on both sides of each round and cancels out.
 */
export function perRoundMedian<S>(samples: readonly S[], base: readonly S[], compare: (sample: S, base: S) => number): number {
  return median(samples.map((s, i) => compare(s, base[i]!)));
}
