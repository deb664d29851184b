// Which headers cross the gateway. Hop-by-hop headers (RFC 9110 §7.6.1), the client's credentials
// and `host` never go upstream; hop-by-hop headers from upstream never come back. The provider
// account is the operator's: a client does not choose which of its organizations or projects is
// billed (a provider's configured `headers` do), and is not told which they are.
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

const NOT_FORWARDED_UPSTREAM = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'authorization',
  'x-api-key',
  // Azure OpenAI's key header, Google's and an AWS session token: a client's is never passed on.
  'api-key',
  'x-goog-api-key',
  'x-amz-security-token',
  'content-length',
  'content-type',
  'accept-encoding',
  'expect',
  'x-request-id',
  'cookie',
  'openai-organization',
  'openai-project',
]);

const NOT_RETURNED_DOWNSTREAM = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'x-request-id',
  'set-cookie',
  'openai-organization',
  'openai-project',
  'anthropic-organization-id',
]);

/** Client headers fit to send upstream, minus any named in the client's own `Connection`. */
export function upstreamHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const connectionTokens = listTokens(headers.connection);
  for (const name in headers) {
    if (NOT_FORWARDED_UPSTREAM.has(name) || name.startsWith(':')) continue;
    if (connectionTokens !== undefined && connectionTokens.has(name)) continue;
    const value = headers[name];
    if (value !== undefined) out[name] = value;
  }
  return out;
}

/** Upstream response headers fit to return to the client. */
export function downstreamHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  const connectionTokens = listTokens(headers.connection);
  for (const name in headers) {
    if (NOT_RETURNED_DOWNSTREAM.has(name)) continue;
    if (connectionTokens !== undefined && connectionTokens.has(name)) continue;
    const value = headers[name];
    if (value === undefined) continue;
    // Response splitting: a value with CR or LF is dropped, never written.
    if (typeof value === 'string' ? /[\r\n]/.test(value) : value.some((v) => /[\r\n]/.test(v))) continue;
    out[name] = value;
  }
  return out;
}

function listTokens(value: string | string[] | undefined): Set<string> | undefined {
  if (value === undefined) return undefined;
  const text = Array.isArray(value) ? value.join(',') : value;
  if (text === 'keep-alive' || text === 'close') return undefined;
  return new Set(text.split(',').map((t) => t.trim().toLowerCase()));
}
