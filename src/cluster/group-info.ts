// GET /server_info for a group: the supervisor's own state, its workers' summed, and each worker's.
import type { ConnectionCounts } from '../telemetry/metrics.ts';
import { sumWaitingFor } from '../lifecycle/progress.ts';
import type { ListenerInfo, ProcessInfo } from '../lifecycle/process-info.ts';
import type { WorkerReply } from './worker-group.ts';

/**
 * The supervisor's view: in-flight and connections are summed over the processes that answered;
 * a listener served by the workers is `accepting` only if every worker that answered accepts on it.
 */
export function mergeGroupInfo(supervisor: ProcessInfo, replies: WorkerReply<ProcessInfo>[]): ProcessInfo & { workers: object[] } {
  const answered = replies.flatMap((r) => (r.value ? [r.value] : []));
  const connections = new Map<string, ConnectionCounts>();
  for (const c of [supervisor, ...answered].flatMap((p) => p.connections)) {
    const key = `${c.listener}\u0000${c.state}`;
    const seen = connections.get(key);
    if (seen) seen.count += c.count;
    else connections.set(key, { ...c });
  }
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
      worker: r.slot,
      pid: r.pid ?? null,
      state: r.value?.state ?? r.state,
      ready: r.value?.ready ?? false,
      answered: r.value !== undefined,
      in_flight: r.value?.in_flight ?? null,
      open_connections: r.value?.open_connections ?? null,
      drain: r.value?.drain ?? null,
      waiting_for: r.value?.waiting_for ?? null,
      targets: r.value?.targets ?? null,
    })),
  };
}
