// Server-sent events (the WHATWG event-stream format) read incrementally, and written.
// Lines end in LF, CRLF or CR; a blank line ends an event; `:` lines are comments. Bytes are
// decoded across chunks, so a character split between two chunks comes out whole.
import { StringDecoder } from 'node:string_decoder';

export interface SseEvent {
  /** The `event:` field; undefined when absent. */
  readonly event: string | undefined;
  /** The `data:` lines joined with LF. */
  readonly data: string;
}

/** The longest event kept while waiting for its end; a longer one is dropped. */
const MAX_EVENT_CHARS = 8 * 1024 * 1024;

export class SseParser {
  readonly #decoder = new StringDecoder('utf8');
  #buffer = '';
  #event: string | undefined = undefined;
  #data: string[] = [];
  #hasData = false;
  #size = 0;
  #pendingCR = false;
  /** How much of `#buffer` is known to hold no line end. */
  #scanned = 0;

  /** Feeds bytes (or text); returns the events completed by them. */
  push(chunk: Buffer | string): SseEvent[] {
    let text = typeof chunk === 'string' ? chunk : this.#decoder.write(chunk);
    if (text === '') return [];
    if (this.#pendingCR) {
      this.#pendingCR = false;
      if (text.charCodeAt(0) === 10) text = text.slice(1);
    }
    this.#buffer += text;
    const out: SseEvent[] = [];
    const buffer = this.#buffer;
    let start = 0;
    // Only what arrived since the last push is scanned: a long line in many chunks stays linear.
    for (let i = this.#scanned; i < buffer.length; i++) {
      const c = buffer.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      this.#line(buffer.slice(start, i), out);
      if (c === 13) {
        if (i + 1 < buffer.length) {
          if (buffer.charCodeAt(i + 1) === 10) i++;
        } else this.#pendingCR = true;
      }
      start = i + 1;
    }
    this.#buffer = start === 0 ? buffer : buffer.slice(start);
    this.#scanned = this.#buffer.length;
    if (this.#buffer.length + this.#size > MAX_EVENT_CHARS) {
      // An event (or a line) longer than any provider sends: dropped, up to the next blank line.
      this.#buffer = '';
      this.#scanned = 0;
      this.#reset();
    }
    return out;
  }

  /** The stream ended: an event not closed by a blank line is dispatched too (providers sometimes omit the last one). */
  finish(): SseEvent[] {
    const out: SseEvent[] = [];
    this.#buffer += this.#decoder.end();
    if (this.#buffer !== '') this.#line(this.#buffer, out);
    this.#buffer = '';
    this.#scanned = 0;
    this.#line('', out);
    return out;
  }

  #line(line: string, out: SseEvent[]): void {
    if (line === '') {
      if (this.#hasData || this.#event !== undefined) out.push({ event: this.#event, data: this.#data.join('\n') });
      this.#reset();
      return;
    }
    if (line.charCodeAt(0) === 58) return; // ':' comment
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === 'data') {
      this.#data.push(value);
      this.#hasData = true;
      this.#size += value.length;
    } else if (field === 'event') this.#event = value;
  }

  #reset(): void {
    this.#event = undefined;
    this.#data = [];
    this.#hasData = false;
    this.#size = 0;
  }
}

/** One event as text: `event: NAME\n` when named, then `data: …` lines, then a blank line. */
export function formatSse(data: string, event?: string): string {
  const head = event === undefined ? '' : `event: ${event}\n`;
  if (!data.includes('\n')) return `${head}data: ${data}\n\n`;
  return `${head}${data.split('\n').map((line) => `data: ${line}`).join('\n')}\n\n`;
}
