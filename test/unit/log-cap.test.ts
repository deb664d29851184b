// Client-supplied strings in log lines: cut to LOG_VALUE_MAX characters with their original length
// beside them, never inside a surrogate pair; the control characters JSON leaves raw written as
// \uXXXX text; plain short ones untouched.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { capClientFields, cutForLog, LOG_VALUE_MAX, needsCare } from '../../src/telemetry/log-cap.ts';

test('a value within the bound is left as it is, with no length field', () => {
  const line = { model: 'm'.repeat(LOG_VALUE_MAX), path: '/v1/x', other: 'z'.repeat(5000) };
  assert.deepEqual(capClientFields({ ...line }, ['model', 'path']), line);
});

test('a longer value is cut with "…" and its original length beside it; fields not named are not touched', () => {
  const line = capClientFields({ model: 'm'.repeat(5_000_000), path: undefined, other: 'z'.repeat(5000) }, ['model', 'path']);
  assert.equal(line.model, `${'m'.repeat(LOG_VALUE_MAX)}…`);
  assert.equal((line as Record<string, unknown>).model_length, 5_000_000);
  assert.equal(line.path, undefined);
  assert.equal(line.other.length, 5000);
});

test('the cut never splits a surrogate pair, and what is kept is a prefix of the value', () => {
  fc.assert(
    fc.property(fc.string({ unit: fc.oneof(fc.constant('a'), fc.constant('😀'), fc.constant('é')), minLength: LOG_VALUE_MAX - 3, maxLength: LOG_VALUE_MAX + 10 }), (value) => {
      if (value.length <= LOG_VALUE_MAX) return;
      const cut = cutForLog(value);
      assert.ok(cut.isWellFormed(), JSON.stringify(cut));
      assert.ok(cut.length <= LOG_VALUE_MAX + 1);
      assert.ok(value.startsWith(cut.slice(0, -1)));
    }),
  );
});

/** What a client value must never carry raw into a log line: JSON.stringify leaves these as they are. */
const RAW_CONTROL = /[\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

test('a bidirectional override, a C1 control, DEL and a line separator are written as \\uXXXX text; C0 is left to JSON; the length field only when cut', () => {
  const line = capClientFields({ model: 'gpt-\u202e4o', path: '/v1/a\u0085b\u007f', downstream_request_id: 'r\u2028\u2066x\u2069', method: 'POST', other: '\u202e' }, ['model', 'path', 'downstream_request_id', 'method']);
  assert.deepEqual(line, { model: 'gpt-\\u202e4o', path: '/v1/a\\u0085b\\u007f', downstream_request_id: 'r\\u2028\\u2066x\\u2069', method: 'POST', other: '\u202e' });
  assert.deepEqual(capClientFields({ model: 'a\u001bb\tc' }, ['model']), { model: 'a\u001bb\tc' }, 'JSON escapes C0 itself');
  const long = capClientFields({ model: `${'\u202e'.repeat(LOG_VALUE_MAX)}more` }, ['model']);
  assert.equal(long.model, `${'\\u202e'.repeat(LOG_VALUE_MAX)}…`);
  assert.equal((long as Record<string, unknown>).model_length, LOG_VALUE_MAX + 4);
});

test('needsCare: false for plain values, true for a long one or one with a raw control', () => {
  for (const plain of ['gpt-4o-mini', '/v1/chat/completions', 'POST', '3f2a9c1e-4b5d-4e6f-8a7b-9c0d1e2f3a4b', 'modèle-été', '模型', '😀', 'a\u001bb']) assert.equal(needsCare(plain), false, plain);
  for (const careful of ['x'.repeat(LOG_VALUE_MAX + 1), '\u202e', 'a\u0080', '\u2029', '\u200f', '\u2068']) assert.equal(needsCare(careful), true, JSON.stringify(careful));
});

test('fuzzed: no raw control character survives, and a value needing no care comes out unchanged', () => {
  const unit = fc.oneof(fc.string({ unit: 'grapheme', maxLength: 2 }), fc.constantFrom('\u202e', '\u2066', '\u0085', '\u009b', '\u007f', '\u2028', '\u200e', '\u001b'));
  fc.assert(
    fc.property(fc.array(unit, { maxLength: 400 }).map((parts) => parts.join('')), (value) => {
      const out = capClientFields({ model: value }, ['model']).model;
      assert.ok(!RAW_CONTROL.test(out), JSON.stringify(out));
      if (!needsCare(value)) assert.equal(out, value);
      // JSON of the line holds none of them either.
      assert.ok(!RAW_CONTROL.test(JSON.stringify({ model: out })));
    }),
  );
});
