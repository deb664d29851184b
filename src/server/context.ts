// Per-request facts: our id, the caller's id, the peer and what the request turned out to be.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Http2ServerRequest } from 'node:http2';
import type { Duplex } from 'node:stream';
import type { TrackedConnection } from '../lifecycle/connections.ts';
import type { ForceEndable } from '../lifecycle/contracts.ts';
import type { ErrorDialect } from '../api/errors.ts';
import type { Usage } from '../api/usage.ts';
import type { RequestTrace } from '../telemetry/tracing.ts';
import type { AttemptRecord } from '../telemetry/access-log.ts';
import type { LedgerBodiesConfig } from '../config/ledger-schema.ts';
import { requestId } from './request-id.ts';

/** What the request's client key may do (auth/keys.ts's ClientKey). */
export interface KeyGrant {
  /** '' for an open gateway (no keys configured). */
  readonly name: string;
  allows(model: string): boolean;
  /** The key's team and free labels (the usage ledger records them). */
  readonly team?: { readonly name: string } | undefined;
  readonly metadata?: Readonly<Record<string, string>> | undefined;
}

const OPEN: KeyGrant = { name: '', allows: () => true };

/**
 * The request came over an HTTP/2 stream. Not `httpVersionMajor === 2`: an HTTP/1.1 request line
 * may claim any version ("GET / HTTP/2.0"), and Node's HTTP/1.1 parser reports what it claims.
 */
export function isHttp2Request(req: IncomingMessage): boolean {
  return req instanceof Http2ServerRequest;
}

/** What every exchange (an HTTP request or a WebSocket session) records. */
export class ExchangeContext {
  readonly id: string = requestId();
  readonly startedAt: bigint = process.hrtime.bigint();
  readonly req: IncomingMessage;
  readonly listener: string;
  readonly connection: TrackedConnection | undefined;
  protocol: string;
  endpoint = 'other';
  model = '';
  /** The configured model entry the request matched (a name or a pattern): the metrics label. */
  modelEntry = '';
  provider = '';
  /** Stable error code when the request failed (access log `error`). */
  errorCode = '';
  usage: Usage | undefined = undefined;
  /** The client key the request presented (an open gateway's has no name): what it may do. */
  #key: KeyGrant = OPEN;
  /** The name of the key presented, also when it was refused (expired, disabled); '' for none. */
  keyName = '';

  get key(): KeyGrant {
    return this.#key;
  }

  set key(key: KeyGrant) {
    this.#key = key;
    this.keyName = key.name;
  }

  /** A live view (the admin status event stream): not in flight, so no drain waits for it (L5). */
  watch = false;
  /** Upstream attempts made (retries and fallbacks included); 0 when none was needed. */
  attempts = 0;
  /** Each attempt, once a request has needed more than one (undefined for a single attempt: it costs nothing then). */
  attemptLog: AttemptRecord[] | undefined = undefined;
  /** The model the provider was asked for (a target's model, or the client's name). */
  upstreamModel = '';
  /** The target's configured model that served (the route entry when it keeps the client's name): a bounded metrics label. */
  servedModel = '';
  /** What the request cost, in micro-dollars, when its model has a price. */
  costMicros: number | undefined = undefined;
  /** It reached its admission (its key, body and model were good): the usage ledger records it. */
  ledgered = false;
  /** The `user` the client named (OpenAI's `user`, Anthropic's `metadata.user_id`), cut to 256 characters; '' none. */
  user = '';
  /** When the answer's head went out (hrtime ns); 0n: not yet. */
  headAt = 0n;
  /** The request body's bytes, as read; the answer's, as written. */
  bytesIn = 0;
  bytesOut = 0;
  /** Its span, when tracing is on (ended with the access line). */
  trace: RequestTrace | undefined = undefined;
  #onFinish: ((status: number) => void) | undefined = undefined;
  #finishedWith: number | undefined = undefined;

  /**
   * `settle` runs once when the exchange is finished (before it leaves in-flight, so what it
   * starts is waited for by the drain): at once when it already is.
   */
  whenFinished(settle: (status: number) => void): void {
    if (this.#finishedWith !== undefined) return settle(this.#finishedWith);
    this.#onFinish = settle;
  }

  /** Called once by the exchange recorder. */
  finished(status: number): void {
    if (this.#finishedWith !== undefined) return;
    this.#finishedWith = status;
    const settle = this.#onFinish;
    this.#onFinish = undefined;
    settle?.(status);
  }

  constructor(req: IncomingMessage, listener: string, connection: TrackedConnection | undefined) {
    this.req = req;
    this.listener = listener;
    this.#remoteAddress = req.socket.remoteAddress;
    this.#remotePort = req.socket.remotePort;
    this.connection = connection;
    this.protocol = isHttp2Request(req) ? 'h2' : 'http1';
  }

  get downstreamRequestId(): string | undefined {
    const value = this.req.headers['x-request-id'];
    return typeof value === 'string' ? value : undefined;
  }

  /** The remote address, read while the socket is open (it is gone once the socket closes). */
  readonly #remoteAddress: string | undefined;
  readonly #remotePort: number | undefined;

  get peer(): string {
    return `${this.#remoteAddress}:${this.#remotePort}`;
  }

  durationSeconds(): number {
    return Number(process.hrtime.bigint() - this.startedAt) / 1e9;
  }
}

/** An HTTP request and its response. */
export class RequestContext extends ExchangeContext {
  readonly res: ServerResponse;
  /** What ends this request when the drain is forced (L8), when it knows better than a bare 503. */
  forceEnder: ForceEndable | undefined = undefined;
  /** Whose error shape the caller expects: Anthropic's on its routes and for its clients. */
  dialect: ErrorDialect = 'openai';
  /** Headers every response to this request carries (the limiter's x-ratelimit-*). */
  responseHeaders: Readonly<Record<string, string>> | undefined = undefined;
  /** Called just before the response's last bytes are written (`endResponse`): the limiter's early release of the request's concurrency places. */
  beforeEnd: (() => void) | undefined = undefined;
  /**
   * Asked once the response has closed, before the request leaves in flight: true when it stays in
   * flight until `done` is called (its answer is read on to its usage after the client left, or
   * its usage is still being counted).
   */
  settleLater: ((done: () => void) => boolean) | undefined = undefined;
  /** `ledger.bodies` on, set at the request's admission: its bodies kept for its ledger record. Undefined (the default): none is kept. */
  bodies: KeptBodies | undefined = undefined;

  constructor(req: IncomingMessage, res: ServerResponse, listener: string, connection: TrackedConnection | undefined) {
    super(req, listener, connection);
    this.res = res;
  }
}

/** Kept past `max_bytes`, so that the redaction sees a secret across the cut whole (the record keeps `max_bytes`). */
const KEPT_MARGIN_BYTES = 1024;

/**
 * A request's bodies kept for the usage ledger (`ledger.bodies`): the request body as the gateway
 * read it, and the first bytes of the answer as its client received them (a stream's events as
 * sent), each up to `max_bytes` and a margin. The record's builder redacts and cuts them.
 */
export class KeptBodies {
  /** `ledger.bodies` as configured when the request was admitted. */
  readonly settings: LedgerBodiesConfig;
  readonly #request: Buffer;
  readonly #limit: number;
  readonly #response: Buffer[] = [];
  #responseBytes = 0;
  #responseMore = false;

  /** `request`: the body as read (held, not copied: the request holds it anyway). */
  constructor(settings: LedgerBodiesConfig, request: Buffer) {
    this.settings = settings;
    this.#request = request;
    this.#limit = settings.max_bytes + KEPT_MARGIN_BYTES;
  }

  /** Bytes the client is sent: copied while there is room, counted as more after. */
  keep(chunk: Buffer | string): void {
    if (chunk.length === 0) return;
    const room = this.#limit - this.#responseBytes;
    if (room <= 0) {
      this.#responseMore = true;
      return;
    }
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    if (bytes.length > room) this.#responseMore = true;
    // A copy: the chunk may be a view of a buffer that is reused.
    const part = Buffer.from(bytes.subarray(0, room));
    this.#response.push(part);
    this.#responseBytes += part.length;
  }

  /** The request body's first bytes, and whether it went on past them. */
  get request(): { bytes: Buffer; more: boolean } {
    const more = this.#request.length > this.#limit;
    return { bytes: more ? this.#request.subarray(0, this.#limit) : this.#request, more };
  }

  /** The answer's first bytes as sent, and whether more were sent. */
  get response(): { bytes: Buffer; more: boolean } {
    return { bytes: Buffer.concat(this.#response, this.#responseBytes), more: this.#responseMore };
  }
}

/** A WebSocket upgrade request and, once accepted, its session. */
export class UpgradeContext extends ExchangeContext {
  readonly socket: Duplex;
  readonly head: Buffer;
  /** 101 once the session was accepted; the rejection status otherwise. */
  status = 0;

  constructor(req: IncomingMessage, socket: Duplex, head: Buffer, listener: string, connection: TrackedConnection | undefined) {
    super(req, listener, connection);
    this.socket = socket;
    this.head = head;
  }
}
