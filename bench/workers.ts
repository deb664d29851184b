// Scaling with `workers`: the same gateway config at 1 and at N worker processes, in alternating
// rounds, nothing pinned (the workers need every core), the load generator competing for the same
// cores. The model is served by the echo provider, so the single-process mock upstream does not cap
// the throughput: what is measured is the gateway's own capacity. CPU per request is the whole
// group's (supervisor and workers, from /proc).
import { readFileSync, readdirSync } from 'node:fs';
import { cpuTicks, median, type Load } from './stats.ts';

export interface ScalingSample { workers: number; rps: number; p50: number; p99: number; cpuUs: number; processes: number }

/** The process and its children (one level: the supervisor's workers). */
export function groupPids(pid: number): number[] {
  const children: number[] = [];
  try {
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      const list = readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').trim();
      if (list) children.push(...list.split(' ').map(Number));
    }
  } catch {
    // The process is gone, or the kernel has no /proc/<pid>/task/<tid>/children.
  }
  return [pid, ...children];
}

/**
 * One measurement of a group: `load` runs the load generator and resolves with its result; CPU is
 * summed over the group's processes before and after.
 */
export async function measureGroup(workers: number, pid: number, clockTicks: number, load: () => Promise<Load>): Promise<ScalingSample> {
  const pids = groupPids(pid);
  const before = pids.reduce((sum, p) => sum + cpuTicks(p), 0);
  const r = await load();
  const after = pids.reduce((sum, p) => sum + cpuTicks(p), 0);
  if (r.errors > 0 || r.non2xx > 0) process.stderr.write(`  warning: workers ${workers}: ${r.errors} socket errors, ${r.non2xx} non-2xx responses\n`);
  return {
    workers,
    rps: r.requests / r.seconds,
    p50: r.p50Ms,
    p99: r.p99Ms,
    cpuUs: r.requests > 0 ? (((after - before) / clockTicks) * 1e6) / r.requests : NaN,
    processes: pids.length,
  };
}

export function scalingTable(samples: ScalingSample[]): string {
  const counts = [...new Set(samples.map((s) => s.workers))].sort((a, b) => a - b);
  const baseline = median(samples.filter((s) => s.workers === counts[0]).map((s) => s.rps));
  const rows = ['| workers | processes | req/s | p50 ms | p99 ms | group CPU µs/req | req/s vs 1 worker |', '|--:|--:|--:|--:|--:|--:|--:|'];
  for (const n of counts) {
    const mine = samples.filter((s) => s.workers === n);
    const m = (f: (s: ScalingSample) => number) => median(mine.map(f));
    rows.push(`| ${n} | ${mine[0]!.processes} | ${m((s) => s.rps).toFixed(0)} | ${m((s) => s.p50).toFixed(2)} | ${m((s) => s.p99).toFixed(2)} | ${m((s) => s.cpuUs).toFixed(0)} | ${(m((s) => s.rps) / baseline).toFixed(2)}× |`);
  }
  return rows.join('\n');
}
