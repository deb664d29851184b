// Anthropic's native Messages API: `x-api-key` + `anthropic-version`. The base URL is the one the
// Anthropic SDK takes (no /v1); one that already ends in /v1 is accepted too.
import type { ProviderConfig, UpstreamConfig } from '../../config/schema.ts';
import type { Endpoint, Provider, ProviderRequest, ResponseHandler } from '../types.ts';
import { UpstreamPool } from '../upstream-pool.ts';

export const ANTHROPIC_DEFAULT_BASE_URL = 'https://api.anthropic.com';

export class AnthropicProvider implements Provider {
  readonly type = 'anthropic';
  readonly name: string;
  readonly pool: UpstreamPool;
  readonly #credentials: Record<string, string>;
  readonly #messagesPath: string;

  constructor(config: ProviderConfig, upstream: UpstreamConfig) {
    this.name = config.name;
    this.pool = new UpstreamPool(config.base_url ?? ANTHROPIC_DEFAULT_BASE_URL, upstream);
    this.#messagesPath = this.pool.basePath.endsWith('/v1') ? '/messages' : '/v1/messages';
    this.#credentials = { ...config.headers, 'anthropic-version': config.anthropic_version };
    if (config.api_key) this.#credentials['x-api-key'] = config.api_key;
  }

  supports(endpoint: Endpoint): boolean {
    return endpoint === 'messages';
  }

  dispatch(request: ProviderRequest, handler: ResponseHandler): void {
    // A client's own anthropic-version / anthropic-beta headers are kept; ours fills the gap.
    const credentials = { ...this.#credentials };
    const clientVersion = request.headers['anthropic-version'];
    if (typeof clientVersion === 'string') credentials['anthropic-version'] = clientVersion;
    this.pool.send(this.#messagesPath, request, credentials, handler);
  }

  close(): Promise<void> {
    return this.pool.close();
  }

  destroy(): Promise<void> {
    return this.pool.destroy();
  }
}
