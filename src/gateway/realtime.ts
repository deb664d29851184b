// GET /v1/realtime: a WebSocket session proxied to an OpenAI-type provider's realtime endpoint.
// Auth, the query string and routing are checked before the handshake (a failure is an HTTP
// status, not a socket that opens and closes), and the upstream is sent only the parameters that
// were checked. The upstream socket opens first, so the client's handshake answers with
// the subprotocol the provider chose. Frames are relayed both ways; `response.done` usage is
// summed per session. The session stays in flight until both sockets have closed (L7).
import { WebSocket, WebSocketServer, type RawData } from 'ws';
import type { ForceEndable } from '../lifecycle/contracts.ts';
import type { UpgradeContext } from '../server/context.ts';
import { refuseUpgrade, rejectUpgrade, whenClosed, type UpgradeRoute } from '../server/upgrade.ts';
import type { Routing } from './gateway.ts';
import { authError, errors, GatewayError } from '../api/errors.ts';
import { classifyUpstreamError } from './upstream-errors.ts';
import { readUsageFrom } from './usage.ts';
import { checkHandshake } from './websocket-handshake.ts';
import { checkRealtimeQuery, upstreamRealtimeQuery } from './realtime-query.ts';
import type { Limiter } from '../limits/limiter.ts';
import type { Admission } from '../limits/admission.ts';
import type { Provider, RealtimeTarget } from '../providers/types.ts';
import type { Route } from '../routing/router.ts';

export interface RealtimeEnvironment {
  routing(): Routing;
  readonly limiter: Limiter;
  trackForceEndable(stream: ForceEndable): () => void;
  upstreamError(provider: string, kind: string): void;
  /** Logs an unexpected error (a bug) with the session it happened in. */
  reportBug(error: unknown, requestId: string): void;
  connectTimeoutMs: number;
}

/** A session's admission has no body: its tokens are reserved as a request's without max_tokens. */
const NO_BODY: Record<string, unknown> = Object.freeze({}) as Record<string, unknown>;

/** Browsers cannot set headers, so the OpenAI SDK sends the key as a subprotocol. */
const KEY_PROTOCOL = 'openai-insecure-api-key.';

/** RFC 6455 §7.4: 1005 and 1006 are never sent in a close frame. */
function sendableCode(code: number): number {
  return code === 1005 ? 1000 : code === 1006 || code < 1000 || code >= 5000 ? 1011 : code;
}

export class RealtimeRoute implements UpgradeRoute {
  readonly #env: RealtimeEnvironment;
  readonly #server = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 64 * 1024 * 1024 });

  constructor(env: RealtimeEnvironment) {
    this.#env = env;
  }

  handle(ctx: UpgradeContext, finished: (status: number) => void): void {
    const reject = (error: GatewayError) => refuseUpgrade(ctx, error, finished);
    const { req } = ctx;
    // R1: a handshake the WebSocket library would refuse (or throw on) is answered here, before an
    // upstream socket is opened for it.
    const handshake = checkHandshake(req);
    if (!handshake.ok) return reject(handshake.error);
    const { protocols } = handshake;
    const keyProtocol = protocols.find((p) => p.startsWith(KEY_PROTOCOL));
    const routing = this.#env.routing();
    // No key needed: a web page (a WebSocket obeys no CORS rule) must not open a session with the providers' credentials.
    const refused = routing.openGuard?.refuse(req);
    if (refused) return reject(refused);
    if (routing.pending !== undefined) return reject(errors.configNotLoaded(routing.pending));
    const headers = keyProtocol && !req.headers.authorization ? { ...req.headers, authorization: `Bearer ${keyProtocol.slice(KEY_PROTOCOL.length)}` } : req.headers;
    const auth = routing.keys.check(headers);
    if (!auth.ok) {
      if (auth.keyName !== undefined) ctx.keyName = auth.keyName;
      return reject(authError(auth.reason, auth.keyName));
    }
    ctx.key = auth.key;
    const query = checkRealtimeQuery(req.url ?? '/');
    if (!query.ok) return reject(query.error);
    const { model } = query;
    ctx.model = model;
    if (!auth.key.allows(model)) return reject(errors.modelNotAllowed(model, auth.key.name));
    const route = routing.router.resolve(model);
    if (!route) return reject(errors.unknownModel(model));
    ctx.modelEntry = route.entry;
    const provider = routing.providers.get(route.provider)!;
    ctx.provider = provider.name;
    if (!provider.supports('realtime') || !provider.realtimeTarget) {
      return reject(errors.unsupportedEndpoint(model, provider.name, provider.type, '/v1/realtime'));
    }
    ctx.servedModel = route.targets[0]!.model ?? route.entry;
    ctx.upstreamModel = route.upstreamModel ?? model;
    // A session is admitted like a request (the key's and the model's requests per minute,
    // concurrency, tokens, and its budget: it holds what a request without max_tokens may cost),
    // holds its place until both sockets close, and is settled then with the usage of every
    // response.done and its cost. It is served by its route's first target alone.
    const policy = routing.limits;
    ctx.ledgered = true;
    const admitting = this.#env.limiter.admit({
      policy,
      key: auth.key,
      model: route.entry,
      requested: model,
      targets: route.targets.slice(0, 1),
      generates: true,
      billed: true,
      json: NO_BODY,
      bodyBytes: 0,
      id: ctx.id,
    });
    const open = (admission: Admission | GatewayError): void => {
      if (admission instanceof GatewayError) return reject(admission);
      ctx.whenFinished((status) => {
        const usage = ctx.usage;
        const cost = usage === undefined ? undefined : policy.prices.costMicros(usage, [ctx.upstreamModel, model]);
        ctx.costMicros = cost;
        admission.finish(usage, cost, status === 101);
      });
      // The client left, or a forced drain answered it, while the limits were checked (a store over IPC or Redis).
      if (ctx.socket.destroyed || ctx.status !== 0) {
        if (ctx.status === 0) ctx.errorCode ||= 'client_gone';
        return whenClosed(ctx.socket, () => finished(ctx.status || 499));
      }
      const target = provider.realtimeTarget!(upstreamRealtimeQuery(route.upstreamModel ?? model, query.intent));
      if (!(target instanceof Promise)) return this.#connect(ctx, finished, provider, route, target, protocols, keyProtocol);
      // A target that waits for its credentials (a token being fetched): the client may leave meanwhile.
      target.then(
        (ready) => {
          if (ctx.socket.destroyed || ctx.status !== 0) {
            if (ctx.status === 0) ctx.errorCode ||= 'client_gone';
            return whenClosed(ctx.socket, () => finished(ctx.status || 499));
          }
          this.#connect(ctx, finished, provider, route, ready, protocols, keyProtocol);
        },
        (error: unknown) => reject(error instanceof GatewayError ? error : errors.upstreamFailed(provider.name)),
      );
    };
    if (!(admitting instanceof Promise)) return open(admitting);
    admitting.then(open, (error: unknown) => {
      this.#env.reportBug(error, ctx.id);
      reject(errors.internal());
    });
  }

  /** Opens the upstream session, then accepts the client's handshake with the subprotocol the provider chose. */
  #connect(
    ctx: UpgradeContext,
    finished: (status: number) => void,
    provider: Provider,
    route: Route,
    target: RealtimeTarget,
    protocols: readonly string[],
    keyProtocol: string | undefined,
  ): void {
    const reject = (error: GatewayError) => refuseUpgrade(ctx, error, finished);
    const { req } = ctx;
    const upstreamHeaders: Record<string, string> = { ...target.headers, ...route.targets[0]!.headers, 'x-request-id': ctx.id };
    const beta = req.headers['openai-beta'];
    if (typeof beta === 'string') upstreamHeaders['openai-beta'] = beta;
    let upstream: WebSocket;
    try {
      upstream = new WebSocket(target.url, protocols.filter((p) => p !== keyProtocol), {
        headers: upstreamHeaders,
        handshakeTimeout: this.#env.connectTimeoutMs,
        perMessageDeflate: false,
      });
    } catch {
      // A target URL the library refuses: the provider's configuration, not the client.
      this.#env.upstreamError(provider.name, 'other');
      return reject(errors.upstreamFailed(provider.name));
    }
    let opened = false;
    // The client left before the upstream answered.
    const onEarlyClose = () => {
      if (opened) return;
      ctx.errorCode = 'client_gone';
      upstream.terminate();
      finished(499);
    };
    ctx.socket.once('close', onEarlyClose);
    upstream.once('unexpected-response', (_request, response) => {
      ctx.errorCode = `upstream_status_${response.statusCode}`;
      this.#env.upstreamError(provider.name, 'status');
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk.length + body.length < 65536 ? chunk : ''));
      response.on('end', () => {
        const status = response.statusCode ?? 502;
        ctx.status = status;
        rejectUpgrade(ctx.socket, status, response.statusMessage ?? 'Error', body || errors.upstreamFailed(provider.name).body());
        whenClosed(ctx.socket, () => finished(status));
        upstream.terminate();
      });
    });
    upstream.once('error', (error) => {
      if (opened) return;
      const { error: gatewayError, kind } = classifyUpstreamError(error, provider.name);
      this.#env.upstreamError(provider.name, kind);
      ctx.socket.off('close', onEarlyClose);
      reject(/handshake timed out/i.test(error.message) ? errors.upstreamTimeout(provider.name) : gatewayError);
    });
    upstream.once('open', () => {
      opened = true;
      ctx.socket.off('close', onEarlyClose);
      if (ctx.socket.destroyed) {
        upstream.terminate();
        return;
      }
      // The library may still end the handshake without calling back (a socket that stopped being
      // writable, a header it refuses): the exchange then ends when the socket closes (L10).
      let accepted = false;
      whenClosed(ctx.socket, () => {
        if (accepted) return;
        ctx.errorCode ||= 'websocket_handshake_failed';
        upstream.terminate();
        finished(ctx.status || 400);
      });
      this.#server.handleUpgrade(req, ctx.socket, ctx.head, (client) => {
        accepted = true;
        ctx.status = 101;
        new RealtimeSession(ctx, client, upstream, this.#env, finished);
      });
    });
  }
}

class RealtimeSession implements ForceEndable {
  readonly #ctx: UpgradeContext;
  readonly #client: WebSocket;
  readonly #upstream: WebSocket;
  readonly #finished: (status: number) => void;
  readonly #untrack: () => void;
  #open = 2;

  constructor(ctx: UpgradeContext, client: WebSocket, upstream: WebSocket, env: RealtimeEnvironment, finished: (status: number) => void) {
    this.#ctx = ctx;
    this.#client = client;
    this.#upstream = upstream;
    this.#finished = finished;
    this.#untrack = env.trackForceEndable(this);
    client.on('message', (data: RawData, isBinary: boolean) => {
      if (upstream.readyState === WebSocket.OPEN) upstream.send(data, { binary: isBinary });
    });
    upstream.on('message', (data: RawData, isBinary: boolean) => {
      if (!isBinary) this.#readUsage(data);
      if (client.readyState === WebSocket.OPEN) client.send(data, { binary: isBinary });
    });
    client.on('close', (code, reason) => {
      if (upstream.readyState === WebSocket.OPEN) upstream.close(sendableCode(code), reason);
      else if (upstream.readyState === WebSocket.CONNECTING) upstream.terminate();
      this.#closed();
    });
    upstream.on('close', (code, reason) => {
      if (code !== 1000 && code !== 1001 && code !== 1005) ctx.errorCode ||= `upstream_closed_${code}`;
      if (client.readyState === WebSocket.OPEN) client.close(sendableCode(code), reason);
      this.#closed();
    });
    // Errors end in 'close' for both sockets; the handlers keep them from being uncaught.
    client.on('error', () => client.terminate());
    upstream.on('error', () => upstream.terminate());
  }

  /** L8: a forced drain closes the session with 1001 (going away), RFC 6455 §7.4.1. */
  forceEnd(): void {
    this.#ctx.errorCode ||= 'drain_forced';
    this.#client.close(1001, 'gateway shutting down');
    this.#upstream.close(1001, 'gateway shutting down');
  }

  #readUsage(data: RawData): void {
    const text = data.toString();
    if (!text.includes('"response.done"')) return;
    try {
      const event = JSON.parse(text) as { type?: string; response?: { usage?: unknown } };
      if (event.type !== 'response.done') return;
      const usage = readUsageFrom(event.response?.usage, undefined);
      if (!usage) return;
      const total = (this.#ctx.usage ??= { prompt: 0, completion: 0 });
      total.prompt += usage.prompt;
      total.completion += usage.completion;
      // Priced at cached_input: a session's cached prompt tokens are summed as its tokens are.
      if (usage.cached !== undefined) total.cached = (total.cached ?? 0) + usage.cached;
    } catch {
      // Not JSON: relayed as it is.
    }
  }

  #closed(): void {
    if (--this.#open > 0) return;
    this.#untrack();
    this.#finished(101);
  }
}
