// The redaction of the bodies the ledger keeps (`ledger.bodies`), before anything is written: the
// built-in rules for secrets (API keys, AWS access key ids, bearer tokens, JWTs, private keys, JSON
// fields named like secrets) and personal data (e-mail addresses, card numbers that pass Luhn,
// E.164 phone numbers), each match made `[redacted:<kind>]`, then the configured patterns, each
// match made `[redacted]`. And a captured body made what the record keeps: cut to `max_bytes`, as
// text when it is UTF-8, as base64 when it is not.
import { isUtf8 } from 'node:buffer';
import type { LedgerBodies } from './record.ts';

/** What a built-in rule found: the `<kind>` of `[redacted:<kind>]`. */
export type RedactionKind = 'private_key' | 'secret_field' | 'jwt' | 'api_key' | 'aws_key' | 'bearer' | 'email' | 'card' | 'phone';

/** A rule: a global pattern and what its match becomes, or a search of its own. */
type Rule =
  | {
      readonly pattern: RegExp;
      /** The text a match becomes; the match itself: not redacted after all (a number that fails Luhn). */
      readonly replace: (match: string, ...groups: string[]) => string;
    }
  | { readonly find: (text: string) => Span[] };

/** A span of the text to replace. */
interface Span {
  readonly start: number;
  readonly end: number;
  readonly replacement: string;
}

const mark = (kind: RedactionKind): string => `[redacted:${kind}]`;

/** The names of JSON fields whose string value is a secret: `api_key`, `x-api-key`, `apiKey`, `client_secret`, `password`, `access_token`, `authorization`... */
const SECRET_NAME = String.raw`[\w-]{0,40}?(?:api[_-]?key|secret|password|passwd|private[_-]?key|token|authorization)`;

/** Whether the digits pass the Luhn check (card numbers do; a random number one time in ten). */
export function luhn(digits: string): boolean {
  let sum = 0;
  for (let i = digits.length - 1, double = false; i >= 0; i--, double = !double) {
    let d = digits.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return false;
    if (double && (d *= 2) > 9) d -= 9;
    sum += d;
  }
  return digits.length > 0 && sum % 10 === 0;
}

/** A character of an address's local part: `[A-Za-z0-9_.%+-]`. */
function isLocal(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 46 || c === 37 || c === 43 || c === 45;
}

/** An address's domain, from just after its `@`: labels, then a top-level one of letters. */
const DOMAIN = /[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}(?![\w-])/y;

/**
 * E-mail addresses, found from their `@` (a pattern tried at every word of the text would cost a
 * body far more): the local part is the run of its characters before it, at most 64, a JSON
 * escape before it (`\n`, `\u001b`) left out.
 */
function emails(text: string): Span[] {
  const spans: Span[] = [];
  for (let at = text.indexOf('@'); at !== -1; at = text.indexOf('@', at + 1)) {
    let start = at;
    while (start > 0 && at - start < 64 && isLocal(text.charCodeAt(start - 1))) start--;
    let backslashes = 0;
    while (start - backslashes > 0 && text.charCodeAt(start - backslashes - 1) === 92) backslashes++;
    // An odd number of backslashes before: the run starts with an escape's letter (or \uXXXX).
    if (backslashes % 2 === 1) start += text[start] === 'u' && /^[0-9A-Fa-f]{4}$/.test(text.slice(start + 1, start + 5)) ? 5 : 1;
    if (start >= at) continue;
    DOMAIN.lastIndex = at + 1;
    const domain = DOMAIN.exec(text);
    if (domain !== null) spans.push({ start, end: at + 1 + domain[0].length, replacement: mark('email') });
  }
  return spans;
}

/**
 * Where a secret may start: after none of `chars` (a word's characters) nor a backslash, or right
 * after a JSON escape (`\n`, `\t`, `\"`, `\u001b`...): a body's text is often a JSON string, where
 * "line\nsk-…" has an `n` before the key.
 */
const startAfterNone = (chars: string): string => String.raw`(?:(?<=\\[nrtbf"/\\]|\\u[0-9A-Fa-f]{4})|(?<![${chars}\\]))`;
const WORD_START = startAfterNone(String.raw`\w`);

/**
 * The built-in rules. Every repetition that could scan far is bounded or anchored on a literal, so
 * that no body makes one slow. A secret's field keeps its name (the JSON stays JSON), a bearer
 * token its scheme.
 */
const RULES: readonly Rule[] = [
  // A PEM private key block, or what is left of one a cut ended.
  { replace: () => mark('private_key'), pattern: /-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY-----(?:[\s\S]*?-----END[A-Z0-9 ]{0,40} PRIVATE KEY-----|[\s\S]*$)/g },
  // "api_key": "…", and the same inside a JSON string (a prompt that quotes JSON): \"api_key\": \"…\".
  {
    pattern: new RegExp(String.raw`"(${SECRET_NAME})"(\s*:\s*)"(?:[^"\\]|\\.)*"`, 'gi'),
    replace: (_match, name, colon) => `"${name}"${colon}"${mark('secret_field')}"`,
  },
  {
    pattern: new RegExp(String.raw`\\"(${SECRET_NAME})\\"(\s*:\s*)\\"(?:[^"\\]|\\[^"])*\\"`, 'gi'),
    replace: (_match, name, colon) => `\\"${name}\\"${colon}\\"${mark('secret_field')}\\"`,
  },
  // header.payload.signature, base64url; a JWT's header is JSON, so it starts with eyJ ('{"').
  { replace: () => mark('jwt'), pattern: new RegExp(String.raw`${WORD_START}eyJ[\w-]{8,}\.[\w-]{4,}\.[\w-]*`, 'g') },
  // OpenAI's sk-…, sk-proj-…; Anthropic's sk-ant-….
  { replace: () => mark('api_key'), pattern: new RegExp(String.raw`${WORD_START}sk-[\w-]{20,}`, 'g') },
  // AWS access key ids: long-term (AKIA) and temporary (ASIA).
  { replace: () => mark('aws_key'), pattern: new RegExp(String.raw`${WORD_START}(?:AKIA|ASIA)[A-Z0-9]{16}\b`, 'g') },
  // Bearer <token> (after spaces, or a JSON string's \t): a token has a digit or a symbol, so "bearer instruments" stays.
  {
    pattern: new RegExp(String.raw`${WORD_START}(bearer)(?:\s|\\[nrt]){1,16}(?=[\w~+/-]{0,4096}[\d.~+/-])[\w.~+/-]{8,}=*`, 'gi'),
    replace: (_match, scheme) => `${scheme} ${mark('bearer')}`,
  },
  { find: emails },
  // 13 to 19 digits, together or in groups (4-4-4-4, 4-6-5), starting as the card networks' do (2 to
  // 6), that pass Luhn; not part of a longer number, a word, a decimal or a UUID.
  {
    pattern: new RegExp(String.raw`${startAfterNone(String.raw`\w.+-`)}(?:\d{13,19}|\d{4}([ -])\d{4}\1\d{4}\1\d{1,4}(?:\1\d{1,3})?|\d{4}([ -])\d{6}\2\d{4,5})(?![\w+-]|\.\d)`, 'g'),
    replace: (match) => {
      const digits = match.replace(/[ -]/g, '');
      return digits.length >= 13 && digits.length <= 19 && digits[0]! >= '2' && digits[0]! <= '6' && luhn(digits) ? mark('card') : match;
    },
  },
  // E.164: a plus, then 8 to 15 digits, the first not 0.
  { replace: () => mark('phone'), pattern: new RegExp(String.raw`${startAfterNone(String.raw`\w+/=`)}\+[1-9]\d{7,14}(?!\d)`, 'g') },
];

/** A configured pattern (`ledger.bodies.redact`): its source and flags. */
export interface RedactPatternSource {
  readonly pattern: string;
  readonly flags?: string;
}

/**
 * The redaction of one `ledger.bodies`: the built-in rules, then the configured patterns. Every
 * rule is matched on the text as it is; where two matches overlap, the one that starts first
 * (the earlier rule on a tie) takes both, so that nothing of either is left.
 */
export class Redaction {
  readonly #rules: readonly Rule[];

  /** Throws on a pattern that is not a regular expression (the config's schema refuses those first). */
  constructor(patterns: readonly (string | RedactPatternSource)[] = []) {
    const configured = patterns.map((p): Rule => {
      const pattern = typeof p === 'string' ? new RegExp(p, 'g') : new RegExp(p.pattern, `${p.flags ?? ''}g`);
      return { pattern, replace: () => '[redacted]' };
    });
    this.#rules = [...RULES, ...configured];
  }

  /** `text` with every secret and personal datum a rule finds replaced. */
  redact(text: string): string {
    return this.redactUpTo(text, text.length);
  }

  /**
   * `text[0, stop)` redacted: a match that starts before `stop` is replaced whole, also when it
   * ends after (the text past `stop` is there so that one across it is seen whole); nothing that
   * starts at or after `stop` is kept, not even the start of a secret the text cut short.
   */
  redactUpTo(text: string, stop: number): string {
    let out = '';
    let at = 0;
    for (const span of this.#spans(text)) {
      if (span.start >= stop) break;
      out += text.slice(at, span.start) + span.replacement;
      at = span.end;
    }
    return at < stop ? out + text.slice(at, stop) : out;
  }

  /** The matches of every rule, in order, overlaps merged. */
  #spans(text: string): Span[] {
    const found: (Span & { readonly rule: number })[] = [];
    this.#rules.forEach((rule, index) => {
      if ('find' in rule) {
        for (const span of rule.find(text)) found.push({ ...span, rule: index });
        return;
      }
      for (const match of text.matchAll(rule.pattern)) {
        // An empty match (a configured `x*`) redacts nothing.
        if (match[0] === '') continue;
        const replacement = rule.replace(match[0], ...match.slice(1).map((g) => g ?? ''));
        if (replacement !== match[0]) found.push({ start: match.index, end: match.index + match[0].length, replacement, rule: index });
      }
    });
    found.sort((a, b) => a.start - b.start || a.rule - b.rule);
    const spans: Span[] = [];
    for (const span of found) {
      const last = spans.at(-1);
      if (last !== undefined && span.start < last.end) {
        // Overlapping: the first one's replacement stands for both.
        if (span.end > last.end) spans[spans.length - 1] = { ...last, end: span.end };
      } else spans.push(span);
    }
    return spans;
  }
}

/** A body as captured: its first bytes (max_bytes and a margin past them), and whether it went on. */
export interface CapturedBody {
  readonly bytes: Buffer;
  /** The body was longer than `bytes`. */
  readonly more: boolean;
}

/** Where the last whole UTF-8 character of `bytes[0, end)` ends (a cut may split one). */
function utf8End(bytes: Buffer, end: number): number {
  let start = end;
  // Back over at most 3 continuation bytes to the lead byte of the last character.
  while (start > 0 && end - start < 3 && (bytes[start - 1]! & 0xc0) === 0x80) start--;
  if (start === 0) return end;
  const lead = bytes[start - 1]!;
  const size = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return end - (start - 1) < size ? start - 1 : end;
}

/** A body decoded: text (UTF-8 without NUL, which PostgreSQL's text cannot hold), or bytes as latin1; and where its first `max_bytes` end in it. */
interface Decoded {
  readonly text: string;
  readonly binary: boolean;
  /** The text's length (UTF-16 units) of its first `max_bytes` bytes, whole characters. */
  readonly stop: number;
}

function decode(body: CapturedBody, maxBytes: number): Decoded {
  const bytes = body.bytes;
  const head = bytes.subarray(0, body.more ? utf8End(bytes, bytes.length) : bytes.length);
  // Bytes that are not text are redacted as latin1 (one character a byte: the rules' ASCII is found), and kept whole.
  if (!isUtf8(head) || head.includes(0)) return { text: bytes.toString('latin1'), binary: true, stop: Math.min(maxBytes, bytes.length) };
  const text = head.toString('utf8');
  return { text, binary: false, stop: head.length <= maxBytes ? text.length : head.toString('utf8', 0, utf8End(head, maxBytes)).length };
}

/** The body redacted and cut to `maxBytes` (on a character's boundary when it is text): its bytes and whether any were left out. */
function kept(body: CapturedBody, redaction: Redaction, maxBytes: number): { bytes: Buffer; binary: boolean; truncated: boolean } {
  const decoded = decode(body, maxBytes);
  const bytes = Buffer.from(redaction.redactUpTo(decoded.text, decoded.stop), decoded.binary ? 'latin1' : 'utf8');
  const truncated = body.more || decoded.stop < decoded.text.length;
  if (bytes.length <= maxBytes) return { bytes, binary: decoded.binary, truncated };
  // Markers longer than what they replaced took it past max_bytes.
  return { bytes: bytes.subarray(0, decoded.binary ? maxBytes : utf8End(bytes, maxBytes)), binary: decoded.binary, truncated: true };
}

/**
 * A request's bodies as the record keeps them: each redacted, then cut to `maxBytes` (a secret
 * across the cut is redacted whole when the capture's margin holds it). Both are text when both
 * are UTF-8; otherwise both are base64 (`encoding: 'base64'`).
 */
export function ledgerBodies(request: CapturedBody, response: CapturedBody, redaction: Redaction, maxBytes: number): LedgerBodies {
  const req = kept(request, redaction, maxBytes);
  const res = kept(response, redaction, maxBytes);
  const encoding = req.binary || res.binary ? 'base64' : 'utf8';
  return {
    request_body: req.bytes.toString(encoding),
    response_body: res.bytes.toString(encoding),
    request_truncated: req.truncated,
    response_truncated: res.truncated,
    encoding,
  };
}
