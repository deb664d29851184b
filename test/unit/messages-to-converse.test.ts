// The Messages → Bedrock Converse translator: an Anthropic request rewritten as a Converse request
// (checked against what the AWS SDK serializes for the same request), and Bedrock's answers (JSON,
// the event stream as the provider relays it in SSE, errors) read back as Anthropic's, checked
// field by field and through the official Anthropic SDK (its stream accumulator included).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import Anthropic from '@anthropic-ai/sdk';
import type { MessageCreateParams } from '@anthropic-ai/sdk/resources/messages';
import { BedrockRuntimeClient, ConverseCommand, ConverseStreamCommand, type ConverseCommandInput, type ConverseResponse, type ConverseStreamOutput } from '@aws-sdk/client-bedrock-runtime';
import { EventStreamCodec } from '@smithy/core/event-streams';
import { fromUtf8, toUtf8 } from '@smithy/core/serde';
import { converseTranslation, messagesToConverse, bedrockModelId } from '../../src/translate/messages-to-converse.ts';
import { SseParser } from '../../src/translate/sse.ts';
import { TranslationError, type Json, type StreamTranslator } from '../../src/translate/types.ts';

const CLAUDE = 'us.anthropic.claude-sonnet-4-5-20250929-v1:0';
const LLAMA = 'meta.llama3-3-70b-instruct-v1:0';
const NOVA = 'amazon.nova-pro-v1:0';
const PROFILE = 'arn:aws:bedrock:us-east-1:111122223333:application-inference-profile/a1b2c3d4e5';
const MODEL = 'claude-client-name';
const translator = converseTranslation(MODEL);

function translate(body: Json, upstream = CLAUDE): { body: Json; dropped: readonly string[] } {
  return translator.request(body, upstream);
}

/** A typed Anthropic request, so the inputs below are shapes the real API accepts. */
function params(body: MessageCreateParams): Json {
  return body as unknown as Json;
}

function refused(body: Json, param: string, message?: RegExp, upstream = CLAUDE): void {
  assert.throws(
    () => translate(body, upstream),
    (error: unknown) => {
      assert.ok(error instanceof TranslationError, `expected a TranslationError, got ${String(error)}`);
      assert.equal(error.param, param);
      if (message !== undefined) assert.match(error.message, message);
      return true;
    },
  );
}

const base = { model: 'claude-x', max_tokens: 100 } as const;
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

/** The body without the two fields the provider removes (`model`, `stream`). */
function converseFields(body: Json): Json {
  const { model: _model, stream: _stream, ...rest } = body;
  return rest;
}

/** Converse's JSON blobs (base64 strings) as the SDK's input takes them (bytes). */
function asSdkInput(value: unknown, key = ''): unknown {
  if (typeof value === 'string' && (key === 'bytes' || key === 'redactedContent')) return Buffer.from(value, 'base64');
  if (Array.isArray(value)) return value.map((item) => asSdkInput(item));
  // Tool inputs and schemas are free JSON documents: left as they are.
  if (value !== null && typeof value === 'object' && key !== 'json' && key !== 'input' && key !== 'additionalModelRequestFields') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, asSdkInput(v, k)]));
  }
  return value;
}

/** What the AWS SDK sends for the same Converse request: it serializes by the API's schema and leaves out any field the API does not define. */
async function sdkSerialized(body: Json, modelId: string): Promise<Json> {
  const client = new BedrockRuntimeClient({ region: 'us-east-1', credentials: { accessKeyId: 'a', secretAccessKey: 'b' } });
  let sent: Uint8Array | undefined;
  client.middlewareStack.add(
    () => async (args) => {
      sent = (args.request as { body: Uint8Array }).body;
      throw new Error('captured');
    },
    { step: 'build', name: 'capture' },
  );
  const input = { modelId, ...(asSdkInput(converseFields(body)) as object) } as ConverseCommandInput;
  await assert.rejects(client.send(new ConverseCommand(input)), /captured/);
  return JSON.parse(new TextDecoder().decode(sent)) as Json;
}

async function matchesSdk(body: Json, modelId = CLAUDE): Promise<void> {
  assert.deepEqual(await sdkSerialized(body, modelId), converseFields(body));
}

describe('messagesToConverse.request', () => {
  test('is the messages → converse translator', () => {
    assert.equal(messagesToConverse.from, 'messages');
    assert.equal(messagesToConverse.to, 'converse');
    assert.equal(translator.to, 'converse');
  });

  test('model and stream for the provider; system, messages and inferenceConfig; the AWS SDK sends the same', async () => {
    const out = translate({
      ...params({ ...base, system: 'Be brief.', messages: [{ role: 'user', content: 'hi' }], stop_sequences: ['END'], stream: true }),
      temperature: 0.3,
      top_p: 0.9,
    });
    assert.deepEqual(out.body, {
      model: CLAUDE,
      messages: [{ role: 'user', content: [{ text: 'hi' }] }],
      system: [{ text: 'Be brief.' }],
      inferenceConfig: { maxTokens: 100, temperature: 0.3, topP: 0.9, stopSequences: ['END'] },
      additionalModelResponseFieldPaths: ['/stop_sequence'],
      stream: true,
    });
    assert.deepEqual(out.dropped, []);
    await matchesSdk(out.body);
  });

  test('stream is false unless true; null parameters count as not given; an empty system is left out', () => {
    const out = translate({ ...base, system: '', messages: [{ role: 'user', content: 'hi' }], temperature: null, top_k: null, stop_sequences: null });
    assert.deepEqual(out.body, { model: CLAUDE, messages: [{ role: 'user', content: [{ text: 'hi' }] }], inferenceConfig: { maxTokens: 100 }, stream: false });
    assert.equal(translate({ ...base, messages: [], stream: 'yes' }).body.stream, false);
  });

  test('cache_control is a cache point after its block (system, messages, tools, tool results), with its ttl', async () => {
    const out = translate(
      params({
        ...base,
        system: [
          { type: 'text', text: 'Long instructions.', cache_control: { type: 'ephemeral', ttl: '1h' } },
          { type: 'text', text: 'More.' },
        ],
        tools: [{ name: 'lookup', input_schema: { type: 'object', properties: {} }, cache_control: { type: 'ephemeral' } }],
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'A long document.', cache_control: { type: 'ephemeral' } }] },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'tu_1', name: 'lookup', input: {} }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'tu_1', content: [{ type: 'text', text: 'found', cache_control: { type: 'ephemeral' } }] }] },
        ],
      }),
    );
    assert.deepEqual(out.body.system, [{ text: 'Long instructions.' }, { cachePoint: { type: 'default', ttl: '1h' } }, { text: 'More.' }]);
    assert.deepEqual(out.body.messages, [
      { role: 'user', content: [{ text: 'A long document.' }, { cachePoint: { type: 'default' } }] },
      { role: 'assistant', content: [{ toolUse: { toolUseId: 'tu_1', name: 'lookup', input: {} } }] },
      { role: 'user', content: [{ toolResult: { toolUseId: 'tu_1', content: [{ text: 'found' }] } }, { cachePoint: { type: 'default' } }] },
    ]);
    assert.deepEqual(out.body.toolConfig, {
      tools: [{ toolSpec: { name: 'lookup', inputSchema: { json: { type: 'object', properties: {} } } } }, { cachePoint: { type: 'default' } }],
    });
    assert.deepEqual(out.dropped, []);
    await matchesSdk(out.body);

    // Nova takes cache points too; a family that does not has them dropped, and named once.
    assert.deepEqual(translate({ ...base, system: [{ type: 'text', text: 's', cache_control: { type: 'ephemeral' } }], messages: [] }, NOVA).body.system, [
      { text: 's' },
      { cachePoint: { type: 'default' } },
    ]);
    const llama = translate({ ...base, system: [{ type: 'text', text: 's', cache_control: { type: 'ephemeral' } }], messages: [{ role: 'user', content: [{ type: 'text', text: 'x', cache_control: { type: 'ephemeral' } }] }] }, LLAMA);
    assert.deepEqual(llama.body.system, [{ text: 's' }]);
    assert.deepEqual(llama.body.messages, [{ role: 'user', content: [{ text: 'x' }] }]);
    assert.deepEqual(llama.dropped, ['cache_control']);
  });

  test('images: base64 is bytes with their format; a URL (Converse fetches none) or another type is refused', async () => {
    const out = translate(
      params({
        ...base,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'look:' },
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } },
              { type: 'image', source: { type: 'base64', media_type: 'image/webp', data: 'UklGRg==' } },
            ],
          },
        ],
      }),
    );
    assert.deepEqual(out.body.messages, [
      {
        role: 'user',
        content: [{ text: 'look:' }, { image: { format: 'png', source: { bytes: PNG } } }, { image: { format: 'webp', source: { bytes: 'UklGRg==' } } }],
      },
    ]);
    await matchesSdk(out.body);
    refused(
      params({ ...base, messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }, { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } }] }] }),
      'messages[0].content[1].source',
      /image source of type 'url'.*base64/,
    );
    refused({ ...base, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'file', file_id: 'file_1' } }] }] }, 'messages[0].content[0].source');
    refused({ ...base, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/bmp', data: 'Qk0=' } }] }] }, 'messages[0].content[0].source.media_type');
  });

  test('documents: a PDF is bytes, plain text and text chunks are a txt document; each has a name Converse accepts', async () => {
    const out = translate(
      params({
        ...base,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' }, title: 'Q3 report: final!', context: 'Finance' },
              { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'héllo' } },
              { type: 'document', source: { type: 'content', content: [{ type: 'text', text: 'one' }, { type: 'text', text: 'two' }] }, title: 'Q3 report: final!', citations: { enabled: true } },
              { type: 'text', text: 'Summarize.' },
            ],
          },
        ],
      }),
    );
    assert.deepEqual(out.body.messages, [
      {
        role: 'user',
        content: [
          { document: { format: 'pdf', name: 'Q3 report final', source: { bytes: 'JVBERi0=' }, context: 'Finance' } },
          { document: { format: 'txt', name: 'document 2', source: { bytes: Buffer.from('héllo').toString('base64') } } },
          { document: { format: 'txt', name: 'Q3 report final (2)', source: { bytes: Buffer.from('one\n\ntwo').toString('base64') } } },
          { text: 'Summarize.' },
        ],
      },
    ]);
    assert.deepEqual(out.dropped, ['citations']);
    await matchesSdk(out.body);
    refused({ ...base, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'url', url: 'https://example.com/a.pdf' } }] }] }, 'messages[0].content[0].source', /document source of type 'url'/);
    refused({ ...base, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'base64', media_type: 'application/zip', data: 'UEs=' } }] }] }, 'messages[0].content[0].source.media_type');
  });

  test('tools, tool calls and tool results (text, images, errors) are Converse tool blocks', async () => {
    const out = translate(
      params({
        ...base,
        tools: [
          { name: 'weather', description: 'Weather by city', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: true },
          { name: 'clock', input_schema: { type: 'object' } },
        ],
        tool_choice: { type: 'any' },
        messages: [
          { role: 'user', content: 'Weather in Paris, and the time?' },
          {
            role: 'assistant',
            content: [
              { type: 'text', text: 'Checking.' },
              { type: 'tool_use', id: 'tooluse_a', name: 'weather', input: { city: 'Paris' } },
              { type: 'tool_use', id: 'tooluse_b', name: 'clock', input: {} },
            ],
          },
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 'tooluse_a', content: [{ type: 'text', text: 'Sunny' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } }] },
              { type: 'tool_result', tool_use_id: 'tooluse_b', content: 'clock is broken', is_error: true },
              { type: 'text', text: 'Thanks.' },
            ],
          },
        ],
      }),
    );
    assert.deepEqual(out.body.messages, [
      { role: 'user', content: [{ text: 'Weather in Paris, and the time?' }] },
      {
        role: 'assistant',
        content: [{ text: 'Checking.' }, { toolUse: { toolUseId: 'tooluse_a', name: 'weather', input: { city: 'Paris' } } }, { toolUse: { toolUseId: 'tooluse_b', name: 'clock', input: {} } }],
      },
      {
        role: 'user',
        content: [
          { toolResult: { toolUseId: 'tooluse_a', content: [{ text: 'Sunny' }, { image: { format: 'png', source: { bytes: PNG } } }] } },
          { toolResult: { toolUseId: 'tooluse_b', content: [{ text: 'clock is broken' }], status: 'error' } },
          { text: 'Thanks.' },
        ],
      },
    ]);
    assert.deepEqual(out.body.toolConfig, {
      tools: [
        { toolSpec: { name: 'weather', description: 'Weather by city', inputSchema: { json: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }, strict: true } },
        { toolSpec: { name: 'clock', inputSchema: { json: { type: 'object' } } } },
      ],
      toolChoice: { any: {} },
    });
    await matchesSdk(out.body);
    // A family that does not read a tool result's status has the error told by the content alone.
    const llama = translate({ ...base, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'x', is_error: true }] }] }, LLAMA);
    assert.deepEqual(llama.body.messages, [{ role: 'user', content: [{ toolResult: { toolUseId: 't', content: [{ text: 'x' }] } }] }]);
    assert.deepEqual(llama.dropped, ['is_error']);
  });

  test("tool_choice: auto is Converse's default (not sent), tool names one; none sends no tools unless the conversation holds tool calls", () => {
    const tools = [{ name: 'weather', input_schema: { type: 'object' } }];
    const spec = [{ toolSpec: { name: 'weather', inputSchema: { json: { type: 'object' } } } }];
    const ask = (tool_choice: Json, messages: Json[] = [{ role: 'user', content: 'hi' }]): { body: Json; dropped: readonly string[] } =>
      translate({ ...base, tools, tool_choice, messages });
    assert.deepEqual(ask({ type: 'auto' }).body.toolConfig, { tools: spec });
    assert.deepEqual(ask({ type: 'tool', name: 'weather' }).body.toolConfig, { tools: spec, toolChoice: { tool: { name: 'weather' } } });
    const none = ask({ type: 'none' });
    assert.equal(none.body.toolConfig, undefined);
    assert.deepEqual(none.dropped, []);
    const history = [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'weather', input: {} }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'sunny' }] },
    ];
    const kept = ask({ type: 'none' }, history);
    assert.deepEqual(kept.body.toolConfig, { tools: spec });
    assert.deepEqual(kept.dropped, ['tool_choice']);
    assert.deepEqual(ask({ type: 'auto', disable_parallel_tool_use: true }).dropped, ['disable_parallel_tool_use']);
    // Without tools: auto and none mean what no tools mean; requiring a call is refused.
    assert.equal(translate({ ...base, tool_choice: { type: 'auto' }, messages: [] }).body.toolConfig, undefined);
    refused({ ...base, tool_choice: { type: 'any' }, messages: [] }, 'tool_choice', /no tools/);
    refused({ ...base, tools, tool_choice: { type: 'tool' }, messages: [] }, 'tool_choice.name');
    refused({ ...base, tools, tool_choice: { type: 'sometimes' }, messages: [] }, 'tool_choice.type');
    refused({ ...base, tools: [{ type: 'web_search_20250305', name: 'web_search' }], messages: [] }, 'tools[0]', /server tool/);
    assert.deepEqual(translate({ ...base, tools: [{ name: 'w', input_schema: { type: 'object' }, defer_loading: true }], messages: [] }).dropped, ['defer_loading']);
  });

  test('top_k and thinking go in additionalModelRequestFields for Claude; thinking history is reasoningContent', async () => {
    const out = translate({
      ...params({
        ...base,
        thinking: { type: 'enabled', budget_tokens: 2048 },
        messages: [
          { role: 'user', content: 'hi' },
          {
            role: 'assistant',
            content: [
              { type: 'thinking', thinking: 'Let me think.', signature: 'c2lnbmVk' },
              { type: 'redacted_thinking', data: 'AAECAw==' },
              { type: 'text', text: 'Hello.' },
            ],
          },
          { role: 'user', content: 'again' },
        ],
      }),
      top_k: 40,
    });
    assert.deepEqual(out.body.additionalModelRequestFields, { thinking: { type: 'enabled', budget_tokens: 2048 }, top_k: 40 });
    assert.deepEqual((out.body.messages as Json[])[1], {
      role: 'assistant',
      content: [{ reasoningContent: { reasoningText: { text: 'Let me think.', signature: 'c2lnbmVk' } } }, { reasoningContent: { redactedContent: 'AAECAw==' } }, { text: 'Hello.' }],
    });
    assert.deepEqual(out.dropped, []);
    await matchesSdk(out.body);
    // A model named by an ARN of no known family is sent what Claude would be.
    assert.deepEqual(translate({ ...base, top_k: 5, messages: [] }, PROFILE).body.additionalModelRequestFields, { top_k: 5 });
  });

  test('other families: Nova reads topK in its inferenceConfig; thinking asked outright is refused, adaptive or disabled dropped; reasoning history left out', () => {
    assert.deepEqual(translate({ ...base, top_k: 20, messages: [] }, NOVA).body.additionalModelRequestFields, { inferenceConfig: { topK: 20 } });
    const llama = translate({ ...base, top_k: 20, thinking: { type: 'adaptive' }, messages: [] }, LLAMA);
    assert.equal(llama.body.additionalModelRequestFields, undefined);
    assert.deepEqual(llama.dropped, ['top_k', 'thinking']);
    assert.deepEqual(translate({ ...base, thinking: { type: 'disabled' }, messages: [] }, NOVA).dropped, ['thinking']);
    refused({ ...base, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [] }, 'thinking', /thinking/, LLAMA);
    // A turn that was only reasoning is left out, and the user turns around it become one.
    const history = translate(
      {
        ...base,
        messages: [
          { role: 'user', content: 'one' },
          { role: 'assistant', content: [{ type: 'thinking', thinking: 'hm', signature: 's' }] },
          { role: 'user', content: 'two' },
          { role: 'assistant', content: [{ type: 'redacted_thinking', data: 'AA==' }, { type: 'text', text: 'ok' }] },
        ],
      },
      LLAMA,
    );
    assert.deepEqual(history.body.messages, [
      { role: 'user', content: [{ text: 'one' }, { text: 'two' }] },
      { role: 'assistant', content: [{ text: 'ok' }] },
    ]);
    // Only Claude is asked which stop sequence matched.
    assert.equal(translate({ ...base, stop_sequences: ['X'], messages: [] }, LLAMA).body.additionalModelResponseFieldPaths, undefined);
  });

  test('consecutive turns of one role are one Converse message (Converse requires alternation)', () => {
    const out = translate({
      ...base,
      messages: [
        { role: 'user', content: 'a' },
        { role: 'user', content: [{ type: 'text', text: 'b' }] },
        { role: 'assistant', content: 'c' },
        { role: 'assistant', content: 'd' },
      ],
    });
    assert.deepEqual(out.body.messages, [
      { role: 'user', content: [{ text: 'a' }, { text: 'b' }] },
      { role: 'assistant', content: [{ text: 'c' }, { text: 'd' }] },
    ]);
  });

  test('parameters with no Converse equivalent are dropped and named, in the order written', () => {
    const out = translate({ ...base, service_tier: 'auto', metadata: { user_id: 'u-42' }, container: 'c', mcp_servers: [], messages: [{ role: 'user', content: 'hi' }] });
    assert.deepEqual(out.dropped, ['service_tier', 'container', 'mcp_servers', 'metadata.user_id']);
    assert.deepEqual(Object.keys(out.body).sort(), ['inferenceConfig', 'messages', 'model', 'stream']);
  });

  test('what would change the answer, or is not Anthropic at all, is refused, naming the parameter', () => {
    refused({ ...base, messages: [], mcp_servers: [{ type: 'url', url: 'https://mcp.example', name: 'm' }] }, 'mcp_servers');
    refused({ ...base, messages: [], output_config: { effort: 'low' } }, 'output_config', /unknown parameter/);
    refused({ ...base, messages: [], metadata: { user_id: 'u', tenant: 't' } }, 'metadata.tenant');
    refused({ ...base, messages: [{ role: 'system', content: 'x' }] }, 'messages[0].role');
    refused({ ...base, messages: [{ role: 'user', content: [{ type: 'search_result', source: 's', title: 't', content: [] }] }] }, 'messages[0].content[0]');
    refused({ ...base, messages: [{ role: 'assistant', content: [{ type: 'server_tool_use', id: 's', name: 'web_search', input: {} }] }] }, 'messages[0].content[0]');
    refused({ ...base, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'search_result' }] }] }] }, 'messages[0].content[0].content[0]');
    refused({ ...base, messages: 'hi' }, 'messages');
    refused({ ...base, system: [{ type: 'image' }], messages: [] }, 'system[0]');
  });

  test('model ids: an ARN names its last part, a cross-region prefix is not part of the model', () => {
    assert.equal(bedrockModelId('us.anthropic.claude-3-haiku-20240307-v1:0'), 'anthropic.claude-3-haiku-20240307-v1:0');
    assert.equal(bedrockModelId('global.anthropic.claude-sonnet-4-5-20250929-v1:0'), 'anthropic.claude-sonnet-4-5-20250929-v1:0');
    assert.equal(bedrockModelId('arn:aws:bedrock:eu-west-1:111122223333:inference-profile/eu.amazon.nova-lite-v1:0'), 'amazon.nova-lite-v1:0');
    assert.equal(bedrockModelId('arn:aws:bedrock:us-east-1::foundation-model/meta.llama3-3-70b-instruct-v1:0'), 'meta.llama3-3-70b-instruct-v1:0');
    assert.equal(bedrockModelId('amazon.titan-embed-text-v2:0'), 'amazon.titan-embed-text-v2:0');
    assert.deepEqual(translate({ ...base, top_k: 1, messages: [] }, 'arn:aws:bedrock:us-east-1::foundation-model/meta.llama3-3-70b-instruct-v1:0').dropped, ['top_k']);
  });
});

// ---- answers ----

/** A fetch that answers every request with `body`, for the real SDK clients. */
function fetchWith(body: string, contentType: string, status = 200): typeof fetch {
  return async () => new Response(body, { status, headers: { 'content-type': contentType } });
}

function anthropicSdk(body: string, contentType: string, status = 200): Anthropic {
  return new Anthropic({ apiKey: 'test', baseURL: 'http://sluice.invalid', maxRetries: 0, fetch: fetchWith(body, contentType, status) });
}

const sdkParams = { model: 'claude-x', max_tokens: 100, messages: [{ role: 'user' as const, content: 'hi' }] };

/** A Bedrock client whose every request is answered with `body` (a JSON answer or an event stream). */
function bedrockSdk(body: Buffer, contentType: string): BedrockRuntimeClient {
  return new BedrockRuntimeClient({
    region: 'us-east-1',
    credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
    requestHandler: { handle: async () => ({ response: { statusCode: 200, headers: { 'content-type': contentType }, body: Readable.from([body]) } }) },
  });
}

const converseAnswer = {
  output: {
    message: {
      role: 'assistant',
      content: [
        { reasoningContent: { reasoningText: { text: 'The user wants weather.', signature: 'EqQBCkYIBxgCKkA' } } },
        { reasoningContent: { redactedContent: 'AAECAw==' } },
        { text: 'Checking.' },
        { toolUse: { toolUseId: 'tooluse_kZJMlvQmRJ6eAyJE5GIl7Q', name: 'weather', input: { city: 'Paris' } } },
      ],
    },
  },
  stopReason: 'tool_use',
  usage: { inputTokens: 20, outputTokens: 30, totalTokens: 1250, cacheReadInputTokens: 1000, cacheWriteInputTokens: 200 },
  metrics: { latencyMs: 812 },
};

describe('messagesToConverse.response', () => {
  test('the fixture is an answer the AWS SDK reads as Converse', async () => {
    const out = (await bedrockSdk(Buffer.from(JSON.stringify(converseAnswer)), 'application/json').send(new ConverseCommand({ modelId: CLAUDE, messages: [] }))) as ConverseResponse;
    assert.equal(out.stopReason, 'tool_use');
    assert.deepEqual(out.usage, converseAnswer.usage);
    const content = out.output?.message?.content ?? [];
    assert.deepEqual(content[0], converseAnswer.output.message.content[0]);
    assert.deepEqual(Buffer.from(content[1]?.reasoningContent?.redactedContent ?? []).toString('base64'), 'AAECAw==');
    assert.deepEqual(content[3], converseAnswer.output.message.content[3]);
  });

  test('thinking, redacted thinking, text and tool calls as blocks; the model given; stop reason; usage with the cache apart', () => {
    const answer = translator.response(converseAnswer);
    assert.match(String(answer.id), /^msg_[0-9a-f]{32}$/);
    assert.deepEqual({ ...answer, id: 'msg_x' }, {
      id: 'msg_x',
      type: 'message',
      role: 'assistant',
      model: MODEL,
      content: [
        { type: 'thinking', thinking: 'The user wants weather.', signature: 'EqQBCkYIBxgCKkA' },
        { type: 'redacted_thinking', data: 'AAECAw==' },
        { type: 'text', text: 'Checking.' },
        { type: 'tool_use', id: 'tooluse_kZJMlvQmRJ6eAyJE5GIl7Q', name: 'weather', input: { city: 'Paris' } },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      stop_details: null,
      usage: { input_tokens: 20, cache_creation_input_tokens: 200, cache_read_input_tokens: 1000, output_tokens: 30 },
    });
    assert.notEqual(translator.response(converseAnswer).id, answer.id);
    assert.equal(messagesToConverse.response(converseAnswer).model, '');
  });

  test('a tool call and its result round trip: the answer’s tool_use, sent back, is the toolUse Converse gave', () => {
    const answer = translator.response(converseAnswer);
    const next = translate({ ...base, messages: [{ role: 'user', content: 'weather?' }, { role: 'assistant', content: answer.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'tooluse_kZJMlvQmRJ6eAyJE5GIl7Q', content: 'Sunny' }] }] });
    assert.deepEqual((next.body.messages as Json[])[1], { role: 'assistant', content: converseAnswer.output.message.content });
    assert.deepEqual((next.body.messages as Json[])[2], { role: 'user', content: [{ toolResult: { toolUseId: 'tooluse_kZJMlvQmRJ6eAyJE5GIl7Q', content: [{ text: 'Sunny' }] } }] });
  });

  test('every stop reason maps; a guardrail or a filter is a refusal; the stop sequence is the one Claude reported', () => {
    const answer = (stopReason: string, extra: Json = {}): Json => translator.response({ output: { message: { role: 'assistant', content: [{ text: 'a' }] } }, stopReason, ...extra });
    const cases: [string, string][] = [
      ['end_turn', 'end_turn'],
      ['tool_use', 'tool_use'],
      ['max_tokens', 'max_tokens'],
      ['stop_sequence', 'stop_sequence'],
      ['model_context_window_exceeded', 'model_context_window_exceeded'],
      ['guardrail_intervened', 'refusal'],
      ['content_filtered', 'refusal'],
      ['malformed_model_output', 'end_turn'],
      ['malformed_tool_use', 'end_turn'],
      ['something_new', 'end_turn'],
    ];
    for (const [reason, stop] of cases) assert.equal(answer(reason).stop_reason, stop, reason);
    const stopped = answer('stop_sequence', { additionalModelResponseFields: { stop_sequence: 'END' } });
    assert.equal(stopped.stop_sequence, 'END');
    assert.equal(answer('stop_sequence').stop_sequence, null);
    assert.equal(answer('end_turn', { additionalModelResponseFields: { stop_sequence: null } }).stop_sequence, null);
    const refusal = answer('guardrail_intervened');
    assert.deepEqual(refusal.stop_details, { type: 'refusal', category: null, explanation: null });
    // The guardrail's message is what the model said instead of an answer.
    assert.deepEqual(refusal.content, [{ type: 'text', text: 'a' }]);
  });

  test('empty text is no block; cited text is text; unknown blocks and a missing usage give nothing', () => {
    const answer = translator.response({
      output: { message: { role: 'assistant', content: [{ text: '' }, { citationsContent: { content: [{ text: 'Cited ' }, { text: 'passage.' }], citations: [] } }, { video: {} }] } },
      stopReason: 'end_turn',
    });
    assert.deepEqual(answer.content, [{ type: 'text', text: 'Cited passage.' }]);
    assert.deepEqual(answer.usage, { input_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 });
    assert.deepEqual(translator.response({}).content, []);
  });

  test('parses in the Anthropic SDK', async () => {
    const message = await anthropicSdk(JSON.stringify(translator.response(converseAnswer)), 'application/json').messages.create(sdkParams);
    assert.equal(message.stop_reason, 'tool_use');
    assert.equal(message.model, MODEL);
    assert.equal(message.content.length, 4);
    const call = message.content[3];
    assert.ok(call?.type === 'tool_use');
    assert.deepEqual(call.input, { city: 'Paris' });
    assert.equal(message.usage.cache_creation_input_tokens, 200);
  });
});

describe('messagesToConverse.error', () => {
  test("Bedrock's errors by status, keeping Bedrock's message", () => {
    const cases: [number, string][] = [
      [400, 'invalid_request_error'],
      [401, 'authentication_error'],
      [403, 'permission_error'],
      [404, 'not_found_error'],
      [408, 'api_error'],
      [413, 'request_too_large'],
      [424, 'api_error'],
      [429, 'rate_limit_error'],
      [500, 'api_error'],
      [503, 'overloaded_error'],
      [504, 'api_error'],
      [409, 'invalid_request_error'],
    ];
    for (const [status, type] of cases) {
      assert.deepEqual(translator.error(status, { message: `m${status}` }), { type: 'error', error: { type, message: `m${status}` } }, String(status));
    }
    assert.deepEqual(translator.error(400, { message: 'Input is too long for requested model.' }), { type: 'error', error: { type: 'invalid_request_error', message: 'Input is too long for requested model.' } });
    // Some AWS errors spell it Message; a body that is not JSON has the status said.
    assert.equal((translator.error(403, { Message: 'User is not authorized' }).error as Json).message, 'User is not authorized');
    assert.equal((translator.error(500, undefined).error as Json).message, 'provider answered HTTP 500');
    // A message that quotes a 5 MB input is bounded.
    assert.ok(String((translator.error(400, { message: 'x'.repeat(100_000) }).error as Json).message).length < 1100);
  });

  test('the Anthropic SDK raises the class of the status', async () => {
    const body = JSON.stringify(translator.error(429, { message: 'Too many requests, please wait before trying again.' }));
    await assert.rejects(anthropicSdk(body, 'application/json', 429).messages.create(sdkParams), (error: unknown) => {
      assert.ok(error instanceof Anthropic.RateLimitError);
      assert.equal(error.type, 'rate_limit_error');
      assert.match(error.message, /Too many requests/);
      return true;
    });
  });
});

// ---- streams ----

type StreamEvent = [type: string, payload: Json];

/** The SSE text the Bedrock provider makes of the event stream: one event per event-stream message. */
function relayed(events: StreamEvent[], lineEnd = '\n'): string {
  return events.map(([type, payload]) => `event: ${type}${lineEnd}data: ${JSON.stringify(payload)}${lineEnd}${lineEnd}`).join('');
}

/** The event-stream messages Bedrock sends, for the AWS SDK's own reading of the fixtures. */
function eventStream(events: StreamEvent[]): Buffer {
  const codec = new EventStreamCodec(toUtf8, fromUtf8);
  const header = (value: string) => ({ type: 'string' as const, value });
  return Buffer.concat(
    events.map(([type, payload]) =>
      codec.encode({ headers: { ':event-type': header(type), ':message-type': header('event'), ':content-type': header('application/json') }, body: fromUtf8(JSON.stringify(payload)) }),
    ),
  );
}

const usageEvent: StreamEvent = ['metadata', { usage: { inputTokens: 42, outputTokens: 12, totalTokens: 62, cacheReadInputTokens: 8, cacheWriteInputTokens: 0 }, metrics: { latencyMs: 400 } }];

const textEvents: StreamEvent[] = [
  ['messageStart', { role: 'assistant' }],
  ['contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'Hel' } }],
  ['contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'lo, wörld 👋' } }],
  ['contentBlockStop', { contentBlockIndex: 0 }],
  ['messageStop', { stopReason: 'end_turn' }],
  usageEvent,
];

const toolEvents: StreamEvent[] = [
  ['messageStart', { role: 'assistant' }],
  ['contentBlockDelta', { contentBlockIndex: 0, delta: { reasoningContent: { text: 'Weather needs ' } } }],
  ['contentBlockDelta', { contentBlockIndex: 0, delta: { reasoningContent: { text: 'a tool.' } } }],
  ['contentBlockDelta', { contentBlockIndex: 0, delta: { reasoningContent: { signature: 'EqQBCkYIBxgC' } } }],
  ['contentBlockStop', { contentBlockIndex: 0 }],
  ['contentBlockDelta', { contentBlockIndex: 1, delta: { reasoningContent: { redactedContent: 'AAECAw==' } } }],
  ['contentBlockStop', { contentBlockIndex: 1 }],
  ['contentBlockDelta', { contentBlockIndex: 2, delta: { text: 'Let me check.' } }],
  ['contentBlockStop', { contentBlockIndex: 2 }],
  ['contentBlockStart', { contentBlockIndex: 3, start: { toolUse: { toolUseId: 'tooluse_a', name: 'weather' } } }],
  ['contentBlockDelta', { contentBlockIndex: 3, delta: { toolUse: { input: '{"city":' } } }],
  ['contentBlockDelta', { contentBlockIndex: 3, delta: { toolUse: { input: '"Paris"}' } } }],
  ['contentBlockStop', { contentBlockIndex: 3 }],
  ['contentBlockStart', { contentBlockIndex: 4, start: { toolUse: { toolUseId: 'tooluse_b', name: 'clock' } } }],
  ['contentBlockDelta', { contentBlockIndex: 4, delta: { toolUse: { input: '' } } }],
  ['contentBlockStop', { contentBlockIndex: 4 }],
  ['messageStop', { stopReason: 'tool_use' }],
  usageEvent,
];

/** Feeds `text` in pieces of `size` bytes (Infinity: one piece) and returns all the output. */
function run(text: string, size = Infinity, stream: StreamTranslator = translator.stream()): string {
  const bytes = Buffer.from(text);
  let out = '';
  if (size === Infinity) out += stream.push(bytes);
  else for (let i = 0; i < bytes.length; i += size) out += stream.push(bytes.subarray(i, i + size));
  return out + stream.end();
}

/** The message id is random: the same everywhere once masked. */
function masked(sse: string): string {
  return sse.replace(/msg_[0-9a-f]{32}/g, 'msg_ID');
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
  const stream = anthropicSdk(sse, 'text/event-stream').messages.stream(sdkParams);
  const texts: string[] = [];
  stream.on('text', (text) => texts.push(text));
  const message = await stream.finalMessage();
  return { message, texts };
}

describe('messagesToConverse.stream', () => {
  test('the fixtures are events the AWS SDK reads from a ConverseStream answer', async () => {
    for (const fixture of [textEvents, toolEvents]) {
      const out = await bedrockSdk(eventStream(fixture), 'application/vnd.amazon.eventstream').send(new ConverseStreamCommand({ modelId: CLAUDE, messages: [] }));
      const read: ConverseStreamOutput[] = [];
      for await (const event of out.stream ?? []) read.push(event);
      const expected = fixture.map(([type, payload]) => ({ [type]: payload }));
      // Blobs come out of the SDK as bytes.
      const plain = JSON.parse(JSON.stringify(read, (key, value: unknown) => (key === 'redactedContent' ? Buffer.from(value as Uint8Array).toString('base64') : value))) as Json[];
      assert.deepEqual(plain, expected);
    }
  });

  test('text: message_start, one text block opened by its first delta, message_delta with the usage, message_stop', () => {
    const stream = translator.stream();
    const list = events(run(relayed(textEvents), Infinity, stream));
    assert.deepEqual(names(list), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'content_block_delta#0', 'content_block_stop#0', 'message_delta', 'message_stop']);
    for (const e of list) assert.equal(e.data.type, e.event);
    const start = list[0]!.data.message as Json;
    assert.match(String(start.id), /^msg_/);
    assert.deepEqual({ ...start, id: 'msg_ID' }, {
      id: 'msg_ID',
      type: 'message',
      role: 'assistant',
      model: MODEL,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      stop_details: null,
      usage: { input_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 },
    });
    assert.deepEqual(list[1]!.data.content_block, { type: 'text', text: '' });
    assert.deepEqual(list[3]!.data.delta, { type: 'text_delta', text: 'lo, wörld 👋' });
    assert.deepEqual(list[5]!.data, {
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null, stop_details: null },
      usage: { input_tokens: 42, cache_creation_input_tokens: 0, cache_read_input_tokens: 8, output_tokens: 12 },
    });
    assert.equal(stream.outcome?.(), 'complete');
  });

  test('split at every byte, one byte at a time, with CRLF line ends: the same output', () => {
    for (const fixture of [textEvents, toolEvents]) {
      const text = relayed(fixture);
      const whole = masked(run(text));
      assert.equal(masked(run(text, 1)), whole);
      assert.equal(masked(run(relayed(fixture, '\r\n'), 7)), whole);
      const bytes = Buffer.from(text);
      for (let cut = 1; cut < bytes.length; cut++) {
        const stream = translator.stream();
        const out = stream.push(bytes.subarray(0, cut)) + stream.push(bytes.subarray(cut)) + stream.end();
        assert.equal(masked(out), whole, `split at byte ${cut}`);
      }
    }
  });

  test('message_delta and message_stop wait for the usage, which Converse sends after messageStop', () => {
    const stream = translator.stream();
    const [before, stop, usage] = [relayed(textEvents.slice(0, 4)), relayed(textEvents.slice(4, 5)), relayed(textEvents.slice(5))];
    assert.deepEqual(names(events(stream.push(Buffer.from(before)))), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'content_block_delta#0', 'content_block_stop#0']);
    assert.equal(stream.push(Buffer.from(stop)), '');
    assert.deepEqual(names(events(stream.push(Buffer.from(usage)))), ['message_delta', 'message_stop']);
    assert.equal(stream.end(), '');
    assert.equal(stream.outcome?.(), 'complete');
  });

  test('usage that comes before messageStop is kept: the end is at messageStop', () => {
    const stream = translator.stream();
    assert.deepEqual(names(events(stream.push(Buffer.from(relayed([...textEvents.slice(0, 4), usageEvent]))))), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'content_block_delta#0', 'content_block_stop#0']);
    const list = events(stream.push(Buffer.from(relayed([textEvents[4]!]))));
    assert.deepEqual(names(list), ['message_delta', 'message_stop']);
    assert.equal((list[0]!.data.usage as Json).output_tokens, 12);
    assert.equal(stream.outcome?.(), 'complete');
  });

  test('redacted thinking in one piece is passed on as it came; in several, joined as bytes', () => {
    const redacted = (...pieces: string[]): unknown =>
      events(run(relayed([...pieces.map((redactedContent): StreamEvent => ['contentBlockDelta', { contentBlockIndex: 0, delta: { reasoningContent: { redactedContent } } }]), ['contentBlockStop', { contentBlockIndex: 0 }]])))[1]!.data.content_block;
    assert.deepEqual(redacted('AAECAw'), { type: 'redacted_thinking', data: 'AAECAw' });
    assert.deepEqual(redacted('AAE=', 'Ag=='), { type: 'redacted_thinking', data: 'AAEC' });
  });

  test('a stream that stopped but sent no usage ends at its end, with output_tokens 0', () => {
    const stream = translator.stream();
    const list = events(run(relayed(textEvents.slice(0, 5)), Infinity, stream));
    assert.deepEqual(names(list).slice(-2), ['message_delta', 'message_stop']);
    assert.deepEqual(list.at(-2)!.data.usage, { output_tokens: 0 });
    assert.equal(stream.outcome?.(), 'complete');
  });

  test('a stream cut before messageStop is cut: its events so far, and no message_delta or message_stop', () => {
    const stream = translator.stream();
    // The last event is not even closed by a blank line.
    const text = relayed(textEvents.slice(0, 3)).trimEnd();
    const list = events(run(text, 5, stream));
    assert.deepEqual(names(list), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'content_block_delta#0']);
    assert.equal(stream.outcome?.(), 'cut');
    const empty = translator.stream();
    assert.equal(run('', Infinity, empty), '');
    assert.equal(empty.outcome?.(), 'cut');
  });

  test('thinking, signature, redacted thinking, text and tool calls, each its own block', () => {
    const list = events(run(relayed(toolEvents), 11));
    assert.deepEqual(names(list), [
      'message_start',
      'content_block_start#0',
      'content_block_delta#0',
      'content_block_delta#0',
      'content_block_delta#0',
      'content_block_stop#0',
      'content_block_start#1',
      'content_block_stop#1',
      'content_block_start#2',
      'content_block_delta#2',
      'content_block_stop#2',
      'content_block_start#3',
      'content_block_delta#3',
      'content_block_delta#3',
      'content_block_stop#3',
      'content_block_start#4',
      'content_block_stop#4',
      'message_delta',
      'message_stop',
    ]);
    assert.deepEqual(list[1]!.data.content_block, { type: 'thinking', thinking: '', signature: '' });
    assert.deepEqual(list[4]!.data.delta, { type: 'signature_delta', signature: 'EqQBCkYIBxgC' });
    assert.deepEqual(list[6]!.data.content_block, { type: 'redacted_thinking', data: 'AAECAw==' });
    assert.deepEqual(list[11]!.data.content_block, { type: 'tool_use', id: 'tooluse_a', name: 'weather', input: {} });
    assert.deepEqual(list[12]!.data.delta, { type: 'input_json_delta', partial_json: '{"city":' });
    assert.equal((list.at(-2)!.data.delta as Json).stop_reason, 'tool_use');
  });

  test("the Anthropic SDK's stream accumulator reads the text stream and the tool stream", async () => {
    const { message, texts } = await finalMessage(run(relayed(textEvents), 3));
    assert.deepEqual(texts, ['Hel', 'lo, wörld 👋']);
    assert.equal(message.model, MODEL);
    assert.deepEqual(message.content, [{ type: 'text', text: 'Hello, wörld 👋' }]);
    assert.equal(message.stop_reason, 'end_turn');
    assert.deepEqual(message.usage, { input_tokens: 42, cache_creation_input_tokens: 0, cache_read_input_tokens: 8, output_tokens: 12 });

    const tools = await finalMessage(run(relayed(toolEvents), 1));
    assert.deepEqual(tools.message.content, [
      { type: 'thinking', thinking: 'Weather needs a tool.', signature: 'EqQBCkYIBxgC' },
      { type: 'redacted_thinking', data: 'AAECAw==' },
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: 'tooluse_a', name: 'weather', input: { city: 'Paris' } },
      { type: 'tool_use', id: 'tooluse_b', name: 'clock', input: {} },
    ]);
    assert.equal(tools.message.stop_reason, 'tool_use');
  });

  test('a stop sequence, a refusal and a context window reached say so in message_delta', () => {
    const ending = (stop: Json): Json => events(run(relayed([...textEvents.slice(0, 4), ['messageStop', stop], usageEvent]))).at(-2)!.data.delta as Json;
    assert.deepEqual(ending({ stopReason: 'stop_sequence', additionalModelResponseFields: { stop_sequence: 'END' } }), { stop_reason: 'stop_sequence', stop_sequence: 'END', stop_details: null });
    assert.deepEqual(ending({ stopReason: 'guardrail_intervened' }), { stop_reason: 'refusal', stop_sequence: null, stop_details: { type: 'refusal', category: null, explanation: null } });
    assert.equal(ending({ stopReason: 'content_filtered' }).stop_reason, 'refusal');
    assert.equal(ending({ stopReason: 'model_context_window_exceeded' }).stop_reason, 'model_context_window_exceeded');
  });

  test("an exception mid-stream is Anthropic's error event, by its type; nothing follows it", () => {
    const cases: [string, string][] = [
      ['throttlingException', 'rate_limit_error'],
      ['serviceUnavailableException', 'overloaded_error'],
      ['validationException', 'invalid_request_error'],
      ['modelStreamErrorException', 'api_error'],
      ['internalServerException', 'api_error'],
      ['someNewException', 'api_error'],
    ];
    for (const [exception, type] of cases) {
      const stream = translator.stream();
      const text = relayed([
        ...textEvents.slice(0, 2),
        [exception, { message: 'Model stream failed', originalStatusCode: 500, originalMessage: 'upstream says no' }],
        ...textEvents.slice(2),
      ]);
      const list = events(run(text, 4, stream));
      assert.deepEqual(names(list), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'error'], exception);
      assert.deepEqual(list.at(-1)!.data, { type: 'error', error: { type, message: 'Model stream failed' } });
      assert.equal(stream.outcome?.(), 'error');
    }
    const bare = events(run(relayed([['throttlingException', {}]])));
    assert.deepEqual(bare.map((e) => e.data), [{ type: 'error', error: { type: 'rate_limit_error', message: "the provider's stream ended with throttlingException" } }]);
  });

  test('the Anthropic SDK raises the error event', async () => {
    const sse = run(relayed([...textEvents.slice(0, 2), ['throttlingException', { message: 'Too many tokens, please wait before trying again.' }]]));
    await assert.rejects(finalMessage(sse), (error: unknown) => {
      assert.ok(error instanceof Anthropic.APIError);
      assert.match(error.message, /Too many tokens/);
      return true;
    });
  });

  test("Converse's block indexes need not be Anthropic's: gaps, unknown events and unknown deltas are skipped", () => {
    const list = events(
      run(
        relayed([
          ['contentBlockDelta', { contentBlockIndex: 2, delta: { text: 'a' } }],
          ['somethingNew', { x: 1 }],
          ['contentBlockDelta', { contentBlockIndex: 2, delta: { citation: { title: 't' } } }],
          ['contentBlockStop', { contentBlockIndex: 2 }],
          ['contentBlockStart', { contentBlockIndex: 5, start: { toolUse: { toolUseId: 'tooluse_z', name: 'f' } } }],
          ['contentBlockStop', { contentBlockIndex: 5 }],
          ['messageStop', { stopReason: 'tool_use' }],
          usageEvent,
        ]),
      ),
    );
    // No messageStart came: the first event that says something starts the message.
    assert.deepEqual(names(list), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'content_block_stop#0', 'content_block_start#1', 'content_block_stop#1', 'message_delta', 'message_stop']);
  });
});
