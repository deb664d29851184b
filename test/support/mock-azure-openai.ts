// A mock of Azure OpenAI for the tests of the `azure_openai` provider. It answers as Microsoft's
// service does, not as OpenAI's: the deployments API (`/openai/deployments/{deployment}/...` with a
// required `api-version` query), `/openai/responses` and `/openai/models` (also with `api-version`),
// and the v1 API (`/openai/v1/...`, no `api-version`, the deployment in the body's `model`).
// Credentials are Azure's: the `api-key` header, or `Authorization: Bearer <token>` with a token
// that the mock's own Microsoft Entra ID endpoint (`POST /{tenant}/oauth2/v2.0/token`, client
// credentials with a secret or a federated assertion) issued and that has not expired. The tenant's
// OpenID discovery document (`GET /{tenant}/v2.0/.well-known/openid-configuration`) names that
// endpoint under the origin it was asked at. MSAL (in @azure/identity) takes only an https
// authority: with the `tls` option the mock also listens over TLS (`authorityHost`), the same
// service on both ports. Instance discovery is not served: MSAL asks login.microsoftonline.com for
// it, never the authority itself, and skips it with `disableInstanceDiscovery`.
//
// Answers carry what Azure adds to OpenAI's shapes: `prompt_filter_results`, per-choice
// `content_filter_results`, `prompt_tokens_details.cached_tokens`, a first stream chunk with
// `choices: []`, and Azure's error bodies, which differ by source (the front door's
// `{"error":{"code":"404",...}}`, the token check's `{"statusCode":401,...}`, the model's
// OpenAI-like `{"error":{"message",...,"code":"content_filter","innererror"}}`).
//
// Triggers: a prompt containing FILTER_PROMPT is refused (400 content_filter); one containing
// FILTER_OUTPUT is answered with `finish_reason: "content_filter"`; the request header
// `x-mock-azure` (comma-separated): `rate_limited` or `server_error` (or the `fail` option/method)
// answers 429 or 500, `context_length` Azure's 400 context_length_exceeded; a stream's `cut_first`
// drops the connection before any event, `slow_first:<ms>` waits before it, `hold` streams until
// the caller leaves;
// `failTokens(true)` makes the token endpoint refuse every grant as Entra ID refuses an expired
// secret (or an assertion out of its time range) until `failTokens(false)`.
// Every request is recorded (method, path, query, headers, parsed body), token requests included.
//
// Only node: built-ins and erasable TypeScript: Node runs this file by type stripping.

import { createServer, type Server } from 'node:http';
import { attachRealtime } from './mock-realtime.ts';
import type { MockRequest } from './mock-upstream.ts';
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { createHash, randomBytes, randomUUID } from 'node:crypto';

export type AzureFailure = 'rate_limited' | 'server_error';

export interface MockAzureOpenAIOptions {
  /** The resource key the `api-key` header must carry. */
  apiKey?: string;
  /** Deployment name → the model Azure reports in answers (default: gpt-4o-mini, text-embedding-3-small). */
  deployments?: Record<string, string>;
  /** The `api-version` values the deployments API accepts (default: a list of real GA and preview versions). */
  apiVersions?: readonly string[];
  /** The Entra ID tenant, application (client) id, secret, and the federated assertion it accepts. */
  tenant?: string;
  clientId?: string;
  clientSecret?: string;
  clientAssertion?: string;
  /** Lifetime of issued tokens in seconds (`expires_in`; default 3599, as Entra ID answers). */
  tokenLifetimeSec?: number;
  /** Content chunks of a streamed chat answer (default 3). */
  chunks?: number;
  /** Token counts reported in `usage` (default 13 prompt, 7 completion, 0 cached). */
  usage?: { prompt: number; completion: number; cached: number };
  /** The pause between the events of a streamed chat answer, in ms (default 0: the whole stream at once). */
  chunkDelayMs?: number;
  /** Also listen over TLS (the authority MSAL requires): the certificate and key files (test/support/certs.ts's `server`). */
  tls?: { cert: string; key: string };
  /** Answer every model request with this failure (see also `fail()`). */
  fail?: AzureFailure;
  /** The `retry-after` of a 429, in seconds (default 6). */
  retryAfterSec?: number;
}

export interface AzureRequest {
  method: string;
  /** The path without the query string. */
  path: string;
  query: Record<string, string>;
  headers: IncomingHttpHeaders;
  raw: string;
  /** JSON, or the fields of a form body (the token endpoint); undefined when neither parses. */
  body: unknown;
  /** The client went away before the answer was complete (not set when the mock cut it). */
  aborted: boolean;
}

export interface IssuedToken {
  token: string;
  issuedAt: number;
  expiresAt: number;
}

export interface MockAzureOpenAI {
  /** http://127.0.0.1:PORT, the resource endpoint (what `AzureOpenAI({ endpoint })` takes). */
  url: string;
  port: number;
  apiKey: string;
  tenant: string;
  clientId: string;
  clientSecret: string;
  clientAssertion: string;
  /** `${url}/${tenant}/oauth2/v2.0/token`, the Entra ID token endpoint. */
  tokenUrl: string;
  /** The scope a token must be asked for. */
  scope: string;
  /** With the `tls` option: https://127.0.0.1:PORT, the Entra ID authority host (`AZURE_AUTHORITY_HOST`); otherwise undefined. */
  authorityHost: string | undefined;
  /** Every request, in arrival order. */
  requests: AzureRequest[];
  /** The realtime handshakes (headers, path with its query), as the shared realtime mock records them. */
  realtime: MockRequest[];
  /** How many token requests the token endpoint answered (issued or refused). */
  readonly tokenRequests: number;
  /** Every access token issued, in order, with when (ms since the epoch) and until when. */
  issued: IssuedToken[];
  /** Makes every token issued so far expired. */
  expireTokens(): void;
  /** true: the token endpoint refuses every grant (an expired secret, an assertion out of its time range); false: back to normal. */
  failTokens(failing: boolean): void;
  /** Answers every following model request with this failure; undefined: back to normal. */
  fail(failure: AzureFailure | undefined): void;
  /** Forgets the recorded requests and the token count. */
  reset(): void;
  close(): Promise<void>;
}

export const AZURE_SCOPE = 'https://cognitiveservices.azure.com/.default';
export const ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';
export const FILTER_PROMPT = 'FILTER_PROMPT';
export const FILTER_OUTPUT = 'FILTER_OUTPUT';
export const MOCK_AZURE_HEADER = 'x-mock-azure';

export const AZURE_API_VERSIONS: readonly string[] = [
  '2023-05-15', '2024-02-01', '2024-06-01', '2024-10-21', '2024-12-01-preview', '2025-01-01-preview',
  '2025-02-01-preview', '2025-03-01-preview', '2025-04-01-preview',
];

const DEFAULT_DEPLOYMENTS: Record<string, string> = {
  'gpt-4o-mini': 'gpt-4o-mini-2024-07-18',
  'text-embedding-3-small': 'text-embedding-3-small',
};

// Messages as Azure words them.
const KEY_401 = 'Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.';
const TOKEN_401 = 'Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), or have expired.';
const DEPLOYMENT_404 = 'The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.';
const FILTERED_400 = "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766";
const CONTEXT_400 = "This model's maximum context length is 128000 tokens. However, your messages resulted in 130017 tokens. Please reduce the length of the messages.";
const SERVER_500 = 'The server had an error processing your request. Sorry about that! You can retry your request, or contact us through an Azure support request at: https://go.microsoft.com/fwlink/?linkid=2213926 if you keep seeing this error.';

type Json = Record<string, unknown>;
interface Ctx { state: State; req: IncomingMessage; res: ServerResponse; body: unknown; apiVersion: string; cut: boolean; triggers?: Map<string, number> }
interface State {
  opts: Required<Omit<MockAzureOpenAIOptions, 'fail' | 'tls'>> & { fail: AzureFailure | undefined };
  requests: AzureRequest[];
  tokens: Map<string, number>; // access token → expiry (ms since epoch)
  issued: IssuedToken[];
  tokenRequests: number;
  failTokens: boolean;
}

export function startMockAzureOpenAI(options: MockAzureOpenAIOptions = {}): Promise<MockAzureOpenAI> {
  const state: State = {
    opts: {
      apiKey: options.apiKey ?? 'azure-mock-key-' + randomBytes(8).toString('hex'),
      deployments: options.deployments ?? DEFAULT_DEPLOYMENTS,
      apiVersions: options.apiVersions ?? AZURE_API_VERSIONS,
      tenant: options.tenant ?? '72f988bf-0000-4000-8000-00000000aaaa',
      clientId: options.clientId ?? '535fb089-0000-4000-8000-00000000bbbb',
      clientSecret: options.clientSecret ?? 'mock-client-secret',
      clientAssertion: options.clientAssertion ?? 'eyJhbGciOiJSUzI1NiJ9.mock-federated-token.sig',
      tokenLifetimeSec: options.tokenLifetimeSec ?? 3599,
      chunks: Math.max(1, options.chunks ?? 3),
      usage: options.usage ?? { prompt: 13, completion: 7, cached: 0 },
      retryAfterSec: options.retryAfterSec ?? 6,
      chunkDelayMs: options.chunkDelayMs ?? 0,
      fail: options.fail,
    },
    requests: [],
    tokens: new Map(),
    issued: [],
    tokenRequests: 0,
    failTokens: false,
  };
  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    const parts: Buffer[] = [];
    req.on('data', (chunk: Buffer) => parts.push(chunk));
    req.on('end', () => onRequest(state, req, res, Buffer.concat(parts).toString('utf8')));
  };
  const servers: Server[] = [createServer(handler)];
  // The realtime API (`/openai/realtime`, `/openai/v1/realtime`): the shared realtime mock, its handshakes recorded.
  const realtime: MockRequest[] = [];
  const stopRealtime = attachRealtime(servers[0]!, realtime);
  if (options.tls) servers.push(createTlsServer({ cert: readFileSync(options.tls.cert), key: readFileSync(options.tls.key) }, handler));
  return Promise.all(servers.map(listen)).then(([port, tlsPort]) => {
    const url = `http://127.0.0.1:${port!}`;
    const { opts } = state;
    let closing: Promise<void> | undefined;
    return {
      url, port: port!, apiKey: opts.apiKey, tenant: opts.tenant, clientId: opts.clientId,
      clientSecret: opts.clientSecret, clientAssertion: opts.clientAssertion,
      tokenUrl: `${url}/${opts.tenant}/oauth2/v2.0/token`, scope: AZURE_SCOPE,
      authorityHost: tlsPort === undefined ? undefined : `https://127.0.0.1:${tlsPort}`,
      requests: state.requests,
      realtime,
      get tokenRequests() { return state.tokenRequests; },
      issued: state.issued,
      expireTokens: () => { for (const token of state.tokens.keys()) state.tokens.set(token, 0); },
      failTokens: (failing) => { state.failTokens = failing; },
      fail: (failure) => { opts.fail = failure; },
      reset: () => { state.requests.length = 0; state.tokenRequests = 0; },
      close: () => (closing ??= Promise.resolve(stopRealtime()).then(() => Promise.all(servers.map((server) => new Promise<void>((done) => { server.close(() => done()); server.closeAllConnections(); })))).then(() => undefined)),
    };
  });
}

/** Listens on a free port of 127.0.0.1; resolves with the port. */
function listen(server: Server): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
  });
}

// ---------------------------------------------------------------------------------------------------
// Routing

const DEPLOYMENT_ROUTE = /^\/openai\/deployments\/([^/]+)\/(chat\/completions|completions|embeddings)$/;
const V1_ROUTE = /^\/openai\/v1\/(chat\/completions|embeddings|responses|models)$/;
const TOKEN_ROUTE = /^\/([^/]+)\/oauth2\/v2\.0\/token$/;
const DISCOVERY_ROUTE = /^\/([^/]+)\/v2\.0\/\.well-known\/openid-configuration$/;

function onRequest(state: State, req: IncomingMessage, res: ServerResponse, raw: string): void {
  const url = new URL(req.url ?? '/', 'http://mock');
  const path = url.pathname.length > 1 ? url.pathname.replace(/\/+$/, '') : url.pathname;
  const query = Object.fromEntries(url.searchParams);
  let body: unknown;
  if (String(req.headers['content-type']).startsWith('application/x-www-form-urlencoded')) {
    body = Object.fromEntries(new URLSearchParams(raw));
  } else if (raw !== '') {
    try { body = JSON.parse(raw); } catch { body = undefined; }
  }
  const record: AzureRequest = { method: req.method ?? 'GET', path, query, headers: req.headers, raw, body, aborted: false };
  state.requests.push(record);
  const ctx: Ctx = { state, req, res, body, apiVersion: query['api-version'] ?? '', cut: false };
  res.on('close', () => {
    if (!res.writableFinished && !ctx.cut) record.aborted = true;
  });

  const token = TOKEN_ROUTE.exec(path);
  if (token !== null && req.method === 'POST') return issueToken(ctx, token[1]!);
  const discovery = DISCOVERY_ROUTE.exec(path);
  if (discovery !== null && req.method === 'GET') return openIdConfiguration(ctx, discovery[1]!);
  const dep = DEPLOYMENT_ROUTE.exec(path);
  const v1 = V1_ROUTE.exec(path);
  const post = req.method === 'POST';
  const operation = dep?.[2] ?? v1?.[1] ?? (path === '/openai/responses' ? 'responses' : path === '/openai/models' ? 'models' : undefined);
  if (operation === undefined || post !== (operation !== 'models')) return notFound(ctx);
  if (v1 === null) {
    // The dated API: without an api-version the front door knows no such resource.
    if (ctx.apiVersion === '') return notFound(ctx);
    if (!state.opts.apiVersions.includes(ctx.apiVersion)) {
      return send(ctx, 400, { error: { code: 'BadRequest', message: 'API version not supported' } });
    }
  } else {
    ctx.apiVersion = 'v1';
  }
  const denied = checkAuth(ctx, v1 !== null);
  if (denied !== undefined) return send(ctx, 401, denied);
  if (operation === 'models') return send(ctx, 200, modelList(state));

  const json = isObject(body) ? body : {};
  const deployment = dep !== null ? decodeURIComponent(dep[1]!) : json.model;
  if (typeof deployment !== 'string') {
    return send(ctx, 400, { error: { message: "Missing required parameter: 'model'.", type: 'invalid_request_error', param: 'model', code: 'missing_required_parameter' } });
  }
  const model = state.opts.deployments[deployment];
  if (model === undefined) return send(ctx, 404, { error: { code: 'DeploymentNotFound', message: DEPLOYMENT_404 } });
  if ((operation === 'embeddings') !== model.includes('embedding')) {
    const op = operation === 'chat/completions' ? 'chatCompletion' : operation;
    return send(ctx, 400, { error: { code: 'OperationNotSupported', message: `The ${op} operation does not work with the specified model, ${model}. Please choose different model and try again. You can learn more about which models can be used with each operation here: https://go.microsoft.com/fwlink/?linkid=2197993.` } });
  }

  const triggers = triggersOf(req.headers[MOCK_AZURE_HEADER] ?? state.opts.fail);
  if (triggers.has('rate_limited')) return rateLimited(ctx, operation);
  if (triggers.has('server_error')) return send(ctx, 500, { error: { message: SERVER_500, type: 'server_error', param: null, code: null } });
  if (triggers.has('context_length')) return send(ctx, 400, { error: { message: CONTEXT_400, type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' } });
  ctx.triggers = triggers;
  if (operation !== 'embeddings' && raw.includes(FILTER_PROMPT)) return send(ctx, 400, promptFiltered());

  const filterOutput = raw.includes(FILTER_OUTPUT);
  if (operation === 'embeddings') return send(ctx, 200, embeddings(json, model));
  if (operation === 'responses') return send(ctx, 200, response(state, model, lastUserText(json)));
  if (operation === 'completions') return send(ctx, 200, completion(state, model, String(json.prompt ?? ''), filterOutput));
  if (json.stream === true) return streamChat(ctx, model, lastUserText(json), filterOutput);
  return send(ctx, 200, chatCompletion(state, model, lastUserText(json), filterOutput));
}

function notFound(ctx: Ctx): void {
  send(ctx, 404, { error: { code: '404', message: 'Resource not found' } });
}

/** An `api-key` header decides alone; otherwise a Bearer token the mock issued and not expired (the v1
 *  API also takes the key itself as a Bearer token, as the OpenAI client sends it). */
function checkAuth(ctx: Ctx, v1: boolean): Json | undefined {
  const { state, req } = ctx;
  const key = req.headers['api-key'];
  if (typeof key === 'string') return key === state.opts.apiKey ? undefined : { error: { code: '401', message: KEY_401 } };
  const bearer = /^Bearer (.+)$/i.exec(req.headers.authorization ?? '')?.[1];
  if (bearer === undefined) return { error: { code: '401', message: KEY_401 } };
  if (v1 && bearer === state.opts.apiKey) return undefined;
  const expires = state.tokens.get(bearer);
  return expires !== undefined && expires > Date.now() ? undefined : { statusCode: 401, message: TOKEN_401 };
}

function rateLimited(ctx: Ctx, operation: string): void {
  const name = { 'chat/completions': 'ChatCompletions', completions: 'Completions', embeddings: 'Embeddings', responses: 'Responses' }[operation];
  const seconds = ctx.state.opts.retryAfterSec;
  const message = `Requests to the ${name}_Create Operation under Azure OpenAI API version ${ctx.apiVersion} have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after ${seconds} seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.`;
  send(ctx, 429, { error: { code: '429', message } }, { 'retry-after': String(seconds), 'retry-after-ms': String(seconds * 1000) });
}

// ---------------------------------------------------------------------------------------------------
// Microsoft Entra ID: the client credentials grant, with a secret or a (federated) client assertion

/** Entra ID's error body: `AADSTS<code>` and the trace ids in the description, and the same fields apart. */
function entraError(ctx: Ctx, status: number, error: string, code: number, text: string): void {
  const trace = randomUUID();
  const correlation = randomUUID();
  const timestamp = new Date().toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  send(ctx, status, {
    error, error_description: `AADSTS${code}: ${text} Trace ID: ${trace} Correlation ID: ${correlation} Timestamp: ${timestamp}`,
    error_codes: [code], timestamp, trace_id: trace, correlation_id: correlation, error_uri: `https://login.microsoftonline.com/error?code=${code}`,
  });
}

/** The tenant's OpenID Connect discovery document (v2.0), its endpoints under the origin it was asked at. */
function openIdConfiguration(ctx: Ctx, tenant: string): void {
  if (tenant !== ctx.state.opts.tenant) {
    return entraError(ctx, 400, 'invalid_tenant', 90002, `Tenant '${tenant}' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud.`);
  }
  const scheme = (ctx.req.socket as Partial<TLSSocket>).encrypted === true ? 'https' : 'http';
  const base = `${scheme}://${ctx.req.headers.host ?? '127.0.0.1'}/${tenant}`;
  send(ctx, 200, {
    token_endpoint: `${base}/oauth2/v2.0/token`,
    token_endpoint_auth_methods_supported: ['client_secret_post', 'private_key_jwt', 'client_secret_basic'],
    jwks_uri: `${base}/discovery/v2.0/keys`,
    response_modes_supported: ['query', 'fragment', 'form_post'],
    subject_types_supported: ['pairwise'],
    id_token_signing_alg_values_supported: ['RS256'],
    response_types_supported: ['code', 'id_token', 'code id_token', 'id_token token'],
    scopes_supported: ['openid', 'profile', 'email', 'offline_access'],
    issuer: `${base}/v2.0`,
    request_uri_parameter_supported: false,
    userinfo_endpoint: 'https://graph.microsoft.com/oidc/userinfo',
    authorization_endpoint: `${base}/oauth2/v2.0/authorize`,
    device_authorization_endpoint: `${base}/oauth2/v2.0/devicecode`,
    http_logout_supported: true,
    frontchannel_logout_supported: true,
    end_session_endpoint: `${base}/oauth2/v2.0/logout`,
    claims_supported: ['sub', 'iss', 'cloud_instance_name', 'cloud_instance_host_name', 'cloud_graph_host_name', 'msgraph_host', 'aud', 'exp', 'iat', 'auth_time', 'acr', 'nonce', 'preferred_username', 'name', 'tid', 'ver', 'at_hash', 'c_hash', 'email'],
    kerberos_endpoint: `${base}/kerberos`,
    tenant_region_scope: 'EU',
    cloud_instance_name: 'microsoftonline.com',
    cloud_graph_host_name: 'graph.windows.net',
    msgraph_host: 'graph.microsoft.com',
    rbac_url: 'https://pas.windows.net',
  });
}

function issueToken(ctx: Ctx, tenant: string): void {
  const { opts } = ctx.state;
  ctx.state.tokenRequests++;
  const form = (isObject(ctx.body) ? ctx.body : {}) as Record<string, string | undefined>;
  const refuse = (status: number, error: string, code: number, text: string): void => entraError(ctx, status, error, code, text);
  if (tenant !== opts.tenant) return refuse(400, 'invalid_request', 90002, `Tenant '${tenant}' not found.`);
  if (form.grant_type !== 'client_credentials') return refuse(400, 'unsupported_grant_type', 70003, 'The app requested an unsupported grant type.');
  if (form.client_id !== opts.clientId) return refuse(400, 'unauthorized_client', 700016, `Application with identifier '${form.client_id}' was not found in the directory.`);
  if (form.scope !== AZURE_SCOPE) return refuse(400, 'invalid_scope', 70011, `The provided value for the input parameter 'scope' is not valid. The scope ${form.scope} is not valid.`);
  if (form.client_secret !== undefined) {
    if (form.client_secret !== opts.clientSecret) return refuse(401, 'invalid_client', 7000215, 'Invalid client secret provided.');
    if (ctx.state.failTokens) return refuse(401, 'invalid_client', 7000222, `The provided client secret keys for app '${opts.clientId}' are expired. Visit the Azure portal to create new keys for your app: https://aka.ms/NewClientSecret, or consider using certificate credentials for added security: https://aka.ms/certCreds.`);
  } else if (form.client_assertion !== undefined) {
    if (form.client_assertion_type !== ASSERTION_TYPE || form.client_assertion !== opts.clientAssertion) {
      return refuse(400, 'invalid_client', 70021, 'No matching federated identity record found for presented assertion.');
    }
    if (ctx.state.failTokens) return refuse(400, 'invalid_client', 700024, 'Client assertion is not within its valid time range.');
  } else {
    return refuse(401, 'invalid_client', 7000218, "The request body must contain the following parameter: 'client_assertion' or 'client_secret'.");
  }
  const lifetime = opts.tokenLifetimeSec;
  const now = Math.floor(Date.now() / 1000);
  const b64 = (v: Json): string => Buffer.from(JSON.stringify(v)).toString('base64url');
  const claims = { aud: 'https://cognitiveservices.azure.com', iss: `https://sts.windows.net/${tenant}/`, iat: now, nbf: now, exp: now + lifetime, appid: opts.clientId, tid: tenant, jti: randomUUID() };
  const accessToken = `${b64({ typ: 'JWT', alg: 'RS256' })}.${b64(claims)}.${randomBytes(32).toString('base64url')}`;
  const issuedAt = Date.now();
  ctx.state.tokens.set(accessToken, issuedAt + lifetime * 1000);
  ctx.state.issued.push({ token: accessToken, issuedAt, expiresAt: issuedAt + lifetime * 1000 });
  send(ctx, 200, { token_type: 'Bearer', expires_in: lifetime, ext_expires_in: lifetime, access_token: accessToken });
}

// ---------------------------------------------------------------------------------------------------
// Answers

const SAFE = { filtered: false, severity: 'safe' };
const NOT_DETECTED = { filtered: false, detected: false };
const promptFilterResults = (): Json[] => [
  { prompt_index: 0, content_filter_results: { hate: SAFE, jailbreak: NOT_DETECTED, self_harm: SAFE, sexual: SAFE, violence: SAFE } },
];
const outputFilterResults = (filtered: boolean): Json => ({
  hate: SAFE, protected_material_code: NOT_DETECTED, protected_material_text: NOT_DETECTED, self_harm: SAFE, sexual: SAFE,
  violence: filtered ? { filtered: true, severity: 'high' } : SAFE,
});

function promptFiltered(): Json {
  const results = { hate: SAFE, jailbreak: NOT_DETECTED, self_harm: SAFE, sexual: SAFE, violence: { filtered: true, severity: 'medium' } };
  return { error: { message: FILTERED_400, type: null, param: 'prompt', code: 'content_filter', status: 400, innererror: { code: 'ResponsibleAIPolicyViolation', content_filter_result: results } } };
}

function usage(state: State): Json {
  const { prompt, completion, cached } = state.opts.usage;
  return {
    completion_tokens: completion, completion_tokens_details: { accepted_prediction_tokens: 0, audio_tokens: 0, reasoning_tokens: 0, rejected_prediction_tokens: 0 },
    prompt_tokens: prompt, prompt_tokens_details: { audio_tokens: 0, cached_tokens: cached }, total_tokens: prompt + completion,
  };
}

const replyTo = (text: string): string => `azure reply to: ${text}`;
const fingerprint = (model: string): string => 'fp_' + createHash('sha256').update(model).digest('hex').slice(0, 10);
const nowSec = (): number => Math.floor(Date.now() / 1000);
const chatId = (): string => 'chatcmpl-' + randomBytes(15).toString('base64url');

function chatCompletion(state: State, model: string, text: string, filtered: boolean): Json {
  const message = filtered ? { role: 'assistant' } : { annotations: [], content: replyTo(text), refusal: null, role: 'assistant' };
  return {
    choices: [{ content_filter_results: outputFilterResults(filtered), finish_reason: filtered ? 'content_filter' : 'stop', index: 0, logprobs: null, message }],
    created: nowSec(), id: chatId(), model, object: 'chat.completion', prompt_filter_results: promptFilterResults(),
    system_fingerprint: fingerprint(model), usage: usage(state),
  };
}

function completion(state: State, model: string, prompt: string, filtered: boolean): Json {
  return {
    choices: [{ content_filter_results: outputFilterResults(filtered), finish_reason: filtered ? 'content_filter' : 'stop', index: 0, logprobs: null, text: filtered ? '' : replyTo(prompt) }],
    created: nowSec(), id: 'cmpl-' + randomBytes(15).toString('base64url'), model, object: 'text_completion',
    prompt_filter_results: promptFilterResults(), system_fingerprint: null, usage: usage(state),
  };
}

/** Azure's stream: the prompt's annotations alone (`choices: []`, empty id/model/object), the role, the
 *  content chunks each with its annotations, the finish, then the usage chunk if asked for, and [DONE]. */
function streamChat(ctx: Ctx, model: string, text: string, filtered: boolean): void {
  const { state, res } = ctx;
  const json = ctx.body as Json;
  const withUsage = isObject(json.stream_options) && json.stream_options.include_usage === true;
  const base = { created: nowSec(), id: chatId(), model, object: 'chat.completion.chunk', system_fingerprint: fingerprint(model) };
  const extra = withUsage ? { usage: null } : {};
  const choice = (delta: Json, results: Json, finish: string | null): Json => ({ ...base, choices: [{ content_filter_results: results, delta, finish_reason: finish, index: 0, logprobs: null }], ...extra });
  const pieces = split(replyTo(text), state.opts.chunks);
  const sent = filtered ? pieces.slice(0, Math.ceil(pieces.length / 2)) : pieces;
  const events: Json[] = [
    { choices: [], created: 0, id: '', model: '', object: '', prompt_filter_results: promptFilterResults() },
    choice({ content: '', refusal: null, role: 'assistant' }, {}, null),
    ...sent.map((content) => choice({ content }, outputFilterResults(false), null)),
    choice({}, filtered ? outputFilterResults(true) : {}, filtered ? 'content_filter' : 'stop'),
  ];
  if (withUsage) events.push({ ...base, choices: [], usage: usage(state) });
  res.writeHead(200, { ...azureHeaders(ctx), 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  const frames = [...events.map((e) => `data: ${JSON.stringify(e)}\n\n`), 'data: [DONE]\n\n'];
  const triggers = ctx.triggers ?? new Map<string, number>();
  // cut_first: the headers, then the connection dropped before any event.
  if (triggers.has('cut_first')) {
    ctx.cut = true;
    return void res.write('', () => res.destroy());
  }
  // hold: the prompt's annotations and the role, then a content chunk every 200 ms until the caller leaves.
  if (triggers.has('hold')) {
    res.write(frames[0]! + frames[1]!);
    const timer = setInterval(() => res.write(`data: ${JSON.stringify(choice({ content: '.' }, outputFilterResults(false), null))}\n\n`), 200);
    return void res.once('close', () => clearInterval(timer));
  }
  const first = triggers.get('slow_first') ?? 0;
  const delay = state.opts.chunkDelayMs;
  if (delay <= 0 && first <= 0) return void res.end(frames.join(''));
  if (delay <= 0) {
    const timer = setTimeout(() => res.end(frames.join('')), first);
    return void res.once('close', () => clearTimeout(timer));
  }
  // Paced: one event per pause, stopped if the caller leaves.
  let next = 0;
  const timer = setInterval(() => {
    if (res.destroyed) return clearInterval(timer);
    res.write(frames[next++]!);
    if (next === frames.length) {
      clearInterval(timer);
      res.end();
    }
  }, delay);
  res.once('close', () => clearInterval(timer));
}

function response(state: State, model: string, text: string): Json {
  const { prompt, completion: output, cached } = state.opts.usage;
  return {
    id: 'resp_' + randomBytes(24).toString('hex'), object: 'response', created_at: nowSec(), status: 'completed', error: null,
    incomplete_details: null, instructions: null, metadata: {}, model, parallel_tool_calls: true, temperature: 1, tool_choice: 'auto', tools: [], top_p: 1,
    output: [{ id: 'msg_' + randomBytes(24).toString('hex'), type: 'message', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: replyTo(text), annotations: [] }] }],
    text: { format: { type: 'text' } }, truncation: 'disabled',
    usage: { input_tokens: prompt, input_tokens_details: { cached_tokens: cached }, output_tokens: output, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: prompt + output },
  };
}

/** OpenAI's shape with the deployment's model; vectors are derived from the text (float or base64). */
function embeddings(json: Json, model: string): Json {
  const inputs = Array.isArray(json.input) && json.input.every((i) => typeof i === 'string') ? (json.input as string[]) : [String(json.input ?? '')];
  const dims = typeof json.dimensions === 'number' ? json.dimensions : 1536;
  let tokens = 0;
  const data = inputs.map((input, index) => {
    tokens += Math.max(1, Math.ceil(input.length / 4));
    const seed = createHash('sha256').update(input).digest();
    const vector = Float32Array.from({ length: dims }, (_, i) => (seed[i % 32]! - 128) / 128 + i / (dims * 1000));
    const embedding = json.encoding_format === 'base64' ? Buffer.from(vector.buffer).toString('base64') : Array.from(vector);
    return { object: 'embedding', index, embedding };
  });
  return { object: 'list', data, model, usage: { prompt_tokens: tokens, total_tokens: tokens } };
}

/** Azure's model list (the base models of the deployments, in Azure's fields: `created_at`, `capabilities`...). */
function modelList(state: State): Json {
  const data = [...new Set(Object.values(state.opts.deployments))].map((id) => {
    const embeds = id.includes('embedding');
    return {
      status: 'succeeded', capabilities: { fine_tune: false, inference: true, completion: false, chat_completion: !embeds, embeddings: embeds },
      lifecycle_status: 'generally-available', deprecation: { inference: 1_900_000_000 }, id, created_at: 1_721_260_800, object: 'model',
    };
  });
  return { data, object: 'list' };
}

// ---------------------------------------------------------------------------------------------------
// Helpers

function azureHeaders(ctx: Ctx): OutgoingHttpHeaders {
  const id = randomUUID();
  const headers: OutgoingHttpHeaders = { 'apim-request-id': id, 'x-request-id': id, 'x-ms-region': 'Sweden Central', 'x-ratelimit-remaining-requests': '99', 'x-ratelimit-remaining-tokens': '99000' };
  const client = ctx.req.headers['x-ms-client-request-id'];
  if (typeof client === 'string') headers['x-ms-client-request-id'] = client;
  return headers;
}

/** The `x-mock-azure` header's triggers (comma-separated; `slow_first:<ms>` with its value). */
function triggersOf(header: string | string[] | undefined): Map<string, number> {
  const out = new Map<string, number>();
  for (const word of (Array.isArray(header) ? header.join(',') : header ?? '').split(',')) {
    const [name = '', value = '0'] = word.trim().split(':');
    if (name !== '') out.set(name, Number(value) || 0);
  }
  return out;
}

function send(ctx: Ctx, status: number, body: unknown, extra: OutgoingHttpHeaders = {}): void {
  const text = JSON.stringify(body);
  ctx.res.writeHead(status, { ...azureHeaders(ctx), ...extra, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  ctx.res.end(text);
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The text of the last user message (chat), or the input (responses); content parts are joined. */
function lastUserText(json: Json): string {
  const flatten = (c: unknown): string =>
    typeof c === 'string' ? c : Array.isArray(c) ? c.map((p) => (isObject(p) && typeof p.text === 'string' ? p.text : isObject(p) ? flatten(p.content) : '')).join('') : '';
  if (Array.isArray(json.messages)) {
    const users = json.messages.filter((m) => isObject(m) && m.role === 'user') as Json[];
    return flatten(users.at(-1)?.content);
  }
  return flatten(json.input);
}

/** `text` cut into exactly `n` consecutive pieces. */
function split(text: string, n: number): string[] {
  const size = Math.ceil(text.length / n);
  return Array.from({ length: n }, (_, i) => text.slice(i * size, (i + 1) * size));
}
