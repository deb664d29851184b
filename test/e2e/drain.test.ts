// The drain contract (docs/graceful-shutdown.md, rules L1-L10, D3) against the built program: real
// signals, real sockets, streams that are still open when the drain begins.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Agent, request as undiciRequest } from 'undici';
import { connect as http2Connect } from 'node:http2';
import { startGateway, eventually, metricValue, scrape, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream } from '../support/mock-upstream.ts';
import { closedAt, httpRequest, isRefused, openSocket, postJson, postJsonKeepAlive } from '../support/http.ts';

let mock: MockUpstream;

before(async () => {
  mock = await startMockUpstream();
});
after(async () => {
  await mock?.close();
});

function config(shutdown: Record<string, unknown>, downstream: Record<string, unknown> = {}) {
  return {
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' }],
    models: [{ name: 'm', provider: 'up' }],
    shutdown: { progress_log_secs: 0.5, ...shutdown },
    downstream,
  };
}

const chat = (extra: Record<string, unknown> = {}) => ({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra });

async function readStream(res: Response): Promise<string> {
  let text = '';
  const decoder = new TextDecoder();
  for await (const chunk of res.body!) text += decoder.decode(chunk, { stream: true });
  return text;
}

test('L1: /readyz answers 503 within 100 ms of SIGTERM on every listener while /livez stays 200', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 3 }) });
  try {
    for (const url of [gw.proxyUrl, gw.adminUrl]) assert.equal((await httpRequest(`${url}/readyz`)).status, 200);
    const signalledAt = Date.now();
    gw.signal('SIGTERM');
    await eventually(async () => (await httpRequest(`${gw.proxyUrl}/readyz`)).status === 503, 2000, 'readyz 503');
    const elapsed = Date.now() - signalledAt;
    assert.ok(elapsed < 100, `readyz turned 503 after ${elapsed} ms`);
    for (const url of [gw.proxyUrl, gw.adminUrl]) {
      assert.equal((await httpRequest(`${url}/readyz`)).status, 503);
      assert.equal((await httpRequest(`${url}/livez`)).status, 200);
    }
    const verbose = JSON.parse((await httpRequest(`${gw.adminUrl}/readyz?verbose`)).body) as { checks: { name: string; status: string }[] };
    assert.deepEqual(verbose.checks.find((c) => c.name === 'not_draining'), { name: 'not_draining', status: 'fail' });
    const started = await gw.waitForLog((l) => l.event === 'drain_started');
    assert.equal(started.min_drain_secs, 3);
    assert.equal(typeof started.in_flight, 'number');
    assert.equal(typeof started.open_connections, 'number');
  } finally {
    await gw.stop();
  }
});

test('L2/L3/L5: a slow request outlives the window with 200; new connections in the window are served with Connection: close; the process then exits and the port refuses', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 1 }) });
  try {
    // Control: before the drain the same client's connection is kept.
    assert.equal((await postJsonKeepAlive(`${gw.proxyUrl}/v1/chat/completions`, chat())).headers.connection, 'keep-alive');
    const slow = postJson(`${gw.proxyUrl}/v1/chat/completions`, chat(), mockHeader({ headersDelayMs: 2500 }));
    await mock.waitFor((r) => r.some((x) => x.headers['x-mock']?.includes('2500')));
    const signalledAt = Date.now();
    gw.signal('SIGTERM');
    await gw.waitForLog((l) => l.event === 'drain_started');
    // L2: inside the window a new connection is accepted and served normally, then retired (L3):
    // the client asks to keep it, so `close` is the server's decision.
    const during = await postJsonKeepAlive(`${gw.proxyUrl}/v1/chat/completions`, chat());
    assert.equal(during.status, 200);
    assert.equal(during.headers.connection, 'close');
    // L5: past the window, the slow request is still in flight, so the listener still accepts.
    await eventually(() => Date.now() - signalledAt > 1300, 3000);
    const late = await postJsonKeepAlive(`${gw.proxyUrl}/v1/chat/completions`, chat());
    assert.equal(late.status, 200);
    assert.equal(late.headers.connection, 'close');
    const slowResult = await slow;
    assert.equal(slowResult.status, 200);
    assert.equal(JSON.parse(slowResult.body).object, 'chat.completion');
    const exit = await gw.exited;
    assert.equal(exit.code, 0);
    assert.ok(await isRefused(gw.proxyUrl), 'port still accepts after exit');
    const drainLine = gw.logs.find((l) => l.event === 'process_exit')!;
    assert.equal(typeof drainLine.drain_duration_secs, 'number');
    assert.ok(gw.logs.some((l) => l.event === 'request_while_draining' && l.path === '/v1/chat/completions' && typeof l.request_id === 'string' && typeof l.peer === 'string'));
    assert.ok(gw.logs.some((l) => l.event === 'connection_accepted_while_draining' && typeof l.peer === 'string'));
    assert.ok(gw.logs.some((l) => l.event === 'listeners_closing'));
  } finally {
    await gw.stop();
  }
});

test('L3/L5: an SSE stream running across the window keeps the listener accepting, completes with every event and [DONE], then the process exits', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 1 }) });
  try {
    const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...mockHeader({ chunks: 20, sseIntervalMs: 120 }) },
      body: JSON.stringify(chat({ stream: true })),
    });
    assert.equal(res.status, 200);
    const text = readStream(res);
    const signalledAt = Date.now();
    gw.signal('SIGTERM');
    await eventually(() => Date.now() - signalledAt > 1500, 3000);
    // The window is over but the stream is in flight: still accepting, and served (L3: retired).
    const late = await postJsonKeepAlive(`${gw.proxyUrl}/v1/chat/completions`, chat());
    assert.equal(late.status, 200);
    assert.equal(late.headers.connection, 'close');
    const body = await text;
    const events = body.split('\n').filter((l) => l.startsWith('data: '));
    assert.equal(events.at(-1), 'data: [DONE]');
    assert.equal(events.filter((e) => e.includes('"content"')).length >= 20, true);
    assert.ok(!body.includes('event: error'));
    assert.equal((await gw.exited).code, 0);
  } finally {
    await gw.stop();
  }
});

test('L2/L3: an idle pooled client sending requests throughout the window gets no error', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 2 }) });
  const agent = new Agent({ keepAliveTimeout: 60_000, keepAliveMaxTimeout: 60_000, connections: 4 });
  try {
    // Warm the pool: connections now idle and kept alive.
    for (let i = 0; i < 4; i++) {
      const res = await undiciRequest(`${gw.proxyUrl}/v1/chat/completions`, { method: 'POST', dispatcher: agent, headers: { 'content-type': 'application/json' }, body: JSON.stringify(chat()) });
      await res.body.text();
    }
    const signalledAt = Date.now();
    gw.signal('SIGTERM');
    // From the moment the process has taken the signal: a request answered before that is not
    // "during the drain" and rightly keeps its connection.
    await gw.waitForLog((l) => l.event === 'drain_started');
    let ok = 0;
    let closes = 0;
    const failures: string[] = [];
    while (Date.now() - signalledAt < 1700) {
      try {
        const res = await undiciRequest(`${gw.proxyUrl}/v1/chat/completions`, { method: 'POST', dispatcher: agent, headers: { 'content-type': 'application/json' }, body: JSON.stringify(chat()) });
        await res.body.text();
        if (res.statusCode === 200) ok++;
        else failures.push(`status ${res.statusCode}`);
        if (res.headers.connection === 'close') closes++;
      } catch (error) {
        failures.push(String(error));
      }
      await new Promise((r) => setTimeout(r, 25));
    }
    assert.deepEqual(failures, []);
    assert.ok(ok > 10, `only ${ok} requests`);
    assert.equal(closes, ok, 'every response during the drain carries Connection: close');
    assert.equal((await gw.exited).code, 0);
  } finally {
    await agent.close();
    await gw.stop();
  }
});

test('L6: after the listeners close, a fresh silent connection is closed at idle_timeout_secs, and one that sends a request is served', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 0.5 }, { idle_timeout_secs: 1.5 }) });
  try {
    // Keep something in flight so the listeners stay open while we open fresh connections.
    const slow = postJson(`${gw.proxyUrl}/v1/chat/completions`, chat(), mockHeader({ headersDelayMs: 1200 }));
    await mock.waitFor((r) => r.some((x) => x.headers['x-mock']?.includes('1200')));
    gw.signal('SIGTERM');
    const silent = await openSocket(gw.proxyUrl);
    const talker = await openSocket(gw.proxyUrl);
    const silentClosed = closedAt(silent);
    assert.equal((await slow).status, 200);
    const closing = await gw.waitForLog((l) => l.event === 'listeners_closing');
    const closingAt = Date.now();
    assert.ok(await isRefused(gw.proxyUrl), 'listener still accepting after listeners_closing');
    // The talker now sends a request on its already accepted connection: served, Connection: close.
    const reply = await new Promise<string>((resolve) => {
      let data = '';
      talker.on('data', (d) => (data += d.toString()));
      talker.on('close', () => resolve(data));
      talker.write(`GET /livez HTTP/1.1\r\nhost: x\r\n\r\n`);
    });
    assert.match(reply, /^HTTP\/1\.1 200/);
    assert.match(reply, /connection: close/i);
    const silentAt = await silentClosed;
    const heldFor = silentAt - closingAt;
    assert.ok(heldFor >= 1000 && heldFor < 3500, `silent connection held ${heldFor} ms after the listeners closed (want about 1500)`);
    assert.equal(closing.event, 'listeners_closing');
    assert.equal((await gw.exited).code, 0);
  } finally {
    await gw.stop();
  }
});

test('L10: a client abort mid-stream (its answer read on to its usage) and an upstream reset mid-stream both return in-flight to 0', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 0 }) });
  try {
    const controller = new AbortController();
    const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      signal: controller.signal,
      headers: { 'content-type': 'application/json', ...mockHeader({ chunks: 10, sseIntervalMs: 100 }) },
      body: JSON.stringify(chat({ stream: true })),
    });
    const reader = res.body!.getReader();
    await reader.read();
    const inFlight = async () => metricValue(await scrape(gw), 'sluice_in_flight_requests', { endpoint: 'chat_completions' });
    assert.equal(await inFlight(), 1);
    controller.abort();
    // In flight until the rest of the answer (about a second) has been read for its usage, then out.
    await mock.waitFor((r) => r.some((x) => x.headers['x-mock']?.includes('"chunks":10,') && x.completed), 10_000);
    await eventually(async () => (await inFlight()) === 0, 5000, 'in-flight back to 0 after client abort');

    const reset = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...mockHeader({ chunks: 10, disconnectAfterEvents: 3 }) },
      body: JSON.stringify(chat({ stream: true })),
    });
    const body = await readStream(reset);
    assert.match(body, /event: error/);
    assert.ok(!body.includes('[DONE]'), 'a reset stream must not end with a fake [DONE]');
    await eventually(async () => (await inFlight()) === 0, 3000, 'in-flight back to 0 after upstream reset');
    const text = await scrape(gw);
    assert.equal(metricValue(text, 'sluice_in_flight_requests', { endpoint: 'chat_completions' }), 0);
    // With nothing in flight and no window, a drain is immediate (D3).
    gw.signal('SIGTERM');
    assert.equal((await gw.exited).code, 0);
  } finally {
    await gw.stop();
  }
});

test('L8: max_drain_secs ends a stuck stream with an explicit error event and a prompt non-zero exit', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 0, max_drain_secs: 1 }) });
  try {
    const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...mockHeader({ chunks: 1000, sseIntervalMs: 200 }) },
      body: JSON.stringify(chat({ stream: true })),
    });
    const text = readStream(res);
    const signalledAt = Date.now();
    gw.signal('SIGTERM');
    const body = await text;
    assert.match(body, /event: error\ndata: \{"error":\{/);
    assert.ok(!body.includes('[DONE]'), 'a cut stream must not end with [DONE]');
    const exit = await gw.exited;
    assert.notEqual(exit.code, 0);
    const took = exit.at - signalledAt;
    assert.ok(took >= 900 && took < 3000, `exit took ${took} ms (max_drain_secs 1)`);
    assert.ok(gw.logs.some((l) => l.event === 'drain_forced' && l.reason === 'max_drain_secs'));
  } finally {
    await gw.stop();
  }
});

test('L8: a second signal ends a stuck stream with an error event and exits promptly', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 0 }) });
  try {
    const stream = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...mockHeader({ chunks: 1000, sseIntervalMs: 200 }) },
      body: JSON.stringify(chat({ stream: true })),
    });
    const text = readStream(stream);
    gw.signal('SIGTERM');
    await gw.waitForLog((l) => l.event === 'drain_started');
    // Still streaming: the first signal waits for it.
    await gw.waitForLog((l) => l.event === 'drain_progress');
    const secondAt = Date.now();
    gw.signal('SIGTERM');
    const body = await text;
    assert.match(body, /event: error/);
    assert.ok(!body.includes('[DONE]'));
    const exit = await gw.exited;
    assert.notEqual(exit.code, 0);
    assert.ok(exit.at - secondAt < 1500, `exit took ${exit.at - secondAt} ms after the second signal`);
  } finally {
    await gw.stop();
  }
});

/**
 * Default drain timeouts: the HTTP/2 session has had its GOAWAY notice and is still inside its 5 s
 * drain timeout when the second signal comes (it was once skipped by the forced close, and the exit
 * then waited for the upstream pool's graceful close: 60 s here).
 */
async function forcedEndIsPrompt(workers: number): Promise<void> {
  const gw = await startGateway({
    config: { ...config({ min_drain_secs: 0 }), workers, listeners: [{ name: 'proxy', address: '127.0.0.1:0', role: 'proxy', protocols: ['http1', 'h2'] }, { name: 'admin', address: '127.0.0.1:0', role: 'admin' }] },
  });
  const agent = new Agent({ keepAliveTimeout: 60_000 });
  const session = http2Connect(gw.proxyUrl);
  session.on('error', () => {});
  try {
    mock.reset();
    const stuck = mockHeader({ headersDelayMs: 60_000 });
    const h1 = undiciRequest(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/json', ...stuck },
      body: JSON.stringify(chat()),
    }).then(async (res) => ({ status: res.statusCode, body: await res.body.text() }));
    const h2 = new Promise<{ status: number; body: string }>((resolve, reject) => {
      const stream = session.request({ ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json', ...stuck });
      let status = 0;
      let body = '';
      stream.on('response', (headers) => (status = Number(headers[':status'])));
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => (body += chunk));
      stream.on('end', () => resolve({ status, body }));
      stream.on('error', reject);
      stream.end(JSON.stringify(chat()));
    });
    await mock.waitFor((r) => r.filter((x) => x.path === '/v1/chat/completions').length === 2);
    gw.signal('SIGTERM');
    await gw.waitForLog((l) => l.event === 'drain_progress' && Number(l.elapsed_secs) >= 2, 10_000);
    const secondAt = Date.now();
    gw.signal('SIGTERM');
    for (const [name, answer] of [['HTTP/1.1', await h1], ['HTTP/2', await h2]] as const) {
      assert.equal(answer.status, 503, `${name}: ${answer.body}`);
      assert.equal((JSON.parse(answer.body) as { error: { code: string } }).error.code, 'drain_forced', name);
    }
    const exit = await gw.exited;
    assert.equal(exit.code, 1);
    assert.ok(exit.at - secondAt < 1500, `exit took ${exit.at - secondAt} ms after the second signal`);
    const access = gw.logs.filter((l) => l.event === 'access' && l.path === '/v1/chat/completions');
    assert.deepEqual(access.map((l) => [l.status, l.error]), [[503, 'drain_forced'], [503, 'drain_forced']]);
  } finally {
    session.destroy();
    await agent.close();
    await gw.stop();
  }
}

test('L8: a forced end is prompt over HTTP/1.1 and HTTP/2: requests waiting for their upstream get a 503 drain_forced, and the process exits within about 1 s', () => forcedEndIsPrompt(1));

test('L8: the same with two workers: the group exits within about 1 s of the second signal', () => forcedEndIsPrompt(2));

test('D3: min_drain_secs 0 with nothing in flight exits at once', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 0 }) });
  try {
    const signalledAt = Date.now();
    gw.signal('SIGTERM');
    const exit = await gw.exited;
    assert.equal(exit.code, 0);
    assert.ok(exit.at - signalledAt < 1000, `exit took ${exit.at - signalledAt} ms`);
  } finally {
    await gw.stop();
  }
});

test('L6: header timeouts (slowloris protection) still apply after the listeners close', async () => {
  const gw = await startGateway({ config: config({ min_drain_secs: 0.2 }, { idle_timeout_secs: 20, headers_timeout_secs: 1 }) });
  try {
    const slow = postJson(`${gw.proxyUrl}/v1/chat/completions`, chat(), mockHeader({ headersDelayMs: 1500 }));
    await mock.waitFor((r) => r.some((x) => x.headers['x-mock']?.includes('1500')));
    gw.signal('SIGTERM');
    const loris = await openSocket(gw.proxyUrl);
    loris.write('POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n');
    const lorisClosed = closedAt(loris);
    // Keep dribbling header bytes so that only a whole-headers deadline can end it.
    const dribble = setInterval(() => {
      if (!loris.destroyed) loris.write(`x-slow-${Date.now()}: 1\r\n`);
    }, 300);
    try {
      assert.equal((await slow).status, 200);
      const closingAt = Date.now();
      await gw.waitForLog((l) => l.event === 'listeners_closing');
      const at = await lorisClosed;
      assert.ok(at - closingAt < 4000, `slow-header connection lived ${at - closingAt} ms after the listeners closed`);
      assert.equal((await gw.exited).code, 0);
    } finally {
      clearInterval(dribble);
    }
  } finally {
    await gw.stop();
  }
});

test('downstream.max_connections: connections beyond the limit are closed at once and counted', async () => {
  const gw = await startGateway({ config: { ...config({ min_drain_secs: 0 }), downstream: { max_connections: 3 } } });
  const held = [await openSocket(gw.proxyUrl), await openSocket(gw.proxyUrl), await openSocket(gw.proxyUrl)];
  try {
    await eventually(async () => {
      const extra = await openSocket(gw.proxyUrl);
      const closed = await Promise.race([closedAt(extra).then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 1000))]);
      extra.destroy();
      return closed;
    }, 5000, 'a connection over the limit to be closed');
    held.pop()!.destroy();
    await eventually(async () => {
      try {
        return (metricValue(await scrape(gw), 'sluice_connections_rejected_total', { listener: 'proxy' }) ?? 0) >= 1;
      } catch {
        return false;
      }
    }, 5000, 'rejected connections counted');
    for (const socket of held) socket.destroy();
    // Once the gateway has seen those closes, it serves again.
    await eventually(async () => (await postJson(`${gw.proxyUrl}/v1/chat/completions`, chat())).status === 200, 5000, 'serving again under the limit');
  } finally {
    for (const socket of held) socket.destroy();
    await gw.stop();
  }
});
