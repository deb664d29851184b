// An accepted connection handed to another process over IPC, acknowledged: it stays the sender's
// until the receiver confirms it. Node passes a handle and forgets it (or closes it once the other
// runtime has received it), so a connection handed to a process that dies before it adopts the
// connection (still in the channel, or queued behind another handle) was neither served nor closed:
// its client waited for ever, and the sender kept a descriptor. Here the sender keeps its own copy
// of each connection, unread, until the receiver says it took it (then the copy closes: the
// receiver's stays open) or refused it; whatever the receiver never confirmed when its channel
// closes is given back, whole and unread, for another receiver.
//
// The receiver confirms before it reads a byte (`receiveHandoff`), so a connection given back was
// never read. One the receiver took and then died with is closed by the kernel with it: its
// request is lost with the process, its client sees the connection close.
//
// Confirmations come in the order the connections were sent (the receiver confirms each as it
// arrives, on one ordered channel), so one that skips an id means the connections before it never
// arrived (node drops a message whose handle could not be received): they are given back too.
import { Socket } from 'node:net';
import { adoptHandle, handleOf } from '../server/handles.ts';

/** A connection handed over and not yet confirmed, with what the sender passed along with it. */
export interface Unconfirmed<T> {
  readonly socket: Socket;
  readonly meta: T;
}

/** Sends one connection's handle with its id; false when it cannot be sent (the channel is closed). */
export type HandoffSend<T> = (id: number, meta: T, handle: object) => boolean;

/** A paused socket reports nothing, but a reset must not become an uncaught 'error'. */
function ignore(): void {}

export class ConnectionHandoff<T> {
  readonly #send: HandoffSend<T>;
  /** In the order sent (a Map keeps insertion order): the first is the oldest. */
  readonly #unconfirmed = new Map<number, Unconfirmed<T>>();
  readonly #back: (returned: Unconfirmed<T>) => void;
  #next = 0;
  #closed = false;

  /** `back` gets every connection the receiver did not take (refused, never arrived, or it is gone). */
  constructor(send: HandoffSend<T>, back: (returned: Unconfirmed<T>) => void) {
    this.#send = send;
    this.#back = back;
  }

  /** Connections handed over and not yet confirmed (the receiver's backlog). */
  get backlog(): number {
    return this.#unconfirmed.size;
  }

  /** Hands the connection over, keeping this process's copy; false (nothing kept) when it cannot be sent. */
  pass(socket: Socket, meta: T): boolean {
    const handle = handleOf(socket);
    if (this.#closed || !handle) return false;
    const id = ++this.#next;
    this.#unconfirmed.set(id, { socket, meta });
    socket.on('error', ignore);
    if (this.#send(id, meta, handle)) return true;
    this.#unconfirmed.delete(id);
    return false;
  }

  /** The receiver took connection `id`: this process's copy closes (the receiver's stays open). */
  confirmed(id: number): void {
    const taken = this.#settle(id);
    taken?.socket.destroy();
  }

  /** The receiver would not take connection `id` (it no longer serves that socket): given back. */
  refused(id: number): void {
    const refused = this.#settle(id);
    if (refused) this.#back(refused);
  }

  /**
   * The receiver's channel closed: nothing more will be confirmed, or sent. Everything it did not
   * confirm is given back (call it once every message the receiver sent has been read: node emits
   * a channel's 'disconnect' after its last message).
   */
  close(): void {
    this.#closed = true;
    const back = [...this.#unconfirmed.values()];
    this.#unconfirmed.clear();
    for (const returned of back) this.#back(returned);
  }

  /** Takes `id` out; earlier ids still unconfirmed never reached the receiver, and are given back. */
  #settle(id: number): Unconfirmed<T> | undefined {
    const settled = this.#unconfirmed.get(id);
    if (!settled) return undefined;
    for (const [earlier, lost] of this.#unconfirmed) {
      if (earlier >= id) break;
      this.#unconfirmed.delete(earlier);
      this.#back(lost);
    }
    this.#unconfirmed.delete(id);
    return settled;
  }
}

/**
 * The receiver's side: wraps the handle, paused, confirms it with `confirm`, and gives the socket to
 * `take` (which starts reading it) only once the confirmation has been written: a receiver that
 * dies before that has read nothing, and the sender hands the connection to another.
 */
export function receiveHandoff(handle: object, confirm: (written: () => void) => void, take: (socket: Socket) => void): void {
  // (A socket already wrapped came from a sender that passes sockets, not bare handles.)
  const socket = handle instanceof Socket ? handle : adoptHandle(handle);
  confirm(() => take(socket));
}
