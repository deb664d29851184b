// What a client sends (a model name, a path, a request id) goes into log lines cut to a bounded
// length, with its original length beside it: a 5 MB model name must not become a 5 MB log line.
// A string within the bound costs one length comparison.

import { cutText, QUOTED_MAX } from '../api/errors.ts';

/** Characters of a client-supplied string kept in a log line: as many as an error answer quotes. */
export const LOG_VALUE_MAX = QUOTED_MAX;

/** `value` cut to LOG_VALUE_MAX characters, ending in "…", never inside a surrogate pair. */
export function cutForLog(value: string): string {
  return `${cutText(value, LOG_VALUE_MAX)}…`;
}

/**
 * Cuts each of `fields` of `line` that is a string longer than LOG_VALUE_MAX, and adds
 * `<field>_length` with its original length (in UTF-16 code units, as JavaScript counts).
 */
export function capClientFields<T extends Record<string, unknown>>(line: T, fields: readonly (keyof T & string)[]): T {
  for (const field of fields) {
    const value = line[field];
    if (typeof value !== 'string' || value.length <= LOG_VALUE_MAX) continue;
    (line as Record<string, unknown>)[field] = cutForLog(value);
    (line as Record<string, unknown>)[`${field}_length`] = value.length;
  }
  return line;
}
