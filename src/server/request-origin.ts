// Where a request says it comes from and whom it names, read as untrusted text: its Host (or
// HTTP/2 :authority), its Origin, and names matched against a list of allowed hosts. Shared by
// the guards that keep web pages away from what they must not drive: the admin API's
// (admin/request-guard.ts) and an open proxy's (gateway/open-proxy-guard.ts).
import { BlockList, isIP } from 'node:net';
import type { IncomingMessage } from 'node:http';
import { quoted } from '../api/errors.ts';
import { isHttp2Request } from './context.ts';

/** The longest header value an error quotes (then "…" and the length). */
const QUOTED_CHARS = 80;

/** 127.0.0.0/8 and ::1 (IPv4-mapped forms included: BlockList matches them). */
const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

/** A header's value as one string (HTTP/2 may give a list), or undefined when absent. */
export function headerText(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value;
}

/** The request's Host: HTTP/2's :authority (else its host header), HTTP/1's Host; undefined when absent. */
export function authorityOf(req: IncomingMessage): string | undefined {
  const headers = req.headers;
  return isHttp2Request(req) ? (headerText(headers[':authority']) ?? headerText(headers.host)) : headerText(headers.host);
}

export function unbracket(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

/**
 * The host of a Host value, lowercased (an IPv6 address without its brackets), without the port:
 * ports are not compared, so a port forward (`kubectl port-forward 8080:9901`: Host localhost:8080)
 * still reaches the listener; a rebinding attacker controls the name, not the port. Undefined when
 * it is not `host[:port]`.
 */
export function hostOf(authority: string): string | undefined {
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

/**
 * Whether a host (as `hostOf` gives it) is this machine by definition: `localhost` or a name below
 * it (browsers resolve those to loopback themselves, never through DNS), an address in
 * 127.0.0.0/8, or ::1 (IPv4-mapped forms included). A trailing dot names the same host.
 */
export function isLoopbackHost(host: string): boolean {
  const family = isIP(host);
  if (family === 0) {
    const name = host.endsWith('.') ? host.slice(0, -1) : host;
    return name === 'localhost' || name.endsWith('.localhost');
  }
  // The usual spellings first, without BlockList's address parsing.
  if ((family === 4 && host.startsWith('127.')) || host === '::1') return true;
  return LOOPBACK.check(host, family === 4 ? 'ipv4' : 'ipv6');
}

/** `origin` (scheme://host[:port], as a browser sends it) is `scheme://authority`, default ports aside. */
export function sameOrigin(origin: string, scheme: string, authority: string): boolean {
  return withoutDefaultPort(origin.trim().toLowerCase()) === withoutDefaultPort(`${scheme}://${authority.trim().toLowerCase()}`);
}

function withoutDefaultPort(origin: string): string {
  if (origin.startsWith('http://') && origin.endsWith(':80')) return origin.slice(0, -3);
  if (origin.startsWith('https://') && origin.endsWith(':443')) return origin.slice(0, -4);
  return origin;
}

/**
 * The host of an Origin (`http://localhost:3000` is "localhost"), lowercased, an IPv6 address
 * without its brackets; undefined for `null` (a sandboxed frame, a file, a data: URL) or anything
 * that is not `http(s)://host[:port]`.
 */
export function originHost(origin: string): string | undefined {
  const value = origin.trim().toLowerCase();
  const rest = value.startsWith('http://') ? value.slice(7) : value.startsWith('https://') ? value.slice(8) : undefined;
  if (rest === undefined || rest.includes('/')) return undefined;
  return hostOf(rest);
}

/** A header value to quote in an error: JSON-escaped, at most QUOTED_CHARS characters of it. */
export function quote(value: string): string {
  return JSON.stringify(quoted(value, QUOTED_CHARS));
}

/**
 * A list of allowed hosts, as `admin.allowed_hosts` and `auth.allowed_hosts` write them: names
 * matched exactly, `*.example.com` for every name below example.com, and IP addresses compared as
 * addresses (any spelling of one IPv6 address). Without case and without a trailing dot.
 */
export class HostNames {
  /** Exact names and IP addresses, lowercased (IPv6 without brackets). */
  readonly #exact: ReadonlySet<string>;
  /** The suffixes of its wildcards: `*.example.com` is ".example.com". */
  readonly #suffixes: readonly string[];
  readonly #ips = new BlockList();

  constructor(entries: readonly string[]) {
    const exact = new Set<string>();
    const suffixes: string[] = [];
    for (const entry of entries) {
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

  get empty(): boolean {
    return this.#exact.size === 0 && this.#suffixes.length === 0;
  }

  /** Whether `host` (as `hostOf` gives it) is listed. */
  has(host: string): boolean {
    const family = isIP(host);
    if (family !== 0) return this.#ips.check(host, family === 4 ? 'ipv4' : 'ipv6');
    const name = host.endsWith('.') ? host.slice(0, -1) : host;
    if (this.#exact.has(name)) return true;
    for (const suffix of this.#suffixes) if (name.endsWith(suffix)) return true;
    return false;
  }
}
