// The responses → messages translator: an OpenAI Responses API client served by an Anthropic
// Messages provider. Request fixtures are typed as the OpenAI SDK's params, expected bodies as the
// Anthropic SDK's, and the translated answers are read back by the real OpenAI SDK.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import type Anthropic from '@anthropic-ai/sdk';
import { responsesToMessages as translator } from '../../src/translate/responses-to-messages.ts';
import { TranslationError } from '../../src/translate/types.ts';
import { toOpenAIError } from '../../src/translate/errors.ts';

type Json = Record<string, any>;
type Params = OpenAI.Responses.ResponseCreateParams;

const MODEL = 'claude-sonnet-4-5';

function translate(params: Params | Json): { body: Json; dropped: readonly string[] } {
  return translator.request(params as Json, MODEL);
}

function refused(params: Params | Json, param: string, message?: RegExp): void {
  assert.throws(
    () => translate(params),
    (e: unknown) => e instanceof TranslationError && e.param === param && (message === undefined || message.test(e.message)),
    `expected a TranslationError on ${param}`,
  );
}

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

describe('request', () => {
  test('a string input is one user message; instructions are the system prompt; max_tokens defaults to 4096', () => {
    const { body, dropped } = translate({ model: 'gpt-5', instructions: 'Be brief.', input: 'Hello' });
    assert.deepEqual(body, {
      model: MODEL,
      max_tokens: 4096,
      system: 'Be brief.',
      messages: [{ role: 'user', content: 'Hello' }],
    } satisfies Anthropic.MessageCreateParams);
    assert.deepEqual(dropped, []);
  });

  test('max_output_tokens, temperature, top_p and stream are carried over', () => {
    const { body } = translate({ model: 'gpt-5', input: 'Hi', max_output_tokens: 300, temperature: 0.2, top_p: 0.9, stream: true });
    assert.deepEqual(body, { model: MODEL, max_tokens: 300, messages: [{ role: 'user', content: 'Hi' }], temperature: 0.2, top_p: 0.9, stream: true });
    assert.equal(translate({ model: 'gpt-5', input: 'Hi', stream: false }).body.stream, undefined);
  });

  test('null means "not given", as OpenAI reads it', () => {
    const { body, dropped } = translate({
      model: 'gpt-5',
      input: 'Hi',
      instructions: null,
      max_output_tokens: null,
      temperature: null,
      top_p: null,
      previous_response_id: null,
      conversation: null,
      background: null,
      reasoning: null,
      metadata: null,
      tool_choice: undefined,
      prompt: null,
      top_logprobs: null,
    });
    assert.deepEqual(body, { model: MODEL, max_tokens: 4096, messages: [{ role: 'user', content: 'Hi' }] });
    assert.deepEqual(dropped, []);
  });

  test('temperature above 1 (OpenAI allows 2) is refused, not clamped', () => {
    refused({ model: 'gpt-5', input: 'Hi', temperature: 1.5 }, 'temperature', /0 to 1/);
  });

  test('message items: text parts, system and developer into the system prompt, same-role messages merged', () => {
    const { body } = translate({
      model: 'gpt-5',
      instructions: 'Rule one.',
      input: [
        { role: 'developer', content: 'Rule two.' },
        { role: 'user', content: 'First.' },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Second.' }] },
        { role: 'assistant', content: 'Answer.' },
        {
          type: 'message',
          id: 'msg_1',
          role: 'assistant',
          status: 'completed',
          content: [{ type: 'output_text', text: 'More.', annotations: [] }],
        },
        { role: 'system', content: [{ type: 'input_text', text: 'Rule three.' }] },
        { role: 'user', content: [{ type: 'input_text', text: '' }, { type: 'input_text', text: 'Third.' }] },
      ],
    } satisfies Params);
    assert.deepEqual(body, {
      model: MODEL,
      max_tokens: 4096,
      system: [
        { type: 'text', text: 'Rule one.' },
        { type: 'text', text: 'Rule two.' },
        { type: 'text', text: 'Rule three.' },
      ],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'First.' }, { type: 'text', text: 'Second.' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'Answer.' }, { type: 'text', text: 'More.' }] },
        { role: 'user', content: 'Third.' },
      ],
    } satisfies Anthropic.MessageCreateParams);
  });

  test('images: a base64 data: URL and an http(s) URL; detail is dropped', () => {
    const { body, dropped } = translate({
      model: 'gpt-5',
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'Compare.' },
            { type: 'input_image', detail: 'high', image_url: `data:image/png;base64,${PNG}` },
            { type: 'input_image', detail: 'auto', image_url: 'https://example.com/cat.jpg' },
          ],
        },
      ],
    } satisfies Params);
    assert.deepEqual(body.messages, [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Compare.' },
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } },
          { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
        ],
      },
    ] satisfies Anthropic.MessageParam[]);
    assert.deepEqual(dropped, ['input[].content[].detail']);
  });

  test('a prompt-cache breakpoint on a part is cache_control on its block', () => {
    const { body } = translate({
      model: 'gpt-5',
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'Long context.', prompt_cache_breakpoint: { mode: 'explicit' } }] }],
    } satisfies Params);
    assert.deepEqual(body.messages, [{ role: 'user', content: [{ type: 'text', text: 'Long context.', cache_control: { type: 'ephemeral' } }] }]);
  });

  test('images and files Anthropic cannot take are refused, naming the part', () => {
    const user = (part: Json) => ({ model: 'gpt-5', input: [{ role: 'user', content: [{ type: 'input_text', text: 'x' }, part] }] });
    refused(user({ type: 'input_image', detail: 'auto', image_url: 'data:image/svg+xml;base64,PHN2Zz4=' }), 'input[0].content[1].image_url', /svg/);
    refused(user({ type: 'input_image', detail: 'auto', image_url: 'ftp://example.com/a.png' }), 'input[0].content[1].image_url');
    refused(user({ type: 'input_image', detail: 'auto', file_id: 'file-1' }), 'input[0].content[1].file_id');
    refused(user({ type: 'input_file', file_id: 'file-1' }), 'input[0].content[1]', /file input/);
    refused(user({ type: 'input_audio', input_audio: { data: '', format: 'wav' } }), 'input[0].content[1]', /audio/);
    refused(
      { model: 'gpt-5', input: [{ role: 'assistant', content: [{ type: 'input_image', detail: 'auto', image_url: 'https://example.com/a.png' }] }] },
      'input[0].content[0]',
      /user messages only/,
    );
    refused({ model: 'gpt-5', input: [{ role: 'tool', content: 'x' }] }, 'input[0].role');
  });

  test('function calls and their outputs: tool_use and tool_result, merged into alternating messages, results first', () => {
    const { body } = translate({
      model: 'gpt-5',
      input: [
        { role: 'user', content: 'Weather in Paris and Oslo?' },
        { type: 'message', id: 'msg_a', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Checking.', annotations: [] }] },
        { type: 'function_call', id: 'fc_1', call_id: 'toolu_1', name: 'weather', arguments: '{"city":"Paris"}', status: 'completed' },
        { type: 'function_call', call_id: 'toolu_2', name: 'weather', arguments: '{"city":"Oslo"}' },
        { type: 'function_call_output', call_id: 'toolu_1', output: 'sunny' },
        { role: 'user', content: 'And be quick.' },
        { type: 'function_call_output', call_id: 'toolu_2', output: [{ type: 'input_text', text: 'snow' }, { type: 'input_image', detail: 'auto', image_url: 'https://example.com/radar.png' }] },
        { type: 'function_call', call_id: 'toolu_3', name: 'now', arguments: '' },
      ],
    } satisfies Params);
    assert.deepEqual(body.messages, [
      { role: 'user', content: 'Weather in Paris and Oslo?' },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Checking.' },
          { type: 'tool_use', id: 'toolu_1', name: 'weather', input: { city: 'Paris' } },
          { type: 'tool_use', id: 'toolu_2', name: 'weather', input: { city: 'Oslo' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' },
          {
            type: 'tool_result',
            tool_use_id: 'toolu_2',
            content: [
              { type: 'text', text: 'snow' },
              { type: 'image', source: { type: 'url', url: 'https://example.com/radar.png' } },
            ],
          },
          { type: 'text', text: 'And be quick.' },
        ],
      },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_3', name: 'now', input: {} }] },
    ] satisfies Anthropic.MessageParam[]);
  });

  test('function call arguments that are not a JSON object are refused', () => {
    const call = (args: string) => ({ model: 'gpt-5', input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: args }] });
    refused(call('{"a":'), 'input[0].arguments', /not valid JSON/);
    refused(call('[1]'), 'input[0].arguments', /JSON object/);
    refused({ model: 'gpt-5', input: [{ type: 'function_call_output', output: 'x' }] }, 'input[0].call_id');
    refused({ model: 'gpt-5', input: [{ type: 'function_call_output', call_id: 'c', output: [{ type: 'input_file', file_id: 'f' }] }] }, 'input[0].output[0]');
  });

  test('input items Anthropic has no equivalent for are refused; reasoning items are dropped', () => {
    refused({ model: 'gpt-5', input: [{ type: 'item_reference', id: 'msg_1' }] }, 'input[0]', /no conversation state/);
    refused({ model: 'gpt-5', input: [{ type: 'web_search_call', id: 'ws_1', status: 'completed', action: { type: 'search', query: 'x' } }] }, 'input[0]', /web_search_call/);
    refused({ model: 'gpt-5', input: [{ type: 'computer_call_output', call_id: 'c', output: { type: 'computer_screenshot' } }] }, 'input[0]');
    const { body, dropped } = translate({
      model: 'gpt-5',
      input: [
        { role: 'user', content: 'Hi' },
        { type: 'reasoning', id: 'rs_1', summary: [], encrypted_content: 'opaque' },
        { role: 'assistant', content: 'Hello' },
      ],
    } satisfies Params);
    assert.deepEqual(body.messages, [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello' },
    ]);
    assert.deepEqual(dropped, ['input[].reasoning']);
  });

  test('input is required and must be a string or a list', () => {
    refused({ model: 'gpt-5' }, 'input', /required/);
    refused({ model: 'gpt-5', input: 42 }, 'input');
    refused({ model: 'gpt-5', input: ['Hi'] }, 'input[0]');
  });

  test('function tools: name, description, input_schema; strict is dropped', () => {
    const parameters = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false };
    const { body, dropped } = translate({
      model: 'gpt-5',
      input: 'Weather?',
      tools: [
        { type: 'function', name: 'weather', description: 'The weather in a city', parameters, strict: true },
        { type: 'function', name: 'now', parameters: null, strict: false },
      ],
    } satisfies Params);
    assert.deepEqual(body.tools, [
      { name: 'weather', description: 'The weather in a city', input_schema: parameters },
      { name: 'now', input_schema: { type: 'object', properties: {} } },
    ]);
    assert.equal(body.tool_choice, undefined);
    assert.deepEqual(dropped, ['tools[].strict']);
  });

  test('every other tool type is refused on tools[i]', () => {
    const fn = { type: 'function', name: 'f', parameters: null, strict: null };
    const others: Json[] = [
      { type: 'web_search' },
      { type: 'web_search_preview' },
      { type: 'file_search', vector_store_ids: ['vs_1'] },
      { type: 'computer_use_preview', display_height: 768, display_width: 1024, environment: 'browser' },
      { type: 'code_interpreter', container: { type: 'auto' } },
      { type: 'mcp', server_label: 'x', server_url: 'https://example.com/mcp' },
      { type: 'image_generation' },
      { type: 'local_shell' },
      { type: 'custom', name: 'grammar' },
    ];
    for (const other of others) refused({ model: 'gpt-5', input: 'x', tools: [fn, other] }, 'tools[1]', new RegExp(other.type));
  });

  test('tool_choice and parallel_tool_calls', () => {
    const tools = [{ type: 'function' as const, name: 'f', parameters: null, strict: null }];
    const choice = (tool_choice: unknown, extra: Json = {}) => translate({ model: 'gpt-5', input: 'x', tools, tool_choice, ...extra }).body.tool_choice;
    assert.deepEqual(choice('auto'), { type: 'auto' });
    assert.deepEqual(choice('required'), { type: 'any' });
    assert.deepEqual(choice('none'), { type: 'none' });
    assert.deepEqual(choice({ type: 'function', name: 'f' }), { type: 'tool', name: 'f' });
    assert.deepEqual(choice(undefined, { parallel_tool_calls: false }), { type: 'auto', disable_parallel_tool_use: true });
    assert.deepEqual(choice('required', { parallel_tool_calls: false }), { type: 'any', disable_parallel_tool_use: true });
    assert.deepEqual(choice('none', { parallel_tool_calls: false }), { type: 'none' });
    assert.equal(choice(undefined, { parallel_tool_calls: true }), undefined);
    refused({ model: 'gpt-5', input: 'x', tools, tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [] } }, 'tool_choice');
    refused({ model: 'gpt-5', input: 'x', tools, tool_choice: { type: 'web_search_preview' } }, 'tool_choice');
    // Anthropic refuses tool_choice without tools: 'auto' and 'none' are left out, a required call is refused.
    assert.equal(translate({ model: 'gpt-5', input: 'x', tool_choice: 'auto', parallel_tool_calls: false }).body.tool_choice, undefined);
    assert.equal(translate({ model: 'gpt-5', input: 'x', tools: [], tool_choice: 'none' }).body.tool_choice, undefined);
    assert.equal(translate({ model: 'gpt-5', input: 'x', tools: [] }).body.tools, undefined);
    refused({ model: 'gpt-5', input: 'x', tool_choice: 'required' }, 'tool_choice');
  });

  test('user is metadata.user_id', () => {
    assert.deepEqual(translate({ model: 'gpt-5', input: 'x', user: 'u-42' }).body.metadata, { user_id: 'u-42' });
  });

  test('what needs OpenAI stored state is refused, saying Anthropic keeps none', () => {
    refused({ model: 'gpt-5', input: 'x', previous_response_id: 'resp_1' }, 'previous_response_id', /no conversation state/);
    refused({ model: 'gpt-5', input: 'x', conversation: 'conv_1' }, 'conversation', /no conversation state/);
    refused({ model: 'gpt-5', input: 'x', conversation: { id: 'conv_1' } }, 'conversation');
    refused({ model: 'gpt-5', input: 'x', background: true }, 'background', /stores no responses/);
    refused({ model: 'gpt-5', input: 'x', prompt: { id: 'pmpt_1' } }, 'prompt');
    assert.doesNotThrow(() => translate({ model: 'gpt-5', input: 'x', background: false }));
  });

  test('structured output, log probabilities and unknown parameters are refused', () => {
    refused(
      { model: 'gpt-5', input: 'x', text: { format: { type: 'json_schema', name: 's', schema: { type: 'object' }, strict: true } } },
      'text.format',
      /json_schema/,
    );
    refused({ model: 'gpt-5', input: 'x', text: { format: { type: 'json_object' } } }, 'text.format');
    refused({ model: 'gpt-5', input: 'x', top_logprobs: 5 }, 'top_logprobs');
    refused({ model: 'gpt-5', input: 'x', context_management: [{ type: 'compaction' }] }, 'context_management');
    refused({ model: 'gpt-5', input: 'x', moderation: { model: 'omni-moderation-latest' } }, 'moderation');
    assert.doesNotThrow(() => translate({ model: 'gpt-5', input: 'x', context_management: [] }));
    refused({ model: 'gpt-5', input: 'x', frequency_penalty: 1 }, 'frequency_penalty', /unknown parameter/);
    refused({ model: 'gpt-5', input: 'x', messages: [] }, 'messages', /unknown parameter/);
    const { body, dropped } = translate({ model: 'gpt-5', input: 'x', text: { format: { type: 'text' }, verbosity: 'low' } });
    assert.deepEqual(body, { model: MODEL, max_tokens: 4096, messages: [{ role: 'user', content: 'x' }] });
    assert.deepEqual(dropped, ['text.verbosity']);
  });

  test('hints without an Anthropic equivalent are dropped and named', () => {
    const { body, dropped } = translate({
      model: 'gpt-5',
      input: 'x',
      reasoning: { effort: 'high' },
      include: ['reasoning.encrypted_content'],
      metadata: { app: 'demo' },
      truncation: 'auto',
      service_tier: 'flex',
      store: true,
      prompt_cache_key: 'k',
      prompt_cache_retention: '24h',
      prompt_cache_options: { mode: 'implicit' },
      safety_identifier: 'hash',
      max_tool_calls: 3,
      stream_options: { include_obfuscation: true },
    });
    assert.deepEqual(body, { model: MODEL, max_tokens: 4096, messages: [{ role: 'user', content: 'x' }] });
    assert.deepEqual(
      [...dropped].sort(),
      [
        'include',
        'max_tool_calls',
        'metadata',
        'prompt_cache_key',
        'prompt_cache_options',
        'prompt_cache_retention',
        'reasoning',
        'safety_identifier',
        'service_tier',
        'store',
        'stream_options.include_obfuscation',
        'truncation',
      ],
    );
  });

  test('store: false and truncation: disabled ask for what Anthropic does anyway: not reported', () => {
    const { dropped } = translate({ model: 'gpt-5', input: 'x', store: false, truncation: 'disabled', stream_options: { include_obfuscation: false } });
    assert.deepEqual(dropped, []);
  });
});

/** An Anthropic answer: text, then a tool call. */
const MESSAGE = {
  id: 'msg_01ABC',
  type: 'message',
  role: 'assistant',
  model: 'claude-sonnet-4-5-20250929',
  content: [
    { type: 'thinking', thinking: 'The user wants the weather.', signature: 'sig' },
    { type: 'text', text: 'Let me check.', citations: null },
    { type: 'tool_use', id: 'toolu_01XYZ', name: 'weather', input: { city: 'Paris' } },
  ],
  stop_reason: 'tool_use',
  stop_sequence: null,
  usage: { input_tokens: 100, output_tokens: 20, cache_read_input_tokens: 30, cache_creation_input_tokens: 5 },
} as const;

describe('response', () => {
  test('a message with text and a tool call is a Response with a message item and a function_call item', (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: 1_750_000_000_000 });
    const response = answer(MESSAGE);
    assert.deepEqual(response, {
      id: 'resp_01ABC',
      object: 'response',
      created_at: 1_750_000_000,
      status: 'completed',
      background: false,
      completed_at: 1_750_000_000,
      error: null,
      incomplete_details: null,
      instructions: null,
      max_output_tokens: null,
      metadata: {},
      model: 'claude-sonnet-4-5-20250929',
      output: [
        {
          id: 'msg_01ABC',
          type: 'message',
          status: 'completed',
          role: 'assistant',
          content: [{ type: 'output_text', annotations: [], logprobs: [], text: 'Let me check.' }],
        },
        { id: 'fc_01XYZ', type: 'function_call', status: 'completed', call_id: 'toolu_01XYZ', name: 'weather', arguments: '{"city":"Paris"}' },
      ],
      parallel_tool_calls: true,
      previous_response_id: null,
      reasoning: null,
      temperature: null,
      text: { format: { type: 'text' } },
      tool_choice: 'auto',
      tools: [],
      top_p: null,
      truncation: 'disabled',
      usage: { input_tokens: 135, input_tokens_details: { cached_tokens: 30, cache_write_tokens: 5 }, output_tokens: 20, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 155 },
    } satisfies Omit<OpenAI.Responses.Response, 'output_text'>);
  });

  test('max_tokens is an incomplete Response; a refusal is incomplete for content_filter', () => {
    const cut = answer({ ...MESSAGE, content: [{ type: 'text', text: 'Once upon' }], stop_reason: 'max_tokens' });
    assert.equal(cut.status, 'incomplete');
    assert.deepEqual(cut.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(cut.completed_at, null);
    const refusal = answer({ ...MESSAGE, content: [], stop_reason: 'refusal' });
    assert.deepEqual([refusal.status, refusal.incomplete_details, refusal.output], ['incomplete', { reason: 'content_filter' }, []]);
    for (const reason of ['end_turn', 'stop_sequence', 'pause_turn']) assert.equal(answer({ ...MESSAGE, stop_reason: reason }).status, 'completed');
  });

  test('a tool call alone: no message item; several text blocks keep their order and distinct ids', () => {
    const calls = answer({ ...MESSAGE, content: [MESSAGE.content[2]] });
    assert.deepEqual(
      calls.output.map((item: Json) => item.type),
      ['function_call'],
    );
    const texts = answer({ ...MESSAGE, content: [{ type: 'text', text: 'A' }, MESSAGE.content[2], { type: 'text', text: 'B' }] });
    assert.deepEqual(
      texts.output.map((item: Json) => item.id),
      ['msg_01ABC', 'fc_01XYZ', 'msg_01ABC_2'],
    );
  });

  test('the SDK reads it: response.output_text', async () => {
    const client = clientAnswering(() => Response.json(translator.response(MESSAGE as unknown as Json)));
    const response = await client.responses.create({ model: 'gpt-5', input: 'Weather in Paris?' });
    assert.equal(response.output_text, 'Let me check.');
    assert.equal(response.status, 'completed');
    const call = response.output[1];
    assert.ok(call?.type === 'function_call');
    assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
    assert.equal(response.usage?.total_tokens, 155);
  });
});

function answer(body: unknown): Json {
  return translator.response(body as Json);
}

function clientAnswering(answer: () => Response): OpenAI {
  return new OpenAI({ apiKey: 'sk-test', baseURL: 'http://sdk.test/v1', maxRetries: 0, fetch: async () => answer() });
}

test('error: an Anthropic error is OpenAI-shaped', () => {
  const body = { type: 'error', error: { type: 'rate_limit_error', message: 'Slow down' } };
  assert.deepEqual(translator.error(429, body), toOpenAIError(429, body));
  assert.deepEqual(translator.error(429, body), { error: { message: 'Slow down', type: 'rate_limit_exceeded', code: 'rate_limit_error', param: null } });
  assert.deepEqual(translator.error(502, undefined), toOpenAIError(502, undefined));
});

test('the translator is responses → messages', () => {
  assert.equal(translator.from, 'responses');
  assert.equal(translator.to, 'messages');
});

// Streams.

const sse = (data: Json, event = data.type as string) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

const START = sse({
  type: 'message_start',
  message: { id: 'msg_01ABC', type: 'message', role: 'assistant', model: 'claude-sonnet-4-5-20250929', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 100, cache_read_input_tokens: 30, cache_creation_input_tokens: 5, output_tokens: 1 } },
});
const STOP = sse({ type: 'message_stop' });
const delta = (stopReason: string, outputTokens: number) => sse({ type: 'message_delta', delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: outputTokens } });

/** Upstream events of a text answer, one string per event. */
const TEXT_EVENTS = [
  START,
  sse({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }),
  sse({ type: 'ping' }),
  sse({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Grüße, ' } }),
  sse({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'world 🎉' } }),
  sse({ type: 'content_block_stop', index: 0 }),
  delta('end_turn', 12),
  STOP,
];

/** Upstream events of a thinking block, text, and a tool call. */
const TOOL_EVENTS = [
  START,
  sse({ type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } }),
  sse({ type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'Weather: use the tool.' } }),
  sse({ type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'sig' } }),
  sse({ type: 'content_block_stop', index: 0 }),
  sse({ type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } }),
  sse({ type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'Let me check.' } }),
  sse({ type: 'content_block_stop', index: 1 }),
  sse({ type: 'content_block_start', index: 2, content_block: { type: 'tool_use', id: 'toolu_01XYZ', name: 'weather', input: {} } }),
  sse({ type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '' } }),
  sse({ type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '{"city": ' } }),
  sse({ type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '"Paris"}' } }),
  sse({ type: 'content_block_stop', index: 2 }),
  delta('tool_use', 20),
  STOP,
];

interface Out {
  event: string;
  data: Json;
}

/** The translator's output as events, checking the framing: a named event, one data line, a blank line. */
function parse(text: string): Out[] {
  assert.ok(text === '' || text.endsWith('\n\n'), 'output ends on an event boundary');
  if (text === '') return [];
  return text
    .slice(0, -2)
    .split('\n\n')
    .map((block) => {
      const match = /^event: ([^\n]+)\ndata: ([^\n]+)$/.exec(block);
      assert.ok(match, `malformed event: ${JSON.stringify(block)}`);
      const data = JSON.parse(match[2]!) as Json;
      assert.equal(data.type, match[1], 'the event name is the data type');
      return { event: match[1]!, data };
    });
}

/** Everything the translator writes for these upstream bytes, fed in one piece or in the given chunks. */
function run(input: string | Buffer[]): string {
  const stream = translator.stream();
  const chunks = typeof input === 'string' ? [Buffer.from(input)] : input;
  let out = '';
  for (const chunk of chunks) out += stream.push(chunk);
  return out + stream.end();
}

function bytewise(text: string): Buffer[] {
  return [...Buffer.from(text)].map((byte) => Buffer.from([byte]));
}

describe('stream', () => {
  test('a text answer: the Responses events, in order, numbered from 0', (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: 1_750_000_000_000 });
    const events = parse(run(TEXT_EVENTS.join('')));
    assert.deepEqual(
      events.map((e) => e.event),
      [
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        'response.output_text.delta',
        'response.output_text.delta',
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'response.completed',
      ],
    );
    assert.deepEqual(
      events.map((e) => e.data.sequence_number),
      events.map((_, i) => i),
    );
    const [created, inProgress, added, partAdded, delta1, delta2, textDone, partDone, itemDone, completed] = events.map((e) => e.data);
    assert.equal(created!.response.status, 'in_progress');
    assert.equal(created!.response.id, 'resp_01ABC');
    assert.deepEqual(created!.response.output, []);
    assert.equal(created!.response.usage, null);
    assert.deepEqual(inProgress!.response, created!.response);
    assert.deepEqual(added, {
      type: 'response.output_item.added',
      output_index: 0,
      item: { id: 'msg_01ABC', type: 'message', status: 'in_progress', role: 'assistant', content: [] },
      sequence_number: 2,
    } satisfies OpenAI.Responses.ResponseOutputItemAddedEvent);
    assert.deepEqual(partAdded, {
      type: 'response.content_part.added',
      item_id: 'msg_01ABC',
      output_index: 0,
      content_index: 0,
      part: { type: 'output_text', annotations: [], logprobs: [], text: '' },
      sequence_number: 3,
    } satisfies OpenAI.Responses.ResponseContentPartAddedEvent);
    assert.deepEqual(delta1, {
      type: 'response.output_text.delta',
      item_id: 'msg_01ABC',
      output_index: 0,
      content_index: 0,
      delta: 'Grüße, ',
      logprobs: [],
      sequence_number: 4,
    } satisfies OpenAI.Responses.ResponseTextDeltaEvent);
    assert.equal(delta2!.delta, 'world 🎉');
    assert.deepEqual(textDone, {
      type: 'response.output_text.done',
      item_id: 'msg_01ABC',
      output_index: 0,
      content_index: 0,
      text: 'Grüße, world 🎉',
      logprobs: [],
      sequence_number: 6,
    } satisfies OpenAI.Responses.ResponseTextDoneEvent);
    const part = { type: 'output_text' as const, annotations: [], logprobs: [], text: 'Grüße, world 🎉' };
    assert.deepEqual(partDone, {
      type: 'response.content_part.done',
      item_id: 'msg_01ABC',
      output_index: 0,
      content_index: 0,
      part,
      sequence_number: 7,
    } satisfies OpenAI.Responses.ResponseContentPartDoneEvent);
    const item = { id: 'msg_01ABC', type: 'message' as const, status: 'completed' as const, role: 'assistant' as const, content: [part] };
    assert.deepEqual(itemDone, { type: 'response.output_item.done', output_index: 0, item, sequence_number: 8 } satisfies OpenAI.Responses.ResponseOutputItemDoneEvent);
    assert.equal(completed!.response.status, 'completed');
    assert.deepEqual(completed!.response.output, [item]);
    assert.deepEqual(completed!.response.usage, {
      input_tokens: 135,
      input_tokens_details: { cached_tokens: 30, cache_write_tokens: 5 },
      output_tokens: 12,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 147,
    });
  });

  test('a tool call after thinking and text: output indexes count output items, not Anthropic blocks', () => {
    const events = parse(run(TOOL_EVENTS.join('')));
    assert.deepEqual(
      events.map((e) => [e.event, e.data.output_index]),
      [
        ['response.created', undefined],
        ['response.in_progress', undefined],
        ['response.output_item.added', 0],
        ['response.content_part.added', 0],
        ['response.output_text.delta', 0],
        ['response.output_text.done', 0],
        ['response.content_part.done', 0],
        ['response.output_item.done', 0],
        ['response.output_item.added', 1],
        ['response.function_call_arguments.delta', 1],
        ['response.function_call_arguments.delta', 1],
        ['response.function_call_arguments.done', 1],
        ['response.output_item.done', 1],
        ['response.completed', undefined],
      ],
    );
    const calls = events.slice(8, 13).map((e) => e.data);
    assert.deepEqual(calls[0], {
      type: 'response.output_item.added',
      output_index: 1,
      item: { id: 'fc_01XYZ', type: 'function_call', status: 'in_progress', call_id: 'toolu_01XYZ', name: 'weather', arguments: '' },
      sequence_number: 8,
    } satisfies OpenAI.Responses.ResponseOutputItemAddedEvent);
    assert.deepEqual(calls[1], {
      type: 'response.function_call_arguments.delta',
      item_id: 'fc_01XYZ',
      output_index: 1,
      delta: '{"city": ',
      sequence_number: 9,
    } satisfies OpenAI.Responses.ResponseFunctionCallArgumentsDeltaEvent);
    assert.deepEqual(calls[3], {
      type: 'response.function_call_arguments.done',
      item_id: 'fc_01XYZ',
      output_index: 1,
      name: 'weather',
      arguments: '{"city": "Paris"}',
      sequence_number: 11,
    } satisfies OpenAI.Responses.ResponseFunctionCallArgumentsDoneEvent);
    const item = { id: 'fc_01XYZ', type: 'function_call' as const, status: 'completed' as const, call_id: 'toolu_01XYZ', name: 'weather', arguments: '{"city": "Paris"}' };
    assert.deepEqual(calls[4], { type: 'response.output_item.done', output_index: 1, item, sequence_number: 12 } satisfies OpenAI.Responses.ResponseOutputItemDoneEvent);
    const final = events.at(-1)!.data.response;
    assert.equal(final.status, 'completed');
    assert.deepEqual(
      final.output.map((o: Json) => o.id),
      ['msg_01ABC', 'fc_01XYZ'],
    );
    assert.deepEqual(final.output[1], item);
  });

  test('the final Response of a stream is the Response of the same answer as JSON', (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: 1_750_000_000_000 });
    const streamed = parse(run(TOOL_EVENTS.join(''))).at(-1)!.data.response;
    const json = answer({ ...MESSAGE, usage: { ...MESSAGE.usage, output_tokens: 20 } });
    // The only difference: the stream's arguments are the provider's own JSON text, the JSON answer's re-serialized.
    json.output[1].arguments = '{"city": "Paris"}';
    assert.deepEqual(streamed, json);
  });

  test('a tool call without arguments: the arguments are "{}", sent as a delta too', () => {
    const events = parse(
      run(
        [
          START,
          sse({ type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 'toolu_2', name: 'now', input: {} } }),
          sse({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '' } }),
          sse({ type: 'content_block_stop', index: 0 }),
          delta('tool_use', 3),
          STOP,
        ].join(''),
      ),
    );
    const args = events.filter((e) => e.event.startsWith('response.function_call_arguments')).map((e) => [e.event, e.data.delta ?? e.data.arguments]);
    assert.deepEqual(args, [
      ['response.function_call_arguments.delta', '{}'],
      ['response.function_call_arguments.done', '{}'],
    ]);
  });

  test('max_tokens ends with response.incomplete', () => {
    const events = parse(run([...TEXT_EVENTS.slice(0, -2), delta('max_tokens', 4096), STOP].join('')));
    const last = events.at(-1)!;
    assert.equal(last.event, 'response.incomplete');
    assert.equal(last.data.response.status, 'incomplete');
    assert.deepEqual(last.data.response.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(last.data.response.usage.output_tokens, 4096);
  });

  test('an upstream error event is an error event, and then nothing more', () => {
    const stream = translator.stream();
    let out = stream.push(Buffer.from(TEXT_EVENTS.slice(0, 4).join('')));
    out += stream.push(Buffer.from(sse({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } })));
    const after = stream.push(Buffer.from(TEXT_EVENTS.slice(4).join(''))) + stream.end();
    const events = parse(out);
    assert.deepEqual(events.at(-1)!.data, {
      type: 'error',
      code: 'overloaded_error',
      message: 'Overloaded',
      param: null,
      sequence_number: events.length - 1,
    } satisfies OpenAI.Responses.ResponseErrorEvent);
    assert.equal(after, '');
  });

  test('no [DONE]: end() adds nothing after a complete stream', () => {
    const stream = translator.stream();
    const out = stream.push(Buffer.from(TEXT_EVENTS.join('')));
    assert.equal(parse(out).at(-1)!.event, 'response.completed');
    assert.equal(stream.end(), '');
    assert.ok(!out.includes('[DONE]'));
  });

  test('a last event without its blank line is still translated at end()', () => {
    const stream = translator.stream();
    const text = TEXT_EVENTS.join('').slice(0, -1);
    const out = stream.push(Buffer.from(text));
    assert.ok(!out.includes('response.completed'));
    assert.equal(parse(stream.end()).at(-1)!.event, 'response.completed');
  });

  test('a stream that ends before message_stop was cut: no response.completed, and the next sequence number for the gateway\'s error event', () => {
    const stream = translator.stream();
    const events = parse(stream.push(Buffer.from(TEXT_EVENTS.slice(0, 4).join(''))) + stream.end());
    assert.ok(!events.some((e) => e.data.type === 'response.completed' || e.data.type === 'error'));
    assert.equal(stream.outcome?.(), 'cut');
    assert.equal(stream.nextSequence?.(), events.length);
    const whole = translator.stream();
    whole.push(Buffer.from(TEXT_EVENTS.join('')));
    whole.end();
    assert.equal(whole.outcome?.(), 'complete');
  });

  test('one byte at a time, CRLF line ends split too: the same output as in one piece', (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: 1_750_000_000_000 });
    for (const events of [TEXT_EVENTS, TOOL_EVENTS]) {
      const text = events.join('');
      const whole = run(text);
      assert.equal(run(bytewise(text)), whole);
      assert.equal(run(bytewise(text.replaceAll('\n', '\r\n'))), whole);
      // And split at every offset in two.
      const bytes = Buffer.from(text);
      for (let i = 1; i < bytes.length; i += 13) assert.equal(run([bytes.subarray(0, i), bytes.subarray(i)]), whole);
    }
    assert.ok(run(TEXT_EVENTS.join('')).includes('Grüße, '));
  });

  test('nothing is held back: each upstream event is translated as soon as it is complete', () => {
    const stream = translator.stream();
    const produced = TOOL_EVENTS.map((event) => {
      const bytes = Buffer.from(event);
      // Everything but the last byte (the blank line's end) completes nothing.
      assert.equal(stream.push(bytes.subarray(0, -1)), '');
      return parse(stream.push(bytes.subarray(-1))).map((e) => e.event);
    });
    assert.deepEqual(produced, [
      ['response.created', 'response.in_progress'],
      [],
      [],
      [],
      [],
      ['response.output_item.added', 'response.content_part.added'],
      ['response.output_text.delta'],
      ['response.output_text.done', 'response.content_part.done', 'response.output_item.done'],
      ['response.output_item.added'],
      [],
      ['response.function_call_arguments.delta'],
      ['response.function_call_arguments.delta'],
      ['response.function_call_arguments.done', 'response.output_item.done'],
      [],
      ['response.completed'],
    ]);
    assert.equal(stream.end(), '');
  });
});

describe('the OpenAI SDK reads the translated stream', () => {
  const eventStream = (text: string) => () => new Response(text, { headers: { 'content-type': 'text/event-stream' } });

  test('responses.create({stream: true}): every event is parsed, the text adds up', async () => {
    const client = clientAnswering(eventStream(run(TEXT_EVENTS.join(''))));
    const stream = await client.responses.create({ model: 'gpt-5', input: 'Hi', stream: true });
    const types: string[] = [];
    let text = '';
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
    }
    assert.equal(text, 'Grüße, world 🎉');
    assert.equal(types.at(-1), 'response.completed');
  });

  test('responses.stream(): finalResponse() has the text and the function call', async () => {
    const client = clientAnswering(eventStream(run(TOOL_EVENTS.join(''))));
    const stream = client.responses.stream({ model: 'gpt-5', input: 'Weather in Paris?' });
    const deltas: string[] = [];
    stream.on('response.function_call_arguments.delta', (event) => deltas.push(event.snapshot));
    const response = await stream.finalResponse();
    assert.equal(response.output_text, 'Let me check.');
    assert.equal(response.status, 'completed');
    const call = response.output[1];
    assert.ok(call?.type === 'function_call');
    assert.equal(call.call_id, 'toolu_01XYZ');
    assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
    assert.deepEqual(deltas, ['{"city": ', '{"city": "Paris"}']);
    assert.equal(response.usage?.input_tokens, 135);
  });

  test('responses.stream(): an incomplete answer keeps its text and says why', async () => {
    const client = clientAnswering(eventStream(run([...TEXT_EVENTS.slice(0, -2), delta('max_tokens', 4096), STOP].join(''))));
    const response = await client.responses.stream({ model: 'gpt-5', input: 'Hi' }).finalResponse();
    assert.equal(response.status, 'incomplete');
    assert.equal(response.incomplete_details?.reason, 'max_output_tokens');
    assert.equal(response.output_text, 'Grüße, world 🎉');
  });

  test('an upstream error reaches the SDK as an error event', async () => {
    const out = run(TEXT_EVENTS.slice(0, 4).join('') + sse({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }));
    const client = clientAnswering(eventStream(out));
    const stream = await client.responses.create({ model: 'gpt-5', input: 'Hi', stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    const last = events.at(-1);
    assert.ok(last?.type === 'error');
    assert.equal(last.code, 'overloaded_error');
    assert.equal(last.message, 'Overloaded');
  });
});
