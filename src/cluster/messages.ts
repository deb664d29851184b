// What the supervisor and its worker processes say to each other over the cluster IPC channel
// (structured clone, so a Config crosses as it is).
import type { Config } from '../config/schema.ts';
import type { LifecycleCommand } from '../lifecycle/contracts.ts';
import type { BoundListener } from '../lifecycle/process-info.ts';


export type QueryKind = 'info' | 'metrics' | 'status';

/** Supervisor → worker. */
export type ToWorker =
  | { type: 'start'; config: Config; healthCheckFailed: boolean }
  | { type: 'command'; command: LifecycleCommand }
  /** Apply at once (a worker that started during a group reload's prepare). */
  | { type: 'reload'; config: Config; trigger: string }
  /** E6a: prepare this config (bind, load certificates, build providers) and answer `reply` with a `ReloadPrepared`. */
  | { type: 'reload_prepare'; id: number; config: Config; trigger: string }
  /** E6a: every process prepared: switch. */
  | { type: 'reload_commit'; id: number }
  /** E6a: some process could not prepare: close what was prepared, keep serving the old config. */
  | { type: 'reload_abort'; id: number }
  | { type: 'query'; id: number; kind: QueryKind }
  /** The answer to `socket_acquire`: where the socket listens, or why it cannot be had. */
  | { type: 'socket_acquired'; lease: number; bound?: string; error?: string; code?: string | undefined }
  /**
   * A connection accepted on the socket of `lease` (its bare handle travels with the message). It
   * stays the supervisor's until the worker answers `connection_taken` or `connection_refused`
   * with the same `handoff` (process-channel/handoff.ts).
   */
  | { type: 'connection'; lease: number; handoff: number }
  /** The answer to `limit`: the store's value, or why it failed. */
  | { type: 'limit_reply'; id: number; value?: unknown; error?: string };

/** Worker → supervisor. */
export type FromWorker =
  /**
   * First message of every worker, once it listens: a message the supervisor sends before it would
   * be lost (a cluster worker drops messages that arrive before its 'message' listener exists).
   */
  | { type: 'hello' }
  | { type: 'ready'; listeners: BoundListener[] }
  | { type: 'start_failed'; message: string }
  | { type: 'reply'; id: number; value: unknown }
  /** A listener wants its socket (held by the supervisor: see connection-dispatch.ts). */
  | { type: 'socket_acquire'; lease: number; listener: string; configured: string }
  /** The listener starts (or stops) taking the socket's connections. */
  | { type: 'socket_serve'; lease: number; serving: boolean }
  | { type: 'socket_let_go'; lease: number }
  /** The connection `handoff` is this worker's now (sent before it reads a byte of it). */
  | { type: 'connection_taken'; handoff: number }
  /** The connection `handoff` is not (no listener of this worker holds its socket): the supervisor passes it on. */
  | { type: 'connection_refused'; handoff: number }
  /** An operation on the supervisor's limit store (limits.store memory: one set of counters for the group). */
  | { type: 'limit'; id: number; op: LimitOperation; args: unknown[] };

export type LimitOperation = 'acquire' | 'settle' | 'renew' | 'spent';

/** A worker's answer to `reload_prepare`. */
export type ReloadPrepared = { ok: true } | { ok: false; reason: string };

/** The environment variable that tells a worker its slot (1..N), stable across restarts. */
export const WORKER_SLOT_ENV = 'SLUICE_WORKER';
