// The Messages → Gemini translator: an Anthropic request rewritten as a generateContent request, and
// Gemini's answers (JSON, SSE stream, errors) read back as Anthropic's, checked field by field
// against the official SDKs' types (@google/genai for Gemini's side) and through the Anthropic
// SDK's own parsing and stream accumulator.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import type { MessageCreateParams } from '@anthropic-ai/sdk/resources/messages';
import {
  BlockedReason,
  FinishReason,
  FunctionCallingConfigMode,
  type Candidate,
  type Content,
  type GenerateContentResponse,
  type GenerationConfig,
  type Part,
  type Tool,
  type ToolConfig,
} from '@google/genai';
import { SKIP_SIGNATURE, geminiTranslation } from '../../src/translate/messages-to-gemini.ts';
import { SIGNATURE_PREFIX } from '../../src/translate/gemini-to-messages-stream.ts';
import { SseParser } from '../../src/translate/sse.ts';
import { TranslationError, type Json } from '../../src/translate/types.ts';

const UPSTREAM = 'gemini-upstream';
const translator = geminiTranslation(UPSTREAM);

/** generateContent's REST body in the SDK's types, plus the two fields the provider removes. */
interface GeminiRequest {
  model: string;
  stream: boolean;
  contents: Content[];
  systemInstruction?: Content;
  generationConfig?: GenerationConfig;
  tools?: Tool[];
  toolConfig?: ToolConfig;
}

/** A GenerateContentResponse as the wire has it (the SDK's class adds getters). */
type GeminiResponse = Pick<GenerateContentResponse, 'candidates' | 'usageMetadata' | 'modelVersion' | 'responseId' | 'promptFeedback'>;

function translate(body: Json): { body: Json; dropped: readonly string[] } {
  return translator.request(body, UPSTREAM);
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
const hi = [{ role: 'user' as const, content: 'hi' }];

describe('geminiTranslation.request', () => {
  test('is the messages → generate_content translator', () => {
    assert.equal(translator.from, 'messages');
    assert.equal(translator.to, 'generate_content');
  });

  test('model and stream for the provider, system, generation config; metadata and service_tier dropped', () => {
    const out = translate({
      ...params({ ...base, system: 'Be brief.', messages: hi, stop_sequences: ['END'], metadata: { user_id: 'u-1' }, service_tier: 'auto', stream: true }),
      temperature: 0.3,
      top_p: 0.9,
      top_k: 40,
    });
    const expected: GeminiRequest = {
      model: UPSTREAM,
      stream: true,
      contents: [{ role: 'user', parts: [{ text: 'hi' }] }],
      systemInstruction: { parts: [{ text: 'Be brief.' }] },
      generationConfig: { maxOutputTokens: 100, temperature: 0.3, topP: 0.9, topK: 40, stopSequences: ['END'] },
    };
    assert.deepEqual(out.body, expected);
    assert.deepEqual(out.dropped, ['metadata', 'service_tier']);
    assert.equal(translate({ ...base, messages: hi }).body.stream, false);
    assert.equal(translate({ ...base, messages: hi, stream: 'yes' }).body.stream, false);
  });

  test('system blocks are parts; an empty system is left out; null parameters count as not given', () => {
    const out = translate(params({ ...base, system: [{ type: 'text', text: 'One.' }, { type: 'text', text: 'Two.', cache_control: { type: 'ephemeral' } }], messages: hi }));
    assert.deepEqual(out.body.systemInstruction, { parts: [{ text: 'One.' }, { text: 'Two.' }] });
    assert.deepEqual(out.dropped, ['cache_control']);
    const empty = translate({ ...base, system: '', messages: hi, temperature: null, top_k: null });
    assert.equal('systemInstruction' in empty.body, false);
    assert.deepEqual(empty.body.generationConfig, { maxOutputTokens: 100 });
    refused({ ...base, system: [{ type: 'image', source: {} }], messages: [] }, 'system[0]');
  });

  test('images: base64 as inlineData, https URLs as fileData with the type their name says', () => {
    const out = translate(
      params({
        ...base,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'look:' },
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0K' } },
              { type: 'image', source: { type: 'url', url: 'https://example.com/a/cat.JPG?size=2' } },
            ],
          },
        ],
      }),
    );
    const expected: Content[] = [
      {
        role: 'user',
        parts: [{ text: 'look:' }, { inlineData: { mimeType: 'image/png', data: 'iVBORw0K' } }, { fileData: { fileUri: 'https://example.com/a/cat.JPG?size=2', mimeType: 'image/jpeg' } }],
      },
    ];
    assert.deepEqual(out.body.contents, expected);
    const image = (source: Json): Json => ({ ...base, messages: [{ role: 'user', content: [{ type: 'image', source }] }] });
    refused(image({ type: 'url', url: 'https://example.com/image' }), 'messages[0].content[0].source.url', /base64/);
    refused(image({ type: 'url', url: 'https://example.com/doc.pdf' }), 'messages[0].content[0].source.url');
    refused(image({ type: 'url', url: 'ftp://example.com/a.png' }), 'messages[0].content[0].source.url');
    refused(image({ type: 'file', file_id: 'file_1' }), 'messages[0].content[0].source', /'file'/);
  });

  test('documents: PDFs as inlineData or fileData, plain text as text; citations dropped', () => {
    const out = translate(
      params({
        ...base,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0' } },
              { type: 'document', source: { type: 'url', url: 'https://example.com/paper' }, citations: { enabled: true } },
              { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'plain words' } },
            ],
          },
        ],
      }),
    );
    const expected: Part[] = [
      { inlineData: { mimeType: 'application/pdf', data: 'JVBERi0' } },
      { fileData: { fileUri: 'https://example.com/paper', mimeType: 'application/pdf' } },
      { text: 'plain words' },
    ];
    assert.deepEqual((out.body.contents as Content[])[0]?.parts, expected);
    assert.deepEqual(out.dropped, ['citations']);
  });

  test('tool_use is a functionCall; tool_result a functionResponse named after its call, before the user text', () => {
    const out = translate(
      params({
        ...base,
        messages: [
          { role: 'user', content: 'weather in Paris and Rome?' },
          {
            role: 'assistant',
            content: [
              { type: 'text', text: 'Looking up.' },
              { type: 'tool_use', id: 'toolu_1', name: 'weather', input: { city: 'Paris' } },
              { type: 'tool_use', id: 'call_2', name: 'weather', input: { city: 'Rome' } },
            ],
          },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'here you go' },
              { type: 'tool_result', tool_use_id: 'toolu_1', content: '18C' },
              { type: 'tool_result', tool_use_id: 'call_2', is_error: true, content: [{ type: 'text', text: 'lookup failed:' }, { type: 'text', text: 'timeout' }] },
            ],
          },
          { role: 'user', content: 'and Oslo?' },
        ],
      }),
    );
    const expected: Content[] = [
      { role: 'user', parts: [{ text: 'weather in Paris and Rome?' }] },
      {
        role: 'model',
        parts: [
          { text: 'Looking up.' },
          // Calls Gemini did not sign get Google's stand-in on the first of them.
          { functionCall: { id: 'toolu_1', name: 'weather', args: { city: 'Paris' } }, thoughtSignature: SKIP_SIGNATURE },
          { functionCall: { id: 'call_2', name: 'weather', args: { city: 'Rome' } } },
        ],
      },
      {
        role: 'user',
        parts: [
          { functionResponse: { id: 'toolu_1', name: 'weather', response: { output: '18C' } } },
          { functionResponse: { id: 'call_2', name: 'weather', response: { error: 'lookup failed:\ntimeout' } } },
          { text: 'here you go' },
          // Consecutive user turns are one content.
          { text: 'and Oslo?' },
        ],
      },
    ];
    assert.deepEqual(out.body.contents, expected);
  });

  test('a tool_result with images puts them in the response parts; one with no content has an empty output', () => {
    const out = translate(
      params({
        ...base,
        messages: [
          { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'shot', input: {} }, { type: 'tool_use', id: 't2', name: 'clock', input: {} }] },
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: 'the screen' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] },
              { type: 'tool_result', tool_use_id: 't2' },
            ],
          },
        ],
      }),
    );
    assert.deepEqual((out.body.contents as Content[])[1]?.parts, [
      { functionResponse: { id: 't1', name: 'shot', response: { output: 'the screen' }, parts: [{ inlineData: { mimeType: 'image/png', data: 'AAAA' } }] } },
      { functionResponse: { id: 't2', name: 'clock', response: { output: '' } } },
    ]);
  });

  test('a tool_result whose tool_use is not in the conversation is refused', () => {
    refused(
      params({ ...base, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_gone', content: 'x' }] }] }),
      'messages[0].content[0].tool_use_id',
      /toolu_gone/,
    );
    // Only earlier calls count.
    refused(
      params({
        ...base,
        messages: [
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'later', content: 'x' }] },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'later', name: 'f', input: {} }] },
        ],
      }),
      'messages[0].content[0].tool_use_id',
    );
  });

  test('tools are function declarations with their JSON Schema in parametersJsonSchema ($schema left out)', () => {
    const schema = {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object' as const,
      properties: { city: { type: 'string' }, unit: { enum: ['C', 'F'] } },
      required: ['city'],
      additionalProperties: false,
    };
    const out = translate(
      params({
        ...base,
        messages: hi,
        tools: [
          { name: 'weather', description: 'Weather now', input_schema: schema, cache_control: { type: 'ephemeral' } },
          { type: 'custom', name: 'clock', input_schema: { type: 'object' }, strict: true, defer_loading: false },
        ],
        tool_choice: { type: 'any', disable_parallel_tool_use: true },
      }),
    );
    const { $schema: _dropped, ...kept } = schema;
    const expected: Pick<GeminiRequest, 'tools' | 'toolConfig'> = {
      tools: [
        {
          functionDeclarations: [
            { name: 'weather', description: 'Weather now', parametersJsonSchema: kept },
            { name: 'clock', parametersJsonSchema: { type: 'object' } },
          ],
        },
      ],
      toolConfig: { functionCallingConfig: { mode: FunctionCallingConfigMode.ANY } },
    };
    assert.deepEqual({ tools: out.body.tools, toolConfig: out.body.toolConfig }, expected);
    assert.deepEqual(out.dropped, ['cache_control', 'strict', 'disable_parallel_tool_use']);

    const tools = [{ name: 'f', input_schema: { type: 'object' as const } }];
    const config = (tool_choice: NonNullable<MessageCreateParams['tool_choice']>): unknown =>
      (translate(params({ ...base, messages: hi, tools, tool_choice })).body.toolConfig as ToolConfig).functionCallingConfig;
    assert.deepEqual(config({ type: 'auto' }), { mode: FunctionCallingConfigMode.AUTO });
    assert.deepEqual(config({ type: 'none' }), { mode: FunctionCallingConfigMode.NONE });
    assert.deepEqual(config({ type: 'tool', name: 'f' }), { mode: FunctionCallingConfigMode.ANY, allowedFunctionNames: ['f'] });
    refused({ ...base, messages: [], tools, tool_choice: { type: 'sometimes' } }, 'tool_choice.type');
    // Without tools, no toolConfig.
    const none = translate(params({ ...base, messages: hi, tools: [], tool_choice: { type: 'auto' } }));
    assert.equal('tools' in none.body, false);
    assert.equal('toolConfig' in none.body, false);
    refused(params({ ...base, messages: [], tools: [{ type: 'web_search_20250305', name: 'web_search' }] }), 'tools[0]', /web_search_20250305/);
  });

  test('thinking: a budget, a dynamic budget for adaptive, nothing for disabled; thoughts shown unless omitted', () => {
    const thinking = (config: Json): unknown => (translate({ ...base, messages: hi, thinking: config }).body.generationConfig as GenerationConfig).thinkingConfig;
    assert.deepEqual(thinking({ type: 'enabled', budget_tokens: 2048 }), { thinkingBudget: 2048, includeThoughts: true });
    assert.deepEqual(thinking({ type: 'enabled', budget_tokens: 2048, display: 'omitted' }), { thinkingBudget: 2048, includeThoughts: false });
    assert.deepEqual(thinking({ type: 'adaptive' }), { thinkingBudget: -1, includeThoughts: true });
    assert.equal(thinking({ type: 'disabled' }), undefined);
    assert.deepEqual(translate({ ...base, messages: hi, thinking: { type: 'disabled' } }).dropped, []);
    refused({ ...base, messages: hi, thinking: { type: 'enabled' } }, 'thinking.budget_tokens');
    refused({ ...base, messages: hi, thinking: { type: 'sometimes' } }, 'thinking.type');
  });

  test("Claude's thinking blocks are left out; Gemini's come back as the parts they were, signatures in place", () => {
    const sig = (s: string): string => SIGNATURE_PREFIX + s;
    const out = translate(
      params({
        ...base,
        messages: [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: [{ type: 'redacted_thinking', data: 'xx' }, { type: 'thinking', thinking: 'mine', signature: 'EqQBClaude' }] },
          { role: 'user', content: 'b' },
          {
            role: 'assistant',
            content: [
              { type: 'thinking', thinking: 'hmm', signature: sig('T1') },
              { type: 'text', text: 'Let me check.' },
              { type: 'thinking', thinking: '', signature: sig('X1') },
              { type: 'tool_use', id: 'c1', name: 'f', input: {} },
              { type: 'thinking', thinking: '', signature: sig('C1') },
              { type: 'thinking', thinking: '', signature: sig('E1') },
              { type: 'tool_use', id: 'c2', name: 'f', input: {} },
              { type: 'thinking', thinking: '', signature: sig('') },
            ],
          },
        ],
      }),
    );
    const expected: Content[] = [
      { role: 'user', parts: [{ text: 'a' }, { text: 'b' }] },
      {
        role: 'model',
        parts: [
          { text: 'hmm', thought: true, thoughtSignature: 'T1' },
          { text: 'Let me check.', thoughtSignature: 'X1' },
          { functionCall: { id: 'c1', name: 'f', args: {} }, thoughtSignature: 'C1' },
          // A signature whose part already has one stands alone, as Gemini streams it.
          { text: '', thoughtSignature: 'E1' },
          { functionCall: { id: 'c2', name: 'f', args: {} } },
        ],
      },
    ];
    assert.deepEqual(out.body.contents, expected);
  });

  test('what would change the answer is refused, naming the parameter', () => {
    refused({ ...base, messages: [], mcp_servers: [{ type: 'url', url: 'https://mcp.example', name: 'm' }] }, 'mcp_servers');
    assert.deepEqual(translate({ ...base, messages: [], mcp_servers: [], container: 'c' }).dropped, ['mcp_servers', 'container']);
    refused({ ...base, messages: [], output_config: { effort: 'low' } }, 'output_config', /unknown parameter/);
    refused({ ...base, messages: [], frobnicate: 1 }, 'frobnicate');
    refused({ ...base, messages: [{ role: 'system', content: 'x' }] }, 'messages[0].role');
    refused({ ...base, messages: [{ role: 'user', content: [{ type: 'search_result', source: 's', title: 't', content: [] }] }] }, 'messages[0].content[0]');
    refused({ ...base, messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 'x', name: 'f', input: [1] }] }] }, 'messages[0].content[0].input');
    refused({ ...base, messages: 'hi' }, 'messages');
  });
});

// ---- answers ----

/** A fetch that answers every request with `body`, for the real SDK client. */
function sdk(body: string, contentType: string, status = 200): Anthropic {
  const fetch = async (): Promise<Response> => new Response(body, { status, headers: { 'content-type': contentType } });
  return new Anthropic({ apiKey: 'test', baseURL: 'http://sluice.invalid', maxRetries: 0, fetch });
}

const sdkParams = { model: 'claude-x', max_tokens: 100, messages: hi };

function answer(candidate: Candidate | undefined, extra: Partial<GeminiResponse> = {}): GeminiResponse {
  return { ...(candidate === undefined ? {} : { candidates: [candidate] }), modelVersion: 'gemini-2.5-flash-001', responseId: 'resp1', ...extra };
}

const usageMetadata = { promptTokenCount: 120, cachedContentTokenCount: 100, candidatesTokenCount: 30, thoughtsTokenCount: 12, totalTokenCount: 162 };

const toolAnswer = answer(
  {
    index: 0,
    finishReason: FinishReason.STOP,
    content: {
      role: 'model',
      parts: [
        { text: 'Thinking about ', thought: true },
        { text: 'the weather.', thought: true, thoughtSignature: 'T1' },
        { text: 'Checking.' },
        { functionCall: { id: 'fc_1', name: 'weather', args: { city: 'Paris' } }, thoughtSignature: 'S1' },
        { functionCall: { name: 'clock' } },
      ],
    },
  },
  { usageMetadata },
);

describe('geminiTranslation.response', () => {
  test('thoughts, text and calls as blocks; ids; stop reason; usage (cache read apart, thoughts as output)', () => {
    assert.deepEqual(translator.response(toolAnswer as Json), {
      id: 'msg_resp1',
      type: 'message',
      role: 'assistant',
      model: 'gemini-2.5-flash-001',
      content: [
        { type: 'thinking', thinking: 'Thinking about the weather.', signature: `${SIGNATURE_PREFIX}T1` },
        { type: 'text', text: 'Checking.' },
        { type: 'tool_use', id: 'fc_1', name: 'weather', input: { city: 'Paris' } },
        { type: 'thinking', thinking: '', signature: `${SIGNATURE_PREFIX}S1` },
        { type: 'tool_use', id: 'toolu_resp1_1', name: 'clock', input: {} },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      stop_details: null,
      usage: { input_tokens: 20, cache_creation_input_tokens: 0, cache_read_input_tokens: 100, output_tokens: 42 },
    });
  });

  test('the model is the factory’s when Gemini names none; a missing responseId gets a fresh id', () => {
    const out = geminiTranslation('gemini-fallback').response({ candidates: [{ content: { parts: [{ text: 'x' }] }, finishReason: 'STOP' }] });
    assert.equal(out.model, 'gemini-fallback');
    assert.match(String(out.id), /^msg_[0-9a-f]{32}$/);
    assert.deepEqual(out.usage, { input_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 });
  });

  test('every finish reason maps', () => {
    const stop = (finishReason: FinishReason | undefined, parts: Part[] = [{ text: 'a' }]): unknown =>
      translator.response(answer({ content: { role: 'model', parts }, ...(finishReason === undefined ? {} : { finishReason }) }) as Json).stop_reason;
    const cases: [FinishReason, string][] = [
      [FinishReason.STOP, 'end_turn'],
      [FinishReason.MAX_TOKENS, 'max_tokens'],
      [FinishReason.SAFETY, 'refusal'],
      [FinishReason.RECITATION, 'refusal'],
      [FinishReason.BLOCKLIST, 'refusal'],
      [FinishReason.PROHIBITED_CONTENT, 'refusal'],
      [FinishReason.SPII, 'refusal'],
      [FinishReason.IMAGE_SAFETY, 'refusal'],
      [FinishReason.LANGUAGE, 'end_turn'],
      [FinishReason.OTHER, 'end_turn'],
      [FinishReason.MALFORMED_FUNCTION_CALL, 'end_turn'],
    ];
    for (const [finish, reason] of cases) assert.equal(stop(finish), reason, finish);
    assert.equal(stop(undefined), 'end_turn');
    const call: Part[] = [{ functionCall: { name: 'f', args: {} } }];
    assert.equal(stop(FinishReason.STOP, call), 'tool_use');
    assert.equal(stop(FinishReason.MAX_TOKENS, call), 'max_tokens');
  });

  test('a safety stop is a refusal with its reason in stop_details', () => {
    const out = translator.response(answer({ finishReason: FinishReason.SAFETY, content: { role: 'model', parts: [{ text: 'I was say' }] } }) as Json);
    assert.equal(out.stop_reason, 'refusal');
    assert.deepEqual(out.stop_details, { type: 'refusal', category: null, explanation: 'the provider stopped the answer (SAFETY)' });
    assert.deepEqual(out.content, [{ type: 'text', text: 'I was say' }]);
  });

  test('a prompt blocked whole is an answer with no content and stop_reason refusal', async () => {
    const blocked = answer(undefined, { promptFeedback: { blockReason: BlockedReason.PROHIBITED_CONTENT }, usageMetadata: { promptTokenCount: 7, totalTokenCount: 7 } });
    const out = translator.response(blocked as Json);
    assert.deepEqual(out.content, []);
    assert.equal(out.stop_reason, 'refusal');
    assert.deepEqual(out.stop_details, { type: 'refusal', category: null, explanation: 'the provider blocked the prompt (PROHIBITED_CONTENT)' });
    assert.deepEqual(out.usage, { input_tokens: 7, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 });
    const message = await sdk(JSON.stringify(out), 'application/json').messages.create(sdkParams);
    assert.equal(message.stop_reason, 'refusal');
  });

  test('parses in the Anthropic SDK', async () => {
    const message = await sdk(JSON.stringify(translator.response(toolAnswer as Json)), 'application/json').messages.create(sdkParams);
    assert.equal(message.id, 'msg_resp1');
    assert.equal(message.stop_reason, 'tool_use');
    assert.equal(message.content.length, 5);
    const call = message.content[2];
    assert.ok(call?.type === 'tool_use');
    assert.deepEqual(call.input, { city: 'Paris' });
    assert.equal(message.usage.cache_read_input_tokens, 100);
  });

  test('tool calls and their results round trip: the answer, sent back with results, is the conversation Gemini had', () => {
    const message = translator.response(toolAnswer as Json);
    const next = translate({
      ...base,
      messages: [
        { role: 'user', content: 'weather?' },
        { role: 'assistant', content: message.content },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'fc_1', content: '18C' },
            { type: 'tool_result', tool_use_id: 'toolu_resp1_1', content: '12:00' },
          ],
        },
      ],
    });
    const expected: Content[] = [
      { role: 'user', parts: [{ text: 'weather?' }] },
      {
        role: 'model',
        parts: [
          { text: 'Thinking about the weather.', thought: true, thoughtSignature: 'T1' },
          { text: 'Checking.' },
          { functionCall: { id: 'fc_1', name: 'weather', args: { city: 'Paris' } }, thoughtSignature: 'S1' },
          { functionCall: { id: 'toolu_resp1_1', name: 'clock', args: {} } },
        ],
      },
      {
        role: 'user',
        parts: [
          { functionResponse: { id: 'fc_1', name: 'weather', response: { output: '18C' } } },
          { functionResponse: { id: 'toolu_resp1_1', name: 'clock', response: { output: '12:00' } } },
        ],
      },
    ];
    assert.deepEqual(next.body.contents, expected);
  });
});

describe('geminiTranslation.error', () => {
  const google = (code: number, status: string, message = 'the message'): Json => ({ error: { code, message, status, details: [] } });

  test("Google's status names the type; the HTTP status when it does not; Google's message kept", () => {
    const cases: [number, string, string][] = [
      [400, 'INVALID_ARGUMENT', 'invalid_request_error'],
      [400, 'FAILED_PRECONDITION', 'invalid_request_error'],
      [401, 'UNAUTHENTICATED', 'authentication_error'],
      [403, 'PERMISSION_DENIED', 'permission_error'],
      [404, 'NOT_FOUND', 'not_found_error'],
      [429, 'RESOURCE_EXHAUSTED', 'rate_limit_error'],
      [500, 'INTERNAL', 'api_error'],
      [503, 'UNAVAILABLE', 'overloaded_error'],
      [504, 'DEADLINE_EXCEEDED', 'api_error'],
    ];
    for (const [code, status, type] of cases) {
      assert.deepEqual(translator.error(code, google(code, status)), { type: 'error', error: { type, message: 'the message' } }, status);
    }
    assert.deepEqual(translator.error(503, { error: { message: 'busy' } }), { type: 'error', error: { type: 'overloaded_error', message: 'busy' } });
    assert.deepEqual(translator.error(429, [google(429, 'RESOURCE_EXHAUSTED', 'quota')]), { type: 'error', error: { type: 'rate_limit_error', message: 'quota' } });
    assert.deepEqual(translator.error(502, undefined), { type: 'error', error: { type: 'api_error', message: 'provider answered HTTP 502' } });
  });

  test('the Anthropic SDK raises the class of the status', async () => {
    const body = JSON.stringify(translator.error(401, google(401, 'UNAUTHENTICATED', 'API key not valid')));
    await assert.rejects(sdk(body, 'application/json', 401).messages.create(sdkParams), (error: unknown) => {
      assert.ok(error instanceof Anthropic.AuthenticationError);
      assert.equal(error.type, 'authentication_error');
      assert.match(error.message, /API key not valid/);
      return true;
    });
  });
});

// ---- streams ----

function chunk(parts: Part[], extra: Partial<Candidate> = {}, top: Partial<GeminiResponse> = {}): GeminiResponse {
  return { candidates: [{ index: 0, content: { role: 'model', parts }, ...extra }], modelVersion: 'gemini-2.5-flash-001', responseId: 's1', ...top };
}

/** Upstream SSE text as Google writes it: one `data:` event per chunk, separated by `sep`. */
function upstream(items: (GeminiResponse | Json)[], sep = '\r\n\r\n'): string {
  return items.map((item) => `data: ${JSON.stringify(item)}${sep}`).join('');
}

/** Feeds `text` in pieces of `size` bytes (Infinity: one piece) and returns all the output. */
function run(text: string, size = Infinity): string {
  const stream = translator.stream();
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
  return { message: await stream.finalMessage(), texts };
}

const textStream = upstream([
  chunk([{ text: 'Hel' }], {}, { usageMetadata: { promptTokenCount: 50, cachedContentTokenCount: 8 } }),
  chunk([{ text: 'lo, wörld 👋' }], {}, { usageMetadata: { promptTokenCount: 50, cachedContentTokenCount: 8, candidatesTokenCount: 3 } }),
  chunk([{ text: '' }], { finishReason: FinishReason.STOP }, { usageMetadata: { promptTokenCount: 50, cachedContentTokenCount: 8, candidatesTokenCount: 9, thoughtsTokenCount: 3 } }),
]);

/** The stream of toolAnswer: thoughts in two chunks, text, two calls, then the finish with usage. */
const toolStream = upstream([
  chunk([{ text: 'Thinking about ', thought: true }], {}, { responseId: 'resp1' }),
  chunk([{ text: 'the weather.', thought: true, thoughtSignature: 'T1' }], {}, { responseId: 'resp1' }),
  chunk([{ text: 'Checking.' }], {}, { responseId: 'resp1' }),
  chunk([{ functionCall: { id: 'fc_1', name: 'weather', args: { city: 'Paris' } }, thoughtSignature: 'S1' }, { functionCall: { name: 'clock' } }], {}, { responseId: 'resp1' }),
  chunk([], { finishReason: FinishReason.STOP }, { responseId: 'resp1', usageMetadata }),
]);

describe('geminiTranslation.stream', () => {
  test('text: message_start, one text block, message_delta with the last usage, message_stop', () => {
    const list = events(run(textStream));
    assert.deepEqual(names(list), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'content_block_delta#0', 'content_block_stop#0', 'message_delta', 'message_stop']);
    assert.deepEqual(list[0]?.data, {
      type: 'message_start',
      message: {
        id: 'msg_s1',
        type: 'message',
        role: 'assistant',
        model: 'gemini-2.5-flash-001',
        content: [],
        stop_reason: null,
        stop_sequence: null,
        stop_details: null,
        usage: { input_tokens: 42, cache_creation_input_tokens: 0, cache_read_input_tokens: 8, output_tokens: 0 },
      },
    });
    assert.deepEqual(list[3]?.data, { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'lo, wörld 👋' } });
    assert.deepEqual(list[5]?.data, {
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null, stop_details: null },
      usage: { input_tokens: 42, cache_creation_input_tokens: 0, cache_read_input_tokens: 8, output_tokens: 12 },
    });
  });

  test('split at every byte, one byte at a time, with LF or CRLF separators: the same output', () => {
    for (const text of [textStream, toolStream]) {
      const whole = run(text);
      assert.equal(run(text, 1), whole);
      assert.equal(run(text.replaceAll('\r\n', '\n')), whole, 'LF separators');
      const bytes = Buffer.from(text);
      for (let cut = 1; cut < bytes.length; cut++) {
        const stream = translator.stream();
        assert.equal(stream.push(bytes.subarray(0, cut)) + stream.push(bytes.subarray(cut)) + stream.end(), whole, `split at byte ${cut}`);
      }
    }
  });

  test('thoughts, text and calls: the blocks of the JSON answer, in the Anthropic SDK too', async () => {
    const list = events(run(toolStream));
    assert.deepEqual(names(list), [
      'message_start',
      'content_block_start#0',
      'content_block_delta#0',
      'content_block_delta#0',
      'content_block_delta#0',
      'content_block_stop#0',
      'content_block_start#1',
      'content_block_delta#1',
      'content_block_stop#1',
      'content_block_start#2',
      'content_block_delta#2',
      'content_block_stop#2',
      'content_block_start#3',
      'content_block_delta#3',
      'content_block_stop#3',
      'content_block_start#4',
      'content_block_delta#4',
      'content_block_stop#4',
      'message_delta',
      'message_stop',
    ]);
    assert.deepEqual(list[4]?.data, { type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: `${SIGNATURE_PREFIX}T1` } });
    assert.deepEqual(list[10]?.data, { type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '{"city":"Paris"}' } });
    const { message } = await finalMessage(run(toolStream, 5));
    const json = translator.response(toolAnswer as Json);
    assert.deepEqual(message.content, json.content);
    assert.equal(message.stop_reason, 'tool_use');
    assert.deepEqual(message.usage, { ...(json.usage as Json), output_tokens: 42 });
  });

  test("the Anthropic SDK's accumulator reads the text stream", async () => {
    const { message, texts } = await finalMessage(run(textStream, 3));
    assert.deepEqual(texts, ['Hel', 'lo, wörld 👋']);
    assert.deepEqual(message.content, [{ type: 'text', text: 'Hello, wörld 👋' }]);
    assert.equal(message.stop_reason, 'end_turn');
    assert.equal(message.usage.output_tokens, 12);
  });

  test('a signature on a final empty text part comes in a carrier after the text block', () => {
    const text = upstream([chunk([{ text: 'Done.' }]), chunk([{ text: '', thoughtSignature: 'E1' }], { finishReason: FinishReason.STOP })]);
    const list = events(run(text));
    assert.deepEqual(names(list), [
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
    assert.deepEqual(list[5]?.data.delta, { type: 'signature_delta', signature: `${SIGNATURE_PREFIX}E1` });
  });

  test('signed text: each signature in a carrier after its text, in the JSON answer and the stream alike, and back in place', async () => {
    const parts: Part[] = [{ text: 'A', thoughtSignature: 'X1' }, { text: 'B', thoughtSignature: 'X2' }, { text: 'C' }];
    const blocks = [
      { type: 'text', text: 'A' },
      { type: 'thinking', thinking: '', signature: `${SIGNATURE_PREFIX}X1` },
      { type: 'text', text: 'BC' },
      { type: 'thinking', thinking: '', signature: `${SIGNATURE_PREFIX}X2` },
    ];
    const json = translator.response(answer({ content: { role: 'model', parts }, finishReason: FinishReason.STOP }) as Json);
    assert.deepEqual(json.content, blocks);
    const streamed = upstream([...parts.map((part) => chunk([part])), chunk([], { finishReason: FinishReason.STOP })]);
    assert.deepEqual((await finalMessage(run(streamed))).message.content, blocks);
    const back = translate({ ...base, messages: [...hi, { role: 'assistant', content: blocks }] });
    assert.deepEqual((back.body.contents as Content[])[1]?.parts, [
      { text: 'A', thoughtSignature: 'X1' },
      { text: 'BC', thoughtSignature: 'X2' },
    ]);
  });

  test('a stream cut before its finish reason: outcome cut, no message_delta, no message_stop', () => {
    const stream = translator.stream();
    const out = stream.push(Buffer.from(upstream([chunk([{ text: 'partial' }])]))) + stream.end();
    assert.deepEqual(names(events(out)), ['message_start', 'content_block_start#0', 'content_block_delta#0']);
    assert.equal(stream.outcome?.(), 'cut');
    const nothing = translator.stream();
    assert.equal(nothing.end(), '');
    assert.equal(nothing.outcome?.(), 'cut');
  });

  test('a finished stream is complete; usage on a chunk after the finish still counts, its parts do not', () => {
    const stream = translator.stream();
    const text = upstream([chunk([{ text: 'x' }], { finishReason: FinishReason.MAX_TOKENS }), chunk([{ text: 'never sent' }], {}, { usageMetadata: { promptTokenCount: 5, candidatesTokenCount: 2 } })]);
    const pushed = events(stream.push(Buffer.from(text)));
    assert.deepEqual(names(pushed), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'content_block_stop#0']);
    const ended = events(stream.end());
    assert.deepEqual(names(ended), ['message_delta', 'message_stop']);
    assert.deepEqual(ended[0]?.data.delta, { stop_reason: 'max_tokens', stop_sequence: null, stop_details: null });
    assert.equal((ended[0]?.data.usage as Json).output_tokens, 2);
    assert.equal(stream.outcome?.(), 'complete');
  });

  test('an error chunk mid-stream is an Anthropic error event, and nothing follows it', async () => {
    const text = upstream([chunk([{ text: 'Hi' }]), { error: { code: 503, message: 'The model is overloaded.', status: 'UNAVAILABLE' } }, chunk([{ text: 'more' }], { finishReason: FinishReason.STOP })]);
    const stream = translator.stream();
    const list = events(stream.push(Buffer.from(text)) + stream.end());
    assert.deepEqual(names(list), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'error']);
    assert.deepEqual(list[3]?.data, { type: 'error', error: { type: 'overloaded_error', message: 'The model is overloaded.' } });
    assert.equal(stream.outcome?.(), 'error');
    assert.equal(run(text, 1), run(text));
    await assert.rejects(finalMessage(run(text)), (error: unknown) => {
      assert.ok(error instanceof Anthropic.APIError);
      assert.match(error.message, /overloaded/);
      return true;
    });
  });

  test('a prompt blocked whole ends the stream as a refusal with no content', () => {
    const stream = translator.stream();
    const text = upstream([{ promptFeedback: { blockReason: BlockedReason.SAFETY }, usageMetadata: { promptTokenCount: 4 }, modelVersion: 'gemini-x', responseId: 'b1' }]);
    const list = events(stream.push(Buffer.from(text)) + stream.end());
    assert.deepEqual(names(list), ['message_start', 'message_delta', 'message_stop']);
    assert.deepEqual(list[1]?.data.delta, {
      stop_reason: 'refusal',
      stop_sequence: null,
      stop_details: { type: 'refusal', category: null, explanation: 'the provider blocked the prompt (SAFETY)' },
    });
    assert.equal(stream.outcome?.(), 'complete');
  });

  test('a safety finish mid-answer is a refusal; keep-alives and comments produce nothing', () => {
    const text = ': keep-alive\r\n\r\n' + upstream([chunk([{ text: 'Sure, here' }]), chunk([], { finishReason: FinishReason.SAFETY })]);
    const list = events(run(text));
    assert.deepEqual(names(list), ['message_start', 'content_block_start#0', 'content_block_delta#0', 'content_block_stop#0', 'message_delta', 'message_stop']);
    assert.equal((list[4]?.data.delta as Json).stop_reason, 'refusal');
  });
});
