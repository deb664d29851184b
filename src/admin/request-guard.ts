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
import { GatewayError, quoted } from '../api/errors.ts';
import { parseAddress } from '../config/schema.ts';
import { isHttp2Request } from '../server/context.ts';

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
/** The longest header value an error quotes (then "…" and the length). */
const QUOTED_CHARS = 80;

/** 127.0.0.0/8 and ::1 (IPv4-mapped forms included: BlockList matches them). */
const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

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
  /** Exact names and IP addresses of admin.allowed_hosts, lowercased (IPv6 without brackets). */
  readonly #exact: ReadonlySet<string>;
  /** The suffixes of its wildcards: `*.example.com` is ".example.com". */
  readonly #suffixes: readonly string[];
  /** Its IP addresses, compared as addresses (any spelling of one IPv6 address). */
  readonly #ips = new BlockList();
  /** By listener: two may share an address for a moment (a reload that switches TLS on it). */
  readonly #listeners = new WeakMap<GuardedListener, ListenerFacts>();

  constructor(allowedHosts: readonly string[]) {
    const exact = new Set<string>();
    const suffixes: string[] = [];
    for (const entry of allowedHosts) {
      const host = unbracket(entry.toLowerCase());
      if (host.startsWith('*.')) suffixes.push(host.slice(1));
      else {
        exact.add(host);
        const family = isIP(host);
        if (family !== 0) this.#ips.addAddress(host, family === 4 ? 'ipv4' : 'ipv6');
      }
    }
    this.#exact = exact;
    this.#suffixes = suffixes;
  }

  /** The refusal for this request, or undefined when it may go on to its route. Never throws. */
  refuse(req: IncomingMessage, listener: GuardedListener): GatewayError | undefined {
    const facts = this.#factsOf(listener);
    const headers = req.headers;
    const authority = isHttp2Request(req) ? (text(headers[':authority']) ?? text(headers.host)) : text(headers.host);
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
    const family = isIP(host);
    if (family !== 0) {
      // An IP address cannot be rebound: a page with this Host was loaded from that address itself.
      // The usual spellings of loopback first, without BlockList's address parsing.
      if ((family === 4 && host.startsWith('127.')) || host === '::1' || facts.wildcard) return true;
      const type = family === 4 ? 'ipv4' : 'ipv6';
      return LOOPBACK.check(host, type) || facts.boundIp?.check(host, type) === true || this.#ips.check(host, type);
    }
    // A trailing dot names the same host ("localhost." is localhost).
    const name = host.endsWith('.') ? host.slice(0, -1) : host;
    if (name === 'localhost' || name.endsWith('.localhost') || name === facts.boundName || this.#exact.has(name)) return true;
    for (const suffix of this.#suffixes) if (name.endsWith(suffix)) return true;
    return false;
  }
}

/** A header's value as one string (HTTP/2 may give a list), or undefined when absent. */
function text(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value;
}

function unbracket(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

/**
 * The host of a Host value, lowercased (an IPv6 address without its brackets), without the port:
 * ports are not compared, so a port forward (`kubectl port-forward 8080:9901`: Host localhost:8080)
 * still reaches the API; a rebinding attacker controls the name, not the port. Undefined when it
 * is not `host[:port]`.
 */
function hostOf(authority: string): string | undefined {
  const value = authority.toLowerCase();
  if (value.startsWith('[')) {
    const end = value.indexOf(']');
    if (end === -1 || !/^(?::\d*)?$/.test(value.slice(end + 1))) return undefined;
    return value.slice(1, end);
  }
  const colon = value.lastIndexOf(':');
  const host = colon === -1 ? value : value.slice(0, colon);
  if (colon !== -1 && !/^\d*$/.test(value.slice(colon + 1))) return undefined;
  return host === '' || host.includes(':') ? undefined : host;
}

/** `origin` (scheme://host[:port], as a browser sends it) is `scheme://authority`, default ports aside. */
function sameOrigin(origin: string, scheme: string, authority: string): boolean {
  return withoutDefaultPort(origin.trim().toLowerCase()) === withoutDefaultPort(`${scheme}://${authority.trim().toLowerCase()}`);
}

function withoutDefaultPort(origin: string): string {
  if (origin.startsWith('http://') && origin.endsWith(':80')) return origin.slice(0, -3);
  if (origin.startsWith('https://') && origin.endsWith(':443')) return origin.slice(0, -4);
  return origin;
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

/** A header value to quote in an error: JSON-escaped, at most QUOTED_CHARS characters of it. */
function quote(value: string): string {
  return JSON.stringify(quoted(value, QUOTED_CHARS));
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
