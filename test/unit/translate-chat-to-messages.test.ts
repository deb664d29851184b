// The chat → messages translator: an OpenAI Chat Completions client served by an Anthropic
// Messages provider. Request fixtures are typed as the OpenAI SDK's params and expected bodies as
// the Anthropic SDK's, so a shape either SDK would not accept fails the typecheck; answers are read
// back through the `openai` client itself.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import type Anthropic from '@anthropic-ai/sdk';
import { chatStreamTranslator, chatToMessages } from '../../src/translate/chat-to-messages.ts';
import { TranslationError, type Json, type StreamTranslator } from '../../src/translate/types.ts';
import { toOpenAIError } from '../../src/translate/errors.ts';
import { streamErrorEvent } from '../../src/gateway/stream-errors.ts';
import { errors } from '../../src/api/errors.ts';

type ChatParams = OpenAI.ChatCompletionCreateParams;

function translate(body: ChatParams | Json, model = 'claude-up'): { body: Json; dropped: readonly string[] } {
  return chatToMessages.request(body as Json, model);
}

function refuses(body: Json, param: string, message?: RegExp): void {
  assert.throws(
    () => chatToMessages.request(body, 'claude-up'),
    (error: unknown) => {
      assert.ok(error instanceof TranslationError, `expected a TranslationError, got ${String(error)}`);
      assert.equal(error.param, param);
      if (message !== undefined) assert.match(error.message, message);
      return true;
    },
  );
}

const hello = [{ role: 'user', content: 'hi' }] satisfies ChatParams['messages'];

// ---- request --------------------------------------------------------------------------------

test('request: model is the upstream model; max_tokens defaults to 4096', () => {
  const out = translate({ model: 'gpt-4o', messages: hello });
  assert.deepEqual(out.body, {
    model: 'claude-up',
    max_tokens: 4096,
    messages: [{ role: 'user', content: 'hi' }],
  } satisfies Anthropic.MessageCreateParams);
  assert.deepEqual(out.dropped, []);
});

test('request: max_completion_tokens wins over max_tokens, which wins over the default', () => {
  assert.equal(translate({ model: 'm', messages: hello, max_tokens: 50 }).body.max_tokens, 50);
  assert.equal(translate({ model: 'm', messages: hello, max_tokens: 50, max_completion_tokens: 70 }).body.max_tokens, 70);
  assert.equal(translate({ model: 'm', messages: hello, max_tokens: null, max_completion_tokens: null }).body.max_tokens, 4096);
});

test('request: system and developer messages, wherever they stand, become the system prompt in order', () => {
  const one = translate({ model: 'm', messages: [{ role: 'system', content: 'Be brief.' }, ...hello] });
  assert.equal(one.body.system, 'Be brief.');
  const onePart = translate({ model: 'm', messages: [{ role: 'developer', content: [{ type: 'text', text: 'Be brief.' }] }, ...hello] });
  assert.equal(onePart.body.system, 'Be brief.');

  const many = translate({
    model: 'm',
    messages: [
      { role: 'system', content: 'A' },
      { role: 'user', content: 'q1' },
      { role: 'developer', content: [{ type: 'text', text: 'B' }, { type: 'text', text: 'C' }] },
      { role: 'user', content: 'q2' },
    ],
  });
  assert.deepEqual(many.body, {
    model: 'claude-up',
    max_tokens: 4096,
    system: [
      { type: 'text', text: 'A' },
      { type: 'text', text: 'B' },
      { type: 'text', text: 'C' },
    ],
    // Without the system message between them, the two user messages are one (alternation).
    messages: [{ role: 'user', content: [{ type: 'text', text: 'q1' }, { type: 'text', text: 'q2' }] }],
  } satisfies Anthropic.MessageCreateParams);
});

test('request: user content parts: text, base64 and URL images', () => {
  const out = translate({
    model: 'm',
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is this?' },
          { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
          { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
        ],
      },
    ],
  });
  assert.deepEqual(out.body.messages, [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What is this?' },
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
        { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
      ],
    },
  ] satisfies Anthropic.MessageParam[]);
  assert.deepEqual(out.dropped, []);
});

test('request: an image detail other than auto is dropped and named', () => {
  const out = translate({
    model: 'm',
    messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/a.png', detail: 'high' } }] }],
  });
  assert.deepEqual(out.dropped, ['messages[].content[].image_url.detail']);
});

test('request: an explicit prompt-cache breakpoint on a part is cache_control on the block', () => {
  const out = translate({
    model: 'm',
    messages: [
      { role: 'system', content: [{ type: 'text', text: 'Long context', prompt_cache_breakpoint: { mode: 'explicit' } }] },
      { role: 'user', content: [{ type: 'text', text: 'q', prompt_cache_breakpoint: { mode: 'explicit' } }] },
    ],
  });
  assert.deepEqual(out.body.system, [{ type: 'text', text: 'Long context', cache_control: { type: 'ephemeral' } }] satisfies Anthropic.TextBlockParam[]);
  assert.deepEqual(out.body.messages, [{ role: 'user', content: [{ type: 'text', text: 'q', cache_control: { type: 'ephemeral' } }] }]);
});

test('request: audio and file parts, unreadable images and unknown parts are refused', () => {
  refuses(
    { model: 'm', messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }] }] },
    'messages[0].content[0]',
    /audio/,
  );
  refuses({ model: 'm', messages: [hello[0], { role: 'assistant', content: 'ok' }, { role: 'user', content: [{ type: 'text', text: 'x' }, { type: 'file', file: { file_id: 'file-1' } }] }] }, 'messages[2].content[1]', /file/);
  refuses({ model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/tiff;base64,AAAA' } }] }] }, 'messages[0].content[0]', /image\/tiff/);
  refuses({ model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'ftp://example.com/a.png' } }] }] }, 'messages[0].content[0]');
  refuses({ model: 'm', messages: [{ role: 'user', content: [{ type: 'video', video: {} }] }] }, 'messages[0].content[0]', /unknown content part/);
});

test('request: assistant text and tool calls become text and tool_use blocks; tool results one user message', () => {
  const out = translate({
    model: 'm',
    messages: [
      { role: 'user', content: 'Weather in Paris and time in Tokyo?' },
      {
        role: 'assistant',
        content: 'Let me check.',
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
          { id: 'call_2', type: 'function', function: { name: 'time', arguments: '{"tz":"Asia/Tokyo"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '18°C' },
      { role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: '09:00' }] },
      { role: 'user', content: 'Thanks. And tomorrow?' },
    ],
  });
  assert.deepEqual(out.body.messages, [
    { role: 'user', content: 'Weather in Paris and time in Tokyo?' },
    {
      role: 'assistant',
      content: [
        { type: 'text', text: 'Let me check.' },
        { type: 'tool_use', id: 'call_1', name: 'weather', input: { city: 'Paris' } },
        { type: 'tool_use', id: 'call_2', name: 'time', input: { tz: 'Asia/Tokyo' } },
      ],
    },
    {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'call_1', content: '18°C' },
        { type: 'tool_result', tool_use_id: 'call_2', content: '09:00' },
        { type: 'text', text: 'Thanks. And tomorrow?' },
      ],
    },
  ] satisfies Anthropic.MessageParam[]);
});

test('request: an assistant message with empty or null content keeps only its tool calls; empty arguments are {}', () => {
  for (const content of ['', null, []] as const) {
    const out = translate({
      model: 'm',
      messages: [hello[0], { role: 'assistant', content, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'now', arguments: '' } }] }],
    });
    assert.deepEqual(out.body.messages, [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'c1', name: 'now', input: {} }] },
    ]);
  }
});

test('request: refusal parts and a refusal field are kept as assistant text', () => {
  const out = translate({
    model: 'm',
    messages: [hello[0], { role: 'assistant', content: [{ type: 'refusal', refusal: 'I cannot help with that.' }] }, { role: 'user', content: 'ok' }],
  });
  assert.deepEqual((out.body.messages as Json[])[1], { role: 'assistant', content: 'I cannot help with that.' });
  const field = translate({ model: 'm', messages: [hello[0], { role: 'assistant', content: null, refusal: 'No.' }] });
  assert.deepEqual((field.body.messages as Json[])[1], { role: 'assistant', content: 'No.' });
});

test('request: unparseable or non-object tool call arguments are refused on messages[i].tool_calls', () => {
  const call = (args: string) => ({
    model: 'm',
    messages: [hello[0], { role: 'assistant', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: args } }] }],
  });
  refuses(call('{"city":'), 'messages[1].tool_calls', /not valid JSON/);
  refuses(call('[1,2]'), 'messages[1].tool_calls', /JSON object/);
  refuses({ model: 'm', messages: [hello[0], { role: 'assistant', tool_calls: [{ id: 'c1', type: 'custom', custom: { name: 'f', input: 'x' } }] }] }, 'messages[1].tool_calls');
});

test('request: consecutive messages of one role merge', () => {
  const out = translate({
    model: 'm',
    messages: [
      { role: 'user', content: 'a' },
      { role: 'user', content: 'b' },
      { role: 'assistant', content: 'c' },
      { role: 'assistant', content: 'd' },
    ],
  });
  assert.deepEqual(out.body.messages, [
    { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
    { role: 'assistant', content: [{ type: 'text', text: 'c' }, { type: 'text', text: 'd' }] },
  ]);
});

test('request: the legacy function role and unknown roles are refused; message names are dropped', () => {
  refuses({ model: 'm', messages: [hello[0], { role: 'function', name: 'f', content: '1' }] }, 'messages[1].role', /legacy/);
  refuses({ model: 'm', messages: [{ role: 'critic', content: 'x' }] }, 'messages[0].role', /unknown role/);
  refuses({ model: 'm' }, 'messages');
  assert.deepEqual(translate({ model: 'm', messages: [{ role: 'user', content: 'hi', name: 'ann' }] }).dropped, ['messages[].name']);
});

test('request: tools, and a tool without parameters gets an empty object schema', () => {
  const out = translate({
    model: 'm',
    messages: hello,
    tools: [
      {
        type: 'function',
        function: { name: 'weather', description: 'Weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
      },
      { type: 'function', function: { name: 'now' } },
    ],
  });
  assert.deepEqual(out.body.tools, [
    { name: 'weather', description: 'Weather for a city', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
    { name: 'now', input_schema: { type: 'object', properties: {} } },
  ] satisfies Anthropic.Tool[]);
  refuses({ model: 'm', messages: hello, tools: [{ type: 'custom', custom: { name: 'grammar' } }] }, 'tools[0]');
  assert.deepEqual(
    translate({ model: 'm', messages: hello, tools: [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object' } } }] }).dropped,
    ['tools[].function.strict'],
  );
});

test('request: tool_choice and parallel_tool_calls', () => {
  const tools: ChatParams['tools'] = [{ type: 'function', function: { name: 'f' } }];
  const choice = (extra: Json) => translate({ model: 'm', messages: hello, tools, ...extra }).body.tool_choice;
  assert.deepEqual(choice({ tool_choice: 'auto' }), { type: 'auto' } satisfies Anthropic.ToolChoice);
  assert.deepEqual(choice({ tool_choice: 'required' }), { type: 'any' } satisfies Anthropic.ToolChoice);
  assert.deepEqual(choice({ tool_choice: 'none' }), { type: 'none' } satisfies Anthropic.ToolChoice);
  assert.deepEqual(choice({ tool_choice: { type: 'function', function: { name: 'f' } } }), { type: 'tool', name: 'f' } satisfies Anthropic.ToolChoice);
  assert.equal(choice({}), undefined);
  assert.deepEqual(choice({ parallel_tool_calls: false }), { type: 'auto', disable_parallel_tool_use: true } satisfies Anthropic.ToolChoice);
  assert.deepEqual(choice({ parallel_tool_calls: false, tool_choice: 'required' }), { type: 'any', disable_parallel_tool_use: true });
  assert.deepEqual(choice({ parallel_tool_calls: false, tool_choice: { type: 'function', function: { name: 'f' } } }), {
    type: 'tool',
    name: 'f',
    disable_parallel_tool_use: true,
  });
  assert.deepEqual(choice({ parallel_tool_calls: false, tool_choice: 'none' }), { type: 'none' });
  assert.equal(choice({ parallel_tool_calls: true }), undefined);
  // Without tools nothing can run in parallel, and Anthropic refuses a tool_choice without tools:
  // 'auto' and 'none' are left out (an empty tool list too), a required call is refused.
  assert.equal(translate({ model: 'm', messages: hello, parallel_tool_calls: false }).body.tool_choice, undefined);
  for (const tool_choice of ['auto', 'none'] as const) {
    for (const extra of [{}, { tools: [] }]) {
      const out = translate({ model: 'm', messages: hello, tool_choice, parallel_tool_calls: false, ...extra });
      assert.equal(out.body.tool_choice, undefined, `${tool_choice} ${JSON.stringify(extra)}`);
      assert.equal(out.body.tools, undefined);
      assert.deepEqual(out.dropped, []);
    }
  }
  refuses({ model: 'm', messages: hello, tool_choice: 'required' }, 'tool_choice', /no tools were given/);
  refuses({ model: 'm', messages: hello, tools: [], tool_choice: { type: 'function', function: { name: 'f' } } }, 'tool_choice', /no tools were given/);
  refuses({ model: 'm', messages: hello, tools, tool_choice: { type: 'allowed_tools', allowed_tools: { mode: 'auto', tools: [] } } }, 'tool_choice');
});

// API version 2023-06-01 (the gateway's default anthropic_version) takes temperature and top_p;
// 2026-10-21, which the SDK's types describe, no longer does: hence the wider type here.
type WithSampling = Anthropic.MessageCreateParams & { temperature?: number; top_p?: number };

test('request: stop, temperature, top_p, stream and user', () => {
  const out = translate({ model: 'm', messages: hello, stop: 'END', temperature: 0.2, top_p: 0.9, stream: true, user: 'user-42' });
  assert.deepEqual(out.body, {
    model: 'claude-up',
    max_tokens: 4096,
    messages: [{ role: 'user', content: 'hi' }],
    stop_sequences: ['END'],
    temperature: 0.2,
    top_p: 0.9,
    stream: true,
    metadata: { user_id: 'user-42' },
  } satisfies WithSampling);
  assert.deepEqual(out.dropped, []);
  assert.deepEqual(translate({ model: 'm', messages: hello, stop: ['a', 'b'] }).body.stop_sequences, ['a', 'b']);
  assert.equal(translate({ model: 'm', messages: hello, stream: false }).body.stream, undefined);
  assert.equal(translate({ model: 'm', messages: hello, temperature: 1 }).body.temperature, 1);
  assert.equal(translate({ model: 'm', messages: hello, temperature: 0 }).body.temperature, 0);
});

test('request: a temperature above 1 is refused, not clamped', () => {
  refuses({ model: 'm', messages: hello, temperature: 1.5 }, 'temperature', /Anthropic accepts 0 to 1/);
});

test('request: safety_identifier stands in for user; with both, user wins', () => {
  assert.deepEqual(translate({ model: 'm', messages: hello, safety_identifier: 'h-1' }).body.metadata, { user_id: 'h-1' });
  const both = translate({ model: 'm', messages: hello, safety_identifier: 'h-1', user: 'u-1' });
  assert.deepEqual(both.body.metadata, { user_id: 'u-1' });
  assert.deepEqual(both.dropped, ['safety_identifier']);
});

test('request: response_format: text ignored, json_object dropped, json_schema refused', () => {
  assert.deepEqual(translate({ model: 'm', messages: hello, response_format: { type: 'text' } }).dropped, []);
  const json = translate({ model: 'm', messages: hello, response_format: { type: 'json_object' } });
  assert.deepEqual(json.dropped, ['response_format']);
  assert.equal(json.body.response_format, undefined);
  refuses(
    { model: 'm', messages: hello, response_format: { type: 'json_schema', json_schema: { name: 's', schema: { type: 'object' } } } },
    'response_format',
    /not supported when routed to an Anthropic model/,
  );
});

test('request: hints without an equivalent are dropped and named, never sent', () => {
  const body = {
    model: 'm',
    messages: hello,
    frequency_penalty: 0.5,
    presence_penalty: 0.5,
    logit_bias: { '50256': -100 },
    seed: 7,
    service_tier: 'auto',
    store: true,
    metadata: { tag: 'x' },
    prediction: { type: 'content', content: 'x' },
    reasoning_effort: 'low',
    modalities: ['text'],
    top_logprobs: 2,
    logprobs: false,
    n: 1,
    verbosity: 'low',
    prompt_cache_key: 'k',
    prompt_cache_retention: '24h',
    stream: true,
    stream_options: { include_usage: true },
    user: 'u',
  } satisfies ChatParams;
  const out = translate(body);
  assert.deepEqual([...out.dropped].sort(), [
    'frequency_penalty',
    'logit_bias',
    'logprobs',
    'metadata',
    'modalities',
    'n',
    'prediction',
    'presence_penalty',
    'prompt_cache_key',
    'prompt_cache_retention',
    'reasoning_effort',
    'seed',
    'service_tier',
    'store',
    'top_logprobs',
    'verbosity',
  ]);
  assert.deepEqual(out.body, {
    model: 'claude-up',
    max_tokens: 4096,
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
    metadata: { user_id: 'u' },
  } satisfies Anthropic.MessageCreateParams);
});

test('request: null parameters are not given: neither dropped nor refused', () => {
  const out = translate({ model: 'm', messages: hello, seed: null, n: null, logprobs: null, audio: null, temperature: null, stop: null, response_format: undefined });
  assert.deepEqual(out.dropped, []);
  assert.deepEqual(out.body, { model: 'claude-up', max_tokens: 4096, messages: [{ role: 'user', content: 'hi' }] });
});

test('request: parameters Anthropic cannot honour are refused, naming them', () => {
  refuses({ model: 'm', messages: hello, n: 2 }, 'n');
  refuses({ model: 'm', messages: hello, logprobs: true }, 'logprobs');
  refuses({ model: 'm', messages: hello, audio: { voice: 'alloy', format: 'mp3' } }, 'audio');
  refuses({ model: 'm', messages: hello, modalities: ['text', 'audio'] }, 'modalities');
  refuses({ model: 'm', messages: hello, functions: [{ name: 'f' }] }, 'functions', /legacy/);
  refuses({ model: 'm', messages: hello, function_call: 'auto' }, 'function_call', /legacy/);
  refuses({ model: 'm', messages: hello, web_search_options: {} }, 'web_search_options');
  refuses({ model: 'm', messages: hello, moderation: { model: 'omni-moderation-latest' } }, 'moderation');
});

test('request: an unknown top-level parameter is refused, never forwarded', () => {
  refuses({ model: 'm', messages: hello, thinking: { type: 'enabled', budget_tokens: 1024 } }, 'thinking', /unknown parameter/);
  refuses({ model: 'm', messages: hello, top_k: 5 }, 'top_k', /unknown parameter/);
  // Names an object inherits are not parameters either.
  refuses(JSON.parse('{"model":"m","messages":[],"constructor":1}') as Json, 'constructor', /unknown parameter/);
  refuses(JSON.parse('{"model":"m","messages":[],"__proto__":{"seed":1}}') as Json, '__proto__', /unknown parameter/);
});

test('request: the input body is not modified', () => {
  const body = { model: 'm', messages: [{ role: 'system', content: 's' }, ...hello], stop: 'x', seed: 1 };
  const copy = structuredClone(body);
  translate(body);
  assert.deepEqual(body, copy);
});

// ---- response -------------------------------------------------------------------------------

const anthropicMessage = {
  id: 'msg_01',
  type: 'message',
  role: 'assistant',
  model: 'claude-sonnet-4-5',
  content: [
    { type: 'thinking', thinking: 'Let me think.', signature: 'sig' },
    { type: 'text', text: 'Checking ' },
    { type: 'text', text: 'the weather.' },
    { type: 'tool_use', id: 'toolu_1', name: 'weather', input: { city: 'Paris' } },
  ],
  stop_reason: 'tool_use',
  stop_sequence: null,
  usage: { input_tokens: 100, output_tokens: 20, cache_read_input_tokens: 30, cache_creation_input_tokens: 5 },
};

test('response: text, tool calls, finish reason and usage; thinking left out', () => {
  const before = Math.floor(Date.now() / 1000);
  const out = chatToMessages.response(anthropicMessage);
  assert.ok(typeof out.created === 'number' && out.created >= before && out.created <= Math.floor(Date.now() / 1000));
  assert.deepEqual({ ...out, created: 0 }, {
    id: 'msg_01',
    object: 'chat.completion',
    created: 0,
    model: 'claude-sonnet-4-5',
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: 'Checking the weather.',
          tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } }],
          refusal: null,
        },
        logprobs: null,
        finish_reason: 'tool_calls',
      },
    ],
    usage: { prompt_tokens: 135, completion_tokens: 20, total_tokens: 155, prompt_tokens_details: { cached_tokens: 30, cache_write_tokens: 5 } },
  } satisfies OpenAI.ChatCompletion);
});

test('response: content is null without text; no tool_calls key without tool use; missing cache counts are 0', () => {
  const out = chatToMessages.response({ ...anthropicMessage, content: [], stop_reason: 'end_turn', usage: { input_tokens: 3, output_tokens: 0 } });
  const choice = (out.choices as Json[])[0]!;
  assert.deepEqual(choice.message, { role: 'assistant', content: null, refusal: null });
  assert.deepEqual(out.usage, { prompt_tokens: 3, completion_tokens: 0, total_tokens: 3, prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 } });
});

test('response: stop reasons', () => {
  const reasons: Record<string, string> = {
    end_turn: 'stop',
    stop_sequence: 'stop',
    max_tokens: 'length',
    tool_use: 'tool_calls',
    pause_turn: 'stop',
    refusal: 'content_filter',
    model_context_window_exceeded: 'length',
  };
  for (const [stop, finish] of Object.entries(reasons)) {
    const out = chatToMessages.response({ ...anthropicMessage, stop_reason: stop });
    assert.equal((out.choices as Json[])[0]!.finish_reason, finish, stop);
  }
});

/** An `openai` client whose every request is answered with `answer`. */
function clientAnswering(answer: () => Response): OpenAI {
  return new OpenAI({ apiKey: 'sk-test', baseURL: 'http://sdk.test/v1', maxRetries: 0, fetch: async () => answer() });
}

test('response: the openai SDK reads the translated completion', async () => {
  const body = JSON.stringify(chatToMessages.response(anthropicMessage));
  const client = clientAnswering(() => new Response(body, { headers: { 'content-type': 'application/json' } }));
  const completion = await client.chat.completions.create({ model: 'gpt-4o', messages: hello });
  assert.equal(completion.choices[0]?.message.content, 'Checking the weather.');
  const call = completion.choices[0]?.message.tool_calls?.[0];
  assert.ok(call?.type === 'function');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
  assert.equal(completion.usage?.prompt_tokens_details?.cached_tokens, 30);
  assert.equal(completion.usage?.prompt_tokens_details?.cache_write_tokens, 5);
});

// ---- error ----------------------------------------------------------------------------------

test('error: an Anthropic error is OpenAI-shaped', () => {
  const body = { type: 'error', error: { type: 'rate_limit_error', message: 'Slow down' } };
  assert.deepEqual(chatToMessages.error(429, body), toOpenAIError(429, body));
  assert.deepEqual(chatToMessages.error(429, body), { error: { message: 'Slow down', type: 'rate_limit_exceeded', code: 'rate_limit_error', param: null } });
  assert.deepEqual(chatToMessages.error(502, undefined), toOpenAIError(502, undefined));
});

// ---- stream ---------------------------------------------------------------------------------

function sse(event: string, data: Json): string {
  return `event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`;
}

const START = sse('message_start', {
  message: {
    id: 'msg_s1',
    type: 'message',
    role: 'assistant',
    model: 'claude-sonnet-4-5',
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage: { input_tokens: 12, cache_read_input_tokens: 4, cache_creation_input_tokens: 2, output_tokens: 1 },
  },
});

const UPSTREAM: string[] = [
  START,
  sse('ping', {}),
  sse('content_block_start', { index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } }),
  sse('content_block_delta', { index: 0, delta: { type: 'thinking_delta', thinking: 'Hmm.' } }),
  sse('content_block_delta', { index: 0, delta: { type: 'signature_delta', signature: 'sig' } }),
  sse('content_block_stop', { index: 0 }),
  sse('content_block_start', { index: 1, content_block: { type: 'text', text: '' } }),
  sse('content_block_delta', { index: 1, delta: { type: 'text_delta', text: 'Il fait 18 °C à ' } }),
  sse('content_block_delta', { index: 1, delta: { type: 'text_delta', text: 'Paris 🌤.' } }),
  sse('content_block_stop', { index: 1 }),
  sse('content_block_start', { index: 2, content_block: { type: 'tool_use', id: 'toolu_a', name: 'weather', input: {} } }),
  sse('content_block_delta', { index: 2, delta: { type: 'input_json_delta', partial_json: '' } }),
  sse('content_block_delta', { index: 2, delta: { type: 'input_json_delta', partial_json: '{"city":' } }),
  sse('content_block_delta', { index: 2, delta: { type: 'input_json_delta', partial_json: '"Lyon"}' } }),
  sse('content_block_stop', { index: 2 }),
  sse('content_block_start', { index: 3, content_block: { type: 'tool_use', id: 'toolu_b', name: 'time', input: {} } }),
  sse('content_block_delta', { index: 3, delta: { type: 'input_json_delta', partial_json: '{}' } }),
  sse('content_block_stop', { index: 3 }),
  sse('message_delta', { delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 42 } }),
  sse('message_stop', {}),
];

/** The chunks of a translated stream; `[DONE]` as the string. */
function chunks(text: string): unknown[] {
  assert.ok(text === '' || text.endsWith('\n\n'), 'ends on an event boundary');
  return text
    .split('\n\n')
    .filter((event) => event !== '')
    .map((event) => {
      assert.ok(event.startsWith('data: '), event);
      const data = event.slice('data: '.length);
      return data === '[DONE]' ? data : JSON.parse(data);
    });
}

function chunk(delta: Json, finish: string | null = null, extra: Json = {}): OpenAI.ChatCompletionChunk & Json {
  return {
    id: 'msg_s1',
    object: 'chat.completion.chunk',
    created: 0,
    model: 'claude-sonnet-4-5',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish as OpenAI.ChatCompletionChunk.Choice['finish_reason'] }],
    ...extra,
  };
}

const EXPECTED = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Il fait 18 °C à ' }),
  chunk({ content: 'Paris 🌤.' }),
  chunk({ tool_calls: [{ index: 0, id: 'toolu_a', type: 'function', function: { name: 'weather', arguments: '' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '"Lyon"}' } }] }),
  chunk({ tool_calls: [{ index: 1, id: 'toolu_b', type: 'function', function: { name: 'time', arguments: '' } }] }),
  chunk({ tool_calls: [{ index: 1, function: { arguments: '{}' } }] }),
  chunk({}, 'tool_calls'),
  '[DONE]',
];

/** Sets every chunk's `created` to 0, after checking they all share one. */
function sameCreated(list: unknown[]): unknown[] {
  const created = new Set(list.filter((c): c is Json => typeof c === 'object').map((c) => c.created));
  assert.equal(created.size, 1);
  return list.map((c) => (typeof c === 'object' ? { ...(c as Json), created: 0 } : c));
}

function run(translator: StreamTranslator, pieces: Buffer[]): string {
  return pieces.map((piece) => translator.push(piece)).join('') + translator.end();
}

function bytes(text: string): Buffer[] {
  const all = Buffer.from(text);
  return [...all].map((b) => Buffer.from([b]));
}

test('stream: text and tool calls; thinking and pings left out; [DONE] at the end', () => {
  const out = run(chatToMessages.stream(), [Buffer.from(UPSTREAM.join(''))]);
  assert.deepEqual(sameCreated(chunks(out)), EXPECTED);
});

test('stream: one byte at a time gives the same output as one piece (multi-byte characters too)', () => {
  const whole = run(chatToMessages.stream(), [Buffer.from(UPSTREAM.join(''))]);
  const byByte = run(chatToMessages.stream(), bytes(UPSTREAM.join('')));
  assert.deepEqual(chunks(byByte).map((c) => (typeof c === 'object' ? { ...(c as Json), created: 0 } : c)), sameCreated(chunks(whole)));
  assert.ok(byByte.includes('🌤'));
  // And at CRLF line ends, split between CR and LF.
  const crlf = UPSTREAM.join('').replaceAll('\n', '\r\n');
  const pieces = bytes(crlf);
  assert.deepEqual(sameCreated(chunks(run(chatStreamTranslator(false), pieces))), EXPECTED);
});

test('stream: nothing is buffered: an event is answered by the push that completes it', () => {
  const translator = chatToMessages.stream();
  const start = Buffer.from(START);
  assert.equal(translator.push(start.subarray(0, start.length - 1)), '');
  const first = chunks(translator.push(start.subarray(start.length - 1)));
  assert.deepEqual(sameCreated(first), [EXPECTED[0]]);
  assert.equal(translator.push(Buffer.from(sse('ping', {}))), '');
  const text = translator.push(Buffer.from(sse('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) + sse('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'x' } })));
  assert.deepEqual((chunks(text)[0] as Json).choices, [{ index: 0, delta: { content: 'x' }, logprobs: null, finish_reason: null }]);
});

test('stream: with include_usage, every chunk has usage null and a usage chunk follows at message_stop', () => {
  const translator = chatStreamTranslator(true);
  const pieces = UPSTREAM.map((event) => Buffer.from(event));
  const outputs = pieces.map((piece) => translator.push(piece));
  // The finish chunk comes with message_delta, the usage chunk with message_stop.
  assert.deepEqual((chunks(outputs.at(-2)!)[0] as Json).choices, [{ index: 0, delta: {}, logprobs: null, finish_reason: 'tool_calls' }]);
  const usage = chunks(outputs.at(-1)!);
  assert.equal(usage.length, 1);
  const all = sameCreated(chunks(outputs.join('') + translator.end()));
  assert.deepEqual(all, [
    ...EXPECTED.slice(0, -1).map((c) => ({ ...(c as Json), usage: null })),
    {
      id: 'msg_s1',
      object: 'chat.completion.chunk',
      created: 0,
      model: 'claude-sonnet-4-5',
      choices: [],
      usage: { prompt_tokens: 18, completion_tokens: 42, total_tokens: 60, prompt_tokens_details: { cached_tokens: 4, cache_write_tokens: 2 } },
    } satisfies OpenAI.ChatCompletionChunk,
    '[DONE]',
  ]);
});

test('stream: without include_usage there is no usage chunk and no usage key', () => {
  const out = chunks(run(chatStreamTranslator(false), [Buffer.from(UPSTREAM.join(''))]));
  for (const c of out) if (typeof c === 'object') assert.equal('usage' in (c as Json), false);
});

test('stream: message_delta input counts, when present, are the final ones', () => {
  const upstream = [
    START,
    sse('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
    sse('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'ok' } }),
    sse('content_block_stop', { index: 0 }),
    sse('message_delta', { delta: { stop_reason: 'max_tokens' }, usage: { output_tokens: 5, input_tokens: 20, cache_read_input_tokens: null } }),
    sse('message_stop', {}),
  ];
  const out = chunks(run(chatStreamTranslator(true), [Buffer.from(upstream.join(''))]));
  assert.equal(((out.at(-3) as Json).choices as Json[])[0]!.finish_reason, 'length');
  assert.deepEqual((out.at(-2) as Json).usage, { prompt_tokens: 26, completion_tokens: 5, total_tokens: 31, prompt_tokens_details: { cached_tokens: 4, cache_write_tokens: 2 } });
});

test('stream: an error event becomes an OpenAI error event, and then nothing more', () => {
  for (const [type, status] of [
    ['overloaded_error', 529],
    ['api_error', 500],
  ] as const) {
    const translator = chatStreamTranslator(true);
    const error = { type: 'error', error: { type, message: 'Overloaded' } };
    const out = translator.push(Buffer.from(START + `event: error\ndata: ${JSON.stringify(error)}\n\n` + UPSTREAM.slice(1).join('')));
    const list = chunks(out);
    assert.equal(list.length, 2);
    assert.deepEqual(list[1], toOpenAIError(status, error));
    assert.deepEqual(list[1], { error: { message: 'Overloaded', type: 'server_error', code: type, param: null } });
    assert.equal(translator.push(Buffer.from(sse('message_stop', {}))), '');
    assert.equal(translator.end(), '');
  }
});

test('stream: an error event split byte by byte, and one left unterminated at the end', () => {
  const error = `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Busy' } })}\n\n`;
  const split = chunks(run(chatToMessages.stream(), bytes(START + error)));
  assert.deepEqual(split.at(-1), { error: { message: 'Busy', type: 'server_error', code: 'overloaded_error', param: null } });
  // An event the upstream did not close with a blank line is still read at the end, and an error there ends the stream without [DONE].
  const open = chunks(run(chatToMessages.stream(), [Buffer.from(START + error.trimEnd())]));
  assert.deepEqual(open.at(-1), { error: { message: 'Busy', type: 'server_error', code: 'overloaded_error', param: null } });
});

test('stream: a stream that ends without events was cut: no [DONE]', () => {
  const translator = chatToMessages.stream();
  assert.equal(translator.end(), '');
  assert.equal(translator.outcome?.(), 'cut');
});

test('stream: an answer cut before message_stop gets no [DONE]; it is cut, and the gateway\'s error event ends it', async () => {
  const cut = UPSTREAM.slice(0, UPSTREAM.indexOf(sse('content_block_stop', { index: 2 })));
  for (const pieces of [[Buffer.from(cut.join(''))], bytes(cut.join(''))]) {
    const translator = chatStreamTranslator(true);
    const out = chunks(run(translator, pieces));
    assert.ok(!out.includes('[DONE]'));
    assert.equal(translator.outcome?.(), 'cut');
  }
  // Cut right after message_delta: the finish reason came, message_stop (and the usage chunk) did not.
  const late = chatStreamTranslator(true);
  const lateOut = chunks(run(late, [Buffer.from(UPSTREAM.slice(0, -1).join(''))]));
  assert.ok(!lateOut.includes('[DONE]'));
  assert.ok(!lateOut.some((chunk) => (chunk as { usage?: unknown }).usage), 'no usage chunk: it comes with message_stop');
  assert.equal(late.outcome?.(), 'cut');
  // The whole answer is complete.
  const whole = chatStreamTranslator(true);
  run(whole, [Buffer.from(UPSTREAM.join(''))]);
  assert.equal(whole.outcome?.(), 'complete');
  // The openai SDK raises the error event the gateway ends a cut stream with, rather than returning the half answer.
  const text = run(chatToMessages.stream(), [Buffer.from(cut.join(''))]) + streamErrorEvent(errors.streamCut('anthropic'), 'chat', 0);
  const client = clientAnswering(() => new Response(text, { headers: { 'content-type': 'text/event-stream' } }));
  const stream = await client.chat.completions.create({ model: 'gpt-4o', messages: hello, stream: true });
  await assert.rejects(
    (async () => {
      for await (const _ of stream);
    })(),
    (e: unknown) => e instanceof OpenAI.APIError && /ended the stream before the response was complete/.test(e.message),
  );
});

test('stream: the openai SDK accumulates the translated stream into the same message', async () => {
  const text = run(chatStreamTranslator(true), bytes(UPSTREAM.join('')));
  const client = clientAnswering(() => new Response(text, { headers: { 'content-type': 'text/event-stream' } }));
  const stream = client.chat.completions.stream({ model: 'gpt-4o', messages: hello, stream_options: { include_usage: true } });
  const completion = await stream.finalChatCompletion();
  const message = completion.choices[0]!.message;
  assert.equal(message.content, 'Il fait 18 °C à Paris 🌤.');
  assert.deepEqual(
    message.tool_calls?.map((call) => (call.type === 'function' ? [call.id, call.function.name, call.function.arguments] : [])),
    [
      ['toolu_a', 'weather', '{"city":"Lyon"}'],
      ['toolu_b', 'time', '{}'],
    ],
  );
  assert.equal(completion.choices[0]!.finish_reason, 'tool_calls');
  assert.equal(completion.usage?.total_tokens, 60);
});

test('stream: the openai SDK raises the translated error event', async () => {
  const error = `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } })}\n\n`;
  const text = run(chatToMessages.stream(), [Buffer.from(START + error)]);
  const client = clientAnswering(() => new Response(text, { headers: { 'content-type': 'text/event-stream' } }));
  const stream = await client.chat.completions.create({ model: 'gpt-4o', messages: hello, stream: true });
  await assert.rejects(
    (async () => {
      for await (const _ of stream);
    })(),
    (e: unknown) => e instanceof OpenAI.APIError && /Overloaded/.test(e.message),
  );
});

test('the translator names its endpoints', () => {
  assert.equal(chatToMessages.from, 'chat');
  assert.equal(chatToMessages.to, 'messages');
});
