// The client's half of a WebSocket opening handshake (RFC 6455 §4.2.1), checked before anything
// is done for it: a malformed one is a 4xx here, never an exception from the WebSocket library
// later (R1) and never an upstream connection opened for nothing.
import type { IncomingMessage } from 'node:http';
import { GatewayError } from '../api/errors.ts';

export type HandshakeCheck = { ok: true; protocols: string[] } | { ok: false; error: GatewayError };

/** A base64-encoded 16-byte nonce (RFC 6455 §4.1). */
const KEY = /^[+/0-9A-Za-z]{22}==$/;
/** RFC 7230 §3.2.6 token: what a subprotocol name may be (RFC 6455 §4.1, item 10). */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

function invalid(message: string, headers?: Record<string, string>): HandshakeCheck {
  return { ok: false, error: new GatewayError(400, 'invalid_request_error', 'invalid_websocket_handshake', message, headers) };
}

/** The subprotocols the client offered, or undefined when the header is malformed or repeats one. */
export function parseSubprotocols(header: string | undefined): string[] | undefined {
  if (header === undefined) return [];
  const names = header.split(',').map((p) => p.trim());
  if (names.some((p) => !TOKEN.test(p)) || new Set(names).size !== names.length) return undefined;
  return names;
}

export function checkHandshake(req: IncomingMessage): HandshakeCheck {
  if (req.method !== 'GET') {
    return { ok: false, error: new GatewayError(405, 'invalid_request_error', 'method_not_allowed', `${req.method} is not allowed for a WebSocket handshake (use GET)`, { allow: 'GET' }) };
  }
  if (req.headers.upgrade?.toLowerCase() !== 'websocket') return invalid('the Upgrade header must be "websocket"');
  const key = req.headers['sec-websocket-key'];
  if (key === undefined || !KEY.test(key)) return invalid('missing or invalid Sec-WebSocket-Key header (one base64-encoded 16-byte value)');
  const version = req.headers['sec-websocket-version'];
  if (version !== '13' && version !== '8') return invalid('missing or unsupported Sec-WebSocket-Version header (13 is supported)', { 'sec-websocket-version': '13' });
  const protocols = parseSubprotocols(req.headers['sec-websocket-protocol']);
  if (!protocols) return invalid('invalid Sec-WebSocket-Protocol header: a comma-separated list of distinct tokens is expected');
  return { ok: true, protocols };
}
