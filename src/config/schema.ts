// The one source of truth for the configuration: validation, defaults and the TypeScript types.
import { isIP } from 'node:net';
import { z } from 'zod';

const ADDRESS = /^(?:\[(?<v6>[0-9a-fA-F:.]+)\]|(?<host>[^\s:[\]]*)):(?<port>\d{1,5})$/;

export interface SocketAddress {
  host: string;
  port: number;
}

/** Parses `host:port`, `[v6]:port` or `:port` (all interfaces). */
export function parseAddress(text: string): SocketAddress | undefined {
  const match = ADDRESS.exec(text);
  if (!match?.groups) return undefined;
  const port = Number(match.groups.port);
  if (port > 65535) return undefined;
  const host = match.groups.v6 ?? (match.groups.host || '0.0.0.0');
  return { host, port };
}

const address = z.string().refine((text) => parseAddress(text) !== undefined, {
  message: 'expected an address "host:port" (for example 127.0.0.1:8080 or [::1]:8080), port 0-65535',
});

/**
 * Numbers and booleans may come from `${VAR}` interpolation, which yields strings: a string that
 * is a plain number (or true/false) is read as one. Anything else is left for the schema to reject.
 */
const fromText = (value: unknown): unknown => {
  if (typeof value !== 'string') return value;
  const text = value.trim();
  if (text === 'true' || text === 'false') return text === 'true';
  return /^-?\d+(\.\d+)?$/.test(text) ? Number(text) : value;
};
const fromEnv = <T extends z.ZodType>(schema: T) => z.preprocess(fromText, schema);

/**
 * The longest any duration setting may be: 24 days. A Node.js timer waits at most 2^31-1 ms (24.8
 * days); a longer one fires after 1 ms (with a TimeoutOverflowWarning), so `timeout_ms: 3000000000`
 * made every attempt time out at once. The margin covers what Node adds to some of them (a
 * keep-alive socket's timeout is idle_timeout_secs and one more second).
 */
export const MAX_DURATION_SECS = 24 * 24 * 60 * 60;
export const MAX_DURATION_MS = MAX_DURATION_SECS * 1000;
const TOO_LONG_MS = `expected at most ${MAX_DURATION_MS} milliseconds (24 days: no timer waits longer)`;
const TOO_LONG_SECS = `expected at most ${MAX_DURATION_SECS} seconds (24 days: no timer waits longer)`;
/** Every duration of the config is one of these four: each is bounded, so that no timer it sets can overflow. */
const milliseconds = fromEnv(z.number().int().nonnegative('expected milliseconds >= 0').max(MAX_DURATION_MS, TOO_LONG_MS));
const positiveMilliseconds = fromEnv(z.number().int().positive('expected milliseconds > 0').max(MAX_DURATION_MS, TOO_LONG_MS));
const seconds = fromEnv(z.number().nonnegative('expected a number of seconds >= 0').max(MAX_DURATION_SECS, TOO_LONG_SECS));
const positiveSeconds = fromEnv(z.number().positive('expected a number of seconds > 0').max(MAX_DURATION_SECS, TOO_LONG_SECS));

const name = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/, 'expected a name of letters, digits, "_", "." or "-"');

const tls = z.strictObject({
  /** PEM certificate chain. Re-read on SIGHUP and when the file changes. */
  cert_file: z.string().min(1),
  key_file: z.string().min(1),
  /** PEM CA bundle: when set, clients must present a certificate it signed (mutual TLS). */
  client_ca_file: z.string().min(1).optional(),
  /** A connection that has not finished its TLS handshake by then is closed. */
  handshake_timeout_secs: positiveSeconds.default(10),
});

const listener = z.strictObject({
  name,
  address,
  role: z.enum(['proxy', 'admin']),
  tls: tls.optional(),
  /**
   * Protocols served. With TLS they are offered by ALPN (default both). In cleartext, `h2` means
   * HTTP/2 with prior knowledge (h2c); with both, each connection's first bytes decide.
   */
  protocols: z.array(z.enum(['http1', 'h2'])).min(1, 'expected at least one of "http1", "h2"').optional(),
  /** E5: `modify_only` listeners are retired only when changed or removed (not by SIGTERM or health-check fail; a drain that exits still closes them at its end). */
  drain_type: z.enum(['default', 'modify_only']).default('default'),
  /** E4: `inboundonly` admin drains leave `outbound` listeners alone. */
  direction: z.enum(['inbound', 'outbound']).default('inbound'),
});

export const providerSchema = z.strictObject({
  name,
  type: z.enum(['openai', 'anthropic', 'echo']),
  base_url: z.url({ protocol: /^https?$/, error: 'expected an http:// or https:// URL' }).optional(),
  api_key: z.string().optional(),
  anthropic_version: z.string().default('2023-06-01'),
  /** Extra headers sent upstream on every request (for example an organization id). */
  headers: z.record(z.string(), z.string()).default({}),
});

/**
 * Why an attempt failed, as routes name it in `retry_on` / `fallback_on` (a number is one HTTP
 * status): docs/routing.md has the table.
 */
export const FAILURE_CLASSES = [
  'connect',
  'reset',
  'timeout',
  'first_token_timeout',
  'rate_limited',
  'server_error',
  'stream_error',
  'context_length',
  'client_error',
] as const;
export type FailureClass = (typeof FAILURE_CLASSES)[number];
const failure = z.union([z.enum(FAILURE_CLASSES), z.number().int().min(400).max(599)], {
  error: `expected one of ${FAILURE_CLASSES.join(', ')}, or an HTTP status from 400 to 599`,
});

/** One place a route sends requests: a provider and the model name it is asked for. */
export const targetSchema = z.strictObject({
  provider: name,
  /** The model name sent upstream; default: the name the client asked for. */
  model: z.string().min(1).optional(),
  /** Share of the requests within its priority tier (round robin, hashing). */
  weight: fromEnv(z.number().int().min(1).max(1000)).default(1),
  /** Tier: every target of the lowest tier that is usable is tried before any of the next. */
  priority: fromEnv(z.number().int().min(0).max(100)).default(0),
  /** This target's wait for response headers per attempt; default the route's `retry.attempt_timeout_ms`. */
  timeout_ms: milliseconds.optional(),
  /** This target's wait for a stream's first content; default the route's `retry.first_token_timeout_ms`. */
  first_token_timeout_ms: milliseconds.optional(),
  /** Extra headers sent to this target only. */
  headers: z.record(z.string(), z.string()).default({}),
});

const routeRetry = z.strictObject({
  /** Attempts in all, the first included, across retries and fallbacks. */
  max_attempts: fromEnv(z.number().int().min(1).max(10)).default(3),
  /** Failures retried on the same target (after a backoff; `Retry-After` honoured). */
  retry_on: z.array(failure).default(['connect']),
  /** Times one target is retried after its first attempt. */
  max_retries_per_target: fromEnv(z.number().int().min(0).max(5)).default(1),
  /** Failures that move on to the next target (at once). */
  fallback_on: z.array(failure).default(['connect', 'reset', 'timeout', 'first_token_timeout', 'rate_limited', 'server_error', 'stream_error']),
  /** Exponential backoff with full jitter between retries of one target: base × 2^n, capped. */
  backoff_base_ms: milliseconds.default(100),
  backoff_max_ms: milliseconds.default(2000),
  /** Each attempt's wait for response headers; 0: upstream.timeout_ms. */
  attempt_timeout_ms: milliseconds.default(0),
  /** A stream whose first content has not come by then is abandoned for the next target; 0: no deadline. */
  first_token_timeout_ms: milliseconds.default(0),
  /** No attempt starts, and none is waited for before its first content, past this; 0: no deadline. */
  total_timeout_ms: milliseconds.default(0),
});

export const modelSchema = z
  .strictObject({
    name: z.string().min(1, 'expected a model name, or "*" / "prefix-*" for a pattern'),
    /** The one-target form: a provider (and `upstream_model`). */
    provider: name.optional(),
    upstream_model: z.string().min(1).optional(),
    /** The routed form: one or more targets. */
    targets: z.array(targetSchema).min(1, 'expected at least one target').optional(),
    /** How a target is chosen within a priority tier (default round_robin, weighted). */
    strategy: z.enum(['round_robin', 'least_in_flight', 'lowest_latency', 'consistent_hash']).optional(),
    /** consistent_hash: what is hashed: `header:NAME` or `body:FIELD` (a top-level or dotted field, e.g. body:user). */
    hash_on: z
      .string()
      .regex(/^(header:[A-Za-z0-9-]+|body:[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*)$/, 'expected "header:NAME" or "body:FIELD"')
      .optional(),
    /** Retries and fallbacks; each setting has a default (DEFAULT_ROUTE_RETRY). */
    retry: routeRetry.optional(),
  })
  .superRefine((model, ctx) => {
    if (model.provider === undefined && model.targets === undefined) {
      ctx.addIssue({ code: 'custom', path: ['provider'], message: 'required: a "provider" (one target), or "targets"' });
    }
    if (model.provider !== undefined && model.targets !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['targets'], message: 'give either "provider" (one target) or "targets", not both' });
    }
    if (model.targets !== undefined && model.upstream_model !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['upstream_model'], message: 'with "targets", give each target its "model"' });
    }
    if (model.strategy === 'consistent_hash' && model.hash_on === undefined) {
      ctx.addIssue({ code: 'custom', path: ['hash_on'], message: 'strategy consistent_hash needs hash_on ("header:NAME" or "body:FIELD")' });
    }
  });

export type TargetConfig = z.infer<typeof targetSchema>;
export const DEFAULT_ROUTE_RETRY = routeRetry.parse({});

/** A model entry's targets, whichever form it was written in. */
export function modelTargets(model: { provider?: string | undefined; upstream_model?: string | undefined; targets?: readonly TargetConfig[] | undefined }): readonly TargetConfig[] {
  if (model.targets !== undefined) return model.targets;
  return [{ provider: model.provider!, model: model.upstream_model, weight: 1, priority: 0, headers: {} }];
}

/** Rate limits of one scope (a key, a model, the whole gateway); each absent means no limit. */
const rateFields = {
  /** Requests per minute: a bucket of this many that refills continuously (rpm/60 per second). */
  rpm: fromEnv(z.number().int().positive('expected a whole number of requests per minute > 0')).optional(),
  /** Tokens (prompt + completion) per minute: the same bucket, reserved at the start and settled with the real usage. */
  tpm: fromEnv(z.number().int().positive('expected a whole number of tokens per minute > 0')).optional(),
  /** Requests in progress at once (streams until their last byte). */
  concurrent: fromEnv(z.number().int().positive('expected a whole number of concurrent requests > 0')).optional(),
};
export const rateLimitsSchema = z.strictObject(rateFields);
export type RateLimits = z.infer<typeof rateLimitsSchema>;
/** A key's limits: its own, and per model (by the configured model entry's name) for this key. */
const keyLimits = z.strictObject({ ...rateFields, models: z.record(z.string().min(1), rateLimitsSchema).optional() });
/** What a key may spend, in US dollars, per calendar day or month (UTC), priced with `prices`. */
const budget = z.strictObject({
  usd: fromEnv(z.number().positive('expected a budget in US dollars > 0')),
  period: z.enum(['day', 'month']).default('month'),
});
export type BudgetConfig = z.infer<typeof budget>;

const KEY_SHA256 = /^[A-Za-z0-9+/]{43}=$/;
/** What a named key may do, beside the key itself (the same in the file, in etcd and through the admin API). */
const keyPolicy = {
  /** Model names the key may call: exact names or "prefix*" patterns; absent: every model. */
  models: z.array(z.string().min(1, 'expected a model name or a "prefix*" pattern')).optional(),
  /** The key is refused from this moment (an ISO 8601 date and time, e.g. 2027-01-01T00:00:00Z). */
  expires_at: z
    .string()
    .refine((text) => /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2}))?$/.test(text) && Number.isFinite(Date.parse(text)), {
      message: 'expected an ISO 8601 date, e.g. 2027-01-01 or 2027-01-01T00:00:00Z',
    })
    .optional(),
  /** false: the key is refused (kept, to be enabled again). */
  enabled: fromEnv(z.boolean()).optional(),
  /** Free labels (team, app): in the admin API, not in metrics. */
  metadata: z.record(z.string(), z.string()).optional(),
  /** Requests, tokens and concurrency allowed to this key (docs/keys-and-limits.md). */
  limits: keyLimits.optional(),
  /** Spend allowed to this key per day or month. */
  budget: budget.optional(),
};
/**
 * A client key's text. Never one holding "${": the gateway keeps only a key's digest, so a
 * variable left in it could never be resolved, and the text of the reference would be the key.
 */
const keyText = z
  .string()
  .min(8, 'expected a client key of at least 8 characters')
  .refine((text) => !text.includes('${'), 'a client key must not contain "${" (an unresolved ${VAR}?)');
/** A client key: the key itself, or (as the admin API stores them) only its SHA-256 digest, base64. */
const rawKey = z.strictObject({ name, key: keyText, ...keyPolicy });
const hashedKey = z.strictObject({
  name,
  key_sha256: z.string().regex(KEY_SHA256, 'expected the SHA-256 digest of the key in base64 (44 characters ending in "=")'),
  ...keyPolicy,
});
/** A named key, as a resource of the admin API or etcd holds it: the key, or its digest. */
export const namedKeySchema = z.union([rawKey, hashedKey]);
const clientKey = z.union([keyText, rawKey, hashedKey]);

const shutdown = z.strictObject({
  /** L2: the listeners keep accepting for at least this long after the signal. */
  min_drain_secs: seconds.default(30),
  /** L8: optional backstop; 0 means the drain has no deadline of its own. */
  max_drain_secs: seconds.default(0),
  /** O1: how often "still draining" is logged. */
  progress_log_secs: positiveSeconds.default(5),
  /** E1: `immediate` retires every connection from the start; `gradual` with a rising probability. */
  drain_strategy: z.enum(['immediate', 'gradual']).default('immediate'),
  /** E1/E2/E4: the time a drain is spread over (admin graceful drains keep accepting this long). Default: min_drain_secs. */
  drain_time_secs: seconds.optional(),
  /**
   * E3: the proactive drain resets upgraded (WebSocket) connections, as Envoy does, instead of
   * leaving them to finish. Off by default: a drain never cuts a session in flight.
   */
  reset_upgraded_on_proactive_drain: fromEnv(z.boolean()).default(false),
  /** E7: an old generation still draining this long after a hot restart is ended (L8 error events). */
  parent_shutdown_secs: positiveSeconds.default(900),
});

/**
 * An etcd client URL: a scheme, a host and a port. etcd's gRPC client reads nothing else of it: a
 * `user:password@` made every connection fail with the password quoted in the error (and so in the
 * logs, /server_info and the status page); credentials have their own keys.
 */
const etcdEndpoint = z
  .url({ protocol: /^https?$/, error: 'expected an etcd client URL such as http://127.0.0.1:2379' })
  .refine((text) => !/^[^:]+:\/\/[^/?#]*@|[?#]/.test(text), {
    error: 'expected only a scheme, a host and a port (http://127.0.0.1:2379): etcd\'s client reads no user, password or query from an endpoint; write them in etcd.username and etcd.password',
  });

const etcd = z.strictObject({
  /** etcd v3 client URLs (http:// or https://): scheme, host and port. */
  endpoints: z.array(etcdEndpoint).min(1, 'expected at least one etcd endpoint'),
  /** Every resource lives under this key prefix, one key per resource: <prefix>providers/<name>. */
  prefix: z.string().min(1).regex(/\/$/, 'expected a prefix ending in "/" (for example /sluice/)').default('/sluice/'),
  username: z.string().min(1).optional(),
  password: z.string().optional(),
  tls: z
    .strictObject({
      ca_file: z.string().min(1),
      cert_file: z.string().min(1).optional(),
      key_file: z.string().min(1).optional(),
    })
    .optional(),
  /** A request to etcd (a read, a write of the admin API) not answered by then fails. */
  request_timeout_ms: positiveMilliseconds.default(5000),
  /** Connecting to an endpoint is given this long. */
  dial_timeout_ms: positiveMilliseconds.default(3000),
  /**
   * The environment variables a resource may read with `${VAR}`, and only in a provider's
   * `api_key` and header values and a target's header values (resource-variables.ts). Default
   * none: whoever can write a resource (an admin token, etcd access) must not read this host's
   * environment through it.
   */
  allowed_env: z.array(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'expected the name of an environment variable')).default([]),
});

const snapshot = z.strictObject({
  /**
   * L9: the resources last applied are kept in this file (temp file, fsync, rename), so that the
   * gateway starts and serves while etcd is down. Default: beside the config file, named after it.
   */
  path: z.string().min(1).optional(),
});

const reload = z.strictObject({
  /** E6: the config file is watched, and a change (saved in place or by rename) is reloaded as on SIGHUP. */
  watch: fromEnv(z.boolean()).default(true),
});

const tracing = z.strictObject({
  /** OpenTelemetry traces over OTLP/HTTP (JSON): off by default, and then nothing of the SDK is loaded. Read at start. */
  enabled: fromEnv(z.boolean()).default(false),
  /**
   * The collector's OTLP/HTTP traces URL. Unset: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
   * OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces added, else http://127.0.0.1:4318/v1/traces.
   */
  endpoint: z.url({ protocol: /^https?$/, error: 'expected an http:// or https:// URL' }).optional(),
  /** Headers sent with every export (an authorization token, say): may hold secrets, never logged. Added to OTEL_EXPORTER_OTLP_HEADERS. */
  headers: z.record(z.string(), z.string()).default({}),
  /** The share of new traces recorded (0 to 1); a request with a `traceparent` follows its caller's decision. */
  sample_ratio: fromEnv(z.number().min(0).max(1)).default(1),
  /** `service.name` of every span. Unset: OTEL_SERVICE_NAME, else "sluice". */
  service_name: z.string().min(1).optional(),
  /** L9: at the exit, the spans not yet exported get at most this long; the rest are counted as lost. */
  flush_timeout_ms: positiveMilliseconds.default(2000),
});
export type TracingConfig = z.infer<typeof tracing>;

const workersRecycle = z.strictObject({
  /** A worker whose resident memory passes this many MiB is replaced (its replacement serves first); 0: never. */
  max_rss_mb: fromEnv(z.number().nonnegative()).default(0),
  /** A worker that has started this many requests is replaced; 0: never. */
  max_requests: fromEnv(z.number().int().nonnegative()).default(0),
});

const hotRestart = z.strictObject({
  /**
   * E7: run under a process that stays (the PID a platform watches) and starts each generation of
   * the gateway, so that `sluice restart` or SIGUSR2 replaces the running one without a refused
   * connection. Read at start only.
   */
  enabled: fromEnv(z.boolean()).default(false),
  /** E7: a new generation not ready this long after it was started is stopped; the old one keeps serving. */
  start_timeout_secs: positiveSeconds.default(60),
});

const downstream = z.strictObject({
  /** Keep-alive connections idle this long are closed; 0 leaves that to the client. */
  idle_timeout_secs: seconds.default(0),
  /** L6: with no idle timeout, how long a fresh connection is held after the listeners close. */
  fresh_connection_grace_secs: seconds.default(10),
  request_body_limit_bytes: fromEnv(z.number().int().positive()).default(10 * 1024 * 1024),
  /** Time allowed for a client to send complete request headers (slowloris protection). */
  headers_timeout_secs: positiveSeconds.default(30),
  /** Time allowed for a client to send a complete request body. */
  request_timeout_secs: seconds.default(300),
  /** E2/E6: a connection told to go (proactive drain, listener changed) gets this long before it is closed if idle. */
  drain_timeout_secs: seconds.default(5),
  /** Open downstream connections allowed per process (each worker) across its listeners (0 = no limit); more are closed at once. */
  max_connections: fromEnv(z.number().int().nonnegative()).default(0),
});

const upstream = z.strictObject({
  connect_timeout_ms: positiveMilliseconds.default(5000),
  /** Longest wait for response headers, and longest silence between body chunks. */
  timeout_ms: positiveMilliseconds.default(600_000),
  /** Keep-alive connections per provider origin (0 = unlimited). */
  max_connections: fromEnv(z.number().int().nonnegative()).default(0),
});

const routing = z.strictObject({
  /** A target that fails this many attempts in a row is left out for a cooldown; 0: never. */
  cooldown_failures: fromEnv(z.number().int().nonnegative()).default(3),
  /** The cooldown; a longer `Retry-After` from the target (up to cooldown_max_secs) wins. */
  cooldown_secs: positiveSeconds.default(30),
  cooldown_max_secs: positiveSeconds.default(300),
  /**
   * Retry budget (as Envoy's): retries and fallbacks in progress may not exceed this percentage
   * of the requests in progress, or min_retry_concurrency, whichever is larger.
   */
  retry_budget_percent: fromEnv(z.number().min(0).max(100)).default(20),
  min_retry_concurrency: fromEnv(z.number().int().nonnegative()).default(3),
});

const redis = z.strictObject({
  /** redis://[user:password@]host:port[/db] or rediss:// (TLS). Never logged whole (it may hold a password). */
  url: z.string().regex(/^rediss?:\/\/[^\s]+$/, 'expected a Redis URL such as redis://127.0.0.1:6379'),
  /** Every key Sluice writes starts with this. */
  key_prefix: z.string().default('sluice:'),
  /** A command not answered by then fails (and on_store_error decides). */
  command_timeout_ms: positiveMilliseconds.default(250),
  connect_timeout_ms: positiveMilliseconds.default(2000),
});

const limits = z.strictObject({
  /** Where the counters live: `memory` (this instance; shared by its workers) or `redis` (every instance using it). Read at start. */
  store: z.enum(['memory', 'redis']).default('memory'),
  redis: redis.optional(),
  /** When the store cannot be reached: `open` lets requests through uncounted, `closed` refuses them (503). Logged and counted either way. */
  on_store_error: z.enum(['open', 'closed']).default('open'),
  /** A request's place in a concurrency limit is a lease renewed while it runs: a process killed mid-request gives it back after this long. */
  lease_secs: positiveSeconds.default(30),
  /** Completion tokens reserved for a request that sets no max_tokens (settled with the real usage when it ends). */
  estimate_output_tokens: fromEnv(z.number().int().nonnegative()).default(500),
  /**
   * Output tokens a request that sets no max_tokens may cost, for its hold on its key's budget while
   * it runs (priced at its model's output price; replaced by its real cost when it ends): the
   * default max_tokens the translation to Anthropic's API sends.
   */
  budget_hold_output_tokens: fromEnv(z.number().int().nonnegative()).default(4096),
  /**
   * A client that leaves mid-answer: the answer is read on (and thrown away) this long at most, so
   * that its usage is the provider's; then, or at 0, it is stopped and its usage estimated.
   */
  read_after_disconnect_secs: seconds.default(30),
  /** Limits on the whole gateway (every instance sharing the store). */
  global: rateLimitsSchema.optional(),
  /** Limits per model, by the configured model entry's name, across every key. */
  models: z.record(z.string().min(1), rateLimitsSchema).default({}),
});
export type LimitsConfig = z.infer<typeof limits>;

/** A model's price in US dollars per million tokens. */
const price = z.strictObject({
  input: fromEnv(z.number().nonnegative()),
  output: fromEnv(z.number().nonnegative()),
  /** Prompt tokens read from the provider's cache; default: the input price. */
  cached_input: fromEnv(z.number().nonnegative()).optional(),
  /** Prompt tokens written to the cache (Anthropic); default: the input price. */
  cache_write: fromEnv(z.number().nonnegative()).optional(),
});
export type PriceConfig = z.infer<typeof price>;

const adminToken = z.string().min(16, 'expected an admin token of at least 16 characters');

/** A host name of ASCII labels (a browser sends an international name in its xn-- form). */
const HOST_NAME = /^[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*$/i;
const ALLOWED_HOST = 'expected a host name ("admin.example.com"), a wildcard of its subdomains ("*.example.com") or an IP address, without a port';
/** An `admin.allowed_hosts` (or `auth.allowed_hosts`) entry: a name, `*.` and a name, or an IP address (IPv6 with or without brackets). */
function isAllowedHostPattern(text: string): boolean {
  const name = text.startsWith('*.') ? text.slice(2) : text;
  if (HOST_NAME.test(name)) return true;
  return !text.startsWith('*.') && isIP(text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text) !== 0;
}
const allowedHost = z.string().refine(isAllowedHostPattern, { error: (issue) => `${ALLOWED_HOST} (got ${JSON.stringify(String(issue.input).slice(0, 80))})` });

const auth = z.strictObject({
  /**
   * Every proxy request must present a client key, even when none exists (then each gets
   * 401 no_client_keys and readiness fails `client_keys`): deleting the last key closes the gateway
   * rather than opening it. Default: on in etcd mode, off otherwise (`requiresClientKey`).
   */
  require_key: fromEnv(z.boolean()).optional(),
  /**
   * While the proxy needs no key: the names it answers to over loopback (Host) and the hosts of the
   * web pages it answers (Origin), besides this machine's (gateway/open-proxy-guard.ts).
   */
  allowed_hosts: z.array(allowedHost).default([]),
});

const admin = z.strictObject({
  /** Bearer token required on every admin route except /livez, /readyz and /metrics (its name in audit events: "admin"). */
  token: adminToken.optional(),
  /** More tokens, each with the name that audit events give as who made a change. */
  tokens: z.array(z.strictObject({ name, token: adminToken })).default([]),
  /** Admin listeners must bind to loopback unless this is true. */
  allow_non_loopback: fromEnv(z.boolean()).default(false),
  /**
   * The Host names the admin API answers to besides loopback and the listener's own address (DNS
   * rebinding protection, admin/request-guard.ts): names, `*.example.com` for its subdomains, IPs.
   */
  allowed_hosts: z.array(allowedHost).default([]),
  /** GET /status (the live status page) and GET /status/events (its event stream); false: both 404. */
  status_page: fromEnv(z.boolean()).default(true),
});

const log = z.strictObject({
  level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  access_log: fromEnv(z.boolean()).default(true),
  /** `json` lines, `pretty` lines for people, or `auto`: pretty when stdout is a terminal. Read at start. */
  format: z.enum(['json', 'pretty', 'auto']).default('auto'),
});

/**
 * Processes serving the proxy listeners: `auto` (the default) is one per CPU Node may use
 * (os.availableParallelism()), sized down for memory (`workerCount`); 1 runs everything in one
 * process, with no supervisor.
 */
const WORKERS = 'expected "auto" or a whole number of worker processes from 1 to 256';
const workers = fromEnv(z.union([z.literal('auto'), z.number().int(WORKERS).min(1, WORKERS).max(256, WORKERS)], { error: WORKERS })).default('auto');

export const configSchema = z
  .strictObject({
    workers,
    listeners: z.array(listener).min(1, 'expected at least one listener'),
    providers: z.array(providerSchema).default([]),
    models: z.array(modelSchema).default([]),
    keys: z.array(clientKey).default([]),
    auth: auth.default(auth.parse({})),
    shutdown: shutdown.default(shutdown.parse({})),
    downstream: downstream.default(downstream.parse({})),
    upstream: upstream.default(upstream.parse({})),
    routing: routing.default(routing.parse({})),
    limits: limits.default(limits.parse({})),
    /** Prices per model (the upstream model's name, or a prefix of it): these replace the shipped table's. */
    prices: z.record(z.string().min(1), price).default({}),
    log: log.default(log.parse({})),
    admin: admin.default(admin.parse({})),
    hot_restart: hotRestart.default(hotRestart.parse({})),
    workers_recycle: workersRecycle.default(workersRecycle.parse({})),
    reload: reload.default(reload.parse({})),
    /** Providers, models and keys live in etcd (one key each); this file keeps what belongs to the host. */
    etcd: etcd.optional(),
    snapshot: snapshot.default(snapshot.parse({})),
    tracing: tracing.default(tracing.parse({})),
  })
  .superRefine(crossChecks, {
    // Run even when some values have the wrong type, so one run reports every problem.
    when: (payload) => payload.value !== null && typeof payload.value === 'object',
  })
  // Settled here, in the bootstrap file's parse: etcd mode's resources are composed into a config
  // without its `etcd` section, which must keep what the bootstrap decided.
  .overwrite((config) => (config.auth.require_key === undefined ? { ...config, auth: { ...config.auth, require_key: config.etcd !== undefined } } : config));

type Named = { name?: unknown };

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/**
 * A cross-check's problem that would quote values: `message` says it without them, `quoted` with
 * them. The loader shows `quoted` only where each value it quotes (at the paths `of`, by default
 * the problem's own) may be quoted: a literal of the operator's file, never a credential, a value
 * from a `${VAR}`, or anything of a resource (load.ts, `Telling`).
 */
function quoting(ctx: z.RefinementCtx, path: PropertyKey[], message: string, quoted: string, of: PropertyKey[][] | ((path: PropertyKey[]) => PropertyKey[][]) = [path]): void {
  ctx.addIssue({ code: 'custom', path, message, params: { quoted, of: typeof of === 'function' ? of(path) : of } });
}

/** Checks across entries. Defensive: with type errors elsewhere, any field may be malformed. */
function crossChecks(value: unknown, ctx: z.RefinementCtx): void {
  const config = value as Record<string, unknown>;
  const list = (key: string) => (Array.isArray(config[key]) ? (config[key] as Record<string, unknown>[]) : []);
  const listeners = list('listeners');
  const providers = list('providers');
  const models = list('models');
  const unique = (items: Named[], ...at: string[]) => {
    const seen = new Set<unknown>();
    items.forEach((item, index) => {
      if (typeof item?.name !== 'string') return;
      if (seen.has(item.name)) quoting(ctx, [...at, index, 'name'], 'duplicate name', `duplicate name "${item.name}"`);
      seen.add(item.name);
    });
  };
  unique(listeners, 'listeners');
  unique(providers, 'providers');
  unique(models, 'models');
  const adminSection = config.admin as Record<string, unknown> | undefined;
  if (adminSection && Array.isArray(adminSection.tokens)) unique(adminSection.tokens as Named[], 'admin', 'tokens');
  if (config.etcd !== undefined) {
    // In etcd mode the resources live in etcd only: two sources of one list would disagree.
    for (const kind of ['providers', 'models', 'keys'] as const) {
      if (Array.isArray(config[kind]) && (config[kind] as unknown[]).length > 0) {
        ctx.addIssue({ code: 'custom', path: [kind], message: `with etcd configured, ${kind} live in etcd: write them with the admin API or \`sluice apply\`, not in this file` });
      }
    }
  }
  if (Array.isArray(config.listeners) && listeners.length > 0 && !listeners.some((l) => l?.role === 'proxy')) {
    ctx.addIssue({ code: 'custom', path: ['listeners'], message: 'expected at least one listener with role "proxy"' });
  }
  const limitSettings = config.limits as Record<string, unknown> | undefined;
  if (limitSettings?.store === 'redis' && limitSettings.redis === undefined) {
    ctx.addIssue({ code: 'custom', path: ['limits', 'redis'], message: 'limits.store "redis" needs limits.redis.url' });
  }
  const adminSettings = config.admin as Record<string, unknown> | undefined;
  if (adminSettings?.allow_non_loopback !== true) {
    listeners.forEach((l, index) => {
      const parsed = typeof l?.address === 'string' ? parseAddress(l.address) : undefined;
      if (l?.role === 'admin' && parsed && !isLoopback(parsed.host)) {
        const message = 'an admin listener binds to loopback unless admin.allow_non_loopback is true';
        quoting(ctx, ['listeners', index, 'address'], message, `${message} (got ${String(l.address)})`);
      }
    });
  }
  const addresses = new Map<string, number>();
  listeners.forEach((l, index) => {
    const parsed = typeof l?.address === 'string' ? parseAddress(l.address) : undefined;
    if (!parsed || parsed.port === 0) return;
    const key = `${parsed.host}:${parsed.port}`;
    if (addresses.has(key)) {
      const other = addresses.get(key)!;
      quoting(ctx, ['listeners', index, 'address'], `the same address as listeners[${other}]`, `address ${String(l.address)} is already used by listeners[${other}]`);
    }
    addresses.set(key, index);
  });
  const providerNames = new Set(providers.map((p) => p?.name).filter((n) => typeof n === 'string'));
  const providerNamePaths = (at: PropertyKey[]) => [at, ...providers.map((_, index) => ['providers', index, 'name'])];
  const known = () => [...providerNames].map((p) => `"${String(p)}"`).join(', ') || 'none configured';
  models.forEach((m, index) => {
    if (typeof m?.provider === 'string' && !providerNames.has(m.provider)) {
      quoting(ctx, ['models', index, 'provider'], 'no provider of that name', `unknown provider "${m.provider}" (known: ${known()})`, providerNamePaths);
    }
    if (Array.isArray(m?.targets)) {
      (m.targets as Record<string, unknown>[]).forEach((t, at) => {
        if (typeof t?.provider === 'string' && !providerNames.has(t.provider)) {
          quoting(ctx, ['models', index, 'targets', at, 'provider'], 'no provider of that name', `unknown provider "${t.provider}" (known: ${known()})`, providerNamePaths);
        }
      });
    }
    const name = typeof m?.name === 'string' ? m.name : '';
    const star = name.indexOf('*');
    if (star !== -1 && star !== name.length - 1) {
      ctx.addIssue({ code: 'custom', path: ['models', index, 'name'], message: 'a "*" may only end a model name pattern ("*" or "prefix-*")' });
    }
  });
  providers.forEach((p, index) => {
    if (p?.type === 'echo' && p.base_url !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['providers', index, 'base_url'], message: 'an echo provider answers locally and takes no base_url' });
    }
  });
  const downstream = config.downstream as Record<string, unknown> | undefined;
  const headers = downstream?.headers_timeout_secs;
  const request = downstream?.request_timeout_secs;
  if (typeof headers === 'number' && typeof request === 'number' && request > 0 && headers > request) {
    quoting(ctx, ['downstream', 'headers_timeout_secs'], 'must not exceed downstream.request_timeout_secs', `must not exceed downstream.request_timeout_secs (${request})`, [['downstream', 'headers_timeout_secs'], ['downstream', 'request_timeout_secs']]);
  }
}

export type Config = z.infer<typeof configSchema> & {
  /**
   * Set (never by the user: the schema refuses the key) while the resources are not loaded yet (etcd
   * mode, etcd not answering and no snapshot): readiness fails `config_loaded` and proxy requests
   * get a 503 saying why.
   */
  readonly resources_pending?: string;
};

/** The config with only the listeners of `role`: a supervisor serves the admin ones, its workers the proxy ones. */
export function withListenersOf(config: Config, role: ListenerConfig['role']): Config {
  return { ...config, listeners: config.listeners.filter((l) => l.role === role) };
}

/** Whether every proxy request needs a client key: `auth.require_key`, by default on in etcd mode (resources written at run time) and off otherwise. */
export function requiresClientKey(config: Pick<Config, 'auth' | 'etcd'>): boolean {
  return config.auth.require_key ?? config.etcd !== undefined;
}

/** `workers: auto` starts at most this many workers: each is a process of its own (about 100 MB idle), and a gateway of LLM requests is bound by its providers long before 8 cores. */
export const AUTO_WORKERS_MAX = 8;
/** What `workers: auto` allows each process of memory (idle, a busy one grows to about 300 MB); the group takes at most half of what the machine or its cgroup offers. */
export const AUTO_BYTES_PER_WORKER = 256 * 1024 * 1024;

/**
 * How many worker processes `workers` asks for on a machine offering `cpus` CPUs and `memory`
 * bytes (the cgroup's limit when there is one): `auto` is one per CPU, at most AUTO_WORKERS_MAX,
 * and no more than half the memory holds at AUTO_BYTES_PER_WORKER each; at least 1.
 */
export function workerCount(config: Pick<Config, 'workers'>, cpus: number, memory: number): number {
  if (config.workers !== 'auto') return config.workers;
  return Math.max(1, Math.min(cpus, AUTO_WORKERS_MAX, Math.floor(memory / 2 / AUTO_BYTES_PER_WORKER)));
}
export type ListenerConfig = Config['listeners'][number];
export type TlsConfig = NonNullable<ListenerConfig['tls']>;
export type Protocol = 'http1' | 'h2';

/** The protocols a listener serves: as configured, else both with TLS and HTTP/1.1 without. */
export function listenerProtocols(listener: ListenerConfig): readonly Protocol[] {
  return listener.protocols ?? (listener.tls ? ['http1', 'h2'] : ['http1']);
}
export type ProviderConfig = Config['providers'][number];
export type ModelConfig = Config['models'][number];
export type RoutingConfig = Config['routing'];
export type RouteRetryConfig = typeof DEFAULT_ROUTE_RETRY;
export type ShutdownConfig = Config['shutdown'];
export type DownstreamConfig = Config['downstream'];
export type UpstreamConfig = Config['upstream'];
