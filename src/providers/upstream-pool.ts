// A keep-alive undici pool per provider origin, with the config's timeouts, and the request
// assembly shared by the HTTP providers.
import { Pool } from 'undici';
import type { UpstreamConfig } from '../config/schema.ts';
import type { DispatchController, ProviderRequest, ResponseHandler } from './types.ts';

/** A request whose headers are only known once its credentials are (a signature, a fresh token). */
export interface OutgoingRequest {
  /** Under the pool's base path. */
  readonly path: string;
  readonly headers: Record<string, string | string[]>;
  readonly body: Buffer;
}

/**
 * The controller of a request still waiting for its credentials: an abort (the client left, the
 * attempt timed out, a forced end) means it is never sent, and is told to the handler as undici
 * tells one.
 */
class WaitingController implements DispatchController {
  aborted = false;
  paused = false;
  reason: Error | null = null;
  readonly #handler: ResponseHandler;
  readonly #waiting: Set<WaitingController>;

  constructor(handler: ResponseHandler, waiting: Set<WaitingController>) {
    this.#handler = handler;
    this.#waiting = waiting;
    waiting.add(this);
  }

  abort(reason: Error): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.#waiting.delete(this);
    this.#handler.onResponseError?.(this, reason);
  }

  /** The wait is over: the request is sent (or failed) from here. */
  settled(): boolean {
    this.#waiting.delete(this);
    return !this.aborted;
  }

  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
  }
}

/** The largest model list read from a provider. */
const MAX_LIST_BYTES = 8 * 1024 * 1024;

export class UpstreamPool {
  readonly #pool: Pool;
  readonly #basePath: string;
  /** Requests waiting for their credentials. */
  readonly #waiting = new Set<WaitingController>();
  /** Their credentials, being fetched: a close waits for them to be sent. */
  readonly #readying = new Set<Promise<unknown>>();
  readonly origin: string;

  constructor(baseUrl: string, settings: UpstreamConfig) {
    const url = new URL(baseUrl);
    this.origin = url.origin;
    this.#basePath = url.pathname.replace(/\/+$/, '');
    this.#pool = new Pool(url.origin, {
      connections: settings.max_connections > 0 ? settings.max_connections : null,
      connect: { timeout: settings.connect_timeout_ms },
      headersTimeout: settings.timeout_ms,
      bodyTimeout: settings.timeout_ms,
      keepAliveTimeout: 30_000,
      keepAliveMaxTimeout: 300_000,
      pipelining: 1,
    });
  }

  get basePath(): string {
    return this.#basePath;
  }

  send(path: string, request: ProviderRequest, credentials: Record<string, string>, handler: ResponseHandler): void {
    const headers: Record<string, string | string[]> = { ...request.headers, ...credentials };
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(request.body.length);
    headers['x-request-id'] = request.requestId;
    this.#pool.dispatch({ method: 'POST', path: this.#basePath + path, headers, body: request.body, blocking: true }, handler);
  }

  /**
   * Sends the request `ready` gives once it is ready (credentials fetched, signed). Until then the
   * handler holds a controller that can abort it; a `ready` that rejects (with the gateway's error
   * for missing credentials) is the request's error.
   */
  sendWhenReady(ready: Promise<OutgoingRequest>, handler: ResponseHandler): void {
    const waiting = new WaitingController(handler, this.#waiting);
    handler.onRequestStart?.(waiting, {});
    const sent = ready.then(
      (outgoing) => {
        if (!waiting.settled()) return;
        this.#pool.dispatch({ method: 'POST', path: this.#basePath + outgoing.path, headers: outgoing.headers, body: outgoing.body, blocking: true }, handler);
      },
      (error: unknown) => {
        if (waiting.settled()) handler.onResponseError?.(waiting, error instanceof Error ? error : new Error(String(error)));
      },
    );
    this.#readying.add(sent);
    void sent.finally(() => this.#readying.delete(sent));
  }

  /**
   * GET `path` (under the base path) and parse the JSON answer. A status other than 200, a body
   * that is not JSON or is larger than `MAX_LIST_BYTES` rejects; `signal` aborts the request.
   */
  async getJson(path: string, credentials: Record<string, string>, signal: AbortSignal): Promise<unknown> {
    const response = await this.#pool.request({ method: 'GET', path: this.#basePath + path, headers: { ...credentials, accept: 'application/json' }, signal });
    if (response.statusCode !== 200) {
      response.body.resume();
      throw new Error(`HTTP ${response.statusCode}`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of response.body) {
      size += (chunk as Buffer).length;
      if (size > MAX_LIST_BYTES) {
        response.body.destroy();
        throw new Error(`answer larger than ${MAX_LIST_BYTES} bytes`);
      }
      chunks.push(chunk as Buffer);
    }
    try {
      return JSON.parse(Buffer.concat(chunks, size).toString('utf8'));
    } catch {
      throw new Error('answer is not JSON');
    }
  }

  /** Waits for the requests in progress, those still waiting for their credentials included, then closes. */
  async close(): Promise<void> {
    while (this.#readying.size > 0) await Promise.allSettled([...this.#readying]);
    return this.#pool.close();
  }

  destroy(): Promise<void> {
    for (const waiting of [...this.#waiting]) waiting.abort(new Error('provider destroyed'));
    return this.#pool.destroy();
  }
}
