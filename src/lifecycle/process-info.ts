// What one process tells of itself (GET /server_info, and a worker's answer to its supervisor), and
// where a listener listens: shared by the gateway (app.ts), its workers and its supervisor, which
// all import the lifecycle and nothing of each other for these.
import type { ConnectionState } from './connections.ts';
import type { DrainMoment, OpenWork } from './contracts.ts';
import type { WaitingFor } from './progress.ts';

/** Where a listener listens, as bound (the port chosen when 0 was asked). */
export interface BoundListener {
  name: string;
  role: string;
  /** host:port as bound. */
  address: string;
}

export interface ListenerInfo {
  name: string;
  role: string;
  address: string;
  accepting: boolean;
  tls: boolean;
  protocols: readonly string[];
}

/** One process's state, as /server_info reports it. */
export interface ProcessInfo {
  state: string;
  ready: boolean;
  healthcheck_failed: boolean;
  in_flight: number;
  open_connections: number;
  connections: { listener: string; state: ConnectionState; count: number }[];
  drain: object | null;
  /** During a drain: what it waits for (O1); null otherwise. */
  waiting_for: WaitingFor | null;
  /** Health-probe connections accepted during the drain. */
  probe_connections: number;
  listeners: ListenerInfo[];
  /** Requests (and upgrades) started since the process began. */
  requests_started: number;
  /** Resident memory, in bytes. */
  rss_bytes: number;
  /** Each routing target's state (provider, model, circuit, in flight, latency): a proxy process's. */
  targets?: Record<string, unknown>[];
}

/** One process's state for the status page: its info and what only a watcher needs (computed only while someone watches). */
export interface ProcessStatus extends ProcessInfo {
  pid: number;
  /** Requests in flight by endpoint and protocol (non-zero ones). */
  in_flight_by: { endpoint: string; protocol: string; count: number }[];
  /** The streams and sessions in flight, and the oldest of them. */
  open_work: { total: number; oldest: (OpenWork & { worker?: number })[] };
  /** The drain's window in seconds (0 without a drain). */
  drain_window_secs: number;
  /** The drain's moments so far. */
  drain_moments: readonly DrainMoment[];
}

/** One worker as the status page lists it. */
export interface WorkerStatus {
  worker: number;
  pid: number | null;
  state: string;
  ready: boolean;
  answered: boolean;
  in_flight: number | null;
  open_connections: number | null;
  requests_started: number | null;
}

/** A process's or a group's state for the status page: `workers` is empty for one process. */
export type GroupStatus = ProcessStatus & { workers: WorkerStatus[] };
