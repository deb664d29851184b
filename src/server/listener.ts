// A listener owns its listening socket (net.Server) and hands accepted connections to an HTTP/1.1
// protocol server that never listens itself. Closing the listening socket therefore stops
// accepting without touching accepted connections (node's http.Server.close() would destroy fresh
// ones, which L6 forbids), and the protocol server's header/request timeouts keep running after
// the listener has closed.
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { Server as HttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { DownstreamConfig, ListenerConfig } from '../config/schema.ts';
import { parseAddress } from '../config/schema.ts';
import type { Lifecycle } from '../lifecycle/lifecycle.ts';
import { sendClientError } from './client-error.ts';

export type RequestHandler = (listener: Listener, req: IncomingMessage, res: ServerResponse) => void;
export type UpgradeHandler = (listener: Listener, req: IncomingMessage, socket: Duplex, head: Buffer) => void;

export class Listener {
  readonly name: string;
  readonly role: ListenerConfig['role'];
  readonly configuredAddress: string;
  readonly #net: NetServer;
  readonly #http: HttpServer;
  readonly #lifecycle: Lifecycle;
  readonly #freshTimeoutMs: number;
  #accepting = false;

  constructor(config: ListenerConfig, downstream: DownstreamConfig, lifecycle: Lifecycle, onRequest: RequestHandler, onUpgrade?: UpgradeHandler) {
    this.name = config.name;
    this.role = config.role;
    this.configuredAddress = config.address;
    this.#lifecycle = lifecycle;
    this.#freshTimeoutMs = downstream.headers_timeout_secs * 1000;
    this.#http = new HttpServer({
      keepAliveTimeout: downstream.idle_timeout_secs * 1000,
      headersTimeout: downstream.headers_timeout_secs * 1000,
      requestTimeout: downstream.request_timeout_secs * 1000,
      connectionsCheckingInterval: 1000,
      noDelay: true,
    });
    this.#http.on('request', (req: IncomingMessage, res: ServerResponse) => onRequest(this, req, res));
    this.#http.on('clientError', sendClientError);
    if (onUpgrade) this.#http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => onUpgrade(this, req, socket, head));
    // Starts the protocol server's connection tracking (headers/request timeouts) without a socket.
    this.#http.emit('listening');
    this.#net = createNetServer({ noDelay: true, pauseOnConnect: false }, (socket) => this.#accept(socket));
  }

  /** The protocol server, for upgrade handlers to attach to. */
  get http(): HttpServer {
    return this.#http;
  }

  get accepting(): boolean {
    return this.#accepting;
  }

  listen(): Promise<AddressInfo> {
    const { host, port } = parseAddress(this.configuredAddress)!;
    return new Promise((resolve, reject) => {
      this.#net.once('error', reject);
      this.#net.listen({ host, port, backlog: 1024 }, () => {
        this.#net.off('error', reject);
        this.#accepting = true;
        resolve(this.#net.address() as AddressInfo);
      });
    });
  }

  /** Stops accepting; accepted connections carry on. Idempotent. */
  stopAccepting(): void {
    if (!this.#accepting) return;
    this.#accepting = false;
    this.#net.close();
  }

  #accept(socket: Socket): void {
    this.#lifecycle.connectionAccepted(socket, this.name);
    // Slowloris guard for connections that never send a byte; cleared by their first request.
    if (this.#freshTimeoutMs > 0) socket.setTimeout(this.#freshTimeoutMs);
    this.#http.emit('connection', socket);
  }
}
