// What the keeper (the process that stays, see keeper.ts) and each generation of the gateway say to
// each other over IPC during a hot restart (E7). Listening sockets and accepted connections travel
// as the messages' handles.
import type { HandedSocket } from '../server/sockets.ts';
import type { MemoryChange, MemoryState } from '../limits/memory-store.ts';

/** The environment variable that makes a process a generation under a keeper, and says which. */
export const GENERATION_ENV = 'SLUICE_GENERATION';

export type HotRestartResult = 'success' | 'failed' | 'timeout';

/** What a hot restart carries from one generation to the next. */
export interface CarriedState {
  /** E4/E7: the health check was failed through the admin API (readiness stays 503). */
  healthCheckFailed: boolean;
  /** `sluice_hot_restarts_total` by result, since the keeper started. */
  hotRestarts: Record<HotRestartResult, number>;
  /**
   * The memory store's counters (limits.store memory) at the hand-over; the changes the old
   * generation makes after it follow as `limits` messages. Not kept by the keeper.
   */
  limits?: MemoryState | undefined;
}

export function noCarriedState(): CarriedState {
  return { healthCheckFailed: false, hotRestarts: { success: 0, failed: 0, timeout: 0 } };
}

/** The `hot_restart` settings the keeper started with: a generation's config cannot change them. */
export interface KeeperSettings {
  start_timeout_secs: number;
}

/** Keeper → generation. */
export type ToGeneration =
  /** First answer to `hello`: the state to start with. The sockets follow, then `sockets_done`. */
  | { type: 'inherit'; state: CarriedState; keeper: KeeperSettings }
  /** A listening socket of the previous generation (the handle), to adopt. */
  | { type: 'socket'; handed: HandedSocket }
  | { type: 'sockets_done' }
  /** Hand your listening sockets over (answer with `state`, each `socket`, then `sockets_done`). */
  | { type: 'hand_over' }
  /**
   * A connection for your socket `bound` (the handle): one the keeper accepted on it while passing
   * the sockets on, or one a generation that gave up handed back. It stays the keeper's until you
   * answer `connection_taken` or `connection_refused` with the same `handoff`
   * (process-channel/handoff.ts); none from a keeper older than this field: nothing to answer.
   */
  | { type: 'connection'; bound: string; handoff?: number }
  /** The next generation serves: stop accepting and drain (E7), bounded by parent_shutdown_secs. */
  | { type: 'retire' }
  /**
   * A signal for the generation (SIGTERM, SIGINT, SIGHUP): a generation ignores signals sent to it
   * directly (a service manager signals every process of the service), and takes them from here.
   */
  | { type: 'signal'; signal: 'SIGTERM' | 'SIGINT' | 'SIGHUP' }
  /** The restart failed or the keeper stops before this generation served: give back what you accepted, and exit. */
  | { type: 'abort' }
  /** A hot restart ended: the totals to report. */
  | { type: 'restart_result'; result: HotRestartResult; reason?: string | undefined; generation: number; totals: CarriedState['hotRestarts'] }
  /** Changes the previous generation's memory store made after its snapshot, to make here too. */
  | { type: 'limits'; changes: MemoryChange[] };

/** Generation → keeper. */
export type FromGeneration =
  | { type: 'hello' }
  | { type: 'ready'; version: string }
  | { type: 'state'; state: Pick<CarriedState, 'healthCheckFailed' | 'limits'> }
  /** Changes this generation's memory store made since it handed its counters over: for the next generation. */
  | { type: 'limits'; changes: MemoryChange[] }
  | { type: 'socket'; handed: HandedSocket }
  | { type: 'sockets_done' }
  /** Start a hot restart (the admin API reached this generation). */
  | { type: 'restart'; trigger: string }
  /** A connection this generation accepted but will not serve (it is giving up before serving): for the one serving. */
  | { type: 'connection_back'; bound: string }
  /** The connection `handoff` is this generation's now (sent before it reads a byte of it). */
  | { type: 'connection_taken'; handoff: number }
  /** The connection `handoff` is not (no socket of this generation listens at its `bound`): the keeper closes it. */
  | { type: 'connection_refused'; handoff: number };
