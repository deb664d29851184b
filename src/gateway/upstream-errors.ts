// Upstream failures, by undici's error codes: what the client sees and what the metrics count.
import { errors, type GatewayError } from '../api/errors.ts';

export function classifyUpstreamError(error: unknown, provider: string): { error: GatewayError; kind: string } {
  const code = (error as { code?: string } | null)?.code ?? '';
  switch (code) {
    case 'UND_ERR_CONNECT_TIMEOUT':
      return { error: errors.upstreamTimeout(provider), kind: 'connect_timeout' };
    case 'UND_ERR_HEADERS_TIMEOUT':
    case 'UND_ERR_BODY_TIMEOUT':
      return { error: errors.upstreamTimeout(provider), kind: 'timeout' };
    case 'ECONNREFUSED':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return { error: errors.upstreamConnect(provider), kind: 'connect' };
    case 'UND_ERR_SOCKET':
    case 'ECONNRESET':
    case 'EPIPE':
      return { error: errors.upstreamReset(provider), kind: 'reset' };
    default:
      return { error: errors.upstreamFailed(provider), kind: 'other' };
  }
}

/** The metrics kind of a route's final error (`sluice_upstream_errors_total`), as for a transport error. */
const KIND_OF_CODE: Readonly<Record<string, string>> = {
  upstream_connect_failed: 'connect',
  upstream_reset: 'reset',
  upstream_timeout: 'timeout',
  upstream_first_token_timeout: 'first_token_timeout',
  upstream_stream_cut: 'stream_cut',
};

export function kindOfCode(code: string): string {
  return KIND_OF_CODE[code] ?? code;
}
