// A mock of Google's generative AI services for the tests of the `gemini` and `vertex` providers.
// It answers as Google's services do, in their shapes and error bodies, and is checked by Google's
// own SDK (`@google/genai`) and auth library (`google-auth-library`):
// - the Gemini API (generativelanguage, under /v1beta, /v1 and /v1alpha): `models/{model}:`
//   `generateContent`, `streamGenerateContent` (SSE `data:` events ended by `\r\n\r\n` with
//   `?alt=sse`, else one JSON array streamed), `countTokens`, `embedContent`,
//   `batchEmbedContents`, and `GET models` (paged) and `GET models/{model}`. Credentials: the
//   `x-goog-api-key` header or the `key` query parameter (a token the mock issued also passes).
// - Vertex AI (under /v1 and /v1beta1): `projects/{p}/locations/{l}/publishers/google/models/
//   {model}:` `generateContent`, `streamGenerateContent`, `countTokens`, `predict` (the text
//   embedding models), and Anthropic's models on Vertex (`publishers/anthropic/models/{model}:`
//   `rawPredict`, `streamRawPredict`: Anthropic's Messages body with `anthropic_version:
//   "vertex-2023-10-16"` and no `model`, answered in Anthropic's JSON and SSE; and
//   `count-tokens:rawPredict`). Credentials: `Authorization: Bearer` with a token one of the
//   mock's token sources issued, not expired, with the cloud-platform scope; the project and
//   location of the path must be the mock's.
// - Google Cloud's token sources: the OAuth token endpoint of a service account key file
//   (`POST /token`: a JWT bearer assertion, verified with the public half of the key pair the mock
//   generated for `serviceAccountKey()`), the STS token exchange of workload identity federation
//   (`POST /v1/token`, for `externalAccountConfig()`), and the metadata server
//   (`/computeMetadata/v1/...` with `Metadata-Flavor: Google`; google-auth-library finds it at
//   `GCE_METADATA_HOST`).
//
// Text is echoed ("Gemini says: <last user text>", "Claude says: ..."), streamed in `chunks`
// pieces. Triggers: the request header `x-mock-google` (comma-separated: `rate_limited`,
// `server_error`, `unavailable`, `context_length`, `cut`, `cut_first`, `slow_first:<ms>`, `slow:<ms>`, `hold`),
// or the `fail` option/method; a last user text containing GEMINI_TOOL (a function call, or a
// tool_use block for Anthropic's models), GEMINI_BLOCK (the prompt blocked) or GEMINI_SAFETY (the
// candidate stopped for safety). Every request is recorded, token and metadata requests included.
//
// Only node: built-ins and erasable TypeScript: Node runs this file by type stripping.

import { createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash, generateKeyPairSync, randomBytes, verify, type KeyObject } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';

export type GoogleFailure = 'rate_limited' | 'server_error' | 'unavailable' | 'context_length';
export type GoogleTokenSource = 'serviceAccount' | 'externalAccount' | 'metadata';

export interface GoogleUsage {
  prompt: number;
  candidates: number;
  /** `cachedContentTokenCount` (part of the prompt), reported when above 0. */
  cached?: number;
  /** `thoughtsTokenCount`, reported (and added to the total) when above 0. */
  thoughts?: number;
}

export interface MockGoogleOptions {
  /** The Gemini API key. */
  apiKey?: string;
  /** The Google Cloud project (id) and its number; a Vertex path may name either. */
  project?: string;
  projectNumber?: string;
  /** The Vertex AI location (default us-central1). */
  location?: string;
  /** Google's models served and listed (default: Gemini 2.5/2.0 and embedding models). */
  models?: readonly string[];
  /** Lifetime of issued tokens in seconds (`expires_in`; default 3599, as Google answers). */
  tokenLifetimeSec?: number;
  /** Text chunks of a streamed answer (default 3). */
  chunks?: number;
  /** Token counts reported (default 9 prompt, 4 candidates). */
  usage?: GoogleUsage;
  /** Answer every model request with this failure (see also `fail()`). */
  fail?: GoogleFailure;
  /** The `RetryInfo.retryDelay` of a Gemini API 429, in seconds (default 13). */
  retryDelaySec?: number;
  /** The external (OIDC) token the STS accepts as `subject_token`. */
  subjectToken?: string;
  /** The workload identity provider the STS accepts as `audience`. */
  audience?: string;
}

export interface GoogleRequest {
  method: string;
  /** The path, decoded, without the query string. */
  path: string;
  query: Record<string, string>;
  headers: IncomingHttpHeaders;
  raw: string;
  /** JSON, or the fields of a form body (the token endpoints); undefined when neither parses. */
  body: unknown;
  /** The client went away before the answer ended (not set when the mock cut the connection). */
  aborted: boolean;
}

export interface IssuedToken {
  token: string;
  source: GoogleTokenSource;
  scopes: string[];
  /** ms since epoch. */
  expiresAt: number;
}

/** A service account key file, as the Cloud console downloads it. */
export interface ServiceAccountKey {
  type: 'service_account';
  project_id: string;
  private_key_id: string;
  private_key: string;
  client_email: string;
  client_id: string;
  auth_uri: string;
  token_uri: string;
  auth_provider_x509_cert_url: string;
  client_x509_cert_url: string;
  universe_domain: string;
}

/** The credential configuration of workload identity federation with a file-sourced token. */
export interface ExternalAccountConfig {
  type: 'external_account';
  audience: string;
  subject_token_type: string;
  token_url: string;
  credential_source: { file: string; format: { type: 'text' } };
  universe_domain: string;
}

export interface MockGoogle {
  /** http://127.0.0.1:PORT: the base URL of every API of the mock (`httpOptions.baseUrl`). */
  url: string;
  port: number;
  /** `127.0.0.1:PORT`, the value of GCE_METADATA_HOST. */
  metadataHost: string;
  apiKey: string;
  project: string;
  projectNumber: string;
  location: string;
  /** The service account of `serviceAccountKey()` (also the metadata server's default account). */
  clientEmail: string;
  /** `${url}/token`, the `token_uri` of the key file. */
  tokenUrl: string;
  /** `${url}/v1/token`, the STS endpoint of `externalAccountConfig()`. */
  stsUrl: string;
  subjectToken: string;
  audience: string;
  /** Every request, in arrival order. */
  requests: GoogleRequest[];
  /** Tokens issued since the last reset, in order. */
  tokens: IssuedToken[];
  /** How many tokens each source issued since the last reset. */
  readonly issued: Readonly<Record<GoogleTokenSource, number>>;
  /** A complete service account key file whose key the token endpoint accepts. */
  serviceAccountKey(): ServiceAccountKey;
  /** An external account credential reading its subject token from `subjectTokenFile`. */
  externalAccountConfig(subjectTokenFile: string): ExternalAccountConfig;
  /**
   * A fetch that sends requests for Google's hosts (`*.googleapis.com`, the metadata server) to the
   * mock, as a DNS override would: google-auth-library posts a service account's assertion to
   * https://oauth2.googleapis.com/token whatever the key file's `token_uri` says, so a test hands
   * this to the library (`clientOptions.transporterOptions.fetchImplementation`).
   */
  googleFetch: typeof fetch;
  /** Makes every token issued so far expired. */
  expireTokens(): void;
  /** Answers every following model request with this failure; undefined: back to normal. */
  fail(failure: GoogleFailure | undefined): void;
  /** Forgets the recorded requests, the issued list and the counts (tokens stay valid). */
  reset(): void;
  close(): Promise<void>;
}

export const MOCK_GOOGLE_HEADER = 'x-mock-google';
export const GEMINI_TOOL = 'GEMINI_TOOL';
export const GEMINI_BLOCK = 'GEMINI_BLOCK';
export const GEMINI_SAFETY = 'GEMINI_SAFETY';
export const CLOUD_PLATFORM_SCOPE = 'https://www.googleapis.com/auth/cloud-platform';
export const JWT_BEARER_GRANT = 'urn:ietf:params:oauth:grant-type:jwt-bearer';
export const TOKEN_EXCHANGE_GRANT = 'urn:ietf:params:oauth:grant-type:token-exchange';
export const ACCESS_TOKEN_TYPE = 'urn:ietf:params:oauth:token-type:access_token';
/** The audience of a service account's assertion (what google-auth-library signs). */
export const GOOGLE_TOKEN_AUDIENCE = 'https://oauth2.googleapis.com/token';
export const VERTEX_ANTHROPIC_VERSION = 'vertex-2023-10-16';

export const DEFAULT_GOOGLE_MODELS: readonly string[] = [
  'gemini-2.5-flash', 'gemini-2.5-pro', 'gemini-2.0-flash', 'gemini-embedding-001', 'text-embedding-004', 'text-embedding-005',
];

const FAILURES: readonly string[] = ['rate_limited', 'server_error', 'unavailable', 'context_length'];
const SUBJECT_TOKEN_TYPES: readonly string[] = [
  'urn:ietf:params:oauth:token-type:jwt', 'urn:ietf:params:oauth:token-type:id_token', 'urn:ietf:params:oauth:token-type:saml2',
];
const METADATA_BASE = '/computeMetadata/v1';
const HOLD_INTERVAL_MS = 200;

// Messages as Google words them.
const KEY_INVALID = 'API key not valid. Please pass a valid API key.';
const UNREGISTERED = "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.";
const CREDENTIALS_INVALID = 'Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.';
const CREDENTIALS_MISSING = 'Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.';
const API_KEY_NOT_SUPPORTED = 'API keys are not supported by this API. Expected OAuth2 access token or other authentication credentials that assert a principal. See https://cloud.google.com/docs/authentication';
const RATE_LIMIT_HELP = 'https://ai.google.dev/gemini-api/docs/rate-limits';

type Json = Record<string, unknown>;
type Api = 'gemini' | 'vertex' | 'anthropic';

interface Settings {
  apiKey: string;
  project: string;
  projectNumber: string;
  location: string;
  models: readonly string[];
  tokenLifetimeSec: number;
  chunks: number;
  usage: Required<GoogleUsage>;
  fail: GoogleFailure | undefined;
  retryDelaySec: number;
  subjectToken: string;
  audience: string;
}

interface State {
  opts: Settings;
  url: string;
  clientEmail: string;
  clientId: string;
  keyId: string;
  privateKeyPem: string;
  publicKey: KeyObject;
  requests: GoogleRequest[];
  tokens: Map<string, IssuedToken>;
  issuedList: IssuedToken[];
  issued: Record<GoogleTokenSource, number>;
}

interface Ctx {
  state: State;
  req: IncomingMessage;
  res: ServerResponse;
  path: string;
  query: Record<string, string>;
  body: unknown;
  raw: string;
  /** The mock destroyed the connection on purpose (`cut`). */
  cut: boolean;
}

/** What the `x-mock-google` header (and the `fail` setting) ask of one request. */
interface Behaviour {
  failure: GoogleFailure | undefined;
  cut: boolean;
  /** The connection dropped after the headers, before the first frame. */
  cutFirst: boolean;
  hold: boolean;
  slowFirstMs: number;
  slowMs: number;
}

export function startMockGoogle(options: MockGoogleOptions = {}): Promise<MockGoogle> {
  const project = options.project ?? 'sluice-mock-project';
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const state: State = {
    opts: {
      apiKey: options.apiKey ?? 'AIzaSy' + randomBytes(24).toString('base64url').slice(0, 33),
      project,
      projectNumber: options.projectNumber ?? '123456789012',
      location: options.location ?? 'us-central1',
      models: options.models ?? DEFAULT_GOOGLE_MODELS,
      tokenLifetimeSec: options.tokenLifetimeSec ?? 3599,
      chunks: Math.max(1, options.chunks ?? 3),
      usage: { prompt: 9, candidates: 4, cached: 0, thoughts: 0, ...options.usage },
      fail: options.fail,
      retryDelaySec: options.retryDelaySec ?? 13,
      subjectToken: options.subjectToken ?? 'eyJhbGciOiJSUzI1NiJ9.mock-oidc-subject-token.sig',
      audience: options.audience ?? `//iam.googleapis.com/projects/${options.projectNumber ?? '123456789012'}/locations/global/workloadIdentityPools/sluice-pool/providers/sluice-provider`,
    },
    url: '',
    clientEmail: `sluice-gateway@${project}.iam.gserviceaccount.com`,
    clientId: '1' + Array.from(randomBytes(20), (b) => String(b % 10)).join(''),
    keyId: randomBytes(20).toString('hex'),
    privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    publicKey,
    requests: [],
    tokens: new Map(),
    issuedList: [],
    issued: { serviceAccount: 0, externalAccount: 0, metadata: 0 },
  };
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (chunk: Buffer) => parts.push(chunk));
    req.on('end', () => onRequest(state, req, res, Buffer.concat(parts).toString('utf8')));
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as AddressInfo).port;
      const url = `http://127.0.0.1:${port}`;
      state.url = url;
      const { opts } = state;
      let closing: Promise<void> | undefined;
      resolve({
        url, port, metadataHost: `127.0.0.1:${port}`, apiKey: opts.apiKey, project: opts.project, projectNumber: opts.projectNumber,
        location: opts.location, clientEmail: state.clientEmail, tokenUrl: `${url}/token`, stsUrl: `${url}/v1/token`,
        subjectToken: opts.subjectToken, audience: opts.audience, requests: state.requests, tokens: state.issuedList,
        get issued() { return { ...state.issued }; },
        serviceAccountKey: () => serviceAccountKey(state),
        externalAccountConfig: (file) => ({
          type: 'external_account', audience: opts.audience, subject_token_type: 'urn:ietf:params:oauth:token-type:jwt',
          token_url: `${url}/v1/token`, credential_source: { file, format: { type: 'text' } }, universe_domain: 'googleapis.com',
        }),
        googleFetch: googleFetch(url),
        expireTokens: () => { for (const token of state.tokens.values()) token.expiresAt = 0; },
        fail: (failure) => { opts.fail = failure; },
        reset: () => {
          state.requests.length = 0;
          state.issuedList.length = 0;
          state.issued = { serviceAccount: 0, externalAccount: 0, metadata: 0 };
        },
        close: () => (closing ??= new Promise<void>((done) => { server.close(() => done()); server.closeAllConnections(); })),
      });
    });
  });
}

function serviceAccountKey(state: State): ServiceAccountKey {
  return {
    type: 'service_account', project_id: state.opts.project, private_key_id: state.keyId, private_key: state.privateKeyPem,
    client_email: state.clientEmail, client_id: state.clientId, auth_uri: 'https://accounts.google.com/o/oauth2/auth',
    token_uri: `${state.url}/token`, auth_provider_x509_cert_url: 'https://www.googleapis.com/oauth2/v1/certs',
    client_x509_cert_url: `https://www.googleapis.com/robot/v1/metadata/x509/${encodeURIComponent(state.clientEmail)}`,
    universe_domain: 'googleapis.com',
  };
}

function googleFetch(mockUrl: string): typeof fetch {
  const isGoogle = (host: string): boolean => host.endsWith('.googleapis.com') || host === 'metadata.google.internal' || host === '169.254.169.254';
  return (input, init) => {
    const target = new URL(input instanceof Request ? input.url : String(input));
    if (!isGoogle(target.hostname)) return fetch(input, init);
    const local = new URL(target.pathname + target.search, mockUrl);
    return input instanceof Request ? fetch(new Request(local, input), init) : fetch(local, init);
  };
}

// ---------------------------------------------------------------------------------------------------
// Routing

const GEMINI_METHOD_ROUTE = /^\/(v1|v1beta|v1alpha)\/models\/([^/:]+):([A-Za-z]+)$/;
const GEMINI_MODELS_ROUTE = /^\/(v1|v1beta|v1alpha)\/models(?:\/([^/:]+))?$/;
const VERTEX_ROUTE = /^\/(v1|v1beta1)\/projects\/([^/]+)\/locations\/([^/]+)\/publishers\/([^/]+)\/models\/([^/:]+):([A-Za-z]+)$/;

function onRequest(state: State, req: IncomingMessage, res: ServerResponse, raw: string): void {
  const url = new URL(req.url ?? '/', 'http://mock');
  let path = url.pathname;
  try { path = decodeURIComponent(path); } catch { /* recorded as sent */ }
  const query = Object.fromEntries(url.searchParams);
  const body = parseBody(req, raw);
  const record: GoogleRequest = { method: req.method ?? 'GET', path, query, headers: req.headers, raw, body, aborted: false };
  state.requests.push(record);
  const ctx: Ctx = { state, req, res, path, query, body, raw, cut: false };
  res.on('close', () => { if (!res.writableFinished && !ctx.cut) record.aborted = true; });
  route(ctx).catch((error: unknown) => {
    if (!res.headersSent) sendJson(ctx, 500, googleError(500, 'INTERNAL', `mock failure: ${String(error)}`));
    else res.destroy();
  });
}

async function route(ctx: Ctx): Promise<void> {
  const { path, req } = ctx;
  const post = req.method === 'POST';
  if (path === '/' || path === METADATA_BASE || path.startsWith(METADATA_BASE + '/')) return metadata(ctx);
  if (path === '/token' && post) return serviceAccountToken(ctx);
  if (path === '/v1/token' && post) return stsToken(ctx);
  const vertex = VERTEX_ROUTE.exec(path);
  if (vertex !== null && post) {
    const [, version = '', project = '', location = '', publisher = '', model = '', method = ''] = vertex;
    return vertexRequest(ctx, { version, project, location, publisher, model, method });
  }
  const method = GEMINI_METHOD_ROUTE.exec(path);
  if (method !== null && post) return geminiRequest(ctx, method[1]!, method[2]!, method[3]!);
  const models = GEMINI_MODELS_ROUTE.exec(path);
  if (models !== null && req.method === 'GET') {
    if (!geminiAuthorized(ctx)) return;
    return models[2] === undefined ? listModels(ctx) : getModel(ctx, models[1]!, models[2]);
  }
  sendJson(ctx, 404, googleError(404, 'NOT_FOUND', `The requested URL ${path} was not found on this server.`));
}

// ---------------------------------------------------------------------------------------------------
// The Gemini API

/** The methods of a model the mock answers (those its models list, less batches and caches). */
const GEMINI_METHODS: readonly string[] = ['generateContent', 'streamGenerateContent', 'countTokens', 'embedContent', 'batchEmbedContents'];

async function geminiRequest(ctx: Ctx, version: string, model: string, method: string): Promise<void> {
  if (!geminiAuthorized(ctx)) return;
  const info = ctx.state.opts.models.includes(model) ? modelInfo(model) : undefined;
  const methods = (info?.supportedGenerationMethods ?? []) as string[];
  const supported = GEMINI_METHODS.includes(method) && methods.includes(method === 'streamGenerateContent' ? 'generateContent' : method);
  if (!supported) {
    return sendJson(ctx, 404, googleError(404, 'NOT_FOUND', `models/${model} is not found for API version ${version}, or is not supported for ${method}. Call ListModels to see the list of available models and their supported methods.`));
  }
  if (!isObject(ctx.body)) return sendJson(ctx, 400, invalidJson());
  const json = ctx.body;
  const b = behaviour(ctx);
  if (!(await startAnswer(ctx, b))) return;
  if (b.failure !== undefined) return sendJson(ctx, ...failure('gemini', b.failure, model, ctx.state));
  switch (method) {
    case 'generateContent':
    case 'streamGenerateContent':
      return generate(ctx, b, 'gemini', model, json, method === 'streamGenerateContent');
    case 'countTokens':
      return countTokens(ctx, 'gemini', json);
    case 'embedContent': {
      if (!isObject(json.content)) return sendJson(ctx, 400, googleError(400, 'INVALID_ARGUMENT', '* EmbedContentRequest.content: content is not specified\n'));
      return sendJson(ctx, 200, { embedding: { values: embedding(partsText(json.content), dimensions(model, json.outputDimensionality)) } });
    }
    case 'batchEmbedContents':
      return batchEmbed(ctx, model, json);
  }
}

/** The API key (header, else `key` query parameter) or, without one, a token the mock issued. */
function geminiAuthorized(ctx: Ctx): boolean {
  const header = ctx.req.headers['x-goog-api-key'];
  const key = typeof header === 'string' ? header : ctx.query.key;
  const service = { service: 'generativelanguage.googleapis.com' };
  if (key === undefined) {
    const bearer = bearerToken(ctx);
    if (bearer === undefined) {
      sendJson(ctx, 403, googleError(403, 'PERMISSION_DENIED', UNREGISTERED));
      return false;
    }
    const token = ctx.state.tokens.get(bearer);
    if (token === undefined || token.expiresAt <= Date.now()) {
      const reason = token === undefined ? 'ACCESS_TOKEN_TYPE_UNSUPPORTED' : 'ACCESS_TOKEN_EXPIRED';
      sendJson(ctx, 401, googleError(401, 'UNAUTHENTICATED', CREDENTIALS_INVALID, [errorInfo(reason, service)]));
      return false;
    }
    return true;
  }
  if (key !== ctx.state.opts.apiKey) {
    sendJson(ctx, 400, googleError(400, 'INVALID_ARGUMENT', KEY_INVALID, [
      errorInfo('API_KEY_INVALID', service),
      { '@type': 'type.googleapis.com/google.rpc.LocalizedMessage', locale: 'en-US', message: KEY_INVALID },
    ]));
    return false;
  }
  return true;
}

function listModels(ctx: Ctx): void {
  const requested = Number(ctx.query.pageSize ?? 50);
  const pageSize = Number.isInteger(requested) && requested > 0 ? Math.min(requested, 1000) : 50;
  let offset = 0;
  if (ctx.query.pageToken !== undefined && ctx.query.pageToken !== '') {
    const match = /^offset:(\d+)$/.exec(Buffer.from(ctx.query.pageToken, 'base64url').toString());
    if (match === null) return sendJson(ctx, 400, googleError(400, 'INVALID_ARGUMENT', 'Invalid page token.'));
    offset = Number(match[1]);
  }
  const all = ctx.state.opts.models;
  const page: Json = { models: all.slice(offset, offset + pageSize).map(modelInfo) };
  if (offset + pageSize < all.length) page.nextPageToken = Buffer.from(`offset:${offset + pageSize}`).toString('base64url');
  sendJson(ctx, 200, page);
}

function getModel(ctx: Ctx, version: string, model: string): void {
  if (ctx.state.opts.models.includes(model)) return sendJson(ctx, 200, modelInfo(model));
  sendJson(ctx, 404, googleError(404, 'NOT_FOUND', `models/${model} is not found for API version ${version}, or is not supported for get. Call ListModels to see the list of available models and their supported methods.`));
}

/** The Gemini API's description of a model, derived from its name. */
function modelInfo(name: string): Json {
  const title = name.split('-').map((w) => (w.length > 0 ? w[0]!.toUpperCase() + w.slice(1) : w)).join(' ');
  if (name.includes('embedding')) {
    return {
      name: `models/${name}`, version: name.startsWith('gemini') ? '001' : name.slice(-3), displayName: title, description: `Obtain a distributed representation of a text (${title}).`,
      inputTokenLimit: 2048, outputTokenLimit: 1, supportedGenerationMethods: ['embedContent', 'countTextTokens', 'countTokens', 'asyncBatchEmbedContent', 'batchEmbedContents'],
    };
  }
  const pro = name.includes('pro');
  return {
    name: `models/${name}`, version: name.replace(/^gemini-/, ''), displayName: title, description: `${title}: Google's multimodal model.`,
    inputTokenLimit: 1_048_576, outputTokenLimit: name.includes('2.0') ? 8192 : 65_536,
    supportedGenerationMethods: ['generateContent', 'countTokens', 'createCachedContent', 'batchGenerateContent'],
    temperature: 1, topP: 0.95, topK: pro ? 64 : 40, maxTemperature: 2, thinking: name.includes('2.5'),
  };
}

function batchEmbed(ctx: Ctx, model: string, json: Json): void {
  const requests = Array.isArray(json.requests) ? json.requests : [];
  if (requests.length === 0) return sendJson(ctx, 400, googleError(400, 'INVALID_ARGUMENT', '* BatchEmbedContentsRequest.requests: requests is not specified\n'));
  const embeddings: Json[] = [];
  for (const [i, request] of requests.entries()) {
    if (!isObject(request) || !isObject(request.content)) {
      return sendJson(ctx, 400, googleError(400, 'INVALID_ARGUMENT', `* BatchEmbedContentsRequest.requests[${i}].content: content is not specified\n`));
    }
    if (request.model !== undefined && request.model !== `models/${model}`) {
      return sendJson(ctx, 400, googleError(400, 'INVALID_ARGUMENT', `* BatchEmbedContentsRequest.requests[${i}].model: the model ${String(request.model)} is not the model of the request, models/${model}.\n`));
    }
    embeddings.push({ values: embedding(partsText(request.content), dimensions(model, request.outputDimensionality)) });
  }
  sendJson(ctx, 200, { embeddings });
}

// ---------------------------------------------------------------------------------------------------
// Vertex AI

interface VertexPath { version: string; project: string; location: string; publisher: string; model: string; method: string }

const VERTEX_RPC: Record<string, string> = {
  generateContent: 'GenerateContent', streamGenerateContent: 'StreamGenerateContent', countTokens: 'CountTokens',
  predict: 'Predict', rawPredict: 'RawPredict', streamRawPredict: 'StreamRawPredict',
};

async function vertexRequest(ctx: Ctx, p: VertexPath): Promise<void> {
  const { opts } = ctx.state;
  const rpc = VERTEX_RPC[p.method];
  const resource = `projects/${p.project}/locations/${p.location}/publishers/${p.publisher}/models/${p.model}`;
  if (rpc === undefined) return sendJson(ctx, 404, googleError(404, 'NOT_FOUND', `The requested URL ${ctx.path} was not found on this server.`));
  if (!vertexAuthorized(ctx, p.version, rpc)) return;
  if (p.project !== opts.project && p.project !== opts.projectNumber) {
    const permission = 'aiplatform.endpoints.predict';
    return sendJson(ctx, 403, googleError(403, 'PERMISSION_DENIED', `Permission '${permission}' denied on resource '//aiplatform.googleapis.com/${resource}' (or it may not exist).`, [
      errorInfo('IAM_PERMISSION_DENIED', { permission, resource }, 'aiplatform.googleapis.com'),
    ]));
  }
  const anthropic = p.publisher === 'anthropic';
  const known = anthropic ? p.model.startsWith('claude-') || p.model === 'count-tokens' : p.publisher === 'google' && opts.models.includes(p.model);
  const embeds = p.model.includes('embedding');
  const fits = anthropic
    ? p.method === 'rawPredict' || (p.method === 'streamRawPredict' && p.model !== 'count-tokens')
    : p.method === 'predict' ? embeds : p.method === 'countTokens' || !embeds;
  if (p.location !== opts.location || !known || !fits) {
    return sendJson(ctx, 404, googleError(404, 'NOT_FOUND', `Publisher Model \`${resource}\` not found.`));
  }
  if (!isObject(ctx.body)) return sendJson(ctx, 400, anthropic ? anthropicError('invalid_request_error', 'The request body is not valid JSON.') : invalidJson());
  const json = ctx.body;
  const b = behaviour(ctx);
  if (!(await startAnswer(ctx, b))) return;
  const api: Api = anthropic ? 'anthropic' : 'vertex';
  if (b.failure !== undefined) return sendJson(ctx, ...failure(api, b.failure, p.model, ctx.state));
  if (anthropic) return anthropicRequest(ctx, b, p.model, p.method === 'streamRawPredict', json);
  if (p.method === 'predict') return predictEmbeddings(ctx, p.model, json);
  if (p.method === 'countTokens') return countTokens(ctx, 'vertex', json);
  return generate(ctx, b, 'vertex', p.model, json, p.method === 'streamGenerateContent');
}

/** A Bearer token the mock issued, not expired, with the cloud-platform scope; no API keys. */
function vertexAuthorized(ctx: Ctx, version: string, rpc: string): boolean {
  const info = (reason: string): Json => errorInfo(reason, { service: 'aiplatform.googleapis.com', method: `google.cloud.aiplatform.${version}.PredictionService.${rpc}` });
  const bearer = bearerToken(ctx);
  if (bearer === undefined) {
    const withKey = ctx.req.headers['x-goog-api-key'] !== undefined || ctx.query.key !== undefined;
    sendJson(ctx, 401, googleError(401, 'UNAUTHENTICATED', withKey ? API_KEY_NOT_SUPPORTED : CREDENTIALS_MISSING, [info('CREDENTIALS_MISSING')]));
    return false;
  }
  const token = ctx.state.tokens.get(bearer);
  if (token === undefined || token.expiresAt <= Date.now()) {
    sendJson(ctx, 401, googleError(401, 'UNAUTHENTICATED', CREDENTIALS_INVALID, [info(token === undefined ? 'ACCESS_TOKEN_TYPE_UNSUPPORTED' : 'ACCESS_TOKEN_EXPIRED')]));
    return false;
  }
  if (!token.scopes.includes(CLOUD_PLATFORM_SCOPE)) {
    sendJson(ctx, 403, googleError(403, 'PERMISSION_DENIED', 'Request had insufficient authentication scopes.', [info('ACCESS_TOKEN_SCOPE_INSUFFICIENT')]));
    return false;
  }
  return true;
}

/** The text embedding models' `predict`: `{instances:[{content}], parameters}` → `{predictions:[{embeddings}]}`. */
function predictEmbeddings(ctx: Ctx, model: string, json: Json): void {
  const instances = Array.isArray(json.instances) ? json.instances : [];
  if (instances.length === 0) return sendJson(ctx, 400, googleError(400, 'INVALID_ARGUMENT', 'instances must not be empty.'));
  const parameters = isObject(json.parameters) ? json.parameters : {};
  let characters = 0;
  const predictions: Json[] = [];
  for (const instance of instances) {
    if (!isObject(instance) || typeof instance.content !== 'string') {
      return sendJson(ctx, 400, googleError(400, 'INVALID_ARGUMENT', 'Each instance must have a "content" string.'));
    }
    characters += instance.content.length;
    predictions.push({
      embeddings: { statistics: { truncated: false, token_count: tokenCount(instance.content) }, values: embedding(instance.content, dimensions(model, parameters.outputDimensionality)) },
    });
  }
  sendJson(ctx, 200, { predictions, metadata: { billableCharacterCount: characters } });
}

// ---------------------------------------------------------------------------------------------------
// generateContent and its stream (both APIs)

const KNOWN_FIELDS: readonly string[] = [
  'contents', 'tools', 'toolConfig', 'safetySettings', 'systemInstruction', 'generationConfig', 'cachedContent', 'labels', 'model',
  'serviceTier', 'store', 'continuationToken', 'modelArmorConfig', 'outputConfig',
];
const ROLES: readonly unknown[] = [undefined, 'user', 'model', 'function'];

/** Google's check of a GenerateContentRequest: known fields (camelCase or snake_case), contents with valid roles and parts. */
function contentError(json: Json): Json | undefined {
  for (const field of Object.keys(json)) {
    const camel = field.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
    if (!KNOWN_FIELDS.includes(camel)) {
      const description = `Invalid JSON payload received. Unknown name "${field}": Cannot find field.`;
      return googleError(400, 'INVALID_ARGUMENT', description, [{ '@type': 'type.googleapis.com/google.rpc.BadRequest', fieldViolations: [{ description }] }]);
    }
  }
  const contents = json.contents;
  if (!Array.isArray(contents) || contents.length === 0) return googleError(400, 'INVALID_ARGUMENT', '* GenerateContentRequest.contents: contents is not specified\n');
  for (const [i, content] of contents.entries()) {
    if (!isObject(content) || !ROLES.includes(content.role)) return googleError(400, 'INVALID_ARGUMENT', 'Please use a valid role: user, model.');
    if (!Array.isArray(content.parts) || content.parts.length === 0) {
      return googleError(400, 'INVALID_ARGUMENT', `* GenerateContentRequest.contents[${i}].parts: contents.parts must not be empty.\n`);
    }
  }
  return undefined;
}

type ReplyKind = 'text' | 'tool' | 'block' | 'safety';

function replyKind(text: string): ReplyKind {
  if (text.includes(GEMINI_BLOCK)) return 'block';
  if (text.includes(GEMINI_SAFETY)) return 'safety';
  if (text.includes(GEMINI_TOOL)) return 'tool';
  return 'text';
}

async function generate(ctx: Ctx, b: Behaviour, api: 'gemini' | 'vertex', model: string, json: Json, stream: boolean): Promise<void> {
  const invalid = contentError(json);
  if (invalid !== undefined) return sendJson(ctx, 400, invalid);
  const { state } = ctx;
  const text = lastGeminiUserText(json);
  const kind = replyKind(text);
  const base: Json = { modelVersion: model, ...(api === 'vertex' ? { createTime: new Date().toISOString() } : {}), responseId: randomBytes(17).toString('base64url') };
  const finalUsage = usageMetadata(state, api, kind === 'block' || kind === 'safety' ? 'prompt' : 'final');
  const whole = (candidate: Json): Json => ({ candidates: [candidate], usageMetadata: finalUsage, ...base });
  let answers: Json[];
  if (kind === 'block') {
    answers = [{ promptFeedback: { blockReason: 'SAFETY', safetyRatings: safetyRatings(true) }, usageMetadata: finalUsage, ...base }];
  } else if (kind === 'safety') {
    answers = [whole({ finishReason: 'SAFETY', index: 0, safetyRatings: safetyRatings(true) })];
  } else if (kind === 'tool') {
    const call = { functionCall: { name: 'get_weather', args: { city: 'Paris' } } };
    answers = [whole({ content: { role: 'model', parts: [call] }, finishReason: 'STOP', index: 0, safetyRatings: safetyRatings(false) })];
  } else if (!stream) {
    answers = [whole({ content: { role: 'model', parts: [{ text: `Gemini says: ${text}` }] }, finishReason: 'STOP', index: 0, safetyRatings: safetyRatings(false) })];
  } else {
    const pieces = split(`Gemini says: ${text}`, state.opts.chunks);
    answers = pieces.map((piece, i) => {
      const last = i === pieces.length - 1;
      const candidate: Json = { content: { role: 'model', parts: [{ text: piece }] }, index: 0 };
      if (last) Object.assign(candidate, { finishReason: 'STOP', safetyRatings: safetyRatings(false) });
      return { candidates: [candidate], usageMetadata: last ? finalUsage : usageMetadata(state, api, 'partial'), ...base };
    });
  }
  if (!stream) return sendModelJson(ctx, b, answers[0]!);
  const holdChunk = (): Json => ({ candidates: [{ content: { role: 'model', parts: [{ text: ' …' }] }, index: 0 }], usageMetadata: usageMetadata(state, api, 'partial'), ...base });
  if (ctx.query.alt === 'sse') {
    const frame = (event: Json): string => `data: ${JSON.stringify(event)}\r\n\r\n`;
    return sendStream(ctx, b, { headers: { 'content-type': 'text/event-stream', 'content-disposition': 'attachment' }, frames: answers.map(frame), lead: 1, holdFrame: () => frame(holdChunk()) });
  }
  // Without alt=sse: one JSON array, its elements streamed as they come.
  const element = (event: Json, first: boolean): string => `${first ? '[' : '\n,\r\n'}${JSON.stringify(event, null, 2)}`;
  return sendStream(ctx, b, {
    headers: { 'content-type': 'application/json; charset=UTF-8' }, frames: answers.map((a, i) => element(a, i === 0)), trailer: '\n]', lead: 1,
    holdFrame: () => element(holdChunk(), false),
  });
}

function countTokens(ctx: Ctx, api: 'gemini' | 'vertex', json: Json): void {
  const request = isObject(json.generateContentRequest) ? json.generateContentRequest : json;
  if (!Array.isArray(request.contents) || request.contents.length === 0) {
    return sendJson(ctx, 400, googleError(400, 'INVALID_ARGUMENT', '* CountTokensRequest.contents: contents is not specified\n'));
  }
  const { prompt } = ctx.state.opts.usage;
  const details = [{ modality: 'TEXT', tokenCount: prompt }];
  if (api === 'gemini') return sendJson(ctx, 200, { totalTokens: prompt, promptTokensDetails: details });
  const characters = request.contents.reduce((n: number, c: unknown) => n + (isObject(c) ? partsText(c).replace(/\s/g, '').length : 0), 0);
  sendJson(ctx, 200, { totalTokens: prompt, totalBillableCharacters: characters, promptTokensDetails: details });
}

function usageMetadata(state: State, api: 'gemini' | 'vertex', phase: 'partial' | 'prompt' | 'final'): Json {
  const { prompt, candidates, cached, thoughts } = state.opts.usage;
  const promptDetails = { promptTokensDetails: [{ modality: 'TEXT', tokenCount: prompt }] };
  const cache = cached > 0 ? { cachedContentTokenCount: cached, cacheTokensDetails: [{ modality: 'TEXT', tokenCount: cached }] } : {};
  const traffic = api === 'vertex' ? { trafficType: 'ON_DEMAND' } : {};
  if (phase !== 'final') return { promptTokenCount: prompt, totalTokenCount: prompt, ...cache, ...promptDetails, ...traffic };
  return {
    promptTokenCount: prompt, candidatesTokenCount: candidates, totalTokenCount: prompt + candidates + thoughts, ...cache, ...promptDetails,
    ...(api === 'vertex' ? { candidatesTokensDetails: [{ modality: 'TEXT', tokenCount: candidates }] } : {}),
    ...(thoughts > 0 ? { thoughtsTokenCount: thoughts } : {}), ...traffic,
  };
}

function safetyRatings(blocked: boolean): Json[] {
  const categories = ['HARM_CATEGORY_HATE_SPEECH', 'HARM_CATEGORY_DANGEROUS_CONTENT', 'HARM_CATEGORY_HARASSMENT', 'HARM_CATEGORY_SEXUALLY_EXPLICIT'];
  return categories.map((category) => (blocked && category === 'HARM_CATEGORY_DANGEROUS_CONTENT'
    ? { category, probability: 'HIGH', blocked: true }
    : { category, probability: 'NEGLIGIBLE' }));
}

// ---------------------------------------------------------------------------------------------------
// Anthropic's models on Vertex AI

async function anthropicRequest(ctx: Ctx, b: Behaviour, model: string, stream: boolean, json: Json): Promise<void> {
  const countOnly = model === 'count-tokens';
  let invalid: string | undefined;
  if (!countOnly && json.anthropic_version === undefined) invalid = 'anthropic_version: Field required';
  else if (!countOnly && json.anthropic_version !== VERTEX_ANTHROPIC_VERSION) invalid = `anthropic_version: Input should be '${VERTEX_ANTHROPIC_VERSION}'`;
  else if (!countOnly && 'model' in json) invalid = 'model: Extra inputs are not permitted';
  else if (countOnly && typeof json.model !== 'string') invalid = 'model: Field required';
  else if (!countOnly && typeof json.max_tokens !== 'number') invalid = 'max_tokens: Field required';
  else if (!Array.isArray(json.messages) || json.messages.length === 0) invalid = 'messages: Field required';
  if (invalid !== undefined) return sendJson(ctx, 400, anthropicError('invalid_request_error', invalid));
  const { prompt, candidates, cached } = ctx.state.opts.usage;
  if (countOnly) return sendJson(ctx, 200, { input_tokens: prompt });

  const text = lastAnthropicUserText(json.messages as unknown[]);
  const tool = text.includes(GEMINI_TOOL);
  const reply = `Claude says: ${text}`;
  const toolUse = { type: 'tool_use', id: 'toolu_vrtx_' + base62(24), name: 'get_weather', input: { city: 'Paris' } };
  const message: Json = {
    id: 'msg_vrtx_' + base62(24), type: 'message', role: 'assistant', model: model.replace('@', '-'),
    content: tool ? [toolUse] : [{ type: 'text', text: reply }], stop_reason: tool ? 'tool_use' : 'end_turn', stop_sequence: null,
    usage: { input_tokens: prompt, cache_creation_input_tokens: 0, cache_read_input_tokens: cached, output_tokens: candidates },
  };
  if (!stream) return sendModelJson(ctx, b, message);

  const frame = (event: Json): string => `event: ${String(event.type)}\ndata: ${JSON.stringify(event)}\n\n`;
  const start = { ...message, content: [], stop_reason: null, stop_sequence: null, usage: { ...(message.usage as Json), output_tokens: 1 } };
  const deltas = tool
    ? split(JSON.stringify(toolUse.input), ctx.state.opts.chunks).map((partial_json) => ({ type: 'input_json_delta', partial_json }))
    : split(reply, ctx.state.opts.chunks).map((piece) => ({ type: 'text_delta', text: piece }));
  const events: Json[] = [
    { type: 'message_start', message: start },
    { type: 'content_block_start', index: 0, content_block: tool ? { ...toolUse, input: {} } : { type: 'text', text: '' } },
    { type: 'ping' },
    ...deltas.map((delta) => ({ type: 'content_block_delta', index: 0, delta })),
    { type: 'content_block_stop', index: 0 },
    { type: 'message_delta', delta: { stop_reason: message.stop_reason, stop_sequence: null }, usage: { output_tokens: candidates } },
    { type: 'message_stop' },
  ];
  return sendStream(ctx, b, {
    headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' }, frames: events.map(frame), lead: 3,
    holdFrame: () => frame({ type: 'content_block_delta', index: 0, delta: tool ? { type: 'input_json_delta', partial_json: '' } : { type: 'text_delta', text: ' …' } }),
  });
}

function anthropicError(type: string, message: string): Json {
  return { type: 'error', error: { type, message } };
}

// ---------------------------------------------------------------------------------------------------
// Failures and behaviours

function behaviour(ctx: Ctx): Behaviour {
  const b: Behaviour = { failure: ctx.state.opts.fail, cut: false, cutFirst: false, hold: false, slowFirstMs: 0, slowMs: 0 };
  const header = ctx.req.headers[MOCK_GOOGLE_HEADER];
  for (const word of (typeof header === 'string' ? header : '').split(',')) {
    const [name = '', arg = ''] = word.trim().split(':');
    if (FAILURES.includes(name)) b.failure = name as GoogleFailure;
    else if (name === 'cut') b.cut = true;
    else if (name === 'cut_first') b.cutFirst = true;
    else if (name === 'hold') b.hold = true;
    else if (name === 'slow_first') b.slowFirstMs = Number(arg) || 0;
    else if (name === 'slow') b.slowMs = Number(arg) || 0;
  }
  return b;
}

/** Waits out `slow_first`; false when the client went away meanwhile. */
async function startAnswer(ctx: Ctx, b: Behaviour): Promise<boolean> {
  if (b.slowFirstMs > 0) await delay(b.slowFirstMs);
  return !ctx.res.destroyed;
}

/** The status and body of a failure, as each API words it. */
function failure(api: Api, kind: GoogleFailure, model: string, state: State): [number, Json] {
  const { opts } = state;
  if (api === 'anthropic') {
    switch (kind) {
      case 'rate_limited':
        return [429, googleError(429, 'RESOURCE_EXHAUSTED', `Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: anthropic-${model.replace(/@.*/, '')}. Please submit a quota increase request. https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai.`)];
      case 'server_error': return [500, anthropicError('api_error', 'Internal server error')];
      case 'unavailable': return [529, anthropicError('overloaded_error', 'Overloaded')];
      case 'context_length': return [400, anthropicError('invalid_request_error', 'prompt is too long: 200001 tokens > 200000 maximum')];
    }
  }
  const vertex = api === 'vertex';
  switch (kind) {
    case 'rate_limited': {
      if (vertex) return [429, googleError(429, 'RESOURCE_EXHAUSTED', 'Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.')];
      const metric = 'generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count';
      return [429, googleError(429, 'RESOURCE_EXHAUSTED', `You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: ${RATE_LIMIT_HELP}. To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for metric: ${metric}, limit: 1000000, model: ${model}\nPlease retry in ${opts.retryDelaySec}s.`, [
        { '@type': 'type.googleapis.com/google.rpc.QuotaFailure', violations: [{ quotaMetric: metric, quotaId: 'GenerateContentPaidTierInputTokensPerModelPerMinute', quotaDimensions: { location: 'global', model }, quotaValue: '1000000' }] },
        { '@type': 'type.googleapis.com/google.rpc.Help', links: [{ description: 'Learn more about Gemini API quotas', url: RATE_LIMIT_HELP }] },
        { '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: `${opts.retryDelaySec}s` },
      ])];
    }
    case 'server_error':
      return [500, googleError(500, 'INTERNAL', vertex ? 'Internal error encountered.' : 'An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting')];
    case 'unavailable':
      return [503, googleError(503, 'UNAVAILABLE', vertex ? 'The service is currently unavailable.' : 'The model is overloaded. Please try again later.')];
    case 'context_length': {
      const limit = 1_048_576;
      const count = limit + 2_424;
      return [400, googleError(400, 'INVALID_ARGUMENT', vertex
        ? `Unable to submit request because the input token count is ${count} but model only supports up to ${limit}. Reduce the input token count and try again. You can also use the CountTokens API to calculate prompt token count and billable characters. Learn more: https://cloud.google.com/vertex-ai/generative-ai/docs/multimodal/send-request#count-tokens`
        : `The input token count (${count}) exceeds the maximum number of tokens allowed (${limit}).`)];
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Google Cloud's token sources

function issue(state: State, source: GoogleTokenSource, scopes: string[]): IssuedToken {
  const prefix = source === 'serviceAccount' ? 'ya29.c.' : source === 'externalAccount' ? 'ya29.d.' : 'ya29.a0';
  const issued: IssuedToken = { token: prefix + randomBytes(48).toString('base64url'), source, scopes, expiresAt: Date.now() + state.opts.tokenLifetimeSec * 1000 };
  state.tokens.set(issued.token, issued);
  state.issuedList.push(issued);
  state.issued[source]++;
  return issued;
}

function oauthError(ctx: Ctx, status: number, error: string, description: string): void {
  sendJson(ctx, status, { error, error_description: description });
}

/** The OAuth token endpoint's JWT bearer grant: an RS256 assertion signed with the service account's key. */
function serviceAccountToken(ctx: Ctx): void {
  const { state } = ctx;
  const form = (isObject(ctx.body) ? ctx.body : {}) as Record<string, unknown>;
  if (form.grant_type !== JWT_BEARER_GRANT) return oauthError(ctx, 400, 'unsupported_grant_type', `Invalid grant_type: ${String(form.grant_type ?? '')}`);
  if (typeof form.assertion !== 'string' || form.assertion === '') return oauthError(ctx, 400, 'invalid_request', 'Missing required parameter: assertion');
  const [head = '', payload = '', signature = '', extra] = form.assertion.split('.');
  const header = decodeSegment(head);
  const claims = decodeSegment(payload);
  const signed = extra === undefined && header?.alg === 'RS256' && (header.kid === undefined || header.kid === state.keyId)
    && verify('RSA-SHA256', Buffer.from(`${head}.${payload}`), state.publicKey, Buffer.from(signature, 'base64url'));
  if (!signed || claims === undefined) return oauthError(ctx, 400, 'invalid_grant', 'Invalid JWT Signature.');
  if (claims.iss !== state.clientEmail) return oauthError(ctx, 400, 'invalid_grant', 'Invalid grant: account not found');
  if (claims.aud !== GOOGLE_TOKEN_AUDIENCE && claims.aud !== `${state.url}/token`) {
    return oauthError(ctx, 400, 'invalid_grant', `Invalid JWT: Failed audience check. The expected audience is ${GOOGLE_TOKEN_AUDIENCE}.`);
  }
  const now = Date.now() / 1000;
  const { iat, exp } = claims;
  if (typeof iat !== 'number' || typeof exp !== 'number' || exp - iat > 3600 || exp < now || iat > now + 300) {
    return oauthError(ctx, 400, 'invalid_grant', 'Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.');
  }
  if (typeof claims.scope !== 'string' || claims.scope.trim() === '') return oauthError(ctx, 400, 'invalid_scope', 'Invalid OAuth scope or ID token audience provided.');
  const token = issue(state, 'serviceAccount', claims.scope.trim().split(/\s+/));
  sendJson(ctx, 200, { access_token: token.token, expires_in: state.opts.tokenLifetimeSec, token_type: 'Bearer' });
}

/** The STS token exchange of workload identity federation (RFC 8693), without impersonation. */
function stsToken(ctx: Ctx): void {
  const { state } = ctx;
  const form = (isObject(ctx.body) ? ctx.body : {}) as Record<string, unknown>;
  if (form.grant_type !== TOKEN_EXCHANGE_GRANT) return oauthError(ctx, 400, 'invalid_request', 'Invalid value for "grant_type".');
  if (form.requested_token_type !== ACCESS_TOKEN_TYPE) return oauthError(ctx, 400, 'invalid_request', 'Invalid value for "requested_token_type".');
  if (!SUBJECT_TOKEN_TYPES.includes(String(form.subject_token_type))) return oauthError(ctx, 400, 'invalid_request', 'Invalid value for "subject_token_type".');
  if (form.audience !== state.opts.audience) {
    return oauthError(ctx, 400, 'invalid_target', 'The target service indicated by the "audience" parameters is invalid. This might either be because the pool or provider is disabled or deleted or because it doesn\'t exist.');
  }
  if (form.subject_token !== state.opts.subjectToken) return oauthError(ctx, 400, 'invalid_grant', 'The subject token could not be verified by the workload identity provider.');
  const scopes = typeof form.scope === 'string' && form.scope.trim() !== '' ? form.scope.trim().split(/\s+/) : [CLOUD_PLATFORM_SCOPE];
  const token = issue(state, 'externalAccount', scopes);
  sendJson(ctx, 200, { access_token: token.token, issued_token_type: ACCESS_TOKEN_TYPE, token_type: 'Bearer', expires_in: state.opts.tokenLifetimeSec });
}

/** The metadata server: only with `Metadata-Flavor: Google`, never through a proxy (`X-Forwarded-For`). */
function metadata(ctx: Ctx): void {
  const { state, req, res } = ctx;
  const { opts } = state;
  const headers: OutgoingHttpHeaders = { 'metadata-flavor': 'Google', server: 'Metadata Server for VM', 'x-xss-protection': '0', 'x-frame-options': 'SAMEORIGIN' };
  const text = (status: number, body: string, type = 'application/text'): void => {
    res.writeHead(status, { ...headers, 'content-type': type, 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };
  if (req.headers['x-forwarded-for'] !== undefined) return text(403, 'Request denied: the metadata server does not accept requests with an X-Forwarded-For header.\n', 'text/html; charset=UTF-8');
  if (req.headers['metadata-flavor'] !== 'Google') return text(403, `Your client does not have permission to get URL ${ctx.path} from this server. Missing Metadata-Flavor:Google header.\n`, 'text/html; charset=UTF-8');
  if (req.method !== 'GET') return text(405, 'Method not allowed\n', 'text/html; charset=UTF-8');
  const key = ctx.path === '/' ? '/' : ctx.path.slice(METADATA_BASE.length).replace(/\/+$/, '');
  const account = /^\/instance\/service-accounts\/([^/]+)(?:\/(token|email|scopes))?$/.exec(key);
  if (account !== null && (account[1] === 'default' || account[1] === state.clientEmail)) {
    if (account[2] === 'token') {
      const scopes = ctx.query.scopes !== undefined ? ctx.query.scopes.split(',').filter(Boolean) : [CLOUD_PLATFORM_SCOPE];
      const token = issue(state, 'metadata', scopes);
      const body = JSON.stringify({ access_token: token.token, expires_in: opts.tokenLifetimeSec, token_type: 'Bearer' });
      return text(200, body, 'application/json');
    }
    if (account[2] === 'email') return text(200, state.clientEmail);
    if (account[2] === 'scopes') return text(200, `${CLOUD_PLATFORM_SCOPE}\n`);
    return text(200, 'aliases\nemail\nidentity\nscopes\ntoken\n');
  }
  const values: Record<string, string> = {
    '/': 'computeMetadata/\n',
    '': 'instance/\noauth2/\nproject/\nuniverse/\n',
    '/instance': 'attributes/\ncpu-platform\nhostname\nid\nmachine-type\nname\nservice-accounts/\nzone\n',
    '/instance/service-accounts': `default/\n${state.clientEmail}/\n`,
    '/instance/zone': `projects/${opts.projectNumber}/zones/${opts.location}-a`,
    '/instance/name': 'sluice-gateway-vm',
    '/project': 'attributes/\nnumeric-project-id\nproject-id\n',
    '/project/project-id': opts.project,
    '/project/numeric-project-id': opts.projectNumber,
    '/universe/universe-domain': 'googleapis.com',
  };
  const value = values[key];
  if (value === undefined) return text(404, 'Not Found\n', 'text/html; charset=UTF-8');
  text(200, value);
}

// ---------------------------------------------------------------------------------------------------
// Sending

interface StreamPlan {
  headers: OutgoingHttpHeaders;
  frames: string[];
  /** Written after the last frame (the JSON array's `]`). */
  trailer?: string;
  /** Frames sent before `hold` starts repeating `holdFrame`. */
  lead: number;
  holdFrame: () => string;
}

/** A stream's frames, as the behaviour asks: `slow` between them, `cut` after the first, `hold` forever. */
async function sendStream(ctx: Ctx, b: Behaviour, plan: StreamPlan): Promise<void> {
  const { res } = ctx;
  res.writeHead(200, { ...googleHeaders(), ...plan.headers });
  if (b.hold) {
    for (const frame of plan.frames.slice(0, plan.lead)) res.write(frame);
    const timer = setInterval(() => res.write(plan.holdFrame()), HOLD_INTERVAL_MS);
    await new Promise<void>((done) => res.once('close', () => done()));
    clearInterval(timer);
    return;
  }
  // `cut_first`: the headers sent, then the connection dropped before any frame.
  if (b.cutFirst) return cutAfter(ctx, '');
  for (const [i, frame] of plan.frames.entries()) {
    if (i > 0 && b.slowMs > 0) await delay(b.slowMs);
    if (res.destroyed) return;
    if (b.cut) return cutAfter(ctx, frame);
    res.write(frame);
  }
  res.end(plan.trailer ?? '');
}

/** A model's JSON answer; `hold` never answers, `cut` breaks it halfway. */
async function sendModelJson(ctx: Ctx, b: Behaviour, body: Json): Promise<void> {
  const { res } = ctx;
  if (b.hold) {
    await new Promise<void>((done) => res.once('close', () => done()));
    return;
  }
  const text = JSON.stringify(body, null, 2) + '\n';
  if (!b.cut) return sendJson(ctx, 200, body);
  res.writeHead(200, { ...googleHeaders(), 'content-type': 'application/json; charset=UTF-8', 'content-length': Buffer.byteLength(text) });
  cutAfter(ctx, text.slice(0, Math.floor(text.length / 2)));
}

/** Writes `data`, then destroys the connection once it is sent. */
function cutAfter(ctx: Ctx, data: string): void {
  ctx.cut = true;
  ctx.res.write(data, () => ctx.res.destroy());
}

function googleHeaders(): OutgoingHttpHeaders {
  return { vary: 'Origin, X-Origin, Referer', server: 'scaffolding on HTTPServer2', 'x-xss-protection': '0', 'x-frame-options': 'SAMEORIGIN', 'x-content-type-options': 'nosniff' };
}

/** JSON as Google sends it: pretty-printed, UTF-8. */
function sendJson(ctx: Ctx, status: number, body: unknown): void {
  const text = JSON.stringify(body, null, 2) + '\n';
  ctx.res.writeHead(status, { ...googleHeaders(), 'content-type': 'application/json; charset=UTF-8', 'content-length': Buffer.byteLength(text) });
  ctx.res.end(text);
}

function googleError(code: number, status: string, message: string, details?: Json[]): Json {
  return { error: { code, message, status, ...(details !== undefined ? { details } : {}) } };
}

function errorInfo(reason: string, metadata: Record<string, string>, domain = 'googleapis.com'): Json {
  return { '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason, domain, metadata };
}

function invalidJson(): Json {
  return googleError(400, 'INVALID_ARGUMENT', 'Invalid JSON payload received. Unexpected token.');
}

// ---------------------------------------------------------------------------------------------------
// Helpers

function parseBody(req: IncomingMessage, raw: string): unknown {
  if (String(req.headers['content-type']).startsWith('application/x-www-form-urlencoded')) return Object.fromEntries(new URLSearchParams(raw));
  if (raw === '') return undefined;
  try { return JSON.parse(raw) as unknown; } catch { return undefined; }
}

function bearerToken(ctx: Ctx): string | undefined {
  return /^Bearer (.+)$/i.exec(ctx.req.headers.authorization ?? '')?.[1];
}

function decodeSegment(segment: string): Json | undefined {
  try {
    const value = JSON.parse(Buffer.from(segment, 'base64url').toString('utf8')) as unknown;
    return isObject(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The text parts of a Content, joined. */
function partsText(content: Json): string {
  return Array.isArray(content.parts) ? content.parts.map((p) => (isObject(p) && typeof p.text === 'string' ? p.text : '')).join('') : '';
}

/** The text of the last user turn of a GenerateContentRequest (a function response turn has none). */
function lastGeminiUserText(json: Json): string {
  const contents = Array.isArray(json.contents) ? json.contents : [];
  const users = contents.filter((c): c is Json => isObject(c) && (c.role === undefined || c.role === 'user'));
  const last = users.at(-1);
  return last === undefined ? '' : partsText(last);
}

function lastAnthropicUserText(messages: unknown[]): string {
  const last = messages.filter((m): m is Json => isObject(m) && m.role === 'user').at(-1);
  const content = last?.content;
  if (typeof content === 'string') return content;
  return Array.isArray(content) ? content.map((c) => (isObject(c) && c.type === 'text' && typeof c.text === 'string' ? c.text : '')).join('') : '';
}

/** A model's default embedding size, or the requested `outputDimensionality`. */
function dimensions(model: string, requested: unknown): number {
  if (typeof requested === 'number' && Number.isInteger(requested) && requested > 0) return requested;
  return model.startsWith('gemini-embedding') ? 3072 : 768;
}

/** A deterministic vector derived from the text. */
function embedding(text: string, dims: number): number[] {
  const seed = createHash('sha256').update(text).digest();
  return Array.from({ length: dims }, (_, i) => Math.round(((seed[i % 32]! - 128) / 128 + i / (dims * 1000)) * 1e6) / 1e6);
}

function tokenCount(text: string): number {
  return Math.max(1, Math.ceil(text.length / 4));
}

function base62(length: number): string {
  const alphabet = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
  return Array.from(randomBytes(length), (b) => alphabet[b % 62]).join('');
}

/** `text` cut into exactly `n` consecutive pieces. */
function split(text: string, n: number): string[] {
  const size = Math.ceil(text.length / n);
  return Array.from({ length: n }, (_, i) => text.slice(i * size, (i + 1) * size));
}
