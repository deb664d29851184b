// Text from a gateway printed on an operator's terminal (`sluice status`, `sluice get`): resource
// names, a client's model name, anything a client or an admin wrote. A terminal acts on control
// characters: ESC starts a sequence that can retitle or clear it, move the cursor or rewrite a
// line already printed, and a C1 control (U+0080–U+009F) can do the same on its own. None is
// printed raw. The Unicode line separators and the bidirectional overrides are treated alike:
// they make a line seem to say what it does not. The logs escape the same characters in what a
// client sent (telemetry/log-cap.ts).
import { CONTROL_CHARACTERS as CONTROL, unicodeEscape } from '../api/control-characters.ts';

const CONTROLS = new RegExp(`[${CONTROL}]`, 'g');
const HAS_CONTROL = new RegExp(`[${CONTROL}]`);
/** The same but a line feed: a JSON or YAML document keeps its lines. */
const CONTROLS_BUT_NEWLINE = new RegExp(`[${CONTROL.replace('\\u0000-\\u001f', '\\u0000-\\u0009\\u000b-\\u001f')}]`, 'g');

export function hasControl(text: string): boolean {
  return HAS_CONTROL.test(text);
}

/** One line for a terminal: every control character (a line feed and a tab included) as "?". */
export function printable(text: string): string {
  return text.replace(CONTROLS, '?');
}

/** `printable` applied to every string of a JSON value, keys included. */
export function printableDeep(value: unknown): unknown {
  if (typeof value === 'string') return printable(value);
  if (Array.isArray(value)) return value.map(printableDeep);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [printable(k), printableDeep(v)]));
  return value;
}

/**
 * JSON or YAML text whose control characters are all inside double-quoted strings (JSON.stringify
 * leaves C1 controls and U+2028 raw; YAML's double-quoted scalars do too), each written as the
 * escape `\uXXXX`, which both formats read back as the same character: the document means what it
 * meant, and prints harmlessly. Line feeds are kept (they are the document's own lines).
 */
export function escapeControls(text: string): string {
  return text.replace(CONTROLS_BUT_NEWLINE, unicodeEscape);
}
