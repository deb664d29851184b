// Token usage of an OpenAI stream the client did not ask it for. The gateway needs the usage of
// every stream (limits, spend), so a chat or completions stream to an OpenAI-type provider is sent
// with `stream_options.include_usage: true`, whatever the client sent (no `stream_options`, `null`,
// `{}`, `include_usage: false`); when the client did not ask for it, what that adds is taken out
// again: the last chunk (empty `choices`, the usage) and the `"usage":null` of every other one.
import type { Json } from '../translate/types.ts';
import type { StreamTranslator } from '../translate/types.ts';

const LF = 10;
const CR = 13;
const USAGE_NULL = /,"usage":null|"usage":null,/g;

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

/** Removes the usage the client did not ask for, event by event; every other byte passes as it came. */
export class UsageStripper implements StreamTranslator {
  #partial: Buffer | undefined;

  push(chunk: Buffer): string {
    const data = this.#partial ? Buffer.concat([this.#partial, chunk]) : chunk;
    this.#partial = undefined;
    let out = '';
    let start = 0;
    for (let i = data.indexOf(LF); i !== -1; i = data.indexOf(LF, i + 1)) {
      // An event ends at a blank line: LF LF, or LF CR LF.
      const next = data[i + 1] === CR ? i + 2 : i + 1;
      if (next >= data.length || data[next] !== LF) continue;
      out += this.#event(data.toString('utf8', start, next + 1));
      start = next + 1;
      i = next;
    }
    if (start < data.length) this.#partial = data.subarray(start);
    return out;
  }

  end(): string {
    const rest = this.#partial;
    this.#partial = undefined;
    return rest ? this.#event(rest.toString('utf8')) : '';
  }

  #event(text: string): string {
    if (!text.includes('"usage"')) return text;
    // The usage chunk: no choices, the usage. The client did not ask for it.
    if (text.includes('"choices":[]') && !text.includes('"usage":null')) return '';
    return text.replace(USAGE_NULL, '');
  }
}
