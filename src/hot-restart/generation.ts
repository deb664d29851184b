// A generation's side of hot restart (E7): a gateway started by the keeper (keeper.ts). It adopts the
// listening sockets of the generation before it, reports ready, hands its own sockets over when the
// next generation starts, and drains when the keeper says the next one serves.
import type { Server } from 'node:net';
import type { RunningGateway } from '../app.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { Metrics } from '../telemetry/metrics.ts';
import { ListenerSockets } from '../server/sockets.ts';
import { adoptHandle, detachHandle } from '../server/handles.ts';
import { MemoryStore, type MemoryChange, type MemoryFollower } from '../limits/memory-store.ts';
import { GENERATION_ENV, isHotRestartMessage, type CarriedState, type FromGeneration, type HotRestartResult, type KeeperSettings, type ToGeneration } from './messages.ts';

/** What /server_info tells of hot restart. */
export interface HotRestartInfo {
  generation: number;
  keeper_pid: number;
  last: { result: HotRestartResult; reason: string | null; generation: number; at: string } | null;
}

/** The settings of the running config that a retiring generation drains by. */
export interface RetireSettings {
  parentShutdownSecs: number;
  keepIdleSecs: number;
}

function send(message: FromGeneration, handle?: Server | object, sent?: () => void): void {
  try {
    if (!process.send) sent?.();
    else if (handle || sent) process.send(message, handle as Server | undefined, undefined, sent ? () => sent() : undefined);
    else process.send(message);
  } catch {
    // The keeper is gone: the disconnect handler drains this generation.
    sent?.();
  }
}

/**
 * The changes of this generation's memory store once it has handed its counters over, sent to the
 * keeper for the next generation: gathered for a turn of the event loop and sent as one message.
 */
class LimitChanges implements MemoryFollower {
  #pending: MemoryChange[] = [];
  #scheduled = false;
  #written: Promise<void> = Promise.resolve();

  change(change: MemoryChange): void {
    this.#pending.push(change);
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => this.#send());
  }

  flushed(): Promise<void> {
    this.#send();
    return this.#written;
  }

  #send(): void {
    this.#scheduled = false;
    if (this.#pending.length === 0) return;
    const changes = this.#pending;
    this.#pending = [];
    this.#written = new Promise((resolve) => send({ type: 'limits', changes }, undefined, resolve));
  }
}

/**
 * E7: a generation that will not serve (its start failed, or the keeper gave up on it) stops
 * accepting, hands the connections it accepted and has not served back to the keeper (unread: the
 * generation serving takes them), and exits 1.
 */
async function giveBack(sockets: ListenerSockets, generation: number, reason: string): Promise<never> {
  const back = sockets.withdrawAll();
  await Promise.race([
    Promise.all(
      back.map(({ bound, socket }) => {
        const handle = detachHandle(socket);
        return handle ? new Promise<void>((resolve) => send({ type: 'connection_back', bound }, handle, resolve)) : Promise.resolve();
      }),
    ),
    new Promise((resolve) => setTimeout(resolve, 2000)),
  ]);
  process.stderr.write(`sluice: generation ${generation} gives up (${reason}); ${back.length} connection(s) handed back\n`);
  process.exit(1);
}

function toldToGiveUp(message: unknown): boolean {
  return isHotRestartMessage<ToGeneration>(message) && (message.type === 'abort' || message.type === 'signal');
}

/** This process's generation number, when a keeper started it (0 otherwise). */
export function generationNumber(): number {
  return process.send && process.env[GENERATION_ENV] ? Number(process.env[GENERATION_ENV]) || 0 : 0;
}

export class GenerationLink {
  readonly generation: number;
  readonly sockets: ListenerSockets;
  readonly state: CarriedState;
  /** The keeper's own `hot_restart` settings (read at its start; a generation's config cannot change them). */
  readonly keeper: KeeperSettings;
  /**
   * The previous generation's memory store counters (limits.store memory), kept up to date with
   * the changes it still makes: this generation's store, when its config keeps the memory store.
   */
  readonly limits: MemoryStore | undefined;
  #last: HotRestartInfo['last'] = null;
  #gateway: RunningGateway | undefined;
  /** SIGTERM, SIGINT and SIGHUP, passed on by the keeper once this generation serves. */
  onSignal: ((signal: 'SIGTERM' | 'SIGINT' | 'SIGHUP') => void) | undefined;
  /** Set when the keeper says to give up during the start: the start is abandoned. */
  #startUp = (message: unknown) => {
    if (toldToGiveUp(message)) void this.giveUp('told by the keeper');
  };

  private constructor(generation: number, sockets: ListenerSockets, state: CarriedState, keeper: KeeperSettings, limits: MemoryStore | undefined) {
    this.generation = generation;
    this.sockets = sockets;
    // The counters live in `limits` from now on; the state keeps no copy of them.
    this.state = { ...state, limits: undefined };
    this.keeper = keeper;
    this.limits = limits;
    process.on('message', this.#startUp);
    if (limits) process.on('message', (message: unknown) => applyLimitChanges(limits, message));
  }

  /** E7: this generation will not serve: see `giveBack`. */
  giveUp(reason: string): Promise<never> {
    process.off('message', this.#startUp);
    return giveBack(this.sockets, this.generation, reason);
  }

  /**
   * Under a keeper: says hello, then adopts what it is handed (the state, then the previous
   * generation's sockets). Resolves with nothing when this process was not started by a keeper,
   * or when the keeper goes away first.
   */
  static connect(): Promise<GenerationLink | undefined> {
    const generation = generationNumber();
    if (generation === 0) return Promise.resolve(undefined);
    const sockets = new ListenerSockets();
    return new Promise((resolve) => {
      let state: CarriedState | undefined;
      let keeper: KeeperSettings | undefined;
      let limits: MemoryStore | undefined;
      const onMessage = (message: unknown, handle: unknown) => {
        if (!isHotRestartMessage<ToGeneration>(message)) return;
        // Told to stop before it could serve: what it adopted so far may have accepted connections.
        if (toldToGiveUp(message)) return void giveBack(sockets, generation, 'told by the keeper');
        if (message.type === 'inherit') {
          state = message.state;
          keeper = message.keeper;
          // The previous generation's counters; its later changes follow (`limits` messages).
          if (state.limits) limits = carriedCounters(state.limits);
        } else if (message.type === 'limits' && limits) applyLimitChanges(limits, message);
        else if (message.type === 'socket' && handle) sockets.adopt(message.handed, handle as Server);
        else if (message.type === 'sockets_done' && state) {
          process.off('message', onMessage);
          process.off('disconnect', onGone);
          // From here until it serves, the link itself listens for a keeper that gives up on it.
          resolve(new GenerationLink(generation, sockets, state, keeper ?? { start_timeout_secs: 0 }, limits));
        }
      };
      const onGone = () => resolve(undefined);
      process.on('message', onMessage);
      process.once('disconnect', onGone);
      send({ type: 'hello' });
    });
  }

  /** /server_info's `hot_restart`. */
  info(): HotRestartInfo {
    return { generation: this.generation, keeper_pid: process.ppid, last: this.#last };
  }

  /**
   * The gateway serves: tells the keeper, and from now on follows it. `settings` is read when the
   * keeper says to retire (a reload may have changed it).
   */
  serving(gateway: RunningGateway, version: string, metrics: Metrics, log: Logger, settings: () => RetireSettings): void {
    this.#gateway = gateway;
    process.off('message', this.#startUp);
    // Sockets of the previous generation that this config no longer names.
    this.sockets.closeUnclaimed();
    metrics.generation.set(this.generation);
    for (const [result, count] of Object.entries(this.state.hotRestarts)) if (count > 0) metrics.hotRestarts.labels(result).inc(count);
    const onMessage = (message: unknown, handle: unknown) => {
      if (isHotRestartMessage<ToGeneration>(message)) this.#handle(message, handle, metrics, log, settings);
    };
    process.on('message', onMessage);
    // Without its keeper nothing can hand this generation's sockets on: it finishes what is in
    // flight and goes, as a worker does without its supervisor.
    process.once('disconnect', () => void gateway.lifecycle.drain('keeper_gone', { graceful: false }));
    send({ type: 'ready', version });
  }

  /** Asks the keeper for a hot restart (the admin API reached this generation). */
  requestRestart(trigger: string): void {
    send({ type: 'restart', trigger });
  }

  #handle(message: ToGeneration, handle: unknown, metrics: Metrics, log: Logger, settings: () => RetireSettings): void {
    const gateway = this.#gateway!;
    switch (message.type) {
      case 'hand_over': {
        // The memory store's counters go with the state, and every change it makes from now on
        // follows them (until this generation exits, or the restart fails).
        const counters = gateway.memoryLimits;
        send({ type: 'state', state: { healthCheckFailed: gateway.lifecycle.health.failed, limits: counters?.snapshot() } });
        counters?.follow(new LimitChanges());
        for (const { handed, server } of this.sockets.handOver()) send({ type: 'socket', handed }, server);
        send({ type: 'sockets_done' });
        return;
      }
      case 'connection': {
        if (!handle) return;
        const socket = adoptHandle(handle);
        const target = this.sockets.byBound(message.bound);
        if (target) target.take(socket);
        else socket.destroy();
        return;
      }
      case 'retire': {
        const { parentShutdownSecs, keepIdleSecs } = settings();
        log.info({ event: 'generation_retiring', parent_shutdown_secs: parentShutdownSecs }, `generation ${this.generation} drains: the next one serves`);
        void gateway.lifecycle.drain('hot_restart', { graceful: false, includeModifyOnly: true, keepIdleSecs });
        const timer = setTimeout(() => gateway.force('shutdown.parent_shutdown_secs'), parentShutdownSecs * 1000);
        timer.unref();
        return;
      }
      case 'signal':
        this.onSignal?.(message.signal);
        return;
      case 'abort':
        // Only for a generation that does not serve yet; this one does.
        return;
      case 'restart_result': {
        this.#last = { result: message.result, reason: message.reason ?? null, generation: message.generation, at: new Date().toISOString() };
        // The next generation is gone: this one keeps its counters to itself again.
        if (message.result !== 'success') gateway.memoryLimits?.follow(undefined);
        for (const [result, total] of Object.entries(message.totals)) {
          const now = this.state.hotRestarts[result as HotRestartResult];
          if (total > now) metrics.hotRestarts.labels(result).inc(total - now);
          this.state.hotRestarts[result as HotRestartResult] = total;
        }
        return;
      }
      case 'inherit':
      case 'socket':
      case 'sockets_done':
      // Applied by the listener the link set up at its start.
      case 'limits':
        return;
    }
  }
}

/**
 * A store started from the previous generation's counters. That generation may run another version
 * of the program (a hot restart is how an upgrade is rolled out): counters it sent in a shape this
 * one cannot read are left behind, and the store starts empty, rather than failing the start.
 */
function carriedCounters(state: NonNullable<CarriedState['limits']>): MemoryStore {
  try {
    return new MemoryStore(Date.now, state);
  } catch {
    return new MemoryStore();
  }
}

/** The previous generation's changes; one this version cannot apply is skipped (see carriedCounters). */
function applyLimitChanges(limits: MemoryStore, message: unknown): void {
  if (!isHotRestartMessage<ToGeneration>(message) || message.type !== 'limits' || !Array.isArray(message.changes)) return;
  for (const change of message.changes) {
    try {
      limits.apply(change);
    } catch {
      // Not a change this version knows: what it counted is lost, nothing else.
    }
  }
}
