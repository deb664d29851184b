// Bedrock's Converse answers read as Anthropic's: the ConverseStream events as Anthropic's Messages
// stream, and what the JSON answer (messages-to-converse.ts) translates the same way: ids, stop
// reasons, usage and Bedrock's errors.
//
// The stream comes in as SSE text the Bedrock provider makes from AWS's binary event stream, one
// event per event-stream message: `event:` is the message's `:event-type` header (messageStart,
// contentBlockStart, contentBlockDelta, contentBlockStop, messageStop, metadata) or, for an
// exception, its `:exception-type` header (throttlingException, …); `data:` is the payload as sent.
import { randomUUID } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import type { Json, StreamOutcome, StreamTranslator } from './types.ts';
import { SseParser, formatSse, type SseEvent } from './sse.ts';
import { count, isObject } from './json.ts';
import { MESSAGE_MAX, quoted } from '../api/errors.ts';
import { anthropicTypeFor } from './errors.ts';

/** Converse's stop reasons that Anthropic names too, or names otherwise (a guardrail's or a filter's block is a refusal). */
const STOP_REASONS = new Map([
  ['end_turn', 'end_turn'],
  ['tool_use', 'tool_use'],
  ['max_tokens', 'max_tokens'],
  ['stop_sequence', 'stop_sequence'],
  ['model_context_window_exceeded', 'model_context_window_exceeded'],
  ['guardrail_intervened', 'refusal'],
  ['content_filtered', 'refusal'],
]);

/** ConverseStream's exceptions (by `:exception-type`, lower-cased) as Anthropic's error types; any other is an api_error. */
const EXCEPTION_TYPES = new Map([
  ['throttlingexception', 'rate_limit_error'],
  ['servicequotaexceededexception', 'rate_limit_error'],
  ['serviceunavailableexception', 'overloaded_error'],
  ['modelnotreadyexception', 'overloaded_error'],
  ['validationexception', 'invalid_request_error'],
  ['accessdeniedexception', 'permission_error'],
  ['resourcenotfoundexception', 'not_found_error'],
]);

/**
 * Anthropic's error type for a Bedrock error status. Bedrock's exception name is in a header the
 * translator does not get, but each status has one meaning: 424 is ModelErrorException, 408
 * ModelTimeoutException, 503 ServiceUnavailableException.
 */
export function bedrockErrorType(status: number): string {
  if (status === 503) return 'overloaded_error';
  if (status === 408 || status === 424 || status === 504) return 'api_error';
  return anthropicTypeFor(status);
}

/**
 * Bedrock's error text, bounded (it may quote what the client sent): `{"message": …}`, or
 * `{"Message": …}` as some AWS services spell it. It is what tells the user "Input is too long for
 * requested model", so it is kept whole up to the bound.
 */
export function bedrockMessage(body: unknown, fallback: string): string {
  const b = isObject(body) ? body : {};
  const error = isObject(b.error) ? b.error : {};
  const text = [b.message, b.Message, error.message, b.originalMessage].find((m): m is string => typeof m === 'string' && m !== '');
  return text === undefined ? fallback : quoted(text, MESSAGE_MAX);
}

/** A Bedrock error answer as Anthropic's error body. */
export function anthropicErrorFromBedrock(status: number, body: unknown): Json {
  return { type: 'error', error: { type: bedrockErrorType(status), message: bedrockMessage(body, `provider answered HTTP ${status}`) } };
}

/** Converse answers carry no id; Anthropic's always do. */
export function messageId(): string {
  return `msg_${randomUUID().replaceAll('-', '')}`;
}

/** The id of a tool call Converse gave none (it always does): the message's, with the block's place. */
export function toolId(id: unknown, message: string, n: number): string {
  return typeof id === 'string' && id !== '' ? id : `toolu_${message.slice('msg_'.length)}_${n}`;
}

/**
 * Converse's stopReason as Anthropic's stop_reason, stop_sequence and stop_details. The matched stop
 * sequence is known when the request asked for it (`additionalModelResponseFieldPaths`) and the
 * model gave it. A reason Anthropic has no name for (malformed_model_output, malformed_tool_use)
 * ended the turn as far as the client can tell.
 */
export function anthropicStop(reason: unknown, fields: unknown): { stop_reason: string; stop_sequence: string | null; stop_details: Json | null } {
  const stop = (typeof reason === 'string' ? STOP_REASONS.get(reason) : undefined) ?? 'end_turn';
  const matched = isObject(fields) && typeof fields.stop_sequence === 'string' ? fields.stop_sequence : null;
  return {
    stop_reason: stop,
    stop_sequence: stop === 'stop_sequence' ? matched : null,
    stop_details: stop === 'refusal' ? { type: 'refusal', category: null, explanation: null } : null,
  };
}

/**
 * Converse's usage as Anthropic's. Converse's inputTokens, like Anthropic's input_tokens, leaves out
 * the tokens read from and written to the cache (its totalTokens counts them).
 */
export function anthropicUsage(usage: unknown): { input_tokens: number; cache_creation_input_tokens: number; cache_read_input_tokens: number; output_tokens: number } {
  const u = isObject(usage) ? usage : {};
  return {
    input_tokens: count(u.inputTokens),
    cache_creation_input_tokens: count(u.cacheWriteInputTokens),
    cache_read_input_tokens: count(u.cacheReadInputTokens),
    output_tokens: count(u.outputTokens),
  };
}

/** A content block of the answer being streamed. */
interface Block {
  readonly index: number;
  readonly kind: 'text' | 'tool_use' | 'thinking' | 'redacted_thinking';
  closed: boolean;
  /** A redacted_thinking block's pieces (base64): Anthropic has no delta for it, so it is sent whole when it ends. */
  readonly redacted: string[];
}

const EMPTY_BLOCKS: Record<Exclude<Block['kind'], 'tool_use' | 'redacted_thinking'>, Json> = {
  text: { type: 'text', text: '' },
  thinking: { type: 'thinking', thinking: '', signature: '' },
};

/**
 * One streamed answer: ConverseStream events in, Anthropic's named events out. Converse sends the
 * usage (`metadata`) after `messageStop`, so message_delta and message_stop wait for it, or for the
 * end of a stream that stopped.
 */
export class ConverseStreamToMessages implements StreamTranslator {
  readonly #parser = new SseParser();
  // Bytes are decoded here, not in the parser, so a character split across chunks stays whole.
  readonly #decoder = new StringDecoder('utf8');
  readonly #model: string;
  #id = '';
  #started = false;
  /** message_stop or an error was sent: nothing follows either. */
  #closed = false;
  #outcome: StreamOutcome = 'cut';
  #nextIndex = 0;
  /** Converse's contentBlockIndex → the block it became. */
  readonly #blocks = new Map<number, Block>();
  #open: Block | undefined = undefined;
  /** messageStop's payload, once it came. */
  #stop: Json | undefined = undefined;
  #usage: unknown = undefined;

  /** `model` names the message (Converse's answers name none). */
  constructor(model: string) {
    this.#model = model;
  }

  push(chunk: Buffer): string {
    if (this.#closed) return '';
    return this.#events(this.#parser.push(this.#decoder.write(chunk)));
  }

  end(): string {
    if (this.#closed) return '';
    let out = this.#events(this.#parser.push(this.#decoder.end()));
    out += this.#events(this.#parser.finish());
    // A stream that stopped but sent no usage still ends; one that never stopped was cut, and the
    // caller ends it with its error event.
    if (!this.#closed && this.#stop !== undefined) out += this.#finish();
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
    let json: unknown;
    try {
      json = JSON.parse(event.data);
    } catch {
      json = undefined;
    }
    const data = isObject(json) ? json : {};
    switch (event.event) {
      case 'messageStart':
        return this.#start();
      case 'contentBlockStart':
        return this.#blockStart(data);
      case 'contentBlockDelta':
        return this.#delta(data);
      case 'contentBlockStop':
        return this.#blockStop(data);
      case 'messageStop':
        return this.#messageStop(data);
      case 'metadata':
        this.#usage = data.usage;
        return this.#stop === undefined ? '' : this.#finish();
      default:
        // An event type added to the API later says nothing this translation knows how to tell.
        return event.event !== undefined && /exception$/i.test(event.event) ? this.#error(event.event, data) : '';
    }
  }

  #start(): string {
    if (this.#started) return '';
    this.#started = true;
    this.#id = messageId();
    const message = {
      id: this.#id,
      type: 'message',
      role: 'assistant',
      model: this.#model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      stop_details: null,
      // Converse counts the tokens only at the end; message_delta carries them all.
      usage: anthropicUsage(undefined),
    };
    return this.#send('message_start', { type: 'message_start', message });
  }

  #blockStart(data: Json): string {
    const start = isObject(data.start) ? data.start : {};
    // Text and reasoning blocks have no start event; a block that starts as something else (an
    // image, a tool result) has nothing to stream in a Messages answer.
    if (!isObject(start.toolUse)) return this.#start();
    const call = start.toolUse;
    let out = this.#start();
    const index = this.#nextIndex;
    const block = { type: 'tool_use', id: toolId(call.toolUseId, this.#id, index), name: typeof call.name === 'string' ? call.name : '', input: {} };
    out += this.#openBlock(data.contentBlockIndex, 'tool_use', block);
    return out;
  }

  #delta(data: Json): string {
    const delta = isObject(data.delta) ? data.delta : {};
    const at = data.contentBlockIndex;
    let out = this.#start();
    if (typeof delta.text === 'string') {
      const [block, opened] = this.#block(at, 'text');
      out += opened;
      if (delta.text !== '') out += this.#blockDelta(block, { type: 'text_delta', text: delta.text });
    } else if (isObject(delta.toolUse)) {
      const [block, opened] = this.#block(at, 'tool_use');
      out += opened;
      const input = delta.toolUse.input;
      if (typeof input === 'string' && input !== '') out += this.#blockDelta(block, { type: 'input_json_delta', partial_json: input });
    } else if (isObject(delta.reasoningContent)) {
      const reasoning = delta.reasoningContent;
      if (typeof reasoning.redactedContent === 'string') {
        const [block, opened] = this.#block(at, 'redacted_thinking');
        block.redacted.push(reasoning.redactedContent);
        return out + opened;
      }
      const [block, opened] = this.#block(at, 'thinking');
      out += opened;
      if (typeof reasoning.text === 'string' && reasoning.text !== '') out += this.#blockDelta(block, { type: 'thinking_delta', thinking: reasoning.text });
      if (typeof reasoning.signature === 'string') out += this.#blockDelta(block, { type: 'signature_delta', signature: reasoning.signature });
    }
    // Citations, images and tool results streamed by some models have no delta in a Messages stream.
    return out;
  }

  /** The block at Converse's `at` if it is of `kind`, else a new one (a text block has no start event: its first delta opens it). */
  #block(at: unknown, kind: Block['kind']): [Block, string] {
    const known = typeof at === 'number' ? this.#blocks.get(at) : undefined;
    if (known !== undefined && known.kind === kind && !(kind === 'redacted_thinking' && known.closed)) return [known, ''];
    const index = this.#nextIndex;
    const empty = kind === 'tool_use' ? { type: 'tool_use', id: toolId(undefined, this.#id, index), name: '', input: {} } : kind === 'redacted_thinking' ? undefined : EMPTY_BLOCKS[kind];
    const opened = this.#openBlock(at, kind, empty);
    return [this.#open!, opened];
  }

  /** Closes the block open now and opens the next one; a redacted block is sent only when it ends. */
  #openBlock(at: unknown, kind: Block['kind'], contentBlock: Json | undefined): string {
    let out = this.#open === undefined ? '' : this.#close(this.#open);
    const block: Block = { index: this.#nextIndex++, kind, closed: false, redacted: [] };
    if (typeof at === 'number') this.#blocks.set(at, block);
    this.#open = block;
    if (contentBlock !== undefined) out += this.#send('content_block_start', { type: 'content_block_start', index: block.index, content_block: contentBlock });
    return out;
  }

  #blockDelta(block: Block, delta: Json): string {
    return this.#send('content_block_delta', { type: 'content_block_delta', index: block.index, delta });
  }

  #blockStop(data: Json): string {
    const block = typeof data.contentBlockIndex === 'number' ? this.#blocks.get(data.contentBlockIndex) : undefined;
    return block === undefined ? '' : this.#close(block);
  }

  #close(block: Block): string {
    if (block.closed) return '';
    block.closed = true;
    if (this.#open === block) this.#open = undefined;
    let out = '';
    if (block.kind === 'redacted_thinking') {
      // One piece is passed on as it came; several are joined as bytes (base64 pieces do not concatenate).
      const pieces = block.redacted;
      const data = pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces.map((piece) => Buffer.from(piece, 'base64'))).toString('base64');
      out += this.#send('content_block_start', { type: 'content_block_start', index: block.index, content_block: { type: 'redacted_thinking', data } });
    }
    return out + this.#send('content_block_stop', { type: 'content_block_stop', index: block.index });
  }

  #messageStop(data: Json): string {
    let out = this.#start();
    if (this.#open !== undefined) out += this.#close(this.#open);
    this.#stop = data;
    // The usage comes after messageStop; if it came first (nothing says it cannot), the end is now.
    if (this.#usage !== undefined) out += this.#finish();
    return out;
  }

  /** The stop reason and the usage, then message_stop. */
  #finish(): string {
    this.#closed = true;
    this.#outcome = 'complete';
    const stop = anthropicStop(this.#stop?.stopReason, this.#stop?.additionalModelResponseFields);
    const usage = this.#usage === undefined ? { output_tokens: 0 } : anthropicUsage(this.#usage);
    return this.#send('message_delta', { type: 'message_delta', delta: stop, usage }) + this.#send('message_stop', { type: 'message_stop' });
  }

  /** An exception event: Anthropic's error event, and nothing after it. */
  #error(name: string, data: Json): string {
    this.#closed = true;
    this.#outcome = 'error';
    const type = EXCEPTION_TYPES.get(name.toLowerCase()) ?? 'api_error';
    return this.#send('error', { type: 'error', error: { type, message: bedrockMessage(data, `the provider's stream ended with ${quoted(name)}`) } });
  }

  #send(event: string, data: Json): string {
    return formatSse(JSON.stringify(data), event);
  }
}
