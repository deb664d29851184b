// Client keys and what each may do (models, expiry, limits, budget); the rate limits of each scope
// and the store that counts them (the limits section); the prices that budgets are counted in.
import { z } from 'zod';
import { fromEnv, name, positiveMilliseconds, positiveSeconds, seconds } from './value-schemas.ts';

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
  /** The team the key belongs to (a name of `teams`): the team's limits and budget apply to it too. */
  team: name.optional(),
  /** Spend allowed to each `user` the key's clients name (OpenAI's `user`, Anthropic's `metadata.user_id`), per day or month. */
  user_budget: budget.optional(),
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
export const clientKeySchema = z.union([keyText, rawKey, hashedKey]);

/**
 * A team: keys that share limits and a budget. A request passes its key's limits, its team's and the
 * gateway's in one step, or none of them counts it.
 */
export const teamSchema = z.strictObject({
  name,
  /** Requests, tokens and concurrency allowed to all the team's keys together. */
  limits: rateLimitsSchema.optional(),
  /** Spend allowed to all the team's keys together, per day or month. */
  budget: budget.optional(),
  /** Spend allowed to each `user` of the team's keys, per day or month. */
  user_budget: budget.optional(),
  /** Free labels: in the admin API and the ledger, not in metrics. */
  metadata: z.record(z.string(), z.string()).optional(),
});
export type TeamConfig = z.infer<typeof teamSchema>;

const redis = z.strictObject({
  /** redis://[user:password@]host:port[/db] or rediss:// (TLS). Never logged whole (it may hold a password). */
  url: z.string().regex(/^rediss?:\/\/[^\s]+$/, 'expected a Redis URL such as redis://127.0.0.1:6379'),
  /** Every key Sluice writes starts with this. */
  key_prefix: z.string().default('sluice:'),
  /** A command not answered by then fails (and on_store_error decides). */
  command_timeout_ms: positiveMilliseconds.default(250),
  connect_timeout_ms: positiveMilliseconds.default(2000),
});

export const limitsSchema = z.strictObject({
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
export type LimitsConfig = z.infer<typeof limitsSchema>;

/** A model's price in US dollars per million tokens. */
export const priceSchema = z.strictObject({
  input: fromEnv(z.number().nonnegative()),
  output: fromEnv(z.number().nonnegative()),
  /** Prompt tokens read from the provider's cache; default: the input price. */
  cached_input: fromEnv(z.number().nonnegative()).optional(),
  /** Prompt tokens written to the cache (Anthropic); default: the input price. */
  cache_write: fromEnv(z.number().nonnegative()).optional(),
});
export type PriceConfig = z.infer<typeof priceSchema>;
