// What a request may use, estimated before it runs: its prompt from the body's size, its output from
// its max_tokens (or a default) for each choice it asks for. The token reservation (limiter.ts) and
// a budget's hold (budgets.ts) are both made of these.
import type { AdmitRequest } from './limit-policy.ts';

/** The prompt's tokens estimated from the request body's size: 4 bytes a token. */
export function promptEstimate(bodyBytes: number): number {
  return Math.ceil(bodyBytes / 4);
}

/** The most choices a request is reserved for: OpenAI's own bound on `n`. */
const MAX_CHOICES = 128;

/**
 * The token reservation: the prompt estimated from the body's size (4 bytes a token), plus the
 * completion's maximum for each choice the provider generates (`n`, or `best_of` on completions,
 * which generates that many and returns the best: every one is billed).
 */
export function estimateTokens(request: Pick<AdmitRequest, 'json' | 'bodyBytes' | 'generates'>, defaultOutput: number): number {
  return promptEstimate(request.bodyBytes) + outputTokens(request, defaultOutput);
}

/** The most completion tokens a request may produce: its max_tokens (`defaultOutput` when it sets none) for each choice. */
export function outputTokens(request: Pick<AdmitRequest, 'json' | 'generates'>, defaultOutput: number): number {
  if (!request.generates) return 0;
  const j = request.json;
  const max = j.max_completion_tokens ?? j.max_tokens ?? j.max_output_tokens;
  const output = typeof max === 'number' && Number.isFinite(max) && max >= 0 ? Math.min(Math.floor(max), 10_000_000) : defaultOutput;
  return output * Math.max(choices(j.n), choices(j.best_of));
}

/** A count of choices as a client may send it: a whole number from 1 (anything else is 1) to MAX_CHOICES. */
function choices(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 1 ? Math.min(Math.floor(value), MAX_CHOICES) : 1;
}
