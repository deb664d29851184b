// Anthropic Messages in front, OpenAI Chat Completions behind: a `POST /v1/messages` body rewritten
// for `POST /v1/chat/completions`, and the provider's answer (JSON, SSE stream or error) rewritten
// as an Anthropic message. A parameter the chat API cannot honour is refused with a 400 naming it
// when ignoring it would change what the client gets, and dropped (and named) when it is only a hint.
import { TranslationError, type Json, type TranslatedRequest, type Translator } from './types.ts';
import { toAnthropicError } from './errors.ts';
import { given, isObject, describeValue } from './json.ts';
import { chatResponseToMessage } from './messages-to-chat-answer.ts';
import { ChatStreamToMessages } from './messages-to-chat-stream.ts';


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
  throw unsupported(`${param}.source`, `an image source of type '${describeValue(source.type)}'`);
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
        const type = isObject(inner) ? describeValue(inner.type) : typeof inner;
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
    } else throw unsupported(at, `a '${describeValue(block.type)}' content block`);
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
    } else throw unsupported(at, `a '${describeValue(block.type)}' content block in an assistant message`);
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
    throw new TranslationError(`${param}.role`, `role must be 'user' or 'assistant', not '${describeValue(message.role)}'`);
  });
}

function chatTools(tools: unknown, dropped: Dropped): Json[] {
  if (!Array.isArray(tools)) throw new TranslationError('tools', "'tools' must be an array");
  return tools.map((tool, i) => {
    const param = `tools[${i}]`;
    if (!isObject(tool)) throw new TranslationError(param, 'a tool must be an object');
    // Server tools (web search, bash, code execution, …) run inside Anthropic's API; a chat
    // provider has nothing to run them with.
    if (given(tool.type) && tool.type !== 'custom') throw unsupported(param, `the server tool '${describeValue(tool.type)}'`);
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
  throw new TranslationError('tool_choice.type', `unknown tool_choice type '${describeValue(choice.type)}'`);
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

export const messagesToChat: Translator = {
  from: 'messages',
  to: 'chat',
  request: chatRequest,
  response: chatResponseToMessage,
  error: (status, body) => toAnthropicError(status, body),
  stream: () => new ChatStreamToMessages(),
};
