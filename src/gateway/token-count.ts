// Tokens counted from text, for output whose usage no provider reported: gpt-tokenizer's
// o200k_base, the encoding of OpenAI's GPT-4o, GPT-4.1, o-series and GPT-5 models. It is loaded on
// the first count only (about 0.5 s and 70 MB of memory once), so a gateway that never estimates
// never pays for it.

type Counter = (text: string) => number;

let counter: Counter | undefined;
let loading: Promise<Counter> | undefined;

/** Any text counts, special tokens included: a model may well write "<|endoftext|>". */
const ANY_TEXT = { disallowedSpecial: new Set<string>() };

/** Four bytes a token: what is counted if the tokenizer cannot be loaded at all. */
const byBytes: Counter = (text) => Math.ceil(Buffer.byteLength(text) / 4);

/** The tokens of `text`: at once when the tokenizer is loaded, else once it is. */
export function countTokens(text: string): number | Promise<number> {
  if (text === '') return 0;
  if (counter !== undefined) return safely(counter, text);
  loading ??= import('gpt-tokenizer/encoding/o200k_base').then(
    (tokenizer) => (counter = (t) => tokenizer.countTokens(t, ANY_TEXT)),
    () => (counter = byBytes),
  );
  return loading.then((count) => safely(count, text));
}

function safely(count: Counter, text: string): number {
  try {
    return count(text);
  } catch {
    return byBytes(text);
  }
}
