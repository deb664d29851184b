// Client-supplied strings in log lines: cut to LOG_VALUE_MAX characters with their original length
// beside them, never inside a surrogate pair; short ones untouched, at the cost of a comparison.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { capClientFields, cutForLog, LOG_VALUE_MAX } from '../../src/telemetry/log-cap.ts';

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
