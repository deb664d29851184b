// The listening sockets of a process, in one place: bound here, adopted from the process that held
// them before (a hot restart, or a supervisor handing a worker its share), and handed over to the
// next. Every listening socket is a plain TCP one, whatever the listener's kind (plain, TLS,
// admin): TLS is done by the listener on each accepted connection. So a socket outlives the
// listener that first used it: a reload that replaces a listener on the same address (TLS switched
// on, a new role or name) passes the socket on, and not one connection is refused.
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { parseAddress } from '../config/schema.ts';

/** Why a listening socket could not be bound, in words, for the errors people meet. */
const BIND_FAILURES: Readonly<Record<string, string>> = {
  EADDRINUSE: 'the address is already in use (another process is listening on it)',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'the address is not one of this machine\'s',
  ENOTFOUND: 'the host name does not resolve',
  EAI_AGAIN: 'the host name could not be resolved now',
};

export function formatAddress(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** Who takes the connections a socket accepts (a listener). */
export type ConnectionTaker = (socket: Socket) => void;

/** A listening socket handed from one process to another, as described beside the handle. */
export interface HandedSocket {
  /** The listener that used it. */
  readonly name: string;
  /** The address as configured (its port may be 0). */
  readonly configured: string;
  /** host:port as bound. */
  readonly bound: string;
}

/**
 * One listening socket. The connections it accepts go to its taker; while it has none (a reload
 * between one listener and the next, a listener whose reload is not committed yet) they wait, and
 * are closed if the socket closes first.
 */
export class ListeningSocket {
  readonly configured: string;
  readonly server: Server;
  /** Who holds it (a token per lease, with its listener's name); it closes when the last lets go. */
  readonly #holders = new Map<object, string>();
  #taker: ConnectionTaker | undefined;
  #waiting: Socket[] = [];
  #closed = false;

  constructor(configured: string, server: Server) {
    this.configured = configured;
    this.server = server;
    server.on('connection', (socket: Socket) => this.#arrived(socket));
    // After the bind, an error here is a failed accept (EMFILE when descriptors run out: many
    // clients at once). The socket keeps listening; the error must not end the process (R1).
    server.on('error', () => {});
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** host:port as bound. */
  get bound(): string {
    const address = this.server.address() as AddressInfo | null;
    return address ? formatAddress(address.address, address.port) : this.configured;
  }

  address(): AddressInfo | undefined {
    return (this.server.address() as AddressInfo | null) ?? undefined;
  }

  /** From now on `taker` gets the connections (those that waited first). */
  serve(taker: ConnectionTaker): void {
    this.#taker = taker;
    for (const socket of this.#waiting.splice(0)) if (!socket.destroyed) taker(socket);
  }

  /** `taker` gets no more connections (if it was the one getting them). */
  unserve(taker: ConnectionTaker): void {
    if (this.#taker === taker) this.#taker = undefined;
  }

  hold(token: object, name: string): void {
    this.#holders.set(token, name);
  }

  /** The holder `token` lets go; returns true when that closed the socket (nobody holds it any more). */
  letGo(token: object): boolean {
    this.#holders.delete(token);
    if (this.#holders.size > 0 || this.#closed) return false;
    this.close();
    return true;
  }

  /** The listener that holds it (the first, when a reload passes it on). */
  get holder(): string {
    return this.#holders.values().next().value ?? '';
  }

  /** Stops accepting. Connections accepted before carry on with whoever took them; those still waiting close. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#taker = undefined;
    this.server.close();
    for (const socket of this.#waiting.splice(0)) socket.destroy();
  }

  /**
   * Stops accepting and returns the connections that waited for a taker, unread and open, for
   * another process to serve (a generation that gives up before it served: E7).
   */
  withdraw(): Socket[] {
    const waiting = this.#waiting.splice(0);
    this.close();
    return waiting;
  }

  /** A connection accepted on this socket by another process (the keeper, during a hot restart). */
  take(socket: Socket): void {
    if (this.#closed) socket.destroy();
    else this.#arrived(socket);
  }

  #arrived(socket: Socket): void {
    if (this.#taker) return this.#taker(socket);
    // Nothing reads it yet: a reset meanwhile must not become an uncaught 'error' (R1).
    socket.on('error', () => {});
    this.#waiting.push(socket);
  }
}

function listenError(listener: string, address: string, error: NodeJS.ErrnoException): Error {
  const why = BIND_FAILURES[error.code ?? ''] ?? error.message;
  return Object.assign(new Error(`listener "${listener}" cannot listen on ${address}: ${why}${error.code && why !== error.message ? ` (${error.code})` : ''}`, { cause: error }), {
    code: error.code,
  });
}

/** A listener's hold on its socket (in a worker: on the connections its supervisor passes it). */
export interface SocketLease {
  /** host:port as bound. */
  readonly bound: string;
  address(): AddressInfo | undefined;
  /** From now on `taker` gets the connections (those that waited first). */
  serve(taker: ConnectionTaker): void;
  unserve(taker: ConnectionTaker): void;
  /** The listener is done with it: the socket closes once nobody holds it. */
  letGo(): void;
}

/** Where listeners get their sockets. */
export interface SocketProvider {
  /** Rejects with an error that names the listener and the address when it cannot be had. */
  acquire(listener: string, configured: string): Promise<SocketLease>;
}

/** The listening sockets of a process. */
export class ListenerSockets implements SocketProvider {
  readonly #sockets = new Set<ListeningSocket>();
  /** Sockets handed to this process and not yet claimed by a listener, with what the giver said of them. */
  readonly #adopted = new Map<ListeningSocket, HandedSocket>();

  /**
   * The socket `listener` listens on: one it was handed (same listener and configured address), one
   * already open here on that address (a listener replaced on the same address), or a new one bound
   * now. Rejects with an error that names the listener and the address.
   */
  async acquire(listener: string, configured: string): Promise<SocketLease> {
    const socket = this.#find(listener, configured) ?? (await this.#bind(listener, configured));
    this.#adopted.delete(socket);
    const token = {};
    socket.hold(token, listener);
    return {
      get bound() {
        return socket.bound;
      },
      address: () => socket.address(),
      serve: (taker) => socket.serve(taker),
      unserve: (taker) => socket.unserve(taker),
      letGo: () => {
        if (socket.letGo(token)) this.#sockets.delete(socket);
      },
    };
  }

  /** A socket handed over by the process that had it (see `handOver()`): waits for its listener. */
  adopt(handed: HandedSocket, server: Server): ListeningSocket {
    pauseOnConnect(server);
    const socket = new ListeningSocket(handed.configured, server);
    this.#sockets.add(socket);
    this.#adopted.set(socket, handed);
    return socket;
  }

  /** Adopted sockets no listener claimed (the new config dropped them): closed. */
  closeUnclaimed(): void {
    for (const socket of this.#adopted.keys()) this.#close(socket);
    this.#adopted.clear();
  }

  /** Every open socket with its description, to hand to another process (which adopts them). */
  handOver(): { handed: HandedSocket; server: Server }[] {
    return [...this.#sockets]
      .filter((s) => !s.closed)
      .map((s) => ({ handed: { name: this.#adopted.get(s)?.name ?? s.holder, configured: s.configured, bound: s.bound }, server: s.server }));
  }

  /** The open socket bound at `bound` (host:port). */
  byBound(bound: string): ListeningSocket | undefined {
    for (const socket of this.#sockets) if (!socket.closed && socket.bound === bound) return socket;
    return undefined;
  }

  /** Stops accepting on every socket; returns the connections that waited, with where they arrived. */
  withdrawAll(): { bound: string; socket: Socket }[] {
    const out: { bound: string; socket: Socket }[] = [];
    for (const socket of this.#sockets) {
      const bound = socket.bound;
      for (const waiting of socket.withdraw()) out.push({ bound, socket: waiting });
    }
    this.#sockets.clear();
    this.#adopted.clear();
    return out;
  }

  /** Closes every socket (a start that failed). */
  closeAll(): void {
    for (const socket of this.#sockets) socket.close();
    this.#sockets.clear();
    this.#adopted.clear();
  }

  #find(listener: string, configured: string): ListeningSocket | undefined {
    for (const [socket, handed] of this.#adopted) if (handed.name === listener && handed.configured === configured) return socket;
    // A fixed port is one socket whoever asks; port 0 means a socket of one's own.
    if (parseAddress(configured)?.port === 0) return undefined;
    const wanted = normalise(configured);
    for (const socket of this.#sockets) if (!socket.closed && (normalise(socket.bound) === wanted || normalise(socket.configured) === wanted)) return socket;
    return undefined;
  }

  #bind(listener: string, configured: string): Promise<ListeningSocket> {
    const { host, port } = parseAddress(configured)!;
    const server = createServer({ noDelay: true, pauseOnConnect: true });
    return new Promise((resolve, reject) => {
      const failed = (error: NodeJS.ErrnoException) => reject(listenError(listener, configured, error));
      server.once('error', failed);
      server.listen({ host, port, backlog: 1024 }, () => {
        server.off('error', failed);
        const socket = new ListeningSocket(configured, server);
        this.#sockets.add(socket);
        resolve(socket);
      });
    });
  }

  #close(socket: ListeningSocket): void {
    socket.close();
    this.#sockets.delete(socket);
  }
}

/**
 * Connections are accepted paused: nothing is read from them until the listener that serves them
 * resumes them. So one that is passed to another process (a worker, or back to the generation
 * serving when a new one gives up) arrives there with every byte its client sent.
 */
function pauseOnConnect(server: Server): void {
  (server as Server & { pauseOnConnect: boolean }).pauseOnConnect = true;
}

function normalise(address: string): string {
  const parsed = parseAddress(address);
  return parsed ? formatAddress(parsed.host, parsed.port) : address;
}
