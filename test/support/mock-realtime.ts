// The mock upstream's WebSocket side: an OpenAI Realtime-like endpoint at /v1/realtime. It sends
// `session.created` on connect; each `response.create` from the client is answered with a text
// delta and a `response.done` carrying usage (5 input, 7 output tokens, or the `mock_usage` object
// the `response.create` carries, reported as it is). A client message
// `{"type":"mock.close","code":N}` makes the mock close the session with that code. The header
// `x-mock-status: N` refuses the handshake with that status; `x-mock-hang: 1` never answers it. (Headers,
// not query parameters: the gateway passes on only the query parameters it checked. A test sets
// them as a route target's `headers`.)
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import type { MockRequest } from './mock-upstream.ts';

export const REALTIME_USAGE = { input_tokens: 5, output_tokens: 7, total_tokens: 12 };

export interface RealtimeSessionRecord extends MockRequest {
  /** Messages the mock received on this session. */
  messages: string[];
  /** The session's socket closed. */
  closed: boolean;
  closeCode: number | undefined;
}

/** Returns a function that terminates every open session (for the mock's close()). */
export function attachRealtime(server: Server, received: MockRequest[] | undefined): () => void {
  const wss = new WebSocketServer({ noServer: true, handleProtocols: (protocols) => (protocols.has('realtime') ? 'realtime' : false) });
  const hanging = new Set<Duplex>();
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const path = (req.url ?? '').split('?')[0]!.replace(/\/+$/, '');
    // OpenAI's paths, and Azure OpenAI's (with an api-version, and the v1 API).
    if (path !== '/v1/realtime' && path !== '/realtime' && path !== '/openai/realtime' && path !== '/openai/v1/realtime') {
      socket.end('HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
      return;
    }
    if (req.headers['x-mock-hang'] !== undefined) {
      hanging.add(socket);
      socket.on('error', () => {});
      socket.once('close', () => hanging.delete(socket));
      return;
    }
    const rejectWith = req.headers['x-mock-status'];
    if (rejectWith) {
      const body = JSON.stringify({ error: { message: 'scripted rejection', type: 'invalid_request_error', code: 'mock' } });
      socket.end(`HTTP/1.1 ${rejectWith} Rejected\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`);
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => session(ws, req, received));
  });
  return () => {
    for (const client of wss.clients) client.terminate();
    for (const socket of hanging) socket.destroy();
  };
}

function session(ws: WebSocket, req: IncomingMessage, received: MockRequest[] | undefined): void {
  const record: RealtimeSessionRecord = {
    method: 'GET',
    path: req.url ?? '/',
    headers: req.headers,
    body: '',
    aborted: false,
    completed: false,
    messages: [],
    closed: false,
    closeCode: undefined,
  };
  received?.push(record);
  ws.send(JSON.stringify({ type: 'session.created', session: { id: 'sess_mock', model: new URL(req.url ?? '/', 'http://x').searchParams.get('model') } }));
  ws.on('message', (data, isBinary) => {
    const text = isBinary ? '' : data.toString();
    record.messages.push(text);
    let message: { type?: string; code?: number; mock_usage?: unknown } = {};
    try {
      message = JSON.parse(text) as typeof message;
    } catch {
      return;
    }
    if (message.type === 'mock.close') ws.close(message.code ?? 1000, 'scripted close');
    if (message.type === 'response.create') {
      ws.send(JSON.stringify({ type: 'response.output_text.delta', delta: 'mock' }));
      ws.send(JSON.stringify({ type: 'response.done', response: { id: 'resp_mock', status: 'completed', usage: message.mock_usage ?? REALTIME_USAGE } }));
    }
  });
  ws.on('close', (code) => {
    record.closed = true;
    record.closeCode = code;
    record.completed = true;
  });
}
