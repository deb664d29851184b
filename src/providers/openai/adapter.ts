// Any OpenAI-compatible API: bearer auth, paths under the base URL (which includes /v1).
import type { ProviderConfig, UpstreamConfig } from '../../config/schema.ts';
import type { Endpoint, Provider, ProviderRequest, ResponseHandler, UpstreamModel } from '../types.ts';
import { UpstreamPool } from '../upstream-pool.ts';

const PATHS: Partial<Record<Endpoint, string>> = {
  chat: '/chat/completions',
  completions: '/completions',
  embeddings: '/embeddings',
  responses: '/responses',
  realtime: '/realtime',
};

export const OPENAI_DEFAULT_BASE_URL = 'https://api.openai.com/v1';

export class OpenAIProvider implements Provider {
  readonly type = 'openai';
  readonly name: string;
  readonly pool: UpstreamPool;
  readonly #credentials: Record<string, string>;

  constructor(config: ProviderConfig, upstream: UpstreamConfig) {
    this.name = config.name;
    this.pool = new UpstreamPool(config.base_url ?? OPENAI_DEFAULT_BASE_URL, upstream);
    this.#credentials = { ...config.headers };
    if (config.api_key) this.#credentials.authorization = `Bearer ${config.api_key}`;
  }

  get origin(): string {
    return this.pool.origin;
  }

  supports(endpoint: Endpoint): boolean {
    return PATHS[endpoint] !== undefined;
  }

  dispatch(request: ProviderRequest, handler: ResponseHandler): void {
    this.pool.send(PATHS[request.endpoint]!, request, this.#credentials, handler);
  }

  /** `GET {base_url}/models`: `{ data: [{ id, created }] }`. */
  async listModels(signal: AbortSignal): Promise<UpstreamModel[]> {
    const answer = (await this.pool.getJson('/models', this.#credentials, signal)) as { data?: unknown } | null;
    if (!Array.isArray(answer?.data)) throw new Error('answer has no "data" list');
    const models: UpstreamModel[] = [];
    for (const item of answer.data as { id?: unknown; created?: unknown }[]) {
      if (typeof item?.id !== 'string' || item.id === '') continue;
      const created = typeof item.created === 'number' && Number.isFinite(item.created) && item.created >= 0 ? Math.floor(item.created) : 0;
      models.push({ id: item.id, created, displayName: undefined });
    }
    return models;
  }

  realtimeTarget(query: URLSearchParams): { url: string; headers: Record<string, string> } {
    const url = new URL(`${this.pool.origin}${this.pool.basePath}/realtime`);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    url.search = query.toString();
    return { url: url.toString(), headers: this.#credentials };
  }

  close(): Promise<void> {
    return this.pool.close();
  }

  destroy(): Promise<void> {
    return this.pool.destroy();
  }
}
