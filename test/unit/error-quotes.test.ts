// What a client chose, quoted in an error answer (src/api/errors.ts): whole up to QUOTED_MAX
// characters, else cut there with its length ("… (5242880 characters)"), never inside a surrogate
// pair. Every answer that names a client value goes through it; a translator's detail and an
// upstream's message are bounded as a whole.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { errors, MESSAGE_MAX, QUOTED_MAX, quoted } from '../../src/api/errors.ts';
import { toAnthropicError, toOpenAIError } from '../../src/translate/errors.ts';

const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 20261203);
const RUNS = Number(process.env.SLUICE_FUZZ_RUNS ?? 200);
const HUGE = 'm'.repeat(5 * 1024 * 1024);

test('a value within the bound is quoted whole; a longer one is cut and says its length', () => {
  assert.equal(quoted('gpt-4o'), 'gpt-4o');
  assert.equal(quoted('x'.repeat(QUOTED_MAX)), 'x'.repeat(QUOTED_MAX));
  assert.equal(quoted(HUGE), `${'m'.repeat(QUOTED_MAX)}… (${HUGE.length} characters)`);
});

test('fuzzed: a quote is a prefix of the value, bounded, well formed', () => {
  fc.assert(
    fc.property(fc.string({ unit: fc.constantFrom('a', '😀', 'é', '"', '\n'), minLength: 0, maxLength: QUOTED_MAX * 3 }), (value) => {
      const shown = quoted(value);
      if (value.length <= QUOTED_MAX) return assert.equal(shown, value);
      const kept = shown.slice(0, shown.indexOf('… ('));
      assert.ok(value.startsWith(kept));
      assert.ok(kept.length <= QUOTED_MAX && kept.length >= QUOTED_MAX - 1);
      assert.ok(shown.isWellFormed());
      assert.ok(shown.endsWith(`(${value.length} characters)`));
    }),
    { seed: SEED, numRuns: RUNS },
  );
});

test('every answer that names what a client sent stays small whatever its size', () => {
  const answers = [
    errors.unknownModel(HUGE),
    errors.modelNotOffered(HUGE, 'up'),
    errors.modelNotAllowed(HUGE, 'team-a'),
    errors.unsupportedEndpoint(HUGE, 'up', 'anthropic', HUGE),
    errors.invalidParameter(HUGE, 'is repeated'),
    errors.notFound(HUGE),
    errors.methodNotAllowed(HUGE, HUGE, 'POST'),
    errors.noWebSocketRoute(HUGE),
    errors.untranslatable(HUGE, `unknown parameter '${HUGE}'`, 'up', 'openai'),
    errors.invalidJson(HUGE),
  ];
  for (const error of answers) {
    for (const dialect of ['openai', 'anthropic'] as const) {
      const body = error.body(dialect);
      assert.ok(body.length < 3 * MESSAGE_MAX, `${error.code}: ${body.length} characters`);
      JSON.parse(body);
    }
  }
  assert.equal(answers[8]!.param!.length < QUOTED_MAX + 40, true);
});

test("a translated upstream error: the provider's message (which may quote the client's) is bounded", () => {
  const message = `The model \`${HUGE}\` does not exist`;
  const upstream = { error: { message, type: HUGE } };
  for (const translated of [toOpenAIError(404, upstream), toAnthropicError(404, upstream)]) {
    const text = JSON.stringify(translated);
    assert.ok(text.length < 3 * MESSAGE_MAX, `${text.length} characters`);
    assert.ok(text.includes(`(${message.length} characters)`), text.slice(0, 300));
  }
});
