// Anthropic's native Messages API: `x-api-key` + `anthropic-version`. The base URL is the one the
// Anthropic SDK takes (no /v1); one that already ends in /v1 is accepted too.
import type { ProviderConfig, UpstreamConfig } from '../../config/schema.ts';
import type { Endpoint, ProviderRequest, ResponseHandler, UpstreamModel } from '../types.ts';
import { PooledProvider } from '../pooled-provider.ts';

export const ANTHROPIC_DEFAULT_BASE_URL = 'https://api.anthropic.com';

/** Pages of Anthropic's model list read at most. */
const MAX_PAGES = 10;

export class AnthropicProvider extends PooledProvider {
  readonly type = 'anthropic';
  readonly api = 'anthropic';
  readonly #credentials: Record<string, string>;
  /** `/v1` when the base URL does not already end in it. */
  readonly #version: string;

  constructor(config: ProviderConfig, upstream: UpstreamConfig) {
    super(config.name, config.base_url ?? ANTHROPIC_DEFAULT_BASE_URL, upstream);
    this.#version = this.pool.basePath.endsWith('/v1') ? '' : '/v1';
    this.#credentials = { ...config.headers, 'anthropic-version': config.anthropic_version };
    if (config.api_key) this.#credentials['x-api-key'] = config.api_key;
  }

  supports(endpoint: Endpoint): boolean {
    return endpoint === 'messages' || endpoint === 'count_tokens';
  }

  dispatch(request: ProviderRequest, handler: ResponseHandler): void {
    // A client's own anthropic-version / anthropic-beta headers are kept; ours fills the gap.
    const credentials = { ...this.#credentials };
    const clientVersion = request.headers['anthropic-version'];
    if (typeof clientVersion === 'string') credentials['anthropic-version'] = clientVersion;
    const path = request.endpoint === 'count_tokens' ? '/messages/count_tokens' : '/messages';
    this.pool.send(this.#version + path, request, credentials, handler);
  }

  /**
   * `GET /v1/models` with our credentials, page by page (`has_more`, `after_id`), at most
   * MAX_PAGES pages of 1000.
   */
  async listModels(signal: AbortSignal): Promise<UpstreamModel[]> {
    const models: UpstreamModel[] = [];
    let after: string | undefined;
    for (let page = 0; page < MAX_PAGES; page++) {
      const query = `?limit=1000${after === undefined ? '' : `&after_id=${encodeURIComponent(after)}`}`;
      const answer = (await this.pool.getJson(`${this.#version}/models${query}`, this.#credentials, signal)) as
        | { data?: unknown; has_more?: unknown; last_id?: unknown }
        | null;
      if (!Array.isArray(answer?.data)) throw new Error('answer has no "data" list');
      for (const item of answer.data as { id?: unknown; created_at?: unknown; display_name?: unknown }[]) {
        if (typeof item?.id !== 'string' || item.id === '') continue;
        const at = typeof item.created_at === 'string' ? Date.parse(item.created_at) : Number.NaN;
        models.push({
          id: item.id,
          created: Number.isFinite(at) && at >= 0 ? Math.floor(at / 1000) : 0,
          displayName: typeof item.display_name === 'string' ? item.display_name : undefined,
        });
      }
      if (answer.has_more !== true || typeof answer.last_id !== 'string' || answer.last_id === after) break;
      after = answer.last_id;
    }
    return models;
  }
}
