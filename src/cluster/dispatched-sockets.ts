// A worker's side of the proxy sockets with `workers: N`: its listeners hold sockets that live in
// the supervisor (see connection-dispatch.ts), which passes it the connections they accept. To a
// listener this is a socket like any other (`SocketProvider`).
import type { AddressInfo } from 'node:net';
import { parseAddress } from '../config/schema.ts';
import type { ConnectionTaker, SocketLease, SocketProvider } from '../server/sockets.ts';
import type { ProcessChannel } from '../process-channel/channel.ts';
import type { FromWorker, ToWorker } from './messages.ts';

interface Lease {
  taker: ConnectionTaker | undefined;
  /** The last listener that took connections: one passed just after it stopped is still served (it was accepted). */
  last: ConnectionTaker | undefined;
  gone: boolean;
}

export class DispatchedSockets implements SocketProvider {
  readonly #channel: ProcessChannel<FromWorker, ToWorker>;
  readonly #send: (message: FromWorker) => void;
  readonly #leases = new Map<number, Lease>();
  readonly #pending = new Map<number, { resolve: (bound: string) => void; reject: (error: Error) => void }>();
  #next = 1;

  constructor(channel: ProcessChannel<FromWorker, ToWorker>) {
    this.#channel = channel;
    this.#send = (message) => void channel.send(message);
  }

  acquire(listener: string, configured: string): Promise<SocketLease> {
    const id = this.#next++;
    const send = this.#send;
    const leases = this.#leases;
    return new Promise<string>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      send({ type: 'socket_acquire', lease: id, listener, configured });
    }).then((bound) => {
      const lease: Lease = { taker: undefined, last: undefined, gone: false };
      leases.set(id, lease);
      const parsed = parseAddress(bound);
      const address: AddressInfo | undefined = parsed ? { address: parsed.host, port: parsed.port, family: parsed.host.includes(':') ? 'IPv6' : 'IPv4' } : undefined;
      return {
        bound,
        address: () => address,
        serve: (taker) => {
          lease.taker = lease.last = taker;
          send({ type: 'socket_serve', lease: id, serving: true });
        },
        unserve: (taker) => {
          if (lease.taker !== taker) return;
          lease.taker = undefined;
          send({ type: 'socket_serve', lease: id, serving: false });
        },
        letGo: () => {
          if (lease.gone) return;
          lease.gone = true;
          lease.taker = undefined;
          // Kept: a connection the supervisor passed before it heard this was accepted, and is served.
          send({ type: 'socket_let_go', lease: id });
        },
      };
    });
  }

  /** The supervisor answered an `acquire`. */
  acquired(lease: number, answer: { bound: string } | { error: string; code?: string | undefined }): void {
    const pending = this.#pending.get(lease);
    this.#pending.delete(lease);
    if (!pending) return;
    if ('bound' in answer) pending.resolve(answer.bound);
    else pending.reject(Object.assign(new Error(answer.error), { code: answer.code }));
  }

  /**
   * The supervisor passed a connection for `lease` (its bare handle): it is taken (confirmed before
   * a byte of it is read), or refused when no listener here holds that socket any more (the
   * supervisor passes it to another worker).
   */
  connection(lease: number, handoff: number, handle: object | undefined): void {
    if (!handle) return;
    const held = this.#leases.get(lease);
    const taker = held?.taker ?? held?.last;
    // Refused: this process's copy of the descriptor closes; the supervisor's keeps the connection open.
    if (!taker) return this.#channel.refuse(handle, { type: 'connection_refused', handoff });
    this.#channel.receive(handle, { type: 'connection_taken', handoff }, taker);
  }
}
