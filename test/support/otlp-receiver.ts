// An OTLP/HTTP trace receiver for tests and benchmarks: POST /v1/traces in the JSON encoding (the
// one the OTLP/HTTP JSON exporter sends; gzip accepted), every span recorded flat with its
// resource, attributes and events. It can be told to answer late, never, or with an error. Only
// node: built-ins and erasable TypeScript: Node runs this file by type stripping.
//
// Run directly (`node test/support/otlp-receiver.ts`) it is the benchmarks' sink: it counts spans
// without keeping them, answers `GET /stats` with {"spans": n, "exports": n}, and prints one line,
// {"otlp_receiver":"http://127.0.0.1:PORT/v1/traces"}.
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { gunzipSync } from 'node:zlib';
import { resolve as resolvePath } from 'node:path';
import { fileURLToPath } from 'node:url';

export type AttributeValue = string | number | boolean | AttributeValue[] | null;

export interface ReceivedEvent {
  name: string;
  timeUnixNano: string;
  attributes: Record<string, AttributeValue>;
}

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  /** 1 internal, 2 server, 3 client. */
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: Record<string, AttributeValue>;
  events: ReceivedEvent[];
  /** 0 unset, 1 ok, 2 error. */
  status: { code: number; message?: string };
  traceState: string;
  resource: Record<string, AttributeValue>;
  /** When the receiver got it (Date.now()). */
  receivedAt: number;
}

/** How the receiver answers an export: at once, after a delay, never, or with a status. */
export type ReceiverMode = { kind: 'ok' } | { kind: 'delay'; ms: number } | { kind: 'never' } | { kind: 'status'; status: number };

export interface OtlpReceiver {
  /** The traces URL: http://127.0.0.1:PORT/v1/traces. */
  readonly url: string;
  readonly spans: ReceivedSpan[];
  /** Spans received (also when not recorded). */
  readonly count: number;
  /** The headers of every export request, in arrival order. */
  readonly exports: IncomingHttpHeaders[];
  mode(mode: ReceiverMode): void;
  /** Polls until `predicate(spans)` is true; rejects after `timeoutMs` (default 10 s). */
  waitFor(predicate: (spans: ReceivedSpan[]) => boolean, timeoutMs?: number, what?: string): Promise<void>;
  close(): Promise<void>;
}

type Json = Record<string, unknown>;

/** An OTLP JSON AnyValue as a plain value. */
function valueOf(any: unknown): AttributeValue {
  const v = (any ?? {}) as Json;
  if ('stringValue' in v) return String(v.stringValue);
  if ('boolValue' in v) return Boolean(v.boolValue);
  if ('intValue' in v) return Number(v.intValue);
  if ('doubleValue' in v) return Number(v.doubleValue);
  if ('arrayValue' in v) return (((v.arrayValue as Json)?.values as unknown[]) ?? []).map(valueOf);
  return null;
}

function attributesOf(list: unknown): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const kv of (Array.isArray(list) ? list : []) as Json[]) out[String(kv.key)] = valueOf(kv.value);
  return out;
}

/** The spans of one ExportTraceServiceRequest, flattened. */
export function decodeTraces(body: Json, receivedAt = Date.now()): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const rs of (body.resourceSpans as Json[] | undefined) ?? []) {
    const resource = attributesOf((rs.resource as Json | undefined)?.attributes);
    for (const ss of (rs.scopeSpans as Json[] | undefined) ?? []) {
      for (const s of (ss.spans as Json[] | undefined) ?? []) {
        spans.push({
          traceId: String(s.traceId ?? ''),
          spanId: String(s.spanId ?? ''),
          parentSpanId: String(s.parentSpanId ?? ''),
          name: String(s.name ?? ''),
          kind: Number(s.kind ?? 0),
          startTimeUnixNano: String(s.startTimeUnixNano ?? '0'),
          endTimeUnixNano: String(s.endTimeUnixNano ?? '0'),
          attributes: attributesOf(s.attributes),
          events: ((s.events as Json[] | undefined) ?? []).map((e) => ({ name: String(e.name), timeUnixNano: String(e.timeUnixNano ?? '0'), attributes: attributesOf(e.attributes) })),
          status: { code: Number((s.status as Json | undefined)?.code ?? 0), message: (s.status as Json | undefined)?.message as string | undefined },
          traceState: String(s.traceState ?? ''),
          resource,
          receivedAt,
        });
      }
    }
  }
  return spans;
}

export async function startOtlpReceiver(options: { record?: boolean } = {}): Promise<OtlpReceiver> {
  const record = options.record ?? true;
  let count = 0;
  let exportCount = 0;
  const spans: ReceivedSpan[] = [];
  const exports: IncomingHttpHeaders[] = [];
  let mode: ReceiverMode = { kind: 'ok' };
  const sockets = new Set<Socket>();
  const held = new Set<ServerResponse>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      if (req.method === 'GET' && req.url === '/stats') {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ spans: count, exports: exportCount }));
        return;
      }
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      exportCount++;
      if (record) exports.push(req.headers);
      const current = mode;
      if (current.kind === 'never') {
        held.add(res);
        return;
      }
      if (current.kind === 'status') {
        res.writeHead(current.status, { 'content-type': 'application/json' }).end('{}');
        return;
      }
      let body = Buffer.concat(chunks);
      if (req.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
      if (!String(req.headers['content-type'] ?? '').startsWith('application/json')) {
        res.writeHead(415).end();
        return;
      }
      const answer = () => {
        const received = decodeTraces(JSON.parse(body.toString('utf8')) as Json);
        count += received.length;
        if (record) spans.push(...received);
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      };
      if (current.kind === 'delay') setTimeout(answer, current.ms);
      else answer();
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    spans,
    get count() {
      return count;
    },
    exports,
    mode: (next) => {
      mode = next;
    },
    async waitFor(predicate, timeoutMs = 10_000, what = 'spans') {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(spans)) {
        if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; received ${spans.length} spans: ${spans.map((s) => s.name).join(', ')}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        held.clear();
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

async function main(): Promise<void> {
  const receiver = await startOtlpReceiver({ record: false });
  const stop = (): void => {
    receiver.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  process.stdout.write(JSON.stringify({ otlp_receiver: receiver.url }) + '\n');
}

const isMain =
  import.meta.main === true ||
  (process.argv[1] !== undefined && resolvePath(process.argv[1]) === fileURLToPath(import.meta.url));
if (isMain) {
  main().catch((err: unknown) => {
    process.stderr.write(`otlp receiver: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
