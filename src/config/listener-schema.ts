// The listeners and the downstream section: the addresses clients connect to (`parseAddress`
// reads every address of the config), TLS, protocols, and how client connections are held.
import { z } from 'zod';
import { fromEnv, name, positiveSeconds, seconds } from './value-schemas.ts';

const ADDRESS = /^(?:\[(?<v6>[0-9a-fA-F:.]+)\]|(?<host>[^\s:[\]]*)):(?<port>\d{1,5})$/;

export interface SocketAddress {
  host: string;
  port: number;
}

/** Parses `host:port`, `[v6]:port` or `:port` (all interfaces). */
export function parseAddress(text: string): SocketAddress | undefined {
  const match = ADDRESS.exec(text);
  if (!match?.groups) return undefined;
  const port = Number(match.groups.port);
  if (port > 65535) return undefined;
  const host = match.groups.v6 ?? (match.groups.host || '0.0.0.0');
  return { host, port };
}

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

const address = z.string().refine((text) => parseAddress(text) !== undefined, {
  message: 'expected an address "host:port" (for example 127.0.0.1:8080 or [::1]:8080), port 0-65535',
});

const tls = z.strictObject({
  /** PEM certificate chain. Re-read on SIGHUP and when the file changes. */
  cert_file: z.string().min(1),
  key_file: z.string().min(1),
  /** PEM CA bundle: when set, clients must present a certificate it signed (mutual TLS). */
  client_ca_file: z.string().min(1).optional(),
  /** A connection that has not finished its TLS handshake by then is closed. */
  handshake_timeout_secs: positiveSeconds.default(10),
});

export const listenerSchema = z.strictObject({
  name,
  address,
  role: z.enum(['proxy', 'admin']),
  tls: tls.optional(),
  /**
   * Protocols served. With TLS they are offered by ALPN (default both). In cleartext, `h2` means
   * HTTP/2 with prior knowledge (h2c); with both, each connection's first bytes decide.
   */
  protocols: z.array(z.enum(['http1', 'h2'])).min(1, 'expected at least one of "http1", "h2"').optional(),
  /** E5: `modify_only` listeners are retired only when changed or removed (not by SIGTERM or health-check fail; a drain that exits still closes them at its end). */
  drain_type: z.enum(['default', 'modify_only']).default('default'),
  /** E4: `inboundonly` admin drains leave `outbound` listeners alone. */
  direction: z.enum(['inbound', 'outbound']).default('inbound'),
});

export const downstreamSchema = z.strictObject({
  /** Keep-alive connections idle this long are closed; 0 leaves that to the client. */
  idle_timeout_secs: seconds.default(0),
  /** L6: with no idle timeout, how long a fresh connection is held after the listeners close. */
  fresh_connection_grace_secs: seconds.default(10),
  request_body_limit_bytes: fromEnv(z.number().int().positive()).default(10 * 1024 * 1024),
  /** Time allowed for a client to send complete request headers (slowloris protection). */
  headers_timeout_secs: positiveSeconds.default(30),
  /** Time allowed for a client to send a complete request body. */
  request_timeout_secs: seconds.default(300),
  /** E2/E6: a connection told to go (proactive drain, listener changed) gets this long before it is closed if idle. */
  drain_timeout_secs: seconds.default(5),
  /** Open downstream connections allowed per process (each worker) across its listeners (0 = no limit); more are closed at once. */
  max_connections: fromEnv(z.number().int().nonnegative()).default(0),
});
