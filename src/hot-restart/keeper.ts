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
import { detachHandle } from '../server/handles.ts';
import { GENERATION_ENV, isHotRestartMessage, noCarriedState, type CarriedState, type FromGeneration, type HotRestartResult, type KeeperSettings, type ToGeneration } from './messages.ts';

export interface KeeperOptions {
  /** The arguments the generations get (those the keeper was started with). */
  args: string[];
  log: Logger;
  /** E7: how long a new generation may take to be ready. */
  startTimeoutSecs: number;
}

type GenerationState = 'starting' | 'serving' | 'retiring' | 'exited';

interface Generation {
  readonly number: number;
  readonly child: ChildProcess;
  state: GenerationState;
  /** It said hello: it hears messages (before that it is loading its config). */
  hello: boolean;
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
  }

  /** Starts the first generation and follows the signals. Resolves with the exit code, once every generation has exited. */
  run(): Promise<number> {
    const first = this.#spawn();
    first.child.on('message', (message: unknown) => {
      if (!isHotRestartMessage<FromGeneration>(message)) return;
      if (message.type === 'hello') {
        this.#send(first, { type: 'inherit', state: this.#state, keeper: this.#settings() });
        this.#send(first, { type: 'sockets_done' });
      } else if (message.type === 'ready') this.#serving(first, undefined);
    });
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
    const timer = setTimeout(() => this.#failed(next, 'timeout', `generation ${next.number} was not ready within ${this.#options.startTimeoutSecs} s (hot_restart.start_timeout_secs)`), this.#options.startTimeoutSecs * 1000);
    timer.unref();
    /** The old generation was asked to hand over (once: at the new one's hello). */
    let asked = false;
    const onOld = (message: unknown, handle: unknown) => {
      if (!isHotRestartMessage<FromGeneration>(message) || this.#next !== next) return;
      if (message.type === 'state') {
        this.#state.healthCheckFailed = message.state.healthCheckFailed;
        // The counters go to the next generation only; the changes that follow them go there too.
        old.heir = next;
        this.#send(next, { type: 'inherit', state: { ...this.#state, limits: message.state.limits }, keeper: this.#settings() });
      } else if (message.type === 'socket' && handle) this.#relay(old, next, message.handed, handle as Server);
      else if (message.type === 'sockets_done') {
        old.child.off('message', onOld);
        this.#send(next, { type: 'sockets_done' });
      }
    };
    next.child.on('message', (message: unknown) => {
      if (!isHotRestartMessage<FromGeneration>(message)) return;
      if (message.type === 'hello' && !asked && this.#next === next) {
        asked = true;
        old.child.on('message', onOld);
        this.#send(old, { type: 'hand_over' });
      } else if (message.type === 'ready' && this.#next === next) {
        clearTimeout(timer);
        this.#serving(next, old);
      }
    });
    void next.exited.then((code) => {
      clearTimeout(timer);
      old.child.off('message', onOld);
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
    this.#finished(generation, 'success', undefined, `hot restart done: generation ${generation.number} serves (in ${Date.now() - generation.startedAt} ms); generation ${old.number} drains`, {
      took_ms: Date.now() - generation.startedAt,
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
      const handle = detachHandle(socket);
      if (handle && !this.#send(old, { type: 'connection', bound: handed.bound }, handle)) closeHandle(handle);
    });
    // Closed once the new generation has it (the message, with its handle, was written).
    if (!this.#send(next, { type: 'socket', handed }, server, () => server.close())) server.close();
  }

  /** A connection a generation that gives up had accepted (a bare handle, unread): for the one serving. */
  #handBack(from: Generation, bound: string, handle: object): void {
    const to = this.#current;
    if (!to || to === from || to.state !== 'serving' || !this.#send(to, { type: 'connection', bound }, handle)) closeHandle(handle);
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
    if (!generation.hello || !this.#send(generation, { type: 'abort' })) generation.child.kill('SIGKILL');
    setTimeout(() => generation.child.kill('SIGKILL'), KILL_AFTER_MS).unref();
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
    const generation: Generation = {
      number,
      child,
      state: 'starting',
      hello: false,
      startedAt: Date.now(),
      exited: new Promise<number>((resolve) => (resolveExit = resolve)),
      heir: undefined,
    };
    this.#generations.add(generation);
    child.on('message', (message: unknown, handle: unknown) => {
      if (!isHotRestartMessage<FromGeneration>(message)) return;
      if (message.type === 'hello') generation.hello = true;
      else if (message.type === 'restart') this.restart(message.trigger);
      else if (message.type === 'connection_back' && handle) this.#handBack(generation, message.bound, handle);
      // In order after the `state` that carried the counters: the heir applies them after its snapshot.
      else if (message.type === 'limits' && generation.heir && generation.heir.state !== 'exited') this.#send(generation.heir, message);
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

  #send(generation: Generation, message: ToGeneration, handle?: Server | object, callback?: () => void): boolean {
    const child = generation.child;
    if (!child.connected) return false;
    try {
      if (handle) child.send(message, handle as Server, callback ? () => callback() : undefined);
      else child.send(message);
      return true;
    } catch {
      return false;
    }
  }
}

/** A bare connection handle nobody can take. */
function closeHandle(handle: object): void {
  (handle as { close?: () => void }).close?.();
}
