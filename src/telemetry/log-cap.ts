// What a client sends (a model name, a path, a request id) goes into log lines cut to a bounded
// length, with its original length beside it: a 5 MB model name must not become a 5 MB log line.
// And written so that it reads as what it is: a control character JSON leaves raw (DEL, C1, the
// line separators, the bidirectional overrides such as U+202E, which shows the rest of a line
// reversed on a terminal or in a log viewer) is written as the text `\u202e`, as the CLI escapes
// them (commands/terminal-text.ts). C0 controls are JSON's own escapes already, in the JSON lines
// and in pino-pretty's. A value within the bound and without such a character is logged as it is,
// at the cost of a length comparison and one regular-expression test (no copy).

import { cutText, QUOTED_MAX } from '../api/errors.ts';
import { CONTROL_CHARACTERS, unicodeEscape } from '../api/control-characters.ts';

/** Characters of a client-supplied string kept in a log line: as many as an error answer quotes. */
export const LOG_VALUE_MAX = QUOTED_MAX;

/** The control characters JSON.stringify writes raw (it escapes U+0000–U+001F itself). */
const RAW_IN_JSON = CONTROL_CHARACTERS.replace('\\u0000-\\u001f', '');
const HAS_RAW_CONTROL = new RegExp(`[${RAW_IN_JSON}]`);
const RAW_CONTROLS = new RegExp(`[${RAW_IN_JSON}]`, 'g');

/** Whether `value` is logged otherwise than it is: longer than the bound, or holding a control character JSON leaves raw. */
export function needsCare(value: string): boolean {
  return value.length > LOG_VALUE_MAX || HAS_RAW_CONTROL.test(value);
}

/** `value` cut to LOG_VALUE_MAX characters, ending in "…", never inside a surrogate pair. */
export function cutForLog(value: string): string {
  return `${cutText(value, LOG_VALUE_MAX)}…`;
}

/** `value` with each control character JSON leaves raw written as the text `\uXXXX`. */
export function escapeForLog(value: string): string {
  return value.replace(RAW_CONTROLS, unicodeEscape);
}

/**
 * Cuts each of `fields` of `line` that is a string longer than LOG_VALUE_MAX, and adds
 * `<field>_length` with its original length (in UTF-16 code units, as JavaScript counts); then
 * escapes the control characters JSON leaves raw in what is kept.
 */
export function capClientFields<T extends Record<string, unknown>>(line: T, fields: readonly (keyof T & string)[]): T {
  for (const field of fields) {
    const value = line[field];
    if (typeof value !== 'string' || !needsCare(value)) continue;
    const long = value.length > LOG_VALUE_MAX;
    (line as Record<string, unknown>)[field] = escapeForLog(long ? cutForLog(value) : value);
    if (long) (line as Record<string, unknown>)[`${field}_length`] = value.length;
  }
  return line;
}
