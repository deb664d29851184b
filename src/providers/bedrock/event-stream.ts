// Bedrock streams in AWS's binary event stream encoding (`application/vnd.amazon.eventstream`):
// length-prefixed messages with typed headers and CRCs. The gateway's stream handling (its first
// content watch, its usage reader, the translators) reads SSE, so the provider relays each
// message as one SSE event: a Converse event as `event: <:event-type>` with its JSON payload, an
// InvokeModel `chunk` as the Anthropic event its base64 bytes carry, and an exception as
// `event: <:exception-type>` (Converse) or Anthropic's `event: error` (InvokeModel). The
// messages are decoded (and their CRCs checked) by AWS's own codec; only the framing is ours.
import { createRequire } from 'node:module';
import type { EventStreamCodec, Message } from '@smithy/core/event-streams';
import type { DispatchController, ResponseHandler } from '../types.ts';
import { anthropicErrorType } from './errors.ts';

const require = createRequire(import.meta.url);

/** The largest event stream message taken (Bedrock's are a few kB; a chunk of a long tool input more). */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
/** A message's prelude: total length, headers length, prelude CRC. */
const PRELUDE_BYTES = 12;

let codec: EventStreamCodec | undefined;

/** AWS's codec, loaded the first time a Bedrock provider is built. */
export function loadEventStreamCodec(): EventStreamCodec {
  if (codec === undefined) {
    const { EventStreamCodec: Codec } = require('@smithy/core/event-streams') as typeof import('@smithy/core/event-streams');
    const { toUtf8, fromUtf8 } = require('@smithy/core/serde') as typeof import('@smithy/core/serde');
    codec = new Codec(toUtf8, fromUtf8);
  }
  return codec;
}

/** What the stream's events are: Converse's, or InvokeModel's chunks of Anthropic events. */
export type EventStreamKind = 'converse' | 'anthropic';

/** Event stream bytes in (any boundaries), SSE text out. Throws on a message that is malformed or too large. */
export class EventStreamToSse {
  readonly #kind: EventStreamKind;
  readonly #codec = loadEventStreamCodec();
  #pending: Buffer = Buffer.alloc(0);

  constructor(kind: EventStreamKind) {
    this.#kind = kind;
  }

  push(chunk: Buffer): string {
    let data = this.#pending.length === 0 ? chunk : Buffer.concat([this.#pending, chunk]);
    let out = '';
    while (data.length >= PRELUDE_BYTES) {
      const total = data.readUInt32BE(0);
      if (total < PRELUDE_BYTES + 4 || total > MAX_MESSAGE_BYTES) throw new Error(`event stream message of ${total} bytes`);
      if (data.length < total) break;
      out += this.#event(this.#codec.decode(data.subarray(0, total)));
      data = data.subarray(total);
    }
    this.#pending = data.length === 0 ? Buffer.alloc(0) : Buffer.from(data);
    return out;
  }

  /** Bytes of a message the stream ended in the middle of: none when it ended whole. */
  get incomplete(): boolean {
    return this.#pending.length > 0;
  }

  #event(message: Message): string {
    const type = header(message, ':message-type');
    const payload = Buffer.from(message.body.buffer, message.body.byteOffset, message.body.byteLength).toString('utf8');
    if (type === 'exception' || type === 'error') {
      const name = header(message, ':exception-type') ?? header(message, ':error-code') ?? 'internalServerException';
      if (this.#kind === 'converse') return sse(name, payload);
      return sse('error', JSON.stringify({ type: 'error', error: { type: anthropicErrorType(0, name), message: messageOf(payload, name) } }));
    }
    const name = header(message, ':event-type') ?? 'message';
    if (this.#kind === 'converse') return sse(name, payload);
    // InvokeModelWithResponseStream: {"bytes":"<base64 of one Anthropic stream event>"}.
    if (name !== 'chunk') return '';
    const bytes = (JSON.parse(payload) as { bytes?: unknown }).bytes;
    if (typeof bytes !== 'string') return '';
    const event = Buffer.from(bytes, 'base64').toString('utf8');
    const eventType = (JSON.parse(event) as { type?: unknown }).type;
    return sse(typeof eventType === 'string' ? eventType : 'message', event);
  }
}

function header(message: Message, name: string): string | undefined {
  const value = message.headers[name];
  return value?.type === 'string' ? value.value : undefined;
}

/** One SSE event; `data` is one JSON text, which has no line breaks of its own outside strings. */
function sse(event: string, data: string): string {
  return `event: ${event}\ndata: ${data.replace(/\r?\n/g, ' ')}\n\n`;
}

function messageOf(payload: string, fallback: string): string {
  try {
    const message = (JSON.parse(payload) as { message?: unknown }).message;
    return typeof message === 'string' ? message : fallback;
  } catch {
    return fallback;
  }
}

const EVENT_STREAM = 'application/vnd.amazon.eventstream';

/**
 * What an answer is relayed as: Converse's (its errors as Bedrock sends them, for the translation
 * to read), or Anthropic's API (`anthropic`; `anthropic-count`: CountTokens' `{inputTokens}` as
 * Anthropic's `{input_tokens}`).
 */
export type BedrockAnswerKind = EventStreamKind | 'anthropic-count';

/**
 * Bedrock's answers, relayed as the gateway reads them: an event stream as SSE; for Anthropic's
 * API, an error answer's body (`{"message": …}`, its class in `x-amzn-errortype`) in Anthropic's
 * error shape, as the Anthropic provider's clients expect it.
 */
export class BedrockAnswer implements ResponseHandler {
  readonly #inner: ResponseHandler;
  readonly #kind: BedrockAnswerKind;
  /** A count's answer being gathered, to be rewritten whole. */
  #count: Buffer[] | undefined;
  #stream: EventStreamToSse | undefined;
  /** An error answer being gathered (anthropic only), and its class. */
  #error: { chunks: Buffer[]; size: number; type: string; status: number } | undefined;

  constructor(inner: ResponseHandler, kind: BedrockAnswerKind) {
    this.#inner = inner;
    this.#kind = kind;
  }

  onRequestStart(controller: DispatchController, context: unknown): void {
    this.#inner.onRequestStart?.(controller, context);
  }

  onResponseStart(controller: DispatchController, status: number, headers: Record<string, string | string[] | undefined>, statusMessage?: string): void {
    const contentType = headers['content-type'];
    let relayed = headers;
    if (status < 300 && this.#kind === 'anthropic-count') {
      this.#count = [];
      relayed = { ...headers, 'content-type': 'application/json' };
      delete relayed['content-length'];
    } else if (status < 300 && typeof contentType === 'string' && contentType.startsWith(EVENT_STREAM)) {
      this.#stream = new EventStreamToSse(this.#kind === 'converse' ? 'converse' : 'anthropic');
      relayed = { ...headers, 'content-type': 'text/event-stream' };
      delete relayed['content-length'];
    } else if (status >= 400 && this.#kind !== 'converse') {
      const errorType = headers['x-amzn-errortype'];
      this.#error = { chunks: [], size: 0, type: typeof errorType === 'string' ? errorType.split(':')[0]! : '', status };
      relayed = { ...headers, 'content-type': 'application/json' };
      delete relayed['content-length'];
    }
    this.#inner.onResponseStart?.(controller, status, relayed as never, statusMessage ?? '');
  }

  onResponseData(controller: DispatchController, chunk: Buffer): void {
    if (this.#count !== undefined) {
      this.#count.push(chunk);
      return;
    }
    if (this.#error !== undefined) {
      if (this.#error.size < 64 * 1024) {
        this.#error.chunks.push(chunk);
        this.#error.size += chunk.length;
      }
      return;
    }
    if (this.#stream === undefined) return this.#inner.onResponseData?.(controller, chunk);
    let text: string;
    try {
      text = this.#stream.push(chunk);
    } catch (error) {
      this.#stream = undefined;
      controller.abort(error instanceof Error ? error : new Error(String(error)));
      return;
    }
    if (text !== '') this.#inner.onResponseData?.(controller, Buffer.from(text));
  }

  onResponseEnd(controller: DispatchController, trailers: Record<string, string | string[] | undefined>): void {
    if (this.#count !== undefined) {
      let counted: unknown;
      try {
        counted = (JSON.parse(Buffer.concat(this.#count).toString('utf8')) as { inputTokens?: unknown }).inputTokens;
      } catch {
        counted = undefined;
      }
      const tokens = typeof counted === 'number' && Number.isFinite(counted) && counted >= 0 ? counted : 0;
      this.#inner.onResponseData?.(controller, Buffer.from(JSON.stringify({ input_tokens: tokens })));
    }
    const error = this.#error;
    if (error !== undefined) {
      this.#error = undefined;
      const raw = Buffer.concat(error.chunks).toString('utf8');
      const body = { type: 'error', error: { type: anthropicErrorType(error.status, error.type), message: messageOf(raw, error.type || `HTTP ${error.status}`) } };
      this.#inner.onResponseData?.(controller, Buffer.from(JSON.stringify(body)));
    }
    this.#inner.onResponseEnd?.(controller, trailers as never);
  }

  onResponseError(controller: DispatchController, error: Error): void {
    this.#inner.onResponseError?.(controller, error);
  }
}
