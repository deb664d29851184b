// Why an attempt failed, in the classes routes name in `retry_on` / `fallback_on`, and when the
// next attempt may start. Pure.
import type { FailureClass } from '../config/schema.ts';

/** A transport error (undici's codes) as a failure class; undefined when it is not the upstream's fault. */
export function transportFailure(error: unknown): FailureClass {
  const code = (error as { code?: string } | null)?.code ?? '';
  switch (code) {
    case 'UND_ERR_CONNECT_TIMEOUT':
    case 'ECONNREFUSED':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
    // A cloud provider's credentials could not be had: nothing was sent.
    case 'upstream_credentials_unavailable':
      return 'connect';
    case 'UND_ERR_HEADERS_TIMEOUT':
    case 'UND_ERR_BODY_TIMEOUT':
      return 'timeout';
    default:
      return 'reset';
  }
}

/** Phrases providers use for a prompt longer than the model takes (OpenAI's, Anthropic's, Bedrock's, the Gemini API's, Vertex AI's). */
const CONTEXT_LENGTH = /context[_ ]length|context window|maximum context|prompt is too long|too many (input )?tokens|input is too long|exceeds the maximum number of tokens|model only supports up to/i;

/** The error codes of a prompt refused by a provider's content filter (Azure OpenAI's, OpenAI's). */
const CONTENT_FILTER = /"code"\s*:\s*"(content_filter|content_policy_violation)"/;

/** An HTTP status (and its error body, as text) as a failure class. */
export function statusFailure(status: number, body: string): FailureClass {
  if (status === 429) return 'rate_limited';
  if (status >= 500) return 'server_error';
  if (status === 400 && CONTENT_FILTER.test(body)) return 'content_filter';
  if ((status === 400 || status === 413) && CONTEXT_LENGTH.test(body)) return 'context_length';
  return 'client_error';
}

/** Whether `list` (a route's retry_on or fallback_on) names this failure. */
export function listed(list: readonly (FailureClass | number)[], failure: FailureClass, status: number | undefined): boolean {
  return list.includes(failure) || (status !== undefined && list.includes(status));
}

/**
 * Failures that say nothing about the target's health: the client's own mistakes (a 4xx other
 * than 429 and 408), a prompt too long or refused by the content filter, do not count toward a cooldown.
 */
export function countsAgainstTarget(failure: FailureClass): boolean {
  return failure !== 'client_error' && failure !== 'context_length' && failure !== 'content_filter';
}

/** `Retry-After` (seconds, or an HTTP date), or OpenAI's `retry-after-ms`, in ms; undefined when absent or unreadable. */
export function retryAfterMs(headers: Record<string, string | string[] | undefined>, now = Date.now()): number | undefined {
  const ms = first(headers['retry-after-ms']);
  if (ms !== undefined && /^\d+(\.\d+)?$/.test(ms.trim())) return Math.ceil(Number(ms));
  const value = first(headers['retry-after']);
  if (value === undefined) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // Only an HTTP date (RFC 9110 IMF-fixdate, "Sun, 06 Nov 1994 08:49:37 GMT"): V8's Date.parse
  // reads much garbage ("-5", "1.5") as dates long past, which would mean "now".
  if (!/^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isFinite(at) ? Math.max(0, at - now) : undefined;
}

function first(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** Exponential backoff with full jitter: a random wait in [0, min(max, base × 2^retry)]. */
export function backoffMs(retry: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(retry, 30));
  return Math.floor(random() * ceiling);
}
