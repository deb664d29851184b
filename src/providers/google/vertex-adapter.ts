// Vertex AI (`type: vertex`): Google's models through generateContent (`api: gemini`, the
// default) or Anthropic's on Vertex through rawPredict (`api: anthropic`: Anthropic's Messages
// body, so the provider speaks Anthropic's API to the gateway), in a project and location, with a
// Google Cloud access token of the gateway's own identity (google-token.ts).
import type { ProviderConfig, UpstreamConfig } from '../../config/schema.ts';
import type { Endpoint, ProviderEnvironment, ProviderRequest, ResponseHandler } from '../types.ts';
import { PooledProvider } from '../pooled-provider.ts';
import type { RefreshingCredential } from '../refreshing-credential.ts';
import { googleAccessToken } from './google-token.ts';
import { geminiMethod } from './gemini-adapter.ts';

/** The `anthropic_version` Vertex AI takes for Anthropic's Messages body. */
const VERTEX_ANTHROPIC_VERSION = 'vertex-2023-10-16';

/** Vertex AI's endpoint for a location (`global` has no regional host). */
export function vertexBaseUrl(location: string): string {
  return location === 'global' ? 'https://aiplatform.googleapis.com' : `https://${location}-aiplatform.googleapis.com`;
}

export class VertexProvider extends PooledProvider {
  readonly type = 'vertex';
  readonly api: 'gemini' | 'anthropic';
  readonly #token: RefreshingCredential<string>;
  readonly #headers: Record<string, string>;
  /** `/v1/projects/P/locations/L/publishers/`. */
  readonly #publishers: string;

  constructor(config: ProviderConfig, upstream: UpstreamConfig, env: ProviderEnvironment) {
    const location = config.location ?? 'global';
    super(config.name, config.base_url ?? vertexBaseUrl(location), upstream);
    this.api = config.api === 'anthropic' ? 'anthropic' : 'gemini';
    this.#headers = { ...config.headers };
    this.#publishers = `/v1/projects/${encodeURIComponent(config.project!)}/locations/${encodeURIComponent(location)}/publishers/`;
    this.#token = googleAccessToken(config.name, config.project!, env.events, env.clock);
  }

  supports(endpoint: Endpoint): boolean {
    return this.api === 'anthropic' ? endpoint === 'messages' : endpoint === 'generate_content' || endpoint === 'gemini_count_tokens' || endpoint === 'embed_content';
  }

  dispatch(request: ProviderRequest, handler: ResponseHandler): void {
    const { model, stream, ...rest } = request.json;
    let path: string;
    let body: Record<string, unknown>;
    if (request.endpoint === 'messages') {
      path = `${this.#publishers}anthropic/models/${encodeURIComponent(String(model))}:${stream === true ? 'streamRawPredict' : 'rawPredict'}`;
      body = { ...rest, anthropic_version: VERTEX_ANTHROPIC_VERSION };
      if (stream === true) body.stream = true;
    } else {
      path = `${this.#publishers}google/${geminiMethod(request.endpoint, model, stream === true)}`;
      // Vertex's countTokens takes the request's fields themselves, not the Gemini API's generateContentRequest.
      const counted = request.endpoint === 'gemini_count_tokens' ? (rest.generateContentRequest as Record<string, unknown> | undefined) : undefined;
      if (counted !== undefined) {
        const { model: _model, ...fields } = counted;
        body = fields;
      } else if (request.endpoint === 'embed_content') {
        // Vertex's embedding models answer `:predict`, one instance per text, not batchEmbedContents.
        path = `${this.#publishers}google/models/${encodeURIComponent(String(model))}:predict`;
        body = predictBody(rest.requests);
      } else body = rest;
    }
    const bytes = Buffer.from(JSON.stringify(body));
    const forwarded: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(request.headers)) if (!name.startsWith('anthropic-') && !name.startsWith('x-goog-')) forwarded[name] = value;
    const ready = this.#token.get().then((token) => ({
      path,
      headers: { ...forwarded, ...this.#headers, authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': String(bytes.length), 'x-request-id': request.requestId },
      body: bytes,
    }));
    this.pool.sendWhenReady(ready, handler);
  }
}

/** batchEmbedContents' requests as a `:predict` body: `{instances: [{content}], parameters: {outputDimensionality}}`. */
function predictBody(requests: unknown): Record<string, unknown> {
  const list = Array.isArray(requests) ? (requests as { content?: { parts?: { text?: unknown }[] }; outputDimensionality?: unknown }[]) : [];
  const instances = list.map((r) => ({ content: String(r.content?.parts?.[0]?.text ?? '') }));
  const dimensions = list[0]?.outputDimensionality;
  return dimensions === undefined ? { instances } : { instances, parameters: { outputDimensionality: dimensions } };
}
