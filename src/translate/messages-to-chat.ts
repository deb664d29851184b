// Anthropic Messages in front, OpenAI Chat Completions behind: a `POST /v1/messages` body rewritten
// for `POST /v1/chat/completions`, and the provider's answer (JSON, SSE stream or error) rewritten
// as an Anthropic message. A parameter the chat API cannot honour is refused with a 400 naming it
// when ignoring it would change what the client gets, and dropped (and named) when it is only a hint.
import { randomUUID } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import { TranslationError, type Json, type StreamOutcome, type StreamTranslator, type TranslatedRequest, type Translator } from './types.ts';
import { SseParser, formatSse, type SseEvent } from './sse.ts';
import { toAnthropicError } from './errors.ts';
import { count, given, isObject } from './json.ts';

/** A client's value in an error message: never throws, whatever the value (an object whose toString is not a function). */
function describe(value: unknown): string {
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value) ?? typeof value;
  } catch {
    return typeof value;
  }
}

/** Accepted and not sent: no chat equivalent, and leaving them out only loses a hint. */
const DROPPED = new Set(['top_k', 'service_tier', 'container', 'cache_control']);

/** The top-level keys translated below (`thinking` and `mcp_servers` are judged by value); anything else is refused as unknown. */
const HANDLED = new Set([
  'model',
  'messages',
  'max_tokens',
  'system',
  'stop_sequences',
  'temperature',
  'top_p',
  'stream',
  'metadata',
  'tools',
  'tool_choice',
]);

/**
 * Keys of a client tool that only tune how Anthropic serves it (loading, streaming, examples, who
 * may call it); without them the tool is still offered and called the same way.
 */
const TOOL_HINTS = new Set(['cache_control', 'defer_loading', 'eager_input_streaming', 'input_examples', 'allowed_callers']);

/** The chat API's finish reasons as Anthropic stop reasons. */
const STOP_REASONS: Record<string, string> = {
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
  function_call: 'tool_use',
  content_filter: 'refusal',
};

function unsupported(param: string, what: string): TranslationError {
  return new TranslationError(param, `${what} is not supported when routed to an OpenAI model`);
}

/** Collects the names of what was dropped, each once, in the order met. */
class Dropped {
  readonly names: string[] = [];
  add(name: string): void {
    if (!this.names.includes(name)) this.names.push(name);
  }
  /** Prompt caching is Anthropic's own; a marker anywhere is dropped and named once. */
  cache(block: Json): void {
    if (given(block.cache_control)) this.add('cache_control');
  }
}

/** `system`: a string, or text blocks joined by newlines (the chat API has one system string). */
function systemText(system: unknown, dropped: Dropped): string {
  if (typeof system === 'string') return system;
  if (!Array.isArray(system)) throw new TranslationError('system', "'system' must be a string or an array of text blocks");
  return system
    .map((block, i) => {
      if (!isObject(block) || block.type !== 'text' || typeof block.text !== 'string') {
        throw new TranslationError(`system[${i}]`, 'system blocks must be text blocks');
      }
      dropped.cache(block);
      return block.text;
    })
    .join('\n');
}

function imagePart(block: Json, param: string): Json {
  const source = isObject(block.source) ? block.source : {};
  if (source.type === 'base64' && typeof source.media_type === 'string' && typeof source.data === 'string') {
    return { type: 'image_url', image_url: { url: `data:${source.media_type};base64,${source.data}` } };
  }
  if (source.type === 'url' && typeof source.url === 'string') return { type: 'image_url', image_url: { url: source.url } };
  throw unsupported(`${param}.source`, `an image source of type '${describe(source.type)}'`);
}

/** A tool result's content as the tool message's string; only text has a place there. */
function toolResultText(block: Json, param: string, dropped: Dropped): string {
  const content = block.content;
  if (!given(content)) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw new TranslationError(`${param}.content`, 'tool_result content must be a string or an array of blocks');
  return content
    .map((inner, k) => {
      if (!isObject(inner) || inner.type !== 'text' || typeof inner.text !== 'string') {
        const type = isObject(inner) ? describe(inner.type) : typeof inner;
        throw unsupported(`${param}.content[${k}]`, `a '${type}' block in a tool_result`);
      }
      dropped.cache(inner);
      return inner.text;
    })
    .join('\n');
}

/** Parts as chat content: one text part is sent as a plain string, which every server reads. */
function partsContent(parts: Json[]): string | Json[] {
  const only = parts[0];
  if (parts.length === 1 && only !== undefined && only.type === 'text') return only.text as string;
  return parts;
}

/** One user message: its tool results first (a tool message must follow the assistant's call), then the rest. */
function userMessages(content: unknown, param: string, dropped: Dropped): Json[] {
  if (typeof content === 'string') return [{ role: 'user', content }];
  if (!Array.isArray(content)) throw new TranslationError(`${param}.content`, 'content must be a string or an array of blocks');
  const tools: Json[] = [];
  const parts: Json[] = [];
  content.forEach((block, j) => {
    const at = `${param}.content[${j}]`;
    if (!isObject(block)) throw new TranslationError(at, 'a content block must be an object');
    dropped.cache(block);
    if (block.type === 'text' && typeof block.text === 'string') parts.push({ type: 'text', text: block.text });
    else if (block.type === 'image') parts.push(imagePart(block, at));
    else if (block.type === 'tool_result') {
      if (typeof block.tool_use_id !== 'string') throw new TranslationError(`${at}.tool_use_id`, 'tool_result needs a tool_use_id');
      // is_error has no field in a tool message; the content itself says what went wrong.
      tools.push({ role: 'tool', tool_call_id: block.tool_use_id, content: toolResultText(block, at, dropped) });
    } else throw unsupported(at, `a '${describe(block.type)}' content block`);
  });
  if (parts.length === 0 && tools.length > 0) return tools;
  return [...tools, { role: 'user', content: parts.length === 0 ? '' : partsContent(parts) }];
}

function assistantMessage(content: unknown, param: string, dropped: Dropped): Json[] {
  if (typeof content === 'string') return [{ role: 'assistant', content }];
  if (!Array.isArray(content)) throw new TranslationError(`${param}.content`, 'content must be a string or an array of blocks');
  const parts: Json[] = [];
  const calls: Json[] = [];
  content.forEach((block, j) => {
    const at = `${param}.content[${j}]`;
    if (!isObject(block)) throw new TranslationError(at, 'a content block must be an object');
    dropped.cache(block);
    if (block.type === 'text' && typeof block.text === 'string') parts.push({ type: 'text', text: block.text });
    else if (block.type === 'tool_use') {
      if (typeof block.id !== 'string' || typeof block.name !== 'string') throw new TranslationError(at, 'tool_use needs an id and a name');
      calls.push({ id: block.id, type: 'function', function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) } });
    } else if (block.type === 'thinking' || block.type === 'redacted_thinking') {
      // Another model's reasoning, signed for Anthropic only: the chat API has no place for it,
      // and the answer it led to is in the text and tool calls kept.
    } else throw unsupported(at, `a '${describe(block.type)}' content block in an assistant message`);
  });
  // A turn that was only thinking leaves nothing to send.
  if (parts.length === 0 && calls.length === 0) return [];
  const message: Json = { role: 'assistant', content: parts.length === 0 ? null : partsContent(parts) };
  if (calls.length > 0) message.tool_calls = calls;
  return [message];
}

function chatMessages(messages: unknown, dropped: Dropped): Json[] {
  if (!Array.isArray(messages)) throw new TranslationError('messages', "'messages' must be an array");
  return messages.flatMap((message, i) => {
    const param = `messages[${i}]`;
    if (!isObject(message)) throw new TranslationError(param, 'a message must be an object');
    if (message.role === 'user') return userMessages(message.content, param, dropped);
    if (message.role === 'assistant') return assistantMessage(message.content, param, dropped);
    throw new TranslationError(`${param}.role`, `role must be 'user' or 'assistant', not '${describe(message.role)}'`);
  });
}

function chatTools(tools: unknown, dropped: Dropped): Json[] {
  if (!Array.isArray(tools)) throw new TranslationError('tools', "'tools' must be an array");
  return tools.map((tool, i) => {
    const param = `tools[${i}]`;
    if (!isObject(tool)) throw new TranslationError(param, 'a tool must be an object');
    // Server tools (web search, bash, code execution, …) run inside Anthropic's API; a chat
    // provider has nothing to run them with.
    if (given(tool.type) && tool.type !== 'custom') throw unsupported(param, `the server tool '${describe(tool.type)}'`);
    if (typeof tool.name !== 'string') throw new TranslationError(`${param}.name`, 'a tool needs a name');
    const fn: Json = { name: tool.name };
    if (typeof tool.description === 'string') fn.description = tool.description;
    fn.parameters = isObject(tool.input_schema) ? tool.input_schema : { type: 'object', properties: {} };
    if (typeof tool.strict === 'boolean') fn.strict = tool.strict;
    for (const key of Object.keys(tool)) {
      if (TOOL_HINTS.has(key) && given(tool[key])) dropped.add(key);
    }
    return { type: 'function', function: fn };
  });
}

/** `tool_choice` as the chat API's, and whether parallel calls were turned off. */
function chatToolChoice(choice: unknown): { choice: unknown; parallel: boolean | undefined } {
  if (!isObject(choice)) throw new TranslationError('tool_choice', "'tool_choice' must be an object");
  const parallel = choice.disable_parallel_tool_use === true ? false : undefined;
  if (choice.type === 'auto') return { choice: 'auto', parallel };
  if (choice.type === 'any') return { choice: 'required', parallel };
  if (choice.type === 'none') return { choice: 'none', parallel };
  if (choice.type === 'tool') {
    if (typeof choice.name !== 'string') throw new TranslationError('tool_choice.name', "tool_choice 'tool' needs a name");
    return { choice: { type: 'function', function: { name: choice.name } }, parallel };
  }
  throw new TranslationError('tool_choice.type', `unknown tool_choice type '${describe(choice.type)}'`);
}

function thinking(config: unknown, dropped: Dropped): void {
  const type = isObject(config) ? config.type : undefined;
  // Adaptive thinking lets the model decide whether to think; a model that does not is one of
  // the answers it allows. Asking for thinking outright is not something to ignore.
  if (type === 'disabled' || type === 'adaptive') dropped.add('thinking');
  else throw unsupported('thinking', 'extended thinking');
}

function chatRequest(body: Json, upstreamModel: string): TranslatedRequest {
  const dropped = new Dropped();
  // In the body's order, so `dropped` names them as the client wrote them.
  for (const key of Object.keys(body)) {
    if (!given(body[key])) continue;
    if (DROPPED.has(key)) dropped.add(key);
    else if (key === 'thinking') thinking(body.thinking, dropped);
    else if (key === 'mcp_servers') {
      if (!Array.isArray(body.mcp_servers) || body.mcp_servers.length > 0) throw unsupported('mcp_servers', 'MCP servers');
      dropped.add('mcp_servers');
    } else if (!HANDLED.has(key)) throw new TranslationError(key, `unknown parameter '${key}'`);
  }

  const messages: Json[] = [];
  if (given(body.system)) {
    const system = systemText(body.system, dropped);
    if (system !== '') messages.push({ role: 'system', content: system });
  }
  messages.push(...chatMessages(body.messages, dropped));

  const out: Json = { model: upstreamModel, messages };
  // `max_tokens`, not `max_completion_tokens`: every OpenAI-compatible server reads it.
  if (given(body.max_tokens)) out.max_tokens = body.max_tokens;
  if (given(body.temperature)) out.temperature = body.temperature;
  if (given(body.top_p)) out.top_p = body.top_p;
  if (given(body.stop_sequences)) out.stop = body.stop_sequences;

  const tools = given(body.tools) ? chatTools(body.tools, dropped) : [];
  // The chat API refuses an empty `tools` and a `tool_choice` or `parallel_tool_calls` without
  // tools; with no tool offered they would change nothing anyway.
  if (tools.length > 0) out.tools = tools;
  if (given(body.tool_choice)) {
    const { choice, parallel } = chatToolChoice(body.tool_choice);
    if (tools.length > 0) {
      out.tool_choice = choice;
      if (parallel !== undefined) out.parallel_tool_calls = parallel;
    }
  }

  if (given(body.metadata)) {
    if (!isObject(body.metadata)) throw new TranslationError('metadata', "'metadata' must be an object");
    for (const key of Object.keys(body.metadata)) {
      if (key !== 'user_id') throw new TranslationError(`metadata.${key}`, `unknown parameter 'metadata.${key}'`);
    }
    if (typeof body.metadata.user_id === 'string') out.user = body.metadata.user_id;
  }

  if (given(body.stream)) {
    out.stream = body.stream;
    // Without it the chat stream carries no token counts, and Anthropic's always does.
    if (body.stream === true) out.stream_options = { include_usage: true };
  }
  return { body: out, dropped: dropped.names };
}

function messageId(id: unknown): string {
  const raw = typeof id === 'string' && id !== '' ? id : randomUUID().replaceAll('-', '');
  return `msg_${raw.startsWith('chatcmpl-') ? raw.slice('chatcmpl-'.length) : raw}`;
}

function stopReason(finish: unknown, calledTools: boolean): string {
  // A finish reason with no Anthropic name (or none at all) ended the turn as far as the client can tell.
  const reason = (typeof finish === 'string' && Object.hasOwn(STOP_REASONS, finish) ? STOP_REASONS[finish] : undefined) ?? 'end_turn';
  // Some OpenAI-compatible servers finish a turn that called tools with `stop`. Anthropic never
  // ends a turn with tool_use blocks as end_turn, and clients loop on `stop_reason === 'tool_use'`.
  return reason === 'end_turn' && calledTools ? 'tool_use' : reason;
}

/** Chat usage as Anthropic's: its `input_tokens` leaves out the tokens read from the cache. */
function anthropicUsage(usage: unknown): { input_tokens: number; cache_creation_input_tokens: number; cache_read_input_tokens: number; output_tokens: number } {
  const u = isObject(usage) ? usage : {};
  const cached = count(isObject(u.prompt_tokens_details) ? u.prompt_tokens_details.cached_tokens : undefined);
  return {
    input_tokens: Math.max(0, count(u.prompt_tokens) - cached),
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached,
    output_tokens: count(u.completion_tokens),
  };
}

/** A tool call's arguments as the tool_use input. */
function toolInput(args: unknown): Json {
  // Some servers send the arguments already parsed.
  if (isObject(args)) return args;
  if (typeof args !== 'string' || args.trim() === '') return {};
  try {
    const input: unknown = JSON.parse(args);
    // A tool_use input is always an object; a bare JSON value (`[1]`, `"x"`) has no place there.
    return isObject(input) ? input : {};
  } catch {
    // Models sometimes emit arguments that are not JSON (cut off at max_tokens, say). The block
    // must still carry an object, and the stop reason tells the client the turn was cut short.
    return {};
  }
}

/**
 * Message or delta content as text: a string, or (from servers that answer in parts) the text of
 * its text parts; anything else (reasoning parts, say) has no place in a text block.
 */
function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((part) => (isObject(part) && part.type === 'text' && typeof part.text === 'string' ? part.text : '')).join('');
}

function chatResponseToMessage(body: Json): Json {
  const choices = Array.isArray(body.choices) ? body.choices : [];
  const choice: Json = choices.find((c): c is Json => isObject(c) && (c.index ?? 0) === 0) ?? {};
  const message = isObject(choice.message) ? choice.message : {};
  const content: Json[] = [];
  const text = contentText(message.content);
  if (text !== '') content.push({ type: 'text', text });
  // A refusal is what the model said instead of an answer: the client reads it as text.
  if (typeof message.refusal === 'string' && message.refusal !== '') content.push({ type: 'text', text: message.refusal });
  for (const call of Array.isArray(message.tool_calls) ? message.tool_calls : []) {
    if (!isObject(call) || !isObject(call.function)) continue;
    content.push({
      type: 'tool_use',
      id: typeof call.id === 'string' ? call.id : `toolu_${randomUUID().replaceAll('-', '')}`,
      name: typeof call.function.name === 'string' ? call.function.name : '',
      input: toolInput(call.function.arguments),
    });
  }
  return {
    id: messageId(body.id),
    type: 'message',
    role: 'assistant',
    model: typeof body.model === 'string' ? body.model : '',
    content,
    stop_reason: stopReason(choice.finish_reason, content.some((block) => block.type === 'tool_use')),
    stop_sequence: null,
    // The SDK's Message has it (null when there is nothing to say); its stream accumulator copies
    // it from message_delta, so both shapes carry it.
    stop_details: null,
    usage: anthropicUsage(body.usage),
  };
}

/** One streamed answer: chat completion chunks in, Anthropic's named events out. */
class ChatStreamToMessages implements StreamTranslator {
  readonly #parser = new SseParser();
  // Bytes are decoded here, not in the parser, so a character split across chunks stays whole.
  readonly #decoder = new StringDecoder('utf8');
  #id = '';
  #started = false;
  /** message_stop or an error was sent: nothing follows either. */
  #closed = false;
  /** How the upstream stream ended, once it has: [DONE] came (complete), an error (error). */
  #outcome: StreamOutcome = 'cut';
  /** message_delta (the stop reason and the usage) was sent. */
  #delta = false;
  #nextIndex = 0;
  /** The block open now: its index, and the chat tool index when it is a tool call. */
  #open: { index: number; tool: number | undefined } | undefined = undefined;
  /** Chat tool-call index → Anthropic block index. */
  readonly #tools = new Map<number, number>();
  /** Tool-call id → chat tool-call index, for servers that repeat the id and leave out `index`. */
  readonly #toolIds = new Map<string, number>();
  #finish: unknown = undefined;
  #finished = false;
  #usage: Json | undefined = undefined;

  push(chunk: Buffer): string {
    if (this.#closed) return '';
    return this.#events(this.#parser.push(this.#decoder.write(chunk)));
  }

  end(): string {
    if (this.#closed) return '';
    let out = this.#events(this.#parser.push(this.#decoder.end()));
    out += this.#events(this.#parser.finish());
    // Without `data: [DONE]` the stream was cut: no message_stop, the caller ends it with an error.
    return out;
  }

  outcome(): StreamOutcome {
    return this.#outcome;
  }

  #events(events: SseEvent[]): string {
    let out = '';
    for (const event of events) {
      if (this.#closed) break;
      out += this.#event(event);
    }
    return out;
  }

  #event(event: SseEvent): string {
    const data = event.data.trim();
    if (data === '[DONE]') return this.#close();
    let json: unknown;
    try {
      json = JSON.parse(data);
    } catch {
      json = undefined;
    }
    if (event.event === 'error' || (isObject(json) && given(json.error))) {
      this.#closed = true;
      this.#outcome = 'error';
      return this.#send('error', toAnthropicError(500, isObject(json) ? json : { error: data }));
    }
    // Anything else that is not a chunk (a keep-alive, say) says nothing to the client.
    if (!isObject(json)) return '';
    return this.#chunk(json);
  }

  #chunk(chunk: Json): string {
    let out = '';
    if (isObject(chunk.usage)) this.#usage = chunk.usage;
    const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
    // Azure opens its streams with a chunk that has no choices, no id and no model (only its
    // prompt filter results): the message starts with the first chunk that says something.
    if (!this.#started && choices.length === 0 && !isObject(chunk.usage)) return '';
    if (!this.#started) out += this.#start(chunk);
    const choice = choices.find((c): c is Json => isObject(c) && (c.index ?? 0) === 0);
    if (choice !== undefined && !this.#finished) {
      const delta = isObject(choice.delta) ? choice.delta : {};
      const text = contentText(delta.content);
      if (text !== '') out += this.#text(text);
      if (typeof delta.refusal === 'string' && delta.refusal !== '') out += this.#text(delta.refusal);
      if (Array.isArray(delta.tool_calls)) {
        for (const call of delta.tool_calls) if (isObject(call)) out += this.#toolCall(call);
      }
      if (given(choice.finish_reason)) {
        this.#finish = choice.finish_reason;
        this.#finished = true;
        out += this.#stopBlock();
      }
    }
    // The counts come in their own chunk after the finish reason (or with it): message_delta goes
    // out as soon as both are known; message_stop waits for [DONE], the end of the upstream's answer.
    if (this.#finished && this.#usage !== undefined) out += this.#messageDelta();
    return out;
  }

  #start(chunk: Json): string {
    this.#started = true;
    this.#id = messageId(chunk.id);
    const usage = anthropicUsage(this.#usage);
    const message = {
      id: this.#id,
      type: 'message',
      role: 'assistant',
      model: typeof chunk.model === 'string' ? chunk.model : '',
      content: [],
      stop_reason: null,
      stop_sequence: null,
      stop_details: null,
      usage: { ...usage, output_tokens: 0 },
    };
    return this.#send('message_start', { type: 'message_start', message });
  }

  #text(text: string): string {
    let out = '';
    if (this.#open === undefined || this.#open.tool !== undefined) {
      out += this.#stopBlock();
      const index = this.#nextIndex++;
      this.#open = { index, tool: undefined };
      out += this.#send('content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
    }
    const index = this.#open.index;
    return out + this.#send('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text } });
  }

  #toolCall(call: Json): string {
    let out = '';
    // Servers that send each call whole in one chunk may leave out `index`; a new id is then a new
    // call, and an id already seen (some servers repeat it on every piece) is that call.
    const known = typeof call.id === 'string' ? this.#toolIds.get(call.id) : undefined;
    const key =
      typeof call.index === 'number'
        ? call.index
        : known !== undefined
          ? known
          : typeof call.id === 'string' || this.#open?.tool === undefined
            ? this.#tools.size
            : this.#open.tool;
    const fn = isObject(call.function) ? call.function : {};
    let index = this.#tools.get(key);
    if (index === undefined) {
      out += this.#stopBlock();
      index = this.#nextIndex++;
      this.#tools.set(key, index);
      this.#open = { index, tool: key };
      const id = typeof call.id === 'string' && call.id !== '' ? call.id : `toolu_${this.#id.slice('msg_'.length)}_${key}`;
      if (typeof call.id === 'string' && call.id !== '') this.#toolIds.set(call.id, key);
      const name = typeof fn.name === 'string' ? fn.name : '';
      out += this.#send('content_block_start', { type: 'content_block_start', index, content_block: { type: 'tool_use', id, name, input: {} } });
    }
    // A fragment of a call whose block was already closed (the chat API does not interleave calls,
    // but nothing forbids it) still goes to that block: Anthropic's SDKs accumulate by index, and
    // dropping it would corrupt the call's input.
    if (typeof fn.arguments === 'string' && fn.arguments !== '') {
      out += this.#send('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: fn.arguments } });
    }
    return out;
  }

  #stopBlock(): string {
    if (this.#open === undefined) return '';
    const index = this.#open.index;
    this.#open = undefined;
    return this.#send('content_block_stop', { type: 'content_block_stop', index });
  }

  /** [DONE]: the upstream's answer is over. */
  #close(): string {
    if (this.#closed) return '';
    this.#closed = true;
    if (!this.#started) {
      // No chunk at all: there is no message to end, and an empty one would look like an answer.
      this.#outcome = 'error';
      return this.#send('error', toAnthropicError(502, { error: { message: 'the provider ended its stream without an answer' } }));
    }
    this.#outcome = 'complete';
    return this.#messageDelta() + this.#send('message_stop', { type: 'message_stop' });
  }

  /** The last block closed, then the stop reason and the usage (once). */
  #messageDelta(): string {
    if (this.#delta) return '';
    this.#delta = true;
    const out = this.#stopBlock();
    const usage = this.#usage === undefined ? { output_tokens: 0 } : anthropicUsage(this.#usage);
    return (
      out +
      this.#send('message_delta', {
        type: 'message_delta',
        delta: { stop_reason: stopReason(this.#finish, this.#tools.size > 0), stop_sequence: null, stop_details: null },
        usage,
      })
    );
  }

  #send(event: string, data: Json): string {
    return formatSse(JSON.stringify(data), event);
  }
}

export const messagesToChat: Translator = {
  from: 'messages',
  to: 'chat',
  request: chatRequest,
  response: chatResponseToMessage,
  error: (status, body) => toAnthropicError(status, body),
  stream: () => new ChatStreamToMessages(),
};
