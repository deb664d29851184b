// A chat completion stream as Anthropic's Messages stream: one state machine per streamed answer,
// chunks in, Anthropic's named events (message_start, content blocks, message_delta…) out.
import { StringDecoder } from 'node:string_decoder';
import type { Json, StreamOutcome, StreamTranslator } from './types.ts';
import { SseParser, formatSse, type SseEvent } from './sse.ts';
import { toAnthropicError } from './errors.ts';
import { given, isObject } from './json.ts';
import { anthropicUsage, contentText, messageId, stopReason } from './messages-to-chat-answer.ts';

/** One streamed answer: chat completion chunks in, Anthropic's named events out. */
export class ChatStreamToMessages implements StreamTranslator {
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
