// fast-check draws of request header values for the guards' fuzz tests (the admin API's and an open
// proxy's): a value comes with what the guard must make of it, so that the test's oracle knows
// which answers are right.
import fc from 'fast-check';

/** What the guard must make of a value: `good` passes, `bad` is refused, `unknown` either. */
export type Verdict = 'good' | 'bad' | 'unknown';

export interface Drawn {
  readonly value: string | undefined;
  readonly verdict: Verdict;
}

/** One of `values` (undefined: the header is not sent), all with the same verdict. */
export const known = (verdict: Verdict, ...values: (string | undefined)[]): fc.Arbitrary<Drawn> => fc.constantFrom(...values).map((value): Drawn => ({ value, verdict }));

/** Visible ASCII, tab and obs-text: what a header value may carry on the wire. */
const headerChar = fc.oneof(
  { weight: 8, arbitrary: fc.integer({ min: 0x20, max: 0x7e }) },
  { weight: 1, arbitrary: fc.integer({ min: 0x80, max: 0xff }) },
  { weight: 1, arbitrary: fc.constant(0x09) },
).map((c) => String.fromCharCode(c));

/** Random header text, short or huge (8 KB), of unknown verdict; `trim`: without the white space a client's library would strip. */
export function randomHeaderText(options: { trim?: boolean } = {}): fc.Arbitrary<Drawn> {
  return fc
    .oneof(
      { weight: 6, arbitrary: fc.string({ unit: headerChar, maxLength: 60 }) },
      { weight: 1, arbitrary: fc.integer({ min: 1000, max: 8000 }).map((n) => `${'a'.repeat(n)}.example`) },
    )
    .map((value): Drawn => ({ value: options.trim ? value.trim() : value, verdict: 'unknown' }));
}

/** Weighted towards values that pass, so that every rule is reached often and requests pass too. */
export const drawn = (good: fc.Arbitrary<Drawn>, bad: fc.Arbitrary<Drawn>, weights = { good: 5, bad: 2 }, random = randomHeaderText()): fc.Arbitrary<Drawn> =>
  fc.oneof({ weight: weights.good, arbitrary: good }, { weight: weights.bad, arbitrary: bad }, { weight: 1, arbitrary: random });
