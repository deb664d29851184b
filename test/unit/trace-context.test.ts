// W3C `traceparent` read strictly: a valid parent or nothing, whatever a client sends.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { formatTraceparent, parseTraceparent } from '../../src/telemetry/trace-context.ts';
import { DEFAULT_TRACES_ENDPOINT, tracingTarget } from '../../src/telemetry/tracing.ts';
import { redactUrl } from '../../src/config/redact-url.ts';

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN = '00f067aa0ba902b7';
const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 20261201);

describe('parseTraceparent', () => {
  test('version 00: the parent and its sampled flag', () => {
    assert.deepEqual(parseTraceparent(`00-${TRACE}-${SPAN}-01`), { traceId: TRACE, spanId: SPAN, sampled: true });
    assert.deepEqual(parseTraceparent(`00-${TRACE}-${SPAN}-00`), { traceId: TRACE, spanId: SPAN, sampled: false });
    assert.deepEqual(parseTraceparent(`00-${TRACE}-${SPAN}-03`), { traceId: TRACE, spanId: SPAN, sampled: true });
  });

  test('a later version may add fields after a "-"; version ff never', () => {
    assert.equal(parseTraceparent(`01-${TRACE}-${SPAN}-01-extra`)?.traceId, TRACE);
    assert.equal(parseTraceparent(`01-${TRACE}-${SPAN}-01`)?.traceId, TRACE);
    assert.equal(parseTraceparent(`01-${TRACE}-${SPAN}-01x`), undefined);
    assert.equal(parseTraceparent(`ff-${TRACE}-${SPAN}-01`), undefined);
  });

  test('invalid: all-zero ids, upper case, wrong lengths, extra text on 00, two headers, not a string', () => {
    for (const value of [
      `00-${'0'.repeat(32)}-${SPAN}-01`,
      `00-${TRACE}-${'0'.repeat(16)}-01`,
      `00-${TRACE.toUpperCase()}-${SPAN}-01`,
      `00-${TRACE}-${SPAN}-1`,
      `00-${TRACE}-${SPAN}-01-`,
      `00-${TRACE}-${SPAN}-01, 00-${TRACE}-${SPAN}-01`,
      ` 00-${TRACE}-${SPAN}-01`,
      `00-${TRACE}-${SPAN}-01`.repeat(20),
      '',
    ]) {
      assert.equal(parseTraceparent(value), undefined, value);
    }
    assert.equal(parseTraceparent([`00-${TRACE}-${SPAN}-01`, `00-${TRACE}-${SPAN}-01`]), undefined);
    assert.equal(parseTraceparent(undefined), undefined);
  });

  test('any string: never throws; a parent only when the value is one (an independent reading of the spec)', () => {
    const hex = (n: number) => fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: n, maxLength: n });
    const nearlyValid = fc.tuple(hex(2), hex(32), hex(16), hex(2), fc.string({ maxLength: 4 })).map(([v, t, s, f, rest]) => `${v}-${t}-${s}-${f}${rest}`);
    fc.assert(
      fc.property(fc.oneof(fc.string({ maxLength: 100 }), nearlyValid, fc.string({ minLength: 500, maxLength: 700 })), (value) => {
        const parsed = parseTraceparent(value);
        const parts = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(.*)$/s.exec(value);
        const ok =
          parts !== null &&
          parts[1] !== 'ff' &&
          /[1-9a-f]/.test(parts[2]!) &&
          /[1-9a-f]/.test(parts[3]!) &&
          (parts[1] === '00' ? parts[5] === '' : parts[5] === '' || parts[5]!.startsWith('-')) &&
          value.length <= 512;
        assert.equal(parsed !== undefined, ok, value);
        if (parsed) assert.equal(formatTraceparent(parsed.traceId, parsed.spanId, parsed.sampled).slice(3, 52), value.slice(3, 52));
      }),
      { seed: SEED, numRuns: 2000 },
    );
  });
});

describe('tracingTarget', () => {
  const config = { enabled: true, headers: {}, sample_ratio: 1, flush_timeout_ms: 2000 };

  test('the config first, then OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, then the local default', () => {
    const env = { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://traces:4318/custom', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://base:4318/', OTEL_SERVICE_NAME: 'from-env' };
    assert.deepEqual(tracingTarget({ ...config, endpoint: 'http://config:4318/v1/traces', service_name: 'from-config' }, env), { endpoint: 'http://config:4318/v1/traces', serviceName: 'from-config' });
    assert.deepEqual(tracingTarget(config, env), { endpoint: 'http://traces:4318/custom', serviceName: 'from-env' });
    assert.deepEqual(tracingTarget(config, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://base:4318/' }), { endpoint: 'http://base:4318/v1/traces', serviceName: 'sluice' });
    assert.deepEqual(tracingTarget(config, {}), { endpoint: DEFAULT_TRACES_ENDPOINT, serviceName: 'sluice' });
  });

  test('an endpoint is logged without its user, password or query', () => {
    assert.equal(redactUrl('https://user:secret@collector:4318/v1/traces?token=abc'), 'https://[redacted]@collector:4318/v1/traces?[redacted]');
  });
});
