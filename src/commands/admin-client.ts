// What the commands that talk to a running gateway's admin API share (`sluice restart`, `apply`,
// `get`): where the API is, which token to send, and one request with a deadline.
import type { Config } from '../config/schema.ts';
import { parseAddress } from '../config/schema.ts';
import { redactUrl, redactUrlsIn } from '../config/redact-url.ts';

/** The admin API's URL: given, or the config's first admin listener (a wildcard host is asked on loopback). */
export function adminUrl(config: Config, given: string | undefined): string | undefined {
  if (given) return given.replace(/\/+$/, '');
  const admin = config.listeners.find((l) => l.role === 'admin');
  const parsed = admin ? parseAddress(admin.address) : undefined;
  if (!admin || !parsed) return undefined;
  const host = parsed.host === '0.0.0.0' ? '127.0.0.1' : parsed.host === '::' ? '::1' : parsed.host;
  return `${admin.tls ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${parsed.port}`;
}

/** The admin token to send: `--token`, else SLUICE_ADMIN_TOKEN, else the config's `admin.token`, else its first `admin.tokens[]`. */
export function adminToken(config: Config, given: string | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  return given || env.SLUICE_ADMIN_TOKEN || config.admin.token || config.admin.tokens[0]?.token || undefined;
}

export interface AdminAnswer {
  readonly status: number;
  /** The body parsed as JSON; undefined when it is not JSON. */
  readonly json: unknown;
  readonly text: string;
  readonly headers: Headers;
}

/** The admin API could not be asked at all (refused, timed out, a bad URL): nothing was answered. */
export class AdminUnreachable extends Error {
  constructor(base: string, reason: string) {
    // A URL given with a user or password (which fetch refuses) is not printed with them.
    super(`cannot reach the admin API at ${redactUrl(base)}: ${redactUrlsIn(reason)}`);
    this.name = 'AdminUnreachable';
  }
}

const TIMEOUT_MS = 10_000;

/**
 * One request to the admin API at `base` (`path` starts with "/"). `body`, when given, is sent as
 * JSON. Any HTTP status is an answer; only a request that gets none throws AdminUnreachable.
 */
export async function adminRequest(
  base: string,
  token: string | undefined,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<AdminAnswer> {
  const sent: Record<string, string> = { accept: 'application/json', ...headers };
  if (token) sent.authorization = `Bearer ${token}`;
  if (body !== undefined) sent['content-type'] = 'application/json';
  let res: Response;
  let text: string;
  try {
    res = await fetch(`${base}${path}`, {
      method,
      headers: sent,
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
    text = await res.text();
  } catch (error) {
    throw new AdminUnreachable(base, reasonOf(error));
  }
  let json: unknown;
  try {
    json = text === '' ? undefined : JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text, headers: res.headers };
}

/** Why fetch failed, in words: undici's "fetch failed" hides the reason in its cause. */
export function reasonOf(error: unknown, timeoutMs = TIMEOUT_MS): string {
  if (error instanceof DOMException && error.name === 'TimeoutError') return `no answer within ${timeoutMs / 1000} s`;
  const cause = (error as { cause?: unknown } | null)?.cause;
  if (cause instanceof Error) {
    // An AggregateError (every address of a name refused) says the most in its first error.
    const first = cause instanceof AggregateError && cause.errors[0] instanceof Error ? cause.errors[0] : cause;
    return first.message || String((first as NodeJS.ErrnoException).code ?? cause);
  }
  return (error as Error)?.message ?? String(error);
}

/** The message of an error answer ({"error":{"message"}}), else its text, else its status. */
export function errorMessage(answer: AdminAnswer): string {
  const message = (answer.json as { error?: { message?: unknown } } | undefined)?.error?.message;
  if (typeof message === 'string' && message !== '') return message;
  const text = answer.text.trim();
  return text === '' ? `HTTP ${answer.status}` : text.slice(0, 500);
}

/** The error code of an error answer ({"error":{"code"}}), if any. */
export function errorCode(answer: AdminAnswer): string | undefined {
  const code = (answer.json as { error?: { code?: unknown } } | undefined)?.error?.code;
  return typeof code === 'string' ? code : undefined;
}
