// What an operator sees: health probes on every listener, Prometheus metrics on the admin listener
// only (requests, durations, in-flight, upstream errors, tokens, connections), one access log line
// per request, and no secret anywhere in the process output.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Agent, request, type ClientRequest, type IncomingMessage } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { eventually, metricValue, scrape, startGateway, type GatewayProcess, type LogLine } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream } from '../support/mock-upstream.ts';

const CLIENT_KEY = 'sk-client-key-observability-1';
const NAMED_CLIENT_KEY = 'sk-client-key-observability-named';
const OPENAI_PROVIDER_KEY = 'sk-provider-openai-observability-secret';
const ANTHROPIC_PROVIDER_KEY = 'sk-ant-provider-observability-secret';
const HEADER_SECRET = 'org-header-secret-observability';

let mock: MockUpstream;
let gw: GatewayProcess;

before(async () => {
  mock = await startMockUpstream();
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const deadPort = (probe.address() as AddressInfo).port;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  gw = await startGateway({
    config: {
      listeners: [
        { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
        { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
        // Used only by the connection-gauge test, so that no other test's connections count.
        { name: 'side', address: '127.0.0.1:0', role: 'proxy' },
      ],
      providers: [
        { name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: OPENAI_PROVIDER_KEY, headers: { 'openai-organization': HEADER_SECRET } },
        { name: 'claude', type: 'anthropic', base_url: mock.url, api_key: ANTHROPIC_PROVIDER_KEY },
        { name: 'dead', type: 'openai', base_url: `http://127.0.0.1:${deadPort}/v1`, api_key: OPENAI_PROVIDER_KEY },
        { name: 'local', type: 'echo' },
      ],
      models: [
        { name: 'gpt-plain', provider: 'up' },
        { name: 'gpt-json-usage', provider: 'up' },
        { name: 'gpt-sse-usage', provider: 'up' },
        { name: 'gpt-sse-no-usage', provider: 'up' },
        { name: 'gpt-dead', provider: 'dead' },
        { name: 'claude-json', provider: 'claude' },
        { name: 'claude-sse', provider: 'claude' },
        { name: 'echo', provider: 'local' },
      ],
      keys: [CLIENT_KEY, { name: 'named', key: NAMED_CLIENT_KEY }],
      // The most verbose level: the secrets test covers every line the gateway can write.
      log: { level: 'trace' },
    },
  });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

/** A POST with the client key; a header given as `undefined` is left out. */
function post(path: string, body: unknown, headers: Record<string, string | undefined> = {}, base = gw.proxyUrl): Promise<Response> {
  const all: Record<string, string | undefined> = { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}`, ...headers };
  return fetch(`${base}${path}`, {
    method: 'POST',
    headers: Object.fromEntries(Object.entries(all).filter((e): e is [string, string] => e[1] !== undefined)),
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

const chat = (model: string, extra: Record<string, unknown> = {}) => ({ model, messages: [{ role: 'user', content: 'count me' }], ...extra });

function accessLines(requestId: string): LogLine[] {
  return gw.logs.filter((l) => l.event === 'access' && l.request_id === requestId);
}

/** The access line of a finished response (found by the x-request-id the gateway sent back). */
function accessLine(res: Response): Promise<LogLine> {
  const id = res.headers.get('x-request-id');
  assert.ok(id, 'no x-request-id response header');
  return gw.waitForLog((l) => l.event === 'access' && l.request_id === id, 5000);
}

describe('health probes', () => {
  for (const listener of ['proxy', 'admin'] as const) {
    test(`/livez, /readyz and /readyz?verbose on the ${listener} listener, with no client key`, async () => {
      const base = gw.urls[listener]!;
      const live = await fetch(`${base}/livez`);
      assert.equal(live.status, 200);
      assert.match(live.headers.get('content-type') ?? '', /^application\/json/);
      assert.deepEqual(await live.json(), { status: 'live' });
      const ready = await fetch(`${base}/readyz`);
      assert.equal(ready.status, 200);
      assert.deepEqual(await ready.json(), { status: 'ready' });
      const verbose = await fetch(`${base}/readyz?verbose`);
      assert.equal(verbose.status, 200);
      const body = (await verbose.json()) as { status: string; checks: { name: string; status: string }[] };
      assert.equal(body.status, 'ready');
      assert.deepEqual(
        body.checks.map((c) => c.name).sort(),
        ['client_keys', 'config_loaded', 'healthcheck_ok', 'listeners_up', 'not_draining'],
      );
      assert.ok(body.checks.every((c) => c.status === 'pass'), JSON.stringify(body.checks));
      const line = await accessLine(verbose);
      assert.equal(line.path, '/readyz');
      assert.equal(line.listener, listener);
    });
  }
});

describe('/metrics', () => {
  test('is served on the admin listener only', async () => {
    const onProxy = await fetch(`${gw.proxyUrl}/metrics`, { headers: { authorization: `Bearer ${CLIENT_KEY}` } });
    assert.equal(onProxy.status, 404);
    assert.equal(((await onProxy.json()) as { error: { code: string } }).error.code, 'unknown_path');
    const anonymous = await fetch(`${gw.proxyUrl}/metrics`);
    assert.equal(anonymous.status, 404);
    await anonymous.arrayBuffer();
    // And the admin listener does not proxy.
    const proxyOnAdmin = await post('/v1/chat/completions', chat('gpt-plain'), {}, gw.adminUrl);
    assert.equal(proxyOnAdmin.status, 404);
    await proxyOnAdmin.arrayBuffer();
  });

  test('is Prometheus text with every sluice metric described', async () => {
    // One request first, so the labelled series exist.
    const res = await post('/v1/chat/completions', chat('gpt-plain'));
    assert.equal(res.status, 200);
    await res.arrayBuffer();
    await accessLine(res);
    const metrics = await fetch(`${gw.adminUrl}/metrics`);
    assert.equal(metrics.status, 200);
    assert.match(metrics.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    const text = await metrics.text();
    for (const [name, type] of [
      ['sluice_requests_total', 'counter'],
      ['sluice_request_duration_seconds', 'histogram'],
      ['sluice_in_flight_requests', 'gauge'],
      ['sluice_upstream_errors_total', 'counter'],
      ['sluice_tokens_total', 'counter'],
      ['sluice_open_connections', 'gauge'],
    ]) {
      assert.match(text, new RegExp(`^# HELP ${name} \\S`, 'm'), `${name} has no HELP`);
      assert.match(text, new RegExp(`^# TYPE ${name} ${type}$`, 'm'), `${name} is not a ${type}`);
    }
    // Every sample line is `name{labels} value`.
    for (const line of text.split('\n')) {
      if (line === '' || line.startsWith('#')) continue;
      assert.match(line, /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? (-?[0-9.e+-]+|NaN|[+-]Inf)$/, line);
    }
    // The scrape sees itself in flight.
    assert.equal(metricValue(text, 'sluice_in_flight_requests', { endpoint: 'metrics', protocol: 'http1' }), 1);
  });

  test('sluice_requests_total counts by endpoint, status and model', async () => {
    const labels = { endpoint: 'chat_completions', status: '200', model: 'gpt-plain' };
    const before = metricValue(await scrape(gw), 'sluice_requests_total', labels) ?? 0;
    for (let i = 0; i < 3; i++) {
      const res = await post('/v1/chat/completions', chat('gpt-plain'));
      assert.equal(res.status, 200);
      await accessLine(res);
      await res.arrayBuffer();
    }
    const failed = await post('/v1/chat/completions', chat('gpt-plain'), mockHeader({ status: 503 }));
    assert.equal(failed.status, 503);
    await failed.arrayBuffer();
    await accessLine(failed);
    const embeddings = await post('/v1/embeddings', { model: 'echo', input: 'x' });
    assert.equal(embeddings.status, 200);
    await embeddings.arrayBuffer();
    await accessLine(embeddings);
    const text = await scrape(gw);
    assert.equal(metricValue(text, 'sluice_requests_total', labels), before + 3);
    assert.ok((metricValue(text, 'sluice_requests_total', { endpoint: 'chat_completions', status: '503', model: 'gpt-plain' }) ?? 0) >= 1);
    assert.ok((metricValue(text, 'sluice_requests_total', { endpoint: 'embeddings', status: '200', model: 'echo' }) ?? 0) >= 1);
  });

  test('a model name that routes nowhere does not become a label value', async () => {
    const made_up = `made-up-${randomUUID()}`;
    const res = await post('/v1/chat/completions', chat(made_up));
    assert.equal(res.status, 404);
    await res.arrayBuffer();
    const line = await accessLine(res);
    assert.equal(line.model, made_up); // the log still says what was asked for
    const text = await scrape(gw);
    assert.ok(!text.includes(made_up), 'an unrouted model name became a metric label');
    assert.ok((metricValue(text, 'sluice_requests_total', { endpoint: 'chat_completions', status: '404', model: '' }) ?? 0) >= 1);
  });

  test('sluice_request_duration_seconds is a histogram of whole-request time', async () => {
    const before = await scrape(gw);
    const count0 = metricValue(before, 'sluice_request_duration_seconds_count', { endpoint: 'completions' }) ?? 0;
    const fast0 = metricValue(before, 'sluice_request_duration_seconds_bucket', { endpoint: 'completions', le: '0.25' }) ?? 0;
    const sum0 = metricValue(before, 'sluice_request_duration_seconds_sum', { endpoint: 'completions' }) ?? 0;
    // One request that takes at least 400 ms upstream.
    const res = await post('/v1/completions', { model: 'gpt-plain', prompt: 'slow' }, mockHeader({ headersDelayMs: 400 }));
    assert.equal(res.status, 200);
    await res.arrayBuffer();
    await accessLine(res);
    const text = await scrape(gw);
    assert.equal(metricValue(text, 'sluice_request_duration_seconds_count', { endpoint: 'completions' }), count0 + 1);
    assert.equal(metricValue(text, 'sluice_request_duration_seconds_bucket', { endpoint: 'completions', le: '+Inf' }), count0 + 1);
    assert.equal(metricValue(text, 'sluice_request_duration_seconds_bucket', { endpoint: 'completions', le: '0.25' }), fast0);
    const sum = metricValue(text, 'sluice_request_duration_seconds_sum', { endpoint: 'completions' })!;
    assert.ok(sum - sum0 >= 0.4, `the slow request added ${sum - sum0} s`);
  });

  test('sluice_in_flight_requests follows a stream from first byte to end', async () => {
    const labels = { endpoint: 'chat_completions', protocol: 'http1' };
    await eventually(async () => (metricValue(await scrape(gw), 'sluice_in_flight_requests', labels) ?? 0) === 0, 5000, 'nothing in flight');
    // Three events a second apart: the scrape after the first one has a second to spare.
    const res = await post('/v1/chat/completions', chat('gpt-plain', { stream: true }), mockHeader({ chunks: 1, sseIntervalMs: 1000 }));
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    await reader.read();
    assert.equal(metricValue(await scrape(gw), 'sluice_in_flight_requests', labels), 1);
    let text = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString();
    }
    assert.match(text, /data: \[DONE\]/);
    await eventually(async () => metricValue(await scrape(gw), 'sluice_in_flight_requests', labels) === 0, 5000, 'in-flight back to 0');
  });

  test('sluice_upstream_errors_total counts a 502 by provider and kind', async () => {
    const before = await scrape(gw);
    const connect0 = metricValue(before, 'sluice_upstream_errors_total', { provider: 'dead', kind: 'connect' }) ?? 0;
    const status0 = metricValue(before, 'sluice_upstream_errors_total', { provider: 'up', kind: 'status' }) ?? 0;
    const res = await post('/v1/chat/completions', chat('gpt-dead'));
    assert.equal(res.status, 502);
    await res.arrayBuffer();
    const line = await accessLine(res);
    assert.equal(line.error, 'upstream_connect_failed');
    assert.equal(line.provider, 'dead');
    const upstream500 = await post('/v1/chat/completions', chat('gpt-plain'), mockHeader({ status: 500 }));
    assert.equal(upstream500.status, 500);
    await upstream500.arrayBuffer();
    await accessLine(upstream500);
    const text = await scrape(gw);
    assert.equal(metricValue(text, 'sluice_upstream_errors_total', { provider: 'dead', kind: 'connect' }), connect0 + 1);
    assert.equal(metricValue(text, 'sluice_upstream_errors_total', { provider: 'up', kind: 'status' }), status0 + 1);
  });

  describe('sluice_tokens_total', () => {
    async function tokens(model: string, provider: string): Promise<{ prompt: number | undefined; completion: number | undefined }> {
      const text = await scrape(gw);
      return {
        prompt: metricValue(text, 'sluice_tokens_total', { model, provider, type: 'prompt' }),
        completion: metricValue(text, 'sluice_tokens_total', { model, provider, type: 'completion' }),
      };
    }

    test('from a JSON usage object', async () => {
      const res = await post('/v1/chat/completions', chat('gpt-json-usage'));
      assert.equal(res.status, 200);
      assert.deepEqual(((await res.json()) as { usage: unknown }).usage, { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 });
      const line = await accessLine(res);
      assert.equal(line.prompt_tokens, 11);
      assert.equal(line.completion_tokens, 7);
      assert.deepEqual(await tokens('gpt-json-usage', 'up'), { prompt: 11, completion: 7 });
    });

    test('from the last SSE chunk when the stream carries usage', async () => {
      // Events written one by one, so the usage chunk arrives on its own.
      const res = await post('/v1/chat/completions', chat('gpt-sse-usage', { stream: true, stream_options: { include_usage: true } }), mockHeader({ sseIntervalMs: 5 }));
      assert.equal(res.status, 200);
      const text = await res.text();
      assert.match(text, /"usage":\{"prompt_tokens":11/);
      const line = await accessLine(res);
      assert.equal(line.prompt_tokens, 11);
      assert.equal(line.completion_tokens, 7);
      assert.deepEqual(await tokens('gpt-sse-usage', 'up'), { prompt: 11, completion: 7 });
    });

    test('a stream whose client did not ask for usage is counted, and the client gets none', async () => {
      const res = await post('/v1/chat/completions', chat('gpt-sse-no-usage', { stream: true }), mockHeader({ sseIntervalMs: 5 }));
      assert.equal(res.status, 200);
      const text = await res.text();
      // The gateway asked the provider for it and took it out again: no usage chunk, no "usage":null.
      assert.doesNotMatch(text, /"usage"/);
      assert.match(text, /"finish_reason":"stop"[\s\S]*data: \[DONE\]\n\n$/);
      const line = await accessLine(res);
      assert.equal(line.prompt_tokens, 11);
      assert.equal(line.completion_tokens, 7);
      assert.deepEqual(await tokens('gpt-sse-no-usage', 'up'), { prompt: 11, completion: 7 });
    });

    test('from an Anthropic message and an Anthropic stream (message_start + message_delta)', async () => {
      const json = await post('/v1/messages', { model: 'claude-json', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }, { authorization: undefined, 'x-api-key': CLIENT_KEY });
      assert.equal(json.status, 200);
      await json.arrayBuffer();
      await accessLine(json);
      assert.deepEqual(await tokens('claude-json', 'claude'), { prompt: 10, completion: 6 });
      const res = await post(
        '/v1/messages',
        { model: 'claude-sse', max_tokens: 16, stream: true, messages: [{ role: 'user', content: 'hi' }] },
        { authorization: undefined, 'x-api-key': CLIENT_KEY, ...mockHeader({ sseIntervalMs: 5 }) },
      );
      assert.equal(res.status, 200);
      assert.match(await res.text(), /event: message_stop/);
      const line = await accessLine(res);
      assert.equal(line.prompt_tokens, 10);
      assert.equal(line.completion_tokens, 6);
      assert.deepEqual(await tokens('claude-sse', 'claude'), { prompt: 10, completion: 6 });
    });

    test('tokens accumulate across requests', async () => {
      const before = await tokens('gpt-json-usage', 'up');
      for (let i = 0; i < 2; i++) {
        const res = await post('/v1/chat/completions', chat('gpt-json-usage'));
        await res.arrayBuffer();
        await accessLine(res);
      }
      assert.deepEqual(await tokens('gpt-json-usage', 'up'), { prompt: before.prompt! + 22, completion: before.completion! + 14 });
    });
  });

  test('sluice_open_connections counts connections by listener and state', async () => {
    const side = gw.urls.side!;
    const count = async (state?: string) => {
      const text = await scrape(gw);
      let total = 0;
      for (const s of state ? [state] : ['fresh', 'idle', 'active', 'upgraded']) {
        total += metricValue(text, 'sluice_open_connections', { listener: 'side', state: s }) ?? 0;
      }
      return total;
    };
    const send = (agent: Agent | false, headers: Record<string, string>, onResponse: (res: IncomingMessage) => void) => {
      const req = request(`${side}/v1/chat/completions`, { agent, method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}`, ...headers } }, onResponse);
      req.end(JSON.stringify(chat('gpt-plain', { stream: true })));
      return req;
    };
    assert.equal(await count(), 0);
    const agent = new Agent({ keepAlive: true });
    let slow: ClientRequest | undefined;
    try {
      // A finished request leaves its keep-alive connection idle.
      await new Promise<void>((resolve, reject) => {
        send(agent, {}, (res) => {
          assert.equal(res.statusCode, 200);
          res.resume();
          res.on('end', resolve);
        }).on('error', reject);
      });
      await eventually(async () => (await count('idle')) === 1, 5000, 'one idle connection');
      // A stream in progress holds an active one.
      await new Promise<void>((resolve, reject) => {
        slow = send(false, mockHeader({ chunks: 3, sseIntervalMs: 60_000 }), (res) => {
          assert.equal(res.statusCode, 200);
          res.once('data', () => resolve());
        });
        slow.on('error', reject);
      });
      assert.equal(await count('active'), 1);
      assert.equal(await count('idle'), 1);
      assert.equal(await count(), 2);
      const text = await scrape(gw);
      assert.equal(metricValue(text, 'sluice_connections_accepted_total', { listener: 'side' }), 2);
      // The admin connection of the scrape itself is open and active.
      assert.ok((metricValue(text, 'sluice_open_connections', { listener: 'admin', state: 'active' }) ?? 0) >= 1);
      slow!.on('error', () => {});
      slow!.destroy();
      await eventually(async () => (await count()) === 1, 5000, 'the stream connection closed');
      assert.equal(await count('idle'), 1);
    } finally {
      slow?.destroy();
      agent.destroy();
    }
    await eventually(async () => (await count()) === 0, 5000, 'side connections closed');
  });
});

describe('access log', () => {
  test('one JSON line per request, with ids, peer, route, status, timing and tokens', async () => {
    const callerId = `caller-${randomUUID()}`;
    const answer = await new Promise<{ status: number; requestId: string; localPort: number; body: string }>((resolve, reject) => {
      const req = request(
        `${gw.proxyUrl}/v1/chat/completions?trace=1`,
        { method: 'POST', agent: false, headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}`, 'x-request-id': callerId } },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (body += c));
          res.on('end', () => resolve({ status: res.statusCode!, requestId: String(res.headers['x-request-id']), localPort: req.socket!.localPort!, body }));
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify(chat('gpt-json-usage')));
    });
    assert.equal(answer.status, 200);
    assert.match(answer.requestId, /^[0-9a-f-]{36}$/);
    assert.notEqual(answer.requestId, callerId);
    const line = await gw.waitForLog((l) => l.event === 'access' && l.request_id === answer.requestId);
    assert.equal(line.downstream_request_id, callerId);
    assert.equal(line.peer, `127.0.0.1:${answer.localPort}`);
    assert.equal(line.method, 'POST');
    assert.equal(line.path, '/v1/chat/completions');
    assert.equal(line.status, 200);
    assert.equal(typeof line.duration_ms, 'number');
    assert.ok((line.duration_ms as number) >= 0 && (line.duration_ms as number) < 10_000, String(line.duration_ms));
    assert.equal(line.model, 'gpt-json-usage');
    assert.equal(line.provider, 'up');
    assert.equal(line.prompt_tokens, 11);
    assert.equal(line.completion_tokens, 7);
    assert.equal(line.listener, 'proxy');
    assert.equal(line.protocol, 'http1');
    assert.equal(line.level, 'info');
    assert.equal(line.error, undefined);
    assert.equal(typeof line.time, 'string');
    // The gateway's id went upstream too.
    const upstream = mock.received.find((r) => r.headers['x-request-id'] === answer.requestId);
    assert.ok(upstream, 'the request id was not sent upstream');

    // Exactly one line: a later request's line is there and this one has not repeated.
    const next = await post('/v1/chat/completions', chat('gpt-plain'));
    await next.arrayBuffer();
    await accessLine(next);
    assert.equal(accessLines(answer.requestId).length, 1);
  });

  test('a request without a caller id, and a failed one, log what is known', async () => {
    const plain = await fetch(`${gw.proxyUrl}/v1/models`, { headers: { authorization: `Bearer ${CLIENT_KEY}` } });
    assert.equal(plain.status, 200);
    await plain.arrayBuffer();
    const line = await accessLine(plain);
    assert.equal('downstream_request_id' in line, false);
    assert.equal(line.method, 'GET');
    assert.equal(line.path, '/v1/models');
    assert.equal(line.model, undefined);
    assert.equal(line.prompt_tokens, undefined);

    const denied = await post('/v1/chat/completions', chat('gpt-plain'), { authorization: 'Bearer sk-wrong-key-for-log-test' });
    assert.equal(denied.status, 401);
    await denied.arrayBuffer();
    const deniedLine = await accessLine(denied);
    assert.equal(deniedLine.status, 401);
    assert.equal(deniedLine.error, 'invalid_api_key');
    assert.equal(deniedLine.model, undefined);
    assert.equal(deniedLine.provider, undefined);
  });
});

describe('secrets', () => {
  test('no provider or client key, nor a presented wrong key, appears in stdout or stderr', async () => {
    const wrongKey = 'sk-wrong-client-key-never-logged';
    const requests: Promise<Response>[] = [
      post('/v1/chat/completions', chat('gpt-plain')),
      post('/v1/chat/completions', chat('gpt-plain'), { authorization: `Bearer ${NAMED_CLIENT_KEY}` }),
      post('/v1/chat/completions', chat('gpt-plain', { stream: true })),
      post('/v1/chat/completions', chat('gpt-plain'), { authorization: undefined, 'x-api-key': CLIENT_KEY }),
      post('/v1/chat/completions', chat('gpt-plain'), { authorization: `Bearer ${wrongKey}` }),
      post('/v1/chat/completions', chat('gpt-plain'), { authorization: undefined, 'x-api-key': wrongKey }),
      // A client presenting a provider's key is refused, and that key is not logged either.
      post('/v1/chat/completions', chat('gpt-plain'), { authorization: `Bearer ${OPENAI_PROVIDER_KEY}` }),
      post('/v1/messages', { model: 'claude-json', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }, { authorization: undefined, 'x-api-key': ANTHROPIC_PROVIDER_KEY }),
      post('/v1/chat/completions', chat('gpt-plain'), { authorization: undefined }),
      post('/v1/messages', { model: 'claude-sse', max_tokens: 8, stream: true, messages: [{ role: 'user', content: 'x' }] }, { authorization: undefined, 'x-api-key': CLIENT_KEY }),
      post('/v1/chat/completions', chat('gpt-dead')),
      post('/v1/chat/completions', chat('gpt-plain'), mockHeader({ status: 401 })),
      post('/v1/chat/completions', chat('gpt-plain', { stream: true }), mockHeader({ disconnectAfterEvents: 2 })),
      post('/v1/embeddings', { model: 'gpt-plain', input: 'x' }),
      post('/v1/chat/completions', '{not json', { authorization: `Bearer ${CLIENT_KEY}` }),
      fetch(`${gw.proxyUrl}/v1/models`, { headers: { authorization: `Bearer ${wrongKey}` } }),
      fetch(`${gw.adminUrl}/metrics`, { headers: { authorization: `Bearer ${CLIENT_KEY}` } }),
    ];
    const responses = await Promise.all(requests);
    const statuses = [];
    for (const res of responses) {
      statuses.push(res.status);
      await res.text();
      await accessLine(res);
    }
    assert.deepEqual(statuses, [200, 200, 200, 200, 401, 401, 401, 401, 401, 200, 502, 401, 200, 200, 400, 401, 200]);
    // The requests did reach the provider with its keys.
    assert.ok(mock.received.some((r) => r.headers.authorization === `Bearer ${OPENAI_PROVIDER_KEY}`));
    assert.ok(mock.received.some((r) => r.headers['x-api-key'] === ANTHROPIC_PROVIDER_KEY));
    assert.ok(mock.received.some((r) => r.headers['openai-organization'] === HEADER_SECRET));

    const output = gw.stdout() + gw.stderr();
    assert.ok(gw.logs.filter((l) => l.event === 'access').length >= requests.length);
    for (const secret of [CLIENT_KEY, NAMED_CLIENT_KEY, OPENAI_PROVIDER_KEY, ANTHROPIC_PROVIDER_KEY, HEADER_SECRET, wrongKey]) {
      assert.ok(!output.includes(secret), `${secret} appears in the gateway's output`);
      // Nor a recognisable part of it.
      assert.ok(!output.includes(secret.slice(-12)), `the end of ${secret} appears in the gateway's output`);
    }
  });
});
