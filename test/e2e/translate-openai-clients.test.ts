// OpenAI-speaking clients on a model whose provider is of type `anthropic`: the official `openai`
// SDK (Chat Completions and Responses, plain, streamed and through its stream helpers), the Vercel
// AI SDK (`openai.chat(...)` and `openai(...)`, the Responses API) and LangChain's ChatOpenAI, as
// installed, against the built gateway. Each test checks both halves of the translation: what the
// gateway sent upstream as Anthropic Messages (the mock's record) and what the SDK made of the
// Anthropic answer the mock was scripted to give (JSON, SSE stream, error).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { APICallError, generateText, isStepCount, jsonSchema, streamText, tool, type ModelMessage } from 'ai';
import { ChatOpenAI } from '@langchain/openai';
import { HumanMessage, SystemMessage, type AIMessageChunk } from '@langchain/core/messages';
import { eventually, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockScenario, type MockSseEvent, type MockUpstream } from '../support/mock-upstream.ts';

const CLIENT_KEY = 'sk-client-translate-openai';
const ANTHROPIC_KEY = 'sk-ant-test';
const UPSTREAM_MODEL = 'claude-sonnet-4-5';

let mock: MockUpstream;
let gw: GatewayProcess;
let client: OpenAI;
let base: string;

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [{ name: 'anthropic', type: 'anthropic', base_url: mock.url, api_key: ANTHROPIC_KEY }],
      models: [{ name: 'claude-test', provider: 'anthropic', upstream_model: UPSTREAM_MODEL }],
      keys: [CLIENT_KEY],
    },
  });
  base = `${gw.proxyUrl}/v1`;
  client = new OpenAI({ baseURL: base, apiKey: CLIENT_KEY, maxRetries: 0 });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

// ---- helpers ----------------------------------------------------------------------------------

type Json = Record<string, unknown>;

/** The AI SDK's OpenAI provider on this gateway; `headers` go on every request (e.g. an x-mock script). */
const aiOpenAI = (headers: Record<string, string> = {}) => createOpenAI({ baseURL: base, apiKey: CLIENT_KEY, headers });

/** Request options for the openai SDK that script the mock's answer. */
const scripted = (scenario: MockScenario) => ({ headers: mockHeader(scenario) });

/** The one request the gateway sent upstream since the last mock.reset(): an Anthropic Messages body, with the provider's key. */
function sentUpstream(): Json {
  assert.equal(mock.received.length, 1, `upstream requests: ${mock.received.map((r) => r.path).join(', ')}`);
  const seen = mock.received[0]!;
  assert.equal(seen.path, '/v1/messages');
  assert.equal(seen.headers['x-api-key'], ANTHROPIC_KEY);
  assert.ok(!seen.body.includes(CLIENT_KEY));
  return seen.json as Json;
}

/** An Anthropic SSE event as the API sends it: `event: <type>` and the JSON with the same `type`. */
const ev = (type: string, payload: Json = {}): MockSseEvent => ({ event: type, data: JSON.stringify({ type, ...payload }) });

type StreamBlock = { text: string[] } | { thinking: string } | { tool: { id: string; name: string; json: string[] } };

interface StreamScript {
  blocks: StreamBlock[];
  stopReason?: string;
  /** message_start's usage. */
  usage?: Json;
  /** message_delta's usage (cumulative). */
  finalUsage?: Json;
}

/** A whole Anthropic stream (message_start … message_stop), as a mock scenario. */
function anthropicStream(script: StreamScript): MockScenario {
  const events: MockSseEvent[] = [
    ev('message_start', {
      message: { id: 'msg_01stream', type: 'message', role: 'assistant', model: UPSTREAM_MODEL, content: [], stop_reason: null, stop_sequence: null, usage: script.usage ?? { input_tokens: 12, output_tokens: 1 } },
    }),
    ev('ping'),
  ];
  script.blocks.forEach((block, index) => {
    if ('text' in block) {
      events.push(ev('content_block_start', { index, content_block: { type: 'text', text: '' } }));
      for (const text of block.text) events.push(ev('content_block_delta', { index, delta: { type: 'text_delta', text } }));
    } else if ('thinking' in block) {
      events.push(ev('content_block_start', { index, content_block: { type: 'thinking', thinking: '', signature: '' } }));
      events.push(ev('content_block_delta', { index, delta: { type: 'thinking_delta', thinking: block.thinking } }));
      events.push(ev('content_block_delta', { index, delta: { type: 'signature_delta', signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds' } }));
    } else {
      events.push(ev('content_block_start', { index, content_block: { type: 'tool_use', id: block.tool.id, name: block.tool.name, input: {} } }));
      events.push(ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: '' } }));
      for (const partial_json of block.tool.json) events.push(ev('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json } }));
    }
    events.push(ev('content_block_stop', { index }));
  });
  events.push(ev('message_delta', { delta: { stop_reason: script.stopReason ?? 'end_turn', stop_sequence: null }, usage: script.finalUsage ?? { output_tokens: 9 } }));
  events.push(ev('message_stop'));
  return { sse: events, sseDone: false };
}

/** A non-streamed Anthropic answer, as a mock scenario. */
function anthropicMessage(content: Json[], stopReason = 'end_turn', usage: Json = { input_tokens: 12, output_tokens: 9 }): MockScenario {
  return { body: { id: 'msg_01json', type: 'message', role: 'assistant', model: UPSTREAM_MODEL, content, stop_reason: stopReason, stop_sequence: null, usage } };
}

const WEATHER_SCHEMA = { type: 'object', properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['c', 'f'] } }, required: ['city'] };
/** The weather call, its arguments split across input_json_delta events the way Anthropic splits them. */
/** A finished tool round (question, call of get_weather for Paris, its result) as the Anthropic provider must receive it. */
const WEATHER_HISTORY_UPSTREAM = [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '18°C, sunny' }] },
];
const WEATHER_CALL = { id: 'toolu_01A09q90qw90lq917835lq9', name: 'get_weather', json: ['{"ci', 'ty": "Pa', 'ris", "unit"', ': "c"}'] };
const WEATHER_ARGS = { city: 'Paris', unit: 'c' };
const chatWeatherTool: OpenAI.ChatCompletionTool = { type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: WEATHER_SCHEMA } };
const responsesWeatherTool: OpenAI.Responses.FunctionTool = { type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: WEATHER_SCHEMA, strict: false };
const anthropicWeatherTool = { name: 'get_weather', description: 'The weather in a city', input_schema: WEATHER_SCHEMA };

/** A 1×1 PNG. */
const PNG_BASE64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg==';
const IMAGE_URL = 'https://example.com/cat.jpg';

/** Reads an SDK's text deltas to the end. */
async function collect(stream: AsyncIterable<string>): Promise<string> {
  let text = '';
  for await (const delta of stream) text += delta;
  return text;
}

// =============================================================================================
describe('1. system prompt', () => {
  test('openai chat.completions.create: system and developer messages → Anthropic system, in order', async () => {
    mock.reset();
    const completion = await client.chat.completions.create({
      model: 'claude-test',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'developer', content: [{ type: 'text', text: 'Answer in French.' }] },
        { role: 'user', content: 'hello' },
      ],
    });
    assert.deepEqual(sentUpstream(), {
      model: UPSTREAM_MODEL,
      max_tokens: 4096,
      system: [
        { type: 'text', text: 'You are terse.' },
        { type: 'text', text: 'Answer in French.' },
      ],
      messages: [{ role: 'user', content: 'hello' }],
    });
    assert.equal(completion.object, 'chat.completion');
    assert.equal(completion.model, UPSTREAM_MODEL);
    assert.deepEqual(completion.choices, [{ index: 0, message: { role: 'assistant', content: 'mock reply', refusal: null }, logprobs: null, finish_reason: 'stop' }]);
  });

  test('openai chat.completions.create with stream: true: one system prompt, the text streamed', async () => {
    mock.reset();
    const stream = await client.chat.completions.create({
      model: 'claude-test',
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'hello' },
      ],
      max_completion_tokens: 300,
      stream: true,
    });
    let text = '';
    const finish: (string | null)[] = [];
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      text += chunk.choices[0]?.delta.content ?? '';
      finish.push(chunk.choices[0]?.finish_reason ?? null);
    }
    assert.equal(text, 'mock reply');
    assert.equal(finish.filter((f) => f !== null).join(), 'stop');
    assert.deepEqual(sentUpstream(), { model: UPSTREAM_MODEL, max_tokens: 300, system: 'You are terse.', messages: [{ role: 'user', content: 'hello' }], stream: true });
  });

  test('openai chat.completions.stream() helper: finalChatCompletion()', async () => {
    mock.reset();
    const runner = client.chat.completions.stream({ model: 'claude-test', messages: [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: 'hi' }] });
    const final = await runner.finalChatCompletion();
    assert.equal(final.choices[0]!.message.content, 'mock reply');
    assert.equal(final.choices[0]!.finish_reason, 'stop');
    assert.equal(sentUpstream().system, 'Be brief.');
  });

  test('openai responses.create: instructions, then system and developer input messages → system', async () => {
    mock.reset();
    const response = await client.responses.create({
      model: 'claude-test',
      instructions: 'You are terse.',
      input: [
        { role: 'developer', content: 'Answer in French.' },
        { role: 'user', content: [{ type: 'input_text', text: 'hello' }] },
        { role: 'system', content: [{ type: 'input_text', text: 'No emojis.' }] },
      ],
    });
    assert.deepEqual(sentUpstream(), {
      model: UPSTREAM_MODEL,
      max_tokens: 4096,
      system: [
        { type: 'text', text: 'You are terse.' },
        { type: 'text', text: 'Answer in French.' },
        { type: 'text', text: 'No emojis.' },
      ],
      messages: [{ role: 'user', content: 'hello' }],
    });
    assert.equal(response.object, 'response');
    assert.equal(response.status, 'completed');
    assert.equal(response.output_text, 'mock reply');
    assert.equal(response.output.length, 1);
    assert.equal(response.output[0]!.type, 'message');
  });

  test('openai responses.create with stream: true, and responses.stream().finalResponse()', async () => {
    mock.reset();
    const stream = await client.responses.create({ model: 'claude-test', instructions: 'You are terse.', input: 'hello', max_output_tokens: 200, stream: true });
    const types: string[] = [];
    let text = '';
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
    }
    assert.equal(text, 'mock reply');
    assert.equal(types[0], 'response.created');
    assert.equal(types.at(-1), 'response.completed');
    assert.deepEqual(sentUpstream(), { model: UPSTREAM_MODEL, max_tokens: 200, system: 'You are terse.', messages: [{ role: 'user', content: 'hello' }], stream: true });

    mock.reset();
    const final = await client.responses.stream({ model: 'claude-test', instructions: 'Be brief.', input: 'hi' }).finalResponse();
    assert.equal(final.status, 'completed');
    assert.equal(final.output_text, 'mock reply');
    assert.equal(sentUpstream().system, 'Be brief.');
  });

  test('AI SDK openai.chat(...) and openai(...) (Responses): instructions → system, text back, plain and streamed', async () => {
    for (const model of [aiOpenAI().chat('claude-test'), aiOpenAI()('claude-test')]) {
      mock.reset();
      const { text } = await generateText({ model, instructions: 'You are terse.', prompt: 'hello', maxRetries: 0 });
      assert.equal(text, 'mock reply');
      const sent = sentUpstream();
      assert.equal(sent.system, 'You are terse.', `${model.provider}: ${JSON.stringify(sent)}`);
      assert.deepEqual(sent.messages, [{ role: 'user', content: 'hello' }]);

      mock.reset();
      const result = streamText({ model, instructions: 'Be brief.', prompt: 'hi', maxRetries: 0 });
      assert.equal(await collect(result.textStream), 'mock reply');
      assert.equal(sentUpstream().system, 'Be brief.');
    }
  });

  test('LangChain ChatOpenAI with useResponsesApi: a SystemMessage → system', async () => {
    const chat = new ChatOpenAI({ model: 'claude-test', apiKey: CLIENT_KEY, maxRetries: 0, useResponsesApi: true, configuration: { baseURL: base } });
    mock.reset();
    const logged = gw.logs.length;
    const reply = await chat.invoke([new SystemMessage('You are terse.'), new HumanMessage('hello')]);
    assert.equal(reply.text, 'mock reply');
    // The client called /v1/responses (an access line for it), though the upstream saw Messages.
    await eventually(() => gw.logs.slice(logged).some((l) => l.event === 'access' && l.path === '/v1/responses' && l.status === 200), 5000, 'an access line for /v1/responses');
    const sent = sentUpstream();
    assert.equal(sent.system, 'You are terse.');
    assert.deepEqual(sent.messages, [{ role: 'user', content: 'hello' }]);
  });

  test('LangChain ChatOpenAI: a SystemMessage → system, invoke and stream', async () => {
    const chat = new ChatOpenAI({ model: 'claude-test', apiKey: CLIENT_KEY, maxRetries: 0, configuration: { baseURL: base } });
    mock.reset();
    const reply = await chat.invoke([new SystemMessage('You are terse.'), new HumanMessage('hello')]);
    assert.equal(reply.content, 'mock reply');
    const sent = sentUpstream();
    assert.equal(sent.system, 'You are terse.');
    assert.deepEqual(sent.messages, [{ role: 'user', content: 'hello' }]);

    mock.reset();
    let streamed = '';
    for await (const chunk of await chat.stream([new SystemMessage('Be brief.'), new HumanMessage('hi')])) streamed += String(chunk.content);
    assert.equal(streamed, 'mock reply');
    assert.equal(sentUpstream().system, 'Be brief.');
  });
});

// =============================================================================================
describe('2. multi-part content and images', () => {
  const anthropicImages = [
    { type: 'text', text: 'What is in these?' },
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG_BASE64 } },
    { type: 'image', source: { type: 'url', url: IMAGE_URL } },
  ];

  const chatImages: OpenAI.ChatCompletionMessageParam[] = [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What is in these?' },
        { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG_BASE64}` } },
        { type: 'image_url', image_url: { url: IMAGE_URL, detail: 'high' } },
      ],
    },
  ];

  test('openai chat: text and image_url parts (data: URL and https URL) → text and image blocks', async () => {
    mock.reset();
    const { data, response } = await client.chat.completions.create({ model: 'claude-test', messages: chatImages }).withResponse();
    assert.deepEqual(sentUpstream().messages, [{ role: 'user', content: anthropicImages }]);
    assert.equal(data.choices[0]!.message.content, 'mock reply');
    // detail has no Anthropic equivalent: dropped, and said so.
    assert.equal(response.headers.get('sluice-dropped-params'), 'messages[].content[].image_url.detail');
  });

  test('openai chat, streamed (stream: true and the stream helper): the same image blocks', async () => {
    mock.reset();
    const stream = await client.chat.completions.create({ model: 'claude-test', messages: chatImages, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    assert.equal(text, 'mock reply');
    assert.deepEqual(sentUpstream(), { model: UPSTREAM_MODEL, max_tokens: 4096, messages: [{ role: 'user', content: anthropicImages }], stream: true });

    mock.reset();
    const final = await client.chat.completions.stream({ model: 'claude-test', messages: chatImages }).finalChatCompletion();
    assert.equal(final.choices[0]!.message.content, 'mock reply');
    assert.deepEqual(sentUpstream().messages, [{ role: 'user', content: anthropicImages }]);
  });

  test('openai responses, plain and responses.stream(): input_text and input_image parts → text and image blocks', async () => {
    mock.reset();
    const images: OpenAI.Responses.ResponseInputContent[] = [
      { type: 'input_text', text: 'What is in these?' },
      { type: 'input_image', image_url: `data:image/png;base64,${PNG_BASE64}`, detail: 'auto' },
      { type: 'input_image', image_url: IMAGE_URL, detail: 'auto' },
    ];
    const response = await client.responses.create({ model: 'claude-test', input: [{ role: 'user', content: images }] });
    assert.deepEqual(sentUpstream().messages, [{ role: 'user', content: anthropicImages }]);
    assert.equal(response.output_text, 'mock reply');

    mock.reset();
    const streamed = await client.responses.stream({ model: 'claude-test', input: [{ role: 'user', content: images }] }).finalResponse();
    assert.equal(streamed.output_text, 'mock reply');
    assert.deepEqual(sentUpstream(), { model: UPSTREAM_MODEL, max_tokens: 4096, messages: [{ role: 'user', content: anthropicImages }], stream: true });
  });

  test('a multi-turn conversation: assistant turns kept, consecutive user messages merged', async () => {
    mock.reset();
    await client.chat.completions.create({
      model: 'claude-test',
      messages: [
        { role: 'user', content: 'one' },
        { role: 'assistant', content: 'two' },
        { role: 'user', content: [{ type: 'text', text: 'three' }] },
        { role: 'user', content: 'four' },
      ],
    });
    assert.deepEqual(sentUpstream().messages, [
      { role: 'user', content: 'one' },
      { role: 'assistant', content: 'two' },
      { role: 'user', content: [{ type: 'text', text: 'three' }, { type: 'text', text: 'four' }] },
    ]);
  });

  test('AI SDK: image parts (bytes and a URL), over chat and Responses, generateText and streamText', async () => {
    const messages: ModelMessage[] = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is in these?' },
          { type: 'file', data: Buffer.from(PNG_BASE64, 'base64'), mediaType: 'image/png' },
          { type: 'file', data: new URL(IMAGE_URL), mediaType: 'image/jpeg' },
        ],
      },
    ];
    for (const model of [aiOpenAI().chat('claude-test'), aiOpenAI()('claude-test')]) {
      mock.reset();
      const { text } = await generateText({ model, messages, maxRetries: 0 });
      assert.equal(text, 'mock reply');
      assert.deepEqual(sentUpstream().messages, [{ role: 'user', content: anthropicImages }], model.provider);

      mock.reset();
      assert.equal(await collect(streamText({ model, messages, maxRetries: 0 }).textStream), 'mock reply');
      assert.deepEqual(sentUpstream().messages, [{ role: 'user', content: anthropicImages }], `${model.provider}, streamed`);
    }
  });
});

// =============================================================================================
describe('3. tools', () => {
  const toolUseAnswer = anthropicMessage(
    [
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: WEATHER_CALL.id, name: 'get_weather', input: WEATHER_ARGS },
    ],
    'tool_use',
  );

  test('openai chat: tools and tool_choice translated; a tool_use answer → tool_calls', async () => {
    mock.reset();
    const completion = await client.chat.completions.create(
      {
        model: 'claude-test',
        messages: [{ role: 'user', content: 'Weather in Paris?' }],
        tools: [chatWeatherTool, { type: 'function', function: { name: 'now' } }],
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
      },
      scripted(toolUseAnswer),
    );
    const sent = sentUpstream();
    assert.deepEqual(sent.tools, [anthropicWeatherTool, { name: 'now', input_schema: { type: 'object', properties: {} } }]);
    assert.deepEqual(sent.tool_choice, { type: 'tool', name: 'get_weather' });
    assert.deepEqual(completion.choices[0], {
      index: 0,
      message: {
        role: 'assistant',
        content: 'Let me check.',
        refusal: null,
        tool_calls: [{ id: WEATHER_CALL.id, type: 'function', function: { name: 'get_weather', arguments: JSON.stringify(WEATHER_ARGS) } }],
      },
      logprobs: null,
      finish_reason: 'tool_calls',
    });
  });

  test('openai chat: tool_choice required / none / auto, and parallel_tool_calls: false; tool_choice without tools', async () => {
    const cases: [OpenAI.ChatCompletionCreateParams['tool_choice'], boolean | undefined, Json][] = [
      ['required', undefined, { type: 'any' }],
      ['none', undefined, { type: 'none' }],
      ['auto', false, { type: 'auto', disable_parallel_tool_use: true }],
      [undefined, false, { type: 'auto', disable_parallel_tool_use: true }],
    ];
    for (const [toolChoice, parallel, expected] of cases) {
      mock.reset();
      await client.chat.completions.create({
        model: 'claude-test',
        messages: [{ role: 'user', content: 'Weather?' }],
        tools: [chatWeatherTool],
        ...(toolChoice === undefined ? {} : { tool_choice: toolChoice }),
        ...(parallel === undefined ? {} : { parallel_tool_calls: parallel }),
      });
      assert.deepEqual(sentUpstream().tool_choice, expected, `tool_choice ${String(toolChoice)}, parallel_tool_calls ${String(parallel)}`);
    }
    // Anthropic refuses a tool_choice without tools: 'auto' or 'none' with an empty list is what no tools mean.
    for (const api of ['chat', 'responses'] as const) {
      mock.reset();
      if (api === 'chat') await client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }], tools: [], tool_choice: 'auto' });
      else await client.responses.create({ model: 'claude-test', input: 'hi', tools: [], tool_choice: 'none' });
      const sent = sentUpstream();
      assert.equal('tools' in sent || 'tool_choice' in sent, false, `${api}: ${JSON.stringify(sent)}`);
    }
    mock.reset();
    await assert.rejects(client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }], tools: [], tool_choice: 'required' }), (error: unknown) => {
      assert.ok(error instanceof OpenAI.BadRequestError, `got ${String(error)}`);
      assert.equal(error.code, 'unsupported_parameter');
      assert.match(error.message, /no tools were given .*parameter "tool_choice"/);
      return true;
    });
    assert.equal(mock.received.length, 0);
  });

  test('openai chat.completions.stream(): a tool call whose arguments arrive in pieces reassembles', async () => {
    mock.reset();
    const runner = client.chat.completions.stream(
      { model: 'claude-test', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [chatWeatherTool] },
      scripted(anthropicStream({ blocks: [{ text: ['Let me ', 'check.'] }, { tool: WEATHER_CALL }], stopReason: 'tool_use' })),
    );
    const argumentDeltas: string[] = [];
    const done: { name: string; arguments: string }[] = [];
    // The first chunk of a call carries its id, its name and arguments '' (as OpenAI's do).
    runner.on('tool_calls.function.arguments.delta', (e) => argumentDeltas.push(e.arguments_delta));
    runner.on('tool_calls.function.arguments.done', (e) => done.push({ name: e.name, arguments: e.arguments }));
    const final = await runner.finalChatCompletion();
    assert.deepEqual(argumentDeltas, ['', ...WEATHER_CALL.json]);
    assert.deepEqual(done, [{ name: 'get_weather', arguments: WEATHER_CALL.json.join('') }]);
    const choice = final.choices[0]!;
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, 'Let me check.');
    assert.equal(choice.message.tool_calls?.length, 1);
    const call = choice.message.tool_calls![0]!;
    assert.equal(call.id, WEATHER_CALL.id);
    assert.equal(call.type, 'function');
    assert.equal(call.type === 'function' && call.function.name, 'get_weather');
    assert.deepEqual(call.type === 'function' && JSON.parse(call.function.arguments), WEATHER_ARGS);
    assert.deepEqual(sentUpstream().tools, [anthropicWeatherTool]);
  });

  test('openai chat, stream: true: two tool calls stream under their own indexes', async () => {
    mock.reset();
    const second = { id: 'toolu_02second', name: 'get_weather', json: ['{"city":', '"Rome"}'] };
    const stream = await client.chat.completions.create(
      { model: 'claude-test', messages: [{ role: 'user', content: 'Weather in Paris and Rome?' }], tools: [chatWeatherTool], stream: true },
      scripted(anthropicStream({ blocks: [{ tool: WEATHER_CALL }, { tool: second }], stopReason: 'tool_use' })),
    );
    const calls: { id?: string; name?: string; args: string }[] = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const delta of chunk.choices[0]?.delta.tool_calls ?? []) {
        const call = (calls[delta.index] ??= { args: '' });
        if (delta.id) call.id = delta.id;
        if (delta.function?.name) call.name = delta.function.name;
        call.args += delta.function?.arguments ?? '';
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.deepEqual(calls, [
      { id: WEATHER_CALL.id, name: 'get_weather', args: WEATHER_CALL.json.join('') },
      { id: second.id, name: 'get_weather', args: '{"city":"Rome"}' },
    ]);
    assert.equal(finish, 'tool_calls');
  });

  test('thinking blocks before the text and the call are left out; indexes and items stay consistent', async () => {
    const blocks: StreamBlock[] = [{ thinking: 'The user wants Paris.' }, { text: ['Let me check.'] }, { tool: WEATHER_CALL }];
    const thinkingJson = anthropicMessage(
      [
        { type: 'thinking', thinking: 'The user wants Paris.', signature: 'EqQBCgIYAhIM' },
        { type: 'text', text: 'Let me check.' },
        { type: 'tool_use', id: WEATHER_CALL.id, name: 'get_weather', input: WEATHER_ARGS },
      ],
      'tool_use',
    );
    const chatParams = { model: 'claude-test', messages: [{ role: 'user' as const, content: 'Weather in Paris?' }], tools: [chatWeatherTool] };
    for (const final of [
      await client.chat.completions.stream(chatParams, scripted(anthropicStream({ blocks, stopReason: 'tool_use' }))).finalChatCompletion(),
      await client.chat.completions.create(chatParams, scripted(thinkingJson)),
    ]) {
      const message = final.choices[0]!.message;
      assert.equal(message.content, 'Let me check.');
      assert.deepEqual(message.tool_calls?.map((c) => c.type === 'function' && { id: c.id, name: c.function.name, args: JSON.parse(c.function.arguments) as unknown }), [
        { id: WEATHER_CALL.id, name: 'get_weather', args: WEATHER_ARGS },
      ]);
    }

    const responsesParams = { model: 'claude-test', input: 'Weather in Paris?', tools: [responsesWeatherTool] };
    for (const response of [
      await client.responses.stream(responsesParams, scripted(anthropicStream({ blocks, stopReason: 'tool_use' }))).finalResponse(),
      await client.responses.create(responsesParams, scripted(thinkingJson)),
    ]) {
      assert.deepEqual(response.output.map((item) => item.type), ['message', 'function_call']);
      assert.equal(response.output_text, 'Let me check.');
      const call = response.output[1]!;
      assert.equal(call.type === 'function_call' && call.call_id, WEATHER_CALL.id);
      assert.deepEqual(call.type === 'function_call' && JSON.parse(call.arguments), WEATHER_ARGS);
    }

    const ai = streamText({ model: aiOpenAI(mockHeader(anthropicStream({ blocks, stopReason: 'tool_use' })))('claude-test'), prompt: 'Weather in Paris?', tools: { get_weather: tool({ inputSchema: jsonSchema<{ city: string }>(WEATHER_SCHEMA as never) }) }, maxRetries: 0 });
    assert.equal(await collect(ai.textStream), 'Let me check.');
    assert.deepEqual((await ai.toolCalls).map((c) => c.input), [WEATHER_ARGS]);
  });

  test('openai chat: the follow-up with the tool role result → tool_use and tool_result blocks', async () => {
    mock.reset();
    const completion = await client.chat.completions.create({
      model: 'claude-test',
      messages: [
        { role: 'user', content: 'Weather in Paris and Rome?' },
        {
          role: 'assistant',
          content: 'Let me check.',
          tool_calls: [
            { id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
            { id: 'toolu_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'toolu_1', content: '18°C, sunny' },
        { role: 'tool', tool_call_id: 'toolu_2', content: [{ type: 'text', text: '21°C' }] },
        { role: 'user', content: 'And tomorrow?' },
      ],
      tools: [chatWeatherTool],
    });
    assert.equal(completion.choices[0]!.message.content, 'mock reply');
    assert.deepEqual(sentUpstream().messages, [
      { role: 'user', content: 'Weather in Paris and Rome?' },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Let me check.' },
          { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
          { type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: { city: 'Rome' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_1', content: '18°C, sunny' },
          { type: 'tool_result', tool_use_id: 'toolu_2', content: '21°C' },
          { type: 'text', text: 'And tomorrow?' },
        ],
      },
    ]);
  });

  test('openai responses: function tools and tool_choice translated; a tool_use answer → a function_call item', async () => {
    mock.reset();
    const response = await client.responses.create(
      { model: 'claude-test', input: 'Weather in Paris?', tools: [responsesWeatherTool], tool_choice: { type: 'function', name: 'get_weather' } },
      scripted(toolUseAnswer),
    );
    const sent = sentUpstream();
    assert.deepEqual(sent.tools, [anthropicWeatherTool]);
    assert.deepEqual(sent.tool_choice, { type: 'tool', name: 'get_weather' });
    assert.equal(response.status, 'completed');
    assert.equal(response.output_text, 'Let me check.');
    assert.equal(response.output.length, 2);
    const call = response.output[1]!;
    assert.equal(call.type, 'function_call');
    assert.equal(call.type === 'function_call' && call.call_id, WEATHER_CALL.id);
    assert.equal(call.type === 'function_call' && call.name, 'get_weather');
    assert.deepEqual(call.type === 'function_call' && JSON.parse(call.arguments), WEATHER_ARGS);
  });

  test('openai responses.stream(): arguments in pieces reassemble into the function_call', async () => {
    mock.reset();
    const stream = client.responses.stream(
      { model: 'claude-test', input: 'Weather in Paris?', tools: [responsesWeatherTool], tool_choice: 'required' },
      scripted(anthropicStream({ blocks: [{ text: ['Let me check.'] }, { tool: WEATHER_CALL }], stopReason: 'tool_use' })),
    );
    const deltas: string[] = [];
    stream.on('response.function_call_arguments.delta', (e) => deltas.push(e.delta));
    const final = await stream.finalResponse();
    assert.deepEqual(deltas, WEATHER_CALL.json);
    assert.equal(final.status, 'completed');
    assert.equal(final.output_text, 'Let me check.');
    const call = final.output.find((item) => item.type === 'function_call');
    assert.ok(call?.type === 'function_call', JSON.stringify(final.output));
    assert.equal(call.call_id, WEATHER_CALL.id);
    assert.equal(call.arguments, WEATHER_CALL.json.join(''));
    assert.deepEqual(sentUpstream().tool_choice, { type: 'any' });
  });

  test('openai responses: the follow-up with function_call and function_call_output items → tool_use and tool_result', async () => {
    mock.reset();
    await client.responses.create({
      model: 'claude-test',
      input: [
        { role: 'user', content: 'Weather in Paris?' },
        { type: 'function_call', call_id: 'toolu_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call_output', call_id: 'toolu_1', output: '18°C, sunny' },
      ],
      tools: [responsesWeatherTool],
    });
    assert.deepEqual(sentUpstream().messages, WEATHER_HISTORY_UPSTREAM);
  });

  test('the manual loop, as the openai docs write it: the answer appended as it came back, then the tool result', async () => {
    // Chat Completions: the assistant message object itself (refusal: null, annotations…) goes back.
    mock.reset();
    const params = { model: 'claude-test', tools: [chatWeatherTool] };
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
    const first = await client.chat.completions.stream({ ...params, messages }, scripted(anthropicStream({ blocks: [{ text: ['Let me check.'] }, { tool: WEATHER_CALL }], stopReason: 'tool_use' }))).finalChatCompletion();
    const message = first.choices[0]!.message;
    messages.push(message as OpenAI.ChatCompletionMessageParam, { role: 'tool', tool_call_id: message.tool_calls![0]!.id, content: '18°C' });
    const second = await client.chat.completions.create({ ...params, messages });
    assert.equal(second.choices[0]!.message.content, 'mock reply');
    const expected = [
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Let me check.' },
          { type: 'tool_use', id: WEATHER_CALL.id, name: 'get_weather', input: WEATHER_ARGS },
        ],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: WEATHER_CALL.id, content: '18°C' }] },
    ];
    assert.equal(mock.received.length, 2);
    assert.deepEqual((mock.received[1]!.json as Json).messages, expected);

    // Responses: every output item (message with output_text, function_call, their ids and statuses) goes back.
    mock.reset();
    const input: OpenAI.Responses.ResponseInputItem[] = [{ role: 'user', content: 'Weather in Paris?' }];
    const response = await client.responses.create({ model: 'claude-test', input, tools: [responsesWeatherTool] }, scripted(toolUseAnswer));
    input.push(...(response.output as OpenAI.Responses.ResponseInputItem[]));
    const call = response.output.find((item) => item.type === 'function_call')!;
    input.push({ type: 'function_call_output', call_id: call.type === 'function_call' ? call.call_id : '', output: '18°C' });
    const next = await client.responses.create({ model: 'claude-test', input, tools: [responsesWeatherTool] });
    assert.equal(next.output_text, 'mock reply');
    assert.equal(mock.received.length, 2);
    assert.deepEqual((mock.received[1]!.json as Json).messages, expected);
  });

  const aiWeather = () => ({ get_weather: tool({ description: 'The weather in a city', inputSchema: jsonSchema<{ city: string; unit?: 'c' | 'f' }>(WEATHER_SCHEMA as never) }) });

  for (const api of ['chat', 'responses'] as const) {
    const modelFor = (headers: Record<string, string> = {}) => (api === 'chat' ? aiOpenAI(headers).chat('claude-test') : aiOpenAI(headers)('claude-test'));

    test(`AI SDK (${api}): generateText with tools: the definition goes up, the tool_use comes back as toolCalls`, async () => {
      mock.reset();
      const result = await generateText({ model: modelFor(mockHeader(toolUseAnswer)), prompt: 'Weather in Paris?', tools: aiWeather(), toolChoice: { type: 'tool', toolName: 'get_weather' }, maxRetries: 0 });
      assert.equal(result.finishReason, 'tool-calls');
      assert.equal(result.text, 'Let me check.');
      assert.deepEqual(result.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })), [{ id: WEATHER_CALL.id, name: 'get_weather', input: WEATHER_ARGS }]);
      const sent = sentUpstream();
      assert.equal((sent.tools as Json[]).length, 1);
      const [sentTool] = sent.tools as { name: string; description: string; input_schema: Json }[];
      assert.equal(sentTool!.name, 'get_weather');
      assert.equal(sentTool!.description, 'The weather in a city');
      assert.deepEqual(sentTool!.input_schema.properties, WEATHER_SCHEMA.properties);
      assert.deepEqual(sent.tool_choice, { type: 'tool', name: 'get_weather' });
    });

    test(`AI SDK (${api}): streamText reassembles a tool call streamed in pieces`, async () => {
      mock.reset();
      const scenario = anthropicStream({ blocks: [{ text: ['Let me ', 'check.'] }, { tool: WEATHER_CALL }], stopReason: 'tool_use', finalUsage: { output_tokens: 31 } });
      const result = streamText({ model: modelFor(mockHeader(scenario)), prompt: 'Weather in Paris?', tools: aiWeather(), maxRetries: 0 });
      assert.equal(await collect(result.textStream), 'Let me check.');
      const calls = await result.toolCalls;
      assert.deepEqual(calls.map((c) => ({ id: c.toolCallId, name: c.toolName, input: c.input })), [{ id: WEATHER_CALL.id, name: 'get_weather', input: WEATHER_ARGS }]);
      assert.equal(await result.finishReason, 'tool-calls');
      assert.equal((await result.usage).outputTokens, 31);
    });

    test(`AI SDK (${api}): the follow-up with a tool result → tool_use and tool_result blocks`, async () => {
      mock.reset();
      const messages: ModelMessage[] = [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'toolu_1', toolName: 'get_weather', input: { city: 'Paris' } }] },
        { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'toolu_1', toolName: 'get_weather', output: { type: 'text', value: '18°C, sunny' } }] },
      ];
      const { text } = await generateText({ model: modelFor(), messages, tools: aiWeather(), maxRetries: 0 });
      assert.equal(text, 'mock reply');
      assert.deepEqual(sentUpstream().messages, WEATHER_HISTORY_UPSTREAM);
    });
  }

  test('openai chat.completions.runTools(): the SDK runs the tool and sends its result back as tool_result', async () => {
    mock.reset();
    mock.script((n) => (n === 0 ? anthropicStream({ blocks: [{ tool: WEATHER_CALL }], stopReason: 'tool_use' }) : undefined));
    try {
      const seen: unknown[] = [];
      const runner = client.chat.completions.runTools({
        model: 'claude-test',
        messages: [{ role: 'user', content: 'Weather in Paris?' }],
        stream: true,
        tools: [
          {
            type: 'function',
            function: {
              name: 'get_weather',
              description: 'The weather in a city',
              parameters: WEATHER_SCHEMA,
              parse: JSON.parse,
              function: (args: unknown) => {
                seen.push(args);
                return '18°C, sunny';
              },
            },
          },
        ],
      });
      assert.equal(await runner.finalContent(), 'mock reply');
      assert.deepEqual(seen, [WEATHER_ARGS]);
      assert.equal(mock.received.length, 2);
      assert.deepEqual((mock.received[1]!.json as Json).messages, [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: [{ type: 'tool_use', id: WEATHER_CALL.id, name: 'get_weather', input: WEATHER_ARGS }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: WEATHER_CALL.id, content: '18°C, sunny' }] },
      ]);
    } finally {
      mock.script(undefined);
    }
  });

  for (const api of ['chat', 'responses'] as const) {
    test(`AI SDK (${api}): a two-step agent loop (tool with execute): the tool's output goes back as tool_result`, async () => {
      mock.reset();
      mock.script((n) => (n === 0 ? anthropicStream({ blocks: [{ text: ['Let me check.'] }, { tool: WEATHER_CALL }], stopReason: 'tool_use' }) : undefined));
      try {
        const tools = { get_weather: tool({ description: 'The weather in a city', inputSchema: jsonSchema<{ city: string }>(WEATHER_SCHEMA as never), execute: async ({ city }) => `18°C in ${city}` }) };
        // store: false makes the AI SDK replay the whole conversation (see the next test).
        const providerOptions = api === 'responses' ? { openai: { store: false } } : undefined;
        const result = streamText({ model: api === 'chat' ? aiOpenAI().chat('claude-test') : aiOpenAI()('claude-test'), prompt: 'Weather in Paris?', tools, stopWhen: isStepCount(2), maxRetries: 0, providerOptions });
        assert.equal(await collect(result.textStream), 'Let me check.mock reply');
        assert.equal((await result.steps).length, 2);
        assert.equal(mock.received.length, 2);
        assert.deepEqual((mock.received[1]!.json as Json).messages, [
          { role: 'user', content: 'Weather in Paris?' },
          {
            role: 'assistant',
            content: [
              { type: 'text', text: 'Let me check.' },
              { type: 'tool_use', id: WEATHER_CALL.id, name: 'get_weather', input: WEATHER_ARGS },
            ],
          },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: WEATHER_CALL.id, content: '18°C in Paris' }] },
        ]);
      } finally {
        mock.script(undefined);
      }
    });
  }

  test('AI SDK (responses), agent loop with the default store: the second step refers to the first answer by item_reference, a 400 naming it', async () => {
    // The AI SDK replays an earlier answer's text as {type: 'item_reference', id} unless
    // providerOptions.openai.store is false; Anthropic keeps nothing to refer to.
    mock.reset();
    mock.script((n) => (n === 0 ? anthropicStream({ blocks: [{ text: ['Let me check.'] }, { tool: WEATHER_CALL }], stopReason: 'tool_use' }) : undefined));
    try {
      const tools = { get_weather: tool({ inputSchema: jsonSchema<{ city: string }>(WEATHER_SCHEMA as never), execute: async () => '18°C' }) };
      const errors: unknown[] = [];
      const result = streamText({ model: aiOpenAI()('claude-test'), prompt: 'Weather in Paris?', tools, stopWhen: isStepCount(2), maxRetries: 0, onError: ({ error }) => void errors.push(error) });
      assert.equal(await collect(result.textStream), 'Let me check.');
      assert.equal(errors.length, 1);
      assert.ok(APICallError.isInstance(errors[0]), String(errors[0]));
      assert.equal(errors[0].statusCode, 400);
      assert.match(errors[0].message, /item_reference is not supported .*parameter "input\[1\]"/);
      assert.equal(mock.received.length, 1);
    } finally {
      mock.script(undefined);
    }
  });

  test('LangChain ChatOpenAI.bindTools, streamed: tool call chunks reassemble', async () => {
    mock.reset();
    const scenario = anthropicStream({ blocks: [{ tool: WEATHER_CALL }], stopReason: 'tool_use' });
    const chat = new ChatOpenAI({ model: 'claude-test', apiKey: CLIENT_KEY, maxRetries: 0, configuration: { baseURL: base, defaultHeaders: mockHeader(scenario) } });
    let whole: AIMessageChunk | undefined;
    for await (const chunk of await chat.bindTools([chatWeatherTool]).stream('Weather in Paris?')) whole = whole === undefined ? chunk : whole.concat(chunk);
    assert.deepEqual(whole?.tool_calls?.map((c) => ({ id: c.id, name: c.name, args: c.args })), [{ id: WEATHER_CALL.id, name: 'get_weather', args: WEATHER_ARGS }]);
  });

  test('LangChain ChatOpenAI.bindTools: a tool_use answer → tool_calls with parsed args', async () => {
    mock.reset();
    const chat = new ChatOpenAI({ model: 'claude-test', apiKey: CLIENT_KEY, maxRetries: 0, configuration: { baseURL: base, defaultHeaders: mockHeader(toolUseAnswer) } });
    const reply = await chat.bindTools([chatWeatherTool]).invoke('Weather in Paris?');
    assert.deepEqual(reply.tool_calls?.map((c) => ({ id: c.id, name: c.name, args: c.args })), [{ id: WEATHER_CALL.id, name: 'get_weather', args: WEATHER_ARGS }]);
    assert.deepEqual(sentUpstream().tools, [anthropicWeatherTool]);
  });
});

// =============================================================================================
describe('4. stop reasons', () => {
  const text = [{ type: 'text', text: 'Once upon' }];
  const cases: [anthropic: string, chat: string, aiSdk: string][] = [
    ['end_turn', 'stop', 'stop'],
    ['stop_sequence', 'stop', 'stop'],
    ['max_tokens', 'length', 'length'],
    ['tool_use', 'tool_calls', 'tool-calls'],
  ];

  test('openai chat, JSON: end_turn → stop, stop_sequence → stop, max_tokens → length, tool_use → tool_calls', async () => {
    for (const [anthropic, chat] of cases) {
      const completion = await client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'a story' }] }, scripted(anthropicMessage(text, anthropic)));
      assert.equal(completion.choices[0]!.finish_reason, chat, anthropic);
    }
  });

  test('openai chat, streamed (stream helper): max_tokens → length, end_turn → stop', async () => {
    for (const [anthropic, chat] of [cases[2]!, cases[0]!]) {
      const runner = client.chat.completions.stream({ model: 'claude-test', messages: [{ role: 'user', content: 'a story' }] }, scripted(anthropicStream({ blocks: [{ text: ['Once ', 'upon'] }], stopReason: anthropic })));
      const final = await runner.finalChatCompletion();
      assert.equal(final.choices[0]!.finish_reason, chat, anthropic);
      assert.equal(final.choices[0]!.message.content, 'Once upon');
    }
  });

  test('openai responses, JSON: max_tokens → incomplete (max_output_tokens); end_turn → completed', async () => {
    const cut = await client.responses.create({ model: 'claude-test', input: 'a story', max_output_tokens: 16 }, scripted(anthropicMessage(text, 'max_tokens')));
    assert.equal(cut.status, 'incomplete');
    assert.deepEqual(cut.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(cut.output_text, 'Once upon');
    const whole = await client.responses.create({ model: 'claude-test', input: 'a story' }, scripted(anthropicMessage(text, 'end_turn')));
    assert.equal(whole.status, 'completed');
    assert.equal(whole.incomplete_details, null);
  });

  test('openai responses, streamed (stream: true and responses.stream()): max_tokens ends with response.incomplete', async () => {
    const stream = await client.responses.create(
      { model: 'claude-test', input: 'a story', stream: true },
      scripted(anthropicStream({ blocks: [{ text: ['Once ', 'upon'] }], stopReason: 'max_tokens' })),
    );
    let last: OpenAI.Responses.ResponseStreamEvent | undefined;
    for await (const event of stream) last = event;
    assert.equal(last?.type, 'response.incomplete');
    assert.equal(last.type === 'response.incomplete' && last.response.status, 'incomplete');
    assert.deepEqual(last.type === 'response.incomplete' && last.response.incomplete_details, { reason: 'max_output_tokens' });


    const final = await client.responses.stream({ model: 'claude-test', input: 'a story' }, scripted(anthropicStream({ blocks: [{ text: ['Once ', 'upon'] }], stopReason: 'max_tokens' }))).finalResponse();
    assert.equal(final.status, 'incomplete');
    assert.deepEqual(final.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(final.output_text, 'Once upon');
  });

  test('AI SDK finishReason, chat and Responses, plain and streamed', async () => {
    const toolUse = { type: 'tool_use', id: WEATHER_CALL.id, name: 'get_weather', input: WEATHER_ARGS };
    for (const [anthropic, , expected] of cases.filter(([a]) => a !== 'stop_sequence')) {
      // A tool_use stop comes with the call it stops for.
      const content = anthropic === 'tool_use' ? [...text, toolUse] : text;
      const blocks: StreamBlock[] = anthropic === 'tool_use' ? [{ text: ['Once ', 'upon'] }, { tool: WEATHER_CALL }] : [{ text: ['Once ', 'upon'] }];
      for (const api of ['chat', 'responses'] as const) {
        const openai = aiOpenAI(mockHeader(anthropicMessage(content, anthropic)));
        const result = await generateText({ model: api === 'chat' ? openai.chat('claude-test') : openai('claude-test'), prompt: 'a story', maxRetries: 0 });
        assert.equal(result.finishReason, expected, `${api} ${anthropic}`);
        assert.equal(result.text, 'Once upon');

        const streaming = aiOpenAI(mockHeader(anthropicStream({ blocks, stopReason: anthropic })));
        const streamed = streamText({ model: api === 'chat' ? streaming.chat('claude-test') : streaming('claude-test'), prompt: 'a story', maxRetries: 0 });
        assert.equal(await collect(streamed.textStream), 'Once upon');
        assert.equal(await streamed.finishReason, expected, `${api} ${anthropic}, streamed`);
      }
    }
  });
});

// =============================================================================================
describe('5. usage', () => {
  // Anthropic counts cache reads and writes apart from input_tokens; OpenAI's prompt tokens include them.
  const USAGE = { input_tokens: 20, cache_read_input_tokens: 100, cache_creation_input_tokens: 5, output_tokens: 7 };
  const PROMPT = 125;

  test('openai chat, JSON: prompt_tokens includes cached input, cached_tokens is the cache read', async () => {
    const completion = await client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }] }, scripted(anthropicMessage([{ type: 'text', text: 'ok' }], 'end_turn', USAGE)));
    assert.deepEqual(completion.usage, { prompt_tokens: PROMPT, completion_tokens: 7, total_tokens: PROMPT + 7, prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 5 } });
  });

  const streamUsage = anthropicStream({
    blocks: [{ text: ['o', 'k'] }],
    usage: { input_tokens: 20, cache_read_input_tokens: 100, cache_creation_input_tokens: 5, output_tokens: 1 },
    finalUsage: { output_tokens: 7 },
  });

  test('openai chat, streamed with stream_options.include_usage: a last chunk with the usage, null before', async () => {
    const stream = await client.chat.completions.create(
      { model: 'claude-test', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } },
      scripted(streamUsage),
    );
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1)!;
    assert.deepEqual(last.choices, []);
    assert.deepEqual(last.usage, { prompt_tokens: PROMPT, completion_tokens: 7, total_tokens: PROMPT + 7, prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 5 } });
    assert.ok(chunks.length > 2);
    for (const chunk of chunks.slice(0, -1)) assert.equal(chunk.usage, null);
  });

  test('openai chat, streamed without include_usage: no usage anywhere', async () => {
    const stream = await client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }], stream: true }, scripted(streamUsage));
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.ok(chunks.length > 2);
    for (const chunk of chunks) {
      assert.equal('usage' in chunk, false, JSON.stringify(chunk));
      assert.equal(chunk.choices.length, 1);
    }
  });

  test('openai chat.completions.stream() with include_usage: finalChatCompletion().usage', async () => {
    const runner = client.chat.completions.stream({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }], stream_options: { include_usage: true } }, scripted(streamUsage));
    const final = await runner.finalChatCompletion();
    assert.equal(final.choices[0]!.message.content, 'ok');
    assert.deepEqual(final.usage, { prompt_tokens: PROMPT, completion_tokens: 7, total_tokens: PROMPT + 7, prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 5 } });
  });

  const responsesUsage = {
    input_tokens: PROMPT,
    input_tokens_details: { cached_tokens: 100, cache_write_tokens: 5 },
    output_tokens: 7,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: PROMPT + 7,
  };

  test('openai responses: usage, JSON and streamed', async () => {
    const response = await client.responses.create({ model: 'claude-test', input: 'hi' }, scripted(anthropicMessage([{ type: 'text', text: 'ok' }], 'end_turn', USAGE)));
    assert.deepEqual(response.usage, responsesUsage);
    const final = await client.responses.stream({ model: 'claude-test', input: 'hi' }, scripted(streamUsage)).finalResponse();
    assert.equal(final.output_text, 'ok');
    assert.deepEqual(final.usage, responsesUsage);
  });

  test('AI SDK usage: chat and Responses, generateText and streamText', async () => {
    for (const api of ['chat', 'responses'] as const) {
      const json = aiOpenAI(mockHeader(anthropicMessage([{ type: 'text', text: 'ok' }], 'end_turn', USAGE)));
      const { usage } = await generateText({ model: api === 'chat' ? json.chat('claude-test') : json('claude-test'), prompt: 'hi', maxRetries: 0 });
      assert.equal(usage.inputTokens, PROMPT, api);
      assert.equal(usage.outputTokens, 7, api);
      assert.equal(usage.totalTokens, PROMPT + 7, api);
      assert.equal(usage.inputTokenDetails.cacheReadTokens, 100, api);
      assert.equal(usage.inputTokenDetails.cacheWriteTokens, 5, api);
      assert.equal(usage.inputTokenDetails.noCacheTokens, 20, api);

      mock.reset();
      const sse = aiOpenAI(mockHeader(streamUsage));
      const result = streamText({ model: api === 'chat' ? sse.chat('claude-test') : sse('claude-test'), prompt: 'hi', maxRetries: 0 });
      assert.equal(await collect(result.textStream), 'ok');
      const streamed = await result.usage;
      assert.equal(streamed.inputTokens, PROMPT, `${api}, streamed`);
      assert.equal(streamed.outputTokens, 7, `${api}, streamed`);
      assert.equal(streamed.inputTokenDetails.cacheReadTokens, 100, `${api}, streamed`);
      assert.equal(streamed.inputTokenDetails.cacheWriteTokens, 5, `${api}, streamed`);
    }
  });

  test('LangChain ChatOpenAI: usage_metadata, invoke and stream', async () => {
    const json = new ChatOpenAI({ model: 'claude-test', apiKey: CLIENT_KEY, maxRetries: 0, configuration: { baseURL: base, defaultHeaders: mockHeader(anthropicMessage([{ type: 'text', text: 'ok' }], 'end_turn', USAGE)) } });
    const reply = await json.invoke('hi');
    assert.equal(reply.content, 'ok');
    assert.equal(reply.usage_metadata?.input_tokens, PROMPT);
    assert.equal(reply.usage_metadata?.output_tokens, 7);
    assert.equal(reply.usage_metadata?.total_tokens, PROMPT + 7);
    assert.equal(reply.usage_metadata?.input_token_details?.cache_read, 100);

    const sse = new ChatOpenAI({ model: 'claude-test', apiKey: CLIENT_KEY, maxRetries: 0, configuration: { baseURL: base, defaultHeaders: mockHeader(streamUsage) } });
    let whole: AIMessageChunk | undefined;
    for await (const chunk of await sse.stream('hi')) whole = whole === undefined ? chunk : whole.concat(chunk);
    assert.equal(whole?.content, 'ok');
    assert.equal(whole?.usage_metadata?.input_tokens, PROMPT);
    assert.equal(whole?.usage_metadata?.output_tokens, 7);
    assert.equal(whole?.usage_metadata?.input_token_details?.cache_read, 100);
  });
});

// =============================================================================================
describe('6. errors', () => {
  const anthropicError = (status: number, type: string, message: string): MockScenario => ({ status, body: { type: 'error', error: { type, message } } });
  const cases: [status: number, type: string, message: string, sdkClass: abstract new (...args: never[]) => InstanceType<typeof OpenAI.APIError>][] = [
    [429, 'rate_limit_error', 'Number of request tokens has exceeded your per-minute rate limit', OpenAI.RateLimitError],
    [400, 'invalid_request_error', 'messages: text content blocks must be non-empty', OpenAI.BadRequestError],
    [529, 'overloaded_error', 'Overloaded', OpenAI.InternalServerError],
  ];
  const openaiType: Record<number, string> = { 429: 'rate_limit_exceeded', 400: 'invalid_request_error', 529: 'server_error' };

  test('openai chat and responses: an Anthropic 429 / 400 / 529 is the matching SDK exception, with the message', async () => {
    for (const [status, type, message, sdkClass] of cases) {
      const calls = [
        () => client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }] }, scripted(anthropicError(status, type, message))),
        () => client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }], stream: true }, scripted(anthropicError(status, type, message))),
        () => client.responses.create({ model: 'claude-test', input: 'hi' }, scripted(anthropicError(status, type, message))),
        () => client.responses.stream({ model: 'claude-test', input: 'hi' }, scripted(anthropicError(status, type, message))).finalResponse(),
      ];
      for (const [i, call] of calls.entries()) {
        await assert.rejects(call(), (error: unknown) => {
          assert.ok(error instanceof sdkClass, `${status} (call ${i}): got ${String(error)}`);
          assert.equal(error.status, status);
          assert.equal(error.message, `${status} ${message}`);
          assert.equal(error.type, openaiType[status]);
          assert.equal(error.code, type);
          return true;
        });
      }
    }
  });

  test('AI SDK: an Anthropic 429 / 529 is an APICallError with the status and message', async () => {
    for (const [status, type, message] of [cases[0]!, cases[2]!]) {
      for (const api of ['chat', 'responses'] as const) {
        const openai = aiOpenAI(mockHeader(anthropicError(status, type, message)));
        await assert.rejects(generateText({ model: api === 'chat' ? openai.chat('claude-test') : openai('claude-test'), prompt: 'hi', maxRetries: 0 }), (error: unknown) => {
          assert.ok(APICallError.isInstance(error), `${api} ${status}: got ${String(error)}`);
          assert.equal(error.statusCode, status);
          assert.equal(error.message, message);
          return true;
        });
      }
    }
  });

  const midStreamError = (after: string[]): MockScenario => {
    const events: MockSseEvent[] = [
      ev('message_start', { message: { id: 'msg_01err', type: 'message', role: 'assistant', model: UPSTREAM_MODEL, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } }),
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
      ...after.map((text) => ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text } })),
      ev('error', { error: { type: 'overloaded_error', message: 'Overloaded' } }),
    ];
    return { sse: events, sseDone: false };
  };

  test('openai chat, streamed: an Anthropic error event after content throws an APIError with its message', async () => {
    for (const [what, before] of [['after content', ['Once ', 'upon']], ['before content', []]] as const) {
      const stream = await client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }], stream: true }, scripted(midStreamError([...before])));
      let text = '';
      await assert.rejects(
        (async () => {
          for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
        })(),
        (error: unknown) => {
          assert.ok(error instanceof OpenAI.APIError, `${what}: got ${String(error)}`);
          assert.equal(error.message, 'Overloaded');
          assert.equal(error.code, 'overloaded_error');
          return true;
        },
      );
      assert.equal(text, before.join(''), what);
    }
  });

  test('openai chat.completions.stream(): the error event rejects finalChatCompletion()', async () => {
    const runner = client.chat.completions.stream({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }] }, scripted(midStreamError(['Once '])));
    let text = '';
    runner.on('content', (delta) => (text += delta));
    await assert.rejects(runner.finalChatCompletion(), (error: unknown) => {
      assert.ok(error instanceof OpenAI.APIError, `got ${String(error)}`);
      assert.equal(error.message, 'Overloaded');
      return true;
    });
    assert.equal(text, 'Once ');
  });

  test('openai responses, streamed: an Anthropic error event (after content, or before) is the error event, and the last', async () => {
    for (const [what, before] of [['after content', ['Once ', 'upon']], ['before content', []]] as const) {
      const stream = await client.responses.create({ model: 'claude-test', input: 'hi', stream: true }, scripted(midStreamError([...before])));
      const events: OpenAI.Responses.ResponseStreamEvent[] = [];
      for await (const event of stream) events.push(event);
      const last = events.at(-1)!;
      assert.equal(last.type, 'error', what);
      assert.equal(last.type === 'error' && last.message, 'Overloaded', what);
      assert.equal(last.type === 'error' && last.code, 'overloaded_error', what);
      assert.equal(events[0]!.type, 'response.created', what);
      assert.equal(events.filter((e) => e.type === 'response.output_text.delta').map((e) => (e.type === 'response.output_text.delta' ? e.delta : '')).join(''), before.join(''), what);
      assert.ok(!events.some((e) => e.type === 'response.completed'), what);
    }
  });

  test('openai responses.stream(): the error event rejects finalResponse() (the SDK rejects with the event itself)', async () => {
    const stream = client.responses.stream({ model: 'claude-test', input: 'hi' }, scripted(midStreamError(['Once '])));
    let text = '';
    stream.on('response.output_text.delta', (e) => (text += e.delta));
    await assert.rejects(stream.finalResponse(), (error: unknown) => {
      assert.deepEqual({ ...(error as Json), sequence_number: 0 }, { type: 'error', code: 'overloaded_error', message: 'Overloaded', param: null, sequence_number: 0 });
      return true;
    });
    assert.equal(text, 'Once ');
  });

  test('a stream the provider ends before message_stop is an error for the client, never a clean end', async () => {
    const cut: MockScenario = { ...midStreamError(['Once ', 'upon']) };
    cut.sse = cut.sse!.slice(0, -1); // no error event either: the stream just stops
    const stream = await client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }], stream: true }, scripted(cut));
    let text = '';
    await assert.rejects(
      (async () => {
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      })(),
      (error: unknown) => {
        assert.ok(error instanceof OpenAI.APIError, `got ${String(error)}`);
        assert.equal(error.message, 'provider "anthropic" ended the stream before the response was complete');
        assert.equal(error.code, 'upstream_stream_cut');
        return true;
      },
    );
    assert.equal(text, 'Once upon');

    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of await client.responses.create({ model: 'claude-test', input: 'hi', stream: true }, scripted(cut))) events.push(event);
    const last = events.at(-1)!;
    assert.equal(last.type, 'error');
    assert.equal(last.type === 'error' && last.message, 'provider "anthropic" ended the stream before the response was complete');
    assert.equal(last.type === 'error' && last.code, 'upstream_stream_cut');

    for (const api of ['chat', 'responses'] as const) {
      const openai = aiOpenAI(mockHeader(cut));
      const errors: unknown[] = [];
      const result = streamText({ model: api === 'chat' ? openai.chat('claude-test') : openai('claude-test'), prompt: 'hi', maxRetries: 0, onError: ({ error }) => void errors.push(error) });
      assert.equal(await collect(result.textStream), 'Once upon', api);
      assert.equal(errors.length, 1, api);
      assert.match(JSON.stringify(errors[0]) + String((errors[0] as Error).message), /ended the stream before the response was complete/, api);
    }
  });

  test('AI SDK streamText: an Anthropic error event after content reaches onError', async () => {
    for (const api of ['chat', 'responses'] as const) {
      const openai = aiOpenAI(mockHeader(midStreamError(['Once ', 'upon'])));
      const errors: unknown[] = [];
      const result = streamText({ model: api === 'chat' ? openai.chat('claude-test') : openai('claude-test'), prompt: 'hi', maxRetries: 0, onError: ({ error }) => void errors.push(error) });
      assert.equal(await collect(result.textStream), 'Once upon', api);
      assert.equal(errors.length, 1, api);
      assert.match(JSON.stringify(errors[0]) + String((errors[0] as Error).message), /Overloaded/, api);
    }
  });

  test('a 200 answer whose body is not JSON is a 502 upstream_invalid_answer', async () => {
    await assert.rejects(client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }] }, scripted({ rawBody: '{"id": "msg_01", "content": [' })), (error: unknown) => {
      assert.ok(error instanceof OpenAI.APIError, `got ${String(error)}`);
      assert.equal(error.status, 502);
      assert.equal(error.code, 'upstream_invalid_answer');
      return true;
    });
  });

  const refused = (param: RegExp) => (error: unknown) => {
    assert.ok(error instanceof OpenAI.BadRequestError, `got ${String(error)}`);
    assert.equal(error.status, 400);
    assert.equal(error.code, 'unsupported_parameter');
    assert.match(error.message, param);
    return true;
  };

  test('a parameter Anthropic cannot express is a 400 naming it, and nothing goes upstream', async () => {
    mock.reset();
    await assert.rejects(client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }], n: 2 }), refused(/parameter "n"/));
    await assert.rejects(
      client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }], response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {} } } }),
      refused(/parameter "response_format"/),
    );
    await assert.rejects(client.responses.create({ model: 'claude-test', input: 'hi', previous_response_id: 'resp_123' }), refused(/parameter "previous_response_id"/));
    await assert.rejects(
      client.responses.create({ model: 'claude-test', input: [{ type: 'item_reference', id: 'msg_123' }] }),
      refused(/parameter "input\[0\]"/),
    );
    await assert.rejects(
      generateText({ model: aiOpenAI().chat('claude-test'), prompt: 'hi', maxRetries: 0, providerOptions: { openai: { logprobs: 2 } } }),
      (error: unknown) => {
        assert.ok(APICallError.isInstance(error), `got ${String(error)}`);
        assert.equal(error.statusCode, 400);
        assert.match(error.message, /parameter "logprobs"/);
        return true;
      },
    );
    assert.equal(mock.received.length, 0);
  });

  test('a dropped parameter is named in sluice-dropped-params, and not sent', async () => {
    mock.reset();
    const chat = await client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }], seed: 42, frequency_penalty: 0.5 }).withResponse();
    assert.equal(chat.response.headers.get('sluice-dropped-params'), 'seed, frequency_penalty');
    assert.equal(chat.data.choices[0]!.message.content, 'mock reply');
    const sent = sentUpstream();
    assert.equal('seed' in sent, false);
    assert.equal('frequency_penalty' in sent, false);

    mock.reset();
    const streamed = await client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }], seed: 42, stream: true }).withResponse();
    assert.equal(streamed.response.headers.get('sluice-dropped-params'), 'seed');
    let text = '';
    for await (const chunk of streamed.data) text += chunk.choices[0]?.delta.content ?? '';
    assert.equal(text, 'mock reply');

    mock.reset();
    const responses = await client.responses.create({ model: 'claude-test', input: 'hi', safety_identifier: 'user-1', store: false }).withResponse();
    // store: false is what Anthropic does anyway: not reported.
    assert.equal(responses.response.headers.get('sluice-dropped-params'), 'safety_identifier');
    assert.equal(responses.data.output_text, 'mock reply');

    mock.reset();
    const plain = await client.chat.completions.create({ model: 'claude-test', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
    assert.equal(plain.response.headers.get('sluice-dropped-params'), null);
  });
});
