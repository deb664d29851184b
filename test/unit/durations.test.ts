// Every duration of the config (a field named `*_ms` or `*_secs`, found by walking the schema, so a
// field added later is covered without editing this test) is bounded so that no timer it sets can
// overflow: Node fires a timer of more than 2^31-1 ms after 1 ms. One more than the bound is
// refused at the field's path with a message that names the bound and not the value; the bound
// itself is accepted; and the bound, in milliseconds, is a delay Node's timers take as it is.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { configSchema, MAX_DURATION_MS, MAX_DURATION_SECS, modelSchema } from '../../src/config/schema.ts';
import { checkResource } from '../../src/config/resources.ts';
import { formatPath, parseConfig } from '../../src/config/load.ts';
import { schemaLeaves, withValueAt, type FieldPath } from '../support/schema-fields.ts';

const TIMER_MAX = 2 ** 31 - 1;
const durations = schemaLeaves(configSchema).filter((path) => /_(ms|secs)$/.test(String(path.at(-1))));
const boundOf = (path: FieldPath) => (String(path.at(-1)).endsWith('_ms') ? MAX_DURATION_MS : MAX_DURATION_SECS);
/** What a field's value becomes as a timer's delay, in milliseconds. */
const asTimerMs = (path: FieldPath, value: number) => (String(path.at(-1)).endsWith('_ms') ? value : value * 1000);

function issuesAt(path: FieldPath, value: unknown): { code: string; message: string }[] {
  const document = withValueAt({ listeners: [{ name: 'p', address: '127.0.0.1:0', role: 'proxy' }] }, path, value);
  const result = configSchema.safeParse(document);
  if (result.success) return [];
  // Cross-checks aside (headers_timeout_secs must not exceed request_timeout_secs).
  return result.error.issues.filter((issue) => formatPath(issue.path) === formatPath(path) && issue.code !== 'custom');
}

describe('every duration of the config is bounded below what a timer can hold', () => {
  test('the fields are found (a walk that finds none would prove nothing)', () => {
    const names = durations.map((path) => formatPath(path));
    assert.ok(durations.length >= 30, names.join('\n'));
    for (const expected of ['upstream.timeout_ms', 'models[0].targets[0].timeout_ms', 'models[0].retry.total_timeout_ms', 'shutdown.max_drain_secs', 'downstream.idle_timeout_secs', 'limits.redis.command_timeout_ms', 'etcd.request_timeout_ms', 'listeners[0].tls.handshake_timeout_secs', 'tracing.flush_timeout_ms']) {
      assert.ok(names.includes(expected), `${expected} not found among ${names.join(', ')}`);
    }
  });

  test('the bound, as a delay, fits a timer with room for what Node adds (a keep-alive socket: one more second)', () => {
    assert.ok(MAX_DURATION_MS + 1000 <= TIMER_MAX);
    assert.equal(MAX_DURATION_MS, MAX_DURATION_SECS * 1000);
  });

  for (const path of durations) {
    test(`${formatPath(path)}: one more than the bound is refused there, naming the bound, never the value; the bound is accepted`, () => {
      const bound = boundOf(path);
      assert.ok(asTimerMs(path, bound) < TIMER_MAX);
      const over = issuesAt(path, bound + 1);
      assert.equal(over.length, 1, `${formatPath(path)} = ${bound + 1}: ${JSON.stringify(over)}`);
      assert.match(over[0]!.message, new RegExp(`at most ${bound} (milliseconds|seconds)`));
      assert.doesNotMatch(over[0]!.message, new RegExp(String(bound + 1)));
      // The example of the issue: three billion.
      assert.equal(issuesAt(path, 3_000_000_000).length, 1);
      assert.deepEqual(issuesAt(path, bound), []);
      // From a `${VAR}` the value is text: bounded the same.
      assert.equal(issuesAt(path, String(bound + 1)).length, 1);
    });
  }
});

test('a file: the problem names the path and the bound', () => {
  assert.throws(
    () => parseConfig('listeners: [{ name: p, address: "127.0.0.1:0", role: proxy }]\nupstream: { timeout_ms: 3000000000 }\n', 'sluice.yaml'),
    (error: Error) => error.message.includes(`upstream.timeout_ms: expected at most ${MAX_DURATION_MS} milliseconds`) && !error.message.includes('3000000000'),
  );
});

test('a resource (the admin API, etcd): the reason names the field and the bound, never the value', () => {
  const checked = checkResource('models', 'slow', { targets: [{ provider: 'up', timeout_ms: 3_000_000_000 }] }, 0);
  assert.equal(checked.ok, false);
  assert.ok(!checked.ok && checked.reason.includes(`targets[0].timeout_ms: expected at most ${MAX_DURATION_MS} milliseconds`), JSON.stringify(checked));
  assert.ok(!checked.ok && !checked.reason.includes('3000000000'));
  assert.equal(modelSchema.safeParse({ name: 'm', provider: 'up', retry: { attempt_timeout_ms: MAX_DURATION_MS } }).success, true);
});
