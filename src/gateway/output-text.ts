// The text a model produced, collected from its answer by byte search so that its tokens can be
// counted when the provider never reported them (the stream was cut, the client left and the
// read after it ran out, the provider sends no usage). The reads are kept as they came and
// searched only if the text is asked for (or once they grow long); no event is parsed: the string
// values of a few keys are cut out as they are (JSON escapes and all) and decoded only if counted.
import type { Endpoint } from '../providers/types.ts';

/** Text kept for counting; past it only its length is, and the count is scaled up. */
const MAX_KEPT = 256 * 1024;
/** Reads kept unscanned, at most (bytes): a longer answer is scanned as it goes. */
const HELD = 512 * 1024;
const QUOTE = 34;
const BACKSLASH = 92;
const COLON = 58;

const keys = (...names: string[]): readonly Buffer[] => names.map((name) => Buffer.from(`"${name}"`));

/** Where each API's streamed events carry the output (text, tool arguments, reasoning). */
const STREAM_KEYS: Partial<Record<Endpoint, readonly Buffer[]>> = {
  chat: keys('content', 'reasoning_content', 'reasoning', 'refusal', 'arguments'),
  completions: keys('text'),
  // Deltas only: the `.done` events and response.completed repeat the whole text.
  responses: keys('delta'),
  messages: keys('text', 'partial_json', 'thinking'),
};

/** Where each API's JSON answer carries it. */
const BODY_KEYS: Partial<Record<Endpoint, readonly Buffer[]>> = {
  chat: keys('content', 'reasoning_content', 'refusal', 'arguments'),
  completions: keys('text'),
  responses: keys('text', 'arguments'),
  messages: keys('text', 'thinking'),
};

export class OutputText {
  readonly #keys: readonly Buffer[];
  /** The keys by the first letter of their name: most quotes in an event open no key of ours. */
  readonly #byFirst: readonly (readonly Buffer[] | undefined)[];
  /** Reads not scanned yet, and their size. */
  #held: Buffer[] = [];
  #heldBytes = 0;
  /** The values kept, still JSON-escaped. */
  #kept = '';
  #keptBytes = 0;
  /** Every output byte seen, kept or not. */
  #bytes = 0;
  /** A value runs on into the next read, after this many backslashes. */
  #open = false;
  #backslashes = 0;

  /** `api`: the upstream's endpoint; `stream`: its SSE events, else its JSON body. */
  constructor(api: Endpoint, stream: boolean) {
    this.#keys = (stream ? STREAM_KEYS : BODY_KEYS)[api] ?? [];
    const byFirst: Buffer[][] = [];
    for (const key of this.#keys) (byFirst[key[1]!] ??= []).push(key);
    this.#byFirst = byFirst;
  }

  /**
   * A read of the answer. It is only kept (a reference, no copy): most answers report their usage,
   * and then nothing of this is ever read. Past HELD bytes what is kept is scanned and let go.
   */
  push(chunk: Buffer): void {
    if (this.#keys.length === 0) return;
    this.#held.push(chunk);
    this.#heldBytes += chunk.length;
    if (this.#heldBytes > HELD) this.#scanHeld();
  }

  #scanHeld(): void {
    const held = this.#held;
    this.#held = [];
    this.#heldBytes = 0;
    for (const chunk of held) this.#scan(chunk);
  }

  #scan(chunk: Buffer): void {
    const byFirst = this.#byFirst;
    let i = 0;
    if (this.#open) {
      i = this.#value(chunk, 0, this.#backslashes);
      if (i === -1) return;
    }
    // One pass over the bytes (cheaper than a search per key): at each quote, is a key named?
    const n = chunk.length;
    for (; i < n; i++) {
      if (chunk[i] !== QUOTE) continue;
      const candidates = byFirst[chunk[i + 1]!];
      if (candidates === undefined) continue;
      const key = named(chunk, i, candidates);
      if (key === 0) continue;
      let at = skipSpace(chunk, i + key);
      if (chunk[at] !== COLON) continue; // a value that happens to read "text", not a key
      at = skipSpace(chunk, at + 1);
      if (chunk[at] !== QUOTE) continue; // null, a number, an object
      const end = this.#value(chunk, at + 1, 0);
      if (end === -1) return;
      i = end - 1;
    }
  }

  /** The text, decoded, and how much to scale its count by (more than 1 once past what is kept). */
  text(): { text: string; scale: number } {
    this.#scanHeld();
    return { text: unescape(this.#kept), scale: this.#keptBytes === 0 ? 1 : this.#bytes / this.#keptBytes };
  }

  /** Reads a string value from `start` to its closing quote; returns where it ended, or -1 when it runs on. */
  #value(chunk: Buffer, start: number, carried: number): number {
    let q = chunk.indexOf(QUOTE, start);
    while (q !== -1 && escaped(chunk, start, q, carried)) q = chunk.indexOf(QUOTE, q + 1);
    const end = q === -1 ? chunk.length : q;
    this.#keep(chunk, start, end);
    if (q !== -1) {
      this.#open = false;
      return q + 1;
    }
    this.#open = true;
    let run = 0;
    while (run < end - start && chunk[end - 1 - run] === BACKSLASH) run++;
    this.#backslashes = run === end - start ? carried + run : run;
    return -1;
  }

  #keep(chunk: Buffer, from: number, to: number): void {
    if (to <= from) return;
    this.#bytes += to - from;
    const room = MAX_KEPT - this.#keptBytes;
    if (room <= 0) return;
    const until = Math.min(to, from + room);
    this.#kept += chunk.toString('utf8', from, until);
    this.#keptBytes += until - from;
  }
}

/** The length of the key (quotes included) that starts at `at`, or 0. */
function named(chunk: Buffer, at: number, keys: readonly Buffer[]): number {
  for (let j = 0; j < keys.length; j++) {
    const key = keys[j]!;
    if (at + key.length > chunk.length) continue;
    let k = 2;
    while (k < key.length && chunk[at + k] === key[k]) k++;
    if (k === key.length) return k;
  }
  return 0;
}

function skipSpace(chunk: Buffer, i: number): number {
  while (i < chunk.length && (chunk[i] === 32 || chunk[i] === 9 || chunk[i] === 10 || chunk[i] === 13)) i++;
  return i;
}

/** Whether the quote at `q` is escaped: an odd run of backslashes before it (carried over from the last read when the run reaches `start`). */
function escaped(chunk: Buffer, start: number, q: number, carried: number): boolean {
  let run = 0;
  while (q - 1 - run >= start && chunk[q - 1 - run] === BACKSLASH) run++;
  if (q - run === start) run += carried;
  return run % 2 === 1;
}

const ESCAPES: Readonly<Record<string, string>> = { n: '\n', t: '\t', r: '\r', b: '\b', f: '\f', '"': '"', '\\': '\\', '/': '/' };

/** JSON string escapes decoded; a piece cut in the middle of one keeps it as it is. */
function unescape(raw: string): string {
  if (!raw.includes('\\')) return raw;
  return raw.replace(/\\(u[0-9a-fA-F]{4}|.)/g, (whole, code: string) => (code.length === 5 ? String.fromCharCode(parseInt(code.slice(1), 16)) : (ESCAPES[code] ?? whole)));
}
