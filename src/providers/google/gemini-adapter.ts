// Google's Gemini API (`type: gemini`) with an API key (`x-goog-api-key`): generateContent, its
// stream (`streamGenerateContent?alt=sse`: SSE the gateway reads as it comes) and
// batchEmbedContents, under /v1beta. Clients reach it through the translations to Gemini.
import type { ProviderConfig, UpstreamConfig } from '../../config/schema.ts';
import type { Endpoint, ProviderRequest, ResponseHandler, UpstreamModel } from '../types.ts';
import { PooledProvider } from '../pooled-provider.ts';

export const GEMINI_DEFAULT_BASE_URL = 'https://generativelanguage.googleapis.com';

/** Pages of the model list read at most. */
const MAX_PAGES = 10;

export class GeminiProvider extends PooledProvider {
  readonly type = 'gemini';
  readonly api = 'gemini';
  readonly #credentials: Record<string, string>;
  /** `/v1beta` unless the base URL names a version itself. */
  readonly #version: string;

  constructor(config: ProviderConfig, upstream: UpstreamConfig) {
    super(config.name, config.base_url ?? GEMINI_DEFAULT_BASE_URL, upstream);
    this.#version = /\/v1(beta|alpha)?$/.test(this.pool.basePath) ? '' : '/v1beta';
    this.#credentials = { ...config.headers, 'x-goog-api-key': config.api_key ?? '' };
  }

  supports(endpoint: Endpoint): boolean {
    return endpoint === 'generate_content' || endpoint === 'embed_content' || endpoint === 'gemini_count_tokens';
  }

  dispatch(request: ProviderRequest, handler: ResponseHandler): void {
    const { model, stream, ...body } = request.json;
    this.pool.send(`${this.#version}/${geminiMethod(request.endpoint, model, stream === true)}`, { ...request, body: Buffer.from(JSON.stringify(body)) }, this.#credentials, handler);
  }

  /** `GET /v1beta/models`, page by page; the ids without their `models/` prefix. */
  async listModels(signal: AbortSignal): Promise<UpstreamModel[]> {
    const models: UpstreamModel[] = [];
    let token: string | undefined;
    for (let page = 0; page < MAX_PAGES; page++) {
      const query = `?pageSize=1000${token === undefined ? '' : `&pageToken=${encodeURIComponent(token)}`}`;
      const answer = (await this.pool.getJson(`${this.#version}/models${query}`, this.#credentials, signal)) as { models?: unknown; nextPageToken?: unknown } | null;
      if (!Array.isArray(answer?.models)) throw new Error('answer has no "models" list');
      for (const item of answer.models as { name?: unknown; displayName?: unknown }[]) {
        if (typeof item?.name !== 'string' || item.name === '') continue;
        models.push({ id: item.name.replace(/^models\//, ''), created: 0, displayName: typeof item.displayName === 'string' ? item.displayName : undefined });
      }
      if (typeof answer.nextPageToken !== 'string' || answer.nextPageToken === '' || answer.nextPageToken === token) break;
      token = answer.nextPageToken;
    }
    return models;
  }
}

/** `models/{model}:method` for an endpoint (a model given as `models/x` or `publishers/…/models/x` is taken as it is). */
export function geminiMethod(endpoint: Endpoint, model: unknown, stream: boolean): string {
  const name = String(model);
  const path = name.includes('/') ? name.split('/').map(encodeURIComponent).join('/') : `models/${encodeURIComponent(name)}`;
  if (endpoint === 'embed_content') return `${path}:batchEmbedContents`;
  if (endpoint === 'gemini_count_tokens') return `${path}:countTokens`;
  return stream ? `${path}:streamGenerateContent?alt=sse` : `${path}:generateContent`;
}
