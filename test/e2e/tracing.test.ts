// OpenTelemetry traces (tracing.enabled), through the built gateway, against the in-repo OTLP/HTTP
// receiver (test/support/otlp-receiver.ts) and the mock upstream: a SERVER span per request and a
// CLIENT span per upstream attempt with the GenAI attributes, W3C trace context in and out, the
// drain as span events, the exit's bounded flush (L9), off by default, workers, secrets, and
// hostile `traceparent` headers.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import fc from 'fast-check';
import { ROOT, runSluice, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver.ts';

const SERVER = 2;
const CLIENT = 3;
/** The batch processor's delay between exports, shortened where a test does not exercise the exit's flush. */
const FAST_EXPORT = { OTEL_BSP_SCHEDULE_DELAY: '100' };

let mock: MockUpstream;

before(async () => {
  mock = await startMockUpstream();
});

after(async () => {
  await mock.close();
});

function providers(): Record<string, unknown>[] {
  return [
    { name: 'p', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream-p' },
    { name: 'anth', type: 'anthropic', base_url: mock.url, api_key: 'sk-upstream-anth' },
  ];
}

function models(): Record<string, unknown>[] {
  return [
    { name: 'gpt-4o', provider: 'p' },
    { name: 'mock-claude', provider: 'anth' },
    {
      name: 'two-targets',
      targets: [
        { provider: 'p', model: 'first-model', headers: { 'x-mock': JSON.stringify({ status: 503 }) } },
        { provider: 'p', model: 'second-model', priority: 1 },
      ],
    },
  ];
}

function tracedConfig(receiver: OtlpReceiver, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { workers: 1, providers: providers(), models: models(), shutdown: { min_drain_secs: 0 }, ...extra, tracing: { enabled: true, endpoint: receiver.url, ...((extra.tracing as object) ?? {}) } };
}

interface Answer {
  status: number;
  requestId: string;
  text: string;
}

async function post(gw: GatewayProcess, path: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await fetch(`${gw.proxyUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: res.status, requestId: res.headers.get('x-request-id') ?? '', text: await res.text() };
}

const chat = (gw: GatewayProcess, model: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
  post(gw, '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hello' }], ...extra }, headers);

/** A POST on a connection of its own (with workers, each new connection goes to the next worker). */
function postOnNewConnection(gw: GatewayProcess, body: Record<string, unknown>): Promise<{ status: number; requestId: string }> {
  const url = new URL(`${gw.proxyUrl}/v1/chat/completions`);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', agent: false, headers: { 'content-type': 'application/json', connection: 'close' } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, requestId: String(res.headers['x-request-id'] ?? '') }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

const requestSpan = (spans: ReceivedSpan[], requestId: string) => spans.find((s) => s.kind === SERVER && s.attributes['sluice.request_id'] === requestId);
const attemptSpans = (spans: ReceivedSpan[], parent: ReceivedSpan) => spans.filter((s) => s.kind === CLIENT && s.parentSpanId === parent.spanId && s.traceId === parent.traceId).sort((a, b) => Number(a.attributes['sluice.attempt']) - Number(b.attributes['sluice.attempt']));

/** The request span of `requestId` and its attempt spans, once `attempts` of them have arrived. */
async function spansOf(receiver: OtlpReceiver, requestId: string, attempts = 1): Promise<{ request: ReceivedSpan; attempts: ReceivedSpan[] }> {
  await receiver.waitFor(
    (spans) => {
      const request = requestSpan(spans, requestId);
      return request !== undefined && attemptSpans(spans, request).length >= attempts;
    },
    10_000,
    `the spans of request ${requestId}`,
  );
  const request = requestSpan(receiver.spans, requestId)!;
  return { request, attempts: attemptSpans(receiver.spans, request) };
}

const upstreamPort = () => Number(new URL(mock.url).port);

describe('a traced gateway', () => {
  let receiver: OtlpReceiver;
  let gw: GatewayProcess;

  before(async () => {
    receiver = await startOtlpReceiver();
    gw = await startGateway({ config: tracedConfig(receiver), env: FAST_EXPORT });
  });

  after(async () => {
    await gw?.stop();
    await receiver?.close();
  });

  test('a chat completion: a SERVER span and a CLIENT span with the GenAI attributes, its tokens and the x-request-id answered', async () => {
    const answer = await chat(gw, 'gpt-4o', { max_tokens: 50, temperature: 0.5 });
    assert.equal(answer.status, 200, answer.text);
    assert.match(answer.requestId, /^[0-9a-f-]{36}$/);
    const { request, attempts } = await spansOf(receiver, answer.requestId);
    assert.equal(request.name, 'chat gpt-4o');
    assert.equal(request.parentSpanId, '', 'no traceparent sent: a root span');
    assert.deepEqual(
      {
        operation: request.attributes['gen_ai.operation.name'],
        provider: request.attributes['gen_ai.provider.name'],
        system: request.attributes['gen_ai.system'],
        model: request.attributes['gen_ai.request.model'],
        responseModel: request.attributes['gen_ai.response.model'],
        maxTokens: request.attributes['gen_ai.request.max_tokens'],
        temperature: request.attributes['gen_ai.request.temperature'],
        input: request.attributes['gen_ai.usage.input_tokens'],
        output: request.attributes['gen_ai.usage.output_tokens'],
        method: request.attributes['http.request.method'],
        path: request.attributes['url.path'],
        route: request.attributes['http.route'],
        status: request.attributes['http.response.status_code'],
        sluiceProvider: request.attributes['sluice.provider'],
      },
      {
        operation: 'chat',
        provider: 'openai',
        system: 'openai',
        model: 'gpt-4o',
        responseModel: 'gpt-4o',
        maxTokens: 50,
        temperature: 0.5,
        input: 11,
        output: 7,
        method: 'POST',
        path: '/v1/chat/completions',
        route: '/v1/chat/completions',
        status: 200,
        sluiceProvider: 'p',
      },
    );
    assert.equal(request.status.code, 0);
    assert.equal(request.resource['service.name'], 'sluice');
    assert.equal(attempts.length, 1);
    const [attempt] = attempts as [ReceivedSpan];
    assert.equal(attempt.name, 'chat gpt-4o');
    assert.deepEqual(
      {
        operation: attempt.attributes['gen_ai.operation.name'],
        provider: attempt.attributes['gen_ai.provider.name'],
        model: attempt.attributes['gen_ai.request.model'],
        input: attempt.attributes['gen_ai.usage.input_tokens'],
        output: attempt.attributes['gen_ai.usage.output_tokens'],
        address: attempt.attributes['server.address'],
        port: attempt.attributes['server.port'],
        number: attempt.attributes['sluice.attempt'],
        status: attempt.attributes['http.response.status_code'],
      },
      { operation: 'chat', provider: 'openai', model: 'gpt-4o', input: 11, output: 7, address: '127.0.0.1', port: upstreamPort(), number: 1, status: 200 },
    );
    assert.ok(BigInt(attempt.startTimeUnixNano) >= BigInt(request.startTimeUnixNano) && BigInt(attempt.endTimeUnixNano) <= BigInt(request.endTimeUnixNano), 'the attempt lies within the request');
  });

  test('an Anthropic /v1/messages request: the same, with the anthropic provider and its tokens', async () => {
    const answer = await post(gw, '/v1/messages', { model: 'mock-claude', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] }, { 'anthropic-version': '2023-06-01' });
    assert.equal(answer.status, 200, answer.text);
    const { request, attempts } = await spansOf(receiver, answer.requestId);
    assert.equal(request.name, 'chat mock-claude');
    assert.equal(request.attributes['gen_ai.provider.name'], 'anthropic');
    assert.equal(request.attributes['gen_ai.request.max_tokens'], 20);
    assert.equal(request.attributes['gen_ai.usage.input_tokens'], 10);
    assert.equal(request.attributes['gen_ai.usage.output_tokens'], 6);
    assert.equal(request.attributes['url.path'], '/v1/messages');
    assert.equal(attempts.length, 1);
    assert.equal(attempts[0]!.attributes['gen_ai.provider.name'], 'anthropic');
    assert.equal(attempts[0]!.attributes['gen_ai.usage.output_tokens'], 6);
  });

  test('a stream: its spans end with the stream and carry the usage of its last chunk', async () => {
    const answer = await chat(gw, 'gpt-4o', { stream: true });
    assert.equal(answer.status, 200);
    assert.match(answer.text, /data: \[DONE\]/);
    const { request, attempts } = await spansOf(receiver, answer.requestId);
    assert.equal(request.attributes['sluice.stream'], true);
    assert.equal(request.attributes['gen_ai.usage.input_tokens'], 11);
    assert.equal(request.attributes['gen_ai.usage.output_tokens'], 7);
    assert.equal(attempts[0]!.attributes['gen_ai.usage.output_tokens'], 7);
  });

  test('a route of two targets whose first fails: two attempt spans, the first with its failure class', async () => {
    const answer = await chat(gw, 'two-targets');
    assert.equal(answer.status, 200, answer.text);
    const { request, attempts } = await spansOf(receiver, answer.requestId, 2);
    assert.equal(attempts.length, 2);
    const [first, second] = attempts as [ReceivedSpan, ReceivedSpan];
    assert.equal(first.attributes['gen_ai.request.model'], 'first-model');
    assert.equal(first.attributes['error.type'], 'server_error');
    assert.equal(first.attributes['http.response.status_code'], 503);
    assert.equal(first.status.code, 2, 'the failed attempt is an error');
    assert.equal(second.attributes['gen_ai.request.model'], 'second-model');
    assert.equal(second.attributes['sluice.attempt'], 2);
    assert.equal(second.status.code, 0);
    assert.equal(request.attributes['sluice.attempts'], 2);
    assert.equal(request.status.code, 0, 'the request itself succeeded');
  });

  test('traceparent: the caller\'s span is the parent, its tracestate is kept, and the upstream gets the attempt\'s own traceparent', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const callerSpan = '00f067aa0ba902b7';
    mock.reset();
    const answer = await chat(gw, 'gpt-4o', {}, { traceparent: `00-${traceId}-${callerSpan}-01`, tracestate: 'vendor=abc' });
    assert.equal(answer.status, 200);
    const { request, attempts } = await spansOf(receiver, answer.requestId);
    assert.equal(request.traceId, traceId);
    assert.equal(request.parentSpanId, callerSpan);
    assert.equal(request.traceState, 'vendor=abc');
    const attempt = attempts[0]!;
    const upstream = mock.received.find((r) => r.headers['x-request-id'] === answer.requestId);
    assert.ok(upstream, 'the upstream request');
    assert.equal(upstream.headers.traceparent, `00-${traceId}-${attempt.spanId}-01`);
    assert.equal(upstream.headers.tracestate, 'vendor=abc');
  });

  test('an invalid traceparent starts a new trace: the upstream gets ours, and no tracestate', async () => {
    mock.reset();
    const answer = await chat(gw, 'gpt-4o', {}, { traceparent: `00-${'0'.repeat(32)}-00f067aa0ba902b7-01`, tracestate: 'vendor=abc' });
    assert.equal(answer.status, 200);
    const { request, attempts } = await spansOf(receiver, answer.requestId);
    assert.equal(request.parentSpanId, '');
    const upstream = mock.received.find((r) => r.headers['x-request-id'] === answer.requestId)!;
    assert.equal(upstream.headers.traceparent, `00-${request.traceId}-${attempts[0]!.spanId}-01`);
    assert.equal(upstream.headers.tracestate, undefined);
  });

  test('a request refused before any attempt (unknown model) has its span, with the error and no attempt', async () => {
    const answer = await chat(gw, 'no-such-model');
    assert.equal(answer.status, 404);
    await receiver.waitFor((spans) => requestSpan(spans, answer.requestId) !== undefined);
    const request = requestSpan(receiver.spans, answer.requestId)!;
    assert.equal(request.attributes['http.response.status_code'], 404);
    assert.equal(request.attributes['error.type'], 'model_not_found');
    assert.equal(attemptSpans(receiver.spans, request).length, 0);
  });

  test('a made-up model name of 100 KB is cut to 256 characters in the span', async () => {
    const answer = await chat(gw, `m${'x'.repeat(100_000)}`);
    assert.equal(answer.status, 404);
    await receiver.waitFor((spans) => requestSpan(spans, answer.requestId) !== undefined);
    const request = requestSpan(receiver.spans, answer.requestId)!;
    assert.equal(request.name.length, 'chat '.length + 256);
    assert.ok(String(request.attributes['gen_ai.request.model']).length <= 1024);
  });

  test('hostile traceparent and tracestate headers (random bytes, oversize) never fail a request, and never reach the upstream as sent unless valid', async () => {
    const seed = Number(process.env.SLUICE_FUZZ_SEED ?? 20261201);
    const runs = Math.min(Number(process.env.SLUICE_FUZZ_RUNS ?? 40), 200);
    // What Node's HTTP client lets into a header value: tab, visible ASCII, space, obs-text.
    const headerChar = fc.oneof(fc.constantFrom('\t', ' ', '-', '0', 'f', 'a', '1'), fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)), fc.integer({ min: 0x80, max: 0xff }).map((c) => String.fromCharCode(c)));
    const headerValue = fc.oneof(
      fc.string({ unit: headerChar, maxLength: 80 }),
      fc.string({ unit: headerChar, minLength: 4000, maxLength: 6000 }),
      // Near misses of a valid value: one character changed.
      fc.tuple(fc.nat(54), headerChar).map(([at, c]) => { const valid = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'; return valid.slice(0, at) + c + valid.slice(at + 1); }),
    );
    const valid = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/;
    await fc.assert(
      fc.asyncProperty(headerValue, fc.option(headerValue, { nil: undefined }), async (traceparent, tracestate) => {
        mock.reset();
        const res = await new Promise<{ status: number; requestId: string }>((resolve, reject) => {
          const url = new URL(`${gw.proxyUrl}/v1/chat/completions`);
          const req = httpRequest(
            { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json', traceparent, ...(tracestate !== undefined ? { tracestate } : {}) } },
            (r) => {
              r.resume();
              r.on('end', () => resolve({ status: r.statusCode ?? 0, requestId: String(r.headers['x-request-id'] ?? '') }));
            },
          );
          req.on('error', reject);
          req.end(JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] }));
        });
        assert.equal(res.status, 200);
        const upstream = mock.received.find((r) => r.headers['x-request-id'] === res.requestId);
        assert.ok(upstream);
        const sent = String(upstream.headers.traceparent);
        assert.match(sent, valid, 'the upstream always gets a valid traceparent');
        assert.notEqual(sent, traceparent, 'never the caller\'s own value');
        if (upstream.headers.tracestate !== undefined) assert.equal(sent.slice(3, 35), traceparent.trim().slice(3, 35), 'a tracestate goes upstream only within the caller\'s trace');
      }),
      { seed, numRuns: runs },
    );
    // Still alive and exporting.
    const answer = await chat(gw, 'gpt-4o');
    assert.equal(answer.status, 200);
    await spansOf(receiver, answer.requestId);
    assert.equal(gw.stderr(), '');
  });
});

describe('the drain and the exit (L9)', () => {
  test('L9: SIGTERM during a stream: the stream finishes, the drain events are on its spans, and every span reaches the collector before the exit, 0', async () => {
    const receiver = await startOtlpReceiver();
    // No OTEL_BSP_SCHEDULE_DELAY: the SDK's default delay (5 s) is longer than this test's drain, so the spans leave at the exit's flush.
    const gw = await startGateway({ config: tracedConfig(receiver, { shutdown: { min_drain_secs: 0.5 } }) });
    try {
      const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-mock': JSON.stringify({ chunks: 12, sseIntervalMs: 100 }) },
        body: JSON.stringify({ model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'long' }] }),
      });
      assert.equal(res.status, 200);
      const requestId = res.headers.get('x-request-id')!;
      const reader = res.body!.getReader();
      const first = await reader.read();
      assert.ok(!first.done);
      gw.signal('SIGTERM');
      await gw.waitForLog((l) => l.event === 'drain_started');
      let text = Buffer.from(first.value!).toString('utf8');
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += Buffer.from(value).toString('utf8');
      }
      assert.match(text, /data: \[DONE\]\n\n$/, 'the stream finished');
      const exit = await gw.exited;
      assert.equal(exit.code, 0);
      // Read at once: the exit waited for the export.
      const request = requestSpan(receiver.spans, requestId);
      assert.ok(request, `the request span reached the collector before the exit (received: ${receiver.spans.map((s) => s.name).join(', ')})`);
      assert.equal(attemptSpans(receiver.spans, request).length, 1, 'and its attempt span');
      const started = request.events.find((e) => e.name === 'sluice.drain.started');
      assert.ok(started, `the drain is an event of the request span (events: ${request.events.map((e) => e.name).join(', ')})`);
      assert.equal(started.attributes['sluice.drain.trigger'], 'SIGTERM');
      assert.equal(started.attributes['sluice.drain.min_drain_secs'], 0.5);
      assert.equal(started.attributes['sluice.in_flight'], 1);
      assert.ok(BigInt(started.timeUnixNano) > BigInt(request.startTimeUnixNano) && BigInt(started.timeUnixNano) < BigInt(request.endTimeUnixNano));
      const drain = receiver.spans.find((s) => s.name === 'sluice.drain');
      assert.ok(drain, 'the drain has its own span');
      assert.deepEqual(
        drain.events.map((e) => e.name).filter((name) => name !== 'sluice.drain.progress'),
        ['sluice.drain.started', 'sluice.drain.window_over', 'sluice.drain.listeners_closed', 'sluice.process.exit'],
      );
      assert.equal(drain.attributes['sluice.exit_code'], 0);
      assert.equal(started.attributes['sluice.drain.trace_id'], drain.traceId);
      assert.ok(BigInt(drain.endTimeUnixNano) >= BigInt(request.endTimeUnixNano), 'the drain span lasts until the exit');
      assert.ok(!gw.logs.some((l) => l.event === 'traces_not_exported'));
    } finally {
      await gw.stop();
      await receiver.close();
    }
  });

  test('L8: a second signal ends a stuck stream: its spans say drain_forced, the drain span is an error, exported before the exit, 1', async () => {
    const receiver = await startOtlpReceiver();
    const gw = await startGateway({ config: tracedConfig(receiver, { shutdown: { min_drain_secs: 0 } }) });
    try {
      const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-mock': JSON.stringify({ stallAfterEvents: 2 }) },
        body: JSON.stringify({ model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'stuck' }] }),
      });
      const requestId = res.headers.get('x-request-id')!;
      const reader = res.body!.getReader();
      await reader.read();
      gw.signal('SIGTERM');
      await gw.waitForLog((l) => l.event === 'drain_started');
      gw.signal('SIGTERM');
      let text = '';
      for (;;) {
        const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
        if (done) break;
        text += Buffer.from(value!).toString('utf8');
      }
      assert.match(text, /event: error/, 'the stream ended with an explicit error (L8)');
      const exit = await gw.exited;
      assert.equal(exit.code, 1);
      const request = requestSpan(receiver.spans, requestId);
      assert.ok(request, 'the request span was exported before the exit');
      assert.equal(request.attributes['error.type'], 'drain_forced');
      assert.deepEqual(
        request.events.map((e) => e.name).filter((n) => n.startsWith('sluice.drain')),
        ['sluice.drain.started', 'sluice.drain.window_over', 'sluice.drain.forced'],
      );
      const attempt = attemptSpans(receiver.spans, request)[0];
      assert.equal(attempt?.attributes['error.type'], 'cancelled', 'the upstream attempt was cut');
      const drain = receiver.spans.find((s) => s.name === 'sluice.drain');
      assert.ok(drain);
      assert.equal(drain.status.code, 2);
      assert.equal(drain.attributes['sluice.exit_code'], 1);
      assert.ok(drain.events.some((e) => e.name === 'sluice.drain.forced' && e.attributes['sluice.drain.reason'] === 'second SIGTERM'));
    } finally {
      await gw.stop();
      await receiver.close();
    }
  });

  test('L9: a collector that never answers holds the exit at most tracing.flush_timeout_ms; exit 0, the loss logged once', async () => {
    const receiver = await startOtlpReceiver();
    receiver.mode({ kind: 'never' });
    const gw = await startGateway({ config: tracedConfig(receiver, { tracing: { flush_timeout_ms: 800 } }), env: FAST_EXPORT });
    try {
      for (let i = 0; i < 3; i++) assert.equal((await chat(gw, 'gpt-4o')).status, 200);
      // The first export is sent, and hangs.
      const deadline = Date.now() + 5000;
      while (receiver.exports.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.ok(receiver.exports.length > 0, 'an export was attempted');
      gw.signal('SIGTERM');
      const exitLine = await gw.waitForLog((l) => l.event === 'process_exit');
      const exit = await gw.exited;
      assert.equal(exit.code, 0);
      const held = exit.at - Date.parse(String(exitLine.time));
      assert.ok(held >= 700, `the exit waited for the export (${held} ms)`);
      assert.ok(held < 800 + 1500, `the exit came within the bound and a little slack (${held} ms; the exporter's own timeout is 10 s)`);
      const lost = gw.logs.filter((l) => l.event === 'traces_not_exported');
      assert.equal(lost.length, 1);
      assert.equal(lost[0]!.reason, 'flush_timeout');
      assert.ok(Number(lost[0]!.spans) >= 6, `3 requests, 2 spans each, and the drain's (${String(lost[0]!.spans)})`);
    } finally {
      await gw.stop();
      await receiver.close();
    }
  });
});

describe('off by default', () => {
  /** Writes to stderr every module specifier that names OpenTelemetry, or our SDK side, as it is resolved. */
  const LOAD_PROBE = `--import=data:text/javascript,${encodeURIComponent("import{registerHooks}from'node:module';registerHooks({resolve(s,c,n){if(s.includes('@opentelemetry')||s.includes('otel-tracing'))process.stderr.write('loaded:'+s+'\\n');return n(s,c)}})")}`;
  /** What the probe saw, but `@opentelemetry/api`: prom-client loads that small API package itself (for exemplars); it is not the SDK. */
  const sdkLoads = (stderr: string) => stderr.split('\n').filter((l) => l.startsWith('loaded:') && l !== 'loaded:@opentelemetry/api');

  test('without a tracing section nothing is exported, even with the OTEL_* variables set, and the SDK is never loaded', async () => {
    const receiver = await startOtlpReceiver();
    const env = { ...FAST_EXPORT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url.replace('/v1/traces', ''), NODE_OPTIONS: LOAD_PROBE };
    const off = await startGateway({ config: { workers: 1, providers: providers(), models: models(), shutdown: { min_drain_secs: 0 } }, env });
    const on = await startGateway({ config: tracedConfig(receiver), env });
    try {
      const answer = await chat(off, 'gpt-4o', {}, { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' });
      assert.equal(answer.status, 200);
      assert.equal((await chat(off, 'gpt-4o', { stream: true })).status, 200);
      off.signal('SIGTERM');
      assert.equal((await off.exited).code, 0);
      assert.deepEqual(sdkLoads(off.stderr()), [], 'nothing of the SDK was resolved');
      assert.ok(!off.logs.some((l) => l.event === 'tracing_started'));
      // The same probe sees the SDK in a traced gateway (so it can see it at all).
      assert.ok(sdkLoads(on.stderr()).includes('loaded:@opentelemetry/sdk-trace-base'), on.stderr());
      const traced = await chat(on, 'gpt-4o');
      await spansOf(receiver, traced.requestId);
      assert.ok(!receiver.spans.some((s) => s.attributes['sluice.request_id'] === answer.requestId), 'nothing of the untraced gateway');
      assert.ok(receiver.spans.every((s) => s.resource['process.pid'] === on.child.pid), 'every span is the traced gateway\'s');
    } finally {
      await off.stop();
      await on.stop();
      await receiver.close();
    }
  });
});

describe('workers', () => {
  test('workers: 2: each worker exports its own spans and its own drain; the supervisor none', async () => {
    const receiver = await startOtlpReceiver();
    const gw = await startGateway({ config: tracedConfig(receiver, { workers: 2 }), env: FAST_EXPORT });
    try {
      const answers = await Promise.all(Array.from({ length: 6 }, () => postOnNewConnection(gw, { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] })));
      for (const a of answers) assert.equal(a.status, 200);
      await receiver.waitFor((spans) => answers.every((a) => requestSpan(spans, a.requestId) !== undefined), 10_000, 'every request span');
      const pids = new Set(answers.map((a) => requestSpan(receiver.spans, a.requestId)!.resource['process.pid']));
      assert.equal(pids.size, 2, 'spans from both workers');
      assert.ok(!pids.has(gw.child.pid!), 'none from the supervisor');
      const started = gw.logs.filter((l) => l.event === 'tracing_started');
      assert.deepEqual(started.map((l) => typeof l.worker).sort(), ['number', 'number'], 'an exporter in each worker, none in the supervisor');
      gw.signal('SIGTERM');
      assert.equal((await gw.exited).code, 0);
      const drains = receiver.spans.filter((s) => s.name === 'sluice.drain');
      assert.deepEqual(new Set(drains.map((d) => d.resource['process.pid'])), pids, 'one drain span per worker');
    } finally {
      await gw.stop();
      await receiver.close();
    }
  });
});

describe('docs/traces.md', () => {
  test('its sample config validates with a collector token set', async () => {
    const page = readFileSync(join(ROOT, 'docs/traces.md'), 'utf8');
    const sample = /```yaml\n([\s\S]*?)```/.exec(page)?.[1];
    assert.ok(sample);
    const dir = mkdtempSync(join(tmpdir(), 'sluice-traces-'));
    writeFileSync(join(dir, 'sluice.yaml'), `listeners: [{ name: proxy, address: "127.0.0.1:0", role: proxy }]\n${sample}`);
    const result = await runSluice(['validate', '--config', join(dir, 'sluice.yaml')], { env: { OTEL_TOKEN: 'collector-token' } });
    assert.equal(result.code, 0, result.stderr);
  });
});

describe('secrets', () => {
  test('the tracing.headers (a token) reach the collector and never the logs, also when the collector refuses the export', async () => {
    const receiver = await startOtlpReceiver();
    receiver.mode({ kind: 'status', status: 401 });
    const secret = 'trace-token-7c1f0e2b9a';
    const gw = await startGateway({
      config: tracedConfig(receiver, { tracing: { headers: { authorization: `Bearer ${secret}`, 'x-collector-key': `${secret}-2` }, flush_timeout_ms: 500 } }),
      env: FAST_EXPORT,
    });
    try {
      assert.equal((await chat(gw, 'gpt-4o')).status, 200);
      const failed = await gw.waitForLog((l) => l.event === 'traces_export_failed');
      assert.equal(failed.endpoint, receiver.url);
      assert.equal(receiver.exports[0]!.authorization, `Bearer ${secret}`);
      assert.equal(receiver.exports[0]!['x-collector-key'], `${secret}-2`);
      // Requests are not affected.
      assert.equal((await chat(gw, 'gpt-4o')).status, 200);
      // A second refused export is counted, not logged again (at most one line a minute).
      await receiver.waitFor(() => receiver.exports.length >= 2, 10_000, 'a second export');
      assert.equal(gw.logs.filter((l) => l.event === 'traces_export_failed').length, 1);
      gw.signal('SIGTERM');
      assert.equal((await gw.exited).code, 0);
      assert.ok(gw.logs.some((l) => l.event === 'traces_not_exported'));
      assert.ok(!gw.stdout().includes(secret), 'not in the logs');
      assert.ok(!gw.stderr().includes(secret), 'not on stderr');
    } finally {
      await gw.stop();
      await receiver.close();
    }
  });
});
