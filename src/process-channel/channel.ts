// One typed IPC channel between two processes, used by both supervisors: WorkerGroup ↔ worker
// (cluster/) and keeper ↔ generation (hot-restart/). Over a Transport (transport.ts) it gives:
// - hello first: the parent side holds what it sends until the child's `hello` (a child drops the
//   messages that arrive before it listens), then sends it in order, after what the `hello`
//   handlers sent;
// - `send(message, handle?, written?)`;
// - `request(build(id), timeoutMs)`: the reply (an incoming message of a reply type with that
//   `id`), or nothing once the time is up, the other side is gone, or it could not be sent;
// - incoming messages dispatched by `type` to typed handlers;
// - `gone`: the other side is gone (every message it sent has been received);
// - connections passed with an acknowledgement (handoff.ts): `handoff()` on the sender's side,
//   `receive()` on the receiver's.
// Timers come from an injected Clock.
import type { Socket } from 'node:net';
import { systemClock, type Clock, type TimerHandle } from '../lifecycle/clock.ts';
import { ConnectionHandoff, receiveHandoff, type Unconfirmed } from './handoff.ts';
import type { Transport } from './transport.ts';

export interface Message {
  type: string;
}

/** The message of `In` whose type is `T`. */
export type Of<In extends Message, T extends In['type']> = Extract<In, { type: T }>;

export interface ChannelOptions<In extends Message> {
  /** Parent side: nothing is written before the other side's `hello` (sends wait, in order); only its first `hello` is dispatched. */
  holdUntilHello?: boolean;
  /** The incoming types that answer a `request`: they carry its `id`. */
  replies?: readonly In['type'][];
  clock?: Clock;
}

interface Held {
  message: unknown;
  handle: object | undefined;
  written: (() => void) | undefined;
}

type Handler = (message: never, handle: object | undefined) => void;

export class ProcessChannel<Out extends Message, In extends Message> {
  readonly #transport: Transport;
  readonly #clock: Clock;
  readonly #replies: ReadonlySet<string>;
  readonly #holds: boolean;
  #hello: boolean;
  #held: Held[] = [];
  readonly #handlers = new Map<string, Set<Handler>>();
  readonly #any = new Set<(message: In, handle: object | undefined) => void>();
  readonly #pending = new Map<number, { resolve: (reply: In | undefined) => void; timer: TimerHandle }>();
  #nextId = 0;
  #gone = false;
  readonly #onGone = new Set<() => void>();

  constructor(transport: Transport, options: ChannelOptions<In> = {}) {
    this.#transport = transport;
    this.#clock = options.clock ?? systemClock;
    this.#replies = new Set(options.replies ?? []);
    this.#holds = options.holdUntilHello ?? false;
    this.#hello = !this.#holds;
    transport.listen((message, handle) => this.#received(message, handle));
    transport.whenGone(() => this.#wentAway());
  }

  /** The other side said `hello` (always true on a side that does not hold its messages). */
  get hello(): boolean {
    return this.#hello;
  }

  /** A message can be written (or held until the `hello`). */
  get connected(): boolean {
    return !this.#gone && this.#transport.connected();
  }

  /** The other side is gone. */
  get gone(): boolean {
    return this.#gone;
  }

  /**
   * Sends (or holds until the `hello`). `written` is called once the message is written, or once it
   * could not be: only when this returns true. False: it cannot be sent (the channel is closed).
   */
  send(message: Out, handle?: object, written?: () => void): boolean {
    if (!this.connected) return false;
    if (!this.#hello) {
      this.#held.push({ message, handle, written });
      return true;
    }
    return this.#write(message, handle, written);
  }

  /**
   * Sends `build(id)` and resolves with the reply that carries `id`; with nothing after `timeoutMs`,
   * once the other side is gone, at `endRequests()`, or at once if it could not be sent.
   */
  request<R extends In = In>(build: (id: number) => Out, timeoutMs: number): Promise<R | undefined> {
    const id = ++this.#nextId;
    return new Promise<R | undefined>((resolve) => {
      const timer = this.#clock.after(timeoutMs, () => this.#answer(id, undefined));
      this.#pending.set(id, { resolve: resolve as (reply: In | undefined) => void, timer });
      if (!this.send(build(id))) this.#answer(id, undefined);
    });
  }

  /** Every request waiting for its reply gets nothing now (the other side will not answer). */
  endRequests(): void {
    for (const id of [...this.#pending.keys()]) this.#answer(id, undefined);
  }

  /** Calls `handler` with every incoming message of type `type`; returns what stops it. */
  on<T extends In['type']>(type: T, handler: (message: Of<In, T>, handle: object | undefined) => void): () => void {
    let set = this.#handlers.get(type);
    if (!set) this.#handlers.set(type, (set = new Set()));
    const added = handler as Handler;
    set.add(added);
    return () => void set.delete(added);
  }

  /** Calls `handler` with every incoming message (after the handlers of its type). */
  onAny(handler: (message: In, handle: object | undefined) => void): () => void {
    this.#any.add(handler);
    return () => void this.#any.delete(handler);
  }

  /** Calls `handler` once the other side is gone (at once if it is). */
  onGone(handler: () => void): () => void {
    if (this.#gone) {
      handler();
      return () => {};
    }
    this.#onGone.add(handler);
    return () => void this.#onGone.delete(handler);
  }

  /**
   * The sender's side of passing connections with an acknowledgement: each goes as the handle of
   * `message(id, meta)` and stays this process's until the other side answers `taken` (its copy
   * here closes) or `refused` (given to `back`); what it has not confirmed when it is gone goes to
   * `back` too.
   */
  handoff<T>(options: {
    message: (id: number, meta: T) => Out;
    taken: In['type'];
    refused: In['type'];
    back: (returned: Unconfirmed<T>) => void;
  }): ConnectionHandoff<T> {
    const handoff = new ConnectionHandoff<T>((id, meta, handle) => this.send(options.message(id, meta), handle), options.back);
    const idOf = (message: never) => (message as { handoff?: unknown }).handoff;
    this.on(options.taken, (message) => {
      const id = idOf(message as never);
      if (typeof id === 'number') handoff.confirmed(id);
    });
    this.on(options.refused, (message) => {
      const id = idOf(message as never);
      if (typeof id === 'number') handoff.refused(id);
    });
    this.onGone(() => handoff.close());
    return handoff;
  }

  /**
   * The receiver's side: the connection passed with a handoff is confirmed with `taken` and given to
   * `take` (which starts reading it) once that is written, or once it could not be.
   */
  receive(handle: object, taken: Out, take: (socket: Socket) => void): void {
    receiveHandoff(handle, (written) => void (this.send(taken, undefined, written) || written()), take);
  }

  /** The receiver's side: a connection it will not take, refused with `refused` (its copy here closes). */
  refuse(handle: object, refused: Out): void {
    this.send(refused);
    (handle as { close?: () => void }).close?.();
  }

  #write(message: unknown, handle: object | undefined, written: (() => void) | undefined): boolean {
    try {
      this.#transport.write(message, handle, written);
      return true;
    } catch {
      // The channel closed under us: its gone (or the process's exit) follows.
      return false;
    }
  }

  #received(message: unknown, handle: unknown): void {
    if (typeof message !== 'object' || message === null || typeof (message as { type?: unknown }).type !== 'string') return;
    const typed = message as In;
    const passed = (handle ?? undefined) as object | undefined;
    if (typed.type === 'hello' && this.#holds) {
      // Once: a second hello is not a new start.
      if (this.#hello) return;
      this.#hello = true;
      this.#dispatch(typed, passed);
      for (const held of this.#held.splice(0)) if (!this.#write(held.message, held.handle, held.written)) held.written?.();
      return;
    }
    if (this.#replies.has(typed.type)) {
      const id = (typed as { id?: unknown }).id;
      if (typeof id === 'number') this.#answer(id, typed);
    }
    this.#dispatch(typed, passed);
  }

  #dispatch(message: In, handle: object | undefined): void {
    for (const handler of [...(this.#handlers.get(message.type) ?? [])]) handler(message as never, handle);
    for (const handler of [...this.#any]) handler(message, handle);
  }

  #answer(id: number, reply: In | undefined): void {
    const pending = this.#pending.get(id);
    if (!pending) return;
    this.#pending.delete(id);
    pending.timer.cancel();
    pending.resolve(reply);
  }

  #wentAway(): void {
    if (this.#gone) return;
    this.#gone = true;
    for (const held of this.#held.splice(0)) held.written?.();
    this.endRequests();
    for (const handler of [...this.#onGone]) handler();
    this.#onGone.clear();
  }
}
