// Token usage of an OpenAI stream the client did not ask it for. The gateway needs the usage of
// every stream (limits, spend), so a chat or completions stream to an OpenAI-type provider is sent
// with `stream_options.include_usage: true`, whatever the client sent (no `stream_options`, `null`,
// `{}`, `include_usage: false`); when the client did not ask for it, what that adds is taken out
// again: the last chunk (empty `choices`, the usage) and the `"usage":null` of every other one.
import type { Json } from '../translate/types.ts';
import { lastBlank } from './stream-end.ts';

const LF = 10;
const CR = 13;

/** The body to send upstream, and whether the answer's usage must be stripped; undefined: send the client's. */
export function withStreamUsage(json: Json): Json | undefined {
  if (json.stream !== true) return undefined;
  const options = json.stream_options;
  // `null` is "no options" (OpenAI takes it so); any other non-object is the provider's to refuse.
  if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) return undefined;
  const given = options === null ? undefined : (options as Json | undefined);
  if (given?.include_usage === true) return undefined;
  return { ...json, stream_options: { ...given, include_usage: true } };
}

/**
 * Removes the usage the client did not ask for; every other byte passes as it came. Found by byte
 * search, nothing decoded: one search per `"usage"` (one per event), a read's complete events go
 * out as one buffer (the same buffer when nothing is taken out), an event still coming waits for
 * the next read.
 */
export class UsageStripper {
  #partial: Buffer | undefined;

  push(chunk: Buffer): Buffer {
    const data = this.#partial ? Buffer.concat([this.#partial, chunk]) : chunk;
    this.#partial = undefined;
    const end = afterLastBlank(data);
    if (end < data.length) this.#partial = data.subarray(end);
    return strip(data, end);
  }

  end(): Buffer {
    const rest = this.#partial;
    this.#partial = undefined;
    return rest ? strip(rest, rest.length) : EMPTY;
  }
}

const EMPTY = Buffer.alloc(0);
const COMMA = 44;
const USAGE = Buffer.from('"usage"');
const NULL = Buffer.from(':null');
const USAGE_NULL = Buffer.from('"usage":null');
const NO_CHOICES = Buffer.from('"choices":[]');
const LF_LF = Buffer.from('\n\n');
const LF_CR_LF = Buffer.from('\n\r\n');

/** Where the last blank line (LF LF or LF CR LF) within `data[0, to)` ends; 0: none. */
function afterLastBlank(data: Buffer, to = data.length): number {
  return lastBlank(data, 0, to, true)?.end ?? 0;
}

/** `usage` is followed by `:null`. */
function isNull(data: Buffer, after: number): boolean {
  for (let k = 0; k < NULL.length; k++) if (data[after + k] !== NULL[k]) return false;
  return true;
}

/**
 * `data[0, end)` (complete events) without each `,"usage":null` or `"usage":null,` (left to
 * right, as a regular expression of the two would take them) and without the usage chunk (an event
 * with `"usage"`, `"choices":[]` and no `"usage":null`).
 */
function strip(data: Buffer, end: number): Buffer {
  let cuts: number[] | undefined;
  let taken = 0; // where the last range taken out ended
  for (let at = data.indexOf(USAGE); at !== -1 && at < end; at = data.indexOf(USAGE, at + 1)) {
    const after = at + USAGE.length;
    if (isNull(data, after)) {
      const past = after + NULL.length;
      if (past > end) break;
      if (at > taken && data[at - 1] === COMMA) (cuts ??= []).push(at - 1, (taken = past));
      else if (past < end && data[past] === COMMA) (cuts ??= []).push(at, (taken = past + 1));
      continue;
    }
    // A usage that is not null: is its event the usage chunk? (Its bounds: the blank lines around it,
    // the line ends that begin it left out, as an SSE parser skips them.)
    let from = afterLastBlank(data, at);
    while (data[from] === LF || data[from] === CR) from++;
    const to = eventEnd(data, at, end);
    const event = data.subarray(from, to);
    // (An event with a "usage":null is not the usage chunk: none of it was taken out before `from`.)
    if (event.indexOf(NO_CHOICES) !== -1 && event.indexOf(USAGE_NULL) === -1) {
      (cuts ??= []).push(Math.max(from, taken), (taken = to));
      at = to - 1;
    }
  }
  if (cuts === undefined) return end === data.length ? data : end === 0 ? EMPTY : data.subarray(0, end);
  let size = end;
  for (let k = 0; k < cuts.length; k += 2) size -= cuts[k + 1]! - cuts[k]!;
  const out = Buffer.allocUnsafe(size);
  let written = 0;
  let from = 0;
  for (let k = 0; k < cuts.length; k += 2) {
    written += data.copy(out, written, from, cuts[k]!);
    from = cuts[k + 1]!;
  }
  data.copy(out, written, from, end);
  return out;
}

/** Where the event holding `at` ends: after the first blank line from `at`, or at `end`. */
function eventEnd(data: Buffer, at: number, end: number): number {
  const a = data.indexOf(LF_LF, at);
  const b = data.indexOf(LF_CR_LF, at);
  return Math.min(end, a === -1 || a >= end ? end : a + 2, b === -1 || b >= end ? end : b + 3);
}
