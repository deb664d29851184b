// Helpers shared by the reliability tests (faults, fuzz, load): gauges summed over their series,
// a "back to baseline" check, raw-socket exchanges and a small HTTP/1.1 response parser for
// pipelined or cut-short answers that fetch would hide.
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { eventually, scrape, type GatewayProcess } from './gateway-process.ts';

/** Sums every sample of `name` whose labels pass `keep` (labels parsed from the exposition). */
export function sumMetric(text: string, name: string, keep: (labels: Record<string, string>) => boolean = () => true): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== '{' && rest[0] !== ' ') continue;
    const labels: Record<string, string> = {};
    if (rest[0] === '{') {
      const body = rest.slice(1, rest.indexOf('}'));
      for (const match of body.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[match[1]!] = match[2]!;
    }
    if (keep(labels)) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** Requests and WebSocket sessions in flight, every endpoint, minus the scrape that asks. */
export function inFlightTotal(metrics: string): number {
  return sumMetric(metrics, 'sluice_in_flight_requests', (l) => l.endpoint !== 'metrics');
}

/** Open downstream connections on one listener (every state). */
export function openConnections(metrics: string, listener = 'proxy'): number {
  return sumMetric(metrics, 'sluice_open_connections', (l) => l.listener === listener);
}

/** One GET on a fresh connection that is closed afterwards (Connection: close). */
export async function getOnce(url: string): Promise<{ status: number; body: string }> {
  const raw = await rawExchange(url, `GET ${new URL(url).pathname} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  const [res] = parseResponses(raw.data);
  assert.ok(res, `no answer from ${url}: ${raw.data.toString('latin1').slice(0, 200)}`);
  return { status: res.status, body: res.body.toString('utf8') };
}

/**
 * The gateway is back where it started: nothing in flight, `proxyConnections` open connections on
 * the proxy listener (default none), still running, and answering /livez.
 */
export async function assertSettled(gw: GatewayProcess, what: string, proxyConnections = 0, timeoutMs = 8000): Promise<void> {
  assert.equal(gw.child.exitCode, null, `${what}: the gateway exited (stderr: ${gw.stderr()})`);
  assert.equal(gw.child.signalCode, null, `${what}: the gateway was killed`);
  let last = '';
  await eventually(
    async () => {
      const metrics = await scrape(gw);
      const inFlight = inFlightTotal(metrics);
      const open = openConnections(metrics);
      last = `in-flight ${inFlight}, open proxy connections ${open}`;
      return inFlight === 0 && open === proxyConnections;
    },
    timeoutMs,
    `${what}: back to baseline (0 in flight, ${proxyConnections} open connections; last: ${last})`,
  ).catch((error: Error) => {
    throw new Error(`${error.message}; last seen: ${last}`);
  });
  const live = await getOnce(`${gw.proxyUrl}/livez`);
  assert.equal(live.status, 200, `${what}: /livez`);
  // The /livez connection itself closes (Connection: close) and must not stay counted.
  await eventually(async () => openConnections(await scrape(gw)) === proxyConnections, timeoutMs, `${what}: /livez connection closed`);
  assert.equal(gw.child.exitCode, null, `${what}: the gateway exited (stderr: ${gw.stderr()})`);
}

/** An OpenAI-shaped error body: exactly `{error:{message,type,code}}` with non-empty strings. */
/** Anthropic's error types (its API reference, "Errors"). */
export const ANTHROPIC_ERROR_TYPES = new Set([
  'invalid_request_error', 'authentication_error', 'permission_error', 'not_found_error', 'request_too_large',
  'rate_limit_error', 'api_error', 'overloaded_error', 'timeout_error',
]);

/** The Anthropic error type a client must see for each of our error codes (an oracle, kept apart from src/). */
export const ANTHROPIC_TYPE_OF_CODE: Readonly<Record<string, string>> = {
  invalid_json: 'invalid_request_error',
  invalid_body: 'invalid_request_error',
  model_required: 'invalid_request_error',
  unsupported_endpoint: 'invalid_request_error',
  method_not_allowed: 'invalid_request_error',
  invalid_parameter: 'invalid_request_error',
  unsupported_parameter: 'invalid_request_error',
  model_not_found: 'not_found_error',
  unknown_path: 'not_found_error',
  missing_api_key: 'authentication_error',
  invalid_api_key: 'authentication_error',
  host_not_allowed: 'invalid_request_error',
  cross_origin_request: 'permission_error',
  body_too_large: 'request_too_large',
  upstream_timeout: 'timeout_error',
  upstream_first_token_timeout: 'timeout_error',
  upstream_connect_failed: 'api_error',
  upstream_reset: 'api_error',
  upstream_failed: 'api_error',
  upstream_invalid_answer: 'api_error',
  no_target_available: 'api_error',
  internal_error: 'api_error',
  drain_forced: 'api_error',
};

/** The error body as a JSON object, or a failed assertion that says what it was instead. */
function parseErrorBody(text: string, context: string): Record<string, unknown> {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    assert.fail(`${context}: error body is not JSON: ${JSON.stringify(text.slice(0, 300))}`);
  }
  assert.ok(body !== null && typeof body === 'object' && !Array.isArray(body), `${context}: error body is not an object: ${text.slice(0, 300)}`);
  return body as Record<string, unknown>;
}

/** Asserts Anthropic's error shape, `{"type":"error","error":{"type":…,"message":…}}`; returns `error`. */
export function assertAnthropicError(text: string, context = ''): { message: string; type: string } {
  const body = parseErrorBody(text, context);
  assert.equal((body as { type?: unknown }).type, 'error', `${context}: not Anthropic-shaped (type is not "error"): ${text.slice(0, 300)}`);
  const error = (body as { error?: unknown }).error as Record<string, unknown> | undefined;
  assert.ok(error !== null && typeof error === 'object', `${context}: no "error" object: ${text.slice(0, 300)}`);
  assert.ok(ANTHROPIC_ERROR_TYPES.has(error.type as string), `${context}: error.type is not one of Anthropic's: ${text.slice(0, 300)}`);
  assert.equal(typeof error.message, 'string', `${context}: error.message is not a string`);
  assert.ok((error.message as string).length > 0, `${context}: error.message is empty`);
  return error as { message: string; type: string };
}

/**
 * Asserts the error is in the caller's shape and, when `code` is given, is that error: OpenAI's
 * `error.code`, or on Anthropic's side the type that code maps to.
 */
export function assertCallerError(text: string, dialect: 'openai' | 'anthropic', context = '', code?: string): void {
  if (dialect === 'openai') {
    const error = assertOpenAiError(text, context);
    if (code !== undefined) assert.equal(error.code, code, context);
    return;
  }
  const error = assertAnthropicError(text, context);
  if (code !== undefined) assert.equal(error.type, ANTHROPIC_TYPE_OF_CODE[code], `${context}: ${code}`);
}

export function assertOpenAiError(text: string, context = ''): { message: string; type: string; code: string } {
  const body = parseErrorBody(text, context);
  const error = (body as { error?: unknown }).error as Record<string, unknown> | undefined;
  assert.ok(error !== null && typeof error === 'object', `${context}: no "error" object: ${text.slice(0, 300)}`);
  for (const field of ['message', 'type', 'code'] as const) {
    assert.equal(typeof error[field], 'string', `${context}: error.${field} is not a string: ${text.slice(0, 300)}`);
    assert.ok((error[field] as string).length > 0, `${context}: error.${field} is empty`);
  }
  return error as { message: string; type: string; code: string };
}

export interface RawResult {
  data: Buffer;
  /** The server closed the connection (FIN or reset) before the deadline (false too when we
   *  stopped after `stopAfterResponses`). */
  closed: boolean;
  /** The connection was reset rather than closed cleanly. */
  reset: boolean;
  /** ms from the first write to the close (or to the deadline). */
  elapsedMs: number;
}

/**
 * Opens a connection, writes `bytes` (or lets `drive` write), and collects everything until the
 * server closes the connection or `timeoutMs` passes (then it is destroyed, `closed` false).
 */
export function rawExchange(
  url: string,
  bytes: string | Buffer | undefined,
  options: {
    timeoutMs?: number;
    drive?: (socket: Socket) => void | Promise<void>;
    /** Resolve (and close the socket ourselves) once this many complete responses were read. */
    stopAfterResponses?: number;
  } = {},
): Promise<RawResult> {
  const { hostname, port } = new URL(url);
  const timeoutMs = options.timeoutMs ?? 10_000;
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) });
    const chunks: Buffer[] = [];
    let started = 0;
    let reset = false;
    let settled = false;
    const finish = (closed: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ data: Buffer.concat(chunks), closed, reset, elapsedMs: Date.now() - started });
    };
    const timer = setTimeout(() => {
      finish(false);
      socket.destroy();
    }, timeoutMs);
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      const wanted = options.stopAfterResponses;
      if (wanted !== undefined) {
        const responses = parseResponses(Buffer.concat(chunks));
        if (responses.length >= wanted && responses.slice(0, wanted).every((r) => r.complete)) {
          finish(false);
          socket.destroy();
        }
      }
    });
    socket.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'ECONNRESET' || error.code === 'EPIPE') reset = true;
      else if (!started) {
        clearTimeout(timer);
        settled = true;
        reject(error);
      }
    });
    socket.on('close', () => finish(true));
    socket.once('connect', () => {
      started = Date.now();
      if (bytes !== undefined) socket.write(bytes);
      if (options.drive) {
        Promise.resolve(options.drive(socket)).catch(() => socket.destroy());
      }
    });
  });
}

export interface ParsedResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  /** The body was complete (its length, or the last chunk, was seen). */
  complete: boolean;
}

/** Parses back-to-back HTTP/1.1 responses (Content-Length, chunked, or until close). */
export function parseResponses(data: Buffer): ParsedResponse[] {
  const out: ParsedResponse[] = [];
  let at = 0;
  while (at < data.length) {
    const headEnd = data.indexOf('\r\n\r\n', at);
    if (headEnd === -1) break;
    const head = data.toString('latin1', at, headEnd).split('\r\n');
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head[0]!)?.[1]);
    const headers: Record<string, string> = {};
    for (const line of head.slice(1)) {
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
    }
    at = headEnd + 4;
    if (status === 100) continue;
    if (headers['transfer-encoding']?.toLowerCase().includes('chunked')) {
      const parts: Buffer[] = [];
      let complete = false;
      for (;;) {
        const lineEnd = data.indexOf('\r\n', at);
        if (lineEnd === -1) break;
        const size = parseInt(data.toString('latin1', at, lineEnd), 16);
        if (Number.isNaN(size)) break;
        if (size === 0) {
          const trailerEnd = data.indexOf('\r\n\r\n', lineEnd);
          at = trailerEnd === -1 ? data.length : trailerEnd + 4;
          complete = true;
          break;
        }
        if (lineEnd + 2 + size + 2 > data.length) {
          parts.push(data.subarray(lineEnd + 2, Math.min(data.length, lineEnd + 2 + size)));
          at = data.length;
          break;
        }
        parts.push(data.subarray(lineEnd + 2, lineEnd + 2 + size));
        at = lineEnd + 2 + size + 2;
      }
      out.push({ status, headers, body: Buffer.concat(parts), complete });
      if (!complete) break;
    } else if (headers['content-length'] !== undefined) {
      const length = Number(headers['content-length']);
      const body = data.subarray(at, at + length);
      out.push({ status, headers, body, complete: body.length === length });
      at += length;
    } else if (status === 204 || status === 304) {
      out.push({ status, headers, body: Buffer.alloc(0), complete: true });
    } else {
      out.push({ status, headers, body: data.subarray(at), complete: false });
      break;
    }
  }
  return out;
}

/** The resident set size of a process in KiB, from /proc/<pid>/status (VmRSS). */
export function rssKiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  assert.ok(match, `no VmRSS in /proc/${pid}/status`);
  return Number(match[1]);
}

/** Splits an SSE body into its event blocks (blank-line separated, empty ones dropped). */
export function sseBlocks(text: string): string[] {
  return text.split(/\r?\n\r?\n/).filter((b) => b.trim() !== '');
}

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  /** The response ended normally (false: the connection was cut before the end). */
  complete: boolean;
  elapsedMs: number;
}

/**
 * One request on its own connection (no agent: `Connection: close`), so that nothing stays open
 * on the gateway afterwards; collects the whole answer, even a cut one.
 */
export function requestOnce(
  url: string,
  options: { method?: string; body?: string | Buffer; headers?: Record<string, string | number | string[]> } = {},
): Promise<Answer> {
  const started = Date.now();
  const payload = options.body === undefined ? undefined : Buffer.from(options.body);
  const headers: Record<string, string | number | string[]> = { ...options.headers };
  if (payload !== undefined) headers['content-length'] ??= payload.length;
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: options.method ?? (payload ? 'POST' : 'GET'), agent: false, headers }, (res) => {
      const chunks: Buffer[] = [];
      let done = false;
      const finish = (complete: boolean) => {
        if (done) return;
        done = true;
        resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks), complete, elapsedMs: Date.now() - started });
      };
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => finish(res.complete));
      res.on('error', () => finish(false));
      res.on('close', () => finish(res.complete));
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/**
 * One request written byte for byte on its own connection (`Connection: close`), its headers as
 * given and in order (a Host or none, any value, latin1), with a Content-Length for `body` unless
 * the headers frame it: resolves with the first response, parsed.
 */
export async function rawRequest(
  url: string,
  request: { method?: string; path: string; headers?: readonly (readonly [string, string])[]; body?: string; version?: string },
  timeoutMs = 5000,
): Promise<ParsedResponse> {
  const headers = [...(request.headers ?? [])];
  const framed = headers.some(([name]) => /^(content-length|transfer-encoding)$/i.test(name));
  if (request.body !== undefined && !framed) headers.push(['Content-Length', String(Buffer.byteLength(request.body, 'latin1'))]);
  const head = [`${request.method ?? 'GET'} ${request.path} HTTP/${request.version ?? '1.1'}`, ...headers.map(([name, value]) => `${name}: ${value}`), 'Connection: close'];
  const result = await rawExchange(url, Buffer.from(`${head.join('\r\n')}\r\n\r\n${request.body ?? ''}`, 'latin1'), { timeoutMs, stopAfterResponses: 1 });
  const [res] = parseResponses(result.data);
  assert.ok(res?.complete, `no complete answer to ${request.method ?? 'GET'} ${request.path.slice(0, 100)}: ${result.data.toString('latin1').slice(0, 300)}`);
  return res;
}
