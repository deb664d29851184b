// Any OpenAI-compatible API: bearer auth, paths under the base URL (which includes /v1); a
// `preset` names a known server (its base URL, and what it accepts of OpenAI's parameters).
import type { ProviderConfig, UpstreamConfig } from '../../config/schema.ts';
import type { Endpoint, ProviderRequest, RealtimeTarget, ResponseHandler, UpstreamModel } from '../types.ts';
import { PooledProvider } from '../pooled-provider.ts';
import { ParameterPolicy } from '../parameter-policy.ts';
import { PRESETS } from './presets.ts';

const PATHS: Partial<Record<Endpoint, string>> = {
  chat: '/chat/completions',
  completions: '/completions',
  embeddings: '/embeddings',
  responses: '/responses',
  realtime: '/realtime',
};

export const OPENAI_DEFAULT_BASE_URL = 'https://api.openai.com/v1';

export class OpenAIProvider extends PooledProvider {
  readonly type = 'openai';
  readonly api = 'openai';
  readonly #credentials: Record<string, string>;
  readonly parameters: ParameterPolicy | undefined;

  constructor(config: ProviderConfig, upstream: UpstreamConfig) {
    const preset = config.preset === undefined ? undefined : PRESETS[config.preset];
    super(config.name, config.base_url ?? preset?.baseUrl ?? OPENAI_DEFAULT_BASE_URL, upstream);
    this.parameters = preset ? new ParameterPolicy(preset) : undefined;
    this.#credentials = { ...config.headers };
    if (config.api_key) this.#credentials.authorization = `Bearer ${config.api_key}`;
  }

  supports(endpoint: Endpoint): boolean {
    return PATHS[endpoint] !== undefined;
  }

  dispatch(request: ProviderRequest, handler: ResponseHandler): void {
    this.pool.send(PATHS[request.endpoint]!, request, this.#credentials, handler);
  }

  /** `GET {base_url}/models`: `{ data: [{ id, created }] }`. */
  async listModels(signal: AbortSignal): Promise<UpstreamModel[]> {
    return openaiModelList(await this.pool.getJson('/models', this.#credentials, signal));
  }

  realtimeTarget(query: URLSearchParams): RealtimeTarget {
    const url = new URL(`${this.pool.origin}${this.pool.basePath}/realtime`);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    url.search = query.toString();
    return { url: url.toString(), headers: this.#credentials };
  }
}

/** An OpenAI-shaped model list (`{ data: [{ id, created }] }`; Azure's resource list says `created_at`). */
export function openaiModelList(answer: unknown): UpstreamModel[] {
  const list = (answer as { data?: unknown } | null)?.data;
  if (!Array.isArray(list)) throw new Error('answer has no "data" list');
  const models: UpstreamModel[] = [];
  for (const item of list as { id?: unknown; created?: unknown; created_at?: unknown }[]) {
    if (typeof item?.id !== 'string' || item.id === '') continue;
    const when = item.created ?? item.created_at;
    const created = typeof when === 'number' && Number.isFinite(when) && when >= 0 ? Math.floor(when) : 0;
    models.push({ id: item.id, created, displayName: undefined });
  }
  return models;
}
