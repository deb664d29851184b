// A mock LLM provider for end-to-end tests and benchmarks. It answers like OpenAI (chat completions,
// completions, embeddings, responses, models) and like Anthropic (messages, count_tokens, and models
// in Anthropic's shape when the request carries `anthropic-version`), streaming included (and, for
// the benchmarks, Bedrock's Converse and Gemini's generateContent: mock-cloud-answers.ts), and
// a request header `x-mock` carrying JSON scripts a different answer: a status and body, a delay
// before the headers, a scripted SSE stream, a mid-stream reset, a stream ended cleanly before its
// final event, a dropped connection, a request that is never answered. Every request is recorded (headers, raw body, parsed JSON) together with
// whether the client went away before the answer was finished, which is how tests check that an
// aborted client request cancels the upstream one.
//
// Run directly (`node test/support/mock-upstream.ts --port 0`) it serves without recording and
// prints one line, {"mock_upstream":"http://127.0.0.1:PORT"}, for the benchmarks.
//
// Only node: built-ins and erasable TypeScript: Node runs this file by type stripping.

import { createServer } from 'node:http';
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { resolve as resolvePath } from 'node:path';
import { fileURLToPath } from 'node:url';
import { attachRealtime } from './mock-realtime.ts';
import { cloudAnswer, cloudRoute } from './mock-cloud-answers.ts';

export interface MockRequest {
  method: string;
  /** The request target as received, query string included. */
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** The parsed body, present only when the body is valid JSON. */
  json?: unknown;
  /** The client closed the request/connection before the mock finished responding. */
  aborted: boolean;
  /** The response was written out completely. */
  completed: boolean;
}

export interface MockUpstream {
  /** http://127.0.0.1:PORT (no trailing slash, no /v1). */
  url: string;
  port: number;
  /** Every request, in arrival order, pushed once its body has been read (or the client left). */
  received: MockRequest[];
  /** Polls every 10 ms until `predicate(received)` is true; rejects after `timeoutMs` (default 5000). */
  waitFor(predicate: (r: MockRequest[]) => boolean, timeoutMs?: number): Promise<void>;
  /** Forgets the recorded requests (the `received` array is emptied in place). */
  reset(): void;
  /**
   * Scripts every following request as if it carried this `x-mock` scenario (a function: per
   * request, in arrival order from 0), whatever its own header says; undefined: back to the header.
   */
  script(scenario: MockScenario | ((n: number) => MockScenario | undefined) | undefined): void;
  /**
   * Paces every following stream: its events are written one at a time, each (and then the end of
   * the response) once `next(i)` resolves, `i` the index of what comes next (the end's is the
   * number of events). A `next` that waits until the client has read the previous write makes
   * every event a read of its own on the client's side, however loaded the machine. Undefined: unpaced.
   */
  pace(next: Pacer | undefined): void;
  /** Stops listening and drops every open connection, pending requests included. */
  close(): Promise<void>;
}

export interface MockUpstreamOptions {
  /** Default 0: a free port. */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** Record requests in `received`. Default true; the standalone benchmark mode turns it off. */
  record?: boolean;
}

/** One scripted SSE event: `event: <event>\ndata: <data>\n\n`. */
export interface MockSseEvent {
  event?: string;
  data: string;
}

/** The JSON carried by the `x-mock` request header. Every field is optional. */
export interface MockScenario {
  /** Response status. With `body`, `sse` or `rawBody` it defaults to 200; alone and >= 400 it sends
   *  an error body shaped like the provider's (OpenAI, or Anthropic on /messages); alone and < 400 it
   *  replaces the status of the default answer. */
  status?: number;
  /** Any JSON, sent as the response body. */
  body?: unknown;
  /** Extra response headers. */
  headers?: Record<string, string | number | string[]>;
  /** Wait this long before sending status and headers (or before dropping the connection). */
  headersDelayMs?: number;
  /** Scripted stream: a string is one `data:` payload; `{event?, data}` adds an `event:` line; any
   *  other object is sent as `data: <JSON>`. */
  sse?: Array<string | MockSseEvent | Record<string, unknown>>;
  /** Delay between SSE events, scripted or default (default 0). */
  sseIntervalMs?: number;
  /** Append `data: [DONE]\n\n` to a scripted `sse` stream (default true). */
  sseDone?: boolean;
  /** Number of content chunks of the default streaming answers (default 5). */
  chunks?: number;
  /** The token counts the default answers report (in each API's own fields), instead of the fixed ones. */
  usage?: { prompt: number; completion: number };
  /** Destroy the socket right after writing this many SSE events ([DONE] counts). */
  disconnectAfterEvents?: number;
  /** Write this many SSE events, then go silent (the connection stays open until the client ends it). */
  stallAfterEvents?: number;
  /** Write this many SSE events, then end the response cleanly: a stream cut short without its final event. */
  endAfterEvents?: number;
  /** Destroy the socket without answering. */
  destroyBeforeHeaders?: boolean;
  /** Never answer; the request stays open until the client (or close()) ends it. */
  neverRespond?: boolean;
  /** Sent as-is, e.g. malformed JSON; content type from `contentType` (default application/json). */
  rawBody?: string;
  contentType?: string;
}

/** Resolves when the stream may write what comes at `index` (see `MockUpstream.pace`). */
export type Pacer = (index: number) => Promise<void>;

/** The request header that scripts the mock. */
export const MOCK_HEADER = 'x-mock';

/** `{ 'x-mock': JSON.stringify(scenario) }`, to spread into request headers. */
export function mockHeader(scenario: MockScenario): Record<string, string> {
  return { [MOCK_HEADER]: JSON.stringify(scenario) };
}

export const MOCK_MODELS: readonly string[] = ['mock-gpt', 'mock-claude', 'gpt-4o', 'gpt-4o-mini', 'text-embedding-3-small'];

/** What `GET /v1/models` answers to a request with `anthropic-version` (Anthropic's shape, newest first). */
export const MOCK_ANTHROPIC_MODELS: readonly { id: string; display_name: string; created_at: string }[] = [
  { id: 'claude-sonnet-4-5', display_name: 'Claude Sonnet 4.5', created_at: '2025-09-29T00:00:00Z' },
  { id: 'claude-haiku-4-5', display_name: 'Claude Haiku 4.5', created_at: '2025-10-01T00:00:00Z' },
  { id: 'claude-opus-4-1', display_name: 'Claude Opus 4.1', created_at: '2025-08-05T00:00:00Z' },
  { id: 'mock-claude', display_name: 'Mock Claude', created_at: '2024-01-01T00:00:00Z' },
];

// ---------------------------------------------------------------------------------------------------

type Json = Record<string, unknown>;

interface Exchange {
  req: IncomingMessage;
  res: ServerResponse;
  rec: MockRequest | undefined;
  pushed: boolean;
  /** The response closed, finished or not: stop writing and sleeping. */
  closed: boolean;
  /** The mock itself dropped the connection, which is not a client abort. */
  selfDestroyed: boolean;
  cancelSleep: (() => void) | undefined;
  /** The pace its stream, if any, keeps (taken when the request arrived). */
  pace: Pacer | undefined;
}

interface ReplyOptions {
  status: number;
  headers: OutgoingHttpHeaders | undefined;
  chunks: number;
  intervalMs: number;
  disconnectAfter: number | undefined;
  stallAfter?: number | undefined;
  endAfter?: number | undefined;
  usage?: { prompt: number; completion: number } | undefined;
}

const DEFAULT_REPLY: ReplyOptions = {
  status: 200,
  headers: undefined,
  chunks: 5,
  intervalMs: 0,
  disconnectAfter: undefined,
};

const CHAT_USAGE = { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 };
const DONE_EVENT = 'data: [DONE]\n\n';
const JSON_TYPE = 'application/json';
const SSE_TYPE = 'text/event-stream';
const DEFAULT_MODEL = 'mock-model';

let sequence = 0;
const nextSeq = (): number => ++sequence;
const nowSec = (): number => Math.floor(Date.now() / 1000);

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const modelOf = (body: Json): string => (typeof body.model === 'string' ? body.model : DEFAULT_MODEL);

// Bodies that depend only on (route, model, text, second) are built once and kept as a "tail": the
// JSON after the leading `{"id":"…",`, so a request only concatenates its id in front.
const tailCache = new Map<string, { created: number; tails: string[] }>();
function cachedTails(key: string, build: (created: number) => string[]): string[] {
  const created = nowSec();
  const hit = tailCache.get(key);
  if (hit !== undefined && hit.created === created) return hit.tails;
  if (tailCache.size >= 4096) tailCache.clear();
  const tails = build(created);
  tailCache.set(key, { created, tails });
  return tails;
}
/** `{"a":1,"b":2}` → `"a":1,"b":2}`: what follows `{"id":"…",`. */
const tailOf = (value: Json): string => JSON.stringify(value).slice(1);
const withId = (id: string, tail: string): string => '{"id":"' + id + '",' + tail;

const MODELS_BODY = JSON.stringify({
  object: 'list',
  data: MOCK_MODELS.map((id) => ({ id, object: 'model', created: 1_700_000_000, owned_by: 'sluice-mock' })),
});

/** Anthropic's model list, paged by `limit` (default 20) and `after_id`. */
function anthropicModels(url: string): string {
  const q = url.indexOf('?');
  const query = new URLSearchParams(q === -1 ? '' : url.slice(q + 1));
  const limit = Number(query.get('limit') ?? 20) || 20;
  const after = query.get('after_id');
  const start = after === null ? 0 : MOCK_ANTHROPIC_MODELS.findIndex((m) => m.id === after) + 1;
  const data = MOCK_ANTHROPIC_MODELS.slice(start, start + limit).map((m) => ({ type: 'model', ...m }));
  return JSON.stringify({ data, has_more: start + limit < MOCK_ANTHROPIC_MODELS.length, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null });
}

// ---------------------------------------------------------------------------------------------------

export function startMockUpstream(options: MockUpstreamOptions = {}): Promise<MockUpstream> {
  const host = options.host ?? '127.0.0.1';
  const record = options.record ?? true;
  const received: MockRequest[] = [];

  const scripted: Scripted = { scenario: undefined, count: 0, pace: undefined };
  const server = createServer((req, res) => onRequest(req, res, record ? received : undefined, scripted));
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  server.requestTimeout = 0; // neverRespond means forever, not 300 s.
  const closeRealtime = attachRealtime(server, record ? received : undefined);

  return new Promise<MockUpstream>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      const port = (server.address() as AddressInfo).port;
      const connectHost = host === '0.0.0.0' || host === '::' || host === '' ? '127.0.0.1' : host;
      const url = `http://${connectHost.includes(':') ? `[${connectHost}]` : connectHost}:${port}`;
      let closing: Promise<void> | undefined;
      resolve({
        url,
        port,
        received,
        waitFor: (predicate, timeoutMs = 5000) => waitFor(received, predicate, timeoutMs),
        reset: () => {
          received.length = 0;
        },
        script: (scenario) => {
          scripted.scenario = scenario;
          scripted.count = 0;
        },
        pace: (next) => {
          scripted.pace = next;
        },
        close: () => {
          closing ??= new Promise<void>((done) => {
            server.close(() => done());
            server.closeAllConnections();
            closeRealtime();
          });
          return closing;
        },
      });
    });
  });
}

async function waitFor(
  received: MockRequest[],
  predicate: (r: MockRequest[]) => boolean,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      if (predicate(received)) return;
      lastError = undefined;
    } catch (err) {
      lastError = err; // e.g. r[0].aborted before anything arrived: keep polling.
    }
    if (Date.now() >= deadline) break;
    await delay(10);
  }
  const summary = received
    .map((r) => `${r.method} ${r.path}${r.aborted ? ' [aborted]' : ''}${r.completed ? ' [completed]' : ''}`)
    .join(', ');
  const cause = lastError === undefined ? '' : `; the predicate last threw: ${String(lastError)}`;
  throw new Error(
    `mock upstream: waitFor timed out after ${timeoutMs} ms; ${received.length} request(s) received` +
      `${summary ? `: ${summary}` : ''}${cause}`,
  );
}

// ---------------------------------------------------------------------------------------------------

interface Scripted {
  scenario: MockScenario | ((n: number) => MockScenario | undefined) | undefined;
  count: number;
  pace: Pacer | undefined;
}

function onRequest(req: IncomingMessage, res: ServerResponse, received: MockRequest[] | undefined, scripted?: Scripted): void {
  if (scripted?.scenario !== undefined && req.url !== undefined && !req.url.endsWith('/models')) {
    const scenario = typeof scripted.scenario === 'function' ? scripted.scenario(scripted.count++) : scripted.scenario;
    if (scenario === undefined) delete req.headers[MOCK_HEADER];
    else req.headers[MOCK_HEADER] = JSON.stringify(scenario);
  }
  const ex: Exchange = {
    req,
    res,
    rec: undefined,
    pushed: false,
    closed: false,
    selfDestroyed: false,
    cancelSleep: undefined,
    pace: scripted?.pace,
  };
  if (received !== undefined) {
    const rec: MockRequest = {
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      headers: req.headers,
      body: '',
      aborted: false,
      completed: false,
    };
    ex.rec = rec;
    res.once('finish', () => {
      rec.completed = true;
    });
  }
  res.once('close', () => {
    ex.closed = true;
    const cancel = ex.cancelSleep;
    if (cancel !== undefined) cancel();
    const rec = ex.rec;
    if (rec !== undefined && received !== undefined) {
      if (!res.writableFinished && !ex.selfDestroyed) rec.aborted = true;
      if (!ex.pushed) {
        ex.pushed = true; // the client left while still sending the body
        received.push(rec);
      }
    }
  });
  req.on('error', noop);
  res.on('error', noop);

  const parts: Buffer[] = [];
  req.on('data', (chunk: Buffer) => parts.push(chunk));
  req.on('end', () => {
    const body =
      parts.length === 0 ? '' : parts.length === 1 ? parts[0]!.toString('utf8') : Buffer.concat(parts).toString('utf8');
    let json: unknown;
    let valid = false;
    if (body.length > 0) {
      try {
        json = JSON.parse(body);
        valid = true;
      } catch {
        // recorded as raw body only
      }
    }
    const rec = ex.rec;
    if (rec !== undefined && received !== undefined && !ex.pushed) {
      rec.body = body;
      if (valid) rec.json = json;
      ex.pushed = true;
      received.push(rec);
    }
    dispatch(ex, json).catch((err: unknown) => fail(ex, err));
  });
}

function noop(): void {}

function fail(ex: Exchange, err: unknown): void {
  if (ex.closed) return;
  if (!ex.res.headersSent) {
    try {
      sendBody(ex, 500, JSON_TYPE, openAiError(`mock upstream failed: ${String(err)}`, 'server_error'), undefined);
      return;
    } catch {
      // fall through to dropping the connection
    }
  }
  dropConnection(ex);
}

/** `/v1/chat/completions?x=1` and `/chat/completions/` → `/chat/completions`. */
function routeOf(url: string): string {
  const q = url.indexOf('?');
  let p = q === -1 ? url : url.slice(0, q);
  if (p.length > 1 && p.endsWith('/')) p = p.slice(0, -1);
  if (p.startsWith('/v1/')) return p.slice(3);
  return p === '/v1' ? '/' : p;
}

async function dispatch(ex: Exchange, json: unknown): Promise<void> {
  const route = routeOf(ex.req.url ?? '/');
  const raw = ex.req.headers[MOCK_HEADER];
  if (raw === undefined) {
    await respondDefault(ex, route, json, DEFAULT_REPLY);
    return;
  }

  let sc: MockScenario;
  try {
    const parsed: unknown = JSON.parse(Array.isArray(raw) ? (raw[0] ?? '') : raw);
    if (!isObject(parsed)) throw new Error('not a JSON object');
    sc = parsed as MockScenario;
  } catch (err) {
    const message = `mock upstream: invalid ${MOCK_HEADER} header (${err instanceof Error ? err.message : String(err)})`;
    sendBody(ex, 400, JSON_TYPE, openAiError(message, 'invalid_request_error'), undefined);
    return;
  }

  const headers = sc.headers === undefined ? undefined : normalizeHeaders(sc.headers);
  const reply: ReplyOptions = {
    status: typeof sc.status === 'number' ? sc.status : 200,
    headers,
    chunks: typeof sc.chunks === 'number' && sc.chunks >= 0 ? Math.floor(sc.chunks) : DEFAULT_REPLY.chunks,
    intervalMs: typeof sc.sseIntervalMs === 'number' && sc.sseIntervalMs > 0 ? sc.sseIntervalMs : 0,
    disconnectAfter: typeof sc.disconnectAfterEvents === 'number' ? Math.max(0, Math.floor(sc.disconnectAfterEvents)) : undefined,
    stallAfter: typeof sc.stallAfterEvents === 'number' ? Math.max(0, Math.floor(sc.stallAfterEvents)) : undefined,
    endAfter: typeof sc.endAfterEvents === 'number' ? Math.max(0, Math.floor(sc.endAfterEvents)) : undefined,
    usage: isObject(sc.usage) && typeof sc.usage.prompt === 'number' && typeof sc.usage.completion === 'number' ? sc.usage : undefined,
  };

  if (sc.neverRespond === true) return; // held open until the client or close() ends it
  if (typeof sc.headersDelayMs === 'number' && sc.headersDelayMs > 0) {
    await sleep(ex, sc.headersDelayMs);
    if (ex.closed) return;
  }
  if (sc.destroyBeforeHeaders === true) {
    dropConnection(ex);
    return;
  }

  if (typeof sc.rawBody === 'string') {
    sendBody(ex, reply.status, sc.contentType ?? JSON_TYPE, sc.rawBody, headers);
  } else if (Array.isArray(sc.sse)) {
    const events = sc.sse.map(formatEvent);
    if (sc.sseDone !== false) events.push(DONE_EVENT);
    await streamEvents(ex, events, reply, sc.contentType ?? SSE_TYPE);
  } else if (sc.body !== undefined) {
    sendBody(ex, reply.status, sc.contentType ?? JSON_TYPE, JSON.stringify(sc.body), headers);
  } else if (reply.status >= 400) {
    const body =
      route.startsWith('/messages')
        ? anthropicError(`mock upstream error ${reply.status}`, anthropicErrorType(reply.status))
        : openAiError(`mock upstream error ${reply.status}`, openAiErrorType(reply.status));
    sendBody(ex, reply.status, JSON_TYPE, body, headers);
  } else {
    await respondDefault(ex, route, json, reply);
  }
}

function normalizeHeaders(h: Record<string, string | number | string[]>): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(h)) {
    out[name.toLowerCase()] = Array.isArray(value) ? value.map(String) : String(value);
  }
  return out;
}

function formatEvent(item: string | MockSseEvent | Record<string, unknown>): string {
  if (typeof item === 'string') return dataLines(item) + '\n';
  if (isObject(item) && 'data' in item) {
    const data = typeof item.data === 'string' ? item.data : JSON.stringify(item.data);
    const event = typeof item.event === 'string' ? `event: ${item.event}\n` : '';
    return event + dataLines(data) + '\n';
  }
  return dataLines(JSON.stringify(item)) + '\n';
}

/** Each line of `data` as its own `data:` line, as SSE requires. */
function dataLines(data: string): string {
  if (!data.includes('\n')) return 'data: ' + data + '\n';
  return data
    .split(/\r?\n/)
    .map((line) => 'data: ' + line + '\n')
    .join('');
}

// ---------------------------------------------------------------------------------------------------
// Writing

function sendBody(
  ex: Exchange,
  status: number,
  contentType: string,
  body: string,
  extra: OutgoingHttpHeaders | undefined,
): void {
  if (ex.closed) return;
  const headers: OutgoingHttpHeaders = { 'content-type': contentType, 'content-length': Buffer.byteLength(body) };
  if (extra !== undefined) Object.assign(headers, extra);
  ex.res.writeHead(status, headers);
  ex.res.end(body);
}

async function streamEvents(ex: Exchange, all: string[], reply: ReplyOptions, contentType = SSE_TYPE): Promise<void> {
  let events = all;
  if (ex.closed) return;
  const { res } = ex;
  const headers: OutgoingHttpHeaders = { 'content-type': contentType, 'cache-control': 'no-cache' };
  if (reply.headers !== undefined) Object.assign(headers, reply.headers);
  res.writeHead(reply.status, headers);

  const disconnectAfter = reply.disconnectAfter;
  if (reply.endAfter !== undefined) events = events.slice(0, reply.endAfter);
  if (reply.stallAfter !== undefined) {
    res.write(events.slice(0, reply.stallAfter).join(''));
    await sleep(ex, 2 ** 30);
    return;
  }
  const pace = ex.pace;
  if (reply.intervalMs === 0 && disconnectAfter === undefined && pace === undefined) {
    res.end(events.join(''));
    return;
  }
  if (disconnectAfter === 0) {
    writeThenDrop(ex, ': mock upstream drops the connection\n\n');
    return;
  }
  for (let i = 0; i < events.length; i++) {
    if (i > 0 && reply.intervalMs > 0) await sleep(ex, reply.intervalMs);
    if (pace !== undefined) await pace(i);
    if (ex.closed) return;
    if (disconnectAfter !== undefined && i + 1 >= disconnectAfter) {
      writeThenDrop(ex, events[i]!);
      return;
    }
    res.write(events[i]!);
  }
  if (pace !== undefined) await pace(events.length);
  if (!ex.closed) res.end();
}

/** Writes `data`, then destroys the socket once it is flushed: a truncated response. */
function writeThenDrop(ex: Exchange, data: string): void {
  ex.selfDestroyed = true;
  ex.res.write(data, () => ex.req.socket.destroy());
}

function dropConnection(ex: Exchange): void {
  ex.selfDestroyed = true;
  ex.req.socket.destroy();
}

/** Resolves after `ms`, or as soon as the response closes. */
function sleep(ex: Exchange, ms: number): Promise<void> {
  if (ex.closed) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      ex.cancelSleep = undefined;
      resolve();
    };
    const timer = setTimeout(done, ms);
    ex.cancelSleep = done;
  });
}

// ---------------------------------------------------------------------------------------------------
// Default answers

async function respondDefault(ex: Exchange, route: string, json: unknown, reply: ReplyOptions): Promise<void> {
  const method = ex.req.method ?? 'GET';
  if (method === 'GET' && route === '/models') {
    const body = ex.req.headers['anthropic-version'] === undefined ? MODELS_BODY : anthropicModels(ex.req.url ?? '');
    sendBody(ex, reply.status, JSON_TYPE, body, reply.headers);
    return;
  }
  // Bedrock's Converse and Gemini's generateContent, for the benchmarks of their translations.
  const cloud = method === 'POST' ? cloudRoute(route) : undefined;
  if (cloud !== undefined) {
    const answer = cloudAnswer(cloud, splitText('mock reply', reply.chunks), reply.usage ?? { prompt: 10, completion: 6 });
    if (answer.parts.length === 1) return void ex.res.writeHead(reply.status, { 'content-type': answer.contentType }).end(answer.parts[0]);
    ex.res.writeHead(reply.status, { 'content-type': answer.contentType });
    for (const part of answer.parts) {
      if (reply.intervalMs > 0) await sleep(ex, reply.intervalMs);
      if (ex.closed) return;
      ex.res.write(part);
    }
    ex.res.end();
    return;
  }
  const post =
    route === '/messages/count_tokens' ||
    route === '/chat/completions' ||
    route === '/completions' ||
    route === '/embeddings' ||
    route === '/responses' ||
    route === '/messages';
  if (!post || method !== 'POST') {
    const message = `mock upstream: no route for ${method} ${ex.req.url ?? '/'}`;
    sendBody(ex, 404, JSON_TYPE, openAiError(message, 'invalid_request_error', 'not_found'), reply.headers);
    return;
  }
  if (!isObject(json)) {
    const message = 'mock upstream: the request body must be a JSON object';
    const body =
      route.startsWith('/messages')
        ? anthropicError(message, 'invalid_request_error')
        : openAiError(message, 'invalid_request_error');
    sendBody(ex, 400, JSON_TYPE, body, reply.headers);
    return;
  }
  switch (route) {
    case '/chat/completions':
      return chatCompletion(ex, json, reply);
    case '/completions':
      return textCompletion(ex, json, reply);
    case '/embeddings':
      return embeddings(ex, json, reply);
    case '/responses':
      return responses(ex, json, reply);
    case '/messages/count_tokens':
      sendBody(ex, reply.status, JSON_TYPE, JSON.stringify({ input_tokens: lastUserText(json.messages).length }), reply.headers);
      return;
    default:
      return anthropicMessage(ex, json, reply);
  }
}

function includeUsage(body: Json): boolean {
  return isObject(body.stream_options) && body.stream_options.include_usage === true;
}

/** The usage an OpenAI-shaped answer reports: the fixed one, or the scenario's. */
function chatUsage(reply: ReplyOptions): Json {
  const u = reply.usage;
  return u === undefined ? CHAT_USAGE : { prompt_tokens: u.prompt, completion_tokens: u.completion, total_tokens: u.prompt + u.completion };
}

async function chatCompletion(ex: Exchange, body: Json, reply: ReplyOptions): Promise<void> {
  const model = modelOf(body);
  const text = 'mock reply to: ' + lastUserText(body.messages);
  const id = 'chatcmpl-mock-' + nextSeq();
  const reported = chatUsage(reply);
  const usageKey = JSON.stringify(reported);

  if (body.stream !== true) {
    const [tail] = cachedTails(`chat\0${model}\0${text}\0${usageKey}`, (created) => [
      tailOf({
        object: 'chat.completion',
        created,
        model,
        choices: [
          { index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: 'stop' },
        ],
        usage: reported,
      }),
    ]);
    sendBody(ex, reply.status, JSON_TYPE, withId(id, tail!), reply.headers);
    return;
  }

  const usage = includeUsage(body);
  const tails = cachedTails(`chat-sse\0${model}\0${text}\0${reply.chunks}\0${usage}\0${usageKey}`, (created) => {
    const chunk = (choices: unknown[], extra?: Json): string =>
      tailOf({
        object: 'chat.completion.chunk',
        created,
        model,
        choices,
        ...(usage ? { usage: null } : {}),
        ...extra,
      }) + '\n\n';
    const out = splitText(text, reply.chunks).map((content, i) =>
      chunk([
        {
          index: 0,
          delta: i === 0 ? { role: 'assistant', content } : { content },
          logprobs: null,
          finish_reason: null,
        },
      ]),
    );
    out.push(chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }]));
    if (usage) out.push(chunk([], { usage: reported }));
    return out;
  });
  const prefix = 'data: {"id":"' + id + '",';
  const events = tails.map((tail) => prefix + tail);
  events.push(DONE_EVENT);
  await streamEvents(ex, events, reply);
}

async function textCompletion(ex: Exchange, body: Json, reply: ReplyOptions): Promise<void> {
  const model = modelOf(body);
  const prompt = Array.isArray(body.prompt) ? body.prompt[0] : body.prompt;
  const text = 'mock reply to: ' + (typeof prompt === 'string' ? prompt : '');
  const id = 'cmpl-mock-' + nextSeq();
  const reported = chatUsage(reply);
  const usageKey = JSON.stringify(reported);

  if (body.stream !== true) {
    const [tail] = cachedTails(`cmpl\0${model}\0${text}\0${usageKey}`, (created) => [
      tailOf({
        object: 'text_completion',
        created,
        model,
        choices: [{ text, index: 0, logprobs: null, finish_reason: 'stop' }],
        usage: reported,
      }),
    ]);
    sendBody(ex, reply.status, JSON_TYPE, withId(id, tail!), reply.headers);
    return;
  }

  const usage = includeUsage(body);
  const tails = cachedTails(`cmpl-sse\0${model}\0${text}\0${reply.chunks}\0${usage}\0${usageKey}`, (created) => {
    const chunk = (choices: unknown[], extra?: Json): string =>
      tailOf({ object: 'text_completion', created, model, choices, ...(usage ? { usage: null } : {}), ...extra }) +
      '\n\n';
    const out = splitText(text, reply.chunks).map((piece) =>
      chunk([{ text: piece, index: 0, logprobs: null, finish_reason: null }]),
    );
    out.push(chunk([{ text: '', index: 0, logprobs: null, finish_reason: 'stop' }]));
    if (usage) out.push(chunk([], { usage: reported }));
    return out;
  });
  const prefix = 'data: {"id":"' + id + '",';
  const events = tails.map((tail) => prefix + tail);
  events.push(DONE_EVENT);
  await streamEvents(ex, events, reply);
}

function embeddings(ex: Exchange, body: Json, reply: ReplyOptions): void {
  const input = body.input;
  // A string, an array of strings, a token array, or an array of token arrays.
  const items: unknown[] =
    Array.isArray(input) && input.length > 0 && !input.every((x) => typeof x === 'number') ? input : [input];
  const base64 = body.encoding_format === 'base64';
  let tokens = 0;
  const data = items.map((item, index) => {
    const text = typeof item === 'string' ? item : JSON.stringify(item ?? '');
    tokens += Array.isArray(item) ? item.length : Math.max(1, Math.ceil(text.length / 4));
    const vector = embed(text);
    return {
      object: 'embedding',
      index,
      embedding: base64 ? Buffer.from(vector.buffer).toString('base64') : Array.from(vector),
    };
  });
  const out = { object: 'list', data, model: modelOf(body), usage: { prompt_tokens: tokens, total_tokens: tokens } };
  sendBody(ex, reply.status, JSON_TYPE, JSON.stringify(out), reply.headers);
}

/** Eight deterministic float32 values in [-1, 1) derived from `text` (FNV-1a, then xorshift). */
function embed(text: string): Float32Array {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  const v = new Float32Array(8);
  for (let i = 0; i < 8; i++) {
    h ^= h << 13;
    h ^= h >>> 17;
    h ^= h << 5;
    v[i] = ((h >>> 0) / 0x1_0000_0000) * 2 - 1;
  }
  return v;
}

async function responses(ex: Exchange, body: Json, reply: ReplyOptions): Promise<void> {
  const model = modelOf(body);
  const text = 'mock';
  const usage = reply.usage === undefined ? { input_tokens: 5, output_tokens: 3, total_tokens: 8 } : { input_tokens: reply.usage.prompt, output_tokens: reply.usage.completion, total_tokens: reply.usage.prompt + reply.usage.completion };
  const response = (createdAt: number, done: boolean): Json => ({
    id: 'resp_mock',
    object: 'response',
    created_at: createdAt,
    status: done ? 'completed' : 'in_progress',
    model,
    output: done ? [outputMessage(text, 'completed')] : [],
    usage: done ? usage : null,
  });

  if (body.stream !== true) {
    const [full] = cachedTails(`resp\0${model}\0${JSON.stringify(usage)}`, (created) => [JSON.stringify(response(created, true))]);
    sendBody(ex, reply.status, JSON_TYPE, full!, reply.headers);
    return;
  }

  const created = nowSec();
  let seq = 0;
  const ev = (type: string, payload: Json): string =>
    `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...payload })}\n\n`;
  const where = { item_id: 'msg_mock', output_index: 0, content_index: 0 };
  const part = (t: string): Json => ({ type: 'output_text', text: t, annotations: [] });
  const events = [
    ev('response.created', { response: response(created, false) }),
    ev('response.in_progress', { response: response(created, false) }),
    ev('response.output_item.added', { output_index: 0, item: outputMessage('', 'in_progress') }),
    ev('response.content_part.added', { ...where, part: part('') }),
    ...splitText(text, reply.chunks).map((delta) => ev('response.output_text.delta', { ...where, delta })),
    ev('response.output_text.done', { ...where, text }),
    ev('response.content_part.done', { ...where, part: part(text) }),
    ev('response.output_item.done', { output_index: 0, item: outputMessage(text, 'completed') }),
    ev('response.completed', { response: response(created, true) }),
  ];
  await streamEvents(ex, events, reply);
}

function outputMessage(text: string, status: string): Json {
  return {
    type: 'message',
    id: 'msg_mock',
    status,
    role: 'assistant',
    content: text === '' && status !== 'completed' ? [] : [{ type: 'output_text', text, annotations: [] }],
  };
}

async function anthropicMessage(ex: Exchange, body: Json, reply: ReplyOptions): Promise<void> {
  const model = modelOf(body);
  const text = 'mock reply';
  const id = 'msg_mock_' + nextSeq();
  const input = reply.usage?.prompt ?? 10;
  const output = reply.usage?.completion ?? 6;

  if (body.stream !== true) {
    const [tail] = cachedTails(`msg\0${model}\0${input}\0${output}`, () => [
      tailOf({
        type: 'message',
        role: 'assistant',
        model,
        content: [{ type: 'text', text }],
        stop_reason: 'end_turn',
        stop_sequence: null,
        usage: { input_tokens: input, output_tokens: output },
      }),
    ]);
    sendBody(ex, reply.status, JSON_TYPE, withId(id, tail!), reply.headers);
    return;
  }

  const ev = (type: string, payload: Json): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...payload })}\n\n`;
  const events = [
    ev('message_start', {
      message: {
        id,
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: input, output_tokens: 1 },
      },
    }),
    ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
    ev('ping', {}),
    ...splitText(text, reply.chunks).map((piece) =>
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: piece } }),
    ),
    ev('content_block_stop', { index: 0 }),
    ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: output } }),
    ev('message_stop', {}),
  ];
  await streamEvents(ex, events, reply);
}

/** `n` pieces whose concatenation is `text`; when `n` exceeds its length the extra pieces are empty. */
export function splitText(text: string, n: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    out.push(text.slice(Math.floor((i * text.length) / n), Math.floor(((i + 1) * text.length) / n)));
  }
  return out;
}

function lastUserText(messages: unknown): string {
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const m: unknown = messages[i];
    if (!isObject(m) || m.role !== 'user') continue;
    if (typeof m.content === 'string') return m.content;
    if (!Array.isArray(m.content)) return '';
    let text = '';
    for (const part of m.content as unknown[]) {
      if (isObject(part) && typeof part.text === 'string') text += part.text;
    }
    return text;
  }
  return '';
}

function openAiError(message: string, type: string, code: string | null = null): string {
  return JSON.stringify({ error: { message, type, param: null, code } });
}

function anthropicError(message: string, type: string): string {
  return JSON.stringify({ type: 'error', error: { type, message } });
}

function openAiErrorType(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 429) return 'rate_limit_error';
  return status >= 500 ? 'server_error' : 'invalid_request_error';
}

function anthropicErrorType(status: number): string {
  if (status === 529) return 'overloaded_error';
  if (status >= 500) return 'api_error';
  return openAiErrorType(status);
}

// ---------------------------------------------------------------------------------------------------
// Standalone: node test/support/mock-upstream.ts [--port N] [--host H]

async function main(argv: string[]): Promise<void> {
  let port = 0;
  let host = '127.0.0.1';
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const eq = arg.indexOf('=');
    const name = eq === -1 ? arg : arg.slice(0, eq);
    const value = eq === -1 ? argv[++i] : arg.slice(eq + 1);
    if (name === '--port' && value !== undefined && /^\d+$/.test(value) && Number(value) < 65536) {
      port = Number(value);
    } else if (name === '--host' && value !== undefined && value !== '') {
      host = value;
    } else {
      process.stderr.write(`usage: node test/support/mock-upstream.ts [--port N] [--host H] (bad argument: ${arg})\n`);
      process.exit(2);
    }
  }
  const mock = await startMockUpstream({ port, host, record: false });
  const stop = (): void => {
    mock.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  process.stdout.write(JSON.stringify({ mock_upstream: mock.url }) + '\n');
}

const isMain =
  import.meta.main === true ||
  (process.argv[1] !== undefined && resolvePath(process.argv[1]) === fileURLToPath(import.meta.url));
if (isMain) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`mock upstream: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
