// The tracer's SDK side (src/telemetry/otel-tracing.ts) with an in-memory exporter: the spans of a
// request and its attempts, the drain's log lines as span events, and the exit's export. No sockets.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import { OtelTracing } from '../../src/telemetry/otel-tracing.ts';
import type { Logger } from '../../src/telemetry/logger.ts';
import type { FinishedRequest } from '../../src/telemetry/access-log.ts';

interface Line { level: string; fields: Record<string, unknown>; message: string }

function recordingLogger(lines: Line[]): Logger {
  const at = (level: string) => (fields: Record<string, unknown>, message: string) => void lines.push({ level, fields, message });
  return { info: at('info'), warn: at('warn'), error: at('error') } as unknown as Logger;
}

const CONFIG = { enabled: true, headers: { authorization: 'Bearer not-for-logs' }, sample_ratio: 1, flush_timeout_ms: 2000 };
const TARGET = { endpoint: 'http://collector.invalid:4318/v1/traces', serviceName: 'sluice-test' };

function finished(over: Partial<FinishedRequest> = {}): FinishedRequest {
  return {
    id: 'req-1', downstreamRequestId: undefined, peer: '127.0.0.1:1', method: 'POST', path: '/v1/chat/completions', status: 200, durationSeconds: 0.01,
    endpoint: 'chat_completions', model: 'gpt-4o', modelEntry: 'gpt-4o', provider: 'p', listener: 'proxy', protocol: 'http1', errorCode: '',
    usage: { prompt: 11, completion: 7, model: 'gpt-4o-2024' }, attempts: 2, keyName: 'team-a', ...over,
  };
}

/** Keeps what it is given (the SDK's in-memory exporter forgets it at shutdown). */
function keepingExporter(kept: ReadableSpan[]): SpanExporter {
  return {
    export: (spans, done) => {
      kept.push(...spans);
      done({ code: 0 });
    },
    shutdown: async () => {},
  };
}

function setup(config = CONFIG) {
  const lines: Line[] = [];
  const kept: ReadableSpan[] = [];
  const tracing = new OtelTracing(config, TARGET, recordingLogger(lines), '9.9.9', keepingExporter(kept));
  return { lines, tracing, spans: () => kept };
}

const start = (requestId: string, traceparent?: string) => ({ method: 'POST', path: '/v1/chat/completions', endpoint: 'chat_completions', requestId, traceparent, tracestate: undefined });

describe('OtelTracing', () => {
  test('a request and two attempts: names, kinds, parents, GenAI attributes, and the failed attempt as an error', async () => {
    const { tracing, spans, lines } = setup();
    const request = tracing.startRequest(start('req-1', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'));
    request.requested({ model: 'gpt-4o', max_tokens: 64, stream: true });
    const attempt = { provider: 'p', providerType: 'openai', origin: 'https://api.example.com', translatedTo: undefined };
    const first = request.startAttempt({ ...attempt, model: 'gpt-4o', number: 1 });
    first.failed('rate_limited', 429);
    const second = request.startAttempt({ ...attempt, model: 'gpt-4o', number: 2 });
    assert.match(second.traceparent, /^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/);
    assert.equal(second.keepsTracestate, true);
    second.committed(200);
    second.end({ prompt: 11, completion: 7, model: 'gpt-4o-2024' });
    request.end(finished());
    await tracing.shutdown();
    const all = spans();
    assert.equal(all.length, 3);
    const server = all.find((s) => s.kind === 1)!; // SpanKind.SERVER
    const clients = all.filter((s) => s.kind === 2).sort((a, b) => Number(a.attributes['sluice.attempt']) - Number(b.attributes['sluice.attempt']));
    assert.equal(server.name, 'chat gpt-4o');
    assert.equal(server.parentSpanContext?.spanId, '00f067aa0ba902b7');
    assert.equal(server.attributes['sluice.request_id'], 'req-1');
    assert.equal(server.attributes['gen_ai.request.max_tokens'], 64);
    assert.equal(server.attributes['gen_ai.response.model'], 'gpt-4o-2024');
    assert.equal(server.attributes['gen_ai.usage.input_tokens'], 11);
    assert.equal(server.attributes['sluice.key_name'], 'team-a');
    assert.equal(server.attributes['sluice.attempts'], 2);
    assert.equal(server.resource.attributes['service.name'], 'sluice-test');
    assert.deepEqual(clients.map((c) => [c.name, c.parentSpanContext?.spanId, c.attributes['error.type'], c.status.code]), [
      ['chat gpt-4o', server.spanContext().spanId, 'rate_limited', 2],
      ['chat gpt-4o', server.spanContext().spanId, undefined, 0],
    ]);
    assert.equal(clients[0]!.attributes['server.address'], 'api.example.com');
    assert.equal(clients[0]!.attributes['server.port'], 443);
    assert.equal(second.traceparent.slice(36, 52), clients[1]!.spanContext().spanId);
    assert.ok(!JSON.stringify(lines).includes('not-for-logs'), 'the headers are never logged');
    assert.ok(!lines.some((l) => l.fields.event === 'traces_not_exported'));
  });

  test('the lifecycle log: every line passed on unchanged; the drain lines become events on the open request spans and on the drain span', async () => {
    const { tracing, spans, lines } = setup();
    const passed: Line[] = [];
    const log = tracing.lifecycleLog({ info: (fields, message) => void passed.push({ level: 'info', fields: fields as Record<string, unknown>, message }), warn: (fields, message) => void passed.push({ level: 'warn', fields: fields as Record<string, unknown>, message }) });
    const open = tracing.startRequest(start('open'));
    const done = tracing.startRequest(start('done'));
    done.end(finished({ id: 'done' }));
    const started = { event: 'drain_started', trigger: 'SIGTERM', min_drain_secs: 0, max_drain_secs: 0, strategy: 'immediate', exit: true, in_flight: 1, open_connections: 1 };
    log.info(started, 'drain started: 1 request');
    log.info({ event: 'healthcheck_failed' }, 'not a drain line');
    log.warn({ event: 'drain_forced', reason: 'second SIGTERM', in_flight: 1 }, 'drain forced');
    log.info({ event: 'listeners_closing', in_flight: 0, open_connections: 0 }, 'listeners closing');
    open.end(finished({ id: 'open', status: 503, errorCode: 'drain_forced' }));
    log.info({ event: 'process_exit', exit_code: 1, drain_duration_secs: 0.5, forced: 'second SIGTERM' }, 'process exiting');
    assert.deepEqual(passed.map((l) => [l.level, l.fields.event, l.message]), [
      ['info', 'drain_started', 'drain started: 1 request'],
      ['info', 'healthcheck_failed', 'not a drain line'],
      ['warn', 'drain_forced', 'drain forced'],
      ['info', 'listeners_closing', 'listeners closing'],
      ['info', 'process_exit', 'process exiting'],
    ]);
    assert.equal(passed[0]!.fields, started, 'the same fields object');
    await tracing.shutdown();
    const byId = (id: string) => spans().find((s) => s.attributes['sluice.request_id'] === id)!;
    assert.deepEqual(byId('open').events.map((e) => e.name), ['sluice.drain.started', 'sluice.drain.window_over', 'sluice.drain.forced']);
    assert.deepEqual(byId('done').events, [], 'a request that ended before the drain has no drain event');
    assert.equal(byId('open').attributes['error.type'], 'drain_forced');
    const drain = spans().find((s) => s.name === 'sluice.drain')!;
    assert.deepEqual(drain.events.map((e) => e.name), ['sluice.drain.started', 'sluice.drain.window_over', 'sluice.drain.forced', 'sluice.drain.listeners_closed', 'sluice.process.exit']);
    assert.equal(drain.status.code, 2);
    assert.equal(drain.attributes['sluice.drain.trigger'], 'SIGTERM');
    assert.ok(!lines.some((l) => l.fields.event === 'telemetry_error'));
  });

  test('a request span still open at the exit (a forced drain) is ended and exported', async () => {
    const { tracing, spans } = setup();
    tracing.startRequest(start('stuck'));
    await tracing.shutdown();
    const stuck = spans().find((s) => s.attributes['sluice.request_id'] === 'stuck')!;
    assert.ok(stuck);
    assert.equal(stuck.attributes['error.type'], 'drain_forced');
  });

  test('sample_ratio 0: a request without traceparent is not recorded, a sampled caller is followed, the drain span always is', async () => {
    const { tracing, spans } = setup({ ...CONFIG, sample_ratio: 0 });
    const dropped = tracing.startRequest(start('dropped'));
    assert.match(dropped.startAttempt({ provider: 'p', providerType: 'openai', model: 'm', origin: undefined, number: 1, translatedTo: undefined }).traceparent, /-00$/, 'not sampled, and said so upstream');
    dropped.end(finished({ id: 'dropped' }));
    tracing.startRequest(start('followed', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')).end(finished({ id: 'followed' }));
    const log = tracing.lifecycleLog({ info: () => {}, warn: () => {} });
    log.info({ event: 'drain_started', trigger: 'SIGTERM', min_drain_secs: 0 }, '');
    log.info({ event: 'process_exit', exit_code: 0 }, '');
    await tracing.shutdown();
    assert.deepEqual(spans().map((s) => s.attributes['sluice.request_id'] ?? s.name).sort(), ['followed', 'sluice.drain']);
  });
});
