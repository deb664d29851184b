// Gemini's answers read as Anthropic's: the stream of `streamGenerateContent?alt=sse` as Anthropic's
// Messages stream, and what the JSON answer (messages-to-gemini.ts) translates the same way: ids,
// stop reasons, usage, thought signatures and Google's errors.
//
// Thought signatures: Gemini signs the parts of an answer (a function call above all) and Gemini 3
// refuses a later request whose function calls come back without them. Anthropic's only opaque
// field a client sends back untouched is a thinking block's `signature`, so a signature travels in
// one: a thought part's on its own thinking block, any other part's on an empty thinking block (a
// "carrier") right after the block the part became. Both carry SIGNATURE_PREFIX, which also tells
// them from Claude's own thinking blocks (whose signatures mean nothing to Gemini).
import { randomUUID } from 'node:crypto';
import type { Json, StreamOutcome, StreamTranslator } from './types.ts';
import { SseParser, formatSse, type SseEvent } from './sse.ts';
import { count, isObject } from './json.ts';
import { anthropicTypeFor } from './errors.ts';
import { MESSAGE_MAX, quoted } from '../api/errors.ts';

/** Marks a thinking block's signature as Gemini's (Claude's are base64, which has no ':'). */
export const SIGNATURE_PREFIX = 'gemini:';

/** Gemini's finish reasons that mean the answer was withheld or cut for its content. */
const REFUSALS = new Set(['SAFETY', 'RECITATION', 'BLOCKLIST', 'PROHIBITED_CONTENT', 'SPII', 'IMAGE_SAFETY', 'IMAGE_PROHIBITED_CONTENT', 'IMAGE_RECITATION']);

/** Google's canonical error codes (google.rpc.Code) as Anthropic's error types. */
const GOOGLE_TYPES: Record<string, string> = {
  INVALID_ARGUMENT: 'invalid_request_error',
  FAILED_PRECONDITION: 'invalid_request_error',
  OUT_OF_RANGE: 'invalid_request_error',
  UNAUTHENTICATED: 'authentication_error',
  PERMISSION_DENIED: 'permission_error',
  NOT_FOUND: 'not_found_error',
  RESOURCE_EXHAUSTED: 'rate_limit_error',
  INTERNAL: 'api_error',
  UNAVAILABLE: 'overloaded_error',
  DEADLINE_EXCEEDED: 'api_error',
};

/** The same by HTTP status, for an error without a `status` Google names. */
function typeForStatus(status: number): string {
  if (status === 503) return 'overloaded_error';
  if (status === 504) return 'api_error';
  return anthropicTypeFor(status);
}

/** Google's error object, from `{error: {...}}` or the `[{error: {...}}]` some of its endpoints send. */
function googleErrorObject(body: unknown): Json | undefined {
  const first = Array.isArray(body) ? body[0] : body;
  return isObject(first) && isObject(first.error) ? first.error : undefined;
}

/** Google's error text (bounded: it may quote what the client sent) and its canonical code, if any. */
export function googleError(status: number, body: unknown): { message: string; status: string | undefined } {
  const error = googleErrorObject(body);
  const message = typeof error?.message === 'string' ? quoted(error.message, MESSAGE_MAX) : `provider answered HTTP ${status}`;
  return { message, status: typeof error?.status === 'string' ? error.status : undefined };
}

/** A Google error answer as Anthropic's error body: the type by Google's `status`, else by the HTTP status. */
export function anthropicErrorFromGoogle(status: number, body: unknown): Json {
  const { message, status: code } = googleError(status, body);
  const type = (code !== undefined && Object.hasOwn(GOOGLE_TYPES, code) ? GOOGLE_TYPES[code] : undefined) ?? typeForStatus(status);
  return { type: 'error', error: { type, message } };
}

export function messageId(responseId: unknown): string {
  return `msg_${typeof responseId === 'string' && responseId !== '' ? responseId : randomUUID().replaceAll('-', '')}`;
}

/** The id of the answer's n-th function call when Gemini gives none: the same in the JSON answer and the stream. */
export function toolId(id: unknown, messageIdValue: string, n: number): string {
  return typeof id === 'string' && id !== '' ? id : `toolu_${messageIdValue.slice('msg_'.length)}_${n}`;
}

/**
 * Gemini's finish reason as Anthropic's stop reason. A configured stop sequence ends with STOP too,
 * and Gemini does not say which one matched: that is end_turn, with no stop_sequence.
 */
export function stopReason(finish: unknown, calledTools: boolean): string {
  if (finish === 'MAX_TOKENS') return 'max_tokens';
  if (typeof finish === 'string' && REFUSALS.has(finish)) return 'refusal';
  // Anthropic ends a turn that called tools with tool_use, and clients loop on it.
  return calledTools ? 'tool_use' : 'end_turn';
}

/** Anthropic's stop_details for a refusal: Gemini's own words when it gave some. */
export function refusalDetails(explanation: unknown, fallback: string): Json {
  return { type: 'refusal', category: null, explanation: typeof explanation === 'string' && explanation !== '' ? explanation : fallback };
}

/**
 * Gemini's usage as Anthropic's. Thought tokens are output (Anthropic counts thinking in
 * output_tokens); cached tokens are part of Gemini's prompt count and apart from Anthropic's input.
 */
export function anthropicUsage(usage: unknown): { input_tokens: number; cache_creation_input_tokens: number; cache_read_input_tokens: number; output_tokens: number } {
  const u = isObject(usage) ? usage : {};
  const cached = count(u.cachedContentTokenCount);
  return {
    input_tokens: Math.max(0, count(u.promptTokenCount) - cached),
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached,
    output_tokens: count(u.candidatesTokenCount) + count(u.thoughtsTokenCount),
  };
}

/** The first candidate (Sluice never asks for more than one). */
export function firstCandidate(body: Json): Json | undefined {
  const candidates = Array.isArray(body.candidates) ? body.candidates : [];
  return candidates.find((c): c is Json => isObject(c) && (c.index ?? 0) === 0);
}

export function partsOf(candidate: Json | undefined): Json[] {
  const content = isObject(candidate?.content) ? candidate.content : {};
  return Array.isArray(content.parts) ? content.parts.filter(isObject) : [];
}

export function signatureOf(part: Json): string | undefined {
  return typeof part.thoughtSignature === 'string' && part.thoughtSignature !== '' ? part.thoughtSignature : undefined;
}

/** A function call's arguments as the tool_use input: always an object. */
export function toolInput(args: unknown): Json {
  return isObject(args) ? args : {};
}

/** The block open in the stream: its index, its kind, and the signature it will carry when closed. */
interface OpenBlock {
  index: number;
  kind: 'text' | 'thinking';
  signature: string | undefined;
}

/** One streamed answer: Gemini's `data:` chunks in, Anthropic's named events out. */
export class GeminiStreamToMessages implements StreamTranslator {
  /** Decodes the bytes itself, so a character split across chunks comes out whole. */
  readonly #parser = new SseParser();
  readonly #model: string;
  #id = '';
  #started = false;
  /** An error was sent: nothing follows it. */
  #closed = false;
  #outcome: StreamOutcome = 'cut';
  #nextIndex = 0;
  #open: OpenBlock | undefined = undefined;
  #calls = 0;
  /** The finish reason once a chunk carried one ('BLOCKED' for a prompt refused whole). */
  #finish: string | undefined = undefined;
  #explanation: unknown = undefined;
  #usage: Json | undefined = undefined;

  /** `model`: the model the answer names when Gemini's chunks carry no `modelVersion`. */
  constructor(model: string) {
    this.#model = model;
  }

  push(chunk: Buffer): string {
    if (this.#closed) return '';
    return this.#events(this.#parser.push(chunk));
  }

  end(): string {
    if (this.#closed) return '';
    const out = this.#events(this.#parser.finish());
    if (this.#closed || this.#finish === undefined) return out;
    // Gemini sends no terminator: the chunk with the finish reason is its last, but usage may come
    // on a later chunk, so the message ends when the upstream stream does.
    this.#outcome = 'complete';
    return out + this.#messageEnd();
  }

  outcome(): StreamOutcome {
    return this.#outcome;
  }

  #events(events: SseEvent[]): string {
    let out = '';
    for (const event of events) {
      if (this.#closed) break;
      let json: unknown;
      try {
        json = JSON.parse(event.data);
      } catch {
        json = undefined;
      }
      // Anything that is not a chunk (a keep-alive, say) says nothing to the client.
      if (isObject(json)) out += this.#chunk(json);
    }
    return out;
  }

  #chunk(chunk: Json): string {
    if (isObject(chunk.error)) {
      this.#closed = true;
      this.#outcome = 'error';
      const code = typeof chunk.error.code === 'number' ? chunk.error.code : 500;
      return this.#send('error', anthropicErrorFromGoogle(code, chunk));
    }
    let out = '';
    if (isObject(chunk.usageMetadata)) this.#usage = chunk.usageMetadata;
    if (!this.#started) out += this.#start(chunk);
    // Parts after the finish reason (none are sent) would follow the closed message.
    if (this.#finish !== undefined) return out;
    const candidate = firstCandidate(chunk);
    for (const part of partsOf(candidate)) out += this.#part(part);
    const feedback = isObject(chunk.promptFeedback) ? chunk.promptFeedback : {};
    if (candidate === undefined && typeof feedback.blockReason === 'string') {
      this.#finish = 'BLOCKED';
      this.#explanation = feedback.blockReasonMessage ?? `the provider blocked the prompt (${feedback.blockReason})`;
    } else if (typeof candidate?.finishReason === 'string') {
      this.#finish = candidate.finishReason;
      this.#explanation = candidate.finishMessage ?? `the provider stopped the answer (${candidate.finishReason})`;
      out += this.#closeBlock();
    }
    return out;
  }

  #start(chunk: Json): string {
    this.#started = true;
    this.#id = messageId(chunk.responseId);
    const message = {
      id: this.#id,
      type: 'message',
      role: 'assistant',
      model: typeof chunk.modelVersion === 'string' && chunk.modelVersion !== '' ? chunk.modelVersion : this.#model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      stop_details: null,
      usage: { ...anthropicUsage(this.#usage), output_tokens: 0 },
    };
    return this.#send('message_start', { type: 'message_start', message });
  }

  #part(part: Json): string {
    const signature = signatureOf(part);
    if (isObject(part.functionCall)) {
      const call = part.functionCall;
      let out = this.#closeBlock();
      const index = this.#nextIndex++;
      const block = { type: 'tool_use', id: toolId(call.id, this.#id, this.#calls++), name: typeof call.name === 'string' ? call.name : '', input: {} };
      out += this.#send('content_block_start', { type: 'content_block_start', index, content_block: block });
      // Gemini sends a call whole: its arguments go in one piece.
      out += this.#send('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(toolInput(call.args)) } });
      out += this.#send('content_block_stop', { type: 'content_block_stop', index });
      return signature === undefined ? out : out + this.#carrier(signature);
    }
    if (typeof part.text !== 'string') return ''; // inline data, code execution…: no Anthropic block
    if (part.thought === true) return this.#append('thinking', part.text, signature);
    if (part.text !== '') return this.#append('text', part.text, signature);
    // An empty text part that only carries a signature (Gemini ends some streams so): a carrier
    // after the block before it.
    return signature === undefined ? '' : this.#closeBlock() + this.#carrier(signature);
  }

  /** Text or thinking appended to the open block of its kind (a new one when a second signature would meet the first). */
  #append(kind: 'text' | 'thinking', text: string, signature: string | undefined): string {
    let out = '';
    if (this.#open?.kind !== kind || (signature !== undefined && this.#open.signature !== undefined)) {
      out += this.#closeBlock();
      const index = this.#nextIndex++;
      this.#open = { index, kind, signature: undefined };
      const block = kind === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '', signature: '' };
      out += this.#send('content_block_start', { type: 'content_block_start', index, content_block: block });
    }
    const open = this.#open;
    if (signature !== undefined) open.signature = signature;
    if (text === '') return out;
    const delta = kind === 'text' ? { type: 'text_delta', text } : { type: 'thinking_delta', thinking: text };
    return out + this.#send('content_block_delta', { type: 'content_block_delta', index: open.index, delta });
  }

  /** Closes the open block: a thinking block takes its signature, a text block's comes in a carrier after it. */
  #closeBlock(): string {
    const open = this.#open;
    if (open === undefined) return '';
    this.#open = undefined;
    let out = '';
    if (open.kind === 'thinking') {
      out += this.#send('content_block_delta', { type: 'content_block_delta', index: open.index, delta: { type: 'signature_delta', signature: SIGNATURE_PREFIX + (open.signature ?? '') } });
    }
    out += this.#send('content_block_stop', { type: 'content_block_stop', index: open.index });
    return open.kind === 'text' && open.signature !== undefined ? out + this.#carrier(open.signature) : out;
  }

  /** An empty thinking block carrying the signature of the part before it. */
  #carrier(signature: string): string {
    const index = this.#nextIndex++;
    return (
      this.#send('content_block_start', { type: 'content_block_start', index, content_block: { type: 'thinking', thinking: '', signature: '' } }) +
      this.#send('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: SIGNATURE_PREFIX + signature } }) +
      this.#send('content_block_stop', { type: 'content_block_stop', index })
    );
  }

  /** The stop reason and the last usage Gemini sent, then message_stop. */
  #messageEnd(): string {
    const out = this.#closeBlock();
    const blocked = this.#finish === 'BLOCKED';
    const reason = blocked ? 'refusal' : stopReason(this.#finish, this.#calls > 0);
    const details = reason === 'refusal' ? refusalDetails(this.#explanation, 'the provider refused the answer') : null;
    return (
      out +
      this.#send('message_delta', { type: 'message_delta', delta: { stop_reason: reason, stop_sequence: null, stop_details: details }, usage: anthropicUsage(this.#usage) }) +
      this.#send('message_stop', { type: 'message_stop' })
    );
  }

  #send(event: string, data: Json): string {
    return formatSse(JSON.stringify(data), event);
  }
}
