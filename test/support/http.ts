// Small raw-HTTP helpers for tests that must see connection-level behaviour (Connection: close,
// fresh connections, refused ports) that fetch hides.
import { connect, type Socket } from 'node:net';
import { Agent, request, type IncomingHttpHeaders } from 'node:http';

export interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/**
 * One request on a new connection, resolved with the whole response. Without an agent Node's client
 * sends `Connection: close` itself, and the server echoes it: never assert on the `Connection`
 * header of such a response (use `postJsonKeepAlive`).
 */
export function httpRequest(url: string, options: { method?: string; headers?: Record<string, string>; body?: string; agent?: Agent | false } = {}): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: options.method ?? 'GET', headers: options.headers, agent: options.agent ?? false }, (res) => {
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

/**
 * A POST from a pooled keep-alive client (it asks for `Connection: keep-alive`), on a connection
 * of its own: the response's `Connection` header is then the server's decision, `close` only if the
 * server retires the connection (L3). Pass `agent` to reuse a pool across requests.
 */
export async function postJsonKeepAlive(url: string, body: unknown, headers: Record<string, string> = {}, agent?: Agent): Promise<RawResponse> {
  const own = agent ? undefined : new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const res = await httpRequest(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body), agent: agent ?? own });
    return res;
  } finally {
    own?.destroy();
  }
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

/** How a raw exchange ended: a whole response, a close (or reset) before any, or neither by its deadline. */
export interface RawOutcome {
  outcome: 'answered' | 'closed' | 'hung';
  /** The response's status (0: none). */
  status: number;
  /** When it ended (Date.now()), or the deadline for `hung`. */
  at: number;
}

/**
 * Opens a new connection, writes `request` (raw HTTP/1.1, which should carry `Connection: close`)
 * at once, and resolves when the server has closed it: `answered` when a response status line came
 * before the close, `closed` when the connection ended (FIN or reset) without one, `hung` when it
 * was still open at `deadline` (epoch ms; then it is destroyed).
 */
export function rawExchange(url: string, request: string, deadline: () => number): Promise<RawOutcome> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    let received = '';
    let settled = false;
    const socket = connect({ host: hostname, port: Number(port) });
    const end = (outcome: RawOutcome['outcome']) => {
      if (settled) return;
      settled = true;
      clearInterval(watch);
      const status = /^HTTP\/1\.1 (\d{3}) /.exec(received);
      resolve({ outcome: outcome === 'closed' && status ? 'answered' : outcome, status: status ? Number(status[1]) : 0, at: outcome === 'hung' ? deadline() : Date.now() });
      socket.destroy();
    };
    // The deadline may move (it is set once the moment it counts from is known).
    const watch = setInterval(() => {
      if (Date.now() > deadline()) end('hung');
    }, 20);
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (received += chunk));
    socket.on('error', () => {});
    socket.on('close', () => end('closed'));
    socket.write(request);
  });
}

/**
 * A WebSocket opening handshake sent as raw bytes, the request target exactly as given (a client
 * library would normalize it): resolves with the answer's status, head and body once a 101 head has
 * arrived (the socket is then closed: the session is not used) or the server has closed.
 */
export function websocketHandshake(url: string, target: string, headers: Record<string, string> = {}): Promise<{ status: number; head: string; body: string }> {
  const lines = Object.entries({ host: 'gateway', connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', ...headers }).map(([name, value]) => `${name}: ${value}`);
  return new Promise((resolve, reject) => {
    openSocket(url).then((socket) => {
      let text = '';
      const done = () => {
        const split = text.indexOf('\r\n\r\n');
        resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? -1), head: split === -1 ? text : text.slice(0, split), body: split === -1 ? '' : text.slice(split + 4) });
      };
      socket.setEncoding('latin1');
      socket.on('data', (chunk: string) => {
        text += chunk;
        if (text.startsWith('HTTP/1.1 101 ') && text.includes('\r\n\r\n')) socket.destroy();
      });
      socket.on('error', () => socket.destroy());
      socket.on('close', done);
      socket.write(`GET ${target} HTTP/1.1\r\n${lines.join('\r\n')}\r\n\r\n`, 'latin1');
    }, reject);
  });
}
