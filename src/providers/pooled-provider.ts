// What every provider that sends HTTP requests has alike: a name, its pool (one origin, the
// config's timeouts), where it sends (for traces), and the two ways its pool ends (L9, L8).
import type { UpstreamConfig } from '../config/schema.ts';
import type { Endpoint, Provider, ProviderApi, ProviderRequest, ProviderType, ResponseHandler } from './types.ts';
import { UpstreamPool } from './upstream-pool.ts';

export abstract class PooledProvider implements Provider {
  abstract readonly type: ProviderType;
  abstract readonly api: ProviderApi;
  readonly name: string;
  readonly pool: UpstreamPool;

  constructor(name: string, baseUrl: string, upstream: UpstreamConfig) {
    this.name = name;
    this.pool = new UpstreamPool(baseUrl, upstream);
  }

  get origin(): string {
    return this.pool.origin;
  }

  abstract supports(endpoint: Endpoint): boolean;

  abstract dispatch(request: ProviderRequest, handler: ResponseHandler): void;

  /** Waits for the requests in progress, then closes the pooled connections. */
  close(): Promise<void> {
    return this.pool.close();
  }

  /** A forced end: aborts the requests in progress and closes the pooled connections now. */
  destroy(): Promise<void> {
    return this.pool.destroy();
  }
}
