// The value schemas every section of the config is built of: names, and numbers, booleans and
// bounded durations, which may come from `${VAR}` interpolation as strings.
import { z } from 'zod';

/**
 * Numbers and booleans may come from `${VAR}` interpolation, which yields strings: a string that
 * is a plain number (or true/false) is read as one. Anything else is left for the schema to reject.
 */
const fromText = (value: unknown): unknown => {
  if (typeof value !== 'string') return value;
  const text = value.trim();
  if (text === 'true' || text === 'false') return text === 'true';
  return /^-?\d+(\.\d+)?$/.test(text) ? Number(text) : value;
};
export const fromEnv = <T extends z.ZodType>(schema: T) => z.preprocess(fromText, schema);

/**
 * The longest any duration setting may be: 24 days. A Node.js timer waits at most 2^31-1 ms (24.8
 * days); a longer one fires after 1 ms (with a TimeoutOverflowWarning), so `timeout_ms: 3000000000`
 * made every attempt time out at once. The margin covers what Node adds to some of them (a
 * keep-alive socket's timeout is idle_timeout_secs and one more second).
 */
export const MAX_DURATION_SECS = 24 * 24 * 60 * 60;
export const MAX_DURATION_MS = MAX_DURATION_SECS * 1000;
const TOO_LONG_MS = `expected at most ${MAX_DURATION_MS} milliseconds (24 days: no timer waits longer)`;
const TOO_LONG_SECS = `expected at most ${MAX_DURATION_SECS} seconds (24 days: no timer waits longer)`;
/** Every duration of the config is one of these four: each is bounded, so that no timer it sets can overflow. */
export const milliseconds = fromEnv(z.number().int().nonnegative('expected milliseconds >= 0').max(MAX_DURATION_MS, TOO_LONG_MS));
export const positiveMilliseconds = fromEnv(z.number().int().positive('expected milliseconds > 0').max(MAX_DURATION_MS, TOO_LONG_MS));
export const seconds = fromEnv(z.number().nonnegative('expected a number of seconds >= 0').max(MAX_DURATION_SECS, TOO_LONG_SECS));
export const positiveSeconds = fromEnv(z.number().positive('expected a number of seconds > 0').max(MAX_DURATION_SECS, TOO_LONG_SECS));

export const name = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/, 'expected a name of letters, digits, "_", "." or "-"');
