// The supervisor's side of the proxy sockets with `workers: N`: the supervisor holds every
// listening socket (in its `ListenerSockets`, where a hot restart can hand them over), accepts the
// connections and passes each to one of the workers that serve that listener, in turn (round
// robin, as node's cluster does), over IPC. A worker asks for a listener's socket (`acquire`),
// starts and stops taking its connections (`serve`, `unserve`) and lets go of it; the socket
// closes when no worker holds it, and while none serves it the connections wait.
//
// A connection stays the supervisor's until the worker confirms it (process-channel/handoff.ts): one the worker
// refuses, or never confirms before it dies, comes back here and goes to another worker that serves
// the socket. While none does, it waits for one at most `RETURNED_WAIT_MS`, then it is closed.
import type { Socket } from 'node:net';
import type { SocketLease, SocketProvider } from '../server/sockets.ts';

/** A worker's hold on a listener's socket, as passed along with each connection. */
export interface HeldLease {
  /** The worker's own number for its lease. */
  readonly id: number;
  /** A connection passed for this lease that the worker did not take: to another worker. */
  returned(socket: Socket): void;
}

/** A worker, as the dispatch sees it: something to pass a connection to. */
export interface DispatchTarget {
  /** Passes the connection for the worker's lease; false when the worker cannot be sent it (gone). */
  pass(socket: Socket, lease: HeldLease): boolean;
  /** Connections passed and not yet confirmed. */
  readonly backlog: number;
}

interface WorkerLease extends HeldLease {
  readonly target: DispatchTarget;
  serving: boolean;
}

/** One listener's socket, shared by the workers that hold it. */
interface Share {
  readonly lease: SocketLease;
  /** What the socket calls with each connection: passes it to a worker. */
  readonly take: (socket: Socket) => void;
  readonly holders: WorkerLease[];
  next: number;
  serving: boolean;
  closed: boolean;
  /** Connections no worker could take (none served the socket), with when they are closed. */
  readonly waiting: { socket: Socket; until: number }[];
}

/**
 * How long a connection a worker gave back (or died without taking) waits for another worker to
 * serve its socket before it is closed: longer than a dead worker's restart takes (its first
 * restart comes 0.5 s after its death, and a start takes about a second).
 */
export const RETURNED_WAIT_MS = 10_000;
/**
 * A worker with this many connections passed and not confirmed is skipped while another has
 * fewer: one that has stopped reading its channel (stuck, or dying) is not given every other one.
 */
const MAX_BACKLOG = 64;

export class ConnectionDispatch {
  readonly #sockets: SocketProvider;
  readonly #shares = new Map<string, Promise<Share>>();
  readonly #leases = new Map<DispatchTarget, Map<number, { lease: WorkerLease; key: string }>>();
  readonly #now: () => number;
  /** The shares with connections waiting for a worker. */
  readonly #withWaiting = new Set<Share>();
  /** Closes returned connections that waited too long; runs only while some wait. */
  #sweep: NodeJS.Timeout | undefined;

  constructor(sockets: SocketProvider, now: () => number = Date.now) {
    this.#sockets = sockets;
    this.#now = now;
  }

  /** A worker's listener wants the socket: resolves with where it listens (host:port as bound). */
  async acquire(target: DispatchTarget, id: number, listener: string, configured: string): Promise<string> {
    const key = `${listener}\0${configured}`;
    let share = this.#shares.get(key);
    if (!share) {
      share = this.#sockets.acquire(listener, configured).then((lease) => {
        const made: Share = { lease, take: (socket) => this.#pass(made, socket, undefined), holders: [], next: 0, serving: false, closed: false, waiting: [] };
        return made;
      });
      this.#shares.set(key, share);
      share.catch(() => this.#shares.delete(key));
    }
    const ready = await share;
    const lease: WorkerLease = { target, id, serving: false, returned: (socket) => this.#pass(ready, socket, target) };
    ready.holders.push(lease);
    let byId = this.#leases.get(target);
    if (!byId) this.#leases.set(target, (byId = new Map()));
    byId.set(id, { lease, key });
    return ready.lease.bound;
  }

  serve(target: DispatchTarget, id: number, serving: boolean): void {
    const found = this.#leases.get(target)?.get(id);
    if (!found) return;
    found.lease.serving = serving;
    void this.#shares.get(found.key)?.then((share) => this.#update(share));
  }

  /** The worker's listener is done with the socket. */
  letGo(target: DispatchTarget, id: number): void {
    const byId = this.#leases.get(target);
    const found = byId?.get(id);
    if (!found) return;
    byId!.delete(id);
    const pending = this.#shares.get(found.key);
    void pending?.then((share) => {
      const at = share.holders.indexOf(found.lease);
      if (at >= 0) share.holders.splice(at, 1);
      if (share.holders.length > 0) return this.#update(share);
      if (this.#shares.get(found.key) === pending) this.#shares.delete(found.key);
      share.closed = true;
      this.#withWaiting.delete(share);
      for (const { socket } of share.waiting.splice(0)) socket.destroy();
      share.lease.unserve(share.take);
      share.lease.letGo();
    });
  }

  /** A worker exited: it holds nothing any more. */
  gone(target: DispatchTarget): void {
    for (const id of [...(this.#leases.get(target)?.keys() ?? [])]) this.letGo(target, id);
    this.#leases.delete(target);
  }

  /** Connections given back and waiting for a worker, over every socket. */
  get waiting(): number {
    let count = 0;
    for (const share of this.#withWaiting) count += share.waiting.length;
    return count;
  }

  /**
   * The socket is served while at least one worker serves it; otherwise its connections wait. A
   * worker that starts serving also gets what waited here.
   */
  #update(share: Share): void {
    const serving = share.holders.some((h) => h.serving);
    if (serving !== share.serving) {
      share.serving = serving;
      if (serving) share.lease.serve(share.take);
      else share.lease.unserve(share.take);
    }
    if (!serving || share.waiting.length === 0) return;
    this.#withWaiting.delete(share);
    for (const { socket, until } of share.waiting.splice(0)) this.#pass(share, socket, undefined, until);
  }

  /**
   * Passes the connection to the next worker that serves the socket (never `except`, which gave it
   * back), skipping one with a long backlog while another has less. None can take it: it waits for
   * one until `until` (RETURNED_WAIT_MS from its first wait), and closes with the socket.
   */
  #pass(share: Share, socket: Socket, except: DispatchTarget | undefined, until?: number): void {
    if (share.closed || socket.destroyed) return void socket.destroy();
    const serving = share.holders.filter((h) => h.serving && h.target !== except);
    const start = share.next++;
    // First those with a short backlog; then, if all are long, any.
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < serving.length; i++) {
        const lease = serving[(start + i) % serving.length]!;
        if (round === 0 && lease.target.backlog >= MAX_BACKLOG) continue;
        if (lease.target.pass(socket, lease)) return;
      }
    }
    share.waiting.push({ socket, until: until ?? this.#now() + RETURNED_WAIT_MS });
    this.#withWaiting.add(share);
    this.#sweep ??= setInterval(() => this.#closeStale(), 1000).unref();
  }

  /** Closes the returned connections that waited RETURNED_WAIT_MS for a worker. */
  #closeStale(): void {
    const now = this.#now();
    for (const share of this.#withWaiting) {
      const stale = share.waiting.filter((w) => w.until <= now);
      if (stale.length > 0) share.waiting.splice(0, share.waiting.length, ...share.waiting.filter((w) => w.until > now));
      for (const { socket } of stale) socket.destroy();
      if (share.waiting.length === 0) this.#withWaiting.delete(share);
    }
    if (this.#withWaiting.size === 0 && this.#sweep) {
      clearInterval(this.#sweep);
      this.#sweep = undefined;
    }
  }
}
