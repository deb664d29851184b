// A mock of Amazon Bedrock Runtime for the tests of the `bedrock` provider. It answers as AWS does:
// the REST paths of the Converse API (`POST /model/{modelId}/converse` and `/converse-stream`) and of
// InvokeModel (`/invoke`, `/invoke-with-response-stream`), the model id URL-encoded in the path (a
// model id, a cross-region inference profile such as `us.anthropic...`, or an ARN). InvokeModel
// speaks the model's own body: Anthropic's Messages API (`anthropic_version: "bedrock-2023-05-31"`,
// no `model`, no `stream`) and the Titan and Cohere embedding bodies.
//
// Every model request must carry a valid AWS Signature Version 4 (service `bedrock`, the mock's
// region) made with credentials the mock knows; the signature is recomputed with
// `@smithy/signature-v4` over the request as received and compared. Streams are the binary AWS
// event stream (`@smithy/core/event-streams`), with Bedrock's `:event-type`/`:message-type` headers
// and modeled exceptions (`:message-type: exception`) mid-stream. Errors are Bedrock's: JSON
// `{"message"}` and the `x-amzn-errortype` header the SDK maps onto its exception classes.
//
// The same server is the AWS credential chain's sources: STS `AssumeRoleWithWebIdentity` (`POST /`,
// form body, XML answer), the container credentials endpoint (ECS `/v2/credentials/...`, EKS Pod
// Identity `/v1/credentials`, `Authorization: <token>`), and IMDSv2 (`/latest/api/token`,
// `/latest/meta-data/iam/security-credentials/...`). Each issues fresh temporary credentials that the
// mock then accepts until they expire.
//
// Triggers: the request header `x-mock-bedrock` (or the `fail` option/method) names behaviours,
// comma-separated: throttle, server_error, unavailable, context_length, access_denied, not_found,
// model_error, model_timeout, model_not_ready (an HTTP error before any answer); stream_error,
// stream_throttle (an exception event after the first delta), cut (the connection destroyed after
// the first delta), cut_first (destroyed after the opening event, before any content), hold (a
// delta every 200 ms until the client goes), slow_first:<ms>, slow:<ms>.
// A last user message containing BEDROCK_TOOL is answered by a call of the tool `get_weather`.
// Every request is recorded (paths raw and decoded, headers, body, the signing key, the auth outcome).
//
// One port speaks HTTP/1.1 and cleartext HTTP/2 (the AWS SDK's default handler opens HTTP/2 with
// prior knowledge to an http:// endpoint): the connection's first bytes tell which.

import { createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders } from 'node:http';
import { constants as http2Constants, createServer as createH2cServer } from 'node:http2';
import type { Http2ServerRequest } from 'node:http2';
import { createServer as createTcpServer } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { EventStreamCodec } from '@smithy/core/event-streams';
import type { MessageHeaders } from '@smithy/core/event-streams';
import { Hash } from '@smithy/core/serde';
import { SignatureV4 } from '@smithy/signature-v4';
import { fromUtf8, toUtf8 } from '@smithy/core/serde';

/** An HTTP error answered before any output. */
export type BedrockFailure =
  | 'throttle' | 'server_error' | 'unavailable' | 'context_length' | 'access_denied' | 'not_found'
  | 'model_error' | 'model_timeout' | 'model_not_ready';
/** What happens to a stream after its first delta. */
export type BedrockStreamFault = 'stream_error' | 'stream_throttle' | 'cut' | 'cut_first' | 'hold';
/** A value of the `x-mock-bedrock` header (several may be joined with commas). */
export type BedrockTrigger = BedrockFailure | BedrockStreamFault | `slow_first:${number}` | `slow:${number}`;

export interface AwsCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

/** Token counts of an answer, in Converse's names. */
export interface BedrockUsage {
  inputTokens: number;
  outputTokens: number;
  cacheReadInputTokens: number;
  cacheWriteInputTokens: number;
}

export interface MockBedrockOptions {
  /** The region requests must be signed for (default us-east-1). */
  region?: string;
  /** Long-lived credentials the mock accepts (default: one key without a session token and one with). */
  credentials?: AwsCredentials[];
  /** Base model ids served (default BEDROCK_MODELS); inference profiles and ARNs resolve to these. */
  models?: readonly string[];
  /** Content deltas of a streamed text answer (default 3). */
  chunks?: number;
  /** Token counts reported (default 11 input, 5 output, 0 cache read, 0 cache write). */
  usage?: Partial<BedrockUsage>;
  /** Triggers applied to every model request without an `x-mock-bedrock` header (see also `fail()`). */
  fail?: string;
  /** Lifetime of the temporary credentials the credential endpoints issue (default 3600 s). */
  credentialLifetimeSec?: number;
  /** The web identity token STS accepts (default a fixed JWT-shaped string). */
  webIdentityToken?: string;
  /** The `Authorization` value the container credentials endpoint requires. */
  containerToken?: string;
  /** The role name the instance metadata service reports. */
  imdsRole?: string;
  /** The AWS account of the roles (default 123456789012). */
  accountId?: string;
}

/** How the SigV4 check of a request ended (undefined for the unsigned credential endpoints). */
export type BedrockAuthOutcome =
  | 'ok' | 'missing' | 'incomplete' | 'skewed' | 'bad_scope' | 'unknown_key' | 'expired_token' | 'bad_token' | 'bad_signature';

export interface BedrockRequest {
  method: string;
  /** '1.1' or '2.0'. */
  httpVersion: string;
  /** The path exactly as received, without the query string. */
  rawPath: string;
  /** The path percent-decoded. */
  path: string;
  query: Record<string, string>;
  /** As received; over HTTP/2 with the pseudo-headers (`:authority`, `:path`...). */
  headers: IncomingHttpHeaders;
  raw: string;
  /** JSON, or the fields of a form body (STS); undefined when neither parses. */
  body: unknown;
  /** Converse, ConverseStream, InvokeModel, InvokeModelWithResponseStream, or a credential endpoint's name. */
  operation?: string;
  /** The model id of the path, decoded. */
  modelId?: string;
  /** The access key id named by the Authorization header (whether or not the signature checked). */
  accessKeyId?: string;
  auth?: BedrockAuthOutcome;
  /** The client went away before the answer was complete. */
  clientGone: boolean;
}

export interface MockBedrock {
  /** http://127.0.0.1:PORT: the Bedrock Runtime endpoint, and STS, IMDS and the container endpoint. */
  url: string;
  port: number;
  region: string;
  /** Long-lived credentials without a session token. */
  credentials: AwsCredentials;
  /** Credentials with a session token (sent in `x-amz-security-token`). */
  sessionCredentials: AwsCredentials;
  /** The STS endpoint (`AssumeRoleWithWebIdentity`). */
  stsUrl: string;
  /** The container credentials endpoint, ECS style (`AWS_CONTAINER_CREDENTIALS_FULL_URI`). */
  containerUrl: string;
  /** The container credentials endpoint, EKS Pod Identity style. */
  podIdentityUrl: string;
  /** The instance metadata service endpoint (`AWS_EC2_METADATA_SERVICE_ENDPOINT`). */
  imdsUrl: string;
  webIdentityToken: string;
  containerToken: string;
  /** The role STS expects to be asked for (any role of the account is accepted). */
  roleArn: string;
  imdsRole: string;
  /** Every request, in arrival order. */
  requests: BedrockRequest[];
  /** How many credentials each endpoint issued. */
  readonly issued: { readonly sts: number; readonly container: number; readonly imds: number };
  /** Makes every temporary credential issued so far expired. */
  expireCredentials(): void;
  /** Applies these triggers to every following model request without the header; undefined: back to normal. */
  fail(triggers: string | undefined): void;
  /** Forgets the recorded requests and the issue counts. */
  reset(): void;
  close(): Promise<void>;
}

export const MOCK_BEDROCK_HEADER = 'x-mock-bedrock';
export const BEDROCK_TOOL = 'BEDROCK_TOOL';
export const ANTHROPIC_BEDROCK_VERSION = 'bedrock-2023-05-31';
export const TOOL_NAME = 'get_weather';
export const TOOL_INPUT = { city: 'Paris' } as const;
/** Allowed difference between the signing time and the mock's clock, as AWS allows. */
export const MAX_CLOCK_SKEW_MS = 5 * 60_000;

export const BEDROCK_MODELS: readonly string[] = [
  'anthropic.claude-3-5-haiku-20241022-v1:0', 'anthropic.claude-3-5-sonnet-20241022-v2:0', 'anthropic.claude-3-haiku-20240307-v1:0',
  'anthropic.claude-sonnet-4-20250514-v1:0', 'meta.llama3-1-8b-instruct-v1:0', 'amazon.nova-micro-v1:0', 'amazon.nova-lite-v1:0',
  'mistral.mistral-large-2407-v1:0', 'amazon.titan-embed-text-v2:0', 'amazon.titan-embed-text-v1', 'cohere.embed-english-v3',
  'cohere.embed-multilingual-v3',
];

// Messages as Bedrock words them.
const INVALID_MODEL = 'The provided model identifier is invalid.';
const NOT_CHAT_MODEL = "This action doesn't support the model that you provided. Try again with a supported text or chat model.";
const FIRST_USER = 'A conversation must start with a user message. Try again with a conversation that starts with a user message.';
const BAD_SIGNATURE = 'The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.';
const BAD_TOKEN = 'The security token included in the request is invalid.';
const EXPIRED_TOKEN = 'The security token included in the request is expired';
const STREAM_ERROR = 'An error occurred while streaming the response. Retry your request.';
const TOO_MANY_TOKENS = 'Too many tokens, please wait before trying again.';

const FAILURES: Record<BedrockFailure, { status: number; code: string; message: string }> = {
  throttle: { status: 429, code: 'ThrottlingException', message: 'Too many requests, please wait before trying again.' },
  model_not_ready: { status: 429, code: 'ModelNotReadyException', message: 'Model is not ready for inference. Wait and try your request again.' },
  server_error: { status: 500, code: 'InternalServerException', message: 'The system encountered an unexpected error during processing. Try your request again.' },
  unavailable: { status: 503, code: 'ServiceUnavailableException', message: 'Bedrock is unable to process your request.' },
  context_length: { status: 400, code: 'ValidationException', message: 'Input is too long for requested model.' },
  access_denied: { status: 403, code: 'AccessDeniedException', message: "You don't have access to the model with the specified model ID." },
  not_found: { status: 404, code: 'ResourceNotFoundException', message: 'This model version has reached the end of its life. Please refer to the AWS documentation for more details.' },
  model_error: { status: 424, code: 'ModelErrorException', message: 'Received server error (500) from model. Try your request again.' },
  model_timeout: { status: 408, code: 'ModelTimeoutException', message: 'Model has timed out in processing the request. Try your request again.' },
};
const STREAM_FAULTS: readonly string[] = ['stream_error', 'stream_throttle', 'cut', 'cut_first', 'hold'];

type Json = Record<string, unknown>;
interface Issued { secretAccessKey: string; sessionToken: string; expiresAt: number }
interface State {
  opts: { region: string; models: readonly string[]; chunks: number; usage: BedrockUsage; fail: string | undefined; lifetimeSec: number; webIdentityToken: string; containerToken: string; imdsRole: string; accountId: string };
  static: Map<string, AwsCredentials>;
  issuedKeys: Map<string, Issued>;
  imdsTokens: Map<string, number>; // token → expiry (ms since epoch)
  issued: { sts: number; container: number; imds: number };
  requests: BedrockRequest[];
}
type Req = IncomingMessage | Http2ServerRequest;
/** What the mock uses of a response, common to HTTP/1.1's ServerResponse and HTTP/2's compatibility API. */
interface Res {
  writeHead(status: number, headers: OutgoingHttpHeaders): unknown;
  write(chunk: Uint8Array, callback: (error?: Error | null) => void): boolean;
  end(data?: string | Uint8Array): unknown;
  readonly headersSent: boolean;
  readonly writableEnded: boolean;
  on(event: 'close', listener: () => void): unknown;
  once(event: 'close', listener: () => void): unknown;
  off(event: 'close', listener: () => void): unknown;
}
/** The protocol-specific parts: sending the status line and headers now, whether the client has gone,
 *  and dropping the answer (HTTP/1.1: the connection is destroyed; HTTP/2: the stream is reset). */
interface Io { flush(): void; gone(): boolean; cut(): void }
interface Ctx { state: State; req: Req; res: Res; io: Io; record: BedrockRequest; bytes: Buffer; started: number; requestId: string }
interface Triggers { failure?: BedrockFailure; fault?: BedrockStreamFault; slowFirstMs: number; slowMs: number }

export function startMockBedrock(options: MockBedrockOptions = {}): Promise<MockBedrock> {
  const plain = options.credentials?.find((c) => c.sessionToken === undefined) ?? { accessKeyId: accessKeyId('AKIA'), secretAccessKey: secret() };
  const session = options.credentials?.find((c) => c.sessionToken !== undefined) ?? { accessKeyId: accessKeyId('ASIA'), secretAccessKey: secret(), sessionToken: sessionToken() };
  const state: State = {
    opts: {
      region: options.region ?? 'us-east-1',
      models: options.models ?? BEDROCK_MODELS,
      chunks: Math.max(1, options.chunks ?? 3),
      usage: { inputTokens: 11, outputTokens: 5, cacheReadInputTokens: 0, cacheWriteInputTokens: 0, ...options.usage },
      fail: options.fail,
      lifetimeSec: options.credentialLifetimeSec ?? 3600,
      webIdentityToken: options.webIdentityToken ?? 'eyJhbGciOiJSUzI1NiIsImtpZCI6Im1vY2sifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6c2x1aWNlOmdhdGV3YXkifQ.mock-signature',
      containerToken: options.containerToken ?? 'mock-container-token-' + randomBytes(12).toString('hex'),
      imdsRole: options.imdsRole ?? 'sluice-gateway-instance-role',
      accountId: options.accountId ?? '123456789012',
    },
    static: new Map([...(options.credentials ?? []), plain, session].map((c) => [c.accessKeyId, c])),
    issuedKeys: new Map(),
    imdsTokens: new Map(),
    issued: { sts: 0, container: 0, imds: 0 },
    requests: [],
  };
  const handle = (req: Req, res: Res, io: Io): void => {
    const parts: Buffer[] = [];
    req.on('data', (chunk: Buffer) => parts.push(chunk));
    req.on('end', () => {
      const ctx = context(state, req, res, io, Buffer.concat(parts));
      onRequest(ctx).catch((error: unknown) => {
        if (!res.headersSent) sendError(ctx, 500, 'InternalServerException', `mock failure: ${String(error)}`);
        else io.cut();
      });
    });
  };
  return listen(handle).then(({ port, close }) => {
    const url = `http://127.0.0.1:${port}`;
    const { opts } = state;
    return {
      url, port, region: opts.region, credentials: plain, sessionCredentials: session,
      stsUrl: url, containerUrl: `${url}/v2/credentials/${randomUUID()}`, podIdentityUrl: `${url}/v1/credentials`, imdsUrl: url,
      webIdentityToken: opts.webIdentityToken, containerToken: opts.containerToken,
      roleArn: `arn:aws:iam::${opts.accountId}:role/sluice-gateway`, imdsRole: opts.imdsRole,
      requests: state.requests,
      issued: {
        get sts() { return state.issued.sts; },
        get container() { return state.issued.container; },
        get imds() { return state.issued.imds; },
      },
      expireCredentials: () => { for (const issued of state.issuedKeys.values()) issued.expiresAt = 0; },
      fail: (triggers) => { opts.fail = triggers; },
      reset: () => { state.requests.length = 0; state.issued.sts = 0; state.issued.container = 0; state.issued.imds = 0; },
      close,
    };
  });
}

const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

/** Listens on 127.0.0.1 (port 0) for HTTP/1.1 and cleartext HTTP/2 on the same port. */
function listen(handle: (req: Req, res: Res, io: Io) => void): Promise<{ port: number; close(): Promise<void> }> {
  const h1 = createServer((req, res) => handle(req, res, { flush: () => res.flushHeaders(), gone: () => res.destroyed, cut: () => res.destroy() }));
  h1.on('clientError', (_error, socket) => socket.destroy());
  const h2 = createH2cServer((req, res) => handle(req, res, {
    flush: () => undefined, // writeHead sends the HEADERS frame at once
    gone: () => res.stream.destroyed,
    cut: () => res.stream.close(http2Constants.NGHTTP2_INTERNAL_ERROR), // RST_STREAM: other streams of the session live on
  }));
  const sockets = new Set<Socket>();
  const server = createTcpServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    socket.once('data', (first: Buffer) => {
      socket.pause();
      const n = Math.min(first.length, H2_PREFACE.length);
      if (first.subarray(0, n).equals(H2_PREFACE.subarray(0, n))) return void h2.emit('connection', replay(socket, first));
      socket.unshift(first);
      h1.emit('connection', socket);
      socket.resume();
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      let closing: Promise<void> | undefined;
      resolve({
        port: (server.address() as AddressInfo).port,
        close: () => (closing ??= new Promise<void>((done) => {
          server.close(() => done());
          for (const socket of sockets) socket.destroy();
        })),
      });
    });
  });
}

/** The socket as a stream that first yields the bytes already read from it (an HTTP/2 session reads
 *  its socket natively, so they cannot be pushed back with unshift). */
function replay(socket: Socket, first: Buffer): Duplex {
  const stream = new Duplex({
    read() { socket.resume(); },
    write(chunk: Buffer, _encoding, callback) { socket.write(chunk, callback); },
    final(callback) { socket.end(callback); },
    destroy(error, callback) { socket.destroy(error ?? undefined); callback(error); },
  });
  stream.push(first);
  socket.on('data', (data: Buffer) => { if (!stream.push(data)) socket.pause(); });
  socket.on('end', () => stream.push(null));
  socket.on('close', () => stream.destroy());
  return stream;
}

// ---------------------------------------------------------------------------------------------------
// Routing

const MODEL_ROUTE = /^\/model\/([^/]+)\/(converse|converse-stream|invoke|invoke-with-response-stream|count-tokens)$/;
const OPERATIONS: Record<string, string> = {
  converse: 'Converse', 'converse-stream': 'ConverseStream', invoke: 'InvokeModel', 'invoke-with-response-stream': 'InvokeModelWithResponseStream', 'count-tokens': 'CountTokens',
};
const IMDS_CREDENTIALS = '/latest/meta-data/iam/security-credentials/';

/** Records the request; `clientGone` is set if the connection closes before the answer is complete. */
function context(state: State, req: Req, res: Res, io: Io, bytes: Buffer): Ctx {
  const target = req.url ?? '/';
  const queryAt = target.indexOf('?');
  const rawPath = queryAt === -1 ? target : target.slice(0, queryAt);
  const query = Object.fromEntries(new URLSearchParams(queryAt === -1 ? '' : target.slice(queryAt + 1)));
  const raw = bytes.toString('utf8');
  const record: BedrockRequest = {
    method: req.method ?? 'GET', httpVersion: req.httpVersion, rawPath, path: safeDecode(rawPath), query, headers: req.headers, raw,
    body: parseBody(req, raw), clientGone: false,
  };
  state.requests.push(record);
  let cut = false;
  res.on('close', () => { if (!res.writableEnded && !cut) record.clientGone = true; });
  const dropping: Io = { ...io, cut: () => { cut = true; io.cut(); } };
  return { state, req, res, io: dropping, record, bytes, started: Date.now(), requestId: randomUUID() };
}

async function onRequest(ctx: Ctx): Promise<void> {
  const { state, req, record } = ctx;
  const { rawPath } = record;

  // The credential sources, unsigned as they are in AWS.
  if (req.method === 'POST' && rawPath === '/' && isObject(record.body) && 'Action' in record.body) return sts(ctx);
  if (req.method === 'GET' && (rawPath.startsWith('/v2/credentials/') || rawPath === '/v1/credentials')) return container(ctx);
  if (rawPath === '/latest/api/token' || rawPath.startsWith(IMDS_CREDENTIALS)) return imds(ctx);

  const route = MODEL_ROUTE.exec(rawPath);
  if (route !== null) {
    record.operation = OPERATIONS[route[2]!];
    record.modelId = safeDecode(route[1]!);
  }
  if (!(await authenticate(ctx))) return;
  if (route === null || req.method !== 'POST') return sendError(ctx, 404, 'UnknownOperationException', 'Unknown operation');

  const triggers = parseTriggers(req.headers[MOCK_BEDROCK_HEADER] ?? state.opts.fail);
  if (typeof triggers === 'string') return sendError(ctx, 400, 'ValidationException', triggers);
  const model = resolveModel(state, record.modelId!);
  if (model === undefined) return sendError(ctx, 400, 'ValidationException', INVALID_MODEL);
  const operation = route[2]!;
  const embedding = isEmbeddingModel(model);
  if (operation === 'count-tokens') return countTokens(ctx, model, triggers);
  if (operation.startsWith('converse') && embedding) return sendError(ctx, 400, 'ValidationException', NOT_CHAT_MODEL);
  if (operation === 'invoke-with-response-stream' && embedding) return sendError(ctx, 400, 'ValidationException', 'The model is unsupported for streaming.');
  if (!embedding && operation.startsWith('invoke') && !model.startsWith('anthropic.')) {
    return sendError(ctx, 400, 'ValidationException', 'This mock answers InvokeModel for anthropic.* and embedding models only.');
  }
  if (!isObject(record.body)) return sendError(ctx, 400, 'ValidationException', 'Malformed input request, please reformat your input and try again.');
  const invalid = operation.startsWith('converse') ? checkConverse(record.body) : embedding ? checkEmbedding(model, record.body) : checkAnthropic(record.body);
  if (invalid !== undefined) return sendError(ctx, 400, 'ValidationException', invalid);

  if (triggers.failure !== undefined) return failWith(ctx, triggers.failure, model);
  const streaming = operation.endsWith('stream');
  if (!streaming) {
    // A non-stream answer: slow_first delays it, cut drops the connection, hold never answers.
    if (triggers.slowFirstMs > 0 && !(await pause(ctx, triggers.slowFirstMs))) return;
    if (triggers.fault === 'cut' || triggers.fault === 'cut_first') return ctx.io.cut();
    if (triggers.fault === 'hold') return;
  }
  if (operation === 'converse') return send(ctx, 200, converse(ctx, record.body));
  if (operation === 'converse-stream') return runStream(ctx, triggers, converseFrames(ctx, record.body), converseTick, {});
  if (embedding) return invokeEmbedding(ctx, model, record.body);
  if (operation === 'invoke') return invokeAnthropic(ctx, model, record.body);
  return runStream(ctx, triggers, anthropicFrames(ctx, model, record.body), anthropicTick, { 'x-amzn-bedrock-content-type': 'application/json' });
}

/** A model id, an inference profile (`us.`, `eu.`... prefix) or an ARN, resolved to a served base model. */
function resolveModel(state: State, modelId: string): string | undefined {
  let id = modelId;
  const arn = /^arn:aws[a-z-]*:bedrock:[a-z0-9-]+:(\d{12})?:(foundation-model|inference-profile)\/(.+)$/.exec(id);
  if (arn !== null) id = arn[3]!;
  else if (id.startsWith('arn:')) return undefined;
  const profile = /^(us|eu|apac|jp|au|ca|us-gov|global)\.(.+)$/.exec(id);
  if (profile !== null) {
    if (arn !== null && arn[2] === 'foundation-model') return undefined;
    id = profile[2]!;
    if (isEmbeddingModel(id)) return undefined;
  } else if (arn !== null && arn[2] === 'inference-profile') {
    return undefined;
  }
  return state.opts.models.includes(id) ? id : undefined;
}

function isEmbeddingModel(model: string): boolean {
  return model.startsWith('amazon.titan-embed') || model.startsWith('cohere.embed');
}

/** The triggers a header value names, or the message of a 400 when one is unknown. */
function parseTriggers(value: string | string[] | undefined): Triggers | string {
  const triggers: Triggers = { slowFirstMs: 0, slowMs: 0 };
  const names = (Array.isArray(value) ? value.join(',') : value ?? '').split(',').map((s) => s.trim()).filter((s) => s !== '');
  for (const name of names) {
    const timed = /^(slow_first|slow):(\d+)$/.exec(name);
    if (timed !== null) {
      if (timed[1] === 'slow') triggers.slowMs = Number(timed[2]);
      else triggers.slowFirstMs = Number(timed[2]);
    } else if (name in FAILURES) {
      triggers.failure = name as BedrockFailure;
    } else if (STREAM_FAULTS.includes(name)) {
      triggers.fault = name as BedrockStreamFault;
    } else {
      return `${MOCK_BEDROCK_HEADER}: unknown trigger '${name}'`;
    }
  }
  return triggers;
}

function failWith(ctx: Ctx, failure: BedrockFailure, model: string): void {
  const { status, code, message } = FAILURES[failure];
  const extra: Json = failure === 'model_error'
    ? { originalStatusCode: 500, resourceName: `arn:aws:bedrock:${ctx.state.opts.region}::foundation-model/${model}` }
    : {};
  sendError(ctx, status, code, message, extra);
}

// ---------------------------------------------------------------------------------------------------
// SigV4

const AMZ_DATE = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/;

/** Checks the request's SigV4 signature; answers the 403 itself and returns false when it fails. */
async function authenticate(ctx: Ctx): Promise<boolean> {
  const { state, req, record } = ctx;
  const deny = (outcome: BedrockAuthOutcome, code: string, message: string): false => {
    record.auth = outcome;
    sendError(ctx, 403, code, message, {}, 'com.amazon.coral.service');
    return false;
  };
  const header = req.headers.authorization;
  if (header === undefined) return deny('missing', 'MissingAuthenticationTokenException', 'Missing Authentication Token');
  const fields = parseAuthorization(header);
  const missing = [
    fields.credential === undefined ? "Authorization header requires 'Credential' parameter." : '',
    fields.signature === undefined ? "Authorization header requires 'Signature' parameter." : '',
    fields.signedHeaders === undefined ? "Authorization header requires 'SignedHeaders' parameter." : '',
    typeof req.headers['x-amz-date'] !== 'string' ? "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header." : '',
  ].filter((m) => m !== '');
  if (!header.startsWith('AWS4-HMAC-SHA256 ') || missing.length > 0) {
    return deny('incomplete', 'IncompleteSignatureException', `${missing.join(' ')} Authorization=${header}`.trim());
  }
  const [keyId = '', scopeDate = '', region = '', service = '', terminator = ''] = fields.credential!.split('/');
  record.accessKeyId = keyId;
  const amzDate = String(req.headers['x-amz-date']);
  const signingDate = parseAmzDate(amzDate);
  if (signingDate === undefined) return deny('incomplete', 'IncompleteSignatureException', `Date must be in ISO-8601 'basic format'. Got '${amzDate}'. See http://en.wikipedia.org/wiki/ISO_8601`);
  const skew = signingDate.getTime() - Date.now();
  if (Math.abs(skew) > MAX_CLOCK_SKEW_MS) {
    const now = Date.now();
    return deny('skewed', 'InvalidSignatureException', skew < 0
      ? `Signature expired: ${amzDate} is now earlier than ${basicDate(now - MAX_CLOCK_SKEW_MS)} (${basicDate(now)} - 5 min.)`
      : `Signature not yet current: ${amzDate} is still later than ${basicDate(now + MAX_CLOCK_SKEW_MS)} (${basicDate(now)} + 5 min.)`);
  }
  if (scopeDate !== amzDate.slice(0, 8)) {
    return deny('bad_scope', 'InvalidSignatureException', `Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '${scopeDate}' != '${amzDate.slice(0, 8)}', from '${amzDate}'.`);
  }
  if (region !== state.opts.region) return deny('bad_scope', 'InvalidSignatureException', `Credential should be scoped to a valid region. `);
  if (service !== 'bedrock') return deny('bad_scope', 'InvalidSignatureException', `Credential should be scoped to correct service: 'bedrock'. `);
  if (terminator !== 'aws4_request') return deny('bad_scope', 'InvalidSignatureException', `Credential should be scoped with a valid terminator: 'aws4_request', not '${terminator}'. `);
  const signed = fields.signedHeaders!.split(';');
  if (!signed.includes('host') && !signed.includes(':authority')) return deny('incomplete', 'InvalidSignatureException', "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.");

  const known = credentialsFor(state, keyId);
  if (known === undefined) return deny('unknown_key', 'UnrecognizedClientException', BAD_TOKEN);
  if (known.expiresAt !== undefined && known.expiresAt <= Date.now()) return deny('expired_token', 'ExpiredTokenException', EXPIRED_TOKEN);
  const token = req.headers['x-amz-security-token'];
  if (token !== known.sessionToken) return deny('bad_token', 'UnrecognizedClientException', BAD_TOKEN);

  const expected = await signatureOf(ctx, known, signed, signingDate);
  if (expected !== fields.signature) return deny('bad_signature', 'InvalidSignatureException', BAD_SIGNATURE);
  record.auth = 'ok';
  return true;
}

function parseAuthorization(header: string): { credential?: string; signedHeaders?: string; signature?: string } {
  const fields: Record<string, string> = {};
  for (const part of header.replace(/^\S+\s+/, '').split(',')) {
    const at = part.indexOf('=');
    if (at > 0) fields[part.slice(0, at).trim()] = part.slice(at + 1).trim();
  }
  return { credential: fields.Credential, signedHeaders: fields.SignedHeaders, signature: fields.Signature };
}

function credentialsFor(state: State, keyId: string): (AwsCredentials & { expiresAt?: number }) | undefined {
  const fixed = state.static.get(keyId);
  if (fixed !== undefined) return fixed;
  const issued = state.issuedKeys.get(keyId);
  return issued === undefined ? undefined : { accessKeyId: keyId, ...issued };
}

/** The signature AWS would compute: method, path as received, query, the signed headers as received,
 *  the body's own SHA-256 (whatever `x-amz-content-sha256` claims), with the key's secret. */
async function signatureOf(ctx: Ctx, known: AwsCredentials, signed: string[], signingDate: Date): Promise<string> {
  const { req, record, bytes, state } = ctx;
  const headers: Record<string, string> = {};
  for (const name of signed) {
    const value = req.headers[name] ?? (name === 'host' ? req.headers[':authority'] : undefined); // HTTP/2 carries the host in :authority
    if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(',') : value;
  }
  if ('x-amz-content-sha256' in headers) headers['x-amz-content-sha256'] = createHash('sha256').update(bytes).digest('hex');
  const signer = new SignatureV4({
    service: 'bedrock', region: state.opts.region, sha256: Hash.bind(null, 'sha256'), applyChecksum: false,
    credentials: { accessKeyId: known.accessKeyId, secretAccessKey: known.secretAccessKey, sessionToken: signed.includes('x-amz-security-token') ? known.sessionToken : undefined },
  });
  const request = { method: record.method, protocol: 'http:', hostname: '127.0.0.1', path: record.rawPath, query: record.query, headers, body: bytes };
  const result = await signer.sign(request, { signingDate, signableHeaders: new Set(signed) });
  return /Signature=([0-9a-f]+)/.exec(String(result.headers.authorization))?.[1] ?? '';
}

function parseAmzDate(value: string): Date | undefined {
  const m = AMZ_DATE.exec(value);
  if (m === null) return undefined;
  const [, y, mo, d, h, mi, s] = m.map(Number) as [number, number, number, number, number, number, number];
  return new Date(Date.UTC(y, mo - 1, d, h, mi, s));
}

function basicDate(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z').replace(/[-:]/g, '');
}

// ---------------------------------------------------------------------------------------------------
// Converse

function converse(ctx: Ctx, body: Json): Json {
  const { state } = ctx;
  const text = lastUserText(body);
  const content = text.includes(BEDROCK_TOOL)
    ? [{ toolUse: { toolUseId: toolUseId(), name: TOOL_NAME, input: TOOL_INPUT } }]
    : [{ text: replyTo(text) }];
  return {
    output: { message: { role: 'assistant', content } },
    stopReason: text.includes(BEDROCK_TOOL) ? 'tool_use' : 'end_turn',
    usage: converseUsage(state.opts.usage),
    metrics: { latencyMs: Date.now() - ctx.started },
  };
}

/** A stream message, made when it is sent (so latencies are measured then); `delta`: content. */
interface Frame { make: () => Uint8Array; delta: boolean }

/** messageStart; the text deltas (no contentBlockStart for text) or the toolUse start and its input
 *  fragments; contentBlockStop; messageStop; metadata with the usage and latency. */
function converseFrames(ctx: Ctx, body: Json): Frame[] {
  const { state } = ctx;
  const text = lastUserText(body);
  const tool = text.includes(BEDROCK_TOOL);
  const frames: Frame[] = [];
  const add = (type: string, payload: Json | (() => Json), delta = false): void => {
    frames.push({ make: () => event(type, typeof payload === 'function' ? payload() : payload), delta });
  };
  add('messageStart', { role: 'assistant' });
  if (tool) {
    add('contentBlockStart', { contentBlockIndex: 0, start: { toolUse: { toolUseId: toolUseId(), name: TOOL_NAME } } });
    for (const input of split(JSON.stringify(TOOL_INPUT), state.opts.chunks)) add('contentBlockDelta', { contentBlockIndex: 0, delta: { toolUse: { input } } }, true);
  } else {
    for (const piece of split(replyTo(text), state.opts.chunks)) add('contentBlockDelta', { contentBlockIndex: 0, delta: { text: piece } }, true);
  }
  add('contentBlockStop', { contentBlockIndex: 0 });
  add('messageStop', { stopReason: tool ? 'tool_use' : 'end_turn' });
  add('metadata', () => ({ usage: converseUsage(state.opts.usage), metrics: { latencyMs: Date.now() - ctx.started } }));
  return frames;
}

function converseTick(n: number): Uint8Array {
  return event('contentBlockDelta', { contentBlockIndex: 0, delta: { text: ` ${n}` } });
}

function converseUsage(usage: BedrockUsage): Json {
  const { inputTokens, outputTokens, cacheReadInputTokens, cacheWriteInputTokens } = usage;
  return { inputTokens, outputTokens, totalTokens: inputTokens + outputTokens + cacheReadInputTokens + cacheWriteInputTokens, cacheReadInputTokens, cacheWriteInputTokens };
}

function checkConverse(body: Json): string | undefined {
  if (!Array.isArray(body.messages)) return "1 validation error detected: Value null at 'messages' failed to satisfy constraint: Member must not be null";
  const first = body.messages[0];
  if (!isObject(first) || first.role !== 'user') return FIRST_USER;
  return undefined;
}

// ---------------------------------------------------------------------------------------------------
// CountTokens: `{input: {converse: {messages, system?, toolConfig?}}}` or
// `{input: {invokeModel: {body: <base64 of an InvokeModel body>}}}`, answered `{inputTokens}`
// (the configured input count: the count a request would be billed).

function countTokens(ctx: Ctx, model: string, triggers: Triggers): void {
  const body = ctx.record.body;
  if (triggers.failure !== undefined) return failWith(ctx, triggers.failure, model);
  if (isEmbeddingModel(model)) return sendError(ctx, 400, 'ValidationException', "The provided model doesn't support counting tokens.");
  const input = isObject(body) ? body.input : undefined;
  if (!isObject(input)) return sendError(ctx, 400, 'ValidationException', "1 validation error detected: Value null at 'input' failed to satisfy constraint: Member must not be null");
  if (isObject(input.converse)) {
    const invalid = checkConverse(input.converse);
    if (invalid !== undefined) return sendError(ctx, 400, 'ValidationException', invalid);
  } else if (isObject(input.invokeModel) && typeof input.invokeModel.body === 'string') {
    let inner: unknown;
    try {
      inner = JSON.parse(Buffer.from(input.invokeModel.body, 'base64').toString('utf8'));
    } catch {
      return sendError(ctx, 400, 'ValidationException', 'Malformed input request, please reformat your input and try again.');
    }
    if (!model.startsWith('anthropic.') || !isObject(inner)) return sendError(ctx, 400, 'ValidationException', 'Malformed input request, please reformat your input and try again.');
    const invalid = checkAnthropic(inner);
    if (invalid !== undefined) return sendError(ctx, 400, 'ValidationException', invalid);
  } else {
    return sendError(ctx, 400, 'ValidationException', 'input must name exactly one of converse and invokeModel');
  }
  send(ctx, 200, { inputTokens: ctx.state.opts.usage.inputTokens });
}

// ---------------------------------------------------------------------------------------------------
// InvokeModel: Anthropic Messages

function checkAnthropic(body: Json): string | undefined {
  for (const key of ['anthropic_version', 'max_tokens', 'messages']) {
    if (!(key in body)) return `Malformed input request: #: required key [${key}] not found, please reformat your input and try again.`;
  }
  for (const key of ['model', 'stream']) {
    if (key in body) return `Malformed input request: #: extraneous key [${key}] is not permitted, please reformat your input and try again.`;
  }
  if (body.anthropic_version !== ANTHROPIC_BEDROCK_VERSION) {
    return `Malformed input request: #/anthropic_version: ${String(body.anthropic_version)} is not a valid enum value, please reformat your input and try again.`;
  }
  return undefined;
}

/** The model name Anthropic reports: `anthropic.claude-3-5-haiku-20241022-v1:0` → `claude-3-5-haiku-20241022`. */
function anthropicModel(model: string): string {
  return model.replace(/^anthropic\./, '').replace(/-v\d+(:\d+)?$/, '');
}

function anthropicUsage(usage: BedrockUsage): Json {
  return { input_tokens: usage.inputTokens, output_tokens: usage.outputTokens, cache_creation_input_tokens: usage.cacheWriteInputTokens, cache_read_input_tokens: usage.cacheReadInputTokens };
}

function invokeAnthropic(ctx: Ctx, model: string, body: Json): void {
  const { usage } = ctx.state.opts;
  const text = lastUserText(body);
  const tool = text.includes(BEDROCK_TOOL);
  const content = tool ? [{ type: 'tool_use', id: anthropicToolId(), name: TOOL_NAME, input: TOOL_INPUT }] : [{ type: 'text', text: replyTo(text) }];
  const answer = {
    id: messageId(), type: 'message', role: 'assistant', model: anthropicModel(model), content,
    stop_reason: tool ? 'tool_use' : 'end_turn', stop_sequence: null, usage: anthropicUsage(usage),
  };
  send(ctx, 200, answer, invocationHeaders(ctx, usage.inputTokens, usage.outputTokens, true));
}

/** Anthropic's stream events, each the base64 `bytes` of a `chunk` event; message_stop carries
 *  `amazon-bedrock-invocationMetrics` as Bedrock adds it. */
function anthropicFrames(ctx: Ctx, model: string, body: Json): Frame[] {
  const { state } = ctx;
  const { usage } = state.opts;
  const text = lastUserText(body);
  const tool = text.includes(BEDROCK_TOOL);
  let firstByte = 0;
  const events: { payload: () => Json; delta: boolean }[] = [];
  const add = (payload: Json | (() => Json), delta = false): void => { events.push({ payload: typeof payload === 'function' ? payload : () => payload, delta }); };
  add(() => {
    firstByte = Date.now() - ctx.started;
    return { type: 'message_start', message: { id: messageId(), type: 'message', role: 'assistant', model: anthropicModel(model), content: [], stop_reason: null, stop_sequence: null, usage: { ...anthropicUsage(usage), output_tokens: 1 } } };
  });
  if (tool) {
    add({ type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: anthropicToolId(), name: TOOL_NAME, input: {} } });
    for (const partial_json of split(JSON.stringify(TOOL_INPUT), state.opts.chunks)) add({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json } }, true);
  } else {
    add({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    for (const piece of split(replyTo(text), state.opts.chunks)) add({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: piece } }, true);
  }
  add({ type: 'content_block_stop', index: 0 });
  add({ type: 'message_delta', delta: { stop_reason: tool ? 'tool_use' : 'end_turn', stop_sequence: null }, usage: { output_tokens: usage.outputTokens } });
  add(() => ({ type: 'message_stop', 'amazon-bedrock-invocationMetrics': invocationMetrics(usage, Date.now() - ctx.started, firstByte) }));
  return events.map(({ payload, delta }) => ({ delta, make: () => chunk(payload()) }));
}

function anthropicTick(n: number): Uint8Array {
  return chunk({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: ` ${n}` } });
}

function invocationMetrics(usage: BedrockUsage, latency: number, firstByte: number): Json {
  const metrics: Json = { inputTokenCount: usage.inputTokens, outputTokenCount: usage.outputTokens, invocationLatency: latency, firstByteLatency: firstByte };
  if (usage.cacheReadInputTokens > 0) metrics.cacheReadInputTokenCount = usage.cacheReadInputTokens;
  if (usage.cacheWriteInputTokens > 0) metrics.cacheWriteInputTokenCount = usage.cacheWriteInputTokens;
  return metrics;
}

/** A `chunk` event: the payload JSON base64-encoded in `bytes`. */
function chunk(payload: Json): Uint8Array {
  return event('chunk', { bytes: Buffer.from(JSON.stringify(payload)).toString('base64') });
}

/** InvokeModel's answer headers: latency and token counts (the cache counts when a chat model used the cache). */
function invocationHeaders(ctx: Ctx, input: number, output: number, chat = false): OutgoingHttpHeaders {
  const { usage } = ctx.state.opts;
  const headers: OutgoingHttpHeaders = {
    'x-amzn-bedrock-invocation-latency': String(Date.now() - ctx.started),
    'x-amzn-bedrock-input-token-count': String(input),
    'x-amzn-bedrock-output-token-count': String(output),
  };
  if (chat && usage.cacheReadInputTokens > 0) headers['x-amzn-bedrock-cache-read-input-token-count'] = String(usage.cacheReadInputTokens);
  if (chat && usage.cacheWriteInputTokens > 0) headers['x-amzn-bedrock-cache-write-input-token-count'] = String(usage.cacheWriteInputTokens);
  return headers;
}

// ---------------------------------------------------------------------------------------------------
// InvokeModel: embeddings (Titan Text Embeddings v1 and v2, Cohere Embed v3)

function checkEmbedding(model: string, body: Json): string | undefined {
  const required = model.startsWith('cohere.') ? ['texts', 'input_type'] : ['inputText'];
  for (const key of required) {
    if (!(key in body)) return `Malformed input request: #: required key [${key}] not found, please reformat your input and try again.`;
  }
  if (model === 'amazon.titan-embed-text-v1') {
    const extra = Object.keys(body).find((k) => k !== 'inputText');
    if (extra !== undefined) return `Malformed input request: #: extraneous key [${extra}] is not permitted, please reformat your input and try again.`;
  }
  if (model === 'amazon.titan-embed-text-v2:0' && body.dimensions !== undefined && ![256, 512, 1024].includes(Number(body.dimensions))) {
    return `Malformed input request: #/dimensions: ${String(body.dimensions)} is not a valid enum value, please reformat your input and try again.`;
  }
  return undefined;
}

function invokeEmbedding(ctx: Ctx, model: string, body: Json): void {
  if (model.startsWith('cohere.')) {
    const texts = Array.isArray(body.texts) ? body.texts.map(String) : [];
    const types = Array.isArray(body.embedding_types) ? body.embedding_types.map(String) : undefined;
    const vectors = texts.map((t) => vector(t, 1024, false));
    const embeddings = types === undefined
      ? vectors
      : Object.fromEntries(types.map((type) => [type, vectors.map((v) => (type === 'float' ? v : v.map((x) => Math.max(-128, Math.min(127, Math.round(x * 127))))))]));
    const tokens = texts.reduce((n, t) => n + tokenCount(t), 0);
    const answer = { id: randomUUID(), embeddings, response_type: types === undefined ? 'embeddings_floats' : 'embeddings_by_type', texts };
    return send(ctx, 200, answer, invocationHeaders(ctx, tokens, 0));
  }
  const text = String(body.inputText);
  const v2 = model === 'amazon.titan-embed-text-v2:0';
  const embedding = vector(text, v2 ? Number(body.dimensions ?? 1024) : 1536, v2 ? body.normalize !== false : false);
  const tokens = tokenCount(text);
  const answer: Json = { embedding, inputTextTokenCount: tokens };
  if (v2) {
    const types = Array.isArray(body.embeddingTypes) ? body.embeddingTypes.map(String) : ['float'];
    answer.embeddingsByType = Object.fromEntries(types.map((type) => [type, type === 'binary' ? embedding.map((x) => (x > 0 ? 1 : 0)) : embedding]));
  }
  send(ctx, 200, answer, invocationHeaders(ctx, tokens, 0));
}

/** A vector derived from the text alone (same text, same vector), unit length when normalized. */
function vector(text: string, dims: number, normalize: boolean): number[] {
  const seed = createHash('sha256').update(text).digest();
  const values = Array.from({ length: dims }, (_, i) => (seed[i % 32]! - 128) / 128 + ((i * 7919) % 101) / 10_000);
  if (!normalize) return values;
  const norm = Math.hypot(...values);
  return values.map((v) => v / norm);
}

function tokenCount(text: string): number {
  return Math.max(1, text.split(/\s+/).filter((w) => w !== '').length);
}

// ---------------------------------------------------------------------------------------------------
// Streams

const codec = new EventStreamCodec(toUtf8, fromUtf8);
const PADDING = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
let paddingTurn = 0;

/** An event message: Bedrock's headers and the JSON payload, with the `p` padding field Bedrock adds. */
function event(type: string, payload: Json): Uint8Array {
  const headers: MessageHeaders = {
    ':event-type': { type: 'string', value: type },
    ':content-type': { type: 'string', value: 'application/json' },
    ':message-type': { type: 'string', value: 'event' },
  };
  const p = PADDING.slice(0, 1 + (paddingTurn++ % PADDING.length));
  return codec.encode({ headers, body: fromUtf8(JSON.stringify({ ...payload, p })) });
}

/** A modeled exception inside the stream (`:message-type: exception`). */
function exception(type: string, payload: Json): Uint8Array {
  const headers: MessageHeaders = {
    ':exception-type': { type: 'string', value: type },
    ':content-type': { type: 'string', value: 'application/json' },
    ':message-type': { type: 'string', value: 'exception' },
  };
  return codec.encode({ headers, body: fromUtf8(JSON.stringify(payload)) });
}

/** Sends the frames, applying the triggers: delays, then after the first delta an exception, a cut
 *  connection, or a delta every 200 ms until the client goes (hold). */
async function runStream(ctx: Ctx, triggers: Triggers, frames: Frame[], tick: (n: number) => Uint8Array, extra: OutgoingHttpHeaders): Promise<void> {
  const { res } = ctx;
  res.writeHead(200, { ...bedrockHeaders(ctx), ...extra, 'content-type': 'application/vnd.amazon.eventstream' });
  ctx.io.flush();
  let sent = 0;
  let deltaSeen = false;
  for (const frame of frames) {
    const wait = sent === 0 ? triggers.slowFirstMs : triggers.slowMs;
    if (wait > 0 && !(await pause(ctx, wait))) return;
    if (!(await write(ctx, frame.make()))) return;
    sent++;
    // `cut_first`: the connection dropped after the stream's opening event, before any content.
    if (triggers.fault === 'cut_first') return ctx.io.cut();
    if (!frame.delta || deltaSeen) continue;
    deltaSeen = true;
    if (triggers.fault === 'stream_error') {
      return void res.end(exception('modelStreamErrorException', { message: STREAM_ERROR, originalStatusCode: 500, originalMessage: 'The model stopped producing output.' }));
    }
    if (triggers.fault === 'stream_throttle') return void res.end(exception('throttlingException', { message: TOO_MANY_TOKENS }));
    if (triggers.fault === 'cut') return ctx.io.cut();
    if (triggers.fault === 'hold') {
      for (let n = 1; ; n++) {
        if (!(await pause(ctx, 200)) || !(await write(ctx, tick(n)))) return;
      }
    }
  }
  res.end();
}

/** Writes and waits until the bytes are handed to the socket; false when the client has gone. */
function write(ctx: Ctx, bytes: Uint8Array): Promise<boolean> {
  const { res, io } = ctx;
  if (io.gone()) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onClose = (): void => resolve(false);
    res.once('close', onClose);
    res.write(bytes, (error) => { res.off('close', onClose); resolve(error == null && !io.gone()); });
  });
}

/** Waits `ms`; false when the client went away meanwhile. */
function pause(ctx: Ctx, ms: number): Promise<boolean> {
  const { res, io } = ctx;
  if (io.gone()) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onClose = (): void => { clearTimeout(timer); resolve(false); };
    const timer = setTimeout(() => { res.off('close', onClose); resolve(!io.gone()); }, ms);
    res.once('close', onClose);
  });
}

// ---------------------------------------------------------------------------------------------------
// Credential sources

/** STS AssumeRoleWithWebIdentity (Query protocol: a form body, an XML answer). Unsigned, as in AWS. */
function sts(ctx: Ctx): void {
  const { state, record } = ctx;
  const form = record.body as Record<string, string>;
  record.operation = form.Action;
  const stsError = (status: number, code: string, message: string): void => {
    const xml = `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">\n  <Error>\n    <Type>Sender</Type>\n    <Code>${code}</Code>\n    <Message>${xml_(message)}</Message>\n  </Error>\n  <RequestId>${ctx.requestId}</RequestId>\n</ErrorResponse>\n`;
    sendText(ctx, status, xml, 'text/xml');
  };
  if (form.Action !== 'AssumeRoleWithWebIdentity') return stsError(400, 'InvalidAction', `Could not find operation ${String(form.Action)} for version ${String(form.Version)}`);
  for (const [key, member] of [['RoleArn', 'roleArn'], ['RoleSessionName', 'roleSessionName'], ['WebIdentityToken', 'webIdentityToken']] as const) {
    if (form[key] === undefined || form[key] === '') return stsError(400, 'ValidationError', `1 validation error detected: Value null at '${member}' failed to satisfy constraint: Member must not be null`);
  }
  const role = /^arn:aws:iam::(\d{12}):role\/(?:.*\/)?([\w+=,.@-]+)$/.exec(form.RoleArn!);
  if (role === null) return stsError(400, 'ValidationError', `${form.RoleArn} is invalid`);
  if (form.WebIdentityToken !== state.opts.webIdentityToken) return stsError(400, 'InvalidIdentityToken', 'Incorrect token audience');
  const lifetime = form.DurationSeconds !== undefined ? Number(form.DurationSeconds) : state.opts.lifetimeSec;
  const creds = issue(state, 'sts', lifetime);
  const session = form.RoleSessionName!;
  const xml = `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <AssumedRoleId>AROA${randomId(17)}:${xml_(session)}</AssumedRoleId>
      <Arn>arn:aws:sts::${role[1]}:assumed-role/${xml_(role[2]!)}/${xml_(session)}</Arn>
    </AssumedRoleUser>
    <Provider>arn:aws:iam::${role[1]}:oidc-provider/oidc.eks.${state.opts.region}.amazonaws.com/id/MOCK</Provider>
    <Credentials>
      <AccessKeyId>${creds.AccessKeyId}</AccessKeyId>
      <SecretAccessKey>${creds.SecretAccessKey}</SecretAccessKey>
      <SessionToken>${creds.Token}</SessionToken>
      <Expiration>${creds.Expiration}</Expiration>
    </Credentials>
    <SubjectFromWebIdentityToken>system:serviceaccount:sluice:gateway</SubjectFromWebIdentityToken>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata>
    <RequestId>${ctx.requestId}</RequestId>
  </ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>
`;
  sendText(ctx, 200, xml, 'text/xml');
}

/** The container credentials endpoint: ECS (`/v2/credentials/<id>`, with RoleArn) and EKS Pod
 *  Identity (`/v1/credentials`, with AccountId); the `Authorization` header must carry the token. */
function container(ctx: Ctx): void {
  const { state, req, record, res } = ctx;
  record.operation = 'ContainerCredentials';
  if (req.headers.authorization !== state.opts.containerToken) {
    const text = JSON.stringify({ Code: 'AccessDeniedException', Message: 'The authorization token is missing or invalid.' });
    res.writeHead(401, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    return void res.end(text);
  }
  const creds = issue(state, 'container', state.opts.lifetimeSec);
  const answer = record.rawPath === '/v1/credentials'
    ? { AccessKeyId: creds.AccessKeyId, SecretAccessKey: creds.SecretAccessKey, Token: creds.Token, AccountId: state.opts.accountId, Expiration: creds.Expiration }
    : { RoleArn: `arn:aws:iam::${state.opts.accountId}:role/sluice-gateway-task`, AccessKeyId: creds.AccessKeyId, SecretAccessKey: creds.SecretAccessKey, Token: creds.Token, Expiration: creds.Expiration };
  const text = JSON.stringify(answer);
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** IMDSv2: a session token from `PUT /latest/api/token`, required on the metadata GETs (401 without). */
function imds(ctx: Ctx): void {
  const { state, req, record } = ctx;
  if (record.rawPath === '/latest/api/token') {
    record.operation = 'ImdsToken';
    if (req.method !== 'PUT') return sendText(ctx, 405, '', 'text/plain');
    const ttl = Number(req.headers['x-aws-ec2-metadata-token-ttl-seconds']);
    if (!Number.isInteger(ttl) || ttl < 1 || ttl > 21600) return sendText(ctx, 400, '', 'text/plain');
    const token = randomBytes(42).toString('base64url');
    state.imdsTokens.set(token, Date.now() + ttl * 1000);
    return sendText(ctx, 200, token, 'text/plain', { 'x-aws-ec2-metadata-token-ttl-seconds': String(ttl) });
  }
  record.operation = 'ImdsCredentials';
  const token = req.headers['x-aws-ec2-metadata-token'];
  const expiry = typeof token === 'string' ? state.imdsTokens.get(token) : undefined;
  if (expiry === undefined || expiry <= Date.now()) return sendText(ctx, 401, '', 'text/plain');
  if (req.method !== 'GET') return sendText(ctx, 405, '', 'text/plain');
  const role = record.rawPath.slice(IMDS_CREDENTIALS.length);
  if (role === '') return sendText(ctx, 200, state.opts.imdsRole, 'text/plain');
  if (role !== state.opts.imdsRole) return sendText(ctx, 404, '<?xml version="1.0" encoding="iso-8859-1"?>\n<title>404 - Not Found</title>\n', 'text/html');
  const creds = issue(state, 'imds', state.opts.lifetimeSec);
  const answer = { Code: 'Success', LastUpdated: isoSeconds(Date.now()), Type: 'AWS-HMAC', AccessKeyId: creds.AccessKeyId, SecretAccessKey: creds.SecretAccessKey, Token: creds.Token, Expiration: creds.Expiration };
  sendText(ctx, 200, JSON.stringify(answer, null, 2), 'text/plain');
}

/** Fresh temporary credentials (a new key id each time), accepted until they expire. */
function issue(state: State, source: 'sts' | 'container' | 'imds', lifetimeSec: number): { AccessKeyId: string; SecretAccessKey: string; Token: string; Expiration: string } {
  const keyId = accessKeyId('ASIA');
  const expiresAt = Date.now() + lifetimeSec * 1000;
  const issued: Issued = { secretAccessKey: secret(), sessionToken: sessionToken(), expiresAt };
  state.issuedKeys.set(keyId, issued);
  state.issued[source]++;
  return { AccessKeyId: keyId, SecretAccessKey: issued.secretAccessKey, Token: issued.sessionToken, Expiration: isoSeconds(expiresAt) };
}

// ---------------------------------------------------------------------------------------------------
// Helpers

function bedrockHeaders(ctx: Ctx): OutgoingHttpHeaders {
  return { 'x-amzn-requestid': ctx.requestId };
}

function send(ctx: Ctx, status: number, body: unknown, extra: OutgoingHttpHeaders = {}): void {
  const text = JSON.stringify(body);
  ctx.res.writeHead(status, { ...bedrockHeaders(ctx), ...extra, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  ctx.res.end(text);
}

/** Bedrock's error: `{"message"}` (plus modeled fields) and `x-amzn-errortype: <code>:<namespace>`. */
function sendError(ctx: Ctx, status: number, code: string, message: string, extra: Json = {}, namespace = 'com.amazon.bedrock'): void {
  send(ctx, status, { message, ...extra }, { 'x-amzn-errortype': `${code}:http://internal.amazon.com/coral/${namespace}/` });
}

function sendText(ctx: Ctx, status: number, text: string, contentType: string, extra: OutgoingHttpHeaders = {}): void {
  ctx.res.writeHead(status, { 'x-amzn-requestid': ctx.requestId, ...extra, 'content-type': contentType, 'content-length': Buffer.byteLength(text) });
  ctx.res.end(text);
}

function parseBody(req: Req, raw: string): unknown {
  if (String(req.headers['content-type']).startsWith('application/x-www-form-urlencoded')) return Object.fromEntries(new URLSearchParams(raw));
  if (raw === '') return undefined;
  try { return JSON.parse(raw); } catch { return undefined; }
}

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function safeDecode(s: string): string {
  try { return decodeURIComponent(s); } catch { return s; }
}

/** The text of the last user message (Converse blocks `{text}`, Anthropic strings or `{type:'text'}`
 *  blocks); without text, that of its tool results. */
function lastUserText(body: Json): string {
  const messages = Array.isArray(body.messages) ? body.messages.filter((m): m is Json => isObject(m) && m.role === 'user') : [];
  const content = messages.at(-1)?.content;
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  const blocks = content.filter(isObject);
  const texts = blocks.filter((b) => typeof b.text === 'string' && (b.type === undefined || b.type === 'text')).map((b) => b.text as string);
  if (texts.length > 0) return texts.join('');
  return blocks.map((b) => (isObject(b.toolResult) ? b.toolResult.content : b.type === 'tool_result' ? b.content : undefined))
    .map((c) => (typeof c === 'string' ? c : Array.isArray(c) ? c.map((p) => (isObject(p) ? (typeof p.text === 'string' ? p.text : JSON.stringify(p.json ?? '')) : '')).join('') : ''))
    .join('');
}

function replyTo(text: string): string {
  return `Bedrock says: ${text}`;
}

/** `text` cut into exactly `n` consecutive pieces. */
function split(text: string, n: number): string[] {
  const size = Math.ceil(text.length / n);
  return Array.from({ length: n }, (_, i) => text.slice(i * size, (i + 1) * size));
}

const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
const ALNUM = 'abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ123456789';

function randomId(length: number, alphabet = BASE32): string {
  return Array.from(randomBytes(length), (b) => alphabet[b % alphabet.length]).join('');
}

function accessKeyId(prefix: 'AKIA' | 'ASIA'): string {
  return prefix + randomId(16);
}

function secret(): string {
  return randomBytes(30).toString('base64');
}

function sessionToken(): string {
  return 'IQoJb3JpZ2luX2VjE' + randomBytes(96).toString('base64');
}

function messageId(): string {
  return 'msg_bdrk_01' + randomId(22, ALNUM);
}

function anthropicToolId(): string {
  return 'toolu_bdrk_01' + randomId(22, ALNUM);
}

function toolUseId(): string {
  return 'tooluse_' + randomBytes(16).toString('base64url').slice(0, 22);
}

function isoSeconds(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function xml_(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}
