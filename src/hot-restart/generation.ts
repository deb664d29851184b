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
import { systemClock, type Clock } from '../lifecycle/clock.ts';
import { ProcessChannel } from '../process-channel/channel.ts';
import { parentTransport } from '../process-channel/transport.ts';
import { GENERATION_ENV, type CarriedState, type FromGeneration, type HotRestartResult, type KeeperSettings, type ToGeneration } from './messages.ts';

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

/** A generation's side of its channel to the keeper. */
type KeeperChannel = ProcessChannel<FromGeneration, ToGeneration>;

/** Sends to the keeper; `sent` is called once written, or at once if it cannot be (the keeper is gone: its gone handler drains this generation). */
function send(channel: KeeperChannel, message: FromGeneration, handle?: Server | object, sent?: () => void): void {
  if (!channel.send(message, handle, sent)) sent?.();
}

/** How long a generation that gives up waits for the connections it hands back to be written before it exits. */
const GIVE_BACK_MS = 2000;

/**
 * The changes of this generation's memory store once it has handed its counters over, sent to the
 * keeper for the next generation: gathered for a turn of the event loop and sent as one message.
 */
class LimitChanges implements MemoryFollower {
  readonly #channel: KeeperChannel;
  #pending: MemoryChange[] = [];
  #scheduled = false;
  #written: Promise<void> = Promise.resolve();

  constructor(channel: KeeperChannel) {
    this.#channel = channel;
  }

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
    this.#written = new Promise((resolve) => send(this.#channel, { type: 'limits', changes }, undefined, resolve));
  }
}

/**
 * E7: a generation that will not serve (its start failed, or the keeper gave up on it) stops
 * accepting, hands the connections it accepted and has not served back to the keeper (unread: the
 * generation serving takes them), and exits 1.
 */
async function giveBack(channel: KeeperChannel, clock: Clock, sockets: ListenerSockets, generation: number, reason: string): Promise<never> {
  const back = sockets.withdrawAll();
  // The clock's timers do not hold the process open: this does, until it exits below.
  const open = setInterval(() => {}, GIVE_BACK_MS);
  await Promise.race([
    Promise.all(
      back.map(({ bound, socket }) => {
        const handle = detachHandle(socket);
        return handle ? new Promise<void>((resolve) => send(channel, { type: 'connection_back', bound }, handle, resolve)) : Promise.resolve();
      }),
    ),
    new Promise((resolve) => clock.after(GIVE_BACK_MS, () => resolve(undefined))),
  ]);
  clearInterval(open);
  process.stderr.write(`sluice: generation ${generation} gives up (${reason}); ${back.length} connection(s) handed back\n`);
  process.exit(1);
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
  readonly #channel: KeeperChannel;
  readonly #clock: Clock;
  /** Until it serves: the keeper says to give up (`abort`, or a signal), and the start is abandoned. */
  #startUp: (() => void)[];

  private constructor(channel: KeeperChannel, clock: Clock, generation: number, sockets: ListenerSockets, state: CarriedState, keeper: KeeperSettings, limits: MemoryStore | undefined) {
    this.#channel = channel;
    this.#clock = clock;
    this.generation = generation;
    this.sockets = sockets;
    // The counters live in `limits` from now on; the state keeps no copy of them.
    this.state = { ...state, limits: undefined };
    this.keeper = keeper;
    this.limits = limits;
    const giveUp = () => void this.giveUp('told by the keeper');
    this.#startUp = [channel.on('abort', giveUp), channel.on('signal', giveUp)];
    if (limits) channel.on('limits', (message) => applyLimitChanges(limits, message));
  }

  /** E7: this generation will not serve: see `giveBack`. */
  giveUp(reason: string): Promise<never> {
    this.#stopStartUp();
    return giveBack(this.#channel, this.#clock, this.sockets, this.generation, reason);
  }

  /**
   * Under a keeper: says hello, then adopts what it is handed (the state, then the previous
   * generation's sockets). Resolves with nothing when this process was not started by a keeper,
   * or when the keeper goes away first. `clock`: the timers that decide (the forced end of a
   * retiring generation, the wait of one that gives up); default the system's.
   */
  static connect(clock: Clock = systemClock): Promise<GenerationLink | undefined> {
    const generation = generationNumber();
    if (generation === 0) return Promise.resolve(undefined);
    const sockets = new ListenerSockets();
    const channel: KeeperChannel = new ProcessChannel(parentTransport(), { clock });
    return new Promise((resolve) => {
      let state: CarriedState | undefined;
      let keeper: KeeperSettings | undefined;
      let limits: MemoryStore | undefined;
      // Told to stop before it could serve: what it adopted so far may have accepted connections.
      const giveUp = () => void giveBack(channel, clock, sockets, generation, 'told by the keeper');
      const listening = [
        channel.on('abort', giveUp),
        channel.on('signal', giveUp),
        channel.on('inherit', (message) => {
          state = message.state;
          keeper = message.keeper;
          // The previous generation's counters; its later changes follow (`limits` messages).
          if (state.limits) limits = carriedCounters(state.limits);
        }),
        channel.on('limits', (message) => {
          if (limits) applyLimitChanges(limits, message);
        }),
        channel.on('socket', (message, handle) => {
          if (handle) sockets.adopt(message.handed, handle as Server);
        }),
        channel.on('sockets_done', () => {
          if (!state) return;
          for (const stop of listening) stop();
          // From here until it serves, the link itself listens for a keeper that gives up on it.
          resolve(new GenerationLink(channel, clock, generation, sockets, state, keeper ?? { start_timeout_secs: 0 }, limits));
        }),
        channel.onGone(() => resolve(undefined)),
      ];
      send(channel, { type: 'hello' });
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
    this.#stopStartUp();
    // Sockets of the previous generation that this config no longer names.
    this.sockets.closeUnclaimed();
    metrics.generation.set(this.generation);
    for (const [result, count] of Object.entries(this.state.hotRestarts)) if (count > 0) metrics.hotRestarts.labels(result).inc(count);
    this.#channel.onAny((message, handle) => this.#handle(message, handle, metrics, log, settings));
    // Without its keeper nothing can hand this generation's sockets on: it finishes what is in
    // flight and goes, as a worker does without its supervisor.
    this.#channel.onGone(() => void gateway.lifecycle.drain('keeper_gone', { graceful: false }));
    send(this.#channel, { type: 'ready', version });
  }

  /** Asks the keeper for a hot restart (the admin API reached this generation). */
  requestRestart(trigger: string): void {
    send(this.#channel, { type: 'restart', trigger });
  }

  #stopStartUp(): void {
    for (const stop of this.#startUp.splice(0)) stop();
  }

  #handle(message: ToGeneration, handle: object | undefined, metrics: Metrics, log: Logger, settings: () => RetireSettings): void {
    const gateway = this.#gateway!;
    switch (message.type) {
      case 'hand_over': {
        // The memory store's counters go with the state, and every change it makes from now on
        // follows them (until this generation exits, or the restart fails).
        const counters = gateway.memoryLimits;
        send(this.#channel, { type: 'state', state: { healthCheckFailed: gateway.lifecycle.health.failed, limits: counters?.snapshot() } });
        counters?.follow(new LimitChanges(this.#channel));
        for (const { handed, server } of this.sockets.handOver()) send(this.#channel, { type: 'socket', handed }, server);
        send(this.#channel, { type: 'sockets_done' });
        return;
      }
      case 'connection': {
        if (!handle) return;
        const target = this.sockets.byBound(message.bound);
        const { handoff } = message;
        // Confirmed before a byte of it is read; refused (this copy closes) when no socket here listens at `bound`.
        if (handoff !== undefined) {
          if (target) this.#channel.receive(handle, { type: 'connection_taken', handoff }, (socket) => target.take(socket));
          else this.#channel.refuse(handle, { type: 'connection_refused', handoff });
          return;
        }
        // From a keeper that does not ask for a confirmation.
        const socket = adoptHandle(handle);
        if (target) target.take(socket);
        else socket.destroy();
        return;
      }
      case 'retire': {
        const { parentShutdownSecs, keepIdleSecs } = settings();
        log.info({ event: 'generation_retiring', parent_shutdown_secs: parentShutdownSecs }, `generation ${this.generation} drains: the next one serves`);
        void gateway.lifecycle.drain('hot_restart', {
          graceful: false,
          includeModifyOnly: true,
          keepIdleSecs,
          forceAfter: { secs: parentShutdownSecs, reason: 'shutdown.parent_shutdown_secs' },
        });
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
function applyLimitChanges(limits: MemoryStore, message: Extract<ToGeneration, { type: 'limits' }>): void {
  if (!Array.isArray(message.changes)) return;
  for (const change of message.changes) {
    try {
      limits.apply(change);
    } catch {
      // Not a change this version knows: what it counted is lost, nothing else.
    }
  }
}
