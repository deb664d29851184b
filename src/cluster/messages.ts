// What the supervisor and its worker processes say to each other over the cluster IPC channel
// (structured clone, so a Config crosses as it is).
import type { Config } from '../config/schema.ts';
import type { LifecycleCommand } from '../lifecycle/lifecycle.ts';
import type { BoundListener } from './worker-group.ts';

export type QueryKind = 'info' | 'metrics';

/** Supervisor → worker. */
export type ToWorker =
  | { type: 'start'; config: Config; healthCheckFailed: boolean }
  | { type: 'command'; command: LifecycleCommand }
  | { type: 'reload'; config: Config; trigger: string }
  | { type: 'query'; id: number; kind: QueryKind };

/** Worker → supervisor. */
export type FromWorker =
  | { type: 'ready'; listeners: BoundListener[] }
  | { type: 'start_failed'; message: string }
  | { type: 'reply'; id: number; value: unknown };

export function isMessage<T extends { type: string }>(value: unknown): value is T {
  return typeof value === 'object' && value !== null && typeof (value as { type?: unknown }).type === 'string';
}

/** The environment variable that tells a worker its slot (1..N), stable across restarts. */
export const WORKER_SLOT_ENV = 'SLUICE_WORKER';
