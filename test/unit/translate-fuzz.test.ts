// Hostile input never breaks the translators. The gateway relies on this contract:
//   request()  returns a TranslatedRequest whose body is plain JSON, or throws a TranslationError
//              (a 400 naming the parameter); anything else escaping is a bug;
//   response() returns an object (a throw becomes a 502 and a bug report, so it must at least be an Error);
//   error()    returns an object, always (it is not guarded);
//   stream()   push() and end() never throw and always return strings of well-formed SSE.
// Inputs: fast-check's generic objects and JSON, and structure-aware bodies (valid-looking messages,
// parts, tools, tool_choice) with wrong types in every field, null everywhere, Object.prototype
// names as keys and values (__proto__, constructor, toString…), very long strings and deep nesting.
// Seeded: a failure prints fast-check's seed, path and shrunk counterexample, and reproduces.
import { describe, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { chatStreamTranslator, chatToMessages } from '../../src/translate/chat-to-messages.ts';
import { messagesToChat } from '../../src/translate/messages-to-chat.ts';
import { responsesToMessages } from '../../src/translate/responses-to-messages.ts';
import { converseTranslation } from '../../src/translate/messages-to-converse.ts';
import { geminiTranslation } from '../../src/translate/messages-to-gemini.ts';
import { bedrockEmbeddingsTranslation } from '../../src/translate/embeddings-to-bedrock.ts';
import { geminiEmbeddingsTranslation } from '../../src/translate/embeddings-to-gemini.ts';
import { geminiCountTranslation } from '../../src/translate/count-tokens-to-gemini.ts';
import { converseCountTranslation } from '../../src/translate/count-tokens-to-converse.ts';
import { SseParser, type SseEvent } from '../../src/translate/sse.ts';
import { TranslationError, type Json, type StreamOutcome, type StreamTranslator, type Translator } from '../../src/translate/types.ts';

/** Fixed, so a failure reproduces; SLUICE_FUZZ_SEED=<n> explores other inputs. */
const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 0x51c3);
const RUNS = 300;

function check<T>(arbitrary: fc.Arbitrary<T>, predicate: (value: T) => void, numRuns = RUNS): void {
  fc.assert(
    fc.property(arbitrary, (value) => {
      predicate(value);
    }),
    { seed: SEED, numRuns },
  );
}

/** A value for a message: short, JSON, and never the megabytes a long string can be. */
function show(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch (error) {
    text = `(unserializable: ${(error as Error).message})`;
  }
  return text.length > 600 ? `${text.slice(0, 600)}… (${text.length} chars)` : text;
}

function describeError(error: unknown): string {
  return error instanceof Error ? `${error.constructor.name}: ${error.message}\n${error.stack?.split('\n').slice(1, 4).join('\n')}` : `a non-Error ${show(error)}`;
}

/**
 * Plain JSON all the way down: what JSON.stringify writes is what the value holds. undefined is
 * allowed as a property value (left out, as the translators mean it); a function, symbol or
 * bigint is not (a function is silently left out, which loses a field).
 */
function assertPlainJson(value: unknown, path = '$', depth = 0): void {
  assert.ok(depth < 5_000, `${path}: too deep`);
  if (value === null || typeof value === 'string' || typeof value === 'boolean' || typeof value === 'number') return;
  if (typeof value !== 'object') assert.fail(`${path} is a ${typeof value} (${String(value).slice(0, 60)}), not JSON`);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      assert.ok(i in value, `${path}[${i}] is a hole in the array`);
      assert.notEqual(value[i], undefined, `${path}[${i}] is undefined`);
      assertPlainJson(value[i], `${path}[${i}]`, depth + 1);
    }
    return;
  }
  const proto = Object.getPrototypeOf(value);
  assert.ok(proto === Object.prototype || proto === null, `${path} is not a plain object`);
  for (const [key, inner] of Object.entries(value as object)) {
    if (inner !== undefined) assertPlainJson(inner, `${path}.${key}`, depth + 1);
  }
}

// ---------------------------------------------------------------------------------------------
// Generic arbitraries

/** Names Object.prototype has: as keys they are looked up through the prototype; as values' keys they change String(). */
const PROTO_KEYS = ['__proto__', 'constructor', 'prototype', 'toString', 'valueOf', 'hasOwnProperty', 'toJSON', 'isPrototypeOf', 'toLocaleString'];

/** Words the translators switch on, so random values hit the interesting branches. */
const TOKENS = [
  ...PROTO_KEYS,
  'system', 'developer', 'user', 'assistant', 'tool', 'function', 'model',
  'text', 'image_url', 'image', 'input_audio', 'file', 'refusal', 'input_text', 'output_text', 'input_image', 'input_file',
  'message', 'function_call', 'function_call_output', 'reasoning', 'item_reference',
  'tool_use', 'tool_result', 'thinking', 'redacted_thinking', 'document', 'custom', 'web_search_20250305',
  'auto', 'required', 'none', 'any', 'disabled', 'adaptive', 'enabled', 'json_object', 'json_schema',
  'base64', 'url', 'ephemeral', 'stop', 'length', 'tool_calls', 'content_filter', 'end_turn', 'max_tokens',
  'message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop',
  'error', 'ping', 'text_delta', 'input_json_delta', 'thinking_delta', '[DONE]', '', ' ', '\u0000', '\ud800', '𝄞',
];

const VALID_IMAGE_URLS = ['https://example.com/cat.png', 'HTTP://EXAMPLE.COM/x', 'data:image/png;base64,iVBORw0KGgo=', 'data:IMAGE/JPEG;charset=x;base64,/9j/', 'data:image/webp;base64,' + 'A'.repeat(50_000)];
const BAD_IMAGE_URLS = ['data:image/svg+xml;base64,PHN2Zz4=', 'data:image/png,notbase64', 'data:;base64,', 'ftp://example.com/x.png', 'javascript:alert(1)', ''];

/** Tool arguments as a client sends them: JSON text, or not quite. */
const VALID_ARGUMENTS = ['', '   ', '{}', '{"city":"Paris"}', '{"__proto__":{"polluted":1}}', '{"constructor":{"prototype":{"x":1}}}', '{"a":'.repeat(3_000) + '1' + '}'.repeat(3_000)];
const BAD_ARGUMENTS = ['[1,2]', 'null', '"text"', '42', '{bad json', '['.repeat(5_000)];
const ARGUMENT_TEXTS = [...VALID_ARGUMENTS, ...BAD_ARGUMENTS];

/** Objects whose own keys shadow Object.prototype: String() on some of them throws. */
const HOSTILE_OBJECT_TEXTS = ['{"toString":1}', '{"toString":{},"valueOf":{}}', '{"valueOf":1}', '{"toJSON":1}', '{"__proto__":null}', '{"__proto__":{"role":"user","type":"text"}}', '{"constructor":{"prototype":{"polluted":true}}}', '{"hasOwnProperty":1}'];

const hostileObject: fc.Arbitrary<unknown> = fc.constantFrom(...HOSTILE_OBJECT_TEXTS).map((text) => JSON.parse(text) as unknown);

const longString: fc.Arbitrary<string> = fc
  .tuple(fc.constantFrom('x', 'é', '𝄞', '\n\r', '"\\', '\u0000', '\ud800', 'data: ', '{'), fc.constantFrom(1_000, 20_000, 100_000))
  .map(([unit, n]) => unit.repeat(Math.ceil(n / unit.length)));

const shortString: fc.Arbitrary<string> = fc.oneof(
  { weight: 6, arbitrary: fc.string({ maxLength: 12 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 12 }) },
  { weight: 4, arbitrary: fc.constantFrom(...TOKENS) },
);

const str: fc.Arbitrary<string> = fc.oneof({ weight: 12, arbitrary: shortString }, { weight: 1, arbitrary: longString });

const leaf: fc.Arbitrary<unknown> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer({ min: -3, max: 5 }),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(0, 1, -1, 0.5, 1.5, 2, 1e21, -0, Number.MAX_SAFE_INTEGER, 2 ** 53 + 2),
  shortString,
  hostileObject,
);

const anyKey: fc.Arbitrary<string> = fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...PROTO_KEYS, ...TOKENS) }, { weight: 2, arbitrary: fc.string({ maxLength: 8 }) });

/** Objects built with Object.fromEntries, as JSON.parse builds them: "__proto__" is an own key. */
const objectOf = (entries: [string, unknown][]): Json => Object.fromEntries(entries) as Json;

const { value: wildTree } = fc.letrec<{ value: unknown; array: unknown[]; object: Json }>((tie) => ({
  value: fc.oneof({ depthSize: 'small', withCrossShrink: true }, { weight: 6, arbitrary: leaf }, { weight: 1, arbitrary: tie('array') }, { weight: 1, arbitrary: tie('object') }),
  array: fc.array(tie('value'), { maxLength: 4 }),
  object: fc.array(fc.tuple(anyKey, tie('value')), { maxLength: 4 }).map(objectOf),
}));

/** A value nested `depth` levels in arrays, objects, or both. */
function nest(depth: number, kind: 'array' | 'object' | 'mixed', inner: unknown): unknown {
  let value = inner;
  for (let i = 0; i < depth; i++) {
    const asArray = kind === 'array' || (kind === 'mixed' && i % 2 === 0);
    value = asArray ? [value] : { type: 'text', text: 'x', content: value };
  }
  return value;
}

const deepValue: fc.Arbitrary<unknown> = fc
  .tuple(fc.integer({ min: 50, max: 400 }), fc.constantFrom<'array' | 'object' | 'mixed'>('array', 'object', 'mixed'), leaf)
  .map(([depth, kind, inner]) => nest(depth, kind, inner));

/** Anything at all, in a field that expects something specific. */
const wild: fc.Arbitrary<unknown> = fc.oneof({ weight: 12, arbitrary: wildTree }, { weight: 1, arbitrary: longString }, { weight: 1, arbitrary: deepValue });

const num: fc.Arbitrary<number> = fc.oneof(fc.integer({ min: 0, max: 10_000 }), fc.constantFrom(-1, 0, 0.5, 1e21));

const unit: fc.Arbitrary<number> = fc.oneof(fc.double({ min: 0, max: 2, noNaN: true }), fc.constantFrom(0, 1, 1.0000001, -0.1));

/**
 * An object with (some of) these fields, each usually of its expected shape, sometimes null,
 * sometimes anything at all; and now and then extra keys, Object.prototype's names among them.
 * `hostility` is the weight (against 40) of a null, of a wild value, and of extra keys.
 */
function loose(fields: Record<string, fc.Arbitrary<unknown>>, options: { required?: string[]; rare?: Record<string, fc.Arbitrary<unknown>>; hostility?: number } = {}): fc.Arbitrary<Json> {
  const hostility = options.hostility ?? 1;
  const model: Record<string, fc.Arbitrary<unknown>> = {};
  for (const [key, arbitrary] of Object.entries(fields)) {
    model[key] =
      hostility === 0
        ? arbitrary
        : fc.oneof({ weight: 40, arbitrary }, { weight: hostility, arbitrary: fc.constant(null) }, { weight: hostility, arbitrary: wild });
  }
  const record = fc.record(model, { requiredKeys: options.required ?? [] });
  const rare = options.rare === undefined ? fc.constant({}) : fc.oneof({ weight: 6, arbitrary: fc.constant({}) }, { weight: 1, arbitrary: fc.record(options.rare, { requiredKeys: [] }) });
  const extra = hostility === 0 ? fc.constant([]) : fc.oneof({ weight: 40, arbitrary: fc.constant([] as [string, unknown][]) }, { weight: hostility, arbitrary: fc.array(fc.tuple(anyKey, wild), { minLength: 1, maxLength: 2 }) });
  return fc.tuple(record, rare, extra).map(([base, more, extras]) => objectOf([...Object.entries(base), ...Object.entries(more), ...extras]));
}

const list = <T>(arbitrary: fc.Arbitrary<T>, maxLength = 4): fc.Arbitrary<T[]> => fc.array(arbitrary, { maxLength });

// ---------------------------------------------------------------------------------------------
// Structure-aware request bodies, per front API. `hostility` 0: valid-looking shapes and values
// only (most translate); 1: also values the translator must refuse, wrong types, nulls and extras.

/** Usually `valid`; when hostile, now and then `invalid` (weight `hostility` against 40). */
function sometimes<T>(hostility: number, valid: fc.Arbitrary<T>, invalid: fc.Arbitrary<T>): fc.Arbitrary<T> {
  return hostility === 0 ? valid : fc.oneof({ weight: 40, arbitrary: valid }, { weight: hostility, arbitrary: invalid });
}

/** One of `valid`, or, when hostile, now and then one of `invalid`. */
function pick<T>(hostility: number, valid: readonly T[], invalid: readonly T[] = []): fc.Arbitrary<T> {
  return invalid.length === 0 ? fc.constantFrom(...valid) : sometimes(hostility, fc.constantFrom(...valid), fc.constantFrom(...invalid));
}

const zeroToOne = fc.double({ min: 0, max: 1, noNaN: true });

function chatBody(hostility: number): fc.Arbitrary<Json> {
  const h = hostility;
  const o = (fields: Record<string, fc.Arbitrary<unknown>>, required?: string[]) => loose(fields, { required, hostility: h });
  const cache = fc.constantFrom<unknown>({}, { type: 'ephemeral' });
  const part = o(
    {
      type: pick(h, ['text', 'text', 'text', 'image_url'], ['input_audio', 'file', 'refusal', 'image']),
      text: str,
      refusal: str,
      image_url: fc.oneof(o({ url: pick(h, VALID_IMAGE_URLS, BAD_IMAGE_URLS), detail: fc.constantFrom('auto', 'low', 'high') }, ['url']), pick(h, VALID_IMAGE_URLS, BAD_IMAGE_URLS)),
      prompt_cache_breakpoint: cache,
    },
    ['type', 'text', 'image_url'],
  );
  const call = o(
    { id: str, type: pick(h, ['function'], ['custom']), function: o({ name: str, arguments: pick(h, VALID_ARGUMENTS, BAD_ARGUMENTS) }, ['name']) },
    ['id', 'type', 'function'],
  );
  const message = o(
    {
      role: pick(h, ['system', 'developer', 'user', 'user', 'user', 'assistant', 'assistant', 'tool'], ['function', 'bogus']),
      content: fc.oneof({ weight: 3, arbitrary: str }, { weight: 2, arbitrary: list(part, 3) }, { weight: Math.min(h, 1), arbitrary: fc.constant(null) }),
      name: str,
      tool_calls: list(call, 3),
      tool_call_id: str,
      refusal: str,
    },
    ['role', 'content', 'tool_call_id'],
  );
  const tool = o(
    {
      type: pick(h, ['function'], ['custom']),
      function: o({ name: str, description: str, parameters: fc.oneof(fc.constant({ type: 'object', properties: {} }), wild), strict: fc.boolean() }, ['name']),
    },
    ['type', 'function'],
  );
  return loose(
    {
      model: str,
      messages: list(message, 6),
      max_tokens: num,
      max_completion_tokens: num,
      temperature: sometimes(h, zeroToOne, unit),
      top_p: unit,
      stop: fc.oneof(str, list(str)),
      stream: fc.boolean(),
      stream_options: o({ include_usage: fc.boolean(), include_obfuscation: fc.boolean() }),
      tools: list(tool),
      tool_choice: fc.oneof(pick(h, ['auto', 'required', 'none'], ['any']), o({ type: fc.constant('function'), function: o({ name: str }, ['name']) }, ['type', 'function'])),
      parallel_tool_calls: fc.boolean(),
      user: str,
      safety_identifier: str,
      response_format: o({ type: pick(h, ['text', 'json_object'], ['json_schema', 'bogus']), json_schema: wild }, ['type']),
      logprobs: sometimes(h, fc.constant(false), fc.constant(true)),
      modalities: sometimes<string[]>(h, fc.constant(['text']), list(fc.constantFrom('text', 'audio'))),
      n: sometimes(h, fc.constant(1), fc.integer({ min: 0, max: 3 })),
      seed: num,
      metadata: wild,
      reasoning_effort: fc.constantFrom('low', 'high'),
    },
    {
      required: ['messages'],
      hostility: h,
      rare:
        h === 0
          ? { prediction: wild, frequency_penalty: num, logit_bias: wild, store: fc.boolean() }
          : { audio: wild, functions: wild, function_call: wild, moderation: wild, web_search_options: wild, prediction: wild, frequency_penalty: num, unknown_parameter: wild },
    },
  );
}

function messagesBody(hostility: number): fc.Arbitrary<Json> {
  const h = hostility;
  const o = (fields: Record<string, fc.Arbitrary<unknown>>, required?: string[]) => loose(fields, { required, hostility: h });
  const cache = fc.constantFrom<unknown>({ type: 'ephemeral' }, { type: 'ephemeral', ttl: '1h' });
  const source = o(
    {
      type: pick(h, ['base64', 'url'], ['file', 'text']),
      media_type: fc.constantFrom('image/png', 'image/jpeg', 'application/pdf'),
      data: str,
      url: pick(h, VALID_IMAGE_URLS, BAD_IMAGE_URLS),
    },
    ['type', 'media_type', 'data', 'url'],
  );
  const inner = o({ type: pick(h, ['text'], ['image', 'document', 'search_result']), text: str, source, cache_control: cache }, ['type', 'text']);
  const block = o(
    {
      type: pick(h, ['text', 'text', 'image', 'tool_result', 'tool_result', 'tool_use', 'tool_use', 'thinking', 'redacted_thinking'], ['document', 'server_tool_use', 'bogus']),
      text: str,
      source,
      tool_use_id: str,
      content: fc.oneof(str, list(inner, 3)),
      is_error: fc.boolean(),
      id: str,
      name: str,
      input: wild,
      thinking: str,
      signature: str,
      data: str,
      cache_control: cache,
    },
    ['type', 'text', 'source', 'tool_use_id', 'id', 'name'],
  );
  const message = o({ role: pick(h, ['user', 'user', 'assistant', 'assistant'], ['system', 'tool']), content: fc.oneof(str, list(block)) }, ['role', 'content']);
  const tool = o(
    {
      type: pick(h, ['custom'], ['web_search_20250305', 'bash_20250124']),
      name: str,
      description: str,
      input_schema: fc.oneof(fc.constant({ type: 'object', properties: {} }), wild),
      strict: fc.boolean(),
      cache_control: cache,
      defer_loading: fc.boolean(),
      input_examples: list(wild, 2),
    },
    ['name'],
  );
  return loose(
    {
      model: str,
      messages: list(message, 6),
      max_tokens: num,
      system: fc.oneof(str, list(o({ type: pick(h, ['text'], ['image']), text: str, cache_control: cache }, ['type', 'text']), 3)),
      stop_sequences: list(str),
      temperature: unit,
      top_p: unit,
      stream: fc.boolean(),
      metadata: o({ user_id: str }),
      tools: list(tool),
      tool_choice: o({ type: pick(h, ['auto', 'any', 'none', 'tool'], ['bogus']), name: str, disable_parallel_tool_use: fc.boolean() }, ['type', 'name']),
    },
    {
      required: ['messages'],
      hostility: h,
      rare: {
        thinking: o({ type: pick(h, ['disabled', 'adaptive'], ['enabled']), budget_tokens: num }, ['type']),
        mcp_servers: sometimes<unknown[]>(h, fc.constant([]), list(wild, 2)),
        top_k: num,
        service_tier: str,
        container: str,
        cache_control: cache,
        ...(h === 0 ? {} : { unknown_parameter: wild }),
      },
    },
  );
}

function responsesBody(hostility: number): fc.Arbitrary<Json> {
  const h = hostility;
  const o = (fields: Record<string, fc.Arbitrary<unknown>>, required?: string[]) => loose(fields, { required, hostility: h });
  const part = o(
    {
      type: pick(h, ['input_text', 'input_text', 'output_text', 'refusal', 'input_image'], ['input_file', 'input_audio', 'text']),
      text: str,
      refusal: str,
      image_url: pick(h, VALID_IMAGE_URLS, BAD_IMAGE_URLS),
      detail: fc.constantFrom('auto', 'low', 'high'),
      file_id: str,
      prompt_cache_breakpoint: fc.constant({}),
      annotations: fc.constant([]),
    },
    ['type', 'text', 'refusal', 'image_url'],
  );
  const item = o(
    {
      type: pick(h, ['message', 'message', 'message', 'function_call', 'function_call_output', 'reasoning'], ['item_reference', 'web_search_call']),
      role: pick(h, ['user', 'user', 'assistant', 'system', 'developer'], ['tool']),
      content: fc.oneof(str, list(part)),
      call_id: str,
      name: str,
      arguments: pick(h, VALID_ARGUMENTS, BAD_ARGUMENTS),
      output: fc.oneof(str, list(part, 3)),
      id: str,
      summary: fc.constant([]),
    },
    ['role', 'content', 'call_id', 'name', 'arguments', 'output'],
  );
  const tool = o(
    {
      type: pick(h, ['function'], ['web_search', 'file_search']),
      name: str,
      description: str,
      parameters: fc.oneof(fc.constant({ type: 'object', properties: {} }), wild),
      strict: fc.boolean(),
    },
    ['type', 'name'],
  );
  return loose(
    {
      model: str,
      input: fc.oneof({ weight: 1, arbitrary: str }, { weight: 4, arbitrary: list(item, 6) }),
      instructions: str,
      max_output_tokens: num,
      temperature: sometimes(h, zeroToOne, unit),
      top_p: unit,
      stream: fc.boolean(),
      stream_options: o({ include_obfuscation: fc.boolean() }),
      tools: list(tool),
      tool_choice: fc.oneof(pick(h, ['auto', 'required', 'none'], ['any']), o({ type: pick(h, ['function'], ['web_search']), name: str }, ['type', 'name'])),
      parallel_tool_calls: fc.boolean(),
      user: str,
      text: o({ format: o({ type: pick(h, ['text'], ['json_object', 'json_schema']) }, ['type']), verbosity: fc.constantFrom('low', 'high') }),
      store: fc.boolean(),
      truncation: fc.constantFrom('auto', 'disabled'),
      reasoning: wild,
      include: list(str, 2),
      metadata: wild,
      top_logprobs: sometimes(h, fc.constant(0), fc.integer({ min: 0, max: 2 })),
    },
    {
      required: ['input'],
      hostility: h,
      rare:
        h === 0
          ? { context_management: fc.constant([]), background: fc.constant(false), max_tool_calls: num }
          : {
              previous_response_id: str,
              conversation: wild,
              prompt: wild,
              context_management: fc.oneof(fc.constant([]), list(wild, 2)),
              background: fc.boolean(),
              moderation: wild,
              unknown_parameter: wild,
            },
    },
  );
}

// ---------------------------------------------------------------------------------------------
// The contracts

const TRANSLATORS: readonly { name: string; translator: Translator; body: (hostility: number) => fc.Arbitrary<Json> }[] = [
  { name: 'chatToMessages', translator: chatToMessages, body: chatBody },
  { name: 'messagesToChat', translator: messagesToChat, body: messagesBody },
  { name: 'responsesToMessages', translator: responsesToMessages, body: responsesBody },
  { name: 'messagesToConverse', translator: converseTranslation('m'), body: messagesBody },
  { name: 'messagesToGemini', translator: geminiTranslation('m'), body: messagesBody },
  { name: 'countTokensToGemini', translator: geminiCountTranslation('m'), body: messagesBody },
  { name: 'countTokensToConverse', translator: converseCountTranslation('m'), body: messagesBody },
  { name: 'embeddingsToBedrock (Titan)', translator: upstream(bedrockEmbeddingsTranslation({}), 'amazon.titan-embed-text-v2:0'), body: embeddingsBody },
  { name: 'embeddingsToBedrock (Cohere)', translator: upstream(bedrockEmbeddingsTranslation({ encoding_format: 'base64' }), 'cohere.embed-english-v3'), body: embeddingsBody },
  { name: 'embeddingsToGemini', translator: geminiEmbeddingsTranslation({ encoding_format: 'base64' }, 'm'), body: embeddingsBody },
];

/** The translator with its requests made for `model` (an embeddings translation picks the body by the upstream model). */
function upstream(translator: Translator, model: string): Translator {
  return { ...translator, request: (body: Json) => translator.request(body, model) };
}

/** An OpenAI embeddings request, hostile or not. */
function embeddingsBody(hostility: number): fc.Arbitrary<Json> {
  const input = sometimes(hostility, fc.oneof(str, fc.constant(['one'])), fc.oneof(list(str, 5), list(fc.integer({ min: 0, max: 100_000 })), list(list(fc.integer({ min: 0, max: 9 }))), wild));
  const dimensions = sometimes(hostility, fc.constantFrom(256, 512, 1024), num);
  return loose({ model: str, input, dimensions, encoding_format: pick(hostility, ['float', 'base64'], PROTO_KEYS), user: str }, { required: ['model', 'input'], hostility });
}

/** request(): a TranslatedRequest of plain JSON, or a TranslationError. Returns whether it translated. */
function requestContract(translator: Translator, body: Json): boolean {
  let out: ReturnType<Translator['request']>;
  try {
    out = translator.request(body, 'm');
  } catch (error) {
    if (error instanceof TranslationError) {
      assert.equal(typeof error.param, 'string');
      assert.equal(typeof error.message, 'string');
      assert.ok(error.message.length > 0);
      return false;
    }
    assert.fail(`request() threw something other than a TranslationError: ${describeError(error)}\ninput: ${show(body)}`);
  }
  assert.ok(out !== null && typeof out === 'object', 'request() returned no object');
  assert.ok(out.body !== null && typeof out.body === 'object' && !Array.isArray(out.body), 'body is not an object');
  // The upstream model (an embeddings translation's, its own: see `upstream`), not the client's.
  assert.ok(out.body.model === 'm' || (translator.from === 'embeddings' && typeof out.body.model === 'string' && out.body.model !== body.model), `model ${show(out.body.model)}`);
  let text: string;
  try {
    text = JSON.stringify(out.body);
  } catch (error) {
    assert.fail(`the translated body does not survive JSON.stringify: ${describeError(error)}\ninput: ${show(body)}`);
  }
  assert.equal(typeof text, 'string');
  assertPlainJson(out.body);
  assert.ok(Array.isArray(out.dropped) && out.dropped.every((name) => typeof name === 'string'), 'dropped is not a list of names');
  return true;
}

/** response(): an object of plain JSON; a throw is tolerated only as an Error (the gateway's 502), and recorded. */
function responseContract(translator: Translator, body: unknown, thrown: string[]): void {
  let out: Json;
  try {
    out = translator.response(body as Json);
  } catch (error) {
    assert.ok(error instanceof Error, `response() threw a non-Error ${show(error)} on ${show(body)}`);
    const line = `${error.constructor.name}: ${error.message}`;
    if (!thrown.some((seen) => seen.endsWith(line))) thrown.push(`${show(body)} → ${line}`);
    return;
  }
  assert.ok(out !== null && typeof out === 'object' && !Array.isArray(out), `response() returned ${show(out)}`);
  assertPlainJson(out);
}

/** error(): an object of plain JSON, never a throw (the gateway does not guard it). */
function errorContract(translator: Translator, status: number, body: unknown): void {
  let out: Json;
  try {
    out = translator.error(status, body);
  } catch (error) {
    assert.fail(`error(${status}) threw: ${describeError(error)}\ninput: ${show(body)}`);
  }
  assert.ok(out !== null && typeof out === 'object' && !Array.isArray(out));
  assertPlainJson(out);
  assert.ok(JSON.stringify(out).length > 2);
}

/** Feeds the chunks, then ends: every call returns a string, none throws. The whole output. */
function runStream(stream: StreamTranslator, chunks: readonly Uint8Array[]): string {
  let out = '';
  chunks.forEach((chunk, i) => {
    let text: unknown;
    try {
      text = stream.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    } catch (error) {
      assert.fail(`push() of chunk ${i} threw: ${describeError(error)}\nchunks: ${show(chunks.map((c) => Buffer.from(c).toString('latin1')))}`);
    }
    assert.equal(typeof text, 'string', `push() returned ${show(text)}`);
    out += text as string;
  });
  let tail: unknown;
  try {
    tail = stream.end();
  } catch (error) {
    assert.fail(`end() threw: ${describeError(error)}\nchunks: ${show(chunks.map((c) => Buffer.from(c).toString('latin1')))}`);
  }
  assert.equal(typeof tail, 'string', `end() returned ${show(tail)}`);
  return out + (tail as string);
}

function sseEvents(text: string): SseEvent[] {
  const parser = new SseParser();
  return [...parser.push(text), ...parser.finish()];
}

/**
 * What a client can rely on in each translator's output stream. A stream whose upstream was cut
 * (`outcome` 'cut') gets no ending from the translator (the gateway ends it with its error event):
 * then its output must hold no final event at all.
 */
const OUTPUT_CHECKS: Record<string, (events: SseEvent[], outcome: StreamOutcome | undefined) => void> = {
  // OpenAI chat chunks: `data: {json}` events, and [DONE] only last (absent after an error, and when cut).
  chatToMessages(events, outcome) {
    assert.notEqual(outcome, undefined, 'the translator says how the upstream ended');
    if (outcome === 'complete') assert.equal(events.at(-1)?.data, '[DONE]', 'a complete answer ends with [DONE]');
    events.forEach((event, i) => {
      assert.equal(event.event, undefined, 'chat chunks carry no event name');
      if (event.data === '[DONE]') {
        assert.equal(outcome, 'complete', '[DONE] only when message_stop came');
        assert.equal(i, events.length - 1, '[DONE] is the last event');
        return;
      }
      const json = JSON.parse(event.data) as Json;
      assert.ok(json !== null && typeof json === 'object');
      if (json.error !== undefined) {
        assert.equal(i, events.length - 1, 'an error ends the stream');
        return;
      }
      assert.equal(json.object, 'chat.completion.chunk');
      for (const choice of json.choices as Json[]) assert.ok(choice.finish_reason === null || typeof choice.finish_reason === 'string', `finish_reason ${show(choice.finish_reason)}`);
    });
  },
  // Anthropic events: each named as its data's type; message_stop or error last, exactly one of them (none when cut).
  messagesToChat(events, outcome) {
    assert.notEqual(outcome, undefined, 'the translator says how the upstream ended');
    events.forEach((event, i) => {
      const json = JSON.parse(event.data) as Json;
      assert.equal(event.event, json.type);
      if (json.type === 'message_stop' || json.type === 'error') assert.equal(i, events.length - 1, `${json.type} is the last event`);
      if (json.type === 'message_delta') assert.equal(typeof (json.delta as Json).stop_reason, 'string', `message_delta without a stop_reason: ${event.data}`);
    });
    if (outcome === 'cut') assert.ok(!events.some((e) => e.event === 'message_stop' || e.event === 'error'), 'a cut stream gets no ending from the translator');
    else assert.equal(events.at(-1)?.event, outcome === 'complete' ? 'message_stop' : 'error', `the last event is ${events.at(-1)?.event}`);
    if (events.length > 0 && events[0]!.event !== 'error') assert.equal(events[0]!.event, 'message_start');
  },
  // Converse's and Gemini's streams come out as Anthropic's events, with the same rules.
  messagesToConverse: (events, outcome) => OUTPUT_CHECKS.messagesToChat!(events, outcome),
  messagesToGemini: (events, outcome) => OUTPUT_CHECKS.messagesToChat!(events, outcome),
  // Responses events: named as their type, sequence numbers 0, 1, 2…, one terminal event, last (none when cut).
  responsesToMessages(events, outcome) {
    assert.notEqual(outcome, undefined, 'the translator says how the upstream ended');
    events.forEach((event, i) => {
      const json = JSON.parse(event.data) as Json;
      assert.equal(event.event, json.type);
      assert.equal(json.sequence_number, i);
      if (['response.completed', 'response.incomplete', 'error'].includes(json.type as string)) assert.equal(i, events.length - 1, `${json.type} is the last event`);
    });
    const last = events.at(-1)?.event;
    if (outcome === 'cut') assert.ok(!['response.completed', 'response.incomplete', 'error'].includes(last!), 'a cut stream gets no ending from the translator');
    else assert.ok(['response.completed', 'response.incomplete', 'error'].includes(last!), `the last event is ${last}`);
  },
};

function outputContract(name: string, text: string, outcome: StreamOutcome | undefined): void {
  const events = sseEvents(text);
  for (const event of events) {
    if (event.data !== '[DONE]') {
      try {
        JSON.parse(event.data);
      } catch {
        assert.fail(`an output event's data is not JSON: ${show(event)}`);
      }
    }
  }
  OUTPUT_CHECKS[name]!(events, outcome);
}

/** The random parts of an output (ids drawn when upstream gave none, clock seconds) made equal. */
function normalise(text: string): string {
  return text.replace(/[0-9a-f]{32}/g, 'ID').replace(/"(created|created_at|completed_at)":\d+/g, '"$1":0');
}

// ---------------------------------------------------------------------------------------------
// SSE-looking upstream streams: provider events with random fields, mixed with garbage.

function anthropicEvent(hostility: number): fc.Arbitrary<Json> {
  const o = (fields: Record<string, fc.Arbitrary<unknown>>, required?: string[]) => loose(fields, { required, hostility });
  const index = fc.oneof({ weight: 6, arbitrary: fc.integer({ min: 0, max: 3 }) }, { weight: 1, arbitrary: fc.constantFrom(-1, 1.5, 1e9) });
  const usage = o({ input_tokens: num, output_tokens: num, cache_read_input_tokens: num, cache_creation_input_tokens: num });
  return fc.oneof(
    o({ type: fc.constant('message_start'), message: o({ id: fc.oneof(fc.constantFrom('msg_01abc', 'msg_', ''), str), type: fc.constant('message'), role: fc.constant('assistant'), model: str, content: fc.constant([]), usage }) }, ['type', 'message']),
    o(
      {
        type: fc.constant('content_block_start'),
        index,
        content_block: o({ type: fc.constantFrom('text', 'tool_use', 'thinking', 'server_tool_use', 'redacted_thinking'), text: str, id: fc.oneof(fc.constantFrom('toolu_01', 'toolu_02'), str), name: str, input: fc.constant({}) }, ['type']),
      },
      ['type', 'index', 'content_block'],
    ),
    o(
      {
        type: fc.constant('content_block_delta'),
        index,
        delta: o({ type: fc.constantFrom('text_delta', 'input_json_delta', 'thinking_delta', 'signature_delta', 'citations_delta'), text: str, partial_json: fc.constantFrom('{"a":', '1}', '', '{}', ...ARGUMENT_TEXTS.slice(0, 8)), thinking: str }, ['type']),
      },
      ['type', 'index', 'delta'],
    ),
    o({ type: fc.constant('content_block_stop'), index }, ['type', 'index']),
    o({ type: fc.constant('message_delta'), delta: o({ stop_reason: pick(hostility, ['end_turn', 'max_tokens', 'tool_use', 'refusal', 'pause_turn', 'model_context_window_exceeded'], PROTO_KEYS), stop_sequence: str }), usage }, ['type', 'delta']),
    o({ type: fc.constant('message_stop') }, ['type']),
    o({ type: fc.constant('ping') }, ['type']),
    o({ type: fc.constant('error'), error: o({ type: pick(hostility, ['overloaded_error', 'api_error'], PROTO_KEYS), message: str }) }, ['type', 'error']),
  );
}

/** A Converse stream event as the Bedrock provider relays it: its name also in `type`, which the translator ignores. */
function converseEvent(hostility: number): fc.Arbitrary<Json> {
  const o = (fields: Record<string, fc.Arbitrary<unknown>>, required?: string[]) => loose(fields, { required, hostility });
  const index = fc.oneof({ weight: 6, arbitrary: fc.integer({ min: 0, max: 3 }) }, { weight: 1, arbitrary: fc.constantFrom(-1, 1.5, 1e9) });
  const usage = o({ inputTokens: num, outputTokens: num, totalTokens: num, cacheReadInputTokens: num, cacheWriteInputTokens: num });
  return fc.oneof(
    o({ type: fc.constant('messageStart'), role: fc.constant('assistant') }, ['type']),
    o({ type: fc.constant('contentBlockStart'), contentBlockIndex: index, start: o({ toolUse: o({ toolUseId: str, name: str }) }) }, ['type']),
    o({ type: fc.constant('contentBlockDelta'), contentBlockIndex: index, delta: o({ text: str, toolUse: o({ input: fc.constantFrom('{"a":', '1}', '', '{}', ...ARGUMENT_TEXTS.slice(0, 8)) }), reasoningContent: o({ text: str, signature: str, redactedContent: str }) }) }, ['type']),
    o({ type: fc.constant('contentBlockStop'), contentBlockIndex: index }, ['type']),
    o({ type: fc.constant('messageStop'), stopReason: fc.constantFrom('end_turn', 'tool_use', 'max_tokens', 'stop_sequence', 'guardrail_intervened', 'content_filtered', ...PROTO_KEYS), additionalModelResponseFields: wild }, ['type']),
    o({ type: fc.constant('metadata'), usage, metrics: o({ latencyMs: num }) }, ['type']),
    o({ type: fc.constantFrom('modelStreamErrorException', 'throttlingException'), message: str, originalStatusCode: num }, ['type']),
  );
}

/** A chunk of Gemini's streamGenerateContent. */
function geminiChunk(hostility: number): fc.Arbitrary<Json> {
  const o = (fields: Record<string, fc.Arbitrary<unknown>>, required?: string[]) => loose(fields, { required, hostility });
  const part = o({ text: str, thought: fc.boolean(), thoughtSignature: str, functionCall: o({ name: str, args: wild, id: str }) });
  const candidate = o({ content: o({ role: fc.constant('model'), parts: list(part, 3) }), finishReason: fc.constantFrom('STOP', 'MAX_TOKENS', 'SAFETY', 'RECITATION', 'OTHER', ...PROTO_KEYS), index: num });
  return fc.oneof(
    o({ candidates: list(candidate, 2), usageMetadata: o({ promptTokenCount: num, candidatesTokenCount: num, thoughtsTokenCount: num, cachedContentTokenCount: num }), modelVersion: str, responseId: str }),
    o({ promptFeedback: o({ blockReason: fc.constantFrom('SAFETY', 'OTHER', ...PROTO_KEYS) }), usageMetadata: o({ promptTokenCount: num }) }),
    o({ error: o({ code: num, message: str, status: str }) }, ['error']),
  );
}

function openaiChunk(hostility: number): fc.Arbitrary<Json> {
  const o = (fields: Record<string, fc.Arbitrary<unknown>>, required?: string[]) => loose(fields, { required, hostility });
  const call = o({
    index: fc.oneof({ weight: 5, arbitrary: fc.integer({ min: 0, max: 2 }) }, { weight: 1, arbitrary: fc.constantFrom(-1, 0.5, 1e9) }),
    id: fc.oneof(fc.constantFrom('call_1', 'call_2', ''), str),
    type: fc.constant('function'),
    function: o({ name: str, arguments: fc.constantFrom('{"a":', '1}', '', '{}', ...ARGUMENT_TEXTS.slice(0, 8)) }),
  });
  const choice = o({
    index: fc.constantFrom(0, 0, 0, 1),
    delta: o({ role: fc.constant('assistant'), content: fc.oneof(str, fc.constant(null)), refusal: fc.oneof(str, fc.constant(null)), tool_calls: list(call, 2) }),
    finish_reason: fc.oneof(fc.constant(null), pick(hostility, ['stop', 'length', 'tool_calls', 'content_filter', 'function_call'], PROTO_KEYS)),
    logprobs: fc.constant(null),
  });
  return fc.oneof(
    { weight: 8, arbitrary: o({ id: fc.oneof(fc.constantFrom('chatcmpl-abc', ''), str), object: fc.constant('chat.completion.chunk'), created: num, model: str, choices: list(choice, 2), usage: fc.oneof(fc.constant(null), o({ prompt_tokens: num, completion_tokens: num, total_tokens: num, prompt_tokens_details: o({ cached_tokens: num }) })) }, ['choices']) },
    { weight: 1, arbitrary: o({ error: o({ message: str, type: str, code: str }) }, ['error']) },
  );
}

type Piece = { kind: 'event'; name: string | undefined; data: string } | { kind: 'raw'; text: string };

const GARBAGE: fc.Arbitrary<Piece> = fc.oneof(
  fc.constantFrom(': keep-alive\n\n', 'retry: 1000\n', 'id: 7\n', 'data: {broken\n\n', 'data:\n\n', 'event: error\n', 'event: message_stop\n\n', 'data: [DONE]\n\n', '\n\n\n', '\r\n', '\r', 'data: {"type":"message_stop"}', 'data: null\n\n', 'data: 42\n\n', 'data: []\n\n', 'event: \u0000\ndata: "\ud800"\n\n').map((text): Piece => ({ kind: 'raw', text })),
  fc.string({ maxLength: 40 }).map((text): Piece => ({ kind: 'raw', text })),
  fc.string({ unit: 'binary', maxLength: 40 }).map((text): Piece => ({ kind: 'raw', text })),
);

function streamPieces(event: fc.Arbitrary<Json>, eventNames: readonly string[]): fc.Arbitrary<Piece[]> {
  const named: fc.Arbitrary<Piece> = fc
    .tuple(event, fc.oneof({ weight: 4, arbitrary: fc.constant('same') }, { weight: 1, arbitrary: fc.constant('none') }, { weight: 1, arbitrary: fc.constantFrom(...eventNames) }))
    .map(([json, naming]): Piece => {
      const type = typeof json.type === 'string' ? json.type : undefined;
      const name = naming === 'none' ? undefined : naming === 'same' ? type : naming;
      return { kind: 'event', name, data: JSON.stringify(json) };
    });
  return fc.array(fc.oneof({ weight: 8, arbitrary: named }, { weight: 1, arbitrary: GARBAGE }), { maxLength: 14 });
}

/** Pieces as SSE text, with one of the three line ends (or a mix), data sometimes cut over several `data:` lines. */
const serialise = (pieces: readonly Piece[], eol: string, cutData: boolean): string =>
  pieces
    .map((piece) => {
      if (piece.kind === 'raw') return piece.text;
      const head = piece.name === undefined ? '' : `event: ${piece.name}${eol}`;
      // JSON may be cut between tokens: a newline there is whitespace, so the joined data is the same JSON.
      const data = cutData ? piece.data.replace(/,"/g, `,${eol}data: "`) : piece.data;
      return `${head}data: ${data}${eol}${eol}`;
    })
    .join('');

/** The bytes cut at random points (repeated points give empty chunks). */
function splitAt(bytes: Uint8Array, cuts: readonly number[]): Uint8Array[] {
  const points = [...new Set(cuts.map((c) => Math.floor(c * (bytes.length + 1))))].sort((a, b) => a - b);
  const chunks: Uint8Array[] = [];
  let start = 0;
  for (const point of points) {
    chunks.push(bytes.subarray(start, point));
    start = point;
  }
  chunks.push(bytes.subarray(start));
  return chunks;
}

const cutsArbitrary = fc.array(fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true }), { maxLength: 12 });
const eolArbitrary = fc.constantFrom('\n', '\r\n', '\r');

const STREAMS: readonly { name: string; make: () => StreamTranslator; events: (hostility: number) => fc.Arbitrary<Json>; names: readonly string[] }[] = [
  {
    name: 'chatToMessages',
    make: () => chatStreamTranslator(true),
    events: anthropicEvent,
    names: ['message_start', 'content_block_start', 'content_block_delta', 'error', 'ping', 'message_stop'],
  },
  { name: 'messagesToChat', make: () => messagesToChat.stream(), events: openaiChunk, names: ['error', 'message', 'ping'] },
  {
    name: 'messagesToConverse',
    make: () => converseTranslation('m').stream(),
    events: converseEvent,
    names: ['messageStart', 'contentBlockStart', 'contentBlockDelta', 'contentBlockStop', 'messageStop', 'metadata', 'modelStreamErrorException', 'throttlingException'],
  },
  { name: 'messagesToGemini', make: () => geminiTranslation('m').stream(), events: geminiChunk, names: ['message', 'error'] },
  {
    name: 'responsesToMessages',
    make: () => responsesToMessages.stream(),
    events: anthropicEvent,
    names: ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'error', 'message_stop'],
  },
];

// ---------------------------------------------------------------------------------------------

for (const { name, translator, body } of TRANSLATORS) {
  describe(`${name}: request() returns plain JSON or throws a TranslationError`, () => {
    test('fc.object() bodies', () => {
      check(fc.object({ maxDepth: 4 }), (value) => {
        requestContract(translator, value as Json);
      });
    });

    test('JSON bodies (fc.jsonValue() values under any keys)', () => {
      check(fc.dictionary(anyKey, fc.jsonValue({ maxDepth: 4 }), { maxKeys: 6 }), (value) => {
        requestContract(translator, value as Json);
      });
    });

    for (const [hostility, runs] of [[1, 400], [8, 400]] as const) {
      test(`structure-aware hostile bodies (hostility ${hostility}): wrong types, nulls, prototype names, long strings, deep nesting`, (t: TestContext) => {
        let translated = 0;
        check(body(hostility), (value) => {
          if (requestContract(translator, value)) translated++;
        }, runs);
        t.diagnostic(`${translated} of ${runs} hostile bodies translated; the rest were refused with a TranslationError`);
      });
    }

    test('structure-aware, mostly valid bodies reach the end of the translation', (t: TestContext) => {
      let translated = 0;
      check(body(0), (value) => {
        if (requestContract(translator, value)) translated++;
      }, 400);
      t.diagnostic(`${translated} of 400 valid-looking bodies translated`);
      assert.ok(translated >= 100, `only ${translated} of 400 valid-looking bodies translated: the generator is off`);
    });

    test('the same bodies as JSON text parsed back (what the gateway hands over)', () => {
      check(body(1), (value) => {
        let text: string;
        try {
          text = JSON.stringify(value);
        } catch {
          return; // deeper than JSON.stringify goes: the gateway could not have parsed it either
        }
        requestContract(translator, JSON.parse(text) as Json);
      }, 200);
    });

    test('nesting a few hundred levels deep in every field', () => {
      check(fc.tuple(deepValue, fc.constantFrom('messages', 'content', 'tools', 'tool_choice', 'metadata', 'input', 'system', 'parameters', 'input_schema', 'arguments')), ([deep, where]) => {
        const bodies: Json[] = [
          { [where]: deep },
          { messages: [{ role: 'user', content: deep }], input: [{ role: 'user', content: deep }] },
          { messages: [{ role: 'user', content: 'hi' }], input: 'hi', tools: [{ type: 'function', name: 'f', function: { name: 'f', parameters: deep }, parameters: deep, input_schema: deep }] },
          { messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: deep }], tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: JSON.stringify(deep) } }] }] },
          { input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: JSON.stringify(deep) }, { type: 'function_call_output', call_id: 'c', output: deep }] },
        ];
        for (const b of bodies) requestContract(translator, b);
      }, 100);
    });
  });
}

/**
 * Minimal inputs naming Object.prototype's members. Found by the properties above; kept here as
 * plain regressions: a lookup in a plain object (REFUSED[key], STOP_REASONS[finish]) reaches the
 * prototype, and String(value) throws on an object whose own toString is not a function.
 */
describe('Object.prototype names in requests and answers', () => {
  test('as top-level keys they are unknown parameters, refused with a TranslationError naming them', () => {
    for (const { name, translator } of TRANSLATORS) {
      const base: Json = name === 'responsesToMessages' || name.startsWith('embeddings') ? { input: 'hi' } : { messages: [{ role: 'user', content: 'hi' }] };
      for (const key of PROTO_KEYS) {
        for (const value of [1, 'x', null, [], {}]) {
          const body = objectOf([...Object.entries(base), [key, value]]);
          if (value === null) {
            // OpenAI reads null as "not given"; refusing it is as good as ignoring it. What matters: no crash.
            requestContract(translator, body);
            continue;
          }
          assert.throws(
            () => translator.request(body, 'm'),
            (error: unknown) => error instanceof TranslationError && error.param === key && /unknown parameter|not supported/.test(error.message),
            `${name}: ${show(body)} (got ${(() => {
              try {
                return show(translator.request(body, 'm'));
              } catch (error) {
                return describeError(error);
              }
            })()})`,
          );
        }
      }
    }
  });

  test('as a value whose own toString is not a function (String() of it throws a TypeError)', () => {
    const shadowing = ['{"toString":1}', '{"toString":{},"valueOf":{}}'];
    for (const text of shadowing) {
      const bodies: [Translator, string][] = [
        [messagesToChat, `{"messages":[{"role":${text},"content":"hi"}]}`],
        [messagesToChat, `{"messages":[{"role":"user","content":[{"type":${text}}]}]}`],
        [messagesToChat, `{"messages":[{"role":"assistant","content":[{"type":${text}}]}]}`],
        [messagesToChat, `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":${text}}}]}]}`],
        [messagesToChat, `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":${text}}]}]}]}`],
        [messagesToChat, `{"messages":[],"tools":[{"type":${text},"name":"f"}]}`],
        [messagesToChat, `{"messages":[],"tool_choice":{"type":${text}}}`],
        [chatToMessages, `{"messages":[{"role":${text},"content":"hi"}]}`],
        [chatToMessages, `{"messages":[{"role":"user","content":[{"type":${text}}]}]}`],
        [responsesToMessages, `{"input":[{"type":${text}}]}`],
        [responsesToMessages, `{"input":[{"role":${text},"content":"hi"}]}`],
        [responsesToMessages, `{"input":"hi","tools":[{"type":${text}}]}`],
        [responsesToMessages, `{"input":"hi","text":{"format":{"type":${text}}}}`],
      ];
      for (const [translator, json] of bodies) {
        try {
          translator.request(JSON.parse(json) as Json, 'm');
          assert.fail(`${json} was accepted`);
        } catch (error) {
          assert.ok(error instanceof TranslationError, `${translator.from}→${translator.to}: ${json} threw ${describeError(error)}`);
        }
      }
    }
  });

  test("an upstream finish_reason named like an Object.prototype member is an unknown reason: end_turn", () => {
    for (const reason of PROTO_KEYS) {
      const message = messagesToChat.response({ id: 'chatcmpl-1', model: 'gpt', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: reason }] });
      assert.equal(message.stop_reason, 'end_turn', `response(): finish_reason ${reason} gave ${show(String(message.stop_reason))}`);
      const stream = messagesToChat.stream();
      const out = runStream(stream, [Buffer.from(`data: ${JSON.stringify({ id: 'c', choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: reason }], usage: { prompt_tokens: 1, completion_tokens: 1 } })}\n\n`)]);
      const delta = sseEvents(out).find((event) => event.event === 'message_delta');
      assert.equal((JSON.parse(delta!.data) as { delta: Json }).delta.stop_reason, 'end_turn', `stream: finish_reason ${reason}`);
    }
  });
});

for (const { name, translator } of TRANSLATORS) {
  describe(`${name}: response() and error() on arbitrary upstream JSON`, () => {
    test('response() of any JSON value returns plain JSON or throws an Error (recorded)', (t: TestContext) => {
      const thrown: string[] = [];
      check(fc.jsonValue({ maxDepth: 4 }), (value) => responseContract(translator, value, thrown));
      check(fc.object({ maxDepth: 3 }), (value) => responseContract(translator, value, thrown));
      for (const line of thrown) t.diagnostic(`response() threw on ${line}`);
    });

    test('response() of answer-shaped JSON with hostile fields returns plain JSON', () => {
      const o = (fields: Record<string, fc.Arbitrary<unknown>>, required?: string[]) => loose(fields, { required });
      const anthropicAnswer = o({
        id: str,
        type: fc.constant('message'),
        role: fc.constant('assistant'),
        model: str,
        content: list(o({ type: fc.constantFrom('text', 'tool_use', 'thinking', 'server_tool_use'), text: str, id: str, name: str, input: wild }, ['type'])),
        stop_reason: fc.constantFrom('end_turn', 'max_tokens', 'tool_use', 'refusal', 'pause_turn', 'stop_sequence', ...PROTO_KEYS),
        stop_sequence: str,
        usage: o({ input_tokens: num, output_tokens: num, cache_read_input_tokens: num, cache_creation_input_tokens: num }),
      });
      const chatAnswer = o({
        id: str,
        object: fc.constant('chat.completion'),
        model: str,
        choices: list(
          o({
            index: fc.constantFrom(0, 0, 1, null),
            message: o({ role: fc.constant('assistant'), content: str, refusal: str, tool_calls: list(o({ id: str, type: fc.constant('function'), function: o({ name: str, arguments: fc.constantFrom(...ARGUMENT_TEXTS) }) }), 3) }),
            finish_reason: fc.constantFrom('stop', 'length', 'tool_calls', 'content_filter', 'function_call', ...PROTO_KEYS),
          }),
          2,
        ),
        usage: o({ prompt_tokens: num, completion_tokens: num, prompt_tokens_details: o({ cached_tokens: num }) }),
      });
      const thrown: string[] = [];
      const converseAnswer = o({
        output: o({ message: o({ role: fc.constant('assistant'), content: list(o({ text: str, toolUse: o({ toolUseId: str, name: str, input: wild }), reasoningContent: o({ reasoningText: o({ text: str, signature: str }) }) }), 3) }) }),
        stopReason: fc.constantFrom('end_turn', 'tool_use', 'max_tokens', 'stop_sequence', 'guardrail_intervened', ...PROTO_KEYS),
        usage: o({ inputTokens: num, outputTokens: num, cacheReadInputTokens: num, cacheWriteInputTokens: num }),
      });
      const geminiAnswer = o({
        candidates: list(o({ content: o({ role: fc.constant('model'), parts: list(o({ text: str, thought: fc.boolean(), functionCall: o({ name: str, args: wild, id: str }) }), 3) }), finishReason: fc.constantFrom('STOP', 'MAX_TOKENS', 'SAFETY', ...PROTO_KEYS) }), 2),
        promptFeedback: o({ blockReason: fc.constantFrom('SAFETY', ...PROTO_KEYS) }),
        usageMetadata: o({ promptTokenCount: num, candidatesTokenCount: num, thoughtsTokenCount: num, cachedContentTokenCount: num }),
        modelVersion: str,
        responseId: str,
      });
      const embeddingAnswer = o({ embedding: list(num, 4), inputTextTokenCount: num, embeddings: fc.oneof(list(list(num, 4), 3), o({ float: list(list(num, 4), 3) }), list(o({ values: list(num, 4) }), 3)) });
      const answers: Partial<Record<string, fc.Arbitrary<Json>>> = { chat: chatAnswer, converse: converseAnswer, generate_content: geminiAnswer, bedrock_embeddings: embeddingAnswer, embed_content: embeddingAnswer };
      check(answers[translator.to] ?? anthropicAnswer, (value) => responseContract(translator, value, thrown), 500);
      assert.deepEqual(thrown, [], 'an answer-shaped object never makes response() throw');
    });

    test('error() of any status and any body (or none) returns an error object, never throws', () => {
      const body = fc.oneof(
        fc.constant(undefined),
        fc.jsonValue({ maxDepth: 4 }),
        loose({ error: fc.oneof(str, loose({ message: str, type: str, code: str, param: str })), type: fc.constant('error') }),
        wild,
      );
      check(fc.tuple(fc.oneof(fc.integer({ min: 400, max: 599 }), fc.integer({ min: 0, max: 1_000 })), body), ([status, value]) => errorContract(translator, status, value), 500);
    });
  });
}

for (const { name, make, events, names } of STREAMS) {
  describe(`${name}: stream() never throws and always returns strings`, () => {
    test('arbitrary bytes in arbitrary chunks', () => {
      check(fc.array(fc.uint8Array({ maxLength: 64 }), { maxLength: 8 }), (chunks) => {
        runStream(make(), chunks);
      }, 500);
    });

    test('arbitrary text, with SSE line ends and field names sprinkled in', () => {
      const text = fc.array(fc.oneof(fc.string({ maxLength: 20 }), fc.constantFrom('data: ', 'event: ', '\n', '\r\n', '\r', '\n\n', ':', '{', '"type":', '[DONE]', 'error')), { maxLength: 30 }).map((parts) => parts.join(''));
      check(fc.tuple(text, cutsArbitrary), ([t, cuts]) => {
        runStream(make(), splitAt(Buffer.from(t, 'utf8'), cuts));
      }, 500);
    });

    test('provider events with random fields mixed with garbage, in random chunks: well-formed SSE out', () => {
      check(fc.tuple(streamPieces(events(1), names), eolArbitrary, fc.boolean(), cutsArbitrary), ([pieces, eol, cutData, cuts]) => {
        const bytes = Buffer.from(serialise(pieces, eol, cutData), 'utf8');
        const stream = make();
        const out = runStream(stream, splitAt(bytes, cuts));
        outputContract(name, out, stream.outcome?.());
      }, 400);
    });

    test('valid-looking provider streams: the output does not depend on where the chunks were cut', () => {
      check(fc.tuple(streamPieces(events(0), names), eolArbitrary, fc.boolean(), cutsArbitrary), ([pieces, eol, cutData, cuts]) => {
        const bytes = Buffer.from(serialise(pieces, eol, cutData), 'utf8');
        const stream = make();
        const whole = runStream(stream, [bytes]);
        outputContract(name, whole, stream.outcome?.());
        const cut = runStream(make(), splitAt(bytes, cuts));
        assert.equal(normalise(cut), normalise(whole));
        // Byte by byte too, when short (a long line fed a byte at a time is rescanned at every push).
        if (bytes.length <= 4_096) {
          const bytewise = runStream(make(), [...bytes].map((b) => Uint8Array.of(b)));
          assert.equal(normalise(bytewise), normalise(whole));
        }
      }, 200);
    });
  });
}
