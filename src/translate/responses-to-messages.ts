// OpenAI Responses in front, Anthropic Messages behind: a `POST /v1/responses` body rewritten for
// `POST /v1/messages`, and Anthropic's answer (JSON, SSE stream or error) rewritten as a Response
// and its event stream. Text, images and function tools translate; Anthropic keeps no state between
// requests, so what needs OpenAI's stored responses (previous_response_id, conversation, background,
// stored prompts, item references) is refused with a 400 naming the parameter, as is whatever would
// change the answer if ignored. Hints without an equivalent are dropped and named.
import { randomUUID } from 'node:crypto';
import { TranslationError, type Json, type StreamOutcome, type StreamTranslator, type TranslatedRequest, type Translator } from './types.ts';
import { SseParser, formatSse, type SseEvent } from './sse.ts';
import { toOpenAIError } from './errors.ts';
import { count, given, isObject, nowSeconds } from './json.ts';
import { anthropicChoice, anthropicTemperature, anthropicTool, anthropicToolChoice, compact, DEFAULT_MAX_TOKENS, IMAGE_TYPES, textBlock, withCache, type Block } from './anthropic-blocks.ts';

/** Accepted and not sent: no Anthropic equivalent, and leaving them out only loses a hint or a record. */
const DROPPED = new Set([
  'reasoning',
  'include',
  'metadata',
  'truncation',
  'service_tier',
  'store',
  'prompt_cache_key',
  'prompt_cache_retention',
  'prompt_cache_options',
  'safety_identifier',
  // A limit on calls to OpenAI's built-in tools, which are refused here: nothing left to limit.
  'max_tool_calls',
]);

/**
 * Values of dropped parameters that ask for what Anthropic does anyway: not reported. Nothing is
 * stored upstream (store: false) and a too long input is refused, not cut (truncation: disabled).
 */
const HONOURED: Record<string, unknown> = { store: false, truncation: 'disabled' };

const STATELESS = 'Anthropic keeps no conversation state: send the whole conversation in input';

/** OpenAI's stored responses, which a background response is polled from. */
const UNSTORED = 'Anthropic stores no responses to poll: send the request without background';

/** Refused when given: leaving them out would answer something other than what was asked. */
const REFUSED: Record<string, string> = {
  previous_response_id: `previous_response_id is not supported when routed to an Anthropic model (${STATELESS})`,
  conversation: `conversation is not supported when routed to an Anthropic model (${STATELESS})`,
  prompt: 'stored prompts (prompt) are not supported when routed to an Anthropic model: send instructions and input',
  context_management: 'context_management (server-side compaction) is not supported when routed to an Anthropic model',
  moderation: 'moderated responses are not supported when routed to an Anthropic model',
};

/** Every other top-level key the Responses API defines; anything else is refused as unknown. */
const HANDLED = new Set([
  'model',
  'input',
  'instructions',
  'max_output_tokens',
  'temperature',
  'top_p',
  'stream',
  'stream_options',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'user',
  'text',
  'background',
  'top_logprobs',
]);

function imageBlock(part: Json, param: string, dropped: Set<string>): Block {
  const url = part.image_url;
  if (typeof url !== 'string') {
    if (given(part.file_id)) {
      throw new TranslationError(`${param}.file_id`, `${param}: an image by file_id is not supported when routed to an Anthropic model (OpenAI's files are not Anthropic's); send image_url`);
    }
    throw new TranslationError(`${param}.image_url`, `${param}.image_url must be a string`);
  }
  if (given(part.detail) && part.detail !== 'auto') dropped.add('input[].content[].detail');
  if (/^https?:\/\//i.test(url)) return withCache({ type: 'image', source: { type: 'url', url } }, part);
  const data = /^data:([^;,]+)((?:;[^;,]*)*);base64,(.*)$/s.exec(url);
  if (data === null) throw new TranslationError(`${param}.image_url`, `${param}: an image must be an http(s) URL or a base64 data: URL`);
  const mediaType = data[1]!.toLowerCase();
  if (!IMAGE_TYPES.has(mediaType)) {
    throw new TranslationError(`${param}.image_url`, `${param}: image type ${mediaType} is not supported when routed to an Anthropic model (jpeg, png, gif, webp)`);
  }
  return withCache({ type: 'image', source: { type: 'base64', media_type: mediaType, data: data[3]! } }, part);
}

/** A message's content for Anthropic; `images` says whether the role may carry them (only user messages can). */
function messageContent(content: unknown, param: string, images: boolean, dropped: Set<string>): Block[] {
  if (typeof content === 'string') return textBlock(content);
  if (!Array.isArray(content)) throw new TranslationError(param, `${param} must be a string or an array of content parts`);
  return content.flatMap((part: unknown, j): Block[] => {
    const at = `${param}[${j}]`;
    if (!isObject(part)) throw new TranslationError(at, `${at} must be an object`);
    // output_text is how an earlier answer comes back (the client replays `output`): text all the same.
    if ((part.type === 'input_text' || part.type === 'output_text') && typeof part.text === 'string') return textBlock(part.text, part);
    // A refusal the model gave earlier is still what it said: kept as text.
    if (part.type === 'refusal' && typeof part.refusal === 'string') return textBlock(part.refusal);
    if (part.type === 'input_image') {
      if (!images) throw new TranslationError(at, `${at}: Anthropic takes images in user messages only`);
      return [imageBlock(part, at, dropped)];
    }
    if (part.type === 'input_file') throw new TranslationError(at, `${at}: file input is not supported when routed to an Anthropic model`);
    if (part.type === 'input_audio') throw new TranslationError(at, `${at}: audio input is not supported when routed to an Anthropic model`);
    throw new TranslationError(at, `${at}: unknown content part type ${JSON.stringify(part.type)}`);
  });
}

/** A function_call_output's `output`: a string, or text and image parts. */
function toolResultContent(output: unknown, param: string, dropped: Set<string>): string | Block[] {
  if (typeof output === 'string') return output;
  return compact(messageContent(output, param, true, dropped));
}

function toolUse(item: Json, param: string): Block {
  if (typeof item.call_id !== 'string') throw new TranslationError(`${param}.call_id`, `${param}.call_id must be a string`);
  if (typeof item.name !== 'string') throw new TranslationError(`${param}.name`, `${param}.name must be a string`);
  const args = typeof item.arguments === 'string' ? item.arguments : '';
  let input: unknown;
  try {
    // Some clients send '' for a call without arguments: that is the empty object.
    input = args.trim() === '' ? {} : JSON.parse(args);
  } catch {
    throw new TranslationError(`${param}.arguments`, `${param}.arguments: the arguments of ${item.call_id} are not valid JSON`);
  }
  if (!isObject(input)) throw new TranslationError(`${param}.arguments`, `${param}.arguments: the arguments of ${item.call_id} must be a JSON object`);
  return { type: 'tool_use', id: item.call_id, name: item.name, input };
}

interface Turn {
  role: 'user' | 'assistant';
  content: Block[];
}

function translateInput(input: unknown, system: Block[], dropped: Set<string>): Turn[] {
  if (typeof input === 'string') {
    const blocks = textBlock(input);
    return blocks.length === 0 ? [] : [{ role: 'user', content: blocks }];
  }
  if (!Array.isArray(input)) throw new TranslationError('input', 'input must be a string or an array of input items');
  const turns: Turn[] = [];
  // Anthropic requires user and assistant to alternate: what OpenAI sends as several items in a row
  // (a message and the calls it made, parallel tool results and the next user message) becomes one message.
  const add = (role: Turn['role'], blocks: Block[]): void => {
    if (blocks.length === 0) return;
    const last = turns.at(-1);
    if (last?.role === role) last.content.push(...blocks);
    else turns.push({ role, content: blocks });
  };
  input.forEach((item: unknown, i) => {
    const param = `input[${i}]`;
    if (!isObject(item)) throw new TranslationError(param, `${param} must be an object`);
    const type = item.type ?? 'message';
    switch (type) {
      case 'message':
        switch (item.role) {
          case 'system':
          case 'developer':
            // Anthropic has one system prompt, outside the conversation: every system and developer
            // message goes there, after the instructions, in order, wherever it stood.
            system.push(...messageContent(item.content, `${param}.content`, false, dropped));
            return;
          case 'user':
            add('user', messageContent(item.content, `${param}.content`, true, dropped));
            return;
          case 'assistant':
            add('assistant', messageContent(item.content, `${param}.content`, false, dropped));
            return;
          default:
            throw new TranslationError(`${param}.role`, `${param}: unknown role ${JSON.stringify(item.role)}`);
        }
      case 'function_call':
        add('assistant', [toolUse(item, param)]);
        return;
      case 'function_call_output':
        if (typeof item.call_id !== 'string') throw new TranslationError(`${param}.call_id`, `${param}.call_id must be a string`);
        add('user', [{ type: 'tool_result', tool_use_id: item.call_id, content: toolResultContent(item.output, `${param}.output`, dropped) }]);
        return;
      case 'reasoning':
        // Another model's reasoning: Anthropic's thinking blocks carry Anthropic's own signature,
        // so it cannot go as thinking, and the conversation reads the same without it.
        dropped.add('input[].reasoning');
        return;
      case 'item_reference':
        throw new TranslationError(param, `${param}: item_reference is not supported when routed to an Anthropic model (${STATELESS})`);
      default:
        throw new TranslationError(param, `${param}: input items of type ${JSON.stringify(type)} are not supported when routed to an Anthropic model`);
    }
  });
  // Anthropic wants a user message's tool_result blocks before anything else in it.
  for (const turn of turns) {
    if (turn.role !== 'user') continue;
    const results = turn.content.filter((block) => block.type === 'tool_result');
    if (results.length > 0) turn.content = [...results, ...turn.content.filter((block) => block.type !== 'tool_result')];
  }
  return turns;
}

function translateTools(tools: unknown, dropped: Set<string>): Json[] {
  if (!Array.isArray(tools)) throw new TranslationError('tools', 'tools must be an array');
  return tools.map((tool: unknown, i) => {
    const param = `tools[${i}]`;
    if (!isObject(tool)) throw new TranslationError(param, `${param} must be an object`);
    if (tool.type !== 'function') {
      throw new TranslationError(param, `${param}: tools of type ${JSON.stringify(tool.type)} are not supported when routed to an Anthropic model (function tools only)`);
    }
    if (typeof tool.name !== 'string') throw new TranslationError(`${param}.name`, `${param}.name must be a string`);
    if (tool.strict === true) dropped.add('tools[].strict');
    return anthropicTool(tool as Json & { name: string });
  });
}

function translateToolChoice(choice: unknown): Json {
  const named = isObject(choice) && choice.type === 'function' && typeof choice.name === 'string' ? choice.name : undefined;
  return anthropicChoice(choice, named);
}

function translateText(text: unknown, dropped: Set<string>): void {
  if (!isObject(text)) throw new TranslationError('text', 'text must be an object');
  const format = text.format;
  if (isObject(format)) {
    if (format.type === 'json_schema' || format.type === 'json_object') {
      throw new TranslationError('text.format', `text.format ${format.type} is not supported when routed to an Anthropic model`);
    }
    if (format.type !== 'text') throw new TranslationError('text.format', `text.format: unknown type ${JSON.stringify(format.type)}`);
  } else if (given(format)) throw new TranslationError('text.format', 'text.format must be an object');
  if (given(text.verbosity)) dropped.add('text.verbosity');
}

function translateRequest(body: Json, upstreamModel: string): TranslatedRequest {
  for (const key of Object.keys(body)) {
    const refused = Object.hasOwn(REFUSED, key) ? REFUSED[key] : undefined;
    const value = body[key];
    if (refused !== undefined) {
      // An empty list asks for nothing: context_management: [] is as good as absent.
      if (given(value) && !(Array.isArray(value) && value.length === 0)) throw new TranslationError(key, refused);
    } else if (!HANDLED.has(key) && !DROPPED.has(key)) {
      // Refused rather than forwarded or ignored: a parameter this translator does not know could
      // mean anything, and Anthropic would reject it anyway.
      throw new TranslationError(key, `unknown parameter '${key}' (not supported when routed to an Anthropic model)`);
    }
  }
  const dropped = new Set<string>();
  for (const key of Object.keys(body)) {
    if (DROPPED.has(key) && given(body[key]) && body[key] !== HONOURED[key]) dropped.add(key);
  }

  if (body.background === true) {
    throw new TranslationError('background', `background responses are not supported when routed to an Anthropic model (${UNSTORED})`);
  }
  if (given(body.top_logprobs) && body.top_logprobs !== 0) {
    throw new TranslationError('top_logprobs', 'top_logprobs: log probabilities are not supported when routed to an Anthropic model');
  }
  if (given(body.text)) translateText(body.text, dropped);
  // No obfuscation padding is added to this stream; the rest of stream_options is honoured.
  if (isObject(body.stream_options) && given(body.stream_options.include_obfuscation) && body.stream_options.include_obfuscation !== false) {
    dropped.add('stream_options.include_obfuscation');
  }

  const system: Block[] = [];
  if (given(body.instructions)) {
    if (typeof body.instructions !== 'string') throw new TranslationError('instructions', 'instructions must be a string');
    system.push(...textBlock(body.instructions));
  }
  if (!given(body.input)) throw new TranslationError('input', `input is required when routed to an Anthropic model (${STATELESS})`);
  const turns = translateInput(body.input, system, dropped);

  const maxTokens = body.max_output_tokens ?? DEFAULT_MAX_TOKENS;
  if (typeof maxTokens !== 'number') throw new TranslationError('max_output_tokens', 'max_output_tokens must be a number');
  const out: Json = { model: upstreamModel, max_tokens: maxTokens };
  if (system.length > 0) out.system = compact(system);
  out.messages = turns.map((turn) => ({ role: turn.role, content: compact(turn.content) }));

  if (given(body.temperature)) out.temperature = anthropicTemperature(body.temperature);
  if (given(body.top_p)) {
    if (typeof body.top_p !== 'number') throw new TranslationError('top_p', 'top_p must be a number');
    out.top_p = body.top_p;
  }
  if (body.stream === true) out.stream = true;

  const tools = given(body.tools) ? translateTools(body.tools, dropped) : [];
  if (tools.length > 0) out.tools = tools;
  const toolChoice = anthropicToolChoice(tools, given(body.tool_choice) ? translateToolChoice(body.tool_choice) : undefined, body.parallel_tool_calls);
  if (toolChoice !== undefined) out.tool_choice = toolChoice;

  if (given(body.user)) {
    if (typeof body.user !== 'string') throw new TranslationError('user', 'user must be a string');
    out.metadata = { user_id: body.user };
  }

  return { body: out, dropped: [...dropped] };
}

interface Tokens {
  input: number;
  cacheRead: number;
  cacheCreation: number;
  output: number;
}

function tokensOf(usage: unknown): Tokens {
  const u = isObject(usage) ? usage : {};
  return { input: count(u.input_tokens), cacheRead: count(u.cache_read_input_tokens), cacheCreation: count(u.cache_creation_input_tokens), output: count(u.output_tokens) };
}

/** Anthropic counts cached input (read or written) apart from `input_tokens`; OpenAI's input_tokens includes it. */
function responseUsage(tokens: Tokens): Json {
  const input = tokens.input + tokens.cacheRead + tokens.cacheCreation;
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: tokens.cacheRead, cache_write_tokens: tokens.cacheCreation },
    output_tokens: tokens.output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: input + tokens.output,
  };
}

/** Why a Response is incomplete, from Anthropic's stop_reason; null when it is complete. */
function incompleteReason(stopReason: unknown): string | null {
  if (stopReason === 'max_tokens' || stopReason === 'model_context_window_exceeded') return 'max_output_tokens';
  if (stopReason === 'refusal') return 'content_filter';
  // end_turn, stop_sequence, tool_use, and pause_turn (the turn paused; the client may continue it).
  return null;
}

/** Ids in OpenAI's style (resp_, msg_, fc_) keep Anthropic's, so an answer can be found in both logs. */
class Ids {
  readonly #base: string;
  #messages = 0;

  constructor(messageId: unknown) {
    this.#base = typeof messageId === 'string' && messageId !== '' ? messageId.replace(/^msg_/, '') : randomUUID().replaceAll('-', '');
  }

  get response(): string {
    return `resp_${this.#base}`;
  }

  /** The first message item is the Anthropic message's id; a later one (text after a tool call) adds its output index. */
  message(outputIndex: number): string {
    return this.#messages++ === 0 ? `msg_${this.#base}` : `msg_${this.#base}_${outputIndex}`;
  }

  static call(toolUseId: string): string {
    return `fc_${toolUseId.replace(/^toolu_/, '')}`;
  }
}

function outputText(text: string): Json {
  return { type: 'output_text', annotations: [], logprobs: [], text };
}

function messageItem(id: string, status: string, content: Json[]): Json {
  return { id, type: 'message', status, role: 'assistant', content };
}

function callItem(toolUseId: string, name: unknown, args: string, status: string): Json {
  return { id: Ids.call(toolUseId), type: 'function_call', status, call_id: toolUseId, name, arguments: args };
}

interface ResponseState {
  id: string;
  createdAt: number;
  model: unknown;
  /** undefined while the answer is still coming. */
  stopReason?: unknown;
  output: Json[];
  tokens?: Tokens;
}

/**
 * A Response object. The translator does not see the request, so what a Response echoes of it
 * (instructions, tools, temperature…) is given as the API's defaults, not the client's values.
 */
function responseObject(state: ResponseState): Json {
  const done = 'stopReason' in state;
  const reason = done ? incompleteReason(state.stopReason) : null;
  const status = !done ? 'in_progress' : reason === null ? 'completed' : 'incomplete';
  return {
    id: state.id,
    object: 'response',
    created_at: state.createdAt,
    status,
    background: false,
    completed_at: status === 'completed' ? nowSeconds() : null,
    error: null,
    incomplete_details: reason === null ? null : { reason },
    instructions: null,
    max_output_tokens: null,
    metadata: {},
    model: state.model,
    output: state.output,
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: null,
    temperature: null,
    text: { format: { type: 'text' } },
    tool_choice: 'auto',
    tools: [],
    top_p: null,
    truncation: 'disabled',
    // As OpenAI does: null until the response is over.
    usage: state.tokens === undefined ? null : responseUsage(state.tokens),
  };
}

function translateResponse(body: Json): Json {
  const ids = new Ids(body.id);
  const output: Json[] = [];
  // One output item per block, in Anthropic's order, as the stream gives them. Thinking (and server
  // tool) blocks have no place in a Response without reasoning: left out.
  for (const block of Array.isArray(body.content) ? (body.content as unknown[]) : []) {
    if (!isObject(block)) continue;
    if (block.type === 'text' && typeof block.text === 'string') {
      output.push(messageItem(ids.message(output.length), 'completed', [outputText(block.text)]));
    } else if (block.type === 'tool_use' && typeof block.id === 'string') {
      output.push(callItem(block.id, block.name, JSON.stringify(block.input ?? {}), 'completed'));
    }
  }
  return responseObject({ id: ids.response, createdAt: nowSeconds(), model: body.model, stopReason: body.stop_reason ?? null, output, tokens: tokensOf(body.usage) });
}

/** A content block being streamed: its output item and what it has said so far. */
interface OpenBlock {
  kind: 'text' | 'call';
  outputIndex: number;
  itemId: string;
  /** The text, or the arguments' JSON. */
  text: string;
  callId: string;
  name: unknown;
}

/** One streamed answer: Anthropic's events in, Responses events out, each as soon as its upstream event completes. */
class ResponsesStream implements StreamTranslator {
  /** Decodes across chunks: a character split between two chunks comes out whole. */
  readonly #parser = new SseParser();
  #sequence = 0;
  #ids: Ids | undefined;
  #state: ResponseState | undefined;
  #tokens: Tokens = { input: 0, cacheRead: 0, cacheCreation: 0, output: 0 };
  #stopReason: unknown = null;
  /** Anthropic's content block index → the block open at it. */
  readonly #open = new Map<number, OpenBlock>();
  /** Output items opened so far: thinking blocks take none, so Anthropic's index is not OpenAI's. */
  #items = 0;
  /** Set once the response is over (completed, incomplete, or an error): nothing more is sent. */
  #over = false;
  /** How the upstream stream ended: message_stop came (complete), or an error event (error). */
  #outcome: StreamOutcome = 'cut';

  push(chunk: Buffer): string {
    if (this.#over) return '';
    return this.#translate(this.#parser.push(chunk));
  }

  end(): string {
    if (this.#over) return '';
    // A stream that ends before message_stop gets no response.completed: the caller ends it with
    // an error event (the SDK would take a half answer closed any other way for the final one).
    // The Responses API sends no [DONE]: response.completed (or error) is the last event.
    return this.#translate(this.#parser.finish());
  }

  outcome(): StreamOutcome {
    return this.#outcome;
  }

  nextSequence(): number {
    return this.#sequence;
  }

  #translate(events: SseEvent[]): string {
    let out = '';
    for (const event of events) {
      if (this.#over) break;
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

  #emit(type: string, fields: Json): string {
    return formatSse(JSON.stringify({ type, ...fields, sequence_number: this.#sequence++ }), type);
  }

  #error(code: unknown, message: unknown): string {
    this.#over = true;
    this.#outcome = 'error';
    return this.#emit('error', { code: typeof code === 'string' ? code : null, message: typeof message === 'string' ? message : 'provider error', param: null });
  }

  /** response.created and response.in_progress, once, at message_start (or whatever comes first instead). */
  #start(message: Json): string {
    if (this.#state !== undefined) return '';
    this.#ids = new Ids(message.id);
    this.#tokens = tokensOf(message.usage);
    this.#state = { id: this.#ids.response, createdAt: nowSeconds(), model: message.model ?? null, output: [] };
    const response = responseObject(this.#state);
    return this.#emit('response.created', { response }) + this.#emit('response.in_progress', { response });
  }

  #event(type: string | undefined, data: Json): string {
    switch (type) {
      case 'message_start':
        return this.#start(isObject(data.message) ? data.message : {});
      case 'content_block_start': {
        let out = this.#start({});
        const block = isObject(data.content_block) ? data.content_block : {};
        const index = count(data.index);
        const outputIndex = this.#items;
        if (block.type === 'text') {
          this.#items++;
          const open: OpenBlock = { kind: 'text', outputIndex, itemId: this.#ids!.message(outputIndex), text: '', callId: '', name: undefined };
          this.#open.set(index, open);
          out += this.#emit('response.output_item.added', { output_index: outputIndex, item: messageItem(open.itemId, 'in_progress', []) });
          out += this.#emit('response.content_part.added', { item_id: open.itemId, output_index: outputIndex, content_index: 0, part: outputText('') });
          if (typeof block.text === 'string' && block.text !== '') out += this.#textDelta(open, block.text);
        } else if (block.type === 'tool_use' && typeof block.id === 'string') {
          this.#items++;
          const open: OpenBlock = { kind: 'call', outputIndex, itemId: Ids.call(block.id), text: '', callId: block.id, name: block.name };
          this.#open.set(index, open);
          out += this.#emit('response.output_item.added', { output_index: outputIndex, item: callItem(block.id, block.name, '', 'in_progress') });
        }
        // thinking, redacted_thinking and server tool blocks: no output item.
        return out;
      }
      case 'content_block_delta': {
        const open = this.#open.get(count(data.index));
        const delta = isObject(data.delta) ? data.delta : {};
        if (open?.kind === 'text' && delta.type === 'text_delta' && typeof delta.text === 'string') return this.#textDelta(open, delta.text);
        if (open?.kind === 'call' && delta.type === 'input_json_delta' && typeof delta.partial_json === 'string' && delta.partial_json !== '') {
          return this.#argumentsDelta(open, delta.partial_json);
        }
        // thinking_delta, signature_delta, citations_delta: no place in this Response.
        return '';
      }
      case 'content_block_stop': {
        const index = count(data.index);
        const open = this.#open.get(index);
        if (open === undefined) return '';
        this.#open.delete(index);
        return this.#close(open);
      }
      case 'message_delta': {
        const usage = isObject(data.usage) ? data.usage : {};
        // message_delta's counts are cumulative and, when present, final (server tools can add input).
        if (typeof usage.output_tokens === 'number') this.#tokens.output = usage.output_tokens;
        if (typeof usage.input_tokens === 'number') this.#tokens.input = usage.input_tokens;
        if (typeof usage.cache_read_input_tokens === 'number') this.#tokens.cacheRead = usage.cache_read_input_tokens;
        if (typeof usage.cache_creation_input_tokens === 'number') this.#tokens.cacheCreation = usage.cache_creation_input_tokens;
        const delta = isObject(data.delta) ? data.delta : {};
        if (given(delta.stop_reason)) this.#stopReason = delta.stop_reason;
        return '';
      }
      case 'message_stop': {
        let out = this.#start({});
        // A block Anthropic never closed is closed here, so every output item is done.
        for (const open of [...this.#open.values()].sort((a, b) => a.outputIndex - b.outputIndex)) out += this.#close(open);
        this.#open.clear();
        const state = { ...this.#state!, stopReason: this.#stopReason, tokens: this.#tokens };
        const response = responseObject(state);
        this.#over = true;
        this.#outcome = 'complete';
        return out + this.#emit(response.status === 'completed' ? 'response.completed' : 'response.incomplete', { response });
      }
      case 'error': {
        const error = isObject(data.error) ? data.error : {};
        // Anthropic's error type (overloaded_error, api_error…) is the code, as in error() answers.
        return this.#error(error.type, error.message);
      }
      default:
        // ping, and events added after this was written.
        return '';
    }
  }

  #textDelta(open: OpenBlock, text: string): string {
    open.text += text;
    return this.#emit('response.output_text.delta', { item_id: open.itemId, output_index: open.outputIndex, content_index: 0, delta: text, logprobs: [] });
  }

  #argumentsDelta(open: OpenBlock, json: string): string {
    open.text += json;
    return this.#emit('response.function_call_arguments.delta', { item_id: open.itemId, output_index: open.outputIndex, delta: json });
  }

  /** The done events of a block, and its finished item kept for the final Response. */
  #close(open: OpenBlock): string {
    const at = { item_id: open.itemId, output_index: open.outputIndex };
    let out = '';
    let item: Json;
    if (open.kind === 'text') {
      out += this.#emit('response.output_text.done', { ...at, content_index: 0, text: open.text, logprobs: [] });
      out += this.#emit('response.content_part.done', { ...at, content_index: 0, part: outputText(open.text) });
      item = messageItem(open.itemId, 'completed', [outputText(open.text)]);
    } else {
      // A call without arguments streams none; its arguments are the empty object, sent as a delta
      // too so that the deltas always add up to the final arguments.
      if (open.text === '') out += this.#argumentsDelta(open, '{}');
      out += this.#emit('response.function_call_arguments.done', { ...at, name: open.name, arguments: open.text });
      item = callItem(open.callId, open.name, open.text, 'completed');
    }
    this.#state!.output[open.outputIndex] = item;
    return out + this.#emit('response.output_item.done', { output_index: open.outputIndex, item });
  }
}

export const responsesToMessages: Translator = {
  from: 'responses',
  to: 'messages',
  request: translateRequest,
  response: translateResponse,
  error: (status, body) => toOpenAIError(status, body),
  stream: () => new ResponsesStream(),
};
