// What a client is told of the rate limits: the x-ratelimit-* headers of the tightest buckets, and
// the 429 of a refused one (which limit, of what scope, and when to try again), as OpenAI words them.
import { errors, type GatewayError } from '../api/errors.ts';
import type { Scope } from './limit-policy.ts';
import type { BucketReading, RateBucket, Verdict } from './store.ts';

/** A per-minute bucket a request is counted in, and the scope it belongs to. */
export interface Applied {
  readonly scope: Scope;
  readonly label: string;
  readonly bucket: RateBucket;
}

/** A `concurrent` limit a request asks a place in. */
export interface AppliedConcurrency {
  scope: Scope;
  id: string;
  max: number;
}

/** What a request refused by a concurrent limit is told to wait before it tries again. */
const CONCURRENT_RETRY_MS = 1000;

/** The scope of the limit that refused (any but a budget's: budgets.ts words those). */
export function refusedScope(verdict: Extract<Verdict, { ok: false }>, requests: readonly Applied[], tokens: readonly Applied[], concurrency: readonly AppliedConcurrency[]): Scope {
  const refusedBy = verdict.limit === 'requests' ? requests[verdict.index]! : verdict.limit === 'tokens' ? tokens[verdict.index]! : undefined;
  return refusedBy?.scope ?? concurrency[verdict.index]!.scope;
}

/** The 429 of a request refused by a rate or concurrent limit. */
export function rateLimitRefusal(
  key: string,
  model: string,
  cost: number,
  verdict: Extract<Verdict, { ok: false }>,
  scope: Scope,
  headers: Readonly<Record<string, string>>,
  requests: readonly Applied[],
  tokens: readonly Applied[],
  concurrency: readonly AppliedConcurrency[],
  team = '',
): GatewayError {
  // A place in a concurrent limit is free as soon as one of the requests holding it ends, which no
  // store can foresee (the soonest lease expiry is ~lease_secs away, renewed while they run).
  const ms = verdict.limit === 'concurrent' ? CONCURRENT_RETRY_MS : Math.max(1, verdict.retryAfterMs);
  const what =
    verdict.limit === 'requests'
      ? `${requests[verdict.index]!.bucket.capacity} requests per minute`
      : verdict.limit === 'tokens'
        ? `${tokens[verdict.index]!.bucket.capacity} tokens per minute (this request reserves ${cost})`
        : `${concurrency[verdict.index]!.max} concurrent requests`;
  const message = `Rate limit reached for ${scopeWords(scope, key, model, team)}: ${what}. Try again in ${formatDuration(ms)}.`;
  return errors.rateLimited(message, { ...headers, 'retry-after': String(Math.ceil(ms / 1000)), 'retry-after-ms': String(ms) });
}

function scopeWords(scope: Scope, key: string, model: string, team: string): string {
  switch (scope) {
    case 'team':
      return `team "${team}"`;
    case 'global':
      return 'this gateway';
    case 'model':
      return `model "${model}"`;
    case 'key':
      return `API key "${key}"`;
    case 'key_model':
      return `API key "${key}" on model "${model}"`;
  }
}

/** OpenAI's x-ratelimit-* headers, from the tightest bucket of each kind. */
export function rateHeaders(requests: readonly Applied[], tokens: readonly Applied[], requestReadings: readonly BucketReading[], tokenReadings: readonly BucketReading[]): Record<string, string> {
  const headers: Record<string, string> = {};
  const tightest = (applied: readonly Applied[], readings: readonly BucketReading[], kind: string) => {
    let best = -1;
    for (let i = 0; i < readings.length; i++) if (best === -1 || readings[i]!.remaining < readings[best]!.remaining) best = i;
    if (best === -1) return;
    headers[`x-ratelimit-limit-${kind}`] = String(applied[best]!.bucket.capacity);
    headers[`x-ratelimit-remaining-${kind}`] = String(readings[best]!.remaining);
    headers[`x-ratelimit-reset-${kind}`] = formatDuration(readings[best]!.fullInMs);
  };
  tightest(requests, requestReadings, 'requests');
  tightest(tokens, tokenReadings, 'tokens');
  return headers;
}

/** As OpenAI writes durations: "20ms", "1s", "6m0s", "1h2m3s" (fractions of a second kept to ms). */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms`;
  const totalSeconds = ms / 1000;
  const h = Math.floor(totalSeconds / 3600);
  const m = Math.floor((totalSeconds % 3600) / 60);
  const sec = Math.round((totalSeconds % 60) * 1000) / 1000;
  return `${h > 0 ? `${h}h` : ''}${h > 0 || m > 0 ? `${m}m` : ''}${sec}s`;
}
