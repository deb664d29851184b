// The provider kinds that test/e2e/provider-conformance.test.ts runs one suite of cases against,
// each described once: the mock that plays it, its provider config, the upstream model routed to,
// the usage its mock reports, how a request header scripts each failure class, its tool trigger,
// a slow and a never-ending stream, and the cloud identity it signs with. What a mock cannot do is
// said in words where a header would be, and the suite skips that case for that kind, naming why.
// Also the mocks started together, the environment that gives the gateway its cloud identities,
// and a reader of the two streamed shapes (OpenAI chat chunks, Anthropic Messages events).
import { mkdtempSync, writeFileSync } from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMockUpstream, mockHeader, type MockUpstream } from './mock-upstream.ts';
import { startMockAzureOpenAI, MOCK_AZURE_HEADER, type MockAzureOpenAI } from './mock-azure-openai.ts';
import { startMockBedrock, BEDROCK_TOOL, MOCK_BEDROCK_HEADER, type MockBedrock } from './mock-bedrock.ts';
import { startMockGoogle, GEMINI_TOOL, MOCK_GOOGLE_HEADER, type MockGoogle } from './mock-google.ts';

/** Content deltas of every mock's streamed text answer (mock-upstream's fixed default). */
export const CHUNKS = 5;
/** The tool every tool trigger calls, and its arguments. */
export const TOOL = { name: 'get_weather', input: { city: 'Paris' } } as const;

/** The failure classes the suite scripts on a first target (`cut`: a stream cut before its first token; `first_token`: slower than first_token_timeout_ms). */
export type FailureClass = 'rate_limited' | 'server_error' | 'cut' | 'first_token' | 'context_length';
export const FAILURE_CLASSES: readonly FailureClass[] = ['rate_limited', 'server_error', 'cut', 'first_token', 'context_length'];
/** How long a `first_token` failure keeps its first content back, and the first target's first_token_timeout_ms. */
export const SLOW_FIRST_MS = 2000;
export const FIRST_TOKEN_TIMEOUT_MS = 400;

/** The mocks of every kind, started together. */
export interface Mocks {
  readonly upstream: MockUpstream;
  readonly azure: MockAzureOpenAI;
  readonly bedrock: MockBedrock;
  readonly google: MockGoogle;
  /** The pause between the events of a slow stream (Azure's mock paces every stream by it). */
  readonly paceMs: number;
  close(): Promise<void>;
}

export interface MockSettings {
  /** A slow stream's pause between events; Azure's mock then paces all its streams (it has no per-request trigger). */
  paceMs?: number;
  /** Lifetime of the AWS credentials the Bedrock mock's credential endpoints issue (default 3600 s). */
  awsLifetimeSec?: number;
  /** Lifetime of the tokens the Google mock's metadata server issues (default 3599 s). */
  googleLifetimeSec?: number;
}

/** Token counts each mock reports, set at start so that every kind's are known. */
const USAGE = {
  chat: { prompt: 11, completion: 7 }, // mock-upstream's fixed chat usage
  messages: { prompt: 10, completion: 6 }, // mock-upstream's fixed Messages usage
  azure: { prompt: 13, completion: 8 },
  bedrock: { prompt: 12, completion: 6 },
  google: { prompt: 9, completion: 4 },
} as const;

export async function startMocks(settings: MockSettings = {}): Promise<Mocks> {
  const paceMs = settings.paceMs ?? 0;
  const [upstream, azure, bedrock, google] = await Promise.all([
    startMockUpstream(),
    // A 429 without a wait: Azure's Retry-After would open the target's circuit for the cases after it.
    startMockAzureOpenAI({ chunks: CHUNKS, usage: { ...USAGE.azure, cached: 0 }, chunkDelayMs: paceMs, retryAfterSec: 0 }),
    startMockBedrock({ chunks: CHUNKS, usage: { inputTokens: USAGE.bedrock.prompt, outputTokens: USAGE.bedrock.completion }, credentialLifetimeSec: settings.awsLifetimeSec }),
    startMockGoogle({ chunks: CHUNKS, usage: { prompt: USAGE.google.prompt, candidates: USAGE.google.completion }, tokenLifetimeSec: settings.googleLifetimeSec }),
  ]);
  return {
    upstream, azure, bedrock, google, paceMs,
    close: async () => {
      await Promise.all([upstream.close(), azure.close(), bedrock.close(), google.close()]);
    },
  };
}

/** A model request as the suite reads it from any mock. */
export interface SeenRequest {
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  /** The body as received. */
  readonly raw: string;
  /** The client (the gateway) went away before the answer ended; undefined where the mock does not record it. */
  readonly aborted: boolean | undefined;
  /** The Bedrock mock's SigV4 check ('ok' or why not); undefined elsewhere. */
  readonly auth: string | undefined;
}

/** Where a kind gets its credentials: a key in its config, or the gateway's own cloud identity. */
export type Identity = 'api_key' | 'aws' | 'google';

export interface ProviderKind {
  /** The `describe` label. */
  readonly label: string;
  /** A name for config entries and markers. */
  readonly id: string;
  /** The provider's name in the config. */
  readonly provider: string;
  /** The model the routes send to it. */
  readonly model: string;
  /** The usage its mock reports for a text answer. */
  readonly usage: { readonly prompt: number; readonly completion: number };
  readonly identity: Identity;
  providerConfig(mocks: Mocks): Record<string, unknown>;
  /** The whole text its mock answers to a user text. */
  reply(text: string): string;
  /** Its model requests, as its mock recorded them (oldest first). */
  requests(mocks: Mocks): SeenRequest[];
  /** Request headers that make its mock fail with each class, or why its mock cannot. */
  readonly failures: Readonly<Record<FailureClass, Record<string, string> | string>>;
  /** The outcome its `cut` is counted as (`reset`: the connection closed before the first content). */
  readonly cutOutcome: string;
  /** A user text and headers that make its mock call TOOL (in the upstream's own shape), or why its mock cannot. */
  readonly tool: { readonly text: string; headers(stream: boolean): Record<string, string> } | string;
  /** Headers that make its mock pace a text stream by `mocks.paceMs`. */
  slow(mocks: Mocks): Record<string, string>;
  /** Headers that make its mock stream until the client goes, or why its mock cannot. */
  readonly hold: Record<string, string> | string;
}

const upstreamRequests = (mocks: Mocks, path: string): SeenRequest[] =>
  mocks.upstream.received.filter((r) => r.path.startsWith(path)).map((r) => ({ path: r.path, headers: r.headers as IncomingHttpHeaders, raw: r.body, aborted: r.aborted, auth: undefined }));

const bedrockRequests = (mocks: Mocks, operation: 'Converse' | 'InvokeModel'): SeenRequest[] =>
  mocks.bedrock.requests
    .filter((r) => r.operation?.startsWith(operation))
    .map((r) => ({ path: r.path, headers: r.headers, raw: r.raw, aborted: r.clientGone, auth: r.auth }));

const googleRequests = (mocks: Mocks, test: (path: string) => boolean): SeenRequest[] =>
  mocks.google.requests.filter((r) => test(r.path)).map((r) => ({ path: r.path, headers: r.headers, raw: r.raw, aborted: r.aborted, auth: undefined }));

const bedrockFailures = (header: string): ProviderKind['failures'] => ({
  rate_limited: { [header]: 'throttle' },
  server_error: { [header]: 'server_error' },
  cut: { [header]: 'cut_first' },
  first_token: { [header]: `slow_first:${SLOW_FIRST_MS}` },
  context_length: { [header]: 'context_length' },
});

const googleFailures = (cut: Record<string, string> | string): ProviderKind['failures'] => ({
  rate_limited: { [MOCK_GOOGLE_HEADER]: 'rate_limited' },
  server_error: { [MOCK_GOOGLE_HEADER]: 'server_error' },
  cut,
  first_token: { [MOCK_GOOGLE_HEADER]: `slow_first:${SLOW_FIRST_MS}` },
  context_length: { [MOCK_GOOGLE_HEADER]: 'context_length' },
});

const GEMINI_CUT = { [MOCK_GOOGLE_HEADER]: 'cut_first' };

/** An OpenAI chat answer calling TOOL, as mock-upstream is scripted to send it. */
function chatToolCall(stream: boolean): Record<string, string> {
  const id = 'chatcmpl-conformance-tool';
  const call = { id: 'call_conformance_1', type: 'function', function: { name: TOOL.name, arguments: JSON.stringify(TOOL.input) } };
  if (!stream) {
    return mockHeader({
      body: {
        id, object: 'chat.completion', created: 1_700_000_000, model: 'gpt-4o-mini',
        choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [call] }, logprobs: null, finish_reason: 'tool_calls' }],
        usage: { prompt_tokens: USAGE.chat.prompt, completion_tokens: USAGE.chat.completion, total_tokens: USAGE.chat.prompt + USAGE.chat.completion },
      },
    });
  }
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}): Record<string, unknown> => ({ id, object: 'chat.completion.chunk', created: 1_700_000_000, model: 'gpt-4o-mini', choices, ...extra });
  const args = call.function.arguments;
  return mockHeader({
    sse: [
      chunk([{ index: 0, delta: { role: 'assistant', content: null, tool_calls: [{ index: 0, id: call.id, type: 'function', function: { name: TOOL.name, arguments: '' } }] }, finish_reason: null }]),
      chunk([{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: args.slice(0, 8) } }] }, finish_reason: null }]),
      chunk([{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: args.slice(8) } }] }, finish_reason: null }]),
      chunk([{ index: 0, delta: {}, finish_reason: 'tool_calls' }]),
      chunk([], { usage: { prompt_tokens: USAGE.chat.prompt, completion_tokens: USAGE.chat.completion, total_tokens: USAGE.chat.prompt + USAGE.chat.completion } }),
    ],
  });
}

/** An Anthropic Messages answer calling TOOL, as mock-upstream is scripted to send it. */
function messagesToolUse(stream: boolean): Record<string, string> {
  const message = { id: 'msg_conformance_tool', type: 'message', role: 'assistant', model: 'claude-haiku-4-5' };
  const block = { type: 'tool_use', id: 'toolu_conformance_1', name: TOOL.name };
  const usage = { input_tokens: USAGE.messages.prompt, output_tokens: USAGE.messages.completion };
  if (!stream) return mockHeader({ body: { ...message, content: [{ ...block, input: TOOL.input }], stop_reason: 'tool_use', stop_sequence: null, usage } });
  const json = JSON.stringify(TOOL.input);
  const event = (type: string, data: Record<string, unknown>): { event: string; data: Record<string, unknown> } => ({ event: type, data: { type, ...data } });
  return mockHeader({
    sseDone: false,
    sse: [
      event('message_start', { message: { ...message, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } } }),
      event('content_block_start', { index: 0, content_block: { ...block, input: {} } }),
      event('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: json.slice(0, 8) } }),
      event('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: json.slice(8) } }),
      event('content_block_stop', { index: 0 }),
      event('message_delta', { delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: usage.output_tokens } }),
      event('message_stop', {}),
    ],
  });
}

const none = (): Record<string, string> => ({});
/** A Gemini stream is its content frames alone (no preamble, no end frame): twice the pace lasts as long as the others. */
const geminiSlow = (m: Mocks): Record<string, string> => ({ [MOCK_GOOGLE_HEADER]: `slow:${m.paceMs * 2}` });

/** The config's `prices` (dollars per million tokens) of the kinds' models; kinds that route to the same model name share its price. */
export const PRICES: Readonly<Record<string, { readonly input: number; readonly output: number }>> = {
  'gpt-4o-mini': { input: 2, output: 7 },
  'claude-haiku-4-5': { input: 1, output: 5 },
  'meta.llama3-1-8b-instruct-v1:0': { input: 3, output: 9 },
  'anthropic.claude-3-5-haiku-20241022-v1:0': { input: 4, output: 20 },
  'gemini-2.0-flash': { input: 5, output: 11 },
  'claude-3-5-haiku@20241022': { input: 6, output: 30 },
};

export const KINDS: readonly ProviderKind[] = [
  {
    label: 'openai', id: 'openai', provider: 'openai', model: 'gpt-4o-mini', usage: USAGE.chat, identity: 'api_key',
    providerConfig: (m) => ({ name: 'openai', type: 'openai', base_url: `${m.upstream.url}/v1`, api_key: 'sk-provider-openai-conformance' }),
    reply: (text) => `mock reply to: ${text}`,
    requests: (m) => upstreamRequests(m, '/v1/chat/completions'),
    failures: {
      rate_limited: mockHeader({ status: 429 }),
      server_error: mockHeader({ status: 500 }),
      cut: mockHeader({ disconnectAfterEvents: 0 }),
      first_token: mockHeader({ stallAfterEvents: 0 }),
      context_length: mockHeader({
        status: 400,
        body: { error: { message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130017 tokens. Please reduce the length of the messages.", type: 'invalid_request_error', param: 'messages', code: 'context_length_exceeded' } },
      }),
    },
    cutOutcome: 'reset',
    tool: { text: 'what is the weather?', headers: chatToolCall },
    slow: (m) => mockHeader({ sseIntervalMs: m.paceMs }),
    // Two content chunks, then silence until the client goes.
    hold: mockHeader({ stallAfterEvents: 2 }),
  },
  {
    label: 'anthropic', id: 'anthropic', provider: 'anthropic', model: 'claude-haiku-4-5', usage: USAGE.messages, identity: 'api_key',
    providerConfig: (m) => ({ name: 'anthropic', type: 'anthropic', base_url: m.upstream.url, api_key: 'sk-ant-provider-conformance' }),
    reply: () => 'mock reply',
    requests: (m) => upstreamRequests(m, '/v1/messages'),
    failures: {
      rate_limited: mockHeader({ status: 429 }),
      server_error: mockHeader({ status: 529 }),
      // After message_start, before any content.
      cut: mockHeader({ disconnectAfterEvents: 1 }),
      first_token: mockHeader({ stallAfterEvents: 1 }),
      context_length: mockHeader({ status: 400, body: { type: 'error', error: { type: 'invalid_request_error', message: 'prompt is too long: 208310 tokens > 200000 maximum' } } }),
    },
    cutOutcome: 'reset',
    tool: { text: 'what is the weather?', headers: messagesToolUse },
    slow: (m) => mockHeader({ sseIntervalMs: m.paceMs }),
    // message_start, content_block_start, ping and a first text delta, then silence until the client goes.
    hold: mockHeader({ stallAfterEvents: 4 }),
  },
  {
    label: 'azure_openai', id: 'azure', provider: 'azure', model: 'gpt-4o-mini', usage: USAGE.azure, identity: 'api_key',
    providerConfig: (m) => ({ name: 'azure', type: 'azure_openai', base_url: m.azure.url, api_key: m.azure.apiKey, api_version: '2024-10-21' }),
    reply: (text) => `azure reply to: ${text}`,
    requests: (m) => m.azure.requests.filter((r) => r.path.startsWith('/openai/')).map((r) => ({ path: r.path, headers: r.headers, raw: r.raw, aborted: r.aborted, auth: undefined })),
    failures: {
      rate_limited: { [MOCK_AZURE_HEADER]: 'rate_limited' },
      server_error: { [MOCK_AZURE_HEADER]: 'server_error' },
      cut: { [MOCK_AZURE_HEADER]: 'cut_first' },
      first_token: { [MOCK_AZURE_HEADER]: `slow_first:${SLOW_FIRST_MS}` },
      context_length: { [MOCK_AZURE_HEADER]: 'context_length' },
    },
    cutOutcome: 'reset',
    tool: 'mock-azure-openai has no tool trigger',
    slow: (m) => {
      if (m.paceMs <= 0) throw new Error('a slow Azure stream needs its mock started with paceMs');
      return {};
    },
    hold: { [MOCK_AZURE_HEADER]: 'hold' },
  },
  {
    label: 'bedrock (converse)', id: 'bedrock-converse', provider: 'bedrock', model: 'meta.llama3-1-8b-instruct-v1:0', usage: USAGE.bedrock, identity: 'aws',
    providerConfig: (m) => ({ name: 'bedrock', type: 'bedrock', api: 'converse', region: m.bedrock.region, base_url: m.bedrock.url }),
    reply: (text) => `Bedrock says: ${text}`,
    requests: (m) => bedrockRequests(m, 'Converse'),
    failures: bedrockFailures(MOCK_BEDROCK_HEADER),
    cutOutcome: 'reset',
    tool: { text: `${BEDROCK_TOOL} what is the weather?`, headers: none },
    slow: (m) => ({ [MOCK_BEDROCK_HEADER]: `slow:${m.paceMs}` }),
    hold: { [MOCK_BEDROCK_HEADER]: 'hold' },
  },
  {
    label: 'bedrock (anthropic)', id: 'bedrock-anthropic', provider: 'bedrock-claude', model: 'anthropic.claude-3-5-haiku-20241022-v1:0', usage: USAGE.bedrock, identity: 'aws',
    providerConfig: (m) => ({ name: 'bedrock-claude', type: 'bedrock', api: 'anthropic', region: m.bedrock.region, base_url: m.bedrock.url }),
    reply: (text) => `Bedrock says: ${text}`,
    requests: (m) => bedrockRequests(m, 'InvokeModel'),
    failures: bedrockFailures(MOCK_BEDROCK_HEADER),
    cutOutcome: 'reset',
    tool: { text: `${BEDROCK_TOOL} what is the weather?`, headers: none },
    slow: (m) => ({ [MOCK_BEDROCK_HEADER]: `slow:${m.paceMs}` }),
    hold: { [MOCK_BEDROCK_HEADER]: 'hold' },
  },
  {
    label: 'gemini', id: 'gemini', provider: 'gemini', model: 'gemini-2.0-flash', usage: USAGE.google, identity: 'api_key',
    providerConfig: (m) => ({ name: 'gemini', type: 'gemini', base_url: m.google.url, api_key: m.google.apiKey }),
    reply: (text) => `Gemini says: ${text}`,
    requests: (m) => googleRequests(m, (p) => p.startsWith('/v1beta/models/')),
    failures: googleFailures(GEMINI_CUT),
    cutOutcome: 'reset',
    tool: { text: `${GEMINI_TOOL} what is the weather?`, headers: none },
    slow: geminiSlow,
    hold: { [MOCK_GOOGLE_HEADER]: 'hold' },
  },
  {
    label: 'vertex (gemini)', id: 'vertex-gemini', provider: 'vertex', model: 'gemini-2.0-flash', usage: USAGE.google, identity: 'google',
    providerConfig: (m) => ({ name: 'vertex', type: 'vertex', api: 'gemini', project: m.google.project, location: m.google.location, base_url: m.google.url }),
    reply: (text) => `Gemini says: ${text}`,
    requests: (m) => googleRequests(m, (p) => p.includes('/publishers/google/')),
    failures: googleFailures(GEMINI_CUT),
    cutOutcome: 'reset',
    tool: { text: `${GEMINI_TOOL} what is the weather?`, headers: none },
    slow: geminiSlow,
    hold: { [MOCK_GOOGLE_HEADER]: 'hold' },
  },
  {
    label: 'vertex (anthropic)', id: 'vertex-anthropic', provider: 'vertex-claude', model: 'claude-3-5-haiku@20241022', usage: USAGE.google, identity: 'google',
    providerConfig: (m) => ({ name: 'vertex-claude', type: 'vertex', api: 'anthropic', project: m.google.project, location: m.google.location, base_url: m.google.url }),
    reply: (text) => `Claude says: ${text}`,
    requests: (m) => googleRequests(m, (p) => p.includes('/publishers/anthropic/')),
    // Its first frame is message_start: the cut comes before any content.
    failures: googleFailures({ [MOCK_GOOGLE_HEADER]: 'cut' }),
    cutOutcome: 'reset',
    tool: { text: `${GEMINI_TOOL} what is the weather?`, headers: none },
    slow: (m) => ({ [MOCK_GOOGLE_HEADER]: `slow:${m.paceMs}` }),
    hold: { [MOCK_GOOGLE_HEADER]: 'hold' },
  },
];

/** The kind a route falls back to: always of another provider type. */
export function fallbackOf(kind: ProviderKind): ProviderKind {
  return KINDS.find((k) => k.id === (kind.id === 'openai' ? 'anthropic' : 'openai'))!;
}

/** How the gateway finds its AWS identity: the mock's long-lived keys, its container endpoint, or that endpoint with a wrong token. */
export type AwsIdentity = 'keys' | 'container' | { containerToken: string };
/** How the gateway finds its Google identity: the mock's metadata server, or an address where nothing answers. */
export type GoogleIdentity = 'metadata' | { deadMetadataHost: string };

/**
 * The gateway's environment for its cloud identities, with nothing else the AWS and Google
 * libraries would find on this machine (shared AWS files, instance metadata, an ADC file, gcloud).
 */
export function cloudEnv(mocks: Mocks, aws: AwsIdentity, google: GoogleIdentity): Record<string, string | undefined> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-conformance-'));
  writeFileSync(join(dir, 'aws-empty'), '');
  const env: Record<string, string | undefined> = {
    AWS_CONFIG_FILE: join(dir, 'aws-empty'),
    AWS_SHARED_CREDENTIALS_FILE: join(dir, 'aws-empty'),
    AWS_EC2_METADATA_DISABLED: 'true',
    AWS_ACCESS_KEY_ID: undefined,
    AWS_SECRET_ACCESS_KEY: undefined,
    AWS_SESSION_TOKEN: undefined,
    AWS_PROFILE: undefined,
    AWS_WEB_IDENTITY_TOKEN_FILE: undefined,
    AWS_CONTAINER_CREDENTIALS_FULL_URI: undefined,
    AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: undefined,
    AWS_CONTAINER_AUTHORIZATION_TOKEN: undefined,
    GOOGLE_APPLICATION_CREDENTIALS: undefined,
    // Known, so that the auth library asks no gcloud for it (which costs seconds).
    GOOGLE_CLOUD_PROJECT: mocks.google.project,
    CLOUDSDK_CONFIG: dir,
    GCE_METADATA_HOST: typeof google === 'string' ? mocks.google.metadataHost : google.deadMetadataHost,
  };
  if (aws === 'keys') {
    env.AWS_ACCESS_KEY_ID = mocks.bedrock.credentials.accessKeyId;
    env.AWS_SECRET_ACCESS_KEY = mocks.bedrock.credentials.secretAccessKey;
  } else {
    env.AWS_CONTAINER_CREDENTIALS_FULL_URI = mocks.bedrock.containerUrl;
    env.AWS_CONTAINER_AUTHORIZATION_TOKEN = aws === 'container' ? mocks.bedrock.containerToken : aws.containerToken;
  }
  return env;
}

/** host:port on 127.0.0.1 where nothing listens (a port just freed). */
export async function deadHost(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `127.0.0.1:${port}`;
}

/** The client APIs the suite speaks: OpenAI chat completions and Anthropic Messages. */
export type ClientApi = 'chat' | 'messages';

/** A streamed answer, read. */
export interface StreamSummary {
  /** The text of every content delta, joined. */
  readonly text: string;
  /** How many content deltas carried text. */
  readonly deltas: number;
  /** The API's end event came: `data: [DONE]`, `message_stop`. */
  readonly ended: boolean;
  /** finish_reason / stop_reason. */
  readonly stop: string | undefined;
  readonly usage: { prompt?: number; completion?: number };
  /** The data of an error event (chat: `event: error`, or a data line with `error`; Messages: `type: "error"`). */
  readonly error: Record<string, unknown> | undefined;
}

/** The events of an SSE body: their `event:` and their `data:` joined. */
function sseEvents(body: string): { event: string | undefined; data: string }[] {
  return body.split(/\r?\n\r?\n/).flatMap((block) => {
    const lines = block.split(/\r?\n/);
    const data = lines.filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
    const event = lines.find((l) => l.startsWith('event:'))?.slice(6).trim();
    return data === '' && event === undefined ? [] : [{ event, data }];
  });
}

function parse(data: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(data);
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

interface ChatChunk {
  choices?: { delta?: { content?: string | null }; finish_reason?: string | null }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
  error?: Record<string, unknown>;
}
interface MessagesEvent {
  type?: string;
  delta?: { type?: string; text?: string; stop_reason?: string | null };
  message?: { usage?: { input_tokens?: number } };
  usage?: { output_tokens?: number };
  error?: Record<string, unknown>;
}

/** Reads a streamed answer of either API. */
export function summarize(api: ClientApi, body: string): StreamSummary {
  let text = '';
  let deltas = 0;
  let ended = false;
  let stop: string | undefined;
  const usage: { prompt?: number; completion?: number } = {};
  let error: Record<string, unknown> | undefined;
  for (const { event, data } of sseEvents(body)) {
    if (api === 'chat') {
      if (data === '[DONE]') {
        ended = true;
        continue;
      }
      const json = parse(data);
      const chunk = json as ChatChunk | undefined;
      if (event === 'error' || chunk?.error !== undefined) {
        error = json ?? { raw: data };
        continue;
      }
      const choice = chunk?.choices?.[0];
      const content = choice?.delta?.content;
      if (typeof content === 'string' && content !== '') {
        text += content;
        deltas++;
      }
      if (choice?.finish_reason) stop = choice.finish_reason;
      if (chunk?.usage) {
        usage.prompt = chunk.usage.prompt_tokens;
        usage.completion = chunk.usage.completion_tokens;
      }
    } else {
      const json = parse(data);
      const message = json as MessagesEvent | undefined;
      if (event === 'error' || message?.type === 'error') {
        error = json ?? { raw: data };
        continue;
      }
      if (message?.type === 'content_block_delta' && message.delta?.type === 'text_delta' && message.delta.text) {
        text += message.delta.text;
        deltas++;
      }
      if (message?.type === 'message_start') usage.prompt = message.message?.usage?.input_tokens;
      if (message?.type === 'message_delta') {
        stop = message.delta?.stop_reason ?? stop;
        usage.completion = message.usage?.output_tokens;
      }
      if (message?.type === 'message_stop') ended = true;
    }
  }
  return { text, deltas, ended, stop, usage, error };
}

/** A streamed request in progress. */
export interface OpenStream {
  readonly status: number;
  /** Resolves when the first content delta has been read. */
  readonly firstContent: Promise<void>;
  /** The whole body, once it ended (or broke: then what was read). */
  readonly body: Promise<string>;
  /** The body has ended. */
  readonly finished: () => boolean;
  /** Leaves: aborts the request. */
  abort(): void;
}

/** POSTs a streamed request of `api` to the gateway and reads its answer as it comes. */
export async function openStream(
  proxyUrl: string,
  api: ClientApi,
  request: { key: string; model: string; text: string; headers?: Record<string, string> },
): Promise<OpenStream> {
  const controller = new AbortController();
  const path = api === 'chat' ? '/v1/chat/completions' : '/v1/messages';
  const body = api === 'chat'
    ? { model: request.model, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: request.text }] }
    : { model: request.model, stream: true, max_tokens: 256, messages: [{ role: 'user', content: request.text }] };
  const auth: Record<string, string> = api === 'chat' ? { authorization: `Bearer ${request.key}` } : { 'x-api-key': request.key, 'anthropic-version': '2023-06-01' };
  const res = await fetch(`${proxyUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth, ...request.headers },
    body: JSON.stringify(body),
    signal: controller.signal,
  });
  let text = '';
  let done = false;
  let sawContent: () => void = () => undefined;
  const firstContent = new Promise<void>((resolve) => (sawContent = resolve));
  const content = api === 'chat' ? /"content":"[^"]/ : /"text_delta","text":"[^"]/;
  const read = (async () => {
    const decoder = new TextDecoder();
    try {
      for await (const chunk of res.body!) {
        text += decoder.decode(chunk as Uint8Array, { stream: true });
        if (content.test(text)) sawContent();
      }
    } catch {
      // Aborted or broken: what was read is the answer.
    }
    done = true;
    return text;
  })();
  return { status: res.status, firstContent, body: read, finished: () => done, abort: () => controller.abort() };
}
