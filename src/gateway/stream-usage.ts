// Token usage of an OpenAI stream the client did not ask it for. The gateway needs the usage of
// every stream (limits, spend), so a chat or completions stream to an OpenAI-type provider is sent
// with `stream_options.include_usage: true`, whatever the client sent (no `stream_options`, `null`,
// `{}`, `include_usage: false`); when the client did not ask for it, what that adds is taken out
// again: the last chunk (empty `choices`, the usage) and the `"usage":null` of every other one.
import type { Json } from '../translate/types.ts';

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
 * search, nothing decoded: a read's complete events go out as one buffer (the same buffer when
 * nothing is taken out), an event still coming waits for the next read.
 */
export class UsageStripper {
  #partial: Buffer | undefined;

  push(chunk: Buffer): Buffer {
    const data = this.#partial ? Buffer.concat([this.#partial, chunk]) : chunk;
    this.#partial = undefined;
    const cuts: number[] = [];
    let start = 0;
    let usage = data.indexOf(USAGE);
    for (let i = data.indexOf(LF); i !== -1; i = data.indexOf(LF, i + 1)) {
      // An event ends at a blank line: LF LF, or LF CR LF.
      const next = data[i + 1] === CR ? i + 2 : i + 1;
      if (next >= data.length || data[next] !== LF) continue;
      if (usage !== -1 && usage < next + 1) {
        stripEvent(data, start, next + 1, cuts);
        usage = data.indexOf(USAGE, next + 1);
      }
      start = next + 1;
      i = next;
    }
    if (start < data.length) this.#partial = data.subarray(start);
    return without(data, start, cuts);
  }

  end(): Buffer {
    const rest = this.#partial;
    this.#partial = undefined;
    if (!rest) return EMPTY;
    const cuts: number[] = [];
    stripEvent(rest, 0, rest.length, cuts);
    return without(rest, rest.length, cuts);
  }
}

const EMPTY = Buffer.alloc(0);
const COMMA = 44;
const USAGE = Buffer.from('"usage"');
const USAGE_NULL = Buffer.from('"usage":null');
const NO_CHOICES = Buffer.from('"choices":[]');

/**
 * The ranges to take out of the event `data[from, to)`: all of it when it is the usage chunk (no
 * choices, the usage), else each `,"usage":null` or `"usage":null,` (left to right, as a regular
 * expression of the two would match them).
 */
function stripEvent(data: Buffer, from: number, to: number, cuts: number[]): void {
  const event = data.subarray(from, to);
  let at = event.indexOf(USAGE_NULL);
  if (at === -1) {
    if (event.indexOf(USAGE) !== -1 && event.indexOf(NO_CHOICES) !== -1) cuts.push(from, to);
    return;
  }
  let taken = 0; // where the last range taken out ended (in the event)
  for (; at !== -1; at = event.indexOf(USAGE_NULL, at + 1)) {
    const after = at + USAGE_NULL.length;
    if (at > taken && event[at - 1] === COMMA) {
      cuts.push(from + at - 1, from + after);
      taken = after;
    } else if (after < event.length && event[after] === COMMA) {
      cuts.push(from + at, from + after + 1);
      taken = after + 1;
    }
  }
}

/** `data[0, end)` with the `cuts` ranges left out: `data` itself when there are none. */
function without(data: Buffer, end: number, cuts: readonly number[]): Buffer {
  if (cuts.length === 0) return end === data.length ? data : end === 0 ? EMPTY : data.subarray(0, end);
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
