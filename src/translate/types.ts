// What a translation between two LLM APIs is: a request rewritten for the provider's endpoint, and
// the provider's answer (JSON, stream or error) rewritten in the caller's API. Pure: no sockets.
import type { Endpoint } from '../providers/types.ts';

export type Json = Record<string, unknown>;

/** A request the target API cannot express: a 400 naming the parameter, in the caller's shape. */
export class TranslationError extends Error {
  readonly param: string;
  constructor(param: string, message: string) {
    super(message);
    this.param = param;
  }
}

export interface TranslatedRequest {
  /** The body for the provider's endpoint (`model` already set to the upstream model). */
  readonly body: Json;
  /** Client parameters with no equivalent upstream that were dropped (sent back in `sluice-dropped-params`). */
  readonly dropped: readonly string[];
}

/**
 * How an upstream stream ended: with its API's final event (`[DONE]`, `message_stop`,
 * `response.completed`), with an error event of its own, or with neither (cut).
 */
export type StreamOutcome = 'complete' | 'error' | 'cut';

/** Upstream SSE bytes in, the caller's SSE text out. */
export interface StreamTranslator {
  /** Any chunk boundaries (an event may be split across chunks). Returns '' when nothing is complete yet. */
  push(chunk: Buffer): string;
  /**
   * The upstream stream ended: the events still held, and what closes the caller's stream (e.g.
   * `data: [DONE]`) only if the upstream's own final event came. A cut stream gets no ending
   * here: `outcome()` says so, and the caller ends it with its error event.
   */
  end(): string;
  /** After `end()`: how the upstream stream ended. Absent: the caller watches the upstream bytes itself. */
  outcome?(): StreamOutcome;
  /** The `sequence_number` the next event of the caller's stream takes (a Responses stream). */
  nextSequence?(): number;
}

export interface Translator {
  /** The endpoint the client called. */
  readonly from: Endpoint;
  /** The provider's endpoint the request goes to. */
  readonly to: Endpoint;
  /** Throws `TranslationError` for what the target API cannot express. */
  request(body: Json, upstreamModel: string): TranslatedRequest;
  /** A successful (2xx) JSON answer, in the caller's shape. */
  response(body: Json): Json;
  /** An error answer (any status >= 400; `body` is the parsed JSON, or undefined when it was not JSON), in the caller's error shape. */
  error(status: number, body: unknown): Json;
  /** A new translator for one streamed answer. */
  stream(): StreamTranslator;
}
