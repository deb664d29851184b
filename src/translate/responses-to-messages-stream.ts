// Anthropic's Messages stream as a Responses event stream: one state machine per streamed answer,
// each Responses event sent as soon as the upstream event it comes from is complete.
import type { Json, StreamOutcome, StreamTranslator } from './types.ts';
import { SseParser, formatSse, type SseEvent } from './sse.ts';
import { count, given, isObject, nowSeconds } from './json.ts';
import { callItem, Ids, messageItem, outputText, responseObject, tokensOf, type ResponseState, type Tokens } from './responses-to-messages-answer.ts';

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
export class ResponsesStream implements StreamTranslator {
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
