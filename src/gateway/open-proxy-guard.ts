// A proxy that needs no client key (none configured and `auth.require_key` off: the embedded
// default, a config file without keys) serves whoever reaches it with the providers' credentials.
// A web page in the operator's browser reaches it too, and binding to loopback does not stop that:
// a form or a no-cors fetch posts JSON as text/plain without a preflight (the provider answers and
// charges the operator), a WebSocket opens a realtime session under no CORS rule at all (and its
// page reads every message), and a page that points its own name at 127.0.0.1 (DNS rebinding) is
// the proxy's own origin and reads every answer. So, while the proxy needs no key, every request
// and handshake passes these before any route (the proxy serves no page of its own):
//   1. Over a loopback connection, a Host (HTTP/2: :authority) that is a DNS name (it has a dot)
//      must be a loopback one (`localhost`, `*.localhost`) or one of `auth.allowed_hosts`: a
//      rebinding page's Host is a name in the attacker's domain, and a GET (which carries no
//      Origin) is told from a program's by nothing else. IP addresses cannot be rebound, and
//      one-label names (`sluice`, a container's) are no public domain's: both pass. A connection
//      from another machine is not checked (that client reaches the proxy anyway).
//   2. An Origin (a browser sends one with every POST, every WebSocket handshake, every
//      cross-origin fetch) must name a loopback host (a local app: http://localhost:3000) or one
//      of `auth.allowed_hosts`. A page cannot choose its Origin: the browser sets it from where
//      the page came from, the attacker's name for a rebinding page.
//   3. Without an Origin, Sec-Fetch-Site must not be `cross-site` (an image or script load of
//      another site) nor `same-origin` (a page that claims the proxy's own origin).
// Programs (SDKs, curl, probes) send no Origin nor Sec-Fetch-Site and name the address they
// connect to: unaffected. A gateway with client keys has no such guard (Routing.openGuard is
// undefined, and costs nothing): a page holds no key, and a browser app that does (the OpenAI
// SDK's realtime subprotocol) is a client like any.
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import { GatewayError } from '../api/errors.ts';
import { authorityOf, headerText, hostOf, HostNames, isLoopbackHost, originHost, quote } from '../server/request-origin.ts';

/** Verdicts kept per Host and per local address (a handful in practice); a client that sends more only empties the cache. */
const VERDICTS_KEPT = 256;

export class OpenProxyGuard {
  /** auth.allowed_hosts: the names the open proxy answers to, and whose pages it answers, besides this machine's. */
  readonly #allowed: HostNames;
  /** Whether a local address is loopback's, and whether a Host is a rebindable name: a request usually costs two lookups. */
  readonly #loopbackLocal = new Map<string, boolean>();
  readonly #rebindableHost = new Map<string, boolean>();

  constructor(allowedHosts: readonly string[]) {
    this.#allowed = new HostNames(allowedHosts);
  }

  /** The refusal for a request or handshake a web page may have sent, or undefined when it may go on. Never throws. */
  refuse(req: IncomingMessage): GatewayError | undefined {
    const local = req.socket.localAddress;
    if (local !== undefined && remembered(this.#loopbackLocal, local, isLoopbackHost)) {
      const authority = authorityOf(req);
      if (authority !== undefined && remembered(this.#rebindableHost, authority, (a) => this.#rebindable(a))) return hostNotAllowed(authority);
    }
    const origin = headerText(req.headers.origin);
    if (origin !== undefined) {
      const host = originHost(origin);
      return host !== undefined && (isLoopbackHost(host) || this.#allowed.has(host)) ? undefined : crossOrigin(`Origin ${quote(origin)}`);
    }
    const site = headerText(req.headers['sec-fetch-site']);
    if (site === undefined) return undefined;
    const value = site.trim().toLowerCase();
    return value === 'cross-site' || value === 'same-origin' ? crossOrigin(`Sec-Fetch-Site ${quote(site)}`) : undefined;
  }

  /** A Host naming a DNS name (a dot inside it) that is neither loopback's nor allowed: a page's own name may point here. */
  #rebindable(authority: string): boolean {
    const host = hostOf(authority);
    if (host === undefined) return false;
    const name = host.endsWith('.') ? host.slice(0, -1) : host;
    return name.includes('.') && !name.includes(':') && !isLoopbackHost(name) && isIP(name) === 0 && !this.#allowed.has(name);
  }
}

function remembered(verdicts: Map<string, boolean>, key: string, decide: (key: string) => boolean): boolean {
  let verdict = verdicts.get(key);
  if (verdict === undefined) {
    if (verdicts.size >= VERDICTS_KEPT) verdicts.clear();
    verdicts.set(key, (verdict = decide(key)));
  }
  return verdict;
}

function hostNotAllowed(authority: string): GatewayError {
  return new GatewayError(
    421,
    'invalid_request_error',
    'host_not_allowed',
    `this proxy needs no client key, so over loopback it answers no DNS name but loopback's and auth.allowed_hosts', not Host ${quote(authority)} (a page that points its own name at this address must not use the providers' credentials); give clients keys (keys), or list the name in auth.allowed_hosts`,
  );
}

function crossOrigin(what: string): GatewayError {
  return new GatewayError(
    403,
    'permission_error',
    'cross_origin_request',
    `request of a web page refused: ${what}; this proxy needs no client key, so it answers no web page but this machine's and those of auth.allowed_hosts (a page of another origin must not use the providers' credentials); give clients keys (keys) to serve browsers`,
  );
}
