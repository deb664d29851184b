// What a committed answer used. The usage its provider reports is read as the bytes pass
// (usage.ts); when the provider never gave its last word on it (the stream was cut, the client
// left and the read after it ran out, the provider sends none), the usage is estimated and marked
// so: the prompt as the provider reported it, else as the limiter reserved it (the body's bytes /
// 4), and the output counted with a tokenizer from the text the answer carried (output-text.ts).
import type { Endpoint } from '../providers/types.ts';
import type { Usage } from '../api/usage.ts';
import { JsonUsageReader, SseUsageReader } from './usage.ts';
import { OutputText } from './output-text.ts';
import { StreamEndWatch, type StreamOutcome } from './stream-end.ts';
import { countTokens } from './token-count.ts';

export interface MeterOptions {
  /** The upstream's endpoint: what its answer looks like. */
  readonly api: Endpoint;
  readonly sse: boolean;
  /** Watch for the stream's final event by byte search (a stream relayed untranslated; a translator knows its own). */
  readonly watchEnd: boolean;
  /** An answer that is never billed (a token count): nothing is estimated for it. */
  readonly estimates: boolean;
}

export class UsageMeter {
  readonly #reader: SseUsageReader | JsonUsageReader;
  readonly #text: OutputText | undefined;
  readonly #end: StreamEndWatch | undefined;
  readonly #options: MeterOptions;

  constructor(options: MeterOptions) {
    this.#options = options;
    this.#reader = options.sse ? new SseUsageReader() : new JsonUsageReader();
    this.#text = options.sse && options.estimates ? new OutputText(options.api, true) : undefined;
    this.#end = options.sse && options.watchEnd ? new StreamEndWatch(options.api) : undefined;
  }

  push(chunk: Buffer): void {
    this.#reader.push(chunk);
    this.#text?.push(chunk);
    this.#end?.push(chunk);
  }

  /** How the stream ended, when watched; undefined otherwise. */
  outcome(): StreamOutcome | undefined {
    return this.#end?.outcome();
  }

  /** The `sequence_number` the next event of a relayed Responses stream takes. */
  nextSequence(): number {
    return this.#end?.nextSequence() ?? 0;
  }

  /**
   * The usage: the provider's when it gave its last word, else an estimate (`estimated: true`)
   * from `promptTokens` (the limiter's estimate of the prompt) and the output text; a promise
   * when the tokenizer is still to be loaded.
   */
  usage(promptTokens: number): Usage | undefined | Promise<Usage> {
    const reported = this.#reader.finish();
    if (this.#reader.final || !this.#options.estimates) return reported;
    let text = this.#text;
    if (text === undefined) {
      // A JSON answer: its body is read for the output only now, when it is needed.
      text = new OutputText(this.#options.api, false);
      const body = (this.#reader as JsonUsageReader).body;
      if (body !== undefined) text.push(body);
    }
    const { text: output, scale } = text.text();
    const estimate = (tokens: number): Usage => {
      const usage: Usage = { ...reported, prompt: reported?.prompt ?? promptTokens, completion: Math.max(reported?.completion ?? 0, Math.ceil(tokens * scale)), estimated: true };
      return usage;
    };
    const counted = countTokens(output);
    return typeof counted === 'number' ? estimate(counted) : counted.then(estimate);
  }
}
