// Azure OpenAI: OpenAI's API served by an Azure resource. With `api_version`, a request goes to
// its deployment (`/openai/deployments/{model}/…?api-version=…`: a target's model is the
// deployment's name); without, to the v1 API (`/openai/v1/…`, the deployment named in the body).
// With `auth: api_key` (the default) the key goes in the `api-key` header; with `auth: entra_id`,
// a Microsoft Entra ID token of the gateway's own identity (entra-token.ts) in `Authorization`.
import type { ProviderConfig, UpstreamConfig } from '../../config/schema.ts';
import type { Endpoint, ProviderEnvironment, ProviderRequest, RealtimeTarget, ResponseHandler, UpstreamModel } from '../types.ts';
import { PooledProvider } from '../pooled-provider.ts';
import type { RefreshingCredential } from '../refreshing-credential.ts';
import { openaiModelList } from '../openai/adapter.ts';
import { entraAccessToken } from './entra-token.ts';

/** What each endpoint is called under a deployment, and in the v1 API. */
const OPERATIONS: Partial<Record<Endpoint, string>> = {
  chat: '/chat/completions',
  completions: '/completions',
  embeddings: '/embeddings',
  responses: '/responses',
};

export class AzureOpenAIProvider extends PooledProvider {
  readonly type = 'azure_openai';
  readonly api = 'openai';
  /** The config's headers, and the key (`api_key`); a token is added to them per request (`entra_id`). */
  readonly #credentials: Record<string, string>;
  /** `auth: entra_id`: the Entra ID access token; undefined: the key. */
  readonly #token: RefreshingCredential<string> | undefined;
  /** The data-plane API version (deployment paths), or undefined: the v1 API. */
  readonly #version: string | undefined;

  constructor(config: ProviderConfig, upstream: UpstreamConfig, env?: ProviderEnvironment) {
    super(config.name, config.base_url!, upstream);
    this.#version = config.api_version;
    this.#credentials = { ...config.headers };
    if (config.auth === 'entra_id') {
      if (env === undefined) throw new Error(`provider "${config.name}": auth entra_id needs the providers' environment`);
      this.#token = entraAccessToken(config.name, env.events, env.clock);
    } else if (config.api_key) {
      this.#credentials['api-key'] = config.api_key;
    }
  }

  supports(endpoint: Endpoint): boolean {
    return OPERATIONS[endpoint] !== undefined || endpoint === 'realtime';
  }

  dispatch(request: ProviderRequest, handler: ResponseHandler): void {
    const path = this.#path(request.endpoint, request.json.model);
    if (this.#token === undefined) return this.pool.send(path, request, this.#credentials, handler);
    const ready = this.#token.get().then((token) => ({
      path,
      headers: {
        ...request.headers,
        ...this.#credentials,
        authorization: `Bearer ${token}`,
        'content-type': 'application/json',
        'content-length': String(request.body.length),
        'x-request-id': request.requestId,
      },
      body: request.body,
    }));
    this.pool.sendWhenReady(ready, handler);
  }

  /** Where an endpoint's request goes; `model` is the deployment. */
  #path(endpoint: Endpoint, model: unknown): string {
    const operation = OPERATIONS[endpoint]!;
    if (this.#version === undefined) return `/openai/v1${operation}`;
    const version = `api-version=${encodeURIComponent(this.#version)}`;
    // The Responses API names its deployment in the body, under a path of its own.
    if (endpoint === 'responses') return `/openai/responses?${version}`;
    return `/openai/deployments/${encodeURIComponent(String(model))}${operation}?${version}`;
  }

  /** v1: `GET /openai/v1/models`; with an API version, the resource's models (`GET /openai/models`). */
  async listModels(signal: AbortSignal): Promise<UpstreamModel[]> {
    const path = this.#version === undefined ? '/openai/v1/models' : `/openai/models?api-version=${encodeURIComponent(this.#version)}`;
    const credentials = this.#token === undefined ? this.#credentials : { ...this.#credentials, authorization: `Bearer ${await this.#token.get()}` };
    return openaiModelList(await this.pool.getJson(path, credentials, signal));
  }

  /** The realtime API: the deployment is the client's `model`; with `entra_id`, once the token is had. */
  realtimeTarget(query: URLSearchParams): RealtimeTarget | Promise<RealtimeTarget> {
    const url = new URL(`${this.pool.origin}${this.pool.basePath}${this.#version === undefined ? '/openai/v1/realtime' : '/openai/realtime'}`);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    const params = new URLSearchParams(query);
    if (this.#version !== undefined) {
      params.set('api-version', this.#version);
      const model = params.get('model');
      params.delete('model');
      if (model !== null) params.set('deployment', model);
    }
    url.search = params.toString();
    if (this.#token === undefined) return { url: url.toString(), headers: this.#credentials };
    return this.#token.get().then((token) => ({ url: url.toString(), headers: { ...this.#credentials, authorization: `Bearer ${token}` } }));
  }
}
