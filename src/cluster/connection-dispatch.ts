// The supervisor's side of the proxy sockets with `workers: N`: the supervisor holds every
// listening socket (in its `ListenerSockets`, where a hot restart can hand them over), accepts the
// connections and passes each to one of the workers that serve that listener, in turn (round
// robin, as node's cluster does), over IPC. A worker asks for a listener's socket (`acquire`),
// starts and stops taking its connections (`serve`, `unserve`) and lets go of it; the socket
// closes when no worker holds it, and while none serves it the connections wait.
import type { Socket } from 'node:net';
import type { SocketLease, SocketProvider } from '../server/sockets.ts';

/** A worker, as the dispatch sees it: something to pass a connection to. */
export interface DispatchTarget {
  /** Passes the connection for the worker's lease `lease`; false when the worker is gone. */
  pass(lease: number, socket: Socket): boolean;
}

interface WorkerLease {
  readonly target: DispatchTarget;
  readonly id: number;
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
}

export class ConnectionDispatch {
  readonly #sockets: SocketProvider;
  readonly #shares = new Map<string, Promise<Share>>();
  readonly #leases = new Map<DispatchTarget, Map<number, { lease: WorkerLease; key: string }>>();

  constructor(sockets: SocketProvider) {
    this.#sockets = sockets;
  }

  /** A worker's listener wants the socket: resolves with where it listens (host:port as bound). */
  async acquire(target: DispatchTarget, id: number, listener: string, configured: string): Promise<string> {
    const key = `${listener}\0${configured}`;
    let share = this.#shares.get(key);
    if (!share) {
      share = this.#sockets.acquire(listener, configured).then((lease) => {
        const made: Share = { lease, take: (socket) => this.#pass(made, socket), holders: [], next: 0, serving: false };
        return made;
      });
      this.#shares.set(key, share);
      share.catch(() => this.#shares.delete(key));
    }
    const ready = await share;
    const lease: WorkerLease = { target, id, serving: false };
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
      share.lease.unserve(share.take);
      share.lease.letGo();
    });
  }

  /** A worker exited: it holds nothing any more. */
  gone(target: DispatchTarget): void {
    for (const id of [...(this.#leases.get(target)?.keys() ?? [])]) this.letGo(target, id);
    this.#leases.delete(target);
  }

  /** The socket is served while at least one worker serves it; otherwise its connections wait. */
  #update(share: Share): void {
    const serving = share.holders.some((h) => h.serving);
    if (serving === share.serving) return;
    share.serving = serving;
    if (serving) share.lease.serve(share.take);
    else share.lease.unserve(share.take);
  }

  #pass(share: Share, socket: Socket): void {
    const serving = share.holders.filter((h) => h.serving);
    for (let tries = 0; tries < serving.length; tries++) {
      const lease = serving[share.next++ % serving.length]!;
      if (lease.target.pass(lease.id, socket)) return;
    }
    socket.destroy();
  }
}
