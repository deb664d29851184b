// The characters a terminal acts on, or that make a line read otherwise than it is: C0 and C1
// controls and DEL (ESC starts a sequence that can retitle or clear a terminal, move the cursor or
// rewrite a line already printed; a C1 control can do the same on its own), the Unicode line and
// paragraph separators, and the bidirectional marks, embeddings, overrides and isolates (U+202E
// shows what follows it reversed). Shared by what the CLI prints of a gateway's answers
// (commands/terminal-text.ts) and by the client values the logs carry (telemetry/log-cap.ts).

/** The character class, as the source of a RegExp `[…]`. */
export const CONTROL_CHARACTERS = '\\u0000-\\u001f\\u007f-\\u009f\\u2028\\u2029\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069';

/** `c` as the escape `\uXXXX` (JSON's, YAML's and JavaScript's). */
export function unicodeEscape(c: string): string {
  return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
}
