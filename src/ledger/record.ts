// One request's record in the usage ledger: what it was, who sent it, where it went and what it
// cost. Plain data, the same in the spool, in either store and in the admin API's answers.

/**
 * Text any store holds: a NUL or a lone surrogate (a client may send either) made U+FFFD.
 * PostgreSQL refuses both, and with them the whole batch. The usual text is returned as it is.
 */
export function storableText(text: string): string {
  return text.isWellFormed() && !text.includes('\u0000') ? text : text.toWellFormed().replaceAll('\u0000', '\uFFFD');
}

/**
 * A count any store holds: a whole number within ±(2^53 − 1), anything not finite 0 (a provider
 * may report a fraction of a token, or a number past any column). The usual count is returned as
 * it is.
 */
export function storableCount(value: number): number {
  if (Number.isSafeInteger(value)) return value;
  const n = Number.isFinite(value) ? Math.round(value) : 0;
  return Math.max(-Number.MAX_SAFE_INTEGER, Math.min(Number.MAX_SAFE_INTEGER, n));
}

/** One upstream attempt of a request (a retry or a fallback is one more). */
export interface LedgerAttempt {
  /** `provider/model`. */
  readonly target: string;
  /** `success`, a failure class, or `cancelled`. */
  readonly outcome: string;
  /** The upstream's HTTP status, when it answered with one. */
  readonly status?: number | undefined;
  /** From the attempt's start to its failure or its commit. */
  readonly ms: number;
}

/**
 * A request's bodies as the ledger keeps them (`ledger.bodies`): cut to `max_bytes` and redacted
 * before they are written anywhere. The request body is the bytes the gateway read; the response
 * body, what its client received (a stream's events as sent).
 */
export interface LedgerBodies {
  request_body: string;
  response_body: string;
  /** The body was longer than what is kept. */
  request_truncated: boolean;
  response_truncated: boolean;
  /** `utf8`: both bodies are their text; `base64`: one of them was not UTF-8 text, so both are their bytes in base64. */
  encoding: 'utf8' | 'base64';
}

export interface LedgerRecord {
  /** The request id (the `x-request-id` the gateway answers with): the record's key, written once. */
  id: string;
  kind: 'request' | 'realtime';
  /** Epoch ms. */
  started_at: number;
  /** Whole ms from the start to the answer's head (a stream's first content); null when none went out. */
  first_byte_ms: number | null;
  /** Epoch ms. */
  ended_at: number;
  /** The client key's name, its team, and the `user` the client named; '' when none. */
  key: string;
  team: string;
  user: string;
  /** The key's metadata. */
  metadata: Record<string, string> | null;
  /** `x-sluice-tags`. */
  tags: string[];
  /** The caller's API: `openai` or `anthropic`. */
  api: string;
  endpoint: string;
  /** The model the client asked for, the configured entry it matched, the provider that served and the model it was asked for. */
  model: string;
  route: string;
  provider: string;
  served_model: string;
  attempts: LedgerAttempt[];
  status: number;
  /** The stable error code; '' when none. */
  error: string;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  cache_write_tokens: number;
  /** The provider never reported the usage whole: estimated. */
  usage_estimated: boolean;
  /** Micro-dollars; null when the model has no price. */
  cost_micros: number | null;
  bytes_in: number;
  bytes_out: number;
  listener: string;
  /** The worker that served it (0: one process) and the hot-restart generation (0: none). */
  worker: number;
  generation: number;
  /** Its bodies, when `ledger.bodies` is on (absent otherwise). */
  bodies?: LedgerBodies | undefined;
}
