// Malformed requests that never reach a handler (bad syntax, oversized headers, smuggling attempts,
// timeouts) get an OpenAI-shaped error and the connection is closed.
import type { Duplex } from 'node:stream';
import type { ServerResponse } from 'node:http';

const RESPONSES = new Map<string, [number, string, string]>([
  ['HPE_HEADER_OVERFLOW', [431, 'header_too_large', 'request headers are too large']],
  ['ERR_HTTP_REQUEST_TIMEOUT', [408, 'request_timeout', 'request was not received in time']],
  ['HPE_UNEXPECTED_CONTENT_LENGTH', [400, 'bad_request', 'conflicting Content-Length and Transfer-Encoding']],
  ['HPE_INVALID_TRANSFER_ENCODING', [400, 'bad_request', 'invalid Transfer-Encoding']],
  ['HPE_INVALID_CONTENT_LENGTH', [400, 'bad_request', 'invalid Content-Length']],
]);

function build(status: number, code: string, message: string): Buffer {
  const body = JSON.stringify({ error: { message, type: 'invalid_request_error', code } });
  const reason = status === 431 ? 'Request Header Fields Too Large' : status === 408 ? 'Request Timeout' : 'Bad Request';
  return Buffer.from(`HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
}

const PREBUILT = new Map([...RESPONSES].map(([code, [status, errorCode, message]]) => [code, build(status, errorCode, message)]));
/** Error codes of responses answered here, for the access log of their request. */
export const clientErrorCodes = new WeakMap<ServerResponse, string>();

const BAD_REQUEST = build(400, 'bad_request', 'malformed HTTP request');
const REQUEST_TIMEOUT_BODY = JSON.stringify({ error: { message: 'request was not received in time', type: 'invalid_request_error', code: 'request_timeout' } });

export function sendClientError(error: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex): void {
  if (error.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  // A request already answered in part cannot take a second status line.
  const response = (socket as Duplex & { _httpMessage?: ServerResponse })._httpMessage;
  if (response?.headersSent) {
    socket.destroy();
    return;
  }
  // A request whose body did not arrive in time has a response object: answer through it, so the
  // access log and metrics see the 408 (not a client that went away).
  if (response && error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    const body = REQUEST_TIMEOUT_BODY;
    clientErrorCodes.set(response, 'request_timeout');
    response.writeHead(408, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'close' });
    response.end(body, () => socket.destroy());
    return;
  }
  // Destroyed once written: a client that keeps sending (slowloris) must not keep a half-open socket.
  socket.end(PREBUILT.get(error.code ?? '') ?? BAD_REQUEST, () => socket.destroy());
}
