// How a relayed stream ended: with its API's final event (`data: [DONE]`, Anthropic's
// `message_stop`, the Responses API's `response.completed` or `response.incomplete`), with an
// error event of its own, or with neither: cut. Found by byte search, not by parsing every event:
// only the first bytes of the last event are kept (a view of its read), so a read costs two
// backward searches and no allocation.
import type { Endpoint } from '../providers/types.ts';
import type { StreamOutcome } from '../translate/types.ts';

export type { StreamOutcome };

/** How much of an event's start is kept: its `event:` line and the start of its `data:`. */
const HEAD = 256;
const LF = 10;
const CR = 13;
const LF_LF = Buffer.from('\n\n');
const LF_CR_LF = Buffer.from('\n\r\n');
const EMPTY = Buffer.alloc(0);

const TYPE = /"type"\s*:\s*"([^"]*)"/;
const SEQUENCE = /"sequence_number"\s*:\s*(\d+)/;
const ERROR_DATA = /^\{\s*"error"\s*:/;

export class StreamEndWatch {
  readonly #api: Endpoint;
  /** The start of the event being read (at most HEAD bytes; a view of its read, or a copy once it spans two). */
  #current: Buffer = EMPTY;
  /** The start of the last event completed that said something (not a comment). */
  #last: Buffer | undefined = undefined;
  /** The stream's last two bytes (-1: none yet): a blank line may begin in one read and end in the next. */
  #beforeLast = -1;
  #last1 = -1;

  /** `api`: the upstream's endpoint (chat, completions, responses or messages). */
  constructor(api: Endpoint) {
    this.#api = api;
  }

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    const start = this.#acrossReads(chunk);
    if (start > 0) this.#complete();
    const last = lastBlank(chunk, start, chunk.length, true);
    if (last === undefined) this.#append(chunk, start, chunk.length);
    else {
      // Events end as the last one did: LF LF, or (a stream with CRs) LF CR LF too.
      const crs = last.end - last.at === 2;
      // The events this read completed, from the last back to the first that says something.
      for (let end = last.at; ; ) {
        const before = lastBlank(chunk, start, end, crs);
        if (before === undefined) {
          // The first: the event that began in an earlier read.
          this.#append(chunk, start, end);
          this.#complete();
          break;
        }
        if (this.#keep(viewHead(chunk, before.end, end))) break;
        end = before.at;
      }
      this.#current = viewHead(chunk, last.end, chunk.length);
    }
    const n = chunk.length;
    this.#beforeLast = n >= 2 ? chunk[n - 2]! : this.#last1;
    this.#last1 = chunk[n - 1]!;
  }

  /** Where in `chunk` a blank line (LF LF, LF CR LF) that began in the last read ends; 0: none does. */
  #acrossReads(chunk: Buffer): number {
    if (this.#last1 === LF) {
      if (chunk[0] === LF) return 1;
      if (chunk[0] === CR && chunk[1] === LF) return 2;
    } else if (this.#last1 === CR && this.#beforeLast === LF && chunk[0] === LF) return 1;
    return 0;
  }

  /** The stream ended here (an event not closed by a blank line counts, as SSE parsers dispatch it). */
  outcome(): StreamOutcome {
    this.#complete();
    const head = this.#last === undefined ? undefined : parseHead(this.#last);
    if (head === undefined) return 'cut';
    const { name, data } = head;
    switch (this.#api) {
      case 'messages':
        if (name === 'message_stop') return 'complete';
        return name === 'error' ? 'error' : 'cut';
      case 'responses':
        if (name === 'response.completed' || name === 'response.incomplete') return 'complete';
        return name === 'response.failed' || name === 'error' ? 'error' : 'cut';
      default:
        if (data.startsWith('[DONE]')) return 'complete';
        return name === 'error' || ERROR_DATA.test(data) ? 'error' : 'cut';
    }
  }

  /** The `sequence_number` an event after the last one takes (Responses API streams); 0 when unknown. */
  nextSequence(): number {
    const head = this.#last ?? this.#current;
    const match = SEQUENCE.exec(head.toString('latin1'));
    return match === null ? 0 : Number(match[1]) + 1;
  }

  #append(chunk: Buffer, from: number, to: number): void {
    const room = HEAD - this.#current.length;
    if (room <= 0 || to <= from) return;
    const piece = chunk.subarray(from, Math.min(to, from + room));
    this.#current = this.#current.length === 0 ? piece : Buffer.concat([this.#current, piece]);
  }

  /** The event being read is complete. */
  #complete(): void {
    const head = this.#current;
    this.#current = EMPTY;
    this.#keep(head);
  }

  /** A complete event's head: it is the last one (true), unless it was blank or only a comment. */
  #keep(head: Buffer): boolean {
    let i = 0;
    while (i < head.length && (head[i] === LF || head[i] === CR)) i++;
    if (i === head.length || head[i] === 58 /* ':' */) return false;
    this.#last = i === 0 ? head : head.subarray(i);
    return true;
  }
}

/**
 * The last blank line (LF LF, or with `crs` LF CR LF too) within `buf[from, to)`: where its event
 * ends (after the first LF) and where it ends. A read usually ends with one: that costs no search.
 */
export function lastBlank(buf: Buffer, from: number, to: number, crs: boolean): { at: number; end: number } | undefined {
  if (to - 2 >= from && buf[to - 1] === LF) {
    if (buf[to - 2] === LF) return { at: to - 1, end: to };
    if (crs && to - 3 >= from && buf[to - 2] === CR && buf[to - 3] === LF) return { at: to - 2, end: to };
  }
  const a = to - 2 < from ? -1 : buf.lastIndexOf(LF_LF, to - 2);
  const b = !crs || to - 3 < from ? -1 : buf.lastIndexOf(LF_CR_LF, to - 3);
  const aEnd = a >= from ? a + 2 : -1;
  const bEnd = b >= from ? b + 3 : -1;
  if (aEnd === -1 && bEnd === -1) return undefined;
  return aEnd >= bEnd ? { at: a + 1, end: aEnd } : { at: b + 1, end: bEnd };
}

/**
 * The head of an event: a view, not a copy. A read is never written to again once handed on (undici
 * gives views of the socket's own read buffers), so keeping a view of the last one or two is safe,
 * and costs no allocation per read.
 */
function viewHead(buf: Buffer, from: number, to: number): Buffer {
  if (to <= from) return EMPTY;
  return buf.subarray(from, Math.min(to, from + HEAD));
}

/** An event's name (its `event:` line, else its data's `"type"`, else `error` for `{"error":…}`) and the start of its data. */
function parseHead(head: Buffer): { name: string; data: string } {
  let name = '';
  let data: string | undefined;
  for (const raw of head.toString('utf8').split(/\r\n|\r|\n/)) {
    const line = raw.trimEnd();
    if (line.startsWith('event:')) name ||= line.slice(6).trim();
    else if (line.startsWith('data:') && data === undefined) data = line.slice(5).trimStart();
  }
  data ??= '';
  if (name === '' && data.startsWith('{')) name = ERROR_DATA.test(data) ? 'error' : (TYPE.exec(data)?.[1] ?? '');
  return { name, data };
}
