// Anthropic-speaking clients on an OpenAI-type provider, through the built gateway: the official
// `@anthropic-ai/sdk`, the Vercel AI SDK (`@ai-sdk/anthropic`) and LangChain's `ChatAnthropic` call
// `/v1/messages`, the gateway sends Chat Completions to the provider, and the answer (JSON, stream,
// error) comes back as Anthropic's. Each test checks both sides: what the provider was sent (the
// mock records it) and what the SDK made of the answer, with the exact translated values.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { createAnthropic } from '@ai-sdk/anthropic';
import { APICallError, generateText, jsonSchema, streamText, tool, type ModelMessage } from 'ai';
import { ChatAnthropic } from '@langchain/anthropic';
import { AIMessage, AIMessageChunk, HumanMessage, SystemMessage, ToolMessage } from '@langchain/core/messages';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockScenario, type MockUpstream } from '../support/mock-upstream.ts';

const CLIENT_KEY = 'sk-client-key-translate-anthropic';
const PROVIDER_KEY = 'sk-test';
const MODEL = 'gpt-test';
const UPSTREAM_MODEL = 'gpt-4o';

let mock: MockUpstream;
let gw: GatewayProcess;

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [{ name: 'openai', type: 'openai', base_url: `${mock.url}/v1`, api_key: PROVIDER_KEY }],
      models: [{ name: MODEL, provider: 'openai', upstream_model: UPSTREAM_MODEL }],
      keys: [CLIENT_KEY],
    },
  });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

beforeEach(() => mock.reset());

// -- the clients ---------------------------------------------------------------------------------

/** The official SDK; a scenario scripts the provider's answer (the gateway forwards `x-mock`). */
function anthropic(scenario?: MockScenario): Anthropic {
  return new Anthropic({ baseURL: gw.proxyUrl, apiKey: CLIENT_KEY, maxRetries: 0, ...(scenario ? { defaultHeaders: mockHeader(scenario) } : {}) });
}

/** `@ai-sdk/anthropic` wants the base URL with /v1. */
function aiModel(scenario?: MockScenario) {
  return createAnthropic({ baseURL: `${gw.proxyUrl}/v1`, apiKey: CLIENT_KEY, ...(scenario ? { headers: mockHeader(scenario) } : {}) })(MODEL);
}

function langchain(scenario?: MockScenario, streaming = false): ChatAnthropic {
  return new ChatAnthropic({
    model: MODEL,
    apiKey: CLIENT_KEY,
    anthropicApiUrl: gw.proxyUrl,
    maxRetries: 0,
    maxTokens: 300,
    streaming,
    ...(scenario ? { clientOptions: { defaultHeaders: mockHeader(scenario) } } : {}),
  });
}

// -- the provider's side -------------------------------------------------------------------------

type ChatBody = {
  model: string;
  messages: Array<Record<string, unknown>>;
  tools?: unknown[];
  tool_choice?: unknown;
  parallel_tool_calls?: boolean;
  stream?: boolean;
  stream_options?: unknown;
  [key: string]: unknown;
};

/** Every Chat Completions request the provider got since the test began, in order. */
function sentAll(): ChatBody[] {
  for (const r of mock.received) {
    assert.equal(r.path, '/v1/chat/completions', `the provider was called on ${r.path}`);
    assert.equal(r.headers.authorization, `Bearer ${PROVIDER_KEY}`);
    assert.ok(!JSON.stringify(r.headers).includes(CLIENT_KEY), 'the client key reached the provider');
  }
  return mock.received.map((r) => r.json as ChatBody);
}

/** The one Chat Completions request the provider got since the test began. */
function sent(): ChatBody {
  const all = sentAll();
  assert.equal(all.length, 1, `expected one upstream request, got ${all.length}`);
  return all[0]!;
}

const CREATED = 1_700_000_000;
const CHAT_ID = 'chatcmpl-Conformance42';

/** A complete (non-streamed) chat completion. */
function completion(message: Record<string, unknown>, finish: string, usage: Record<string, unknown> = { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 }) {
  return {
    id: CHAT_ID,
    object: 'chat.completion',
    created: CREATED,
    model: 'gpt-4o-2024-08-06',
    choices: [{ index: 0, message: { role: 'assistant', content: null, refusal: null, ...message }, logprobs: null, finish_reason: finish }],
    usage,
    system_fingerprint: 'fp_test',
  };
}

/** One streamed chunk, as OpenAI sends it when `stream_options.include_usage` is on (`usage: null`). */
function chunk(delta: Record<string, unknown>, finish: string | null = null) {
  return { id: CHAT_ID, object: 'chat.completion.chunk', created: CREATED, model: 'gpt-4o-2024-08-06', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], usage: null };
}

/** The last chunk of an `include_usage` stream: no choices, the counts. */
function usageChunk(usage: Record<string, unknown>) {
  return { id: CHAT_ID, object: 'chat.completion.chunk', created: CREATED, model: 'gpt-4o-2024-08-06', choices: [], usage };
}

const USAGE = { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 };

/** A streamed text answer in pieces, its finish reason, then the usage chunk. */
function textStream(pieces: string[], finish = 'stop', usage: Record<string, unknown> = USAGE) {
  return [chunk({ role: 'assistant', content: '', refusal: null }), ...pieces.map((content) => chunk({ content })), chunk({}, finish), usageChunk(usage)];
}

const WEATHER_SCHEMA = {
  type: 'object' as const,
  properties: { city: { type: 'string', description: 'The city' }, unit: { type: 'string', enum: ['c', 'f'] } },
  required: ['city'],
  additionalProperties: false,
};
const TIME_SCHEMA = { type: 'object' as const, properties: { zone: { type: 'string' } }, required: ['zone'], additionalProperties: false };

const WEATHER_TOOL: Anthropic.Tool = { name: 'get_weather', description: 'Current weather for a city', input_schema: WEATHER_SCHEMA };
const TIME_TOOL: Anthropic.Tool = { name: 'get_time', description: 'Local time in a zone', input_schema: TIME_SCHEMA };

/** The two tools as the provider must see them. */
const CHAT_TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Current weather for a city', parameters: WEATHER_SCHEMA } },
  { type: 'function', function: { name: 'get_time', description: 'Local time in a zone', parameters: TIME_SCHEMA } },
];

/** A streamed answer with text, then two tool calls whose arguments arrive in pieces. */
const TOOL_STREAM = [
  chunk({ role: 'assistant', content: null }),
  chunk({ content: 'Checking ' }),
  chunk({ content: 'both.' }),
  chunk({ tool_calls: [{ index: 0, id: 'call_w1', type: 'function', function: { name: 'get_weather', arguments: '' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"ci' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: 'ty": "Pa' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: 'ris", "unit"' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: ': "c"}' } }] }),
  chunk({ tool_calls: [{ index: 1, id: 'call_t2', type: 'function', function: { name: 'get_time', arguments: '{"zone":' } }] }),
  chunk({ tool_calls: [{ index: 1, function: { arguments: ' "Europe/Paris"}' } }] }),
  chunk({}, 'tool_calls'),
  usageChunk({ prompt_tokens: 120, completion_tokens: 40, total_tokens: 160 }),
];

const PNG_BASE64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
const IMAGE_URL = 'https://example.com/images/cat.jpg';

function assertDropped(headers: Headers | Record<string, string> | undefined, expected: string | null): void {
  const value = headers instanceof Headers ? headers.get('sluice-dropped-params') : (headers?.['sluice-dropped-params'] ?? null);
  assert.equal(value, expected);
}

// ---------------------------------------------------------------------------------------------
describe('1. system prompt → the first OpenAI system message', () => {
  test('Anthropic SDK, JSON: a string system prompt; the answer is a complete Anthropic message', async () => {
    const { data: message, response } = await anthropic()
      .messages.create({ model: MODEL, max_tokens: 256, system: 'You are terse.', messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    assert.deepEqual(sent(), { model: UPSTREAM_MODEL, messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'hi' }], max_tokens: 256 });
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
    assertDropped(response.headers, null);
    assert.match(message.id, /^msg_mock-\d+$/);
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.equal(message.model, UPSTREAM_MODEL);
    assert.deepEqual(message.content, [{ type: 'text', text: 'mock reply to: hi' }]);
    assert.equal(message.stop_reason, 'end_turn');
    assert.equal(message.stop_sequence, null);
    assert.deepEqual(message.usage, { input_tokens: 11, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 7 });
  });

  test('Anthropic SDK, create({stream: true}): system blocks joined; cache_control dropped and named; the event sequence', async () => {
    const { data: stream, response } = await anthropic()
      .messages.create({
        model: MODEL,
        max_tokens: 64,
        stream: true,
        system: [
          { type: 'text', text: 'Rule one.' },
          { type: 'text', text: 'Rule two.', cache_control: { type: 'ephemeral' } },
        ],
        messages: [{ role: 'user', content: 'hi' }],
      })
      .withResponse();
    const types: string[] = [];
    let text = '';
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
      if (event.type === 'message_delta') {
        assert.equal(event.delta.stop_reason, 'end_turn');
        assert.deepEqual(event.usage, { input_tokens: 11, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 7 });
      }
    }
    assert.equal(text, 'mock reply to: hi');
    assert.deepEqual(types, ['message_start', 'content_block_start', ...Array<string>(5).fill('content_block_delta'), 'content_block_stop', 'message_delta', 'message_stop']);
    assertDropped(response.headers, 'cache_control');
    assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/);
    assert.deepEqual(sent(), {
      model: UPSTREAM_MODEL,
      messages: [{ role: 'system', content: 'Rule one.\nRule two.' }, { role: 'user', content: 'hi' }],
      max_tokens: 64,
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  test('Anthropic SDK, messages.stream(): finalMessage() and the text events', async () => {
    const stream = anthropic().messages.stream({ model: MODEL, max_tokens: 64, system: [{ type: 'text', text: 'Only block.' }], messages: [{ role: 'user', content: 'tell me' }] });
    const texts: string[] = [];
    stream.on('text', (delta) => texts.push(delta));
    const message = await stream.finalMessage();
    assert.equal(texts.join(''), 'mock reply to: tell me');
    assert.equal(texts.length, 5);
    assert.deepEqual(message.content, [{ type: 'text', text: 'mock reply to: tell me' }]);
    assert.equal(message.stop_reason, 'end_turn');
    assert.deepEqual(sent().messages, [{ role: 'system', content: 'Only block.' }, { role: 'user', content: 'tell me' }]);
  });

  test('AI SDK: generateText and streamText with `system`', async () => {
    const { text, finishReason } = await generateText({ model: aiModel(), system: 'Be exact.', prompt: 'ping', maxOutputTokens: 100, maxRetries: 0 });
    assert.equal(text, 'mock reply to: ping');
    assert.equal(finishReason, 'stop');
    const result = streamText({ model: aiModel(), system: 'Be exact.', prompt: 'pong', maxOutputTokens: 100, maxRetries: 0 });
    let streamed = '';
    for await (const delta of result.textStream) streamed += delta;
    assert.equal(streamed, 'mock reply to: pong');
    const [plain, streamedBody] = sentAll();
    assert.equal(sentAll().length, 2);
    assert.deepEqual(plain!.messages, [{ role: 'system', content: 'Be exact.' }, { role: 'user', content: 'ping' }]);
    assert.equal(plain!.max_tokens, 100);
    assert.equal(plain!.model, UPSTREAM_MODEL);
    assert.deepEqual(streamedBody!.messages, [{ role: 'system', content: 'Be exact.' }, { role: 'user', content: 'pong' }]);
    assert.equal(streamedBody!.stream, true);
    assert.deepEqual(streamedBody!.stream_options, { include_usage: true });
  });

  test('LangChain ChatAnthropic: a SystemMessage, invoke and stream', async () => {
    const reply = await langchain().invoke([new SystemMessage('You answer in French.'), new HumanMessage('hello')]);
    assert.equal(reply.text, 'mock reply to: hello');
    let streamed = '';
    for await (const piece of await langchain().stream([new SystemMessage('You answer in French.'), new HumanMessage('again')])) streamed += piece.text;
    assert.equal(streamed, 'mock reply to: again');
    const [invoked, streamedBody] = sentAll();
    assert.deepEqual(invoked!.messages, [{ role: 'system', content: 'You answer in French.' }, { role: 'user', content: 'hello' }]);
    assert.deepEqual(streamedBody!.messages, [{ role: 'system', content: 'You answer in French.' }, { role: 'user', content: 'again' }]);
    assert.equal(streamedBody!.stream, true);
  });
});

// ---------------------------------------------------------------------------------------------
describe('2. multi-part content and images → OpenAI content parts', () => {
  const expectedParts = [
    { type: 'text', text: 'Compare ' },
    { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG_BASE64}` } },
    { type: 'image_url', image_url: { url: IMAGE_URL } },
    { type: 'text', text: 'briefly.' },
  ];

  test('Anthropic SDK, JSON and messages.stream(): text, a base64 image and a url image, in order', async () => {
    const content: Anthropic.ContentBlockParam[] = [
      { type: 'text', text: 'Compare ' },
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG_BASE64 } },
      { type: 'image', source: { type: 'url', url: IMAGE_URL } },
      { type: 'text', text: 'briefly.' },
    ];
    const message = await anthropic().messages.create({ model: MODEL, max_tokens: 50, messages: [{ role: 'user', content }] });
    assert.deepEqual(message.content, [{ type: 'text', text: 'mock reply to: Compare briefly.' }]);
    const streamed = await anthropic().messages.stream({ model: MODEL, max_tokens: 50, messages: [{ role: 'user', content }] }).finalMessage();
    assert.deepEqual(streamed.content, [{ type: 'text', text: 'mock reply to: Compare briefly.' }]);
    const [plain, stream] = sentAll();
    assert.deepEqual(plain!.messages, [{ role: 'user', content: expectedParts }]);
    assert.deepEqual(stream!.messages, [{ role: 'user', content: expectedParts }]);
  });

  test('a multi-turn conversation: string and block contents, assistant turns', async () => {
    await anthropic().messages.create({
      model: MODEL,
      max_tokens: 50,
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'one' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'two' }] },
        { role: 'user', content: [{ type: 'text', text: 'three' }, { type: 'text', text: 'four' }] },
      ],
    });
    assert.deepEqual(sent().messages, [
      { role: 'user', content: 'one' },
      { role: 'assistant', content: 'two' },
      { role: 'user', content: [{ type: 'text', text: 'three' }, { type: 'text', text: 'four' }] },
    ]);
  });

  test('AI SDK: image file parts (bytes and a URL) become image_url parts', async () => {
    const bytes = Buffer.from(PNG_BASE64, 'base64');
    const messages: ModelMessage[] = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Compare ' },
          { type: 'file', mediaType: 'image/png', data: new Uint8Array(bytes) },
          { type: 'file', mediaType: 'image/jpeg', data: new URL(IMAGE_URL) },
          { type: 'text', text: 'briefly.' },
        ],
      },
    ];
    const { text } = await generateText({ model: aiModel(), messages, maxOutputTokens: 50, maxRetries: 0 });
    assert.equal(text, 'mock reply to: Compare briefly.');
    const result = streamText({ model: aiModel(), messages, maxOutputTokens: 50, maxRetries: 0 });
    assert.equal(await result.text, 'mock reply to: Compare briefly.');
    const [plain, stream] = sentAll();
    assert.deepEqual(plain!.messages, [{ role: 'user', content: expectedParts }]);
    assert.deepEqual(stream!.messages, [{ role: 'user', content: expectedParts }]);
  });
});

// ---------------------------------------------------------------------------------------------
describe('3. tools', () => {
  const toolCompletion = completion(
    {
      content: 'Let me check.',
      tool_calls: [
        { id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris","unit":"c"}' } },
        { id: 'call_def', type: 'function', function: { name: 'get_time', arguments: '{"zone":"Europe/Paris"}' } },
      ],
    },
    'tool_calls',
  );

  test('Anthropic SDK, JSON: definitions and tool_choice translated; tool_calls become tool_use blocks', async () => {
    const message = await anthropic({ body: toolCompletion }).messages.create({
      model: MODEL,
      max_tokens: 200,
      tools: [WEATHER_TOOL, TIME_TOOL],
      tool_choice: { type: 'tool', name: 'get_weather' },
      messages: [{ role: 'user', content: 'Weather and time in Paris?' }],
    });
    const body = sent();
    assert.deepEqual(body.tools, CHAT_TOOLS);
    assert.deepEqual(body.tool_choice, { type: 'function', function: { name: 'get_weather' } });
    assert.equal(body.parallel_tool_calls, undefined);
    assert.equal(message.id, 'msg_Conformance42');
    assert.equal(message.model, 'gpt-4o-2024-08-06');
    assert.deepEqual(message.content, [
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: 'call_abc', name: 'get_weather', input: { city: 'Paris', unit: 'c' } },
      { type: 'tool_use', id: 'call_def', name: 'get_time', input: { zone: 'Europe/Paris' } },
    ]);
    assert.equal(message.stop_reason, 'tool_use');
  });

  test('tool_choice auto / any (parallel off) / none', async () => {
    const client = anthropic();
    const ask = (tool_choice: Anthropic.ToolChoice) =>
      client.messages.create({ model: MODEL, max_tokens: 20, tools: [WEATHER_TOOL], tool_choice, messages: [{ role: 'user', content: 'x' }] });
    await ask({ type: 'auto' });
    await ask({ type: 'any', disable_parallel_tool_use: true });
    await ask({ type: 'none' });
    await ask({ type: 'tool', name: 'get_weather', disable_parallel_tool_use: false });
    const bodies = sentAll();
    assert.deepEqual(
      bodies.map((b) => [b.tool_choice, b.parallel_tool_calls]),
      [
        ['auto', undefined],
        ['required', false],
        ['none', undefined],
        [{ type: 'function', function: { name: 'get_weather' } }, undefined],
      ],
    );
    for (const b of bodies) assert.deepEqual(b.tools, [CHAT_TOOLS[0]]);
  });

  test('Anthropic SDK, messages.stream(): tool-call arguments in pieces reassemble (text and inputJson events, finalMessage)', async () => {
    const stream = anthropic({ sse: TOOL_STREAM }).messages.stream({
      model: MODEL,
      max_tokens: 200,
      tools: [WEATHER_TOOL, TIME_TOOL],
      messages: [{ role: 'user', content: 'Weather and time in Paris?' }],
    });
    const texts: string[] = [];
    const partials: string[] = [];
    let lastSnapshot: unknown;
    stream.on('text', (delta) => texts.push(delta));
    stream.on('inputJson', (partial, snapshot) => {
      partials.push(partial);
      lastSnapshot = snapshot;
    });
    const message = await stream.finalMessage();
    assert.deepEqual(texts, ['Checking ', 'both.']);
    assert.deepEqual(partials, ['{"ci', 'ty": "Pa', 'ris", "unit"', ': "c"}', '{"zone":', ' "Europe/Paris"}']);
    assert.deepEqual(lastSnapshot, { zone: 'Europe/Paris' });
    assert.deepEqual(message.content, [
      { type: 'text', text: 'Checking both.' },
      { type: 'tool_use', id: 'call_w1', name: 'get_weather', input: { city: 'Paris', unit: 'c' } },
      { type: 'tool_use', id: 'call_t2', name: 'get_time', input: { zone: 'Europe/Paris' } },
    ]);
    assert.equal(message.stop_reason, 'tool_use');
    assert.equal(message.id, 'msg_Conformance42');
    assert.deepEqual(message.usage, { input_tokens: 120, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 40 });
    assert.deepEqual(sent().tools, CHAT_TOOLS);
  });

  test('Anthropic SDK, create({stream: true}): the raw events of a tool-call stream, block by block', async () => {
    const stream = await anthropic({ sse: TOOL_STREAM }).messages.create({
      model: MODEL,
      max_tokens: 200,
      stream: true,
      tools: [WEATHER_TOOL, TIME_TOOL],
      messages: [{ role: 'user', content: 'Weather and time in Paris?' }],
    });
    const blocks: Array<{ index: number; start: unknown; deltas: string[]; stopped: boolean }> = [];
    for await (const event of stream) {
      if (event.type === 'content_block_start') blocks.push({ index: event.index, start: event.content_block, deltas: [], stopped: false });
      if (event.type === 'content_block_delta') {
        const block = blocks.find((b) => b.index === event.index)!;
        assert.ok(!block.stopped, 'a delta after its block stopped');
        block.deltas.push(event.delta.type === 'text_delta' ? event.delta.text : event.delta.type === 'input_json_delta' ? event.delta.partial_json : '?');
      }
      if (event.type === 'content_block_stop') blocks.find((b) => b.index === event.index)!.stopped = true;
    }
    assert.deepEqual(blocks, [
      { index: 0, start: { type: 'text', text: '' }, deltas: ['Checking ', 'both.'], stopped: true },
      { index: 1, start: { type: 'tool_use', id: 'call_w1', name: 'get_weather', input: {} }, deltas: ['{"ci', 'ty": "Pa', 'ris", "unit"', ': "c"}'], stopped: true },
      { index: 2, start: { type: 'tool_use', id: 'call_t2', name: 'get_time', input: {} }, deltas: ['{"zone":', ' "Europe/Paris"}'], stopped: true },
    ]);
  });

  test('Anthropic SDK: a follow-up with tool_use and tool_result blocks becomes tool_calls and tool messages', async () => {
    const message = await anthropic().messages.create({
      model: MODEL,
      max_tokens: 200,
      tools: [WEATHER_TOOL, TIME_TOOL],
      messages: [
        { role: 'user', content: 'Weather and time in Paris?' },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Let me check.' },
            { type: 'tool_use', id: 'call_abc', name: 'get_weather', input: { city: 'Paris', unit: 'c' } },
            { type: 'tool_use', id: 'call_def', name: 'get_time', input: { zone: 'Europe/Paris' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'call_abc', content: '18°C, sunny' },
            { type: 'tool_result', tool_use_id: 'call_def', content: [{ type: 'text', text: '14:05' }, { type: 'text', text: 'CEST' }] },
            { type: 'text', text: 'Summarise.' },
          ],
        },
      ],
    });
    assert.deepEqual(message.content, [{ type: 'text', text: 'mock reply to: Summarise.' }]);
    assert.deepEqual(sent().messages, [
      { role: 'user', content: 'Weather and time in Paris?' },
      {
        role: 'assistant',
        content: 'Let me check.',
        tool_calls: [
          { id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris","unit":"c"}' } },
          { id: 'call_def', type: 'function', function: { name: 'get_time', arguments: '{"zone":"Europe/Paris"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_abc', content: '18°C, sunny' },
      { role: 'tool', tool_call_id: 'call_def', content: '14:05\nCEST' },
      { role: 'user', content: 'Summarise.' },
    ]);
  });

  test('AI SDK generateText: tools and toolChoice translated; tool_calls become toolCalls', async () => {
    const tools = {
      get_weather: tool({ description: 'Current weather for a city', inputSchema: jsonSchema<{ city: string; unit?: 'c' | 'f' }>(WEATHER_SCHEMA) }),
      get_time: tool({ description: 'Local time in a zone', inputSchema: jsonSchema<{ zone: string }>(TIME_SCHEMA) }),
    };
    const result = await generateText({
      model: aiModel({ body: toolCompletion }),
      tools,
      toolChoice: { type: 'tool', toolName: 'get_weather' },
      prompt: 'Weather and time in Paris?',
      maxOutputTokens: 200,
      maxRetries: 0,
    });
    assert.equal(result.finishReason, 'tool-calls');
    assert.equal(result.text, 'Let me check.');
    assert.deepEqual(
      result.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })),
      [
        { id: 'call_abc', name: 'get_weather', input: { city: 'Paris', unit: 'c' } },
        { id: 'call_def', name: 'get_time', input: { zone: 'Europe/Paris' } },
      ],
    );
    const body = sent();
    assert.deepEqual(body.tools, CHAT_TOOLS);
    assert.deepEqual(body.tool_choice, { type: 'function', function: { name: 'get_weather' } });
  });

  test('AI SDK streamText: tool-call arguments in pieces reassemble into toolCalls', async () => {
    const result = streamText({
      model: aiModel({ sse: TOOL_STREAM }),
      tools: {
        get_weather: tool({ description: 'Current weather for a city', inputSchema: jsonSchema<{ city: string }>(WEATHER_SCHEMA) }),
        get_time: tool({ description: 'Local time in a zone', inputSchema: jsonSchema<{ zone: string }>(TIME_SCHEMA) }),
      },
      prompt: 'Weather and time in Paris?',
      maxOutputTokens: 200,
      maxRetries: 0,
    });
    const deltas: string[] = [];
    for await (const part of result.fullStream) if (part.type === 'tool-input-delta') deltas.push(part.delta);
    assert.deepEqual(deltas, ['{"ci', 'ty": "Pa', 'ris", "unit"', ': "c"}', '{"zone":', ' "Europe/Paris"}']);
    assert.equal(await result.text, 'Checking both.');
    assert.equal(await result.finishReason, 'tool-calls');
    assert.deepEqual(
      (await result.toolCalls).map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })),
      [
        { id: 'call_w1', name: 'get_weather', input: { city: 'Paris', unit: 'c' } },
        { id: 'call_t2', name: 'get_time', input: { zone: 'Europe/Paris' } },
      ],
    );
    assert.equal(sent().tool_choice, 'auto');
  });

  test('AI SDK: a follow-up with the tool result becomes a tool message', async () => {
    const messages: ModelMessage[] = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'call_abc', toolName: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'call_abc', toolName: 'get_weather', output: { type: 'text', value: '18°C, sunny' } }] },
    ];
    const { text } = await generateText({
      model: aiModel(),
      tools: { get_weather: tool({ description: 'Current weather for a city', inputSchema: jsonSchema<{ city: string }>(WEATHER_SCHEMA) }) },
      messages,
      maxOutputTokens: 100,
      maxRetries: 0,
    });
    // The mock answers the last user message; the tool result is not one.
    assert.equal(text, 'mock reply to: Weather in Paris?');
    assert.deepEqual(sent().messages, [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_abc', content: '18°C, sunny' },
    ]);
  });

  test('LangChain ChatAnthropic: bindTools, a tool-call answer (JSON and streamed), and the ToolMessage follow-up', async () => {
    const weather = { name: 'get_weather', description: 'Current weather for a city', input_schema: WEATHER_SCHEMA };
    const reply = await langchain({ body: toolCompletion }).bindTools([weather]).invoke('Weather in Paris?');
    assert.deepEqual(
      reply.tool_calls?.map((c) => ({ id: c.id, name: c.name, args: c.args })),
      [
        { id: 'call_abc', name: 'get_weather', args: { city: 'Paris', unit: 'c' } },
        { id: 'call_def', name: 'get_time', args: { zone: 'Europe/Paris' } },
      ],
    );
    let streamed: AIMessageChunk | undefined;
    for await (const piece of await langchain({ sse: TOOL_STREAM }).bindTools([weather]).stream('Weather in Paris?')) {
      streamed = streamed === undefined ? piece : streamed.concat(piece);
    }
    assert.deepEqual(
      streamed?.tool_calls?.map((c) => ({ id: c.id, name: c.name, args: c.args })),
      [
        { id: 'call_w1', name: 'get_weather', args: { city: 'Paris', unit: 'c' } },
        { id: 'call_t2', name: 'get_time', args: { zone: 'Europe/Paris' } },
      ],
    );
    await langchain().invoke([
      new HumanMessage('Weather in Paris?'),
      new AIMessage({ content: '', tool_calls: [{ id: 'call_abc', name: 'get_weather', args: { city: 'Paris' }, type: 'tool_call' }] }),
      new ToolMessage({ tool_call_id: 'call_abc', content: '18°C, sunny' }),
    ]);
    const [first, second, third] = sentAll();
    assert.deepEqual(first!.tools, [CHAT_TOOLS[0]]);
    assert.deepEqual(second!.tools, [CHAT_TOOLS[0]]);
    assert.deepEqual(third!.messages, [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_abc', content: '18°C, sunny' },
    ]);
  });
});

// ---------------------------------------------------------------------------------------------
describe('4. stop reasons', () => {
  const cases = [
    { finish: 'stop', anthropic: 'end_turn', ai: 'stop' },
    { finish: 'length', anthropic: 'max_tokens', ai: 'length' },
    { finish: 'tool_calls', anthropic: 'tool_use', ai: 'tool-calls' },
  ] as const;
  const call = { id: 'call_s', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } };
  const json = (finish: string) => completion(finish === 'tool_calls' ? { tool_calls: [call] } : { content: 'cut' }, finish);
  const sse = (finish: string) =>
    finish === 'tool_calls'
      ? [chunk({ role: 'assistant', content: null }), chunk({ tool_calls: [{ index: 0, ...call, function: { name: 'get_weather', arguments: '{"city":' } }] }), chunk({ tool_calls: [{ index: 0, function: { arguments: '"Oslo"}' } }] }), chunk({}, finish), usageChunk(USAGE)]
      : textStream(['cu', 't'], finish);

  for (const c of cases) {
    test(`${c.finish} → ${c.anthropic}: Anthropic SDK JSON, create({stream: true}), messages.stream(); AI SDK ${c.ai}`, async () => {
      const ask = { model: MODEL, max_tokens: 5, tools: [WEATHER_TOOL], messages: [{ role: 'user' as const, content: 'go' }] };
      const message = await anthropic({ body: json(c.finish) }).messages.create(ask);
      assert.equal(message.stop_reason, c.anthropic);
      let streamedStop: string | null | undefined;
      for await (const event of await anthropic({ sse: sse(c.finish) }).messages.create({ ...ask, stream: true })) {
        if (event.type === 'message_delta') streamedStop = event.delta.stop_reason;
      }
      assert.equal(streamedStop, c.anthropic);
      const final = await anthropic({ sse: sse(c.finish) }).messages.stream(ask).finalMessage();
      assert.equal(final.stop_reason, c.anthropic);
      assert.deepEqual(final.content, message.content);
      const tools = { get_weather: tool({ inputSchema: jsonSchema<{ city: string }>(WEATHER_SCHEMA) }) };
      assert.equal((await generateText({ model: aiModel({ body: json(c.finish) }), tools, prompt: 'go', maxOutputTokens: 5, maxRetries: 0 })).finishReason, c.ai);
      assert.equal(await streamText({ model: aiModel({ sse: sse(c.finish) }), tools, prompt: 'go', maxOutputTokens: 5, maxRetries: 0 }).finishReason, c.ai);
      assert.equal(sentAll().length, 5);
    });
  }
});

// ---------------------------------------------------------------------------------------------
describe('5. usage', () => {
  const chatUsage = { prompt_tokens: 1200, completion_tokens: 34, total_tokens: 1234, prompt_tokens_details: { cached_tokens: 1024, audio_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } };
  const expected = { input_tokens: 176, cache_creation_input_tokens: 0, cache_read_input_tokens: 1024, output_tokens: 34 };

  test('Anthropic SDK, JSON: prompt, completion and cached tokens', async () => {
    const message = await anthropic({ body: completion({ content: 'ok' }, 'stop', chatUsage) }).messages.create({ model: MODEL, max_tokens: 9, messages: [{ role: 'user', content: 'u' }] });
    assert.deepEqual(message.usage, expected);
    assert.equal(sent().stream, undefined);
  });

  test('Anthropic SDK, stream: the gateway asks for usage; finalMessage().usage and the message_delta carry it', async () => {
    const stream = anthropic({ sse: textStream(['o', 'k'], 'stop', chatUsage) }).messages.stream({ model: MODEL, max_tokens: 9, messages: [{ role: 'user', content: 'u' }] });
    const deltas: unknown[] = [];
    stream.on('streamEvent', (event) => {
      if (event.type === 'message_delta') deltas.push(event.usage);
    });
    const message = await stream.finalMessage();
    assert.deepEqual(message.usage, expected);
    assert.deepEqual(deltas, [expected]);
    assert.deepEqual(sent().stream_options, { include_usage: true });
  });

  test('the default mock stream (usage chunk after the finish chunk) gives the same counts as its JSON answer', async () => {
    const json = await anthropic().messages.create({ model: MODEL, max_tokens: 9, messages: [{ role: 'user', content: 'u' }] });
    const streamed = await anthropic().messages.stream({ model: MODEL, max_tokens: 9, messages: [{ role: 'user', content: 'u' }] }).finalMessage();
    assert.deepEqual(streamed.usage, json.usage);
    assert.deepEqual(json.usage, { input_tokens: 11, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 7 });
  });

  test('AI SDK: generateText and streamText usage, cache reads included', async () => {
    const plain = await generateText({ model: aiModel({ body: completion({ content: 'ok' }, 'stop', chatUsage) }), prompt: 'u', maxOutputTokens: 9, maxRetries: 0 });
    const streamed = streamText({ model: aiModel({ sse: textStream(['o', 'k'], 'stop', chatUsage) }), prompt: 'u', maxOutputTokens: 9, maxRetries: 0 });
    assert.equal(await streamed.text, 'ok');
    for (const usage of [plain.usage, await streamed.usage]) {
      assert.equal(usage.inputTokens, 1200);
      assert.equal(usage.inputTokenDetails.noCacheTokens, 176);
      assert.equal(usage.inputTokenDetails.cacheReadTokens, 1024);
      assert.equal(usage.inputTokenDetails.cacheWriteTokens, 0);
      assert.equal(usage.outputTokens, 34);
    }
    assert.deepEqual(sentAll()[1]!.stream_options, { include_usage: true });
  });

  test('LangChain ChatAnthropic: usage_metadata', async () => {
    const reply = await langchain({ body: completion({ content: 'ok' }, 'stop', chatUsage) }).invoke('u');
    assert.equal(reply.usage_metadata?.input_tokens, 1200);
    assert.equal(reply.usage_metadata?.output_tokens, 34);
    assert.equal(reply.usage_metadata?.input_token_details?.cache_read, 1024);
  });
});

// ---------------------------------------------------------------------------------------------
describe('6. errors', () => {
  const cases = [
    { status: 429, kind: Anthropic.RateLimitError, type: 'rate_limit_error', openai: { message: 'Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000.', type: 'tokens', param: null, code: 'rate_limit_exceeded' } },
    { status: 400, kind: Anthropic.BadRequestError, type: 'invalid_request_error', openai: { message: "Invalid value for 'temperature': must be at most 2.", type: 'invalid_request_error', param: 'temperature', code: 'invalid_value' } },
    { status: 500, kind: Anthropic.InternalServerError, type: 'api_error', openai: { message: 'The server had an error while processing your request.', type: 'server_error', param: null, code: null } },
  ] as const;

  for (const c of cases) {
    test(`an OpenAI ${c.status} reaches the Anthropic SDK as ${c.kind.name} (JSON and stream), the AI SDK as an APICallError`, async () => {
      const scenario: MockScenario = { status: c.status, body: { error: c.openai } };
      const check = (error: unknown): boolean => {
        assert.ok(error instanceof c.kind, `expected ${c.kind.name}, got ${String(error)}`);
        assert.equal(error.status, c.status);
        assert.equal(error.type, c.type);
        assert.equal(error.apiMessage, c.openai.message);
        assert.deepEqual(error.error, { type: 'error', error: { type: c.type, message: c.openai.message } });
        return true;
      };
      const ask = { model: MODEL, max_tokens: 9, messages: [{ role: 'user' as const, content: 'u' }] };
      await assert.rejects(anthropic(scenario).messages.create(ask), check);
      await assert.rejects(anthropic(scenario).messages.create({ ...ask, stream: true }), check);
      await assert.rejects(anthropic(scenario).messages.stream(ask).finalMessage(), check);
      await assert.rejects(generateText({ model: aiModel(scenario), prompt: 'u', maxOutputTokens: 9, maxRetries: 0 }), (error: unknown) => {
        assert.ok(APICallError.isInstance(error), `got ${String(error)}`);
        assert.equal(error.statusCode, c.status);
        assert.equal(error.message, c.openai.message);
        return true;
      });
      assert.equal(sentAll().length, 4);
    });
  }

  const midStream = [chunk({ role: 'assistant', content: '' }), chunk({ content: 'Partial ' }), chunk({ content: 'answer' }), { error: { message: 'The model produced invalid content.', type: 'server_error', param: null, code: null } }];

  test('an OpenAI error event mid-stream (after content) reaches the Anthropic SDK as an APIError, after the text so far', async () => {
    const stream = anthropic({ sse: midStream, sseDone: false }).messages.stream({ model: MODEL, max_tokens: 9, messages: [{ role: 'user', content: 'u' }] });
    const texts: string[] = [];
    stream.on('text', (delta) => texts.push(delta));
    await assert.rejects(stream.finalMessage(), (error: unknown) => {
      assert.ok(error instanceof Anthropic.APIError, `got ${String(error)}`);
      assert.deepEqual(error.error, { type: 'error', error: { type: 'api_error', message: 'The model produced invalid content.' } });
      assert.equal(error.type, 'api_error');
      assert.match(error.message, /The model produced invalid content\./);
      return true;
    });
    assert.deepEqual(texts, ['Partial ', 'answer']);

    const seen: string[] = [];
    await assert.rejects(
      (async () => {
        for await (const event of await anthropic({ sse: midStream, sseDone: false }).messages.create({ model: MODEL, max_tokens: 9, stream: true, messages: [{ role: 'user', content: 'u' }] })) {
          seen.push(event.type === 'content_block_delta' && event.delta.type === 'text_delta' ? event.delta.text : event.type);
        }
      })(),
      (error: unknown) => error instanceof Anthropic.APIError && error.type === 'api_error' && /invalid content/.test(error.message),
    );
    assert.deepEqual(seen, ['message_start', 'content_block_start', 'Partial ', 'answer']);
  });

  test('an OpenAI error event mid-stream reaches the AI SDK stream as an error, after the text so far', async () => {
    const errors: unknown[] = [];
    const result = streamText({ model: aiModel({ sse: midStream, sseDone: false }), prompt: 'u', maxOutputTokens: 9, maxRetries: 0, onError: ({ error }) => void errors.push(error) });
    let text = '';
    for await (const delta of result.textStream) text += delta;
    assert.equal(text, 'Partial answer');
    assert.equal(errors.length, 1);
    assert.match(String((errors[0] as Error).message), /The model produced invalid content\./);
  });

  test('an OpenAI error event before any content (a 200 stream) reaches the SDK as an APIError with its message', async () => {
    const scenario: MockScenario = { sse: [{ error: { message: 'Overloaded, try again.', type: 'server_error', param: null, code: null } }], sseDone: false };
    await assert.rejects(anthropic(scenario).messages.stream({ model: MODEL, max_tokens: 9, messages: [{ role: 'user', content: 'u' }] }).finalMessage(), (error: unknown) => {
      assert.ok(error instanceof Anthropic.APIError, `got ${String(error)}`);
      assert.deepEqual(error.error, { type: 'error', error: { type: 'api_error', message: 'Overloaded, try again.' } });
      return true;
    });
  });

  test('a connection the provider drops mid-stream ends the Anthropic stream with an error event, after the text so far', async () => {
    // The default answer streams 'mock reply to: u' in five pieces (the first with the role); four are sent.
    const stream = anthropic({ disconnectAfterEvents: 4 }).messages.stream({ model: MODEL, max_tokens: 9, messages: [{ role: 'user', content: 'u' }] });
    const texts: string[] = [];
    stream.on('text', (delta) => texts.push(delta));
    await assert.rejects(stream.finalMessage(), (error: unknown) => {
      assert.ok(error instanceof Anthropic.APIError, `got ${String(error)}`);
      assert.deepEqual(error.error, { type: 'error', error: { type: 'api_error', message: 'provider "openai" closed the connection before answering' } });
      return true;
    });
    assert.deepEqual(texts, ['moc', 'k r', 'epl', 'y t']);
  });

  test('what cannot be expressed is a 400 naming it, and the provider is not called: thinking, a server tool', async () => {
    const ask = { model: MODEL, max_tokens: 2048, messages: [{ role: 'user' as const, content: 'u' }] };
    const refused = (param: string, detail: RegExp) => (error: unknown) => {
      assert.ok(error instanceof Anthropic.BadRequestError, `got ${String(error)}`);
      assert.equal(error.type, 'invalid_request_error');
      assert.match(error.apiMessage ?? '', new RegExp(`parameter "${param.replace(/[[\]]/g, '\\$&')}"`));
      assert.match(error.apiMessage ?? '', detail);
      assert.match(error.apiMessage ?? '', /provider "openai" of type openai/);
      return true;
    };
    await assert.rejects(anthropic().messages.create({ ...ask, thinking: { type: 'enabled', budget_tokens: 1024 } }), refused('thinking', /extended thinking/));
    await assert.rejects(anthropic().messages.create({ ...ask, stream: true, thinking: { type: 'enabled', budget_tokens: 1024 } }), refused('thinking', /extended thinking/));
    await assert.rejects(
      anthropic().messages.create({ ...ask, tools: [WEATHER_TOOL, { type: 'web_search_20250305', name: 'web_search', max_uses: 2 }] }),
      refused('tools[1]', /web_search_20250305/),
    );
    await assert.rejects(anthropic().messages.stream({ ...ask, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }).finalMessage(), refused('tools[0]', /web_search_20250305/));
    await assert.rejects(
      generateText({ model: aiModel(), prompt: 'u', maxOutputTokens: 2048, maxRetries: 0, providerOptions: { anthropic: { thinking: { type: 'enabled', budgetTokens: 1024 } } } }),
      (error: unknown) => {
        assert.ok(APICallError.isInstance(error), `got ${String(error)}`);
        assert.equal(error.statusCode, 400);
        assert.match(error.message, /parameter "thinking"/);
        return true;
      },
    );
    assert.equal(mock.received.length, 0);
  });

  test('a dropped parameter (top_k) is listed in sluice-dropped-params and not sent', async () => {
    const ask = { model: MODEL, max_tokens: 9, top_k: 5, temperature: 0.2, messages: [{ role: 'user' as const, content: 'u' }] };
    const { data: message, response } = await anthropic().messages.create(ask).withResponse();
    assert.deepEqual(message.content, [{ type: 'text', text: 'mock reply to: u' }]);
    assertDropped(response.headers, 'top_k');
    const streamed = await anthropic().messages.stream(ask).withResponse();
    assertDropped(streamed.response.headers, 'top_k');
    assert.deepEqual((await streamed.data.finalMessage()).content, [{ type: 'text', text: 'mock reply to: u' }]);
    const ai = await generateText({ model: aiModel(), prompt: 'u', topK: 5, maxOutputTokens: 9, maxRetries: 0 });
    assertDropped(ai.response.headers, 'top_k');
    const bodies = sentAll();
    assert.equal(bodies.length, 3);
    for (const body of bodies) {
      assert.equal('top_k' in body, false);
    }
    assert.equal(bodies[0]!.temperature, 0.2);
    assert.deepEqual(Object.keys(bodies[0]!).sort(), ['max_tokens', 'messages', 'model', 'temperature']);
  });
});

// ---------------------------------------------------------------------------------------------
describe('7. what OpenAI-compatible servers send beyond OpenAI', () => {
  const call = { id: 'call_g', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } };

  test('tool calls finished with `stop` (as some servers do) are still stop_reason tool_use: JSON, stream, AI SDK', async () => {
    const json = completion({ tool_calls: [call] }, 'stop');
    const sse = [chunk({ role: 'assistant', content: null }), chunk({ tool_calls: [{ index: 0, ...call }] }), chunk({}, 'stop'), usageChunk(USAGE)];
    const ask = { model: MODEL, max_tokens: 50, tools: [WEATHER_TOOL], messages: [{ role: 'user' as const, content: 'Oslo?' }] };
    const message = await anthropic({ body: json }).messages.create(ask);
    assert.equal(message.stop_reason, 'tool_use');
    assert.deepEqual(message.content, [{ type: 'tool_use', id: 'call_g', name: 'get_weather', input: { city: 'Oslo' } }]);
    const streamed = await anthropic({ sse }).messages.stream(ask).finalMessage();
    assert.equal(streamed.stop_reason, 'tool_use');
    assert.deepEqual(streamed.content, message.content);
    const tools = { get_weather: tool({ inputSchema: jsonSchema<{ city: string }>(WEATHER_SCHEMA) }) };
    assert.equal((await generateText({ model: aiModel({ body: json }), tools, prompt: 'Oslo?', maxOutputTokens: 50, maxRetries: 0 })).finishReason, 'tool-calls');
  });

  test("Azure's first chunk (no choices, no id, no model) does not become the message's id and model", async () => {
    const preamble = { id: '', object: '', created: 0, model: '', choices: [], prompt_filter_results: [{ prompt_index: 0, content_filter_results: {} }] };
    const message = await anthropic({ sse: [preamble, ...textStream(['Hi ', 'there'])] })
      .messages.stream({ model: MODEL, max_tokens: 50, messages: [{ role: 'user', content: 'u' }] })
      .finalMessage();
    assert.equal(message.id, 'msg_Conformance42');
    assert.equal(message.model, 'gpt-4o-2024-08-06');
    assert.deepEqual(message.content, [{ type: 'text', text: 'Hi there' }]);
  });

  test('content in parts (text parts among others) is the text, JSON and streamed', async () => {
    const parts = [{ type: 'thinking', thinking: [{ type: 'text', text: 'let me think' }] }, { type: 'text', text: 'Forty-two.' }];
    const message = await anthropic({ body: completion({ content: parts }, 'stop') }).messages.create({ model: MODEL, max_tokens: 50, messages: [{ role: 'user', content: 'u' }] });
    assert.deepEqual(message.content, [{ type: 'text', text: 'Forty-two.' }]);
    const sse = [chunk({ role: 'assistant', content: [parts[0]] }), chunk({ content: [{ type: 'text', text: 'Forty-' }] }), chunk({ content: [{ type: 'text', text: 'two.' }] }), chunk({}, 'stop'), usageChunk(USAGE)];
    const result = streamText({ model: aiModel({ sse }), prompt: 'u', maxOutputTokens: 50, maxRetries: 0 });
    assert.equal(await result.text, 'Forty-two.');
  });

  test('tool-call pieces that repeat the id and leave out the index are one call', async () => {
    const sse = [
      chunk({ role: 'assistant', content: null }),
      ...['{"city"', ': "Os', 'lo"}'].map((args, i) => chunk({ tool_calls: [{ id: 'call_r', type: 'function', function: { ...(i === 0 ? { name: 'get_weather' } : {}), arguments: args } }] })),
      chunk({}, 'tool_calls'),
      usageChunk(USAGE),
    ];
    const message = await anthropic({ sse }).messages.stream({ model: MODEL, max_tokens: 50, tools: [WEATHER_TOOL], messages: [{ role: 'user', content: 'Oslo?' }] }).finalMessage();
    assert.deepEqual(message.content, [{ type: 'tool_use', id: 'call_r', name: 'get_weather', input: { city: 'Oslo' } }]);
  });
});
