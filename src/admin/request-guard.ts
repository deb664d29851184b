// What every request to an admin listener passes before any route, the probes and /metrics
// included: the admin API obeys its operator's tools (curl, `sluice`, probes, scrapers, the status
// page), never a web page the operator's browser happens to show.
//   1. Host (HTTP/2: :authority) must name this listener: a loopback name or address, the address
//      it is bound to (any IP address when bound to all interfaces), or one of admin.allowed_hosts.
//      A page that rebinds its own name to 127.0.0.1 is same-origin with the API: only this stops it.
//   2. A browser's request must come from this listener's own origin: Sec-Fetch-Site, when sent,
//      is `same-origin` (or `none`, an address typed or bookmarked, for GET and HEAD), and Origin,
//      when sent, is this listener's origin. A page on another port of 127.0.0.1 is the same site
//      but another origin: refused.
//   3. A write (POST, PUT, DELETE, PATCH) that carries a Content-Type says application/json, and
//      one with a body carries one: a page can send text/plain, a form or no-cors fetch without
//      a preflight, never application/json. A bodyless write without one (`curl -X POST`) passes.
// Every value is read as untrusted text; what an error quotes is capped.
import { BlockList, isIP } from 'node:net';
import type { IncomingMessage } from 'node:http';
import type { Http2ServerRequest } from 'node:http2';
import { GatewayError } from '../api/errors.ts';
import { parseAddress } from '../config/schema.ts';
import { isHttp2Request } from '../server/context.ts';
import { authorityOf, headerText as text, hostOf, HostNames, isLoopbackHost, quote, sameOrigin } from '../server/request-origin.ts';

/** What the guard needs of the listener a request arrived on. */
export interface GuardedListener {
  /** As configured (`127.0.0.1:9901`, `0.0.0.0:9901`, `[::1]:0`, `admin.internal:9901`). */
  readonly configuredAddress: string;
  readonly tls: boolean;
}

/** Every admin answer: no other origin may embed it, and no browser may sniff it into another type. */
export const ADMIN_RESPONSE_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'x-content-type-options': 'nosniff',
  'cross-origin-resource-policy': 'same-origin',
});

const WRITES = new Set(['POST', 'PUT', 'DELETE', 'PATCH']);

/** What the guard knows of one listener, computed at its first request. */
interface ListenerFacts {
  readonly scheme: 'http' | 'https';
  /** Bound to every interface (0.0.0.0, ::): any IP address names it. */
  readonly wildcard: boolean;
  /** The IP address it is bound to, when bound to one that is not a wildcard. */
  readonly boundIp: BlockList | undefined;
  /** The host name it is bound to, lowercased, when bound by name. */
  readonly boundName: string | undefined;
}

export class AdminRequestGuard {
  /** admin.allowed_hosts. */
  readonly #allowed: HostNames;
  /** By listener: two may share an address for a moment (a reload that switches TLS on it). */
  readonly #listeners = new WeakMap<GuardedListener, ListenerFacts>();

  constructor(allowedHosts: readonly string[]) {
    this.#allowed = new HostNames(allowedHosts);
  }

  /** The refusal for this request, or undefined when it may go on to its route. Never throws. */
  refuse(req: IncomingMessage, listener: GuardedListener): GatewayError | undefined {
    const facts = this.#factsOf(listener);
    const headers = req.headers;
    const authority = authorityOf(req);
    // No Host at all: HTTP/1.0 (HTTP/1.1 without one was refused before). No browser sends that.
    if (authority !== undefined && !this.#hostAllowed(authority, facts)) return hostNotAllowed(authority);
    const method = req.method ?? '';
    const site = text(headers['sec-fetch-site']);
    if (site !== undefined) {
      const value = site.trim().toLowerCase();
      if (value !== 'same-origin' && !(value === 'none' && (method === 'GET' || method === 'HEAD'))) return crossSite(`Sec-Fetch-Site ${quote(site)}`);
    }
    const origin = text(headers.origin);
    if (origin !== undefined && (authority === undefined || !sameOrigin(origin, facts.scheme, authority))) {
      return crossSite(`Origin ${quote(origin)}${authority === undefined ? ' without a Host' : ` is not ${quote(`${facts.scheme}://${authority}`)}`}`);
    }
    if (WRITES.has(method)) {
      const type = text(headers['content-type']);
      if (type === undefined ? hasBody(req) : mediaType(type) !== 'application/json') return notJson(method, type);
    }
    return undefined;
  }

  #factsOf(listener: GuardedListener): ListenerFacts {
    let facts = this.#listeners.get(listener);
    if (facts) return facts;
    // parseAddress gives "0.0.0.0" for an address without a host (":9901"); never undefined for a validated config.
    const host = parseAddress(listener.configuredAddress)?.host.toLowerCase() ?? '';
    const wildcard = host === '0.0.0.0' || host === '::';
    const family = isIP(host);
    let boundIp: BlockList | undefined;
    if (family !== 0 && !wildcard) {
      boundIp = new BlockList();
      boundIp.addAddress(host, family === 4 ? 'ipv4' : 'ipv6');
    }
    facts = {
      scheme: listener.tls ? 'https' : 'http',
      wildcard,
      boundIp,
      boundName: family === 0 && host !== '' ? host.replace(/\.$/, '') : undefined,
    };
    this.#listeners.set(listener, facts);
    return facts;
  }

  #hostAllowed(authority: string, facts: ListenerFacts): boolean {
    const host = hostOf(authority);
    if (host === undefined) return false;
    // An IP address cannot be rebound: a page with this Host was loaded from that address itself.
    if (isLoopbackHost(host) || this.#allowed.has(host)) return true;
    const family = isIP(host);
    if (family !== 0) return facts.wildcard || facts.boundIp?.check(host, family === 4 ? 'ipv4' : 'ipv6') === true;
    // A trailing dot names the same host ("localhost." is localhost).
    return (host.endsWith('.') ? host.slice(0, -1) : host) === facts.boundName;
  }
}

/** The media type of a Content-Type, without its parameters, lowercased. */
function mediaType(type: string): string {
  const semicolon = type.indexOf(';');
  return (semicolon === -1 ? type : type.slice(0, semicolon)).trim().toLowerCase();
}

/** Whether a request says it has a body: a length above 0, chunked, or (HTTP/2) data after its headers. */
function hasBody(req: IncomingMessage): boolean {
  if (isHttp2Request(req)) return !(req as unknown as Http2ServerRequest).stream.endAfterHeaders;
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && Number(length) !== 0);
}

function hostNotAllowed(authority: string): GatewayError {
  return new GatewayError(
    421,
    'invalid_request_error',
    'host_not_allowed',
    `the admin API does not answer to Host ${quote(authority)}: it answers to loopback names and addresses, the address its listener is bound to, and admin.allowed_hosts (a page that points its own name at this address must not drive it)`,
  );
}

function crossSite(what: string): GatewayError {
  return new GatewayError(403, 'permission_error', 'cross_origin_request', `cross-origin request refused: ${what}; the admin API answers only its own origin (a page of another origin must not drive it)`);
}

function notJson(method: string, type: string | undefined): GatewayError {
  const got = type === undefined ? 'a body without a Content-Type' : `Content-Type ${quote(type)}`;
  return new GatewayError(415, 'invalid_request_error', 'unsupported_media_type', `a ${method} to the admin API takes Content-Type: application/json, or no body at all (got ${got})`);
}
