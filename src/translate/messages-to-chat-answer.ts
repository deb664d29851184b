// A chat completion as an Anthropic message: the JSON answer, and the ids, stop reasons, usage and
// text that the stream (messages-to-chat-stream.ts) translates the same way.
import { randomUUID } from 'node:crypto';
import type { Json } from './types.ts';
import { count, isObject } from './json.ts';

/** The chat API's finish reasons as Anthropic stop reasons. */
const STOP_REASONS: Record<string, string> = {
  stop: 'end_turn',
  length: 'max_tokens',
  tool_calls: 'tool_use',
  function_call: 'tool_use',
  content_filter: 'refusal',
};

export function messageId(id: unknown): string {
  const raw = typeof id === 'string' && id !== '' ? id : randomUUID().replaceAll('-', '');
  return `msg_${raw.startsWith('chatcmpl-') ? raw.slice('chatcmpl-'.length) : raw}`;
}

export function stopReason(finish: unknown, calledTools: boolean): string {
  // A finish reason with no Anthropic name (or none at all) ended the turn as far as the client can tell.
  const reason = (typeof finish === 'string' && Object.hasOwn(STOP_REASONS, finish) ? STOP_REASONS[finish] : undefined) ?? 'end_turn';
  // Some OpenAI-compatible servers finish a turn that called tools with `stop`. Anthropic never
  // ends a turn with tool_use blocks as end_turn, and clients loop on `stop_reason === 'tool_use'`.
  return reason === 'end_turn' && calledTools ? 'tool_use' : reason;
}

/** Chat usage as Anthropic's: its `input_tokens` leaves out the tokens read from the cache. */
export function anthropicUsage(usage: unknown): { input_tokens: number; cache_creation_input_tokens: number; cache_read_input_tokens: number; output_tokens: number } {
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
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((part) => (isObject(part) && part.type === 'text' && typeof part.text === 'string' ? part.text : '')).join('');
}

export function chatResponseToMessage(body: Json): Json {
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
