// Small raw-HTTP helpers for tests that must see connection-level behaviour (Connection: close,
// fresh connections, refused ports) that fetch hides.
import { connect, type Socket } from 'node:net';
import { request, type IncomingHttpHeaders } from 'node:http';

export interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** One request on a new connection (no agent), resolved with the whole response. */
export function httpRequest(url: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: options.method ?? 'GET', headers: options.headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

export function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<RawResponse> {
  return httpRequest(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
}

/** Opens a TCP connection to the host:port of `url`. */
export function openSocket(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) }, () => resolve(socket));
    socket.once('error', reject);
  });
}

/** Resolves true when a connection is refused, false when it is accepted. */
export function isRefused(url: string): Promise<boolean> {
  return openSocket(url).then(
    (socket) => {
      socket.destroy();
      return false;
    },
    (error: NodeJS.ErrnoException) => error.code === 'ECONNREFUSED',
  );
}

/** Resolves with the time the socket closed. */
export function closedAt(socket: Socket): Promise<number> {
  return new Promise((resolve) => {
    if (socket.destroyed) resolve(Date.now());
    else socket.once('close', () => resolve(Date.now()));
  });
}
