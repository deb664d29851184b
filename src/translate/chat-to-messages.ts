// OpenAI Chat Completions in front, Anthropic Messages behind: a `POST /v1/chat/completions` body
// rewritten for `POST /v1/messages`, and Anthropic's answer (JSON, SSE stream or error) rewritten
// as a chat completion. A parameter Anthropic cannot honour is refused with a 400 naming it when
// ignoring it would change what the client gets, and dropped (and named) when it is only a hint.
import { StringDecoder } from 'node:string_decoder';
import { TranslationError, type Json, type StreamOutcome, type StreamTranslator, type TranslatedRequest, type Translator } from './types.ts';
import { SseParser, formatSse } from './sse.ts';
import { toOpenAIError } from './errors.ts';
import { count, given, isObject, nowSeconds } from './json.ts';
import { anthropicChoice, anthropicTemperature, anthropicTool, anthropicToolChoice, compact, DEFAULT_MAX_TOKENS, IMAGE_TYPES, textBlock, withCache, type Block } from './anthropic-blocks.ts';

/** Accepted and not sent: no Anthropic equivalent, and leaving them out only loses a hint or a record. */
const DROPPED = new Set([
  'frequency_penalty',
  'presence_penalty',
  'logit_bias',
  'seed',
  'service_tier',
  'store',
  'metadata',
  'prediction',
  'reasoning_effort',
  'top_logprobs',
  'verbosity',
  'prompt_cache_key',
  'prompt_cache_retention',
  'prompt_cache_options',
]);

/** Refused: leaving them out would answer something other than what was asked. */
const REFUSED = new Map([
  ['audio', 'audio output is not supported when routed to an Anthropic model'],
  ['functions', "the legacy 'functions' parameter is not supported when routed to an Anthropic model; use 'tools'"],
  ['function_call', "the legacy 'function_call' parameter is not supported when routed to an Anthropic model; use 'tool_choice'"],
  ['moderation', 'moderated completions are not supported when routed to an Anthropic model'],
  ['web_search_options', 'web search is not supported when routed to an Anthropic model'],
]);

/** Every other top-level key the chat API defines; anything else is refused as unknown. */
const HANDLED = new Set([
  'model',
  'messages',
  'max_tokens',
  'max_completion_tokens',
  'temperature',
  'top_p',
  'stop',
  'stream',
  'stream_options',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'user',
  'safety_identifier',
  'response_format',
  'logprobs',
  'modalities',
  'n',
]);

/** A message's content from `system`, `developer` and `tool` messages: a string or text parts only. */
function textContent(content: unknown, param: string): Block[] {
  if (typeof content === 'string') return textBlock(content);
  if (!Array.isArray(content)) throw new TranslationError(param, `${param} must be a string or an array of text parts`);
  return content.flatMap((part: unknown, j) => {
    if (!isObject(part) || part.type !== 'text' || typeof part.text !== 'string') {
      throw new TranslationError(`${param}[${j}]`, `${param}[${j}]: only text parts are accepted here`);
    }
    return textBlock(part.text, part);
  });
}

function imageBlock(part: Json, param: string, dropped: Set<string>): Block {
  const image = part.image_url;
  const url = isObject(image) ? image.url : undefined;
  if (typeof url !== 'string') throw new TranslationError(param, `${param}: image_url.url must be a string`);
  if (isObject(image) && given(image.detail) && image.detail !== 'auto') dropped.add('messages[].content[].image_url.detail');
  if (/^https?:\/\//i.test(url)) return withCache({ type: 'image', source: { type: 'url', url } }, part);
  const data = /^data:([^;,]+)((?:;[^;,]*)*);base64,(.*)$/s.exec(url);
  if (data === null) throw new TranslationError(param, `${param}: an image must be an http(s) URL or a base64 data: URL`);
  const mediaType = data[1]!.toLowerCase();
  if (!IMAGE_TYPES.has(mediaType)) {
    throw new TranslationError(param, `${param}: image type ${mediaType} is not supported when routed to an Anthropic model (jpeg, png, gif, webp)`);
  }
  return withCache({ type: 'image', source: { type: 'base64', media_type: mediaType, data: data[3]! } }, part);
}

function userContent(content: unknown, param: string, dropped: Set<string>): Block[] {
  if (typeof content === 'string') return textBlock(content);
  if (!Array.isArray(content)) throw new TranslationError(param, `${param} must be a string or an array of content parts`);
  return content.flatMap((part: unknown, j): Block[] => {
    const at = `${param}[${j}]`;
    if (!isObject(part)) throw new TranslationError(at, `${at} must be an object`);
    if (part.type === 'text' && typeof part.text === 'string') return textBlock(part.text, part);
    if (part.type === 'image_url') return [imageBlock(part, at, dropped)];
    if (part.type === 'input_audio') throw new TranslationError(at, `${at}: audio input is not supported when routed to an Anthropic model`);
    if (part.type === 'file') throw new TranslationError(at, `${at}: file input is not supported when routed to an Anthropic model`);
    throw new TranslationError(at, `${at}: unknown content part type ${JSON.stringify(part.type)}`);
  });
}

function assistantContent(message: Json, param: string): Block[] {
  const blocks: Block[] = [];
  const { content } = message;
  if (typeof content === 'string') blocks.push(...textBlock(content));
  else if (Array.isArray(content)) {
    content.forEach((part: unknown, j) => {
      const at = `${param}.content[${j}]`;
      // A refusal the model gave earlier is still what it said: kept as text.
      if (isObject(part) && part.type === 'text' && typeof part.text === 'string') blocks.push(...textBlock(part.text, part));
      else if (isObject(part) && part.type === 'refusal' && typeof part.refusal === 'string') blocks.push(...textBlock(part.refusal));
      else throw new TranslationError(at, `${at}: an assistant message takes text and refusal parts only`);
    });
  } else if (given(content)) throw new TranslationError(`${param}.content`, `${param}.content must be a string or an array of parts`);
  if (typeof message.refusal === 'string') blocks.push(...textBlock(message.refusal));
  if (given(message.audio)) throw new TranslationError(`${param}.audio`, `${param}.audio: audio is not supported when routed to an Anthropic model`);
  if (given(message.function_call)) {
    throw new TranslationError(`${param}.function_call`, `${param}.function_call: the legacy function_call is not supported when routed to an Anthropic model; use tool_calls`);
  }
  const calls = message.tool_calls;
  if (!given(calls)) return blocks;
  if (!Array.isArray(calls)) throw new TranslationError(`${param}.tool_calls`, `${param}.tool_calls must be an array`);
  for (const call of calls as unknown[]) {
    const fn = isObject(call) ? call.function : undefined;
    if (!isObject(call) || call.type !== 'function' || !isObject(fn) || typeof fn.name !== 'string' || typeof call.id !== 'string') {
      throw new TranslationError(`${param}.tool_calls`, `${param}.tool_calls: only function tool calls with an id and a name are supported when routed to an Anthropic model`);
    }
    const args = typeof fn.arguments === 'string' ? fn.arguments : '';
    let input: unknown;
    try {
      // Some clients send '' for a call without arguments: that is the empty object.
      input = args.trim() === '' ? {} : JSON.parse(args);
    } catch {
      throw new TranslationError(`${param}.tool_calls`, `${param}.tool_calls: the arguments of ${call.id} are not valid JSON`);
    }
    if (!isObject(input)) throw new TranslationError(`${param}.tool_calls`, `${param}.tool_calls: the arguments of ${call.id} must be a JSON object`);
    blocks.push({ type: 'tool_use', id: call.id, name: fn.name, input });
  }
  return blocks;
}

interface Turn {
  role: 'user' | 'assistant';
  content: Block[];
}

function translateMessages(messages: unknown, dropped: Set<string>): { system: Block[]; turns: Turn[] } {
  if (!Array.isArray(messages)) throw new TranslationError('messages', 'messages must be an array');
  const system: Block[] = [];
  const turns: Turn[] = [];
  // Anthropic requires user and assistant to alternate: what OpenAI sends as several messages in a
  // row (a user message after tool results, parallel tool results) becomes one message.
  const add = (role: Turn['role'], blocks: Block[]): void => {
    if (blocks.length === 0) return;
    const last = turns.at(-1);
    if (last?.role === role) last.content.push(...blocks);
    else turns.push({ role, content: blocks });
  };
  messages.forEach((message: unknown, i) => {
    const param = `messages[${i}]`;
    if (!isObject(message)) throw new TranslationError(param, `${param} must be an object`);
    if (given(message.name) && message.role !== 'function') dropped.add('messages[].name');
    switch (message.role) {
      case 'system':
      case 'developer':
        // Anthropic has one system prompt, outside the conversation: every system and developer
        // message goes there, in order, wherever it stood.
        system.push(...textContent(message.content, `${param}.content`));
        return;
      case 'user':
        add('user', userContent(message.content, `${param}.content`, dropped));
        return;
      case 'assistant':
        add('assistant', assistantContent(message, param));
        return;
      case 'tool': {
        if (typeof message.tool_call_id !== 'string') throw new TranslationError(`${param}.tool_call_id`, `${param}.tool_call_id must be a string`);
        const content = typeof message.content === 'string' ? message.content : compact(textContent(message.content, `${param}.content`));
        add('user', [{ type: 'tool_result', tool_use_id: message.tool_call_id, content }]);
        return;
      }
      case 'function':
        throw new TranslationError(`${param}.role`, `${param}: the legacy 'function' role is not supported when routed to an Anthropic model; use 'tool'`);
      default:
        throw new TranslationError(`${param}.role`, `${param}: unknown role ${JSON.stringify(message.role)}`);
    }
  });
  return { system, turns };
}

function translateTools(tools: unknown, dropped: Set<string>): Json[] {
  if (!Array.isArray(tools)) throw new TranslationError('tools', 'tools must be an array');
  return tools.map((tool: unknown, i) => {
    const fn = isObject(tool) ? tool.function : undefined;
    if (!isObject(tool) || tool.type !== 'function' || !isObject(fn) || typeof fn.name !== 'string') {
      throw new TranslationError(`tools[${i}]`, `tools[${i}]: only function tools are supported when routed to an Anthropic model`);
    }
    if (fn.strict === true) dropped.add('tools[].function.strict');
    return anthropicTool(fn as Json & { name: string });
  });
}

function translateToolChoice(choice: unknown): Json {
  const fn = isObject(choice) && choice.type === 'function' && isObject(choice.function) ? choice.function : undefined;
  return anthropicChoice(choice, typeof fn?.name === 'string' ? fn.name : undefined);
}

function translateRequest(body: Json, upstreamModel: string): TranslatedRequest {
  for (const key of Object.keys(body)) {
    const refused = REFUSED.get(key);
    if (refused !== undefined && given(body[key])) throw new TranslationError(key, refused);
    // Refused rather than forwarded or ignored: a parameter this translator does not know could
    // mean anything, and Anthropic would reject it anyway.
    if (!HANDLED.has(key) && !DROPPED.has(key) && refused === undefined) {
      throw new TranslationError(key, `unknown parameter '${key}' (not supported when routed to an Anthropic model)`);
    }
  }
  const dropped = new Set<string>();
  for (const key of Object.keys(body)) if (DROPPED.has(key) && given(body[key])) dropped.add(key);

  if (given(body.n)) {
    if (body.n !== 1) throw new TranslationError('n', 'n: only one choice (n = 1) is supported when routed to an Anthropic model');
    dropped.add('n');
  }
  if (given(body.logprobs)) {
    if (body.logprobs !== false) throw new TranslationError('logprobs', 'logprobs are not supported when routed to an Anthropic model');
    dropped.add('logprobs');
  }
  if (given(body.modalities)) {
    if (!Array.isArray(body.modalities) || body.modalities.some((m) => m !== 'text')) {
      throw new TranslationError('modalities', "modalities: only ['text'] is supported when routed to an Anthropic model");
    }
    dropped.add('modalities');
  }
  if (isObject(body.response_format)) {
    const type = body.response_format.type;
    if (type === 'json_schema') throw new TranslationError('response_format', 'response_format json_schema is not supported when routed to an Anthropic model');
    // JSON mode only enforces the format: OpenAI requires the prompt itself to ask for JSON, so
    // the model is still asked for it. A schema, by contrast, would be silently unenforced.
    if (type === 'json_object') dropped.add('response_format');
    else if (type !== 'text') throw new TranslationError('response_format', `response_format: unknown type ${JSON.stringify(type)}`);
  } else if (given(body.response_format)) throw new TranslationError('response_format', 'response_format must be an object');

  const { system, turns } = translateMessages(body.messages, dropped);
  const out: Json = { model: upstreamModel, max_tokens: body.max_completion_tokens ?? body.max_tokens ?? DEFAULT_MAX_TOKENS };
  if (system.length > 0) out.system = compact(system);
  out.messages = turns.map((turn) => ({ role: turn.role, content: compact(turn.content) }));

  if (given(body.temperature)) out.temperature = anthropicTemperature(body.temperature);
  if (given(body.top_p)) out.top_p = body.top_p;
  if (given(body.stop)) {
    const stop = typeof body.stop === 'string' ? [body.stop] : body.stop;
    if (!Array.isArray(stop) || stop.some((s) => typeof s !== 'string')) throw new TranslationError('stop', 'stop must be a string or an array of strings');
    if (stop.length > 0) out.stop_sequences = stop;
  }
  if (body.stream === true) out.stream = true;
  // include_usage is honoured by the stream translator (chatStreamTranslator); only obfuscation is lost.
  if (isObject(body.stream_options) && given(body.stream_options.include_obfuscation) && body.stream_options.include_obfuscation !== false) {
    dropped.add('stream_options.include_obfuscation');
  }

  const tools = given(body.tools) ? translateTools(body.tools, dropped) : [];
  if (tools.length > 0) out.tools = tools;
  const toolChoice = anthropicToolChoice(tools, given(body.tool_choice) ? translateToolChoice(body.tool_choice) : undefined, body.parallel_tool_calls);
  if (toolChoice !== undefined) out.tool_choice = toolChoice;

  // `safety_identifier` is the successor of `user`; Anthropic has one such field, so `user` wins when both are sent.
  const userId = given(body.user) ? body.user : body.safety_identifier;
  if (given(userId)) out.metadata = { user_id: userId };
  if (given(body.user) && given(body.safety_identifier)) dropped.add('safety_identifier');

  return { body: out, dropped: [...dropped] };
}

/** Anthropic's stop_reason as OpenAI's finish_reason. */
function finishReason(stopReason: unknown): string {
  switch (stopReason) {
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'tool_use':
      return 'tool_calls';
    case 'refusal':
      return 'content_filter';
    default:
      // end_turn, stop_sequence, and pause_turn (the turn paused; the client may continue it).
      return 'stop';
  }
}

interface InputTokens {
  input: number;
  cacheRead: number;
  cacheCreation: number;
}

function inputTokens(usage: unknown): InputTokens {
  const u = isObject(usage) ? usage : {};
  return { input: count(u.input_tokens), cacheRead: count(u.cache_read_input_tokens), cacheCreation: count(u.cache_creation_input_tokens) };
}

/**
 * Anthropic counts cached input (read or written) apart from `input_tokens`; OpenAI's prompt_tokens
 * includes both, and its details name them: cached_tokens (read) and cache_write_tokens (written).
 * Without the second a client takes the tokens written to the cache for uncached input.
 */
function chatUsage(input: InputTokens, output: number): Json {
  const prompt = input.input + input.cacheRead + input.cacheCreation;
  return {
    prompt_tokens: prompt,
    completion_tokens: output,
    total_tokens: prompt + output,
    prompt_tokens_details: { cached_tokens: input.cacheRead, cache_write_tokens: input.cacheCreation },
  };
}

function translateResponse(body: Json): Json {
  const blocks = Array.isArray(body.content) ? (body.content as unknown[]) : [];
  const texts: string[] = [];
  const toolCalls: Json[] = [];
  // Thinking (and server tool) blocks have no place in a chat completion: left out.
  for (const block of blocks) {
    if (!isObject(block)) continue;
    if (block.type === 'text' && typeof block.text === 'string') texts.push(block.text);
    else if (block.type === 'tool_use') {
      toolCalls.push({ id: block.id, type: 'function', function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) } });
    }
  }
  const message: Json = { role: 'assistant', content: texts.length > 0 ? texts.join('') : null };
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  message.refusal = null;
  const usage = isObject(body.usage) ? body.usage : {};
  return {
    id: body.id,
    object: 'chat.completion',
    created: nowSeconds(),
    model: body.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason(body.stop_reason) }],
    usage: chatUsage(inputTokens(usage), count(usage.output_tokens)),
  };
}

/** One streamed answer: Anthropic's events in, `chat.completion.chunk` events out, as they complete. */
class ChatStream implements StreamTranslator {
  readonly #parser = new SseParser();
  /** A character split between two chunks is held back until its last byte arrives. */
  readonly #decoder = new StringDecoder('utf8');
  readonly #includeUsage: boolean;
  readonly #created = nowSeconds();
  #id = '';
  #model = '';
  /** Anthropic's content block index → the OpenAI tool call index (tool blocks counted from 0). */
  readonly #toolIndex = new Map<number, number>();
  #input: InputTokens = { input: 0, cacheRead: 0, cacheCreation: 0 };
  #output = 0;
  /** After an upstream `error` event the caller's stream is over: nothing more, not even [DONE]. */
  #failed = false;
  /** message_stop was seen: the answer is complete. */
  #stopped = false;

  constructor(includeUsage: boolean) {
    this.#includeUsage = includeUsage;
  }

  push(chunk: Buffer): string {
    if (this.#failed) return '';
    return this.#translate(this.#parser.push(this.#decoder.write(chunk)));
  }

  end(): string {
    if (this.#failed) return '';
    const tail = this.#decoder.end();
    let rest = tail === '' ? '' : this.#translate(this.#parser.push(tail));
    if (!this.#failed) rest += this.#translate(this.#parser.finish());
    // An answer that ended before message_stop was cut (a tool call's arguments may be half their
    // JSON): never a [DONE] that would make the half answer look whole; the caller says so.
    if (this.#failed || !this.#stopped) return rest;
    return rest + formatSse('[DONE]');
  }

  outcome(): StreamOutcome {
    return this.#failed ? 'error' : this.#stopped ? 'complete' : 'cut';
  }

  #translate(events: ReturnType<SseParser['push']>): string {
    let out = '';
    for (const event of events) {
      if (this.#failed) break;
      let data: unknown;
      try {
        data = JSON.parse(event.data);
      } catch {
        data = undefined;
      }
      const type = isObject(data) && typeof data.type === 'string' ? data.type : event.event;
      out += this.#event(type, isObject(data) ? data : {});
    }
    return out;
  }

  #chunk(delta: Json, finish: string | null = null): string {
    const chunk: Json = {
      id: this.#id,
      object: 'chat.completion.chunk',
      created: this.#created,
      model: this.#model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    };
    // As OpenAI does: with include_usage every chunk carries `usage: null` but the last.
    if (this.#includeUsage) chunk.usage = null;
    return formatSse(JSON.stringify(chunk));
  }

  #event(type: string | undefined, data: Json): string {
    switch (type) {
      case 'message_start': {
        const message = isObject(data.message) ? data.message : {};
        if (typeof message.id === 'string') this.#id = message.id;
        if (typeof message.model === 'string') this.#model = message.model;
        this.#input = inputTokens(message.usage);
        return this.#chunk({ role: 'assistant', content: '' });
      }
      case 'content_block_start': {
        const block = isObject(data.content_block) ? data.content_block : {};
        if (block.type === 'text' && typeof block.text === 'string' && block.text !== '') return this.#chunk({ content: block.text });
        if (block.type !== 'tool_use') return '';
        const index = this.#toolIndex.size;
        this.#toolIndex.set(count(data.index), index);
        return this.#chunk({ tool_calls: [{ index, id: block.id, type: 'function', function: { name: block.name, arguments: '' } }] });
      }
      case 'content_block_delta': {
        const delta = isObject(data.delta) ? data.delta : {};
        if (delta.type === 'text_delta' && typeof delta.text === 'string') return this.#chunk({ content: delta.text });
        if (delta.type === 'input_json_delta' && typeof delta.partial_json === 'string' && delta.partial_json !== '') {
          const index = this.#toolIndex.get(count(data.index));
          if (index === undefined) return '';
          return this.#chunk({ tool_calls: [{ index, function: { arguments: delta.partial_json } }] });
        }
        // thinking_delta, signature_delta, citations_delta: no place in a chat completion.
        return '';
      }
      case 'message_delta': {
        const usage = isObject(data.usage) ? data.usage : {};
        this.#output = count(usage.output_tokens);
        // message_delta's counts are cumulative and, when present, final (server tools can add input).
        if (typeof usage.input_tokens === 'number') this.#input.input = usage.input_tokens;
        if (typeof usage.cache_read_input_tokens === 'number') this.#input.cacheRead = usage.cache_read_input_tokens;
        if (typeof usage.cache_creation_input_tokens === 'number') this.#input.cacheCreation = usage.cache_creation_input_tokens;
        const delta = isObject(data.delta) ? data.delta : {};
        return this.#chunk({}, finishReason(delta.stop_reason));
      }
      case 'message_stop': {
        this.#stopped = true;
        if (!this.#includeUsage) return '';
        const chunk = { id: this.#id, object: 'chat.completion.chunk', created: this.#created, model: this.#model, choices: [], usage: chatUsage(this.#input, this.#output) };
        return formatSse(JSON.stringify(chunk));
      }
      case 'error': {
        this.#failed = true;
        const error = isObject(data.error) ? data.error : {};
        // 529 is how Anthropic answers "overloaded" outside a stream; the error's type keeps the name.
        const status = error.type === 'overloaded_error' ? 529 : 500;
        return formatSse(JSON.stringify(toOpenAIError(status, data)));
      }
      default:
        // ping, content_block_stop, and events added after this was written.
        return '';
    }
  }
}

/** A stream translator; `includeUsage` is the request's `stream_options.include_usage`. */
export function chatStreamTranslator(includeUsage: boolean): StreamTranslator {
  return new ChatStream(includeUsage);
}

export const chatToMessages: Translator = {
  from: 'chat',
  to: 'messages',
  request: translateRequest,
  response: translateResponse,
  error: (status, body) => toOpenAIError(status, body),
  // The shared translator cannot see the request: no usage chunk unless the gateway asks for one
  // through chatStreamTranslator(true).
  stream: () => new ChatStream(false),
};
