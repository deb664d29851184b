// Amazon Bedrock (`type: bedrock`): its Runtime API at bedrock-runtime.REGION.amazonaws.com, every
// request signed (SigV4) with the gateway's own AWS identity. Two ways to speak to it:
//  - `api: converse` (the default): the Converse API, which serves every model Bedrock has a chat
//    form for (Anthropic, Llama, Mistral, Nova, Cohere…); clients reach it through the
//    translations to Converse;
//  - `api: anthropic`: InvokeModel with Anthropic's own Messages body, for Anthropic models: an
//    Anthropic client keeps every Anthropic feature, and the provider speaks Anthropic's API to
//    the gateway (its answers, streams and errors in Anthropic's shapes).
// Embedding models (Titan, Cohere) are reached through InvokeModel in either case. A model may be
// an id, a cross-region inference profile (`us.anthropic…`) or an ARN: it goes in the path.
import type { ProviderConfig, UpstreamConfig } from '../../config/schema.ts';
import type { Endpoint, ProviderEnvironment, ProviderRequest, ResponseHandler } from '../types.ts';
import { PooledProvider } from '../pooled-provider.ts';
import { AwsSigner } from './aws-signer.ts';
import { BedrockAnswer, loadEventStreamCodec } from './event-stream.ts';

/** The `anthropic_version` Bedrock's InvokeModel takes for Anthropic's Messages body. */
const BEDROCK_ANTHROPIC_VERSION = 'bedrock-2023-05-31';

export class BedrockProvider extends PooledProvider {
  readonly type = 'bedrock';
  readonly api: 'converse' | 'anthropic';
  readonly #signer: AwsSigner;

  constructor(config: ProviderConfig, upstream: UpstreamConfig, env: ProviderEnvironment) {
    const region = config.region!;
    super(config.name, config.base_url ?? `https://bedrock-runtime.${region}.amazonaws.com`, upstream);
    this.api = config.api === 'anthropic' ? 'anthropic' : 'converse';
    loadEventStreamCodec();
    this.#signer = new AwsSigner({ provider: config.name, region, profile: config.aws_profile, host: new URL(this.pool.origin).host, events: env.events, clock: env.clock });
  }

  supports(endpoint: Endpoint): boolean {
    if (endpoint === 'bedrock_embeddings') return true;
    return this.api === 'anthropic' ? endpoint === 'messages' || endpoint === 'count_tokens' : endpoint === 'converse' || endpoint === 'converse_count_tokens';
  }

  dispatch(request: ProviderRequest, handler: ResponseHandler): void {
    const { model, stream, ...rest } = request.json;
    const id = encodeURIComponent(String(model));
    let path: string;
    let body: Record<string, unknown> = rest;
    if (request.endpoint === 'converse') path = `/model/${id}/${stream === true ? 'converse-stream' : 'converse'}`;
    else if (request.endpoint === 'converse_count_tokens') path = `/model/${id}/count-tokens`;
    else if (request.endpoint === 'count_tokens') {
      // CountTokens' InvokeModel form: the body a request would send, base64 (a blob in JSON).
      path = `/model/${id}/count-tokens`;
      const invoke = { ...rest, anthropic_version: BEDROCK_ANTHROPIC_VERSION, max_tokens: rest.max_tokens ?? 1 };
      body = { input: { invokeModel: { body: Buffer.from(JSON.stringify(invoke)).toString('base64') } } };
    } else if (request.endpoint === 'messages') {
      path = `/model/${id}/${stream === true ? 'invoke-with-response-stream' : 'invoke'}`;
      body = { ...rest, anthropic_version: BEDROCK_ANTHROPIC_VERSION };
      const beta = betaFeatures(request.headers['anthropic-beta']);
      if (beta.length > 0) body.anthropic_beta = beta;
    } else path = `/model/${id}/invoke`;
    const bytes = Buffer.from(JSON.stringify(body));
    const headers: Record<string, string> = { 'content-type': 'application/json', accept: stream === true ? 'application/vnd.amazon.eventstream' : 'application/json' };
    const forwarded = forwardable(request.headers);
    const ready = this.#signer.sign(this.pool.basePath + path, bytes, headers).then((signed) => ({
      path,
      headers: { ...forwarded, ...signed, 'content-length': String(bytes.length), 'x-request-id': request.requestId },
      body: bytes,
    }));
    const answer = request.endpoint === 'messages' ? 'anthropic' : request.endpoint === 'count_tokens' ? 'anthropic-count' : 'converse';
    this.pool.sendWhenReady(ready, new BedrockAnswer(handler, answer));
  }
}

/** The client's headers that mean something to Bedrock: not AWS's own (a signature's), not Anthropic's (the body carries those). */
function forwardable(headers: Record<string, string | string[]>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (name.startsWith('x-amz') || name.startsWith('anthropic-') || name === 'accept') continue;
    out[name] = value;
  }
  return out;
}

/** `anthropic-beta: a, b` (one header or several) as Bedrock's `anthropic_beta` list. */
function betaFeatures(header: string | string[] | undefined): string[] {
  if (header === undefined) return [];
  return (Array.isArray(header) ? header : [header]).flatMap((value) => value.split(',')).map((name) => name.trim()).filter((name) => name !== '');
}
