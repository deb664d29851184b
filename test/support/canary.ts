// A secret canary: a random value put where a secret would be (an environment variable, a literal
// key), then searched for on every surface a gateway shows (answers, logs, metrics, traces, files),
// as written and in the forms that hide it from a plain search: base64 at each of the three
// alignments a value inside a longer text can have, and hex. A part of it is searched too: an
// error that quotes the start of a value (JSON.parse's "Unexpected token" does) leaks that much.
import { randomBytes } from 'node:crypto';

/** A canary: letters and digits only (no escaping can change it), `prefix` then 24 random characters. */
export function newCanary(prefix = 'cnry'): string {
  return `${prefix}${randomBytes(18).toString('base64url').replace(/[-_]/g, 'x')}`;
}

/** A canary of digits only, 12 of them (for fields that take a number). */
export function newNumericCanary(): string {
  return `${1 + (randomBytes(1)[0]! % 9)}${[...randomBytes(11)].map((b) => b % 10).join('')}`;
}

export interface Needle {
  readonly form: string;
  readonly text: string;
}

/** What to search for: the canary, its 10-character parts, its base64 (three alignments) and hex. */
export function needlesOf(canary: string): Needle[] {
  const needles: Needle[] = [{ form: 'as written', text: canary }];
  for (let at = 1; at + 10 <= canary.length; at += 5) needles.push({ form: `characters ${at}-${at + 10}`, text: canary.slice(at, at + 10) });
  for (const pad of ['', 'x', 'xx']) {
    // The encoded characters that depend only on the canary's own bytes.
    const encoded = Buffer.from(pad + canary).toString('base64');
    const start = Math.ceil((pad.length * 4) / 3) + 1;
    needles.push({ form: `base64 (offset ${pad.length})`, text: encoded.slice(start, start + Math.floor((canary.length * 4) / 3) - 4) });
  }
  needles.push({ form: 'hex', text: Buffer.from(canary).toString('hex') });
  needles.push({ form: 'HEX', text: Buffer.from(canary).toString('hex').toUpperCase() });
  return needles;
}

export interface Finding {
  readonly surface: string;
  readonly form: string;
  /** The text around it, for the failure message. */
  readonly context: string;
}

/** Every place in `surfaces` (name → text) where any of `canaries` shows, in any of its forms. */
export function findCanaries(surfaces: ReadonlyMap<string, string>, canaries: readonly string[]): Finding[] {
  const findings: Finding[] = [];
  for (const canary of canaries) {
    const needles = needlesOf(canary);
    for (const [surface, text] of surfaces) {
      for (const needle of needles) {
        const at = text.indexOf(needle.text);
        if (at === -1) continue;
        findings.push({ surface, form: needle.form, context: text.slice(Math.max(0, at - 160), at + needle.text.length + 80) });
        break;
      }
    }
  }
  return findings;
}
