// The Bedrock Runtime mock against AWS's own SDK, as installed and unchanged:
// `@aws-sdk/client-bedrock-runtime` (Converse, ConverseStream, InvokeModel,
// InvokeModelWithResponseStream) signing with SigV4, over its default HTTP/2 handler and over
// HTTP/1.1, and the credential providers of `@aws-sdk/credential-providers` (web identity through
// STS, the container endpoint, IMDSv2). What the SDK sends is checked as the mock recorded it (path,
// decoded model id, signing key); what the mock answers must parse into the SDK's own results, event
// unions and exception classes, so the mock cannot drift into a dialect the real clients would not speak.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  AccessDeniedException, BedrockRuntimeClient, BedrockRuntimeServiceException, ConverseCommand, ConverseStreamCommand, CountTokensCommand,
  InternalServerException, InvokeModelCommand, InvokeModelWithResponseStreamCommand, ModelErrorException,
  ModelNotReadyException, ModelStreamErrorException, ModelTimeoutException, ResourceNotFoundException,
  ServiceUnavailableException, ThrottlingException, ValidationException,
} from '@aws-sdk/client-bedrock-runtime';
import type { ContentBlock, ConverseStreamOutput, Message, ResponseStream } from '@aws-sdk/client-bedrock-runtime';
import { fromContainerMetadata, fromHttp, fromInstanceMetadata, fromTokenFile, fromWebToken } from '@aws-sdk/credential-providers';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { Hash } from '@smithy/core/serde';
import { SignatureV4 } from '@smithy/signature-v4';
import { startMockBedrock, type AwsCredentials, type BedrockRequest, type MockBedrock } from '../support/mock-bedrock.ts';

const HAIKU = 'anthropic.claude-3-5-haiku-20241022-v1:0';
const LLAMA = 'meta.llama3-1-8b-instruct-v1:0';
const PROFILE = 'us.anthropic.claude-3-5-haiku-20241022-v1:0';
const BAD_SIGNATURE = 'The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.';

let mock: MockBedrock;
const clients: BedrockRuntimeClient[] = [];

before(async () => {
  mock = await startMockBedrock();
});

after(async () => {
  for (const client of clients) client.destroy();
  await mock?.close();
});

interface ClientOptions {
  credentials?: BedrockRuntimeClient['config']['credentials'] | AwsCredentials;
  /** The `x-mock-bedrock` header, added before signing (so it is signed, as a client's header would be). */
  trigger?: string;
  region?: string;
  http1?: boolean;
  target?: MockBedrock;
}

/** A client of the mock with one attempt; `headers()` gives the last answer's HTTP headers. */
function bedrock(options: ClientOptions = {}): BedrockRuntimeClient & { headers(): Record<string, string> } {
  const target = options.target ?? mock;
  const client = new BedrockRuntimeClient({
    endpoint: target.url, region: options.region ?? target.region, credentials: options.credentials ?? target.credentials, maxAttempts: 1,
    ...(options.http1 === true ? { requestHandler: new NodeHttpHandler() } : {}),
  });
  clients.push(client);
  const trigger = options.trigger;
  if (trigger !== undefined) {
    client.middlewareStack.add((next) => async (args) => {
      (args.request as { headers: Record<string, string> }).headers['x-mock-bedrock'] = trigger;
      return next(args);
    }, { step: 'build', name: 'mockBedrockTrigger' });
  }
  let headers: Record<string, string> = {};
  client.middlewareStack.add((next) => async (args) => {
    try {
      const out = await next(args);
      headers = (out.response as { headers: Record<string, string> }).headers;
      return out;
    } catch (error) {
      headers = (error as { $response?: { headers: Record<string, string> } }).$response?.headers ?? {};
      throw error;
    }
  }, { step: 'deserialize', name: 'captureHeaders' });
  return Object.assign(client, { headers: () => headers });
}

const ask = (text: string, modelId = HAIKU) => ({ modelId, messages: [{ role: 'user' as const, content: [{ text }] }] });
const weatherTool = {
  tools: [{ toolSpec: { name: 'get_weather', description: 'The weather in a city', inputSchema: { json: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } } }],
};
const anthropicBody = (text: string, extra: Record<string, unknown> = {}) => JSON.stringify({
  anthropic_version: 'bedrock-2023-05-31', max_tokens: 256, messages: [{ role: 'user', content: text }], ...extra,
});

/** The only request recorded since the last reset. */
function only(): BedrockRequest {
  assert.equal(mock.requests.length, 1, mock.requests.map((r) => `${r.method} ${r.rawPath}`).join(', '));
  return mock.requests[0]!;
}

/** Every event of a ConverseStream, as the SDK's union members (`{ messageStart: {...} }`...). */
async function collect(stream: AsyncIterable<ConverseStreamOutput> | undefined): Promise<ConverseStreamOutput[]> {
  const events: ConverseStreamOutput[] = [];
  for await (const event of stream ?? []) events.push(event);
  return events;
}

/** The Anthropic events inside an InvokeModelWithResponseStream body (each chunk's bytes is one JSON event). */
async function anthropicEvents(body: AsyncIterable<ResponseStream> | undefined): Promise<Record<string, unknown>[]> {
  const events: Record<string, unknown>[] = [];
  for await (const part of body ?? []) {
    assert.ok(part.chunk?.bytes instanceof Uint8Array, `not a chunk: ${JSON.stringify(Object.keys(part))}`);
    events.push(JSON.parse(new TextDecoder().decode(part.chunk.bytes)) as Record<string, unknown>);
  }
  return events;
}

const kinds = (events: ConverseStreamOutput[]): string[] => events.map((e) => Object.entries(e).find(([, v]) => v !== undefined)![0]);
const decode = (bytes: Uint8Array | undefined): Record<string, unknown> => JSON.parse(new TextDecoder().decode(bytes)) as Record<string, unknown>;

/** Runs `fn` with these environment variables (undefined: unset), then restores them. */
async function withEnv<T>(vars: Record<string, string | undefined>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const apply = (values: Record<string, string | undefined>): void => {
    for (const [k, v] of Object.entries(values)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  apply(vars);
  try {
    return await fn();
  } finally {
    apply(saved);
  }
}

describe('Converse', () => {
  test('a text answer with usage and metrics; the request is SigV4-signed for bedrock in the region', async () => {
    mock.reset();
    const client = bedrock();
    const answer = await client.send(new ConverseCommand({ ...ask('ping'), inferenceConfig: { maxTokens: 64 } }));
    assert.deepEqual(answer.output?.message, { role: 'assistant', content: [{ text: 'Bedrock says: ping' }] } satisfies Message);
    assert.equal(answer.stopReason, 'end_turn');
    assert.deepEqual(answer.usage, { inputTokens: 11, outputTokens: 5, totalTokens: 16, cacheReadInputTokens: 0, cacheWriteInputTokens: 0 });
    assert.equal(typeof answer.metrics?.latencyMs, 'number');
    assert.match(answer.$metadata.requestId ?? '', /^[0-9a-f-]{36}$/);
    assert.equal(client.headers()['x-amzn-requestid'], answer.$metadata.requestId);
    assert.equal(client.headers()['content-type'], 'application/json');
    const seen = only();
    assert.equal(seen.method, 'POST');
    assert.equal(seen.httpVersion, '2.0'); // the SDK's default handler
    assert.equal(seen.rawPath, '/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse');
    assert.equal(seen.path, `/model/${HAIKU}/converse`);
    assert.equal(seen.operation, 'Converse');
    assert.equal(seen.modelId, HAIKU);
    assert.equal(seen.auth, 'ok');
    assert.equal(seen.accessKeyId, mock.credentials.accessKeyId);
    assert.match(String(seen.headers.authorization), new RegExp(`^AWS4-HMAC-SHA256 Credential=${mock.credentials.accessKeyId}/\\d{8}/us-east-1/bedrock/aws4_request, SignedHeaders=:authority;[a-z0-9;-]+, Signature=[0-9a-f]{64}$`));
    assert.equal(seen.headers['x-amz-security-token'], undefined);
    assert.deepEqual((seen.body as { inferenceConfig: unknown }).inferenceConfig, { maxTokens: 64 });
  });

  test('over HTTP/1.1 too (what the gateway speaks)', async () => {
    mock.reset();
    const answer = await bedrock({ http1: true }).send(new ConverseCommand(ask('one point one', LLAMA)));
    assert.deepEqual(answer.output?.message?.content, [{ text: 'Bedrock says: one point one' }]);
    assert.equal(only().httpVersion, '1.1');
    assert.equal(only().auth, 'ok');
  });

  test('credentials with a session token: x-amz-security-token is sent and must match', async () => {
    mock.reset();
    await bedrock({ credentials: mock.sessionCredentials }).send(new ConverseCommand(ask('with a token')));
    assert.equal(only().headers['x-amz-security-token'], mock.sessionCredentials.sessionToken);
    assert.equal(only().accessKeyId, mock.sessionCredentials.accessKeyId);
    const { sessionToken: _, ...withoutToken } = mock.sessionCredentials;
    await assert.rejects(bedrock({ credentials: withoutToken }).send(new ConverseCommand(ask('x'))), (error: unknown) => {
      assert.ok(error instanceof BedrockRuntimeServiceException, `got ${String(error)}`);
      assert.equal(error.name, 'UnrecognizedClientException');
      assert.equal(error.$metadata.httpStatusCode, 403);
      assert.equal(error.message, 'The security token included in the request is invalid.');
      return true;
    });
  });

  test('BEDROCK_TOOL: a toolUse of get_weather with {"city":"Paris"}, stopReason tool_use', async () => {
    const answer = await bedrock().send(new ConverseCommand({ ...ask('weather please BEDROCK_TOOL'), toolConfig: weatherTool }));
    assert.equal(answer.stopReason, 'tool_use');
    const content = answer.output?.message?.content ?? [];
    assert.equal(content.length, 1);
    const toolUse = (content[0] as ContentBlock.ToolUseMember).toolUse;
    assert.equal(toolUse.name, 'get_weather');
    assert.deepEqual(toolUse.input, { city: 'Paris' });
    assert.match(toolUse.toolUseId ?? '', /^tooluse_[\w-]{22}$/);
  });

  test('the usage comes from the options, cache tokens included in the total', async () => {
    const cached = await startMockBedrock({ usage: { inputTokens: 3, outputTokens: 4, cacheReadInputTokens: 100, cacheWriteInputTokens: 20 } });
    try {
      const answer = await bedrock({ target: cached }).send(new ConverseCommand(ask('cached')));
      assert.deepEqual(answer.usage, { inputTokens: 3, outputTokens: 4, totalTokens: 127, cacheReadInputTokens: 100, cacheWriteInputTokens: 20 });
    } finally {
      await cached.close();
    }
  });
});

describe('ConverseStream', () => {
  test('messageStart, text deltas, contentBlockStop, messageStop, metadata with usage', async () => {
    mock.reset();
    const response = await bedrock().send(new ConverseStreamCommand(ask('stream please')));
    const events = await collect(response.stream);
    assert.deepEqual(kinds(events), ['messageStart', 'contentBlockDelta', 'contentBlockDelta', 'contentBlockDelta', 'contentBlockStop', 'messageStop', 'metadata']);
    assert.deepEqual(events[0]!.messageStart, { role: 'assistant' });
    const text = events.map((e) => e.contentBlockDelta?.delta?.text ?? '').join('');
    assert.equal(text, 'Bedrock says: stream please');
    assert.ok(events.filter((e) => e.contentBlockDelta).every((e) => e.contentBlockDelta!.contentBlockIndex === 0));
    assert.deepEqual(events[4]!.contentBlockStop, { contentBlockIndex: 0 });
    assert.deepEqual(events[5]!.messageStop, { stopReason: 'end_turn' });
    const metadata = events[6]!.metadata!;
    assert.deepEqual(metadata.usage, { inputTokens: 11, outputTokens: 5, totalTokens: 16, cacheReadInputTokens: 0, cacheWriteInputTokens: 0 });
    assert.equal(typeof metadata.metrics?.latencyMs, 'number');
    assert.equal(only().operation, 'ConverseStream');
    assert.equal(only().rawPath, '/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream');
  });

  test('over HTTP/1.1, with chunks from the options', async () => {
    const five = await startMockBedrock({ chunks: 5 });
    try {
      const response = await bedrock({ target: five, http1: true }).send(new ConverseStreamCommand(ask('five pieces')));
      const events = await collect(response.stream);
      assert.equal(events.filter((e) => e.contentBlockDelta).length, 5);
      assert.equal(events.map((e) => e.contentBlockDelta?.delta?.text ?? '').join(''), 'Bedrock says: five pieces');
      assert.equal(five.requests[0]!.httpVersion, '1.1');
    } finally {
      await five.close();
    }
  });

  test('tool use: contentBlockStart with the toolUse, input fragments that join into the JSON input', async () => {
    const response = await bedrock().send(new ConverseStreamCommand({ ...ask('BEDROCK_TOOL'), toolConfig: weatherTool }));
    const events = await collect(response.stream);
    assert.deepEqual(kinds(events), ['messageStart', 'contentBlockStart', 'contentBlockDelta', 'contentBlockDelta', 'contentBlockDelta', 'contentBlockStop', 'messageStop', 'metadata']);
    const start = events[1]!.contentBlockStart!;
    assert.equal(start.contentBlockIndex, 0);
    assert.equal(start.start?.toolUse?.name, 'get_weather');
    assert.match(start.start?.toolUse?.toolUseId ?? '', /^tooluse_/);
    const input = events.map((e) => e.contentBlockDelta?.delta?.toolUse?.input ?? '').join('');
    assert.deepEqual(JSON.parse(input), { city: 'Paris' });
    assert.equal(events[6]!.messageStop?.stopReason, 'tool_use');
  });

  test('a mid-stream modelStreamErrorException after the first delta: the SDK throws ModelStreamErrorException', async () => {
    const response = await bedrock({ trigger: 'stream_error' }).send(new ConverseStreamCommand(ask('break')));
    const seen: string[] = [];
    await assert.rejects(async () => { for await (const event of response.stream!) seen.push(...kinds([event])); }, (error: unknown) => {
      assert.ok(error instanceof ModelStreamErrorException, `got ${String(error)}`);
      assert.equal(error.originalStatusCode, 500);
      assert.equal(error.originalMessage, 'The model stopped producing output.');
      assert.equal(error.message, 'An error occurred while streaming the response. Retry your request.');
      return true;
    });
    assert.deepEqual(seen, ['messageStart', 'contentBlockDelta']);
  });

  test('a mid-stream throttlingException: the SDK throws ThrottlingException', async () => {
    const response = await bedrock({ trigger: 'stream_throttle' }).send(new ConverseStreamCommand(ask('throttle me later')));
    await assert.rejects(collect(response.stream), (error: unknown) => {
      assert.ok(error instanceof ThrottlingException, `got ${String(error)}`);
      assert.equal(error.message, 'Too many tokens, please wait before trying again.');
      return true;
    });
  });
});

describe('InvokeModel', () => {
  test('Anthropic Messages: the answer in Anthropic JSON, token counts in the headers', async () => {
    mock.reset();
    const client = bedrock();
    const answer = await client.send(new InvokeModelCommand({ modelId: HAIKU, contentType: 'application/json', accept: 'application/json', body: anthropicBody('invoke me') }));
    assert.equal(answer.contentType, 'application/json');
    const message = decode(answer.body);
    assert.match(String(message.id), /^msg_bdrk_01/);
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.equal(message.model, 'claude-3-5-haiku-20241022');
    assert.deepEqual(message.content, [{ type: 'text', text: 'Bedrock says: invoke me' }]);
    assert.equal(message.stop_reason, 'end_turn');
    assert.equal(message.stop_sequence, null);
    assert.deepEqual(message.usage, { input_tokens: 11, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });
    assert.equal(client.headers()['x-amzn-bedrock-input-token-count'], '11');
    assert.equal(client.headers()['x-amzn-bedrock-output-token-count'], '5');
    assert.match(client.headers()['x-amzn-bedrock-invocation-latency'] ?? '', /^\d+$/);
    assert.equal(only().rawPath, '/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke');
    assert.equal((only().body as { anthropic_version: string }).anthropic_version, 'bedrock-2023-05-31');
  });

  test('Anthropic tool use through InvokeModel; the Messages body is validated as Bedrock does', async () => {
    const answer = await bedrock().send(new InvokeModelCommand({ modelId: HAIKU, body: anthropicBody('BEDROCK_TOOL') }));
    const message = decode(answer.body);
    assert.equal(message.stop_reason, 'tool_use');
    const [block] = message.content as { type: string; name: string; input: unknown; id: string }[];
    assert.equal(block!.type, 'tool_use');
    assert.equal(block!.name, 'get_weather');
    assert.deepEqual(block!.input, { city: 'Paris' });
    assert.match(block!.id, /^toolu_bdrk_01/);
    for (const [body, message] of [
      [anthropicBody('x', { model: 'claude-3-5-haiku' }), 'Malformed input request: #: extraneous key [model] is not permitted, please reformat your input and try again.'],
      [anthropicBody('x', { stream: true }), 'Malformed input request: #: extraneous key [stream] is not permitted, please reformat your input and try again.'],
      [JSON.stringify({ max_tokens: 5, messages: [] }), 'Malformed input request: #: required key [anthropic_version] not found, please reformat your input and try again.'],
    ] as const) {
      await assert.rejects(bedrock().send(new InvokeModelCommand({ modelId: HAIKU, body })), (error: unknown) => {
        assert.ok(error instanceof ValidationException, `got ${String(error)}`);
        assert.equal(error.message, message);
        return true;
      });
    }
  });

  test('Titan Text Embeddings v2: embedding, embeddingsByType, inputTextTokenCount; dimensions and normalize', async () => {
    const client = bedrock();
    const answer = await client.send(new InvokeModelCommand({
      modelId: 'amazon.titan-embed-text-v2:0', contentType: 'application/json', body: JSON.stringify({ inputText: 'hello embedding world', dimensions: 256, normalize: true }),
    }));
    const result = decode(answer.body) as { embedding: number[]; embeddingsByType: { float: number[] }; inputTextTokenCount: number };
    assert.equal(result.embedding.length, 256);
    assert.ok(Math.abs(Math.hypot(...result.embedding) - 1) < 1e-9);
    assert.deepEqual(result.embeddingsByType, { float: result.embedding });
    assert.equal(result.inputTextTokenCount, 3);
    assert.equal(client.headers()['x-amzn-bedrock-input-token-count'], '3');
    const again = decode((await client.send(new InvokeModelCommand({ modelId: 'amazon.titan-embed-text-v2:0', body: JSON.stringify({ inputText: 'hello embedding world', dimensions: 256 }) }))).body);
    assert.deepEqual(again.embedding, result.embedding); // the same text, the same vector
    const binary = decode((await client.send(new InvokeModelCommand({ modelId: 'amazon.titan-embed-text-v2:0', body: JSON.stringify({ inputText: 'x', embeddingTypes: ['float', 'binary'] }) }))).body);
    const byType = binary.embeddingsByType as { float: number[]; binary: number[] };
    assert.equal(byType.float.length, 1024);
    assert.ok(byType.binary.every((b) => b === 0 || b === 1));
    await assert.rejects(client.send(new InvokeModelCommand({ modelId: 'amazon.titan-embed-text-v2:0', body: JSON.stringify({ inputText: 'x', dimensions: 100 }) })), ValidationException);
  });

  test('Titan Text Embeddings v1: 1536 dimensions, inputText only', async () => {
    const answer = await bedrock().send(new InvokeModelCommand({ modelId: 'amazon.titan-embed-text-v1', body: JSON.stringify({ inputText: 'g1' }) }));
    const result = decode(answer.body);
    assert.deepEqual(Object.keys(result).sort(), ['embedding', 'inputTextTokenCount']);
    assert.equal((result.embedding as number[]).length, 1536);
  });

  test('Cohere Embed v3: {id, embeddings, response_type, texts}; embedding_types gives embeddings_by_type', async () => {
    const client = bedrock();
    const floats = decode((await client.send(new InvokeModelCommand({
      modelId: 'cohere.embed-english-v3', body: JSON.stringify({ texts: ['first text', 'second'], input_type: 'search_document' }),
    }))).body);
    assert.equal(floats.response_type, 'embeddings_floats');
    assert.deepEqual(floats.texts, ['first text', 'second']);
    assert.match(String(floats.id), /^[0-9a-f-]{36}$/);
    const embeddings = floats.embeddings as number[][];
    assert.equal(embeddings.length, 2);
    assert.equal(embeddings[0]!.length, 1024);
    const typed = decode((await client.send(new InvokeModelCommand({
      modelId: 'cohere.embed-english-v3', body: JSON.stringify({ texts: ['first text'], input_type: 'search_query', embedding_types: ['float', 'int8'] }),
    }))).body);
    assert.equal(typed.response_type, 'embeddings_by_type');
    const byType = typed.embeddings as { float: number[][]; int8: number[][] };
    assert.equal(byType.float[0]!.length, 1024);
    assert.ok(byType.int8[0]!.every((v) => Number.isInteger(v) && v >= -128 && v <= 127));
    await assert.rejects(client.send(new InvokeModelCommand({ modelId: 'cohere.embed-english-v3', body: JSON.stringify({ texts: ['x'] }) })), (error: unknown) => {
      assert.ok(error instanceof ValidationException);
      assert.match(error.message, /required key \[input_type\] not found/);
      return true;
    });
  });
});

describe('CountTokens', () => {
  test('the Converse form and the InvokeModel form (a base64 body) are counted; the SDK reads inputTokens', async () => {
    mock.reset();
    const client = bedrock();
    const converse = await client.send(new CountTokensCommand({ modelId: HAIKU, input: { converse: { messages: [{ role: 'user', content: [{ text: 'count me' }] }], system: [{ text: 'be brief' }] } } }));
    assert.equal(converse.inputTokens, 11);
    assert.equal(only().rawPath, '/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/count-tokens');
    assert.equal(only().operation, 'CountTokens');
    assert.equal(only().auth, 'ok');
    mock.reset();
    const invoke = await client.send(new CountTokensCommand({ modelId: HAIKU, input: { invokeModel: { body: new TextEncoder().encode(anthropicBody('count me')) } } }));
    assert.equal(invoke.inputTokens, 11);
    const sent = (only().body as { input: { invokeModel: { body: string } } }).input.invokeModel.body;
    assert.equal(JSON.parse(Buffer.from(sent, 'base64').toString('utf8')).anthropic_version, 'bedrock-2023-05-31', 'the body goes as base64');
    await assert.rejects(client.send(new CountTokensCommand({ modelId: HAIKU, input: { invokeModel: { body: new TextEncoder().encode('{}') } } })), ValidationException);
  });
});

describe('InvokeModelWithResponseStream', () => {
  test('chunk events whose bytes are Anthropic stream events, ending with message_stop and the invocation metrics', async () => {
    mock.reset();
    const response = await bedrock().send(new InvokeModelWithResponseStreamCommand({ modelId: HAIKU, body: anthropicBody('stream it') }));
    assert.equal(response.contentType, 'application/json'); // x-amzn-bedrock-content-type
    const events = await anthropicEvents(response.body);
    assert.deepEqual(events.map((e) => e.type), [
      'message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop',
    ]);
    const start = events[0]!.message as { id: string; model: string; usage: { input_tokens: number; output_tokens: number } };
    assert.match(start.id, /^msg_bdrk_01/);
    assert.equal(start.model, 'claude-3-5-haiku-20241022');
    assert.equal(start.usage.input_tokens, 11);
    assert.deepEqual(events[1]!.content_block, { type: 'text', text: '' });
    const text = events.filter((e) => e.type === 'content_block_delta').map((e) => (e.delta as { type: string; text: string }).text).join('');
    assert.equal(text, 'Bedrock says: stream it');
    assert.deepEqual(events[6]!.delta, { stop_reason: 'end_turn', stop_sequence: null });
    assert.deepEqual(events[6]!.usage, { output_tokens: 5 });
    const metrics = events[7]!['amazon-bedrock-invocationMetrics'] as Record<string, number>;
    assert.equal(metrics.inputTokenCount, 11);
    assert.equal(metrics.outputTokenCount, 5);
    assert.equal(typeof metrics.invocationLatency, 'number');
    assert.equal(typeof metrics.firstByteLatency, 'number');
    assert.equal(only().operation, 'InvokeModelWithResponseStream');
  });

  test('tool use streams input_json_delta fragments; a mid-stream error is the SDK\'s ModelStreamErrorException', async () => {
    const tool = await bedrock().send(new InvokeModelWithResponseStreamCommand({ modelId: HAIKU, body: anthropicBody('BEDROCK_TOOL') }));
    const events = await anthropicEvents(tool.body);
    assert.deepEqual((events[1]!.content_block as { type: string; name: string }).type, 'tool_use');
    const json = events.filter((e) => e.type === 'content_block_delta').map((e) => (e.delta as { type: string; partial_json: string }).partial_json).join('');
    assert.deepEqual(JSON.parse(json), { city: 'Paris' });
    assert.equal((events.at(-2)!.delta as { stop_reason: string }).stop_reason, 'tool_use');

    const broken = await bedrock({ trigger: 'stream_error' }).send(new InvokeModelWithResponseStreamCommand({ modelId: HAIKU, body: anthropicBody('x') }));
    await assert.rejects(anthropicEvents(broken.body), ModelStreamErrorException);
    await assert.rejects(
      bedrock().send(new InvokeModelWithResponseStreamCommand({ modelId: 'amazon.titan-embed-text-v2:0', body: JSON.stringify({ inputText: 'x' }) })),
      ValidationException,
    );
  });
});

describe('errors as Bedrock sends them', () => {
  const cases = [
    ['throttle', ThrottlingException, 429, 'Too many requests, please wait before trying again.'],
    ['model_not_ready', ModelNotReadyException, 429, 'Model is not ready for inference. Wait and try your request again.'],
    ['context_length', ValidationException, 400, 'Input is too long for requested model.'],
    ['access_denied', AccessDeniedException, 403, "You don't have access to the model with the specified model ID."],
    ['not_found', ResourceNotFoundException, 404, 'This model version has reached the end of its life. Please refer to the AWS documentation for more details.'],
    ['model_timeout', ModelTimeoutException, 408, 'Model has timed out in processing the request. Try your request again.'],
    ['model_error', ModelErrorException, 424, 'Received server error (500) from model. Try your request again.'],
    ['server_error', InternalServerException, 500, 'The system encountered an unexpected error during processing. Try your request again.'],
    ['unavailable', ServiceUnavailableException, 503, 'Bedrock is unable to process your request.'],
  ] as const;

  for (const [trigger, Class, status, message] of cases) {
    test(`${trigger}: ${status} ${Class.name} from Converse, ConverseStream, InvokeModel and the stream`, async () => {
      mock.reset();
      const client = bedrock({ trigger });
      const check = (error: unknown): true => {
        assert.ok(error instanceof Class, `got ${String(error)}`);
        assert.equal(error.$metadata.httpStatusCode, status);
        assert.equal(error.message, message);
        return true;
      };
      await assert.rejects(client.send(new ConverseCommand(ask('x'))), check);
      assert.equal(client.headers()['x-amzn-errortype']?.split(':')[0], Class.name);
      await assert.rejects(client.send(new ConverseStreamCommand(ask('x'))), check);
      await assert.rejects(client.send(new InvokeModelCommand({ modelId: HAIKU, body: anthropicBody('x') })), check);
      await assert.rejects(client.send(new InvokeModelWithResponseStreamCommand({ modelId: HAIKU, body: anthropicBody('x') })), check);
      assert.equal(mock.requests.length, 4); // maxAttempts 1: one request each
      if (trigger === 'model_error') {
        await assert.rejects(client.send(new ConverseCommand(ask('x'))), (error: unknown) => {
          assert.ok(error instanceof ModelErrorException);
          assert.equal(error.originalStatusCode, 500);
          assert.match(error.resourceName ?? '', /^arn:aws:bedrock:us-east-1::foundation-model\/anthropic\./);
          return true;
        });
      }
    });
  }

  test('fail() applies to every request until cleared; the header wins over it', async () => {
    mock.fail('unavailable');
    try {
      await assert.rejects(bedrock().send(new ConverseCommand(ask('x'))), ServiceUnavailableException);
      await assert.rejects(bedrock({ trigger: 'throttle' }).send(new ConverseCommand(ask('x'))), ThrottlingException);
    } finally {
      mock.fail(undefined);
    }
    await bedrock().send(new ConverseCommand(ask('x')));
  });

  test('an unknown model and an embedding model in Converse: ValidationException', async () => {
    for (const [modelId, message] of [
      ['anthropic.claude-9-nope-v1:0', 'The provided model identifier is invalid.'],
      ['eu.amazon.titan-embed-text-v2:0', 'The provided model identifier is invalid.'],
      ['amazon.titan-embed-text-v2:0', "This action doesn't support the model that you provided. Try again with a supported text or chat model."],
    ] as const) {
      await assert.rejects(bedrock().send(new ConverseCommand(ask('x', modelId))), (error: unknown) => {
        assert.ok(error instanceof ValidationException, `${modelId}: got ${String(error)}`);
        assert.equal(error.message, message);
        return true;
      });
    }
    await assert.rejects(bedrock().send(new ConverseCommand({ modelId: HAIKU, messages: [{ role: 'assistant', content: [{ text: 'hi' }] }] })), (error: unknown) => {
      assert.ok(error instanceof ValidationException);
      assert.match(error.message, /^A conversation must start with a user message/);
      return true;
    });
  });
});

describe('SigV4', () => {
  test('a wrong secret: 403 InvalidSignatureException, and the mock recorded the failed check', async () => {
    mock.reset();
    const wrong = { accessKeyId: mock.credentials.accessKeyId, secretAccessKey: 'not-the-secret-not-the-secret-not-the-s' };
    const client = bedrock({ credentials: wrong });
    await assert.rejects(client.send(new ConverseCommand(ask('x'))), (error: unknown) => {
      assert.ok(error instanceof BedrockRuntimeServiceException, `got ${String(error)}`);
      assert.equal(error.name, 'InvalidSignatureException');
      assert.equal(error.$metadata.httpStatusCode, 403);
      assert.equal(error.message, BAD_SIGNATURE);
      return true;
    });
    assert.equal(client.headers()['x-amzn-errortype'], 'InvalidSignatureException:http://internal.amazon.com/coral/com.amazon.coral.service/');
    assert.equal(only().auth, 'bad_signature');
    assert.equal(only().accessKeyId, mock.credentials.accessKeyId);
  });

  test('an unknown key: UnrecognizedClientException; another region: InvalidSignatureException', async () => {
    const unknown = bedrock({ credentials: { accessKeyId: 'AKIAIOSFODNN7EXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY' } });
    await assert.rejects(unknown.send(new ConverseCommand(ask('x'))), (error: unknown) => {
      assert.ok(error instanceof BedrockRuntimeServiceException);
      assert.equal(error.name, 'UnrecognizedClientException');
      return true;
    });
    await assert.rejects(bedrock({ region: 'eu-west-1' }).send(new ConverseCommand(ask('x'))), (error: unknown) => {
      assert.ok(error instanceof BedrockRuntimeServiceException);
      assert.equal(error.name, 'InvalidSignatureException');
      assert.match(error.message, /^Credential should be scoped to a valid region/);
      return true;
    });
  });

  test('signed by hand: a changed body, no signature, and a clock more than 5 minutes off are refused', async () => {
    const path = `/model/${encodeURIComponent(HAIKU)}/converse`;
    const body = JSON.stringify(ask('by hand'));
    const host = new URL(mock.url).host;
    const sign = async (signingDate: Date, signedBody: string) => {
      const signer = new SignatureV4({ service: 'bedrock', region: mock.region, credentials: mock.credentials, sha256: Hash.bind(null, 'sha256') });
      const request = { method: 'POST', protocol: 'http:', hostname: '127.0.0.1', path, query: {}, headers: { host, 'content-type': 'application/json' }, body: signedBody };
      return (await signer.sign(request, { signingDate })).headers;
    };
    const post = (headers: Record<string, string>, sent = body) => fetch(mock.url + path, { method: 'POST', headers, body: sent });

    const fine = await post(await sign(new Date(Date.now() - 4 * 60_000), body)); // within the 5-minute skew
    assert.equal(fine.status, 200);
    const changed = await post(await sign(new Date(), body), body.replace('by hand', 'by HAND'));
    assert.equal(changed.status, 403);
    assert.deepEqual(await changed.json(), { message: BAD_SIGNATURE });
    const stale = await post(await sign(new Date(Date.now() - 6 * 60_000), body));
    assert.equal(stale.status, 403);
    assert.match(stale.headers.get('x-amzn-errortype') ?? '', /^InvalidSignatureException:/);
    assert.match(((await stale.json()) as { message: string }).message, /^Signature expired: \d{8}T\d{6}Z is now earlier than \d{8}T\d{6}Z \(\d{8}T\d{6}Z - 5 min\.\)$/);
    const none = await post({ 'content-type': 'application/json' });
    assert.equal(none.status, 403);
    assert.equal(none.headers.get('x-amzn-errortype'), 'MissingAuthenticationTokenException:http://internal.amazon.com/coral/com.amazon.coral.service/');
    assert.deepEqual(await none.json(), { message: 'Missing Authentication Token' });
  });
});

describe('model ids', () => {
  test('a cross-region inference profile and ARNs reach the mock URL-encoded and are decoded', async () => {
    mock.reset();
    const profileArn = `arn:aws:bedrock:us-east-1:123456789012:inference-profile/${PROFILE}`;
    const modelArn = `arn:aws:bedrock:us-east-1::foundation-model/${HAIKU}`;
    const client = bedrock();
    await client.send(new ConverseCommand(ask('profile', PROFILE)));
    await client.send(new ConverseStreamCommand(ask('arn', profileArn))).then((r) => collect(r.stream));
    await client.send(new InvokeModelCommand({ modelId: modelArn, body: anthropicBody('model arn') }));
    const [profile, arn, model] = mock.requests;
    assert.equal(profile!.rawPath, '/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/converse');
    assert.equal(profile!.modelId, PROFILE);
    assert.equal(arn!.rawPath, '/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream');
    assert.equal(arn!.modelId, profileArn);
    assert.equal(model!.rawPath, '/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A%3Afoundation-model%2Fanthropic.claude-3-5-haiku-20241022-v1%3A0/invoke');
    assert.equal(model!.modelId, modelArn);
    assert.ok(mock.requests.every((r) => r.auth === 'ok'));
  });
});

describe('triggers for the gateway tests', () => {
  test('slow_first delays the first event, slow spaces the others', async () => {
    const started = Date.now();
    const response = await bedrock({ trigger: 'slow_first:300' }).send(new ConverseStreamCommand(ask('slow')));
    await collect(response.stream);
    assert.ok(Date.now() - started >= 300, `took ${Date.now() - started} ms`);
    const spaced = Date.now();
    const slow = await bedrock({ trigger: 'slow:60' }).send(new ConverseStreamCommand(ask('slow')));
    assert.equal((await collect(slow.stream)).length, 7);
    assert.ok(Date.now() - spaced >= 6 * 60, `took ${Date.now() - spaced} ms`);
  });

  test('cut: the answer is dropped after the first delta (HTTP/1.1: the connection; HTTP/2: the stream)', async () => {
    for (const http1 of [true, false]) {
      mock.reset();
      const response = await bedrock({ trigger: 'cut', http1 }).send(new ConverseStreamCommand(ask('cut')));
      const seen: string[] = [];
      await assert.rejects(async () => { for await (const event of response.stream!) seen.push(...kinds([event])); });
      assert.deepEqual(seen, ['messageStart', 'contentBlockDelta']);
      assert.equal(only().clientGone, false); // the mock dropped it, the client did not go
    }
    const after = await bedrock().send(new ConverseCommand(ask('still there')));
    assert.equal(after.stopReason, 'end_turn');
  });

  test('hold: deltas every 200 ms until the client goes, which the mock records', async () => {
    mock.reset();
    const abort = new AbortController();
    const response = await bedrock({ trigger: 'hold' }).send(new ConverseStreamCommand(ask('hold')), { abortSignal: abort.signal });
    const texts: string[] = [];
    for await (const event of response.stream!) {
      if (event.contentBlockDelta) texts.push(event.contentBlockDelta.delta?.text ?? '');
      if (texts.length === 3) {
        abort.abort();
        break;
      }
    }
    assert.deepEqual(texts, ['Bedroc', ' 1', ' 2']);
    for (let i = 0; i < 50 && !only().clientGone; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(only().clientGone, true);
  });

  test('an unknown trigger is refused rather than ignored', async () => {
    await assert.rejects(bedrock({ trigger: 'thrttle' }).send(new ConverseCommand(ask('x'))), (error: unknown) => {
      assert.ok(error instanceof ValidationException);
      assert.match(error.message, /unknown trigger 'thrttle'/);
      return true;
    });
  });
});

describe('the AWS credential chain against the mock', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'bedrock-mock-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** A Converse call with credentials from `provider`; returns the request the mock recorded. */
  async function converseWith(credentials: ClientOptions['credentials'], target = mock): Promise<BedrockRequest> {
    const answer = await bedrock({ credentials, target }).send(new ConverseCommand(ask('with temporary credentials')));
    assert.equal(answer.output?.message?.content?.[0]?.text, 'Bedrock says: with temporary credentials');
    const seen = target.requests.filter((r) => r.operation === 'Converse').at(-1)!;
    assert.equal(seen.auth, 'ok');
    assert.match(seen.accessKeyId ?? '', /^ASIA[A-Z2-7]{16}$/);
    assert.equal(typeof seen.headers['x-amz-security-token'], 'string');
    return seen;
  }

  test('fromTokenFile: AssumeRoleWithWebIdentity at the mock STS, then a Converse call with the issued key', async () => {
    mock.reset();
    const tokenFile = join(dir, 'token');
    await writeFile(tokenFile, mock.webIdentityToken);
    const before = process.env.AWS_WEB_IDENTITY_TOKEN_FILE;
    const env = { AWS_WEB_IDENTITY_TOKEN_FILE: tokenFile, AWS_ROLE_ARN: mock.roleArn, AWS_ROLE_SESSION_NAME: 'sluice-test' };
    await withEnv(env, async () => {
      const provider = fromTokenFile({ clientConfig: { endpoint: mock.stsUrl, region: mock.region } });
      const credentials = await provider();
      assert.match(credentials.accessKeyId, /^ASIA/);
      assert.ok(credentials.expiration instanceof Date && credentials.expiration.getTime() > Date.now() + 3500_000);
      assert.equal(credentials.accountId, '123456789012');
      const seen = await converseWith(provider);
      assert.equal(seen.accessKeyId !== credentials.accessKeyId, true); // the client's provider asked again
    });
    assert.equal(process.env.AWS_WEB_IDENTITY_TOKEN_FILE, before); // restored
    assert.equal(mock.issued.sts, 2);
    const sts = mock.requests.find((r) => r.operation === 'AssumeRoleWithWebIdentity')!;
    assert.equal(sts.method, 'POST');
    assert.equal(sts.rawPath, '/');
    assert.deepEqual(sts.body, {
      Action: 'AssumeRoleWithWebIdentity', Version: '2011-06-15', RoleArn: mock.roleArn, RoleSessionName: 'sluice-test', WebIdentityToken: mock.webIdentityToken,
    });
    assert.equal(sts.headers.authorization, undefined); // the call is unsigned
  });

  test('fromWebToken with a token STS refuses: InvalidIdentityToken, nothing issued', async () => {
    mock.reset();
    const provider = fromWebToken({ roleArn: mock.roleArn, webIdentityToken: 'someone-else', clientConfig: { endpoint: mock.stsUrl, region: mock.region } });
    await assert.rejects(provider(), (error: unknown) => {
      assert.equal((error as Error).name, 'InvalidIdentityTokenException');
      return true;
    });
    assert.equal(mock.issued.sts, 0);
  });

  test('fromContainerMetadata (ECS full URI and authorization token) and fromHttp (Pod Identity)', async () => {
    mock.reset();
    await withEnv({ AWS_CONTAINER_CREDENTIALS_FULL_URI: mock.containerUrl, AWS_CONTAINER_AUTHORIZATION_TOKEN: mock.containerToken, AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: undefined }, async () => {
      await converseWith(fromContainerMetadata());
    });
    assert.equal(mock.issued.container, 1);
    const endpoint = mock.requests.find((r) => r.operation === 'ContainerCredentials')!;
    assert.equal(endpoint.method, 'GET');
    assert.equal(endpoint.headers.authorization, mock.containerToken);

    await withEnv({ AWS_CONTAINER_CREDENTIALS_FULL_URI: mock.podIdentityUrl, AWS_CONTAINER_AUTHORIZATION_TOKEN: mock.containerToken, AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: undefined }, async () => {
      const credentials = await fromHttp({})();
      assert.match(credentials.accessKeyId, /^ASIA/);
      await converseWith(credentials);
    });
    assert.equal(mock.issued.container, 2);
    await withEnv({ AWS_CONTAINER_CREDENTIALS_FULL_URI: mock.containerUrl, AWS_CONTAINER_AUTHORIZATION_TOKEN: 'wrong', AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: undefined }, async () => {
      await assert.rejects(fromContainerMetadata()());
    });
    assert.equal(mock.issued.container, 2);
  });

  test('fromInstanceMetadata: IMDSv2 token, the role, its credentials', async () => {
    mock.reset();
    await withEnv({ AWS_EC2_METADATA_SERVICE_ENDPOINT: mock.imdsUrl, AWS_EC2_METADATA_V1_DISABLED: 'true' }, async () => {
      await converseWith(fromInstanceMetadata());
    });
    assert.equal(mock.issued.imds, 1);
    const imds = mock.requests.filter((r) => r.operation?.startsWith('Imds'));
    assert.deepEqual(imds.map((r) => `${r.method} ${r.rawPath}`), [
      'PUT /latest/api/token', 'GET /latest/meta-data/iam/security-credentials/', `GET /latest/meta-data/iam/security-credentials/${mock.imdsRole}`,
    ]);
    assert.equal(imds[0]!.headers['x-aws-ec2-metadata-token-ttl-seconds'], '21600');
    assert.equal(typeof imds[1]!.headers['x-aws-ec2-metadata-token'], 'string');
    const bare = await fetch(`${mock.imdsUrl}/latest/meta-data/iam/security-credentials/`);
    assert.equal(bare.status, 401); // IMDSv2 only
  });

  test('issued credentials expire: the provider fetches fresh ones, an expired key is refused', async () => {
    const shortLived = await startMockBedrock({ credentialLifetimeSec: 60 });
    try {
      const file = join(dir, 'short-token');
      await writeFile(file, shortLived.webIdentityToken);
      const provider = fromTokenFile({ webIdentityTokenFile: file, roleArn: shortLived.roleArn, clientConfig: { endpoint: shortLived.stsUrl, region: shortLived.region } });
      const client = bedrock({ credentials: provider, target: shortLived });
      await client.send(new ConverseCommand(ask('first')));
      await client.send(new ConverseCommand(ask('second')));
      // Within five minutes of expiry the SDK refreshes: each call got fresh credentials, all accepted.
      const calls = shortLived.requests.filter((r) => r.operation === 'Converse');
      assert.equal(new Set(calls.map((r) => r.accessKeyId)).size, 2);
      assert.ok(calls.every((r) => r.auth === 'ok'));
      assert.ok(shortLived.issued.sts >= 2);
      const old = await provider();
      shortLived.expireCredentials();
      await assert.rejects(bedrock({ credentials: old, target: shortLived }).send(new ConverseCommand(ask('late'))), (error: unknown) => {
        assert.ok(error instanceof BedrockRuntimeServiceException);
        assert.equal(error.name, 'ExpiredTokenException');
        assert.equal(error.$metadata.httpStatusCode, 403);
        return true;
      });
      assert.equal(shortLived.requests.at(-1)!.auth, 'expired_token');
    } finally {
      await shortLived.close();
    }
  });
});
