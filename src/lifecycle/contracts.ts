// What server/, gateway/, admin/ and cluster/ know of the lifecycle: interfaces only, so that they
// depend on the contract and not on the class that keeps it (lifecycle.ts).
import type { Socket } from 'node:net';
import type { TrackedConnection } from './connections.ts';
import type { DrainStrategy } from './drain-policy.ts';
import type { WaitingFor } from './progress.ts';

export type { ConnectionProtocol, ProtocolName } from './connections.ts';

/** What a listener or handler may ask of the lifecycle: the read side of the drain. */
export interface DrainDecision {
  /**
   * L3/E1: must a response whose headers are written now on `listener` close its connection?
   * Immediate drains always say yes; gradual ones with a probability rising over the drain.
   */
  shouldRetire(listener?: string): boolean;
  /**
   * Called when an immediate drain begins for `listener` (HTTP/2 sessions get their
   * GOAWAY). Returns an unsubscribe.
   */
  onRetire(listener: string, callback: () => void): () => void;
}

/** E5: how a listener takes part in drains. */
export interface ListenerScope {
  /** `modify_only` listeners are retired only when changed or removed, not by a process drain or health-check fail; a drain that exits still closes them at its end. */
  drainType: 'default' | 'modify_only';
  direction: 'inbound' | 'outbound';
  /** Admin listeners stay open through drains that do not exit, so the operator keeps control. */
  admin?: boolean;
}

export interface DrainOptions {
  /** Keep accepting for the window (true), or stop accepting at once (false). Default true. */
  graceful?: boolean;
  /** Only listeners whose direction is inbound (E4 `inboundonly`). */
  inboundOnly?: boolean;
  /** Exit once drained (default). False: readiness stays 503, the process stays (E4 `skip_exit`). */
  exit?: boolean;
  /** The window; defaults to min_drain_secs (signals) - the admin API passes the drain time. */
  windowSecs?: number;
  /** `modify_only` listeners drain too (E5, E7: a hot restart is one of their triggers). */
  includeModifyOnly?: boolean;
  /**
   * E7: once the listeners are closed, an idle HTTP/1.1 connection is kept this long (its next
   * request is served with `Connection: close`) instead of being closed at once: the listening
   * socket is still open in the next generation, and a client may be reusing the connection.
   */
  keepIdleSecs?: number;
  /**
   * A forced end (L8) after this long, with this reason, whatever the settings' max_drain_secs
   * (E7: a retiring generation's `shutdown.parent_shutdown_secs`). A drain in progress takes it too.
   */
  forceAfter?: { secs: number; reason: string };
}

/** Something in flight that can be ended with an explicit error when the drain is forced (L8). */
export interface ForceEndable {
  forceEnd(reason: string): void;
  /** What it is, for `waiting_for` (O1): counted only when given. */
  kind?(): 'request' | 'stream' | 'session';
  /** The exchange it belongs to: what the status page lists of an open stream or session. */
  readonly exchange?: ExchangeFacts;
}

/** What the status page shows of a stream or session in flight (server/context.ts's ExchangeContext has these). */
export interface ExchangeFacts {
  readonly endpoint: string;
  readonly model: string;
  readonly protocol: string;
  readonly listener: string;
  durationSeconds(): number;
}

/** A moment of the drain, in seconds from its start (the status page's timeline). */
export interface DrainMoment {
  event: 'drain_started' | 'window_over' | 'workers_exited' | 'listeners_closed' | 'forced' | 'exited';
  at_secs: number;
}

/** One stream or session in flight, as the status page lists it. */
export interface OpenWork {
  kind: 'stream' | 'session';
  endpoint: string;
  model: string;
  protocol: string;
  listener: string;
  age_secs: number;
}

/** The fields of a `drain_started` or `drain_progress` line. */
export interface DrainReport {
  event: 'drain_started' | 'drain_progress';
  in_flight: number;
  open_connections: number;
  waiting_for: WaitingFor;
  /** Connections accepted during the drain whose first request was a health probe (not logged one by one). */
  probe_connections: number;
  [field: string]: unknown;
}

export interface LifecycleLog {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
}

/** A command given to the lifecycle, as other processes must hear it (workers follow their supervisor). */
export type LifecycleCommand =
  | { kind: 'drain'; trigger: string; options: DrainOptions }
  | { kind: 'force'; reason: string }
  | { kind: 'healthcheck'; failed: boolean };

export interface LifecycleHooks {
  /** Stops accepting new connections on the listeners `include` selects, or all (existing ones stay). */
  stopAccepting(include?: (listener: string) => boolean): void;
  /**
   * Final work before exit (L9): close upstream pools, flush logs. `forced` (L8): nothing may be
   * waited for; requests still in progress upstream are aborted.
   */
  shutdown(forced: boolean): Promise<void>;
  /** Told of every drain, force and health-check change as it is given here. */
  commanded?(command: LifecycleCommand): void;
  /**
   * Writes a drain_started / drain_progress line (default: logged as it is). A supervisor adds its
   * workers' numbers first: it returns a promise, settled once the line is written, and the
   * `process_exit` line waits for it (so that it stays the process's last).
   */
  reportDrain?(report: DrainReport, message: string): void | Promise<void>;
}

export interface DrainSettings {
  minDrainSecs: number;
  maxDrainSecs: number;
  progressLogSecs: number;
  /** L6: how long a fresh connection is held after the listeners close. */
  freshConnectionGraceSecs: number;
  /** While serving, a connection that sends no request for this long is closed (0 = never). */
  freshTimeoutSecs: number;
  /** Idle multiplexed (HTTP/2) connections are closed after this long (0 = never). */
  idleTimeoutSecs: number;
  /** E1: how responses retire their connections during a drain. */
  drainStrategy: DrainStrategy;
  /** E3: the proactive drain resets upgraded (WebSocket) connections (Envoy's way). */
  resetUpgradedOnProactiveDrain: boolean;
  /** E1/E2: the drain time the strategy and the proactive drain are spread over (the config's default: the window, min_drain_secs). */
  drainTimeSecs: number;
  /** E2: a proactively drained connection's own drain timeout. */
  connectionDrainTimeoutSecs: number;
}

/** What the admin API reports about the drain in progress. */
export interface DrainInfo {
  trigger: string;
  graceful: boolean;
  inbound_only: boolean;
  exit: boolean;
  elapsed_secs: number;
  drain_time_secs: number;
  strategy: DrainStrategy;
}

/** What a listener may ask of the connection table. */
export interface ConnectionTable {
  /** Tracks an accepted socket; closes it and returns undefined past `max_connections`. */
  admit(socket: Socket, listener: string): TrackedConnection | undefined;
  /** The connection a socket carries (its TCP socket, or its TLS socket after the hand-over). */
  get(socket: Socket): TrackedConnection | undefined;
  /** The connection now runs over `socket` (a TLS socket over the TCP one it was accepted on). */
  handOver(connection: TrackedConnection, socket: Socket): void;
  /** The connections of one listener. */
  of(listener: string): IterableIterator<TrackedConnection>;
}

/** What a listener asks of the lifecycle: admission, the connection table, retirement (E5, E6). */
export interface ListenerLifecycle extends DrainDecision {
  readonly connections: ConnectionTable;
  /** Tells one connection to go (E2, E6). */
  retireConnection(connection: TrackedConnection, timeoutMs: number, reason: string, closeIdle?: boolean): void;
}

/** What request and upgrade entry ask of the lifecycle: in-flight accounting (L10), forced ends (L8). */
export interface RequestLifecycle extends DrainDecision {
  readonly draining: boolean;
  requestStarted(connection: TrackedConnection | undefined, probe?: boolean): void;
  requestFinished(connection: TrackedConnection | undefined): void;
  /**
   * A live view (the admin status event stream) began on `connection`: its connection is busy, but
   * it is not in flight, so no drain waits for it (L5); it is ended at the exit.
   */
  watchStarted(connection: TrackedConnection | undefined): void;
  /** The live view's response closed. Called exactly once per watchStarted. */
  watchFinished(connection: TrackedConnection | undefined): void;
  trackForceEndable(stream: ForceEndable): () => void;
}

/** The drain as the admin API and the status page show it (lifecycle/drain-status.ts). */
export interface DrainView {
  /** Seconds since the drain began, 0 before. */
  seconds(): number;
  /** The drain's window in seconds (0 before a drain, and for a drain that stopped accepting at once). */
  windowSecs(): number;
  /** What the drain waits for now (O1). */
  waitingFor(): WaitingFor;
  readonly probeConnections: number;
  /** The drain in progress, if any. */
  info(): DrainInfo | undefined;
  /** The drain's moments so far (empty before a drain). */
  moments(): readonly DrainMoment[];
  /** The streams and sessions in flight and the `limit` oldest of them. */
  openWork(limit: number): { total: number; oldest: OpenWork[] };
}

/** What the admin routes ask of the lifecycle: drains and the health-check override (E4). */
export interface AdminLifecycle extends DrainDecision {
  drain(trigger: string, options?: DrainOptions): Promise<number>;
  readonly status: DrainView;
  /** E4: the health check failed on purpose by the admin API, and restored. */
  readonly health: { fail(): boolean; restore(): boolean };
}
