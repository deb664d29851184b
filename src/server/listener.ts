// A listener takes the connections of a listening socket that it holds but does not own (the
// process's `ListenerSockets`, or in a worker its supervisor, own it: see sockets.ts), does TLS on
// them when configured (a tls.Server that never listens), and hands each to protocol servers that
// never listen either: HTTP/1.1 (http.Server) or HTTP/2 (http2.Server), chosen by ALPN on TLS and
// by the first bytes in cleartext (h2c with prior knowledge). Letting go of the socket therefore
// stops accepting without touching accepted connections (node's http.Server.close() would destroy
// fresh ones, which L6 forbids), and the protocol servers' header/request timeouts keep running
// after the listener has stopped.
//
// The protocol servers and their settings form a generation. A config reload that changes the
// listener's settings (E6) starts a new generation on the same listening socket, so not one
// connection is refused, while the old generation's connections are retired.
import type { AddressInfo, Socket } from 'node:net';
import { createServer as createTlsServer, type Server as TlsServer, type TLSSocket } from 'node:tls';
import { Server as HttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttp2Server, type Http2Server, type Http2ServerRequest, type Http2ServerResponse, type ServerHttp2Session } from 'node:http2';
import { isDeepStrictEqual } from 'node:util';
import type { Duplex } from 'node:stream';
import type { DownstreamConfig, ListenerConfig, Protocol, TlsConfig } from '../config/schema.ts';
import { listenerProtocols } from '../config/schema.ts';
import type { ListenerLifecycle } from '../lifecycle/contracts.ts';
import { Http1Protocol, TlsHandshake, type TrackedConnection } from '../lifecycle/connections.ts';
import { sendClientError } from './client-error.ts';
import { Http2Sessions } from './http2.ts';
import { isHttp2Request } from './context.ts';
import { loadTlsMaterial, watchTlsFiles, type TlsMaterial } from './tls.ts';
import type { ConnectionTaker, SocketLease, SocketProvider } from './sockets.ts';

export type RequestHandler = (listener: Listener, req: IncomingMessage, res: ServerResponse) => void;
export type UpgradeHandler = (listener: Listener, req: IncomingMessage, socket: Duplex, head: Buffer) => void;

export interface ListenerLog {
  info(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

export interface ListenerHandlers {
  onRequest: RequestHandler;
  onUpgrade?: UpgradeHandler | undefined;
}

function isWebSocketUpgrade(req: IncomingMessage): boolean {
  const upgrade = req.headers.upgrade;
  return upgrade !== undefined && /(?:^|,)\s*websocket\s*(?:,|$)/i.test(upgrade);
}

/** The HTTP/2 connection preface (RFC 9113 §3.4) starts with these bytes. */
const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n');

/** The protocol servers of one configuration of a listener. */
class Generation {
  readonly config: ListenerConfig;
  readonly downstream: DownstreamConfig;
  readonly protocols: readonly Protocol[];
  readonly http1: HttpServer | undefined;
  readonly http2: Http2Server | undefined;
  readonly sessions: Http2Sessions;
  pendingConnection: TrackedConnection | undefined;

  constructor(listener: Listener, config: ListenerConfig, downstream: DownstreamConfig, handlers: ListenerHandlers, sessionConnections: WeakMap<ServerHttp2Session, TrackedConnection>) {
    this.config = config;
    this.downstream = downstream;
    this.protocols = listenerProtocols(config);
    this.sessions = new Http2Sessions(sessionConnections);
    if (this.protocols.includes('http1')) {
      const http1 = new HttpServer({
        keepAliveTimeout: Math.round(downstream.idle_timeout_secs * 1000),
        headersTimeout: Math.round(downstream.headers_timeout_secs * 1000),
        requestTimeout: Math.round(downstream.request_timeout_secs * 1000),
        connectionsCheckingInterval: 1000,
        noDelay: true,
        // Answered in requests.ts in the API's error shape (Node's own 400 has no body).
        requireHostHeader: false,
        // Only WebSocket upgrades leave HTTP: any other `Upgrade` (h2c, an unknown protocol) is
        // served as the request it also is (RFC 9110 §7.8 lets a server ignore the header).
        shouldUpgradeCallback: (req: IncomingMessage) => handlers.onUpgrade !== undefined && isWebSocketUpgrade(req),
      });
      http1.on('request', (req: IncomingMessage, res: ServerResponse) => handlers.onRequest(listener, req, res));
      http1.on('clientError', sendClientError);
      // An `Expect` other than 100-continue is served like any request (and not forwarded),
      // instead of node's bare 417.
      http1.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => handlers.onRequest(listener, req, res));
      const onUpgrade = handlers.onUpgrade;
      if (onUpgrade) http1.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => onUpgrade(listener, req, socket, head));
      // Starts the protocol server's connection tracking (headers/request timeouts) without a socket.
      http1.emit('listening');
      this.http1 = http1;
    }
    if (this.protocols.includes('h2')) {
      const http2 = createHttp2Server({ maxSessionMemory: 64 });
      http2.on('session', (session: ServerHttp2Session) => {
        const connection = this.pendingConnection;
        this.pendingConnection = undefined;
        // A session accepted during the drain is retired at its first response (respond.ts), as an
        // HTTP/1.1 connection is: a GOAWAY now would race the client's first request.
        if (connection) this.sessions.add(session, connection);
      });
      http2.on('request', (req: Http2ServerRequest, res: Http2ServerResponse) =>
        handlers.onRequest(listener, req as unknown as IncomingMessage, res as unknown as ServerResponse),
      );
      this.http2 = http2;
    }
  }

  /** ALPN protocol ids in the server's order of preference: HTTP/2 first when both are served. */
  alpn(): string[] {
    return [...this.protocols].sort((a) => (a === 'h2' ? -1 : 1)).map((p) => (p === 'h2' ? 'h2' : 'http/1.1'));
  }
}

export class Listener {
  readonly name: string;
  readonly role: ListenerConfig['role'];
  readonly configuredAddress: string;
  readonly tls: boolean;
  /** Does the TLS handshakes of a TLS listener (it never listens: connections are emitted to it). */
  readonly #tls: TlsServer | undefined;
  readonly #sockets: SocketProvider;
  #lease: SocketLease | undefined;
  /** What the socket calls with each accepted connection. */
  readonly #take: ConnectionTaker;
  readonly #lifecycle: ListenerLifecycle;
  readonly #log: ListenerLog;
  readonly #handlers: ListenerHandlers;
  /** The generation each connection was accepted by. */
  readonly #generationOf = new WeakMap<TrackedConnection, Generation>();
  /** Each HTTP/2 session's connection, whichever generation accepted it. */
  readonly #sessionConnections = new WeakMap<ServerHttp2Session, TrackedConnection>();
  #generation: Generation;
  #unwatch: (() => void) | undefined;
  #accepting = false;
  readonly #unregisterRetire: () => void;
  #discarded = false;

  constructor(config: ListenerConfig, downstream: DownstreamConfig, lifecycle: ListenerLifecycle, log: ListenerLog, handlers: ListenerHandlers, sockets: SocketProvider) {
    this.name = config.name;
    this.role = config.role;
    this.configuredAddress = config.address;
    this.tls = config.tls !== undefined;
    this.#lifecycle = lifecycle;
    this.#log = log;
    this.#handlers = handlers;
    this.#sockets = sockets;
    this.#generation = new Generation(this, config, downstream, handlers, this.#sessionConnections);
    if (config.tls) {
      const material = this.#loadTls(config.tls);
      const tlsServer = createTlsServer({
        ...material.options,
        // Asked per handshake, so a reload that changes the protocols applies to new connections.
        ALPNCallback: ({ protocols }) => this.#generation.alpn().find((p) => protocols.includes(p)),
        requestCert: config.tls.client_ca_file !== undefined,
        rejectUnauthorized: config.tls.client_ca_file !== undefined,
        handshakeTimeout: Math.round(config.tls.handshake_timeout_secs * 1000),
      });
      tlsServer.on('connection', (socket: Socket) => {
        const connection = lifecycle.connections.admit(socket, this.name);
        if (connection) connection.protocol = new TlsHandshake(connection);
      });
      tlsServer.on('secureConnection', (socket: TLSSocket) => this.#secured(socket));
      tlsServer.on('tlsClientError', (error: NodeJS.ErrnoException, socket: TLSSocket) => {
        const connection = lifecycle.connections.get(socket) ?? lifecycle.connections.get((socket as unknown as { _parent?: Socket })._parent!);
        connection?.noteCloseReason(error.code === 'ERR_TLS_HANDSHAKE_TIMEOUT' ? 'tls_handshake_timeout' : 'tls_handshake_failed');
        socket.destroy();
      });
      this.#tls = tlsServer;
    } else {
      this.#tls = undefined;
    }
    this.#take = (socket) => {
      if (this.#discarded) return void socket.destroy();
      if (this.#tls) this.#tls.emit('connection', socket);
      else this.#accepted(socket);
    };
    // Registered last: a constructor that throws (bad TLS material) leaves nothing registered.
    this.#unregisterRetire = lifecycle.onRetire(this.name, () => this.#generation.sessions.retireAll());
  }

  get accepting(): boolean {
    return this.#accepting;
  }

  get protocols(): readonly Protocol[] {
    return this.#generation.protocols;
  }

  /** The tracked connection a request arrived on (HTTP/1.1: its socket; HTTP/2: its session). */
  connectionOf(req: IncomingMessage): TrackedConnection | undefined {
    if (!isHttp2Request(req)) return this.#lifecycle.connections.get(req.socket);
    const session = (req as unknown as Http2ServerRequest).stream.session as ServerHttp2Session;
    return this.#sessionConnections.get(session);
  }

  /**
   * Takes its listening socket (one it was handed, one another listener on the same address holds,
   * or a new one) and serves it. With `hold` (a reload's prepare step, E6a) the connections it
   * accepts wait until `release()`. Rejects with an error that names the listener and address.
   */
  async listen(options: { hold?: boolean } = {}): Promise<AddressInfo> {
    const lease = await this.#sockets.acquire(this.name, this.configuredAddress);
    this.#lease = lease;
    this.#accepting = true;
    if (!options.hold) lease.serve(this.#take);
    this.#watchCertificates();
    return lease.address()!;
  }

  /** Where the socket is bound (the port chosen when 0 was asked); undefined when not listening. */
  address(): AddressInfo | undefined {
    return this.#accepting ? this.#lease?.address() : undefined;
  }

  /** host:port as bound (as configured when not listening). */
  get boundAddress(): string {
    return this.#accepting && this.#lease ? this.#lease.bound : this.configuredAddress;
  }

  /** E6a: the reload is committed: the connections held since `listen({ hold: true })` are served. */
  release(): void {
    if (this.#accepting) this.#lease?.serve(this.#take);
  }

  /** E6a: the reload is abandoned: the socket is let go (closed unless another listener holds it) and what it accepted meanwhile is closed. */
  discard(): void {
    this.#discarded = true;
    this.stopAccepting();
    this.#unregisterRetire();
  }

  /** Stops accepting; accepted connections carry on. Idempotent. */
  stopAccepting(): void {
    this.#unwatch?.();
    this.#unwatch = undefined;
    if (!this.#accepting) return;
    this.#accepting = false;
    this.#lease?.unserve(this.#take);
    this.#lease?.letGo();
  }

  /**
   * E6/E6a: prepares taking the new settings on the same listening socket, changing nothing yet:
   * the TLS certificate and key the new settings name are loaded now (a pair that cannot be loaded
   * throws, and the whole reload is refused). Returns the step that applies them, which cannot
   * fail; or undefined when the socket cannot be kept (another address, TLS switched on or off,
   * another role): the caller then replaces the listener.
   */
  prepareReconfigure(config: ListenerConfig, downstream: DownstreamConfig): ((trigger: string) => void) | undefined {
    if (config.address !== this.configuredAddress || (config.tls === undefined) !== !this.tls || config.role !== this.role) return undefined;
    const material = config.tls ? this.#loadTls(config.tls) : undefined;
    return (trigger) => {
      if (config.tls && material) {
        const server = this.#tls as TlsServer & { requestCert: boolean; rejectUnauthorized: boolean };
        server.setSecureContext(material.options);
        server.requestCert = server.rejectUnauthorized = config.tls.client_ca_file !== undefined;
        this.#log.info({ event: 'tls_reloaded', listener: this.name, trigger }, 'TLS certificate reloaded');
      }
      this.#reconfigure(config, downstream);
    };
  }

  #reconfigure(config: ListenerConfig, downstream: DownstreamConfig): void {
    const current = this.#generation;
    if (isDeepStrictEqual(config, current.config) && isDeepStrictEqual(downstream, current.downstream)) return;
    this.#generation = new Generation(this, config, downstream, this.#handlers, this.#sessionConnections);
    this.#log.info({ event: 'listener_reconfigured', listener: this.name }, 'listener reconfigured; connections of the old settings are retired');
    this.retireConnections((c) => this.#generationOf.get(c) !== this.#generation, false);
    this.#unwatch?.();
    this.#watchCertificates();
  }

  /** Loads the TLS material, with the listener's name in the error. */
  #loadTls(tls: TlsConfig): TlsMaterial {
    try {
      return loadTlsMaterial(tls);
    } catch (error) {
      throw new Error(`listener "${this.name}": ${(error as Error).message}`, { cause: error });
    }
  }

  /**
   * Tells this listener's connections (those `which` selects) to go (E6). Idle HTTP/1.1 ones are
   * closed after the drain timeout only when the listener itself is going away (`closeIdle`);
   * otherwise their next response closes them, which no client can race.
   */
  retireConnections(which: (connection: TrackedConnection) => boolean = () => true, closeIdle = true): void {
    const timeoutMs = this.#generation.downstream.drain_timeout_secs * 1000;
    for (const connection of this.#lifecycle.connections.of(this.name)) {
      if (which(connection)) this.#lifecycle.retireConnection(connection, timeoutMs, 'listener_changed', closeIdle);
    }
  }

  /**
   * The file watcher's reload: new handshakes use the certificate now in the files; a bad one is
   * refused and the old kept. (A config reload loads certificates in `prepareReconfigure()`.)
   */
  reloadCertificates(trigger: string): boolean {
    const tls = this.#generation.config.tls;
    if (!tls) return false;
    try {
      const material = loadTlsMaterial(tls);
      this.#tls!.setSecureContext(material.options);
      this.#log.info({ event: 'tls_reloaded', listener: this.name, trigger }, 'TLS certificate reloaded');
      return true;
    } catch (error) {
      this.#log.error({ event: 'tls_reload_failed', listener: this.name, trigger, reason: (error as Error).message }, 'TLS certificate reload failed; keeping the current one');
      return false;
    }
  }

  #watchCertificates(): void {
    const tls = this.#generation.config.tls;
    if (tls && this.#accepting) this.#unwatch = watchTlsFiles(tls, () => this.reloadCertificates('file change'));
  }

  #accepted(socket: Socket): void {
    const connection = this.#lifecycle.connections.admit(socket, this.name);
    if (!connection) return;
    // Listening sockets accept paused (sockets.ts): reading starts here, in the process that serves.
    socket.resume();
    const generation = this.#generation;
    this.#generationOf.set(connection, generation);
    if (!generation.http2) return this.#serve(generation, socket, connection, 'http1');
    if (!generation.http1) return this.#serve(generation, socket, connection, 'h2');
    // Cleartext with both: HTTP/2 with prior knowledge starts with the connection preface.
    const sniff = (chunk: Buffer) => {
      socket.pause();
      socket.unshift(chunk);
      const h2 = chunk.subarray(0, H2_PREFACE.length).equals(H2_PREFACE.subarray(0, Math.min(chunk.length, H2_PREFACE.length)));
      this.#serve(generation, socket, connection, h2 ? 'h2' : 'http1');
      // HTTP/2 reads the bytes we put back itself; HTTP/1.1 needs the stream flowing again.
      if (!h2) socket.resume();
    };
    socket.once('data', sniff);
  }

  #secured(socket: TLSSocket): void {
    const raw = (socket as unknown as { _parent?: Socket })._parent;
    const connection = raw ? this.#lifecycle.connections.get(raw) : undefined;
    if (!connection) {
      socket.destroy();
      return;
    }
    const generation = this.#generation;
    this.#generationOf.set(connection, generation);
    this.#lifecycle.connections.handOver(connection, socket);
    this.#serve(generation, socket, connection, socket.alpnProtocol === 'h2' ? 'h2' : 'http1');
  }

  #serve(generation: Generation, socket: Socket, connection: TrackedConnection, protocol: Protocol): void {
    if (protocol === 'h2' && generation.http2) {
      // Its session, started at once, gives the connection its HTTP/2 protocol (Http2Sessions.add).
      generation.pendingConnection = connection;
      generation.http2.emit('connection', socket);
      generation.pendingConnection = undefined;
    } else if (generation.http1) {
      connection.protocol = new Http1Protocol(connection);
      generation.http1.emit('connection', socket);
    } else {
      socket.destroy();
    }
  }
}
