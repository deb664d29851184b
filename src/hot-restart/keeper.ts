// The keeper (E7): with `hot_restart.enabled`, the process started stays for the gateway's whole
// life (it is the PID a platform watches: PID 1 in a container, the main PID under systemd) and runs
// the gateway as a child process, a generation. A hot restart (SIGUSR2 to the keeper, or the admin
// API of the generation serving) starts the next generation from the program files on disk now,
// hands it the listening sockets of the one serving, waits until it is ready, and only then tells
// the old one to drain. If the new one fails (bad config, crash, not ready in time) it is stopped
// and the old one keeps serving, unchanged. The keeper serves nothing itself.
import { spawn, type ChildProcess } from 'node:child_process';
import type { Server, Socket } from 'node:net';
import type { Logger } from '../telemetry/logger.ts';
import type { HandedSocket } from '../server/sockets.ts';
import { adoptHandle } from '../server/handles.ts';
import type { ConnectionHandoff } from '../process-channel/handoff.ts';
import { systemClock, type Clock } from '../lifecycle/clock.ts';
import { ProcessChannel } from '../process-channel/channel.ts';
import { childTransport } from '../process-channel/transport.ts';
import { GENERATION_ENV, noCarriedState, type CarriedState, type FromGeneration, type HotRestartResult, type KeeperSettings, type ToGeneration } from './messages.ts';

export interface KeeperOptions {
  /** The arguments the generations get (those the keeper was started with). */
  args: string[];
  log: Logger;
  /** E7: how long a new generation may take to be ready. */
  startTimeoutSecs: number;
  /** The timers that decide (the start timeout, the kill of a generation that does not stop); default the system's. */
  clock?: Clock;
}

type GenerationState = 'starting' | 'serving' | 'retiring' | 'exited';

interface Generation {
  readonly number: number;
  readonly child: ChildProcess;
  /** Holds what is sent until the generation's hello (before that it is loading its config). */
  readonly channel: ProcessChannel<ToGeneration, FromGeneration>;
  /** Connections passed to it (by the socket's `bound`), the keeper's until it confirms them. */
  readonly handoff: ConnectionHandoff<string>;
  state: GenerationState;
  readonly startedAt: number;
  readonly exited: Promise<number>;
  /** The generation its limit counters were handed to: its later changes go there. */
  heir: Generation | undefined;
}

/** How long a generation that was told to stop may take before it is killed. */
const KILL_AFTER_MS = 5000;

export class Keeper {
  readonly #options: KeeperOptions;
  readonly #log: Logger;
  readonly #clock: Clock;
  readonly #generations = new Set<Generation>();
  #current: Generation | undefined;
  /** The generation being started by a hot restart, until it serves or fails. */
  #next: Generation | undefined;
  #nextNumber = 1;
  #state: CarriedState = noCarriedState();
  #stopping = false;
  #exitCode = 0;
  #done!: (code: number) => void;
  readonly done = new Promise<number>((resolve) => (this.#done = resolve));

  constructor(options: KeeperOptions) {
    this.#options = options;
    this.#log = options.log;
    this.#clock = options.clock ?? systemClock;
  }

  /** Starts the first generation and follows the signals. Resolves with the exit code, once every generation has exited. */
  run(): Promise<number> {
    const first = this.#spawn();
    first.channel.on('hello', () => {
      this.#send(first, { type: 'inherit', state: this.#state, keeper: this.#settings() });
      this.#send(first, { type: 'sockets_done' });
    });
    first.channel.on('ready', () => this.#serving(first, undefined));
    this.#current = first;
    this.#next = first;
    for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => this.#stop(signal));
    process.on('SIGHUP', () => {
      if (this.#current && this.#current.state === 'serving') this.#send(this.#current, { type: 'signal', signal: 'SIGHUP' });
    });
    process.on('SIGUSR2', () => this.restart('SIGUSR2'));
    return this.done;
  }

  /** E7: starts the next generation; does nothing while one is in progress or the keeper stops. */
  restart(trigger: string): void {
    if (this.#stopping || this.#next || !this.#current || this.#current.state !== 'serving') return;
    const old = this.#current;
    const next = this.#spawn();
    this.#next = next;
    this.#log.info(
      { event: 'hot_restart_started', trigger, to_generation: next.number, from_generation: old.number, new_pid: next.child.pid },
      `hot restart (${trigger}): starting generation ${next.number} beside generation ${old.number}`,
    );
    const timer = this.#clock.after(this.#options.startTimeoutSecs * 1000, () =>
      this.#failed(next, 'timeout', `generation ${next.number} was not ready within ${this.#options.startTimeoutSecs} s (hot_restart.start_timeout_secs)`),
    );
    /** What the old generation hands over, heard from `hand_over` (at the new one's hello) until its `sockets_done`. */
    let handingOver: (() => void)[] = [];
    const stopHandingOver = () => {
      for (const stop of handingOver.splice(0)) stop();
    };
    const listenToOld = () => [
      old.channel.on('state', (message) => {
        if (this.#next !== next) return;
        this.#state.healthCheckFailed = message.state.healthCheckFailed;
        // The counters go to the next generation only; the changes that follow them go there too.
        old.heir = next;
        this.#send(next, { type: 'inherit', state: { ...this.#state, limits: message.state.limits }, keeper: this.#settings() });
      }),
      old.channel.on('socket', (message, handle) => {
        if (this.#next === next && handle) this.#relay(old, next, message.handed, handle as Server);
      }),
      old.channel.on('sockets_done', () => {
        if (this.#next !== next) return;
        stopHandingOver();
        this.#send(next, { type: 'sockets_done' });
      }),
    ];
    // The channel passes on its first hello only.
    next.channel.on('hello', () => {
      if (this.#next !== next) return;
      handingOver = listenToOld();
      this.#send(old, { type: 'hand_over' });
    });
    next.channel.on('ready', () => {
      if (this.#next !== next) return;
      timer.cancel();
      this.#serving(next, old);
    });
    void next.exited.then((code) => {
      timer.cancel();
      stopHandingOver();
      if (this.#next === next) this.#failed(next, 'failed', `generation ${next.number} exited with code ${code} before it was ready`);
    });
  }

  #settings(): KeeperSettings {
    return { start_timeout_secs: this.#options.startTimeoutSecs };
  }

  /** A generation is ready: it serves, and the one before it (if any) drains. */
  #serving(generation: Generation, old: Generation | undefined): void {
    this.#next = undefined;
    generation.state = 'serving';
    this.#current = generation;
    if (this.#stopping) {
      this.#send(generation, { type: 'signal', signal: 'SIGTERM' });
      return;
    }
    if (!old) return;
    old.state = 'retiring';
    this.#send(old, { type: 'retire' });
    const tookMs = Math.round(this.#clock.now() - generation.startedAt);
    this.#finished(generation, 'success', undefined, `hot restart done: generation ${generation.number} serves (in ${tookMs} ms); generation ${old.number} drains`, {
      took_ms: tookMs,
      from_generation: old.number,
    });
  }

  /** The new generation did not make it: stopped; the one serving carries on unchanged. */
  #failed(generation: Generation, result: Exclude<HotRestartResult, 'success'>, reason: string): void {
    if (this.#next !== generation) return;
    this.#next = undefined;
    this.#abort(generation);
    this.#finished(generation, result, reason, `hot restart failed: ${reason}; generation ${this.#current?.number} keeps serving`, {});
  }

  #finished(generation: Generation, result: HotRestartResult, reason: string | undefined, message: string, fields: object): void {
    this.#state.hotRestarts[result]++;
    const report: ToGeneration = { type: 'restart_result', result, reason, generation: generation.number, totals: { ...this.#state.hotRestarts } };
    if (this.#current) this.#send(this.#current, report);
    const line = { event: result === 'success' ? 'hot_restart_done' : 'hot_restart_failed', result, to_generation: generation.number, ...(reason ? { reason } : {}), ...fields };
    if (result === 'success') this.#log.info(line, message);
    else this.#log.error(line, message);
  }

  /**
   * Passes one listening socket from `old` to `next`. While the keeper holds it, it may accept a
   * connection on it (the socket is listening in this process too): such a connection goes back
   * to the old generation, unread, which serves it.
   */
  #relay(old: Generation, next: Generation, handed: HandedSocket, server: Server): void {
    (server as Server & { pauseOnConnect: boolean }).pauseOnConnect = true;
    server.on('connection', (socket: Socket) => {
      if (!old.handoff.pass(socket, handed.bound)) socket.destroy();
    });
    // Closed once the new generation has it (the message, with its handle, was written).
    if (!this.#send(next, { type: 'socket', handed }, server, () => server.close())) server.close();
  }

  /** A connection a generation that gives up had accepted (a bare handle, unread): for the one serving. */
  #handBack(from: Generation, bound: string, handle: object): void {
    const to = this.#current;
    const socket = adoptHandle(handle);
    if (!to || to === from || to.state !== 'serving' || !to.handoff.pass(socket, bound)) socket.destroy();
  }

  /** SIGTERM / SIGINT: every generation drains (a second signal is passed on too: it forces). */
  #stop(signal: 'SIGTERM' | 'SIGINT'): void {
    this.#stopping = true;
    for (const generation of this.#generations) {
      if (generation.state === 'starting') this.#abort(generation);
      else this.#send(generation, { type: 'signal', signal });
    }
  }

  /** A generation that has not served: it gives back what it accepted and exits; killed if it does not. */
  #abort(generation: Generation): void {
    if (generation.state === 'exited') return;
    // One that has not said hello yet (still loading its config) holds nothing: it is ended outright.
    if (!generation.channel.hello || !this.#send(generation, { type: 'abort' })) generation.child.kill('SIGKILL');
    this.#clock.after(KILL_AFTER_MS, () => generation.child.kill('SIGKILL'));
  }

  #spawn(): Generation {
    const number = this.#nextNumber++;
    // The program on disk now (an upgraded install is picked up), with the arguments and Node.js
    // options this process was started with. Its own process group: a terminal's Ctrl-C reaches
    // the keeper alone, which passes it on once.
    const child = spawn(process.execPath, [...process.execArgv, process.argv[1]!, ...this.#options.args], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, [GENERATION_ENV]: String(number) },
      detached: true,
    });
    let resolveExit!: (code: number) => void;
    const channel = new ProcessChannel<ToGeneration, FromGeneration>(childTransport(child), { holdUntilHello: true, clock: this.#clock });
    const generation: Generation = {
      number,
      child,
      channel,
      // A connection the generation refused, or did not confirm before it was gone, is closed (as it
      // was accepted by the generation's socket, it is no other's).
      handoff: channel.handoff<string>({
        message: (id, bound) => ({ type: 'connection', bound, handoff: id }),
        taken: 'connection_taken',
        refused: 'connection_refused',
        back: (returned) => returned.socket.destroy(),
      }),
      state: 'starting',
      startedAt: this.#clock.now(),
      exited: new Promise<number>((resolve) => (resolveExit = resolve)),
      heir: undefined,
    };
    this.#generations.add(generation);
    channel.on('restart', (message) => this.restart(message.trigger));
    channel.on('connection_back', (message, handle) => {
      if (handle) this.#handBack(generation, message.bound, handle);
    });
    // In order after the `state` that carried the counters: the heir applies them after its snapshot.
    channel.on('limits', (message) => {
      if (generation.heir && generation.heir.state !== 'exited') this.#send(generation.heir, message);
    });
    child.on('error', () => {});
    child.on('exit', (code, signal) => {
      const exitCode = code ?? (signal ? 1 : 0);
      const wasCurrent = this.#current === generation;
      generation.state = 'exited';
      this.#generations.delete(generation);
      this.#log.info({ event: 'generation_exited', exited_generation: number, generation_pid: child.pid, exit_code: code, signal }, `generation ${number} exited`);
      resolveExit(exitCode);
      if (wasCurrent) {
        this.#exitCode = exitCode;
        // The generation serving is gone without a successor: the keeper goes too (the platform
        // restarts the service), once any older generation has finished draining.
        if (!this.#stopping) {
          this.#stopping = true;
          for (const other of this.#generations) this.#send(other, { type: 'signal', signal: 'SIGTERM' });
        }
      }
      if (this.#generations.size === 0) this.#done(this.#exitCode);
    });
    return generation;
  }

  /** False when it cannot be sent (the generation is gone); `written` is called only when it could. */
  #send(generation: Generation, message: ToGeneration, handle?: Server | object, written?: () => void): boolean {
    return generation.channel.send(message, handle, written);
  }
}
