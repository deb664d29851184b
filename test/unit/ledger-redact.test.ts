// The redaction of the bodies the ledger keeps (src/ledger/redact.ts): each built-in rule on what it
// is for, Luhn, none of them on what a request or an answer is mostly made of (numbers, UUIDs,
// request ids, timestamps, ordinary words), the configured patterns after them (and a bad one
// refused by the config's schema, by its index); a body made what the record keeps (cut at
// max_bytes on a character, base64 when it is not text, a secret across the cut redacted whole);
// the capture on the request context (src/server/context.ts's KeptBodies); and a property: no
// secret injected anywhere in a body survives, in plain text or inside a JSON string.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ledgerBodies, luhn, Redaction, type CapturedBody } from '../../src/ledger/redact.ts';
import { KeptBodies } from '../../src/server/context.ts';
import { parseConfig } from '../../src/config/load.ts';
import { ledgerSchema } from '../../src/config/ledger-schema.ts';

const defaults = new Redaction();
const redact = (text: string) => defaults.redact(text);

describe('the built-in rules', () => {
  test('API keys: OpenAI (sk-, sk-proj-) and Anthropic (sk-ant-)', () => {
    assert.equal(redact('key sk-abcdefghijklmnopqrstuvwxyz012345 end'), 'key [redacted:api_key] end');
    assert.equal(redact('"sk-proj-Ab12_cd34-EF56gh78IJ90kl12MN34op56"'), '"[redacted:api_key]"');
    assert.equal(redact('x=sk-ant-api03-' + 'A1b2C3d4E5'.repeat(9) + '-_AA;'), 'x=[redacted:api_key];');
    // Too short to be a key, or part of a word.
    assert.equal(redact('sk-short and task-force-of-the-twentieth-century'), 'sk-short and task-force-of-the-twentieth-century');
  });

  test('AWS access key ids: AKIA and ASIA, 20 characters', () => {
    assert.equal(redact('AKIAIOSFODNN7EXAMPLE ASIAY34FZKBOKMUTVV7A'), '[redacted:aws_key] [redacted:aws_key]');
    assert.equal(redact('AKIAIOSFODNN7EXAMPL AKIAIOSFODNN7EXAMPLEX'), 'AKIAIOSFODNN7EXAMPL AKIAIOSFODNN7EXAMPLEX', '19 and 21 characters are not ids');
  });

  test('Bearer <token>: the scheme kept, the token gone; English left alone', () => {
    assert.equal(redact('Authorization: Bearer abc123.def-456_ghi~789+/=='), 'Authorization: Bearer [redacted:bearer]');
    assert.equal(redact('authorization: bearer 0123456789abcdef'), 'authorization: bearer [redacted:bearer]');
    assert.equal(redact('the bearer instruments, Bearer of news'), 'the bearer instruments, Bearer of news');
  });

  test('JWTs: three base64url parts, the first JSON (eyJ)', () => {
    const jwt = 'eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U';
    assert.equal(redact(`token=${jwt}&x=1`), 'token=[redacted:jwt]&x=1');
    assert.equal(redact('Bearer ' + jwt), 'Bearer [redacted:bearer]', 'one match over another: the first takes both');
    assert.equal(redact('eyJhbGciOiJIUzI1NiJ9 alone'), 'eyJhbGciOiJIUzI1NiJ9 alone', 'one part is not a JWT');
  });

  test('private keys: a PEM block (RSA, EC, OpenSSH, PKCS#8), in text or JSON-escaped; one a cut ended goes to the end', () => {
    for (const type of ['', 'RSA ', 'EC ', 'OPENSSH ', 'ENCRYPTED ']) {
      const pem = `-----BEGIN ${type}PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\naFDrBz9vFqU4yQ==\n-----END ${type}PRIVATE KEY-----`;
      assert.equal(redact(`before ${pem} after`), 'before [redacted:private_key] after', type);
      assert.equal(redact(JSON.stringify({ key: pem, n: 1 })), '{"key":"[redacted:private_key]","n":1}', `${type} JSON-escaped`);
    }
    assert.equal(redact('x -----BEGIN PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3V'), 'x [redacted:private_key]');
    assert.equal(redact('-----BEGIN PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----'), '-----BEGIN PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----', 'a public key stays');
  });

  test('JSON fields named like secrets: the name kept, the value gone, the JSON still JSON; also inside a JSON string', () => {
    const body = JSON.stringify({ api_key: 'abc', 'x-api-key': 'd"e', apiKey: 'f', client_secret: 'g', password: 'h', access_token: 'i', Authorization: 'Basic j', max_tokens: 100, model: 'm' });
    const out = redact(body);
    assert.deepEqual(JSON.parse(out), {
      api_key: '[redacted:secret_field]',
      'x-api-key': '[redacted:secret_field]',
      apiKey: '[redacted:secret_field]',
      client_secret: '[redacted:secret_field]',
      password: '[redacted:secret_field]',
      access_token: '[redacted:secret_field]',
      Authorization: '[redacted:secret_field]',
      max_tokens: 100,
      model: 'm',
    });
    const nested = JSON.stringify({ messages: [{ role: 'user', content: `config: ${JSON.stringify({ api_key: 'hunter2hunter2', region: 'eu' })}` }] });
    const redacted = redact(nested);
    assert.ok(!redacted.includes('hunter2'), redacted);
    assert.deepEqual(JSON.parse(JSON.parse(redacted).messages[0].content.slice('config: '.length)), { api_key: '[redacted:secret_field]', region: 'eu' });
  });

  test('e-mail addresses', () => {
    assert.equal(redact('write to john.doe+ledger@mail.example.co.uk, or ann@x.io.'), 'write to [redacted:email], or [redacted:email].');
    assert.equal(redact('user@localhost and @handle and a@b'), 'user@localhost and @handle and a@b');
    // In a JSON string: an escape before the address is not part of it; an escaped backslash is not an escape.
    assert.equal(redact(String.raw`line\nann@x.io \u001bbob@y.io \\carl@z.io`), String.raw`line\n[redacted:email] \u001b[redacted:email] \\[redacted:email]`);
  });

  test('card numbers: 13 to 19 digits, together or grouped, that pass Luhn', () => {
    for (const card of ['4111111111111111', '4111 1111 1111 1111', '4111-1111-1111-1111', '5500005555555559', '378282246310005', '3782 822463 10005', '6011111111111117', '4222222222222', '6011000990139424', '2223003122003222']) {
      assert.equal(redact(`card ${card}.`), 'card [redacted:card].', card);
    }
    assert.equal(redact('4111111111111112 4111 1111 1111 1112'), '4111111111111112 4111 1111 1111 1112', 'failing Luhn');
  });

  test('phone numbers in E.164: a plus and 8 to 15 digits', () => {
    assert.equal(redact('call +14155550100 or +447911123456!'), 'call [redacted:phone] or [redacted:phone]!');
    assert.equal(redact('+0123456789 +1234567 +1234567890123456'), '+0123456789 +1234567 +1234567890123456');
  });
});

test('Luhn', () => {
  for (const valid of ['0', '18', '79927398713', '4111111111111111', '378282246310005', '6011111111111117']) assert.equal(luhn(valid), true, valid);
  for (const invalid of ['', '1', '79927398710', '4111111111111112', '12a4', '378282246310006']) assert.equal(luhn(invalid), false, invalid);
});

test('no rule touches what requests and answers are mostly made of: numbers, UUIDs, request ids, timestamps, words', () => {
  const ordinary = [
    JSON.stringify({
      id: 'chatcmpl-9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c',
      object: 'chat.completion',
      created: 1_714_557_420,
      // Numbers of 13 to 19 digits that pass Luhn, but start as no card does: a time in ms, ids.
      created_ms: 1_714_557_420_127,
      batch: '9000000000000001',
      sequence_id: '1000000000000000009',
      model: 'gpt-4o-mini-2024-07-18',
      usage: { prompt_tokens: 1_234_567, completion_tokens: 89, total_tokens: 1_234_656 },
      logprob: -0.4111111111111111,
      seed: 12_345_678_901_234,
      request_id: '550e8400-e29b-41d4-a716-446655440000',
      trace: '4bf92f3577b34da6a3ce929d0e0e4736',
      sequence: '4111111111111111-0',
      max_tokens: 4096,
      temperature: 0.7,
      price: '$1,234.56',
      date: '2025-05-01T10:17:00.000Z',
      stop: ['\n\n'],
      tokenizer: 'cl100k_base',
    }),
    '550e8400-e29b-41d4-a716-446655440000 4111-1111-1111-1111-1111 a7c3e1d2-4111-1111-1111-111111111111',
    'x-request-id: 0b9f3c2e-6d1a-4c8e-9f7b-2a5d4e6c8b1a; msg_01XFDUDYJgAACzvnptvVoYEL; req_011CSHoEeqs5C35K2UUqR7Fy',
    'In 2024, 1,234,567 people paid 4,111.11 each; the year 20240501; ISBN 978-3-16-148410-0; phone 555-0100; +1 415 555 0100.',
    'The bearer bonds and a risk-assessment framework; sk-learn; ask-me-anything; eyJ alone; AKIA alone.',
    'data: {"choices":[{"delta":{"content":"Hello"}}]}\n\ndata: [DONE]\n\n',
  ];
  for (const text of ordinary) assert.equal(redact(text), text);
});

describe('the configured patterns (ledger.bodies.redact)', () => {
  test('run after the built-in rules, each match made [redacted]; flags by the `flags` form', () => {
    const r = new Redaction([{ pattern: String.raw`internal-project-\w+`, flags: 'i' }, { pattern: 'codename (\\w+)' }, { pattern: 'x*' }]);
    assert.equal(r.redact('INTERNAL-project-apollo, codename falcon, sk-abcdefghijklmnopqrstuvwx'), '[redacted], [redacted], [redacted:api_key]');
    assert.equal(r.redact('internal-project-apollo'), '[redacted]', 'the same Redaction again (no lastIndex left over)');
    assert.equal(new Redaction([{ pattern: 'Internal' }]).redact('internal Internal'), 'internal [redacted]', 'no flags: case counts');
  });

  test('the schema: strings or { pattern, flags }; a bad one refused with its index; (?i) refused with the way to write it', () => {
    const parsed = ledgerSchema.parse({ bodies: { enabled: true, redact: ['a+', { pattern: 'b', flags: 'is' }] } });
    assert.deepEqual(parsed.bodies, { enabled: true, max_bytes: 32_768, retention_days: 7, redact: ['a+', { pattern: 'b', flags: 'is' }] });
    assert.deepEqual(ledgerSchema.parse({}).bodies, { enabled: false, max_bytes: 32_768, retention_days: 7, redact: [] }, 'off by default');
    const problems = (redactList: unknown[]): string => {
      try {
        parseConfig(JSON.stringify({ listeners: [{ name: 'p', address: '127.0.0.1:0', role: 'proxy' }], ledger: { bodies: { redact: redactList } } }), 'sluice.yaml');
        return '';
      } catch (error) {
        return (error as Error).message;
      }
    };
    assert.equal(problems(['ok', { pattern: 'fine', flags: 'i' }]), '');
    const bad = problems(['ok', 'un(closed', { pattern: 'x', flags: 'g' }, '(?i)internal-project-\\w+', { pattern: '[z-a]', flags: 'i' }]);
    assert.match(bad, /ledger\.bodies\.redact\[1\]: not a JavaScript regular expression \(Unterminated group\)/);
    assert.match(bad, /ledger\.bodies\.redact\[2\]\.flags: expected flags among i, m, s, u and v/);
    assert.match(bad, /ledger\.bodies\.redact\[3\]: a leading inline flag such as \(\?i\) is not JavaScript: write \{ pattern: "\.\.\.", flags: "i" \}/);
    assert.match(bad, /ledger\.bodies\.redact\[4\]: not a JavaScript regular expression/);
    assert.doesNotMatch(bad, /redact\[0\]/);
    assert.doesNotMatch(bad, /un\(closed|z-a/, 'the pattern itself is not quoted');
    assert.match(problems([]), /^$/);
    assert.match(problems(['(?i:scoped)']), /^$/, 'the scoped group is JavaScript');
  });
});

const whole = (text: string | Buffer): CapturedBody => ({ bytes: Buffer.isBuffer(text) ? text : Buffer.from(text), more: false });

describe('a body as the record keeps it', () => {
  const none = new Redaction();

  test('whole when it fits; cut at max_bytes on a character, and marked truncated, when not', () => {
    assert.deepEqual(ledgerBodies(whole('{"a":1}'), whole('ok'), none, 7), { request_body: '{"a":1}', response_body: 'ok', request_truncated: false, response_truncated: false, encoding: 'utf8' });
    const cut = ledgerBodies(whole('aaaaaaaé€'), whole('é'.repeat(10)), none, 9);
    assert.equal(cut.request_body, 'aaaaaaaé', 'é ends at byte 9');
    assert.equal(cut.response_body, 'éééé', 'not half an é');
    assert.deepEqual([cut.request_truncated, cut.response_truncated], [true, true]);
    // The capture went on past its bytes: truncated, and a character split at its end left out.
    const partial = ledgerBodies({ bytes: Buffer.from('ab€').subarray(0, 4), more: true }, whole(''), none, 100);
    assert.deepEqual([partial.request_body, partial.request_truncated, partial.encoding], ['ab', true, 'utf8']);
  });

  test('a body that is not UTF-8 (or holds a NUL) is kept as base64, and so is the other', () => {
    const binary = Buffer.from([0xff, 0xfe, 0x41, 0x42]);
    const out = ledgerBodies(whole('{"a":"é"}'), whole(binary), none, 100);
    assert.equal(out.encoding, 'base64');
    assert.deepEqual(Buffer.from(out.response_body, 'base64'), binary);
    assert.equal(Buffer.from(out.request_body, 'base64').toString('utf8'), '{"a":"é"}');
    assert.equal(ledgerBodies(whole('a\u0000b'), whole('x'), none, 100).encoding, 'base64');
    // Its ASCII is still redacted.
    const secret = Buffer.concat([Buffer.from([0xff]), Buffer.from(' sk-abcdefghijklmnopqrstuvwxyz '), Buffer.from([0xfe])]);
    const kept = Buffer.from(ledgerBodies(whole(secret), whole(''), none, 100).request_body, 'base64');
    assert.deepEqual(kept, Buffer.concat([Buffer.from([0xff]), Buffer.from(' [redacted:api_key] '), Buffer.from([0xfe])]));
  });

  test('the start of a secret that the capture cut short is never kept, even when redactions before it shrank the text', () => {
    // A private key of 1100 bytes, made 22; then a key the capture (max_bytes and 1024 more) cut after 7 characters.
    const pem = `-----BEGIN PRIVATE KEY-----\n${'A'.repeat(1046)}\n-----END PRIVATE KEY-----`;
    const key = 'sk-proj-' + 'k1'.repeat(40);
    const text = `${pem} ${'w'.repeat(15)} ${key}`;
    const maxBytes = 100;
    const limit = maxBytes + 1024;
    assert.equal(limit - text.indexOf(key), 7);
    const out = ledgerBodies({ bytes: Buffer.from(text).subarray(0, limit), more: true }, whole(''), none, maxBytes);
    assert.ok(!out.request_body.includes('sk-'), out.request_body);
    // What started within the first max_bytes only: the private key, whole.
    assert.equal(out.request_body, '[redacted:private_key]');
    assert.equal(out.request_truncated, true);
  });

  test('redactUpTo: what starts before the stop, a match whole; nothing that starts after it', () => {
    assert.equal(none.redactUpTo('a@b.io x c@d.io y', 8), '[redacted:email] x');
    assert.equal(none.redactUpTo('a@b.io x c@d.io y', 10), '[redacted:email] x [redacted:email]');
    assert.equal(none.redactUpTo('a@b.io x c@d.io y', 17), '[redacted:email] x [redacted:email] y');
    // Bytes that are not text: the stop is max_bytes too, after a match that shrank them.
    const binary = Buffer.concat([Buffer.from([0xff]), Buffer.from(` sk-${'a'.repeat(40)} ${'A'.repeat(100)}`)]);
    const kept = Buffer.from(ledgerBodies(whole(binary), whole(''), none, 50).request_body, 'base64');
    assert.deepEqual(kept, Buffer.concat([Buffer.from([0xff]), Buffer.from(' [redacted:api_key] AAAA')]));
  });

  test('redacted before the cut: a secret across max_bytes is gone whole, not half kept', () => {
    const text = `${'x'.repeat(90)} sk-abcdefghijklmnopqrstuvwxyz0123456789 and more`;
    const out = ledgerBodies(whole(text), whole(''), none, 100);
    assert.equal(out.request_body, `${'x'.repeat(90)} [redacted`);
    assert.equal(out.request_truncated, true);
    // A marker longer than what it replaced can push a body past max_bytes: truncated then.
    const grown = ledgerBodies(whole('a@b.io'), whole(''), none, 10);
    assert.deepEqual([grown.request_body, grown.request_truncated], ['[redacted:', true]);
    const onCharacter = ledgerBodies(whole('a@b.io éé'), whole(''), none, 18);
    assert.deepEqual([onCharacter.request_body, onCharacter.request_truncated], ['[redacted:email] ', true], 'not half an é');
  });
});

describe('the capture on the request context (KeptBodies)', () => {
  const settings = ledgerSchema.parse({ bodies: { enabled: true, max_bytes: 10 } }).bodies;

  test('the answer: copies up to max_bytes and a margin, then only counts that more went', () => {
    const kept = new KeptBodies(settings, Buffer.from('{}'));
    const chunk = Buffer.alloc(600, 'a');
    kept.keep(chunk);
    chunk.fill('b'); // the relay's buffer reused: the copy is unchanged
    kept.keep('é'.repeat(200));
    assert.equal(kept.response.more, false);
    assert.equal(kept.response.bytes.length, 1000);
    assert.equal(kept.response.bytes.subarray(0, 600).toString(), 'a'.repeat(600));
    kept.keep(Buffer.alloc(100, 'c'));
    assert.deepEqual([kept.response.bytes.length, kept.response.more], [1034, true]);
    kept.keep('more');
    kept.keep('');
    assert.deepEqual([kept.response.bytes.length, kept.response.more], [1034, true]);
    assert.deepEqual(kept.request, { bytes: Buffer.from('{}'), more: false });
  });

  test('the request: its first max_bytes and margin, held (not copied)', () => {
    const body = Buffer.alloc(5000, 'r');
    const kept = new KeptBodies(settings, body);
    assert.equal(kept.request.more, true);
    assert.equal(kept.request.bytes.length, 1034);
    assert.equal(kept.request.bytes.buffer, body.buffer);
    assert.deepEqual(new KeptBodies(settings, Buffer.alloc(1034)).request.more, false);
  });
});

// ---------------------------------------------------------------------------------------------
// The property: a secret injected anywhere in a body does not survive.

const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const chars = (alphabet: string, min: number, max: number) => fc.string({ unit: fc.constantFrom(...alphabet), minLength: min, maxLength: max });
const DIGITS = '0123456789';
const UPPER_DIGITS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

/** A card number of `length` digits with `prefix`, its check digit made to pass Luhn. */
function card(prefix: string, body: string, length: number): string {
  const partial = (prefix + body).slice(0, length - 1).padEnd(length - 1, '0');
  for (let d = 0; d <= 9; d++) if (luhn(partial + d)) return partial + d;
  throw new Error('unreachable');
}

/** A secret as it appears in a body, and the part of it that must not be found after (its random part). */
type Secret = { readonly text: string; readonly core: string };

const secrets: fc.Arbitrary<Secret> = fc.oneof(
  fc.tuple(fc.constantFrom('sk-', 'sk-proj-', 'sk-ant-api03-', 'sk-svcacct-'), chars(B64URL, 20, 100)).map(([p, k]) => ({ text: p + k, core: k })),
  fc.tuple(fc.constantFrom('AKIA', 'ASIA'), chars(UPPER_DIGITS, 16, 16)).map(([p, k]) => ({ text: p + k, core: p + k })),
  fc.tuple(chars(B64URL, 10, 60), chars(B64URL, 4, 200), chars(B64URL, 0, 80)).map(([h, p, s]) => ({ text: `eyJ${h}.${p}.${s}`, core: `${h}.${p}` })),
  fc.tuple(fc.constantFrom('Bearer ', 'bearer  ', 'BEARER\t'), chars(B64URL + '.~+/', 8, 80), fc.constantFrom(...DIGITS)).map(([b, t, d]) => ({ text: b + t + d, core: t + d })),
  fc
    .tuple(fc.constantFrom('', 'RSA ', 'EC ', 'OPENSSH '), fc.array(chars('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/', 16, 64), { minLength: 1, maxLength: 8 }))
    .map(([t, lines]) => ({ text: `-----BEGIN ${t}PRIVATE KEY-----\n${lines.join('\n')}\n-----END ${t}PRIVATE KEY-----`, core: lines.join('\n') })),
  fc.tuple(fc.constantFrom('api_key', 'x-api-key', 'apiKey', 'client_secret', 'password', 'access_token'), chars('abcdefghijklmnopqrstuvwxyz0123456789!#$%&*-', 12, 40)).map(([n, v]) => ({ text: `{"${n}": "${v}"}`, core: v })),
  fc
    .tuple(chars('abcdefghijklmnopqrstuvwxyz0123456789', 1, 20), chars('abcdefghijklmnopqrstuvwxyz0123456789._+-', 0, 20), chars('abcdefghijklmnopqrstuvwxyz0123456789', 1, 20), fc.constantFrom('com', 'io', 'co.uk', 'example'))
    .map(([a, b, d, tld]) => ({ text: `${a}${b}@${d}.${tld}`, core: `${a}${b}@${d}.${tld}` })),
  fc
    .tuple(fc.constantFrom('4', '51', '55', '2221', '34', '37', '6011', '65', '35'), chars(DIGITS, 18, 18), fc.integer({ min: 13, max: 19 }), fc.constantFrom('', ' ', '-'))
    .map(([prefix, body, length, sep]) => {
      const digits = card(prefix, body, length);
      const text = sep !== '' && length === 16 ? digits.match(/.{4}/g)!.join(sep) : digits;
      return { text, core: text };
    }),
  fc.tuple(fc.constantFrom(...'123456789'), chars(DIGITS, 7, 14)).map(([first, rest]) => ({ text: `+${first}${rest}`, core: `+${first}${rest}` })),
);

/** What a body is otherwise made of: words, numbers, UUIDs, JSON punctuation. */
const filler = fc.array(
  fc.oneof(
    fc.constantFrom('hello', 'the', 'model', 'gpt-4o', 'tokens', 'Bearer', 'sk', 'risk-assessment', '{"role":"user"}', 'data:', '[DONE]', '\n\n', 'é', '😀', '1,234.56', '2025-05-01', 'lorem ipsum '.repeat(100)),
    fc.integer({ min: 0, max: 2 ** 40 }).map(String),
    fc.uuid(),
  ),
  { maxLength: 30 },
);
const separators = fc.constantFrom(' ', '\n', '"', '(', ')', ', ', ': ', '\t', '> ');

test('property: no secret injected anywhere in a body survives, as text, inside a JSON string, or across a cut', () => {
  fc.assert(
    fc.property(filler, filler, fc.array(fc.tuple(secrets, separators, separators), { minLength: 1, maxLength: 4 }), fc.boolean(), fc.integer({ min: 1, max: 2000 }), (before, after, injected, asJson, maxBytes) => {
      const plain = [before.join(' '), ...injected.map(([s, open, close]) => `${open}${s.text}${close}`), after.join(' ')].join(' ');
      const text = asJson ? JSON.stringify({ model: 'm', messages: [{ role: 'user', content: plain }] }) : plain;
      const out = redact(text);
      for (const [secret] of injected) {
        const core = asJson ? JSON.stringify(secret.core).slice(1, -1) : secret.core;
        assert.ok(!out.includes(core), `${JSON.stringify(secret.text)} survived in ${JSON.stringify(out)}`);
      }
      // As the capture keeps it (max_bytes and the margin) and the record cuts it.
      const bytes = Buffer.from(text);
      const limit = maxBytes + 1024;
      const kept = ledgerBodies({ bytes: bytes.subarray(0, limit), more: bytes.length > limit }, whole(''), defaults, maxBytes).request_body;
      for (const [secret] of injected) {
        const core = asJson ? JSON.stringify(secret.core).slice(1, -1) : secret.core;
        // Not even its first 12 characters (what a cut through an unredacted secret would keep).
        assert.ok(!kept.includes(core.slice(0, 12)), `${JSON.stringify(secret.text)} survived the cut at ${maxBytes} in ${JSON.stringify(kept)}`);
      }
    }),
    { numRuns: 500 },
  );
});
