// GET /server_info and the status page for a group: the supervisor's own state, its workers' summed, and each worker's.
import type { ConnectionCounts } from '../telemetry/metrics.ts';
import { sumWaitingFor } from '../lifecycle/progress.ts';
import type { GroupStatus, ListenerInfo, ProcessInfo, ProcessStatus } from '../lifecycle/process-info.ts';
import type { WorkerReply } from './worker-group.ts';

/**
 * The supervisor's view: in-flight and connections are summed over the processes that answered;
 * a listener served by the workers is `accepting` only if every worker that answered accepts on it.
 */
export function mergeGroupInfo(supervisor: ProcessInfo, replies: WorkerReply<ProcessInfo>[]): ProcessInfo & { workers: object[] } {
  const answered = replies.flatMap((r) => (r.value ? [r.value] : []));
  const connections = sumCounts<ConnectionCounts>([supervisor, ...answered].flatMap((p) => p.connections), (c) => `${c.listener}\u0000${c.state}`);
  const listeners = new Map<string, ListenerInfo>(supervisor.listeners.map((l) => [l.name, l]));
  for (const l of answered.flatMap((p) => p.listeners)) {
    const seen = listeners.get(l.name);
    if (seen) seen.accepting &&= l.accepting;
    else listeners.set(l.name, { ...l });
  }
  const waiting = answered.flatMap((p) => (p.waiting_for ? [p.waiting_for] : []));
  return {
    ...supervisor,
    waiting_for: supervisor.waiting_for && sumWaitingFor(supervisor.waiting_for, waiting),
    probe_connections: answered.reduce((sum, p) => sum + p.probe_connections, supervisor.probe_connections),
    in_flight: answered.reduce((sum, p) => sum + p.in_flight, supervisor.in_flight),
    open_connections: answered.reduce((sum, p) => sum + p.open_connections, supervisor.open_connections),
    connections: [...connections.values()],
    listeners: [...listeners.values()],
    // Each worker keeps its own target states (the supervisor serves no requests): listed per worker.
    targets: undefined,
    workers: replies.map((r) => ({
      ...workerSummary(r),
      drain: r.value?.drain ?? null,
      waiting_for: r.value?.waiting_for ?? null,
      targets: r.value?.targets ?? null,
    })),
  };
}

/** What /server_info and the status page both say of each worker. */
function workerSummary(r: WorkerReply<ProcessInfo>) {
  return {
    worker: r.slot,
    pid: r.pid ?? null,
    state: r.value?.state ?? r.state,
    ready: r.value?.ready ?? false,
    answered: r.value !== undefined,
    in_flight: r.value?.in_flight ?? null,
    open_connections: r.value?.open_connections ?? null,
  };
}

/** Counts summed per key (a listener and state, an endpoint and protocol). */
function sumCounts<T extends { count: number }>(counts: readonly T[], keyOf: (c: T) => string): Map<string, T> {
  const sums = new Map<string, T>();
  for (const c of counts) {
    const seen = sums.get(keyOf(c));
    if (seen) seen.count += c.count;
    else sums.set(keyOf(c), { ...c });
  }
  return sums;
}

/** How many of the oldest streams and sessions a status lists. */
export const OPEN_WORK_SHOWN = 50;

/**
 * The status page's view of a group: the supervisor's, with the workers' in-flight requests,
 * connections, streams and sessions summed, their targets and open work tagged with the worker.
 */
export function mergeGroupStatus(supervisor: ProcessStatus, replies: WorkerReply<ProcessStatus>[]): GroupStatus {
  const info = mergeGroupInfo(supervisor, replies);
  const answered = replies.flatMap((r) => (r.value ? [{ slot: r.slot, value: r.value }] : []));
  const byEndpoint = sumCounts([supervisor, ...answered.map((a) => a.value)].flatMap((p) => p.in_flight_by), (c) => `${c.endpoint}\u0000${c.protocol}`);
  const open = [...supervisor.open_work.oldest, ...answered.flatMap((a) => a.value.open_work.oldest.map((o) => ({ ...o, worker: a.slot })))];
  open.sort((a, b) => b.age_secs - a.age_secs);
  return {
    ...supervisor,
    ...info,
    requests_started: answered.reduce((sum, a) => sum + a.value.requests_started, supervisor.requests_started),
    in_flight_by: [...byEndpoint.values()],
    targets: answered.flatMap((a) => (a.value.targets ?? []).map((t) => ({ worker: a.slot, ...t }))),
    open_work: { total: answered.reduce((sum, a) => sum + a.value.open_work.total, supervisor.open_work.total), oldest: open.slice(0, OPEN_WORK_SHOWN) },
    workers: replies.map((r) => ({ ...workerSummary(r), requests_started: r.value?.requests_started ?? null })),
  };
}
