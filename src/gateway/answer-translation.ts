// A whole answer from a target that speaks another API, translated back to the client's: a JSON
// answer (read whole before it is rewritten) and an error answer's body.
import type { Translation } from '../translate/registry.ts';
import type { Json } from '../translate/types.ts';

/** A JSON answer in the client's API; undefined when it is not a JSON object (the provider's fault); throws when the translator fails on it. */
export function translatedAnswer(translation: Translation, chunks: Buffer[]): Buffer | undefined {
  const raw = Buffer.concat(chunks).toString('utf8');
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    parsed = undefined;
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return undefined;
  return Buffer.from(JSON.stringify(translation.translator.response(parsed as Json)));
}

/** An error answer's body in the client's API (whatever the body was, JSON or not); throws when the translator fails on it. */
export function translatedError(translation: Translation, status: number, body: Buffer): Buffer {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    parsed = undefined;
  }
  return Buffer.from(JSON.stringify(translation.translator.error(status, parsed)));
}
