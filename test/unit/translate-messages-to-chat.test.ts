// The Messages → Chat Completions translator: an Anthropic request rewritten for an OpenAI-style
// provider, and the provider's answers (JSON, SSE stream, errors) read back as Anthropic's, checked
// both field by field and through the official Anthropic SDK (its stream accumulator included).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import type { MessageCreateParams } from '@anthropic-ai/sdk/resources/messages';
import type { ChatCompletion, ChatCompletionChunk, ChatCompletionCreateParams } from 'openai/resources/chat/completions';
import { messagesToChat } from '../../src/translate/messages-to-chat.ts';
import { SseParser } from '../../src/translate/sse.ts';
import { TranslationError, type Json } from '../../src/translate/types.ts';

const UPSTREAM = 'gpt-upstream';

function translate(body: Json): { body: Json; dropped: readonly string[] } {
  return messagesToChat.request(body, UPSTREAM);
}

/** A typed Anthropic request, so the inputs below are shapes the real API accepts. */
function params(body: MessageCreateParams): Json {
  return body as unknown as Json;
}

function refused(body: Json, param: string, message?: RegExp): void {
  assert.throws(
    () => translate(body),
    (error: unknown) => {
      assert.ok(error instanceof TranslationError, `expected a TranslationError, got ${String(error)}`);
      assert.equal(error.param, param);
      if (message !== undefined) assert.match(error.message, message);
      return true;
    },
  );
}

const base = { model: 'claude-x', max_tokens: 100 } as const;

describe('messagesToChat.request', () => {
  test('is the messages → chat translator', () => {
    assert.equal(messagesToChat.from, 'messages');
    assert.equal(messagesToChat.to, 'chat');
  });

  test('model, max_tokens, system, sampling, stop sequences, user, stream (with usage)', () => {
    const out = translate({
      ...params({
        ...base,
        system: 'Be brief.',
        messages: [{ role: 'user', content: 'hi' }],
        stop_sequences: ['END', 'STOP'],
        metadata: { user_id: 'u-42' },
        stream: true,
      }),
      temperature: 0.3,
      top_p: 0.9,
    });
    const expected: ChatCompletionCreateParams = {
      model: UPSTREAM,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'hi' },
      ],
      max_tokens: 100,
      temperature: 0.3,
      top_p: 0.9,
      stop: ['END', 'STOP'],
      user: 'u-42',
      stream: true,
      stream_options: { include_usage: true },
    };
    assert.deepEqual(out.body, expected);
    assert.deepEqual(out.dropped, []);
  });

  test('stream: false is passed on without stream_options; null parameters count as not given', () => {
    const out = translate({ ...base, messages: [{ role: 'user', content: 'hi' }], stream: false, temperature: null, top_k: null });
    assert.deepEqual(out.body, { model: UPSTREAM, messages: [{ role: 'user', content: 'hi' }], max_tokens: 100, stream: false });
    assert.deepEqual(out.dropped, []);
  });

  test('system as text blocks is one system string, first; an empty system is left out', () => {
    const out = translate(
      params({
        ...base,
        system: [
          { type: 'text', text: 'Line one.' },
          { type: 'text', text: 'Line two.', cache_control: { type: 'ephemeral' } },
        ],
        messages: [{ role: 'user', content: 'hi' }],
      }),
    );
    assert.deepEqual(out.body.messages, [
      { role: 'system', content: 'Line one.\nLine two.' },
      { role: 'user', content: 'hi' },
    ]);
    assert.deepEqual(out.dropped, ['cache_control']);
    assert.deepEqual(translate({ ...base, system: '', messages: [{ role: 'user', content: 'hi' }] }).body.messages, [{ role: 'user', content: 'hi' }]);
    refused({ ...base, system: [{ type: 'image', source: { type: 'url', url: 'x' } }], messages: [] }, 'system[0]');
  });

  test('one text block is a plain string; several blocks and images are parts', () => {
    const out = translate(
      params({
        ...base,
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'only' }] },
          { role: 'assistant', content: [{ type: 'text', text: 'ok' }] },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'look:' },
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0K' } },
              { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
            ],
          },
          { role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'https://example.com/dog.jpg' } }] },
        ],
      }),
    );
    const expected: ChatCompletionCreateParams['messages'] = [
      { role: 'user', content: 'only' },
      { role: 'assistant', content: 'ok' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look:' },
          { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0K' } },
          { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
        ],
      },
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.com/dog.jpg' } }] },
    ];
    assert.deepEqual(out.body.messages, expected);
  });

  test('documents, file images and unknown blocks are refused, naming the block', () => {
    refused(
      params({
        ...base,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'read this' },
              { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'x' } },
            ],
          },
        ],
      }),
      'messages[0].content[1]',
      /'document'/,
    );
    refused(
      params({ ...base, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'file', file_id: 'file_1' } }] }] }),
      'messages[0].content[0].source',
    );
    refused({ ...base, messages: [{ role: 'user', content: [{ type: 'search_result', source: 's', title: 't', content: [] }] }] }, 'messages[0].content[0]');
    refused({ ...base, messages: [{ role: 'system', content: 'x' }] }, 'messages[0].role');
    refused({ ...base, messages: 'hi' }, 'messages');
  });

  test('assistant tool_use blocks are tool_calls; tool_result blocks are tool messages before the user text', () => {
    const out = translate(
      params({
        ...base,
        messages: [
          { role: 'user', content: 'weather in Paris and Rome?' },
          {
            role: 'assistant',
            content: [
              { type: 'thinking', thinking: 'two lookups', signature: 'sig' },
              { type: 'text', text: 'Looking up.' },
              { type: 'tool_use', id: 'toolu_1', name: 'weather', input: { city: 'Paris' } },
              { type: 'tool_use', id: 'toolu_2', name: 'weather', input: { city: 'Rome' } },
            ],
          },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'here you go' },
              { type: 'tool_result', tool_use_id: 'toolu_1', content: '18C' },
              {
                type: 'tool_result',
                tool_use_id: 'toolu_2',
                is_error: true,
                content: [
                  { type: 'text', text: 'lookup failed:' },
                  { type: 'text', text: 'timeout' },
                ],
              },
            ],
          },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_3', name: 'clock', input: {} }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_3' }] },
        ],
      }),
    );
    const expected: ChatCompletionCreateParams['messages'] = [
      { role: 'user', content: 'weather in Paris and Rome?' },
      {
        role: 'assistant',
        content: 'Looking up.',
        tool_calls: [
          { id: 'toolu_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
          { id: 'toolu_2', type: 'function', function: { name: 'weather', arguments: '{"city":"Rome"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'toolu_1', content: '18C' },
      { role: 'tool', tool_call_id: 'toolu_2', content: 'lookup failed:\ntimeout' },
      { role: 'user', content: 'here you go' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'toolu_3', type: 'function', function: { name: 'clock', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'toolu_3', content: '' },
    ];
    assert.deepEqual(out.body.messages, expected);
    assert.deepEqual(out.dropped, []);
  });

  test('thinking history is dropped without error; a turn that was only thinking is left out', () => {
    const out = translate(
      params({
        ...base,
        messages: [
          { role: 'user', content: 'a' },
          {
            role: 'assistant',
            content: [
              { type: 'redacted_thinking', data: 'xx' },
              { type: 'thinking', thinking: 't', signature: 's' },
            ],
          },
          { role: 'user', content: 'b' },
        ],
      }),
    );
    assert.deepEqual(out.body.messages, [
      { role: 'user', content: 'a' },
      { role: 'user', content: 'b' },
    ]);
  });

  test('an image in a tool_result is refused (a tool message holds text only)', () => {
    refused(
      params({
        ...base,
        messages: [
          {
            role: 'user',
            content: [{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'image', source: { type: 'url', url: 'https://x/y.png' } }] }],
          },
        ],
      }),
      'messages[0].content[0].content[0]',
    );
  });

  test('cache_control anywhere (top level, system, blocks, tool results, tools) is dropped and named once', () => {
    const out = translate(
      params({
        ...base,
        cache_control: { type: 'ephemeral' },
        system: [{ type: 'text', text: 's', cache_control: { type: 'ephemeral' } }],
        messages: [
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 't', content: [{ type: 'text', text: 'r', cache_control: { type: 'ephemeral', ttl: '1h' } }] },
              { type: 'text', text: 'q', cache_control: { type: 'ephemeral' } },
            ],
          },
        ],
        tools: [{ name: 'f', input_schema: { type: 'object' }, cache_control: { type: 'ephemeral' } }],
      }),
    );
    assert.deepEqual(out.dropped, ['cache_control']);
    assert.equal(JSON.stringify(out.body).includes('cache_control'), false);
  });

  test('tools become functions; tool_choice and disable_parallel_tool_use map', () => {
    const schema = { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] };
    const out = translate(
      params({
        ...base,
        messages: [{ role: 'user', content: 'hi' }],
        tools: [
          { name: 'weather', description: 'Weather now', input_schema: schema },
          { type: 'custom', name: 'clock', input_schema: { type: 'object' }, strict: true },
        ],
        tool_choice: { type: 'any', disable_parallel_tool_use: true },
      }),
    );
    const expected: Pick<ChatCompletionCreateParams, 'tools' | 'tool_choice' | 'parallel_tool_calls'> = {
      tools: [
        { type: 'function', function: { name: 'weather', description: 'Weather now', parameters: schema } },
        { type: 'function', function: { name: 'clock', parameters: { type: 'object' }, strict: true } },
      ],
      tool_choice: 'required',
      parallel_tool_calls: false,
    };
    assert.deepEqual({ tools: out.body.tools, tool_choice: out.body.tool_choice, parallel_tool_calls: out.body.parallel_tool_calls }, expected);

    const tools = [{ name: 'f', input_schema: { type: 'object' as const } }];
    const choice = (tool_choice: NonNullable<MessageCreateParams['tool_choice']>): Json =>
      translate(params({ ...base, messages: [{ role: 'user', content: 'x' }], tools, tool_choice })).body;
    assert.equal(choice({ type: 'auto' }).tool_choice, 'auto');
    assert.equal(choice({ type: 'auto' }).parallel_tool_calls, undefined);
    assert.equal(choice({ type: 'auto', disable_parallel_tool_use: false }).parallel_tool_calls, undefined);
    assert.equal(choice({ type: 'none' }).tool_choice, 'none');
    assert.deepEqual(choice({ type: 'tool', name: 'f' }).tool_choice, { type: 'function', function: { name: 'f' } });
    refused({ ...base, messages: [], tools, tool_choice: { type: 'sometimes' } }, 'tool_choice.type');
  });

  test('without tools, tool_choice is not sent (the chat API refuses it alone) and an empty tools list is left out', () => {
    const out = translate(params({ ...base, messages: [{ role: 'user', content: 'x' }], tools: [], tool_choice: { type: 'auto', disable_parallel_tool_use: true } }));
    assert.equal('tools' in out.body, false);
    assert.equal('tool_choice' in out.body, false);
    assert.equal('parallel_tool_calls' in out.body, false);
  });

  test('server tools are refused, naming the tool', () => {
    refused(
      params({
        ...base,
        messages: [{ role: 'user', content: 'x' }],
        tools: [
          { name: 'f', input_schema: { type: 'object' } },
          { type: 'web_search_20250305', name: 'web_search' },
        ],
      }),
      'tools[1]',
      /web_search_20250305/,
    );
    refused(params({ ...base, messages: [], tools: [{ type: 'bash_20250124', name: 'bash' }] }), 'tools[0]');
  });

  test('tool hints with no chat equivalent are dropped and named', () => {
    const out = translate(
      params({
        ...base,
        messages: [{ role: 'user', content: 'x' }],
        tools: [{ name: 'f', input_schema: { type: 'object' }, defer_loading: false, eager_input_streaming: true, input_examples: [{ a: 1 }] }],
      }),
    );
    assert.deepEqual(out.body.tools, [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }]);
    assert.deepEqual(out.dropped, ['defer_loading', 'eager_input_streaming', 'input_examples']);
  });

  test('parameters with no equivalent that only tune serving are dropped and named', () => {
    const out = translate({
      ...base,
      messages: [{ role: 'user', content: 'x' }],
      top_k: 5,
      service_tier: 'auto',
      container: 'container_1',
      mcp_servers: [],
      thinking: { type: 'disabled' },
    });
    assert.deepEqual(out.dropped, ['top_k', 'service_tier', 'container', 'mcp_servers', 'thinking']);
    assert.deepEqual(out.body, { model: UPSTREAM, messages: [{ role: 'user', content: 'x' }], max_tokens: 100 });
    assert.deepEqual(translate({ ...base, messages: [], thinking: { type: 'adaptive' } }).dropped, ['thinking']);
  });

  test('what would change the answer is refused, naming the parameter', () => {
    refused(params({ ...base, messages: [], thinking: { type: 'enabled', budget_tokens: 2048 } }), 'thinking', /thinking/);
    refused({ ...base, messages: [], mcp_servers: [{ type: 'url', url: 'https://mcp.example', name: 'm' }] }, 'mcp_servers');
    refused({ ...base, messages: [], output_config: { effort: 'low' } }, 'output_config', /unknown parameter/);
    refused({ ...base, messages: [], speed: 'fast' }, 'speed', /unknown parameter/);
    refused({ ...base, messages: [], frobnicate: 1 }, 'frobnicate', /unknown parameter 'frobnicate'/);
    refused({ ...base, messages: [], metadata: { user_id: 'u', tenant: 't' } }, 'metadata.tenant');
  });
});

/** A fetch that answers every request with `body`, for the real SDK clients. */
function fetchWith(body: string, contentType: string, status = 200): typeof fetch {
  return async () => new Response(body, { status, headers: { 'content-type': contentType } });
}

function sdk(body: string, contentType: string, status = 200): Anthropic {
  return new Anthropic({ apiKey: 'test', baseURL: 'http://sluice.invalid', maxRetries: 0, fetch: fetchWith(body, contentType, status) });
}

const sdkParams = { model: 'claude-x', max_tokens: 100, messages: [{ role: 'user' as const, content: 'hi' }] };

describe('messagesToChat.response', () => {
  const completion: ChatCompletion = {
    id: 'chatcmpl-abc123',
    object: 'chat.completion',
    created: 1,
    model: 'gpt-upstream-2025',
    choices: [
      {
        index: 0,
        finish_reason: 'tool_calls',
        logprobs: null,
        message: {
          role: 'assistant',
          content: 'Checking.',
          refusal: null,
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
            { id: 'call_2', type: 'function', function: { name: 'clock', arguments: '{"tz": "UTC"' } },
          ],
        },
      },
    ],
    usage: { prompt_tokens: 120, completion_tokens: 30, total_tokens: 150, prompt_tokens_details: { cached_tokens: 100 } },
  };

  test('text and tool calls as blocks, the id and model, stop reason and usage (cached tokens apart)', () => {
    assert.deepEqual(messagesToChat.response(completion as unknown as Json), {
      id: 'msg_abc123',
      type: 'message',
      role: 'assistant',
      model: 'gpt-upstream-2025',
      content: [
        { type: 'text', text: 'Checking.' },
        { type: 'tool_use', id: 'call_1', name: 'weather', input: { city: 'Paris' } },
        // Arguments that are not JSON become an empty input.
        { type: 'tool_use', id: 'call_2', name: 'clock', input: {} },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      stop_details: null,
      usage: { input_tokens: 20, cache_creation_input_tokens: 0, cache_read_input_tokens: 100, output_tokens: 30 },
    });
  });

  test('every finish reason maps; empty content gives no text block; a refusal is text; no usage is zeros', () => {
    const answer = (finish: string | null, message: Json, extra: Json = {}): Json =>
      messagesToChat.response({ id: 'x-1', model: 'm', choices: [{ index: 0, finish_reason: finish, message }], ...extra });
    const cases: [string | null, string][] = [
      ['stop', 'end_turn'],
      ['length', 'max_tokens'],
      ['tool_calls', 'tool_use'],
      ['function_call', 'tool_use'],
      ['content_filter', 'refusal'],
      [null, 'end_turn'],
    ];
    for (const [finish, stop] of cases) assert.equal(answer(finish, { role: 'assistant', content: 'a' }).stop_reason, stop);

    const empty = answer('stop', { role: 'assistant', content: '' });
    assert.deepEqual(empty.content, []);
    assert.equal(empty.id, 'msg_x-1');
    assert.deepEqual(empty.usage, { input_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 });

    const refusal = answer('content_filter', { role: 'assistant', content: null, refusal: 'I cannot help with that.' }, { usage: { prompt_tokens: 9, completion_tokens: 4 } });
    assert.deepEqual(refusal.content, [{ type: 'text', text: 'I cannot help with that.' }]);
    assert.deepEqual(refusal.usage, { input_tokens: 9, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 4 });
  });

  test('parses in the Anthropic SDK', async () => {
    const body = JSON.stringify(messagesToChat.response(completion as unknown as Json));
    const message = await sdk(body, 'application/json').messages.create(sdkParams);
    assert.equal(message.id, 'msg_abc123');
    assert.equal(message.stop_reason, 'tool_use');
    assert.equal(message.content.length, 3);
    const call = message.content[1];
    assert.ok(call?.type === 'tool_use');
    assert.deepEqual(call.input, { city: 'Paris' });
    assert.equal(message.usage.cache_read_input_tokens, 100);
  });
});

describe('messagesToChat.error', () => {
  test("an OpenAI error is Anthropic's, keeping the status's meaning and the message", async () => {
    const body = { error: { message: 'Rate limit reached', type: 'requests', code: 'rate_limit_exceeded', param: null } };
    assert.deepEqual(messagesToChat.error(429, body), { type: 'error', error: { type: 'rate_limit_error', message: 'Rate limit reached' } });
    assert.deepEqual(messagesToChat.error(500, undefined), { type: 'error', error: { type: 'api_error', message: 'provider answered HTTP 500' } });
    const out = JSON.stringify(messagesToChat.error(400, { error: { message: 'bad', type: 'invalid_request_error' } }));
    await assert.rejects(sdk(out, 'application/json', 400).messages.create(sdkParams), (error: unknown) => {
      assert.ok(error instanceof Anthropic.BadRequestError);
      assert.equal(error.type, 'invalid_request_error');
      return true;
    });
  });
});

// ---- streams ----

function chunk(fields: Partial<ChatCompletionChunk> & { choices: ChatCompletionChunk['choices'] }): ChatCompletionChunk {
  return { id: 'chatcmpl-s1', object: 'chat.completion.chunk', created: 1, model: 'gpt-upstream-2025', ...fields };
}

function delta(d: ChatCompletionChunk.Choice.Delta, finish: ChatCompletionChunk.Choice['finish_reason'] = null): ChatCompletionChunk {
  return chunk({ choices: [{ index: 0, delta: d, finish_reason: finish }] });
}

const usageChunk = chunk({ choices: [], usage: { prompt_tokens: 50, completion_tokens: 12, total_tokens: 62, prompt_tokens_details: { cached_tokens: 8 } } });

/** Upstream SSE text: one `data:` event per item, then `data: [DONE]` unless told not to. */
function upstream(items: (ChatCompletionChunk | Json)[], done = true): string {
  return items.map((item) => `data: ${JSON.stringify(item)}\n\n`).join('') + (done ? 'data: [DONE]\n\n' : '');
}

/** Feeds `text` in pieces of `size` bytes (Infinity: one piece) and returns all the output. */
function run(text: string, size = Infinity): string {
  const stream = messagesToChat.stream();
  const bytes = Buffer.from(text);
  let out = '';
  if (size === Infinity) out += stream.push(bytes);
  else for (let i = 0; i < bytes.length; i += size) out += stream.push(bytes.subarray(i, i + size));
  return out + stream.end();
}

interface Event {
  event: string | undefined;
  data: Json;
}

function events(text: string): Event[] {
  const parser = new SseParser();
  return [...parser.push(text), ...parser.finish()].map((e) => ({ event: e.event, data: JSON.parse(e.data) as Json }));
}

/** Event names, each with its index when it has one: `content_block_delta#1`. */
function names(list: Event[]): string[] {
  return list.map((e) => (typeof e.data.index === 'number' ? `${e.event}#${e.data.index}` : String(e.event)));
}

async function finalMessage(sse: string): Promise<{ message: Anthropic.Message; texts: string[] }> {
  const stream = sdk(sse, 'text/event-stream').messages.stream(sdkParams);
  const texts: string[] = [];
  stream.on('text', (text) => texts.push(text));
  const message = await stream.finalMessage();
  return { message, texts };
}

const textStream = upstream([
  delta({ role: 'assistant', content: '', refusal: null }),
  delta({ content: 'Hel' }),
  delta({ content: 'lo, wörld 👋' }),
  delta({}, 'stop'),
  usageChunk,
]);

const toolStream = upstream([
  delta({ role: 'assistant', content: 'Let me check.' }),
  delta({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'weather', arguments: '' } }] }),
  delta({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
  delta({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
  delta({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'clock', arguments: '{}' } }] }),
  delta({}, 'tool_calls'),
  usageChunk,
]);

describe('messagesToChat.stream', () => {
  test('text: message_start, one text block, message_delta with the usage, message_stop', () => {
    const list = events(run(textStream));
    assert.deepEqual(names(list), [
      'message_start',
      'content_block_start#0',
      'content_block_delta#0',
      'content_block_delta#0',
      'content_block_stop#0',
      'message_delta',
      'message_stop',
    ]);
    for (const e of list) assert.equal(e.data.type, e.event);
    assert.deepEqual(list[0]?.data, {
      type: 'message_start',
      message: {
        id: 'msg_s1',
        type: 'message',
        role: 'assistant',
        model: 'gpt-upstream-2025',
        content: [],
        stop_reason: null,
        stop_sequence: null,
        stop_details: null,
        usage: { input_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 },
      },
    });
    assert.deepEqual(list[1]?.data, { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    assert.deepEqual(list[2]?.data, { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hel' } });
    assert.deepEqual(list[3]?.data, { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'lo, wörld 👋' } });
    assert.deepEqual(list[4]?.data, { type: 'content_block_stop', index: 0 });
    assert.deepEqual(list[5]?.data, {
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null, stop_details: null },
      usage: { input_tokens: 42, cache_creation_input_tokens: 0, cache_read_input_tokens: 8, output_tokens: 12 },
    });
    assert.deepEqual(list[6]?.data, { type: 'message_stop' });
  });

  test('tool calls: the text block is closed, then one tool_use block per call with its argument pieces', () => {
    const list = events(run(toolStream));
    assert.deepEqual(names(list), [
      'message_start',
      'content_block_start#0',
      'content_block_delta#0',
      'content_block_stop#0',
      'content_block_start#1',
      'content_block_delta#1',
      'content_block_delta#1',
      'content_block_stop#1',
      'content_block_start#2',
      'content_block_delta#2',
      'content_block_stop#2',
      'message_delta',
      'message_stop',
    ]);
    assert.deepEqual(list[4]?.data, {
      type: 'content_block_start',
      index: 1,
      content_block: { type: 'tool_use', id: 'call_a', name: 'weather', input: {} },
    });
    assert.deepEqual(list[5]?.data, { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"city":' } });
    assert.deepEqual(list[6]?.data, { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '"Paris"}' } });
    assert.deepEqual(list[8]?.data, {
      type: 'content_block_start',
      index: 2,
      content_block: { type: 'tool_use', id: 'call_b', name: 'clock', input: {} },
    });
    assert.equal((list[11]?.data.delta as Json).stop_reason, 'tool_use');
  });

  test('one byte at a time, or in one piece, or split anywhere: the same output', () => {
    for (const text of [textStream, toolStream, textStream.replaceAll('\n', '\r\n')]) {
      const whole = run(text);
      assert.equal(run(text, 1), whole);
      assert.equal(run(text, 7), whole);
      const bytes = Buffer.from(text);
      for (let cut = 1; cut < bytes.length; cut++) {
        const stream = messagesToChat.stream();
        const out = stream.push(bytes.subarray(0, cut)) + stream.push(bytes.subarray(cut)) + stream.end();
        assert.equal(out, whole, `split at byte ${cut}`);
      }
    }
  });

  test('each upstream event is answered at once; message_delta waits for the usage chunk, message_stop for [DONE]', () => {
    const stream = messagesToChat.stream();
    const parts = [delta({ role: 'assistant', content: 'Hi' }), delta({}, 'length'), usageChunk];
    const first = `data: ${JSON.stringify(parts[0])}\n\n`;
    assert.equal(stream.push(Buffer.from(first.slice(0, 20))), '', 'an unfinished event gives nothing');
    assert.deepEqual(names(events(stream.push(Buffer.from(first.slice(20))))), ['message_start', 'content_block_start#0', 'content_block_delta#0']);
    assert.deepEqual(names(events(stream.push(Buffer.from(`data: ${JSON.stringify(parts[1])}\n\n`)))), ['content_block_stop#0']);
    const last = events(stream.push(Buffer.from(`data: ${JSON.stringify(parts[2])}\n\n`)));
    assert.deepEqual(names(last), ['message_delta']);
    assert.deepEqual(last[0]?.data.delta, { stop_reason: 'max_tokens', stop_sequence: null, stop_details: null });
    assert.deepEqual(names(events(stream.push(Buffer.from('data: [DONE]\n\n')))), ['message_stop']);
    assert.equal(stream.end(), '');
    assert.equal(stream.outcome?.(), 'complete');
  });

  test('usage on the finish chunk itself sends message_delta there', () => {
    const finish = chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } });
    const stream = messagesToChat.stream();
    stream.push(Buffer.from(upstream([delta({ content: 'x' })], false)));
    const list = events(stream.push(Buffer.from(upstream([finish], false))));
    assert.deepEqual(names(list), ['content_block_stop#0', 'message_delta']);
    assert.deepEqual(list[1]?.data.usage, { input_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 2 });
  });

  test('without a usage chunk the end comes at [DONE], with output_tokens 0', () => {
    const stream = messagesToChat.stream();
    assert.deepEqual(names(events(stream.push(Buffer.from(upstream([delta({ content: 'x' }), delta({}, 'stop')], false))))), [
      'message_start',
      'content_block_start#0',
      'content_block_delta#0',
      'content_block_stop#0',
    ]);
    const last = events(stream.push(Buffer.from('data: [DONE]\n\n')));
    assert.deepEqual(names(last), ['message_delta', 'message_stop']);
    assert.deepEqual(last[0]?.data.usage, { output_tokens: 0 });
    assert.equal(stream.end(), '');
  });

  test('a stream that ends without [DONE] (and without a final blank line) was cut: end() gives its last events, never message_stop', () => {
    const text = upstream([delta({ content: 'partial' }), delta({}, 'stop'), usageChunk], false).replace(/\n\n$/, '');
    const stream = messagesToChat.stream();
    const pushed = events(stream.push(Buffer.from(text)));
    assert.deepEqual(names(pushed), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'content_block_stop#0']);
    const ended = events(stream.end());
    assert.deepEqual(names(ended), ['message_delta']);
    assert.equal((ended[0]?.data.usage as Json).output_tokens, 12);
    assert.equal(stream.outcome?.(), 'cut');
    // Cut off mid-text: no ending at all (the gateway ends the stream with its error event).
    const cut = messagesToChat.stream();
    assert.deepEqual(names(events(cut.push(Buffer.from(upstream([delta({ content: 'cut' })], false))) + cut.end())), ['message_start', 'content_block_start#0', 'content_block_delta#0']);
    assert.equal(cut.outcome?.(), 'cut');
  });

  test('an upstream error event becomes an Anthropic error event, and nothing follows it', () => {
    const text = upstream([delta({ content: 'Hi' }), { error: { message: 'upstream overloaded', type: 'server_error' } }, delta({ content: 'more' }), usageChunk]);
    const list = events(run(text));
    assert.deepEqual(names(list), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'error']);
    assert.deepEqual(list[3]?.data, { type: 'error', error: { type: 'api_error', message: 'upstream overloaded' } });
    assert.equal(run(text, 1), run(text));
  });

  test('an empty stream is an error, not an empty answer', () => {
    const done = messagesToChat.stream();
    const list = events(done.push(Buffer.from('data: [DONE]\n\n')) + done.end());
    assert.deepEqual(names(list), ['error']);
    assert.equal((list[0]?.data.error as Json).type, 'api_error');
    assert.equal(done.outcome?.(), 'error');
    // Nothing at all, not even [DONE]: cut.
    const nothing = messagesToChat.stream();
    assert.equal(nothing.end(), '');
    assert.equal(nothing.outcome?.(), 'cut');
  });

  test('comments, keep-alives and empty deltas produce nothing; a refusal streams as text', () => {
    const text = ': keep-alive\n\n' + upstream([delta({ role: 'assistant', content: null }), delta({ refusal: 'No.' }, 'content_filter'), usageChunk]);
    const list = events(run(text));
    assert.deepEqual(names(list), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'content_block_stop#0', 'message_delta', 'message_stop']);
    assert.equal((list[4]?.data.delta as Json).stop_reason, 'refusal');
  });

  test('a tool call straight after message_start opens block 0; text after a tool call opens a new block', () => {
    const text = upstream([
      delta({ role: 'assistant', tool_calls: [{ index: 0, id: 'call_z', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] }),
      delta({ content: 'done' }),
      delta({}, 'tool_calls'),
    ]);
    assert.deepEqual(names(events(run(text))), [
      'message_start',
      'content_block_start#0',
      'content_block_delta#0',
      'content_block_stop#0',
      'content_block_start#1',
      'content_block_delta#1',
      'content_block_stop#1',
      'message_delta',
      'message_stop',
    ]);
  });

  test("the Anthropic SDK's stream accumulator reads the text stream", async () => {
    const { message, texts } = await finalMessage(run(textStream, 3));
    assert.deepEqual(texts, ['Hel', 'lo, wörld 👋']);
    assert.equal(message.id, 'msg_s1');
    assert.equal(message.model, 'gpt-upstream-2025');
    assert.deepEqual(message.content, [{ type: 'text', text: 'Hello, wörld 👋' }]);
    assert.equal(message.stop_reason, 'end_turn');
    assert.equal(message.stop_sequence, null);
    assert.deepEqual(message.usage, { input_tokens: 42, cache_creation_input_tokens: 0, cache_read_input_tokens: 8, output_tokens: 12 });
  });

  test("the Anthropic SDK's stream accumulator reads the tool calls", async () => {
    const { message } = await finalMessage(run(toolStream, 1));
    assert.deepEqual(message.content, [
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: 'call_a', name: 'weather', input: { city: 'Paris' } },
      { type: 'tool_use', id: 'call_b', name: 'clock', input: {} },
    ]);
    assert.equal(message.stop_reason, 'tool_use');
    assert.equal(message.usage.output_tokens, 12);
  });

  test('the Anthropic SDK raises the error event', async () => {
    const sse = run(upstream([delta({ content: 'Hi' }), { error: { message: 'boom' } }], false));
    await assert.rejects(finalMessage(sse), (error: unknown) => {
      assert.ok(error instanceof Anthropic.APIError);
      assert.match(error.message, /boom/);
      return true;
    });
  });
});

describe('messagesToChat: what OpenAI-compatible servers send beyond OpenAI', () => {
  const call = { id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } };
  const answer = (finish: string | null, message: Json): Json =>
    messagesToChat.response({ id: 'chatcmpl-c1', model: 'm', choices: [{ index: 0, finish_reason: finish, message: { role: 'assistant', ...message } }] });

  test('tool calls finished with `stop` (or no reason) are stop_reason tool_use; length and content_filter stay', async () => {
    assert.equal(answer('stop', { content: null, tool_calls: [call] }).stop_reason, 'tool_use');
    assert.equal(answer(null, { content: 'x', tool_calls: [call] }).stop_reason, 'tool_use');
    assert.equal(answer('length', { content: null, tool_calls: [call] }).stop_reason, 'max_tokens');
    assert.equal(answer('content_filter', { content: null, tool_calls: [call] }).stop_reason, 'refusal');
    assert.equal(answer('stop', { content: 'x', tool_calls: [] }).stop_reason, 'end_turn');

    const sse = run(upstream([delta({ tool_calls: [{ index: 0, ...call }] as ChatCompletionChunk.Choice.Delta.ToolCall[] }), delta({}, 'stop'), usageChunk]));
    const list = events(sse);
    assert.equal((list.find((e) => e.event === 'message_delta')?.data.delta as Json).stop_reason, 'tool_use');
    const { message } = await finalMessage(sse);
    assert.equal(message.stop_reason, 'tool_use');
    assert.deepEqual(message.content, [{ type: 'tool_use', id: 'call_1', name: 'weather', input: { city: 'Oslo' } }]);
  });

  test('arguments already parsed are the input; arguments that are JSON but not an object are an empty input', () => {
    const input = (args: unknown): unknown =>
      (answer('tool_calls', { content: null, tool_calls: [{ ...call, function: { name: 'weather', arguments: args } }] }).content as Json[])[0]?.input;
    assert.deepEqual(input({ city: 'Oslo' }), { city: 'Oslo' });
    assert.deepEqual(input('[1,2]'), {});
    assert.deepEqual(input('"Oslo"'), {});
    assert.deepEqual(input('null'), {});
    assert.deepEqual(input('{"city":"Oslo"}'), { city: 'Oslo' });
  });

  test('content in parts: the text parts are the text, JSON and streamed; other parts are left out', async () => {
    const parts = [{ type: 'thinking', thinking: [{ type: 'text', text: 'hmm' }] }, { type: 'text', text: 'Hel' }, { type: 'text', text: 'lo' }];
    assert.deepEqual(answer('stop', { content: parts }).content, [{ type: 'text', text: 'Hello' }]);
    assert.deepEqual(answer('stop', { content: [{ type: 'thinking', thinking: 'x' }] }).content, []);
    const sse = run(upstream([delta({ role: 'assistant', content: [parts[0], parts[1]] } as unknown as ChatCompletionChunk.Choice.Delta), delta({ content: [parts[2]] } as unknown as ChatCompletionChunk.Choice.Delta), delta({}, 'stop'), usageChunk]));
    const { message, texts } = await finalMessage(sse);
    assert.deepEqual(texts, ['Hel', 'lo']);
    assert.deepEqual(message.content, [{ type: 'text', text: 'Hello' }]);
  });

  test("Azure's first chunk (no choices, no id, no model) does not start the message: the id and model are the answer's", async () => {
    const azure = { id: '', object: '', created: 0, model: '', choices: [], prompt_filter_results: [{ prompt_index: 0, content_filter_results: {} }] };
    const sse = run(upstream([azure, delta({ role: 'assistant', content: 'Hi' }), delta({}, 'stop'), usageChunk]));
    const list = events(sse);
    assert.deepEqual(names(list), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'content_block_stop#0', 'message_delta', 'message_stop']);
    const { message } = await finalMessage(sse);
    assert.equal(message.id, 'msg_s1');
    assert.equal(message.model, 'gpt-upstream-2025');
    // A stream of nothing else is still an error.
    assert.deepEqual(names(events(run(upstream([azure])))), ['error']);
  });

  test('a tool call whose pieces repeat its id without an index stays one call', async () => {
    const pieces = ['{"ci', 'ty":', '"Oslo"}'].map((args, i) =>
      delta({ tool_calls: [{ id: 'call_r', type: 'function', function: { ...(i === 0 ? { name: 'weather' } : {}), arguments: args } }] as ChatCompletionChunk.Choice.Delta.ToolCall[] }),
    );
    const second = delta({ tool_calls: [{ id: 'call_s', type: 'function', function: { name: 'clock', arguments: '{}' } }] as ChatCompletionChunk.Choice.Delta.ToolCall[] });
    const { message } = await finalMessage(run(upstream([...pieces, second, delta({}, 'tool_calls'), usageChunk])));
    assert.deepEqual(message.content, [
      { type: 'tool_use', id: 'call_r', name: 'weather', input: { city: 'Oslo' } },
      { type: 'tool_use', id: 'call_s', name: 'clock', input: {} },
    ]);
  });
});
