// Who may use the gateway: the auth section (whether a proxy request needs a client key, the hosts
// a proxy open without one answers) and the admin section (tokens, allowed hosts, the status page).
import { isIP } from 'node:net';
import { z } from 'zod';
import { fromEnv, name } from './value-schemas.ts';

const adminToken = z.string().min(16, 'expected an admin token of at least 16 characters');

/** A host name of ASCII labels (a browser sends an international name in its xn-- form). */
const HOST_NAME = /^[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*$/i;
const ALLOWED_HOST = 'expected a host name ("admin.example.com"), a wildcard of its subdomains ("*.example.com") or an IP address, without a port';
/** An `admin.allowed_hosts` (or `auth.allowed_hosts`) entry: a name, `*.` and a name, or an IP address (IPv6 with or without brackets). */
function isAllowedHostPattern(text: string): boolean {
  const name = text.startsWith('*.') ? text.slice(2) : text;
  if (HOST_NAME.test(name)) return true;
  return !text.startsWith('*.') && isIP(text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text) !== 0;
}
const allowedHost = z.string().refine(isAllowedHostPattern, { error: (issue) => `${ALLOWED_HOST} (got ${JSON.stringify(String(issue.input).slice(0, 80))})` });

export const authSchema = z.strictObject({
  /**
   * Every proxy request must present a client key, even when none exists (then each gets
   * 401 no_client_keys and readiness fails `client_keys`): deleting the last key closes the gateway
   * rather than opening it. Default: on in etcd mode, off otherwise (`requiresClientKey`).
   */
  require_key: fromEnv(z.boolean()).optional(),
  /**
   * While the proxy needs no key: the names it answers to over loopback (Host) and the hosts of the
   * web pages it answers (Origin), besides this machine's (gateway/open-proxy-guard.ts).
   */
  allowed_hosts: z.array(allowedHost).default([]),
});

export const adminSchema = z.strictObject({
  /** Bearer token required on every admin route except /livez, /readyz and /metrics (its name in audit events: "admin"). */
  token: adminToken.optional(),
  /**
   * More tokens, each with the name that audit events give as who made a change, and its scope:
   * `write` (the default) may do everything; `read` sees the status, the metrics and the
   * resources and changes nothing (a write, a drain, a health-check change or a hot restart is 403).
   */
  tokens: z.array(z.strictObject({ name, token: adminToken, scope: z.enum(['read', 'write']).default('write') })).default([]),
  /** Admin listeners must bind to loopback unless this is true. */
  allow_non_loopback: fromEnv(z.boolean()).default(false),
  /**
   * The Host names the admin API answers to besides loopback and the listener's own address (DNS
   * rebinding protection, admin/request-guard.ts): names, `*.example.com` for its subdomains, IPs.
   */
  allowed_hosts: z.array(allowedHost).default([]),
  /** GET /status (the live status page) and GET /status/events (its event stream); false: both 404. */
  status_page: fromEnv(z.boolean()).default(true),
});
