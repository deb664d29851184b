// A keep-alive undici pool per provider origin, with the config's timeouts, and the request
// assembly shared by the HTTP providers.
import { Pool } from 'undici';
import type { UpstreamConfig } from '../config/schema.ts';
import type { ProviderRequest, ResponseHandler } from './types.ts';

/** The largest model list read from a provider. */
const MAX_LIST_BYTES = 8 * 1024 * 1024;

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

  close(): Promise<void> {
    return this.#pool.close();
  }

  destroy(): Promise<void> {
    return this.#pool.destroy();
  }
}
