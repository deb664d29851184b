// Anthropic's message as an OpenAI Response: the JSON answer, and the Response object, its items,
// ids and usage, which the stream (responses-to-messages-stream.ts) builds the same way.
import { randomUUID } from 'node:crypto';
import type { Json } from './types.ts';
import { count, isObject, nowSeconds } from './json.ts';

export interface Tokens {
  input: number;
  cacheRead: number;
  cacheCreation: number;
  output: number;
}

export function tokensOf(usage: unknown): Tokens {
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
export class Ids {
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

export function outputText(text: string): Json {
  return { type: 'output_text', annotations: [], logprobs: [], text };
}

export function messageItem(id: string, status: string, content: Json[]): Json {
  return { id, type: 'message', status, role: 'assistant', content };
}

export function callItem(toolUseId: string, name: unknown, args: string, status: string): Json {
  return { id: Ids.call(toolUseId), type: 'function_call', status, call_id: toolUseId, name, arguments: args };
}

export interface ResponseState {
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
export function responseObject(state: ResponseState): Json {
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

export function translateResponse(body: Json): Json {
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
