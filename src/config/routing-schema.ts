// Providers, the models routed to them (targets, strategy, retries and fallbacks), and the routing
// and upstream sections: where a request is sent, and how each attempt reaches a provider.
import { z } from 'zod';
import { fromEnv, milliseconds, name, positiveMilliseconds, positiveSeconds } from './value-schemas.ts';

/** OpenAI-compatible servers an `openai` provider can name as its `preset` (providers/openai/presets.ts). */
export const OPENAI_PRESETS = ['ollama', 'vllm', 'lmstudio', 'llamacpp', 'groq', 'mistral', 'deepseek', 'together', 'fireworks', 'openrouter', 'xai'] as const;
export type OpenAIPreset = (typeof OPENAI_PRESETS)[number];
/** The hosted ones: their APIs refuse a request without a key (the local servers need none by default). */
export const PRESETS_NEEDING_A_KEY: ReadonlySet<OpenAIPreset> = new Set(['groq', 'mistral', 'deepseek', 'together', 'fireworks', 'openrouter', 'xai']);

export const providerSchema = z.strictObject({
  name,
  type: z.enum(['openai', 'anthropic', 'azure_openai', 'bedrock', 'gemini', 'vertex', 'echo']),
  /**
   * openai: an OpenAI-compatible server: its default base_url, and the request parameters it
   * refuses or names otherwise (dropped or renamed).
   */
  preset: z.enum(OPENAI_PRESETS).optional(),
  /** azure_openai: the resource's endpoint (`https://NAME.openai.azure.com`). */
  base_url: z.url({ protocol: /^https?$/, error: 'expected an http:// or https:// URL' }).optional(),
  api_key: z.string().optional(),
  anthropic_version: z.string().default('2023-06-01'),
  /**
   * azure_openai: the data-plane API version; with one, requests go to the deployment
   * (`/openai/deployments/{model}/…?api-version=…`); without, to the v1 API (`/openai/v1/…`).
   */
  api_version: z
    .string()
    .regex(/^\d{4}-\d{2}-\d{2}(-preview)?$/, 'expected an Azure OpenAI API version such as 2024-10-21 or 2025-04-01-preview (leave it out for the v1 API)')
    .optional(),
  /**
   * azure_openai: how requests are authenticated: `api_key` (the `api-key` header; the default) or
   * `entra_id` (a Microsoft Entra ID token of the gateway's own identity, from the AZURE_*
   * environment: a client secret, workload identity's federated token file, or a managed identity).
   */
  auth: z.enum(['api_key', 'entra_id']).optional(),
  /**
   * bedrock: `converse` (the Converse API, any model; the default) or `anthropic` (InvokeModel with
   * Anthropic's own Messages body: Anthropic models only, every Anthropic feature kept).
   * vertex: `gemini` (generateContent; the default) or `anthropic` (rawPredict: Claude on Vertex).
   */
  api: z.enum(['converse', 'gemini', 'anthropic']).optional(),
  /** bedrock: the AWS region (`us-east-1`); its endpoint is bedrock-runtime.REGION.amazonaws.com. */
  region: z
    .string()
    .regex(/^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$/, 'expected an AWS region such as us-east-1')
    .optional(),
  /** bedrock: a named profile of the AWS shared config and credentials files; default: the AWS default chain's. */
  aws_profile: z.string().regex(/^[A-Za-z0-9_.+=,@-]{1,64}$/, 'expected a profile name').optional(),
  /** vertex: the Google Cloud project id. */
  project: z.string().regex(/^[a-z][a-z0-9-]{4,28}[a-z0-9]$/, 'expected a Google Cloud project id').optional(),
  /** vertex: the location (`us-central1`, `europe-west4`, or `global`, the default). */
  location: z.string().regex(/^(global|[a-z]+-[a-z]+\d+)$/, 'expected a Vertex AI location such as us-central1, or global').optional(),
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
  'content_filter',
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
export type RouteRetryConfig = typeof DEFAULT_ROUTE_RETRY;

/** A model entry's targets, whichever form it was written in. */
export function modelTargets(model: { provider?: string | undefined; upstream_model?: string | undefined; targets?: readonly TargetConfig[] | undefined }): readonly TargetConfig[] {
  if (model.targets !== undefined) return model.targets;
  return [{ provider: model.provider!, model: model.upstream_model, weight: 1, priority: 0, headers: {} }];
}

export const upstreamSchema = z.strictObject({
  connect_timeout_ms: positiveMilliseconds.default(5000),
  /** Longest wait for response headers, and longest silence between body chunks. */
  timeout_ms: positiveMilliseconds.default(600_000),
  /** Keep-alive connections per provider origin (0 = unlimited). */
  max_connections: fromEnv(z.number().int().nonnegative()).default(0),
});

export const routingSchema = z.strictObject({
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
