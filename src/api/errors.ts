// Errors that reach a client: each has a stable code, its HTTP status and a body in the caller's
// API shape: OpenAI's, or Anthropic's on the Anthropic routes.

export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'request_too_large'
  | 'upstream_error'
  | 'timeout_error'
  | 'rate_limit_error'
  | 'insufficient_quota'
  | 'server_error';

/**
 * What a client chose (a model name, a path, a parameter's name) is quoted in an error answer up to
 * this many characters: a 5 MB model name must not come back whole. The same bound as the logs'
 * (telemetry/log-cap.ts).
 */
export const QUOTED_MAX = 256;
/** A message that holds client text some other way (a translator's detail, an upstream's message) is bounded as a whole. */
export const MESSAGE_MAX = 1024;

/** The first `max` characters of `text`, one fewer when the last would split a surrogate pair. */
export function cutText(text: string, max: number): string {
  const last = text.charCodeAt(max - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max);
}

/**
 * `value`, a text a client chose, as an error answer quotes it: whole up to `max` characters, else
 * cut, with how long it was ("… (5242880 characters)"). A value within the bound costs one
 * comparison.
 */
export function quoted(value: string, max = QUOTED_MAX): string {
  return value.length <= max ? value : `${cutText(value, max)}… (${value.length} characters)`;
}

/** Whose error shape a caller expects. */
export type ErrorDialect = 'openai' | 'anthropic';

/** Anthropic's error types (its API reference, "Errors") for ours. */
const ANTHROPIC_TYPES: Readonly<Record<ErrorType, string>> = {
  invalid_request_error: 'invalid_request_error',
  authentication_error: 'authentication_error',
  permission_error: 'permission_error',
  not_found_error: 'not_found_error',
  request_too_large: 'request_too_large',
  upstream_error: 'api_error',
  timeout_error: 'timeout_error',
  rate_limit_error: 'rate_limit_error',
  insufficient_quota: 'rate_limit_error',
  server_error: 'api_error',
};

export class GatewayError extends Error {
  readonly status: number;
  readonly type: ErrorType;
  /** Stable machine-readable code (also the access log's `error` field). */
  readonly code: string;
  /** Extra response headers (e.g. `allow` on a 405). */
  readonly headers: Readonly<Record<string, string>> | undefined;
  /** The request parameter at fault, when one is (OpenAI's `error.param`). */
  param: string | undefined = undefined;
  constructor(status: number, type: ErrorType, code: string, message: string, headers?: Record<string, string>) {
    super(message);
    this.status = status;
    this.type = type;
    this.code = code;
    this.headers = headers;
  }

  body(dialect: ErrorDialect = 'openai'): string {
    if (dialect === 'anthropic') return JSON.stringify({ type: 'error', error: { type: ANTHROPIC_TYPES[this.type], message: this.message } });
    if (this.param !== undefined) return JSON.stringify({ error: { message: this.message, type: this.type, code: this.code, param: this.param } });
    return JSON.stringify({ error: { message: this.message, type: this.type, code: this.code } });
  }
}

export const errors = {
  invalidJson: (detail: string) => new GatewayError(400, 'invalid_request_error', 'invalid_json', `request body is not valid JSON: ${quoted(detail, MESSAGE_MAX)}`),
  tooDeep: () => new GatewayError(400, 'invalid_request_error', 'invalid_body', 'request body is nested too deeply'),
  notAnObject: () => new GatewayError(400, 'invalid_request_error', 'invalid_body', 'request body must be a JSON object'),
  missingModel: () => new GatewayError(400, 'invalid_request_error', 'model_required', 'request body must name a "model" (a string)'),
  // Every value a client chose is quoted through `quoted()`: a model, a path, a method, a parameter.
  unknownModel: (model: string) => new GatewayError(404, 'not_found_error', 'model_not_found', `model "${quoted(model)}" is not configured on this gateway`),
  modelNotOffered: (model: string, provider: string) =>
    new GatewayError(404, 'not_found_error', 'model_not_found', `model "${quoted(model)}" matches a route to provider "${provider}", which does not list it`),
  invalidParameter: (name: string, detail: string) => new GatewayError(400, 'invalid_request_error', 'invalid_parameter', `query parameter "${quoted(name)}" ${detail}`),
  unsupportedEndpoint: (model: string, provider: string, type: string, path: string) =>
    new GatewayError(400, 'invalid_request_error', 'unsupported_endpoint', `model "${quoted(model)}" is served by provider "${provider}" (type ${type}), which does not serve ${quoted(path)}`),
  missingKey: () => new GatewayError(401, 'authentication_error', 'missing_api_key', 'missing API key: send "Authorization: Bearer <key>" or "x-api-key: <key>"'),
  invalidKey: () => new GatewayError(401, 'authentication_error', 'invalid_api_key', 'invalid API key'),
  keyExpired: (name: string) => new GatewayError(401, 'authentication_error', 'api_key_expired', `API key "${name}" has expired`),
  /** 401: `auth.require_key` is on and no client key exists (yet, or any more): nothing is let in. */
  noClientKeys: () =>
    new GatewayError(401, 'authentication_error', 'no_client_keys', 'this gateway requires a client key (auth.require_key) and none is configured: no request is served until one is added'),
  keyDisabled: (name: string) => new GatewayError(401, 'authentication_error', 'api_key_disabled', `API key "${name}" is disabled`),
  modelNotAllowed: (model: string, key: string) => new GatewayError(403, 'permission_error', 'model_not_allowed', `API key "${key}" may not use model "${quoted(model)}"`),
  /** 429: a rate or concurrency limit; `headers` carry Retry-After and the x-ratelimit-* readings. */
  rateLimited: (message: string, headers: Record<string, string>) => new GatewayError(429, 'rate_limit_error', 'rate_limit_exceeded', message, headers),
  /**
   * 429: the key's budget for the period is spent, or what is `left` of it is less than this request
   * may cost (`why`, with what the requests in progress hold); no SDK retry (x-should-retry: false)
   * before the period ends unless the headers say otherwise.
   */
  /** `whose`: `API key "k"`, `team "t"`, `user "u" of API key "k"`. */
  budgetExceeded: (whose: string, usd: number, period: string, headers: Record<string, string>, left?: { amount: string; why: string }) =>
    new GatewayError(
      429,
      'insufficient_quota',
      'budget_exceeded',
      left === undefined ? `${whose} has spent its budget of $${usd} for this ${period}` : `${whose} has ${left.amount} left of its budget of $${usd} for this ${period}, ${left.why}`,
      headers,
    ),
  ledgerFull: () => new GatewayError(503, 'server_error', 'ledger_full', 'the usage ledger cannot record more requests now (its store is away and its spool is full; ledger.on_full is "refuse")', { 'retry-after': '5' }),
  limitStoreUnavailable: () => new GatewayError(503, 'server_error', 'limit_store_unavailable', 'the rate limit store cannot be reached and limits.on_store_error is "closed"', { 'retry-after': '1' }),
  bodyTooLarge: (limit: number) => new GatewayError(413, 'request_too_large', 'body_too_large', `request body exceeds the limit of ${limit} bytes`),
  notFound: (path: string) => new GatewayError(404, 'not_found_error', 'unknown_path', `no route for ${quoted(path)}`),
  methodNotAllowed: (method: string, path: string, allow: 'GET' | 'POST') =>
    new GatewayError(405, 'invalid_request_error', 'method_not_allowed', `${quoted(method)} is not allowed on ${quoted(path)} (use ${allow})`, { allow }),
  upstreamConnect: (provider: string) => new GatewayError(502, 'upstream_error', 'upstream_connect_failed', `could not connect to provider "${provider}"`),
  upstreamReset: (provider: string) => new GatewayError(502, 'upstream_error', 'upstream_reset', `provider "${provider}" closed the connection before answering`),
  upstreamTimeout: (provider: string) => new GatewayError(504, 'timeout_error', 'upstream_timeout', `provider "${provider}" did not answer in time`),
  /** 503: a cloud provider's credentials (AWS keys, a Google or Entra ID token) could not be had: the request was not sent. */
  upstreamCredentials: (provider: string, source: string) =>
    new GatewayError(503, 'upstream_error', 'upstream_credentials_unavailable', `provider "${provider}" has no usable credentials: its ${source} could not be obtained (the gateway's log says why)`, { 'retry-after': '1' }),
  upstreamFailed: (provider: string) => new GatewayError(502, 'upstream_error', 'upstream_failed', `request to provider "${provider}" failed`),
  /** A stream that ended without its API's final event ([DONE], message_stop, response.completed): its answer is incomplete. */
  streamCut: (provider: string) => new GatewayError(502, 'upstream_error', 'upstream_stream_cut', `provider "${provider}" ended the stream before the response was complete`),
  firstTokenTimeout: (provider: string) =>
    new GatewayError(504, 'timeout_error', 'upstream_first_token_timeout', `provider "${provider}" sent no content before the route's first_token_timeout_ms`),
  noTarget: (route: string) => new GatewayError(503, 'upstream_error', 'no_target_available', `route "${route}" has no target left to try`),
  /** A translator's `detail` quotes what the client sent (a parameter's name, a type): bounded as a whole. */
  untranslatable: (param: string, detail: string, provider: string, type: string) =>
    Object.assign(
      new GatewayError(400, 'invalid_request_error', 'unsupported_parameter', `${quoted(detail, MESSAGE_MAX)} (the request was routed to provider "${provider}" of type ${type}; parameter "${quoted(param)}")`),
      { param: quoted(param) },
    ),
  untranslatableAnswer: (provider: string) => new GatewayError(502, 'upstream_error', 'upstream_invalid_answer', `provider "${provider}" answered with a body that could not be read`),
  configNotLoaded: (why: string) => new GatewayError(503, 'server_error', 'config_not_loaded', `this gateway has no configuration yet: ${why}`),
  internal: () => new GatewayError(500, 'server_error', 'internal_error', 'internal gateway error'),
  noWebSocketRoute: (path: string) => new GatewayError(404, 'not_found_error', 'unknown_path', `no WebSocket route for ${quoted(path)}`),
  httpVersionNotSupported: () =>
    new GatewayError(505, 'invalid_request_error', 'http_version_not_supported', 'HTTP version not supported on this connection: send HTTP/1.1 or HTTP/1.0 (HTTP/2 needs its own connection preface)'),
  missingHost: () => new GatewayError(400, 'invalid_request_error', 'missing_host', 'an HTTP/1.1 request needs a Host header'),
  drainForced: () =>
    new GatewayError(503, 'server_error', 'drain_forced', 'the gateway is shutting down and ended this request before it was answered; retry it'),
} as const;

/** The 401 for an authentication that failed, by its reason. */
export function authError(reason: 'missing' | 'invalid' | 'expired' | 'disabled' | 'no_keys', keyName = ''): GatewayError {
  switch (reason) {
    case 'missing':
      return errors.missingKey();
    case 'no_keys':
      return errors.noClientKeys();
    case 'expired':
      return errors.keyExpired(keyName);
    case 'disabled':
      return errors.keyDisabled(keyName);
    default:
      return errors.invalidKey();
  }
}
