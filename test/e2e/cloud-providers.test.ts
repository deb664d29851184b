// The `bedrock`, `gemini` and `vertex` providers through the built gateway, against the Bedrock and
// Google mocks (which test/e2e/bedrock-mock-sdk.test.ts and google-mock-sdk.test.ts hold to the
// official SDKs): the official OpenAI and Anthropic clients reach each, JSON and streams, tools,
// usage charged; requests are signed (SigV4) or carry a token of the gateway's own identity, never
// a client's credential; Anthropic models on Bedrock and Vertex answer Anthropic clients natively.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { generateText, streamText } from 'ai';
import { ChatOpenAI } from '@langchain/openai';
import { ChatAnthropic } from '@langchain/anthropic';
import { startGateway, scrape, metricValue, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockBedrock, BEDROCK_TOOL, MOCK_BEDROCK_HEADER, type MockBedrock } from '../support/mock-bedrock.ts';
import { startMockGoogle, GEMINI_TOOL, MOCK_GOOGLE_HEADER, type MockGoogle } from '../support/mock-google.ts';

const CLIENT_KEY = 'sk-client-cloud-test-1';
const CLAUDE = 'anthropic.claude-3-5-haiku-20241022-v1:0';
const LLAMA = 'meta.llama3-1-8b-instruct-v1:0';

let bedrock: MockBedrock;
let google: MockGoogle;
let gw: GatewayProcess;
let openai: OpenAI;
let anthropic: Anthropic;

before(async () => {
  bedrock = await startMockBedrock({ chunks: 3, usage: { inputTokens: 11, outputTokens: 5, cacheReadInputTokens: 2 } });
  google = await startMockGoogle({ chunks: 3, usage: { prompt: 9, candidates: 4 } });
  const dir = mkdtempSync(join(tmpdir(), 'sluice-cloud-'));
  // The shared AWS files are left empty so that only the environment's keys are found.
  writeFileSync(join(dir, 'aws-config'), '');
  gw = await startGateway({
    config: {
      providers: [
        { name: 'bedrock', type: 'bedrock', region: 'us-east-1', base_url: bedrock.url },
        { name: 'bedrock-claude', type: 'bedrock', api: 'anthropic', region: 'us-east-1', base_url: bedrock.url },
        { name: 'gemini', type: 'gemini', base_url: google.url, api_key: google.apiKey },
        { name: 'vertex', type: 'vertex', project: google.project, location: google.location, base_url: google.url },
        { name: 'vertex-claude', type: 'vertex', api: 'anthropic', project: google.project, location: google.location, base_url: google.url },
      ],
      models: [
        { name: 'llama', provider: 'bedrock', upstream_model: LLAMA },
        { name: 'claude-converse', provider: 'bedrock', upstream_model: `us.${CLAUDE}` },
        { name: 'claude-bedrock', provider: 'bedrock-claude', upstream_model: CLAUDE },
        { name: 'titan-embed', provider: 'bedrock', upstream_model: 'amazon.titan-embed-text-v2:0' },
        { name: 'gemini-flash', provider: 'gemini', upstream_model: 'gemini-2.0-flash' },
        { name: 'gemini-embed', provider: 'gemini', upstream_model: 'text-embedding-004' },
        { name: 'vertex-flash', provider: 'vertex', upstream_model: 'gemini-2.0-flash' },
        { name: 'vertex-embed', provider: 'vertex', upstream_model: 'text-embedding-005' },
        { name: 'claude-vertex', provider: 'vertex-claude', upstream_model: 'claude-3-5-haiku@20241022' },
      ],
      keys: [CLIENT_KEY],
      routing: { cooldown_failures: 0 },
    },
    env: {
      AWS_ACCESS_KEY_ID: bedrock.credentials.accessKeyId,
      AWS_SECRET_ACCESS_KEY: bedrock.credentials.secretAccessKey,
      AWS_CONFIG_FILE: join(dir, 'aws-config'),
      AWS_SHARED_CREDENTIALS_FILE: join(dir, 'aws-config'),
      AWS_EC2_METADATA_DISABLED: 'true',
      GCE_METADATA_HOST: google.metadataHost,
      GOOGLE_APPLICATION_CREDENTIALS: undefined,
    },
  });
  openai = new OpenAI({ baseURL: `${gw.proxyUrl}/v1`, apiKey: CLIENT_KEY, maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: gw.proxyUrl, apiKey: CLIENT_KEY, maxRetries: 0 });
});

after(async () => {
  await gw?.stop();
  await bedrock?.close();
  await google?.close();
});

/** The model requests a mock recorded since `from` (no credential endpoint's). */
function modelRequests<R extends { path: string }>(mock: { requests: R[] }, from: number): R[] {
  return mock.requests.slice(from).filter((r) => r.path.includes('/model') || r.path.includes('/models/'));
}

describe('bedrock (Converse)', () => {
  test('an OpenAI chat completion reaches Converse, signed with the gateway’s AWS identity; the answer and its usage come back', async () => {
    const from = bedrock.requests.length;
    const answer = await openai.chat.completions.create({ model: 'llama', messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hello' }], max_tokens: 50 });
    assert.match(answer.choices[0]!.message.content ?? '', /hello/);
    assert.equal(answer.choices[0]!.finish_reason, 'stop');
    assert.equal(answer.usage?.prompt_tokens, 13, 'input 11 + cache read 2');
    assert.equal(answer.usage?.completion_tokens, 5);
    const [seen, ...more] = modelRequests(bedrock, from);
    assert.equal(more.length, 0);
    assert.equal(seen!.operation, 'Converse');
    assert.equal(seen!.modelId, LLAMA);
    assert.equal(seen!.auth, 'ok');
    assert.equal(seen!.accessKeyId, bedrock.credentials.accessKeyId);
    assert.equal(JSON.stringify(seen!.headers).includes(CLIENT_KEY), false, 'the client key never leaves');
    const body = seen!.body as { system?: unknown; inferenceConfig?: { maxTokens?: number }; messages?: unknown[] };
    assert.deepEqual(body.system, [{ text: 'be brief' }]);
    assert.equal(body.inferenceConfig?.maxTokens, 50);
  });

  test('a stream through ConverseStream: every delta, the end, and the usage asked for', async () => {
    const stream = await openai.chat.completions.create({ model: 'llama', messages: [{ role: 'user', content: 'stream please' }], stream: true, stream_options: { include_usage: true } });
    let text = '';
    let finish: string | null | undefined;
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    assert.match(text, /stream please/);
    assert.equal(finish, 'stop');
    assert.equal(usage?.completion_tokens, 5);
  });

  test('an Anthropic client with tools: a tool call comes back as tool_use, in a stream too', async () => {
    const tools = [{ name: 'get_weather', description: 'weather', input_schema: { type: 'object' as const, properties: { city: { type: 'string' } } } }];
    const answer = await anthropic.messages.create({ model: 'claude-converse', max_tokens: 100, tools, messages: [{ role: 'user', content: `${BEDROCK_TOOL} weather?` }] });
    assert.equal(answer.stop_reason, 'tool_use');
    const call = answer.content.find((b) => b.type === 'tool_use');
    assert.equal(call?.name, 'get_weather');
    assert.deepEqual(call?.input, { city: 'Paris' });
    const stream = anthropic.messages.stream({ model: 'claude-converse', max_tokens: 100, tools, messages: [{ role: 'user', content: `${BEDROCK_TOOL} weather?` }] });
    const final = await stream.finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    assert.deepEqual(final.content.find((b) => b.type === 'tool_use')?.input, { city: 'Paris' });
  });

  test('Titan embeddings through InvokeModel', async () => {
    const answer = await openai.embeddings.create({ model: 'titan-embed', input: 'hello', dimensions: 256 });
    assert.equal(answer.data.length, 1);
    assert.ok(answer.data[0]!.embedding.length > 0);
  });

  test('Bedrock throttling is a 429 in the caller’s shape; a prompt too long is a 400 context_length', async () => {
    await assert.rejects(openai.chat.completions.create({ model: 'llama', messages: [{ role: 'user', content: 'x' }] }, { headers: { [MOCK_BEDROCK_HEADER]: 'throttle' } }), (error: unknown) => {
      assert.ok(error instanceof OpenAI.RateLimitError, String(error));
      return true;
    });
    await assert.rejects(anthropic.messages.create({ model: 'claude-converse', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }, { headers: { [MOCK_BEDROCK_HEADER]: 'context_length' } }), (error: unknown) => {
      assert.ok(error instanceof Anthropic.BadRequestError, String(error));
      assert.match((error as Error).message, /too long/);
      return true;
    });
  });
});

describe('bedrock (InvokeModel, Anthropic’s body)', () => {
  test('an Anthropic client’s Messages body goes to InvokeModel as it is, with Bedrock’s anthropic_version and the beta header as anthropic_beta', async () => {
    const from = bedrock.requests.length;
    const answer = await anthropic.messages.create({ model: 'claude-bedrock', max_tokens: 64, messages: [{ role: 'user', content: 'hi claude' }] }, { headers: { 'anthropic-beta': 'token-efficient-tools-2025-02-19' } });
    assert.equal(answer.type, 'message');
    assert.equal(answer.stop_reason, 'end_turn');
    const [seen] = modelRequests(bedrock, from);
    assert.equal(seen!.operation, 'InvokeModel');
    const body = seen!.body as Record<string, unknown>;
    assert.equal(body.anthropic_version, 'bedrock-2023-05-31');
    assert.deepEqual(body.anthropic_beta, ['token-efficient-tools-2025-02-19']);
    assert.equal(body.model, undefined);
  });

  test('a stream through InvokeModelWithResponseStream arrives as Anthropic’s SSE; an OpenAI client gets it translated', async () => {
    const final = await anthropic.messages.stream({ model: 'claude-bedrock', max_tokens: 64, messages: [{ role: 'user', content: 'stream claude' }] }).finalMessage();
    assert.equal(final.stop_reason, 'end_turn');
    assert.ok(final.content.length > 0);
    const stream = await openai.chat.completions.create({ model: 'claude-bedrock', messages: [{ role: 'user', content: 'via chat' }], stream: true });
    let finish: string | null | undefined;
    for await (const chunk of stream) finish = chunk.choices[0]?.finish_reason ?? finish;
    assert.equal(finish, 'stop');
  });

  test('a Bedrock error answers an Anthropic client in Anthropic’s shape', async () => {
    await assert.rejects(anthropic.messages.create({ model: 'claude-bedrock', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }, { headers: { [MOCK_BEDROCK_HEADER]: 'throttle' } }), (error: unknown) => {
      assert.ok(error instanceof Anthropic.RateLimitError, String(error));
      assert.equal((error as { error?: { type?: string; error?: { type?: string } } }).error?.error?.type, 'rate_limit_error');
      return true;
    });
  });
});

describe('gemini', () => {
  test('chat and its stream reach generateContent with the key in x-goog-api-key', async () => {
    const from = google.requests.length;
    const answer = await openai.chat.completions.create({ model: 'gemini-flash', messages: [{ role: 'user', content: 'hello gemini' }] });
    assert.match(answer.choices[0]!.message.content ?? '', /hello gemini/);
    assert.equal(answer.usage?.prompt_tokens, 9);
    const [seen] = modelRequests(google, from);
    assert.equal(seen!.path, '/v1beta/models/gemini-2.0-flash:generateContent');
    assert.equal(seen!.headers['x-goog-api-key'], google.apiKey);
    const stream = await openai.chat.completions.create({ model: 'gemini-flash', messages: [{ role: 'user', content: 'stream gemini' }], stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    assert.match(text, /stream gemini/);
    assert.equal(usage?.completion_tokens, 4);
  });

  test('function calling: a functionCall comes back as a tool call', async () => {
    const answer = await openai.chat.completions.create({
      model: 'gemini-flash',
      messages: [{ role: 'user', content: `${GEMINI_TOOL} weather?` }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
    });
    assert.equal(answer.choices[0]!.finish_reason, 'tool_calls');
    const call = answer.choices[0]!.message.tool_calls?.[0];
    assert.equal(call?.type === 'function' ? call.function.name : undefined, 'get_weather');
  });

  test('embeddings through batchEmbedContents; a 429 is a 429', async () => {
    const answer = await openai.embeddings.create({ model: 'gemini-embed', input: ['a', 'b'] });
    assert.equal(answer.data.length, 2);
    await assert.rejects(openai.chat.completions.create({ model: 'gemini-flash', messages: [{ role: 'user', content: 'x' }] }, { headers: { [MOCK_GOOGLE_HEADER]: 'rate_limited' } }), (error: unknown) => error instanceof OpenAI.RateLimitError);
  });
});

describe('token counting', () => {
  test("Bedrock's CountTokens, in its Converse form and (for Anthropic's body) its InvokeModel form", async () => {
    const from = bedrock.requests.length;
    for (const model of ['claude-converse', 'claude-bedrock']) {
      const counted = await anthropic.messages.countTokens({ model, system: 'be brief', messages: [{ role: 'user', content: 'count me' }] });
      assert.equal(counted.input_tokens, 11, model);
    }
    const [converse, invoke] = modelRequests(bedrock, from);
    assert.equal(converse!.operation, 'CountTokens');
    assert.equal(converse!.auth, 'ok');
    assert.deepEqual((converse!.body as { input: { converse: { system: unknown } } }).input.converse.system, [{ text: 'be brief' }]);
    const sent = (invoke!.body as { input: { invokeModel: { body: string } } }).input.invokeModel.body;
    const inner = JSON.parse(Buffer.from(sent, 'base64').toString('utf8')) as Record<string, unknown>;
    assert.equal(inner.anthropic_version, 'bedrock-2023-05-31');
    assert.equal(inner.system, 'be brief', "Anthropic's own body, as the client sent it");
    await assert.rejects(anthropic.messages.countTokens({ model: 'titan-embed', messages: [{ role: 'user', content: 'x' }] }), (error: unknown) => error instanceof Anthropic.BadRequestError);
  });

  test("an Anthropic client's count_tokens reaches Gemini's and Vertex's countTokens", async () => {
    const from = google.requests.length;
    for (const model of ['gemini-flash', 'vertex-flash']) {
      const counted = await anthropic.messages.countTokens({ model, system: 'be brief', messages: [{ role: 'user', content: 'count me' }] });
      assert.equal(counted.input_tokens, 9, model);
    }
    const [gemini, vertex] = modelRequests(google, from);
    assert.equal(gemini!.path, '/v1beta/models/gemini-2.0-flash:countTokens');
    assert.deepEqual((gemini!.body as { generateContentRequest?: { systemInstruction?: unknown } }).generateContentRequest?.systemInstruction, { parts: [{ text: 'be brief' }] });
    assert.match(vertex!.path, /\/publishers\/google\/models\/gemini-2\.0-flash:countTokens$/);
    assert.ok(Array.isArray((vertex!.body as { contents?: unknown }).contents), 'Vertex takes the fields themselves');
  });
});

describe('vertex', () => {
  test('Gemini on Vertex with a token from the metadata server; Claude on Vertex through rawPredict, native to an Anthropic client', async () => {
    const from = google.requests.length;
    const answer = await anthropic.messages.create({ model: 'vertex-flash', max_tokens: 32, messages: [{ role: 'user', content: 'hello vertex' }] });
    assert.equal(answer.stop_reason, 'end_turn');
    const seen = modelRequests(google, from);
    assert.equal(seen[0]!.path, `/v1/projects/${google.project}/locations/${google.location}/publishers/google/models/gemini-2.0-flash:generateContent`);
    assert.match(String(seen[0]!.headers.authorization), /^Bearer /);
    assert.ok(google.issued.metadata >= 1);
    const claude = await anthropic.messages.stream({ model: 'claude-vertex', max_tokens: 32, messages: [{ role: 'user', content: 'hello claude on vertex' }] }).finalMessage();
    assert.equal(claude.stop_reason, 'end_turn');
    const raw = modelRequests(google, from).map((r) => r.path).find((p) => p.includes('anthropic'));
    assert.equal(raw, `/v1/projects/${google.project}/locations/${google.location}/publishers/anthropic/models/claude-3-5-haiku@20241022:streamRawPredict`);
  });

  test("embeddings through Vertex's :predict, with its token counts", async () => {
    const from = google.requests.length;
    const answer = await openai.embeddings.create({ model: 'vertex-embed', input: ['one', 'two'], dimensions: 64 });
    assert.equal(answer.data.length, 2);
    assert.ok(answer.data[0]!.embedding.length > 0);
    assert.ok(answer.usage.prompt_tokens > 0, 'Vertex counts the tokens');
    const [seen] = modelRequests(google, from);
    assert.match(seen!.path, /\/publishers\/google\/models\/text-embedding-005:predict$/);
    assert.deepEqual(seen!.body, { instances: [{ content: 'one' }, { content: 'two' }], parameters: { outputDimensionality: 64 } });
  });
});

describe('the Responses API', () => {
  test('reaches Converse and Gemini through Messages, JSON and stream', async () => {
    for (const [model, says] of [['llama', /Bedrock says: hello responses/], ['gemini-flash', /Gemini says: hello responses/]] as const) {
      const answer = await openai.responses.create({ model, input: 'hello responses', max_output_tokens: 64 });
      assert.equal(answer.status, 'completed', model);
      assert.match(answer.output_text, says);
      assert.ok((answer.usage?.input_tokens ?? 0) > 0, `${model}: usage`);
      const stream = await openai.responses.create({ model, input: 'hello responses', max_output_tokens: 64, stream: true });
      let text = '';
      let completed = false;
      for await (const event of stream) {
        if (event.type === 'response.output_text.delta') text += event.delta;
        if (event.type === 'response.completed') completed = true;
      }
      assert.match(text, says);
      assert.equal(completed, true, `${model}: the stream ends with response.completed`);
    }
  });
});

describe('the Vercel AI SDK and LangChain as clients', () => {
  // Each cloud model through both client APIs, JSON and stream: the text comes back whole.
  const CASES = [
    { model: 'llama', says: /Bedrock says/ },
    { model: 'claude-bedrock', says: /./ },
    { model: 'gemini-flash', says: /Gemini says/ },
    { model: 'claude-vertex', says: /./ },
  ];

  test('Vercel AI SDK: generateText and streamText, OpenAI chat and Anthropic providers', async () => {
    const viaOpenAI = createOpenAI({ baseURL: `${gw.proxyUrl}/v1`, apiKey: CLIENT_KEY });
    const viaAnthropic = createAnthropic({ baseURL: `${gw.proxyUrl}/v1`, apiKey: CLIENT_KEY });
    for (const { model, says } of CASES) {
      for (const provider of [viaOpenAI.chat(model), viaAnthropic(model)]) {
        const { text, usage } = await generateText({ model: provider, prompt: 'hello from ai', maxOutputTokens: 64, maxRetries: 0 });
        assert.match(text, says, `${model}: ${text}`);
        assert.ok((usage.inputTokens ?? 0) > 0, `${model}: usage`);
        const result = streamText({ model: provider, prompt: 'stream from ai', maxOutputTokens: 64, maxRetries: 0 });
        let streamed = '';
        for await (const piece of result.textStream) streamed += piece;
        assert.match(streamed, says, `${model} streamed: ${streamed}`);
        assert.equal(await result.finishReason, 'stop', model);
      }
    }
  });

  test('LangChain: ChatOpenAI and ChatAnthropic, invoke and stream', async () => {
    for (const { model, says } of CASES) {
      const chat = new ChatOpenAI({ model, apiKey: CLIENT_KEY, maxRetries: 0, configuration: { baseURL: `${gw.proxyUrl}/v1` } });
      const claude = new ChatAnthropic({ model, apiKey: CLIENT_KEY, maxRetries: 0, maxTokens: 64, anthropicApiUrl: gw.proxyUrl });
      for (const client of [chat, claude]) {
        const answer = await client.invoke('hello from langchain');
        assert.match(String(answer.content), says, `${model}: ${String(answer.content)}`);
        let streamed = '';
        for await (const chunk of await client.stream('stream from langchain')) streamed += typeof chunk.content === 'string' ? chunk.content : '';
        assert.match(streamed, says, `${model} streamed`);
      }
    }
  });
});

describe('secrets', () => {
  test("the AWS secret key, the Gemini key and Google's tokens are in no log line, metric or admin answer", async () => {
    const secrets = [bedrock.credentials.secretAccessKey, google.apiKey, ...google.tokens.map((t) => t.token)];
    assert.ok(google.tokens.length > 0, 'a token was issued to check for');
    const seen = [gw.stdout(), gw.stderr(), await scrape(gw), await (await fetch(`${gw.adminUrl}/server_info`)).text()].join('\n');
    for (const secret of secrets) assert.equal(seen.includes(secret), false, `a secret of ${secret.length} characters leaked`);
  });
});

describe('spend', () => {
  test('the tokens of every cloud provider are counted by provider', async () => {
    const text = await scrape(gw);
    for (const provider of ['bedrock', 'bedrock-claude', 'gemini', 'vertex']) {
      assert.ok((metricValue(text, 'sluice_tokens_total', { provider, type: 'prompt' }) ?? 0) > 0, `${provider}: ${text.split('\n').filter((l) => l.startsWith('sluice_tokens_total')).join('\n')}`);
    }
  });
});
