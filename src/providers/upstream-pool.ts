// A keep-alive undici pool per provider origin, with the config's timeouts, and the request
// assembly shared by the HTTP providers.
import { Pool } from 'undici';
import type { UpstreamConfig } from '../config/schema.ts';
import type { ProviderRequest, ResponseHandler } from './types.ts';

export class UpstreamPool {
  readonly #pool: Pool;
  readonly #basePath: string;
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

  close(): Promise<void> {
    return this.#pool.close();
  }

  destroy(): Promise<void> {
    return this.#pool.destroy();
  }
}
