// Error answers from one API's shape to the other's. OpenAI: {error: {message, type, code, param}};
// Anthropic: {type: "error", error: {type, message}}. The SDKs choose their exception class by the
// HTTP status, which is kept; the type is mapped so code that reads it sees the caller's names.
import type { Json } from './types.ts';
import { MESSAGE_MAX, quoted } from '../api/errors.ts';

/** Anthropic's error type for an HTTP status (its API reference, "Errors"). */
export function anthropicTypeFor(status: number): string {
  if (status === 400) return 'invalid_request_error';
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 413) return 'request_too_large';
  if (status === 429) return 'rate_limit_error';
  if (status === 529) return 'overloaded_error';
  if (status === 504) return 'timeout_error';
  return status >= 500 ? 'api_error' : 'invalid_request_error';
}

/** OpenAI's error type for an HTTP status. */
export function openaiTypeFor(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 429) return 'rate_limit_exceeded';
  return status >= 500 ? 'server_error' : 'invalid_request_error';
}

/** The upstream's message, bounded: a provider may quote the whole of what the client sent (a 5 MB model name). */
function messageOf(body: unknown, status: number): string {
  const error = (body as { error?: unknown } | null | undefined)?.error;
  if (error !== null && typeof error === 'object' && typeof (error as Json).message === 'string') return quoted((error as Json).message as string, MESSAGE_MAX);
  if (typeof error === 'string') return quoted(error, MESSAGE_MAX);
  return `provider answered HTTP ${status}`;
}

/** An Anthropic error answer (or anything) as OpenAI's error body. */
export function toOpenAIError(status: number, body: unknown): Json {
  const error = (body as { error?: Json } | null | undefined)?.error;
  const type = typeof error?.type === 'string' ? error.type : undefined;
  return { error: { message: messageOf(body, status), type: openaiTypeFor(status), code: type === undefined ? null : quoted(type), param: null } };
}

/** An OpenAI error answer (or anything) as Anthropic's error body. */
export function toAnthropicError(status: number, body: unknown): Json {
  return { type: 'error', error: { type: anthropicTypeFor(status), message: messageOf(body, status) } };
}
