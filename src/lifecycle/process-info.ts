// What one process tells of itself (GET /server_info, and a worker's answer to its supervisor), and
// where a listener listens: shared by the gateway (app.ts), its workers and its supervisor, which
// all import the lifecycle and nothing of each other for these.
import type { ConnectionState } from './connections.ts';
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
