// GET /status/events against the built program, without a browser: the stream is not in flight (a
// gateway with a watcher drains and exits exactly when its work ends, and the watcher is told
// `exited`), it lists each open stream with its age, the admin token, the cap on watchers, hostile
// requests, `admin.status_page: false`, and a group of two workers summed.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { eventually, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { httpRequest } from '../support/http.ts';
import { watchStatus, type StatusWatcher } from '../support/status-stream.ts';
import { rawExchange, parseResponses } from '../support/reliability.ts';

const TOKEN = 'status-token-0123456789abcdef';
const auth = { authorization: `Bearer ${TOKEN}` };
let mock: MockUpstream;

before(async () => {
  mock = await startMockUpstream();
});
after(async () => {
  await mock?.close();
});

// One process unless a test asks for a group: these tests check one process's exact numbers (the
// group's are checked by the last test).
function config(extra: Record<string, unknown> = {}) {
  return {
    workers: 1,
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' }],
    models: [{ name: 'm', provider: 'up' }],
    admin: { token: TOKEN },
    ...extra,
  };
}

/** An SSE chat completion through the gateway: resolves once its headers arrived; `done` when its body ended. */
async function openStream(gw: GatewayProcess, chunks: number, intervalMs: number): Promise<{ done: Promise<{ text: string; at: number }> }> {
  const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...mockHeader({ chunks, sseIntervalMs: intervalMs }) },
    body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  });
  assert.equal(res.status, 200);
  const done = res.text().then((text) => ({ text, at: Date.now() }));
  // Awaited by the test; a test that fails first must not leave it unhandled.
  done.catch(() => {});
  return { done };
}

/** Fails with `what` if `promise` has not settled within `ms`. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([promise, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms)))]).finally(() => clearTimeout(timer));
}

describe('the status stream and the drain', () => {
  test('L5: a watcher is not in flight: the process exits as soon as the last stream ends after the window, and the watcher gets the drain, the stream with its age, then exited', async () => {
    const gw = await startGateway({ config: config({ shutdown: { min_drain_secs: 1 } }) });
    let watcher: StatusWatcher | undefined;
    try {
      watcher = await watchStatus(gw.adminUrl, auth);
      assert.equal(watcher.status, 200);
      const first = await watcher.waitFor((e) => e.name === 'status');
      // The watcher itself is not in flight, nor counted by endpoint.
      assert.equal(first.data.in_flight, 0);
      assert.deepEqual(first.data.in_flight_by, []);
      assert.equal(first.data.state, 'serving');
      assert.equal(first.data.config.source, 'file');
      // A stream of about 3 s, past the 1 s window.
      const stream = await openStream(gw, 20, 150);
      const signalledAt = Date.now();
      gw.signal('SIGTERM');
      const draining = await watcher.waitFor((e) => e.name === 'status' && e.data.drain !== null && e.data.open_work.total === 1 && e.data.open_work.oldest[0].age_secs > 1.2, 5000, 'the drain with the stream over 1.2 s old');
      assert.equal(draining.data.state, 'draining');
      assert.equal(draining.data.drain.trigger, 'SIGTERM');
      assert.equal(draining.data.drain.window_secs, 1);
      assert.equal(draining.data.drain.waiting_for.streams, 1);
      assert.match(draining.data.drain.waiting, /1 stream/);
      assert.deepEqual(Object.keys(draining.data.open_work.oldest[0]).sort(), ['age_secs', 'endpoint', 'kind', 'listener', 'model', 'protocol']);
      assert.equal(draining.data.open_work.oldest[0].kind, 'stream');
      assert.equal(draining.data.open_work.oldest[0].endpoint, 'chat_completions');
      assert.equal(draining.data.open_work.oldest[0].model, 'm');
      assert.equal(draining.data.in_flight, 1, 'the stream is in flight, the watcher is not');
      const ended = await stream.done;
      assert.ok(ended.text.includes('data: [DONE]'));
      const exit = await within(gw.exited, 5000, 'the gateway exit with a watcher connected');
      assert.equal(exit.code, 0);
      // The watcher does not hold the drain: the exit follows the stream's end at once.
      assert.ok(exit.at - ended.at < 1500, `exited ${exit.at - ended.at} ms after the last stream ended`);
      assert.ok(ended.at - signalledAt > 1000, 'the stream outlived the window');
      const exited = await watcher.waitFor((e) => e.name === 'exited', 2000, 'the exited event');
      assert.equal(exited.data.exit_code, 0);
      assert.equal(exited.data.forced, null);
      assert.deepEqual(
        exited.data.timeline.map((m: { event: string }) => m.event),
        ['drain_started', 'window_over', 'listeners_closed', 'exited'],
      );
      const windowOver = exited.data.timeline.find((m: { event: string }) => m.event === 'window_over');
      assert.ok(Math.abs(windowOver.at_secs - 1) < 0.2, `window over at ${windowOver.at_secs} s`);
      assert.equal(watcher.events.at(-1)!.name, 'exited', 'exited is the last event');
      await within(watcher.ended, 2000, 'the end of the stream');
    } finally {
      watcher?.close();
      await gw.stop();
    }
  });

  test('L8: a forced drain (second SIGTERM) ends the watcher with exited and forced, exit 1', async () => {
    const gw = await startGateway({ config: config({ shutdown: { min_drain_secs: 30 } }) });
    let watcher: StatusWatcher | undefined;
    try {
      watcher = await watchStatus(gw.adminUrl, auth);
      await watcher.waitFor((e) => e.name === 'status');
      gw.signal('SIGTERM');
      await watcher.waitFor((e) => e.name === 'status' && e.data.state === 'draining');
      gw.signal('SIGTERM');
      const exited = await watcher.waitFor((e) => e.name === 'exited', 5000, 'the exited event');
      assert.match(exited.data.forced, /second SIGTERM/);
      assert.equal(exited.data.exit_code, 1);
      assert.equal((await within(gw.exited, 5000, 'the forced exit')).code, 1);
    } finally {
      watcher?.close();
      await gw.stop();
    }
  });
});

describe('who may watch', () => {
  let gw: GatewayProcess;
  before(async () => {
    gw = await startGateway({ config: config() });
  });
  after(async () => gw?.stop());

  test('without the token or with a wrong one: 401 invalid_admin_token; the page shell is open and carries no data; wrong methods 405', async () => {
    for (const headers of [{} as Record<string, string>, { authorization: 'Bearer wrong-token-0000000000000' }, { authorization: TOKEN }, { authorization: `Basic ${TOKEN}` }]) {
      const res = await httpRequest(`${gw.adminUrl}/status/events`, { headers });
      assert.equal(res.status, 401, JSON.stringify(headers));
      assert.equal(JSON.parse(res.body).error.code, 'invalid_admin_token');
    }
    const page = await httpRequest(`${gw.adminUrl}/status`);
    assert.equal(page.status, 200);
    assert.match(String(page.headers['content-type']), /^text\/html/);
    assert.match(String(page.headers['content-security-policy']), /default-src 'none'/);
    // The SVG namespace (an identifier the charts are created in, never fetched) aside.
    const body = page.body.replaceAll('http://www.w3.org/2000/svg', '');
    assert.ok(!body.includes('http://') && !body.includes('https://'), 'the page loads nothing from anywhere');
    // Three views (Status, Usage, Requests), inline, no library.
    assert.ok(page.body.length < 40_000, `the page weighs ${page.body.length} bytes`);
    assert.ok(!page.body.includes(TOKEN));
    for (const [method, path] of [['POST', '/status/events'], ['DELETE', '/status'], ['PUT', '/status/events']] as const) {
      const res = await httpRequest(`${gw.adminUrl}${path}`, { method, headers: auth });
      assert.equal(res.status, 405, `${method} ${path}`);
      assert.equal(res.headers.allow, 'GET');
    }
    assert.ok(!gw.stdout().includes(TOKEN), 'the token is never logged');
  });

  test('hostile requests: query strings, odd headers and paths answer normally, and nothing stays counted', async () => {
    const watchers: StatusWatcher[] = [];
    try {
      for (const path of ['/status/events?token=x&x=%00%ff', '/status/events?' + 'a'.repeat(4000), '/status/events?']) {
        const w = await watchStatus(gw.adminUrl, { ...auth, 'last-event-id': '\u00ff'.repeat(10), accept: '*/*', 'x-forwarded-for': '1.2.3.4' }, path);
        watchers.push(w);
        assert.equal(w.status, 200, path);
        await w.waitFor((e) => e.name === 'status');
      }
      for (const path of ['/status/', '/status/events/', '/status/events/x', '/STATUS', '/status%2fevents']) {
        assert.equal((await httpRequest(`${gw.adminUrl}${path}`, { headers: auth })).status, 404, path);
      }
      // HTTP/1.0, no Host.
      const raw = await rawExchange(gw.adminUrl, `GET /status HTTP/1.0\r\n\r\n`, { timeoutMs: 3000 });
      assert.equal(parseResponses(raw.data)[0]?.status, 200);
    } finally {
      for (const w of watchers) w.close();
    }
    const info = await eventually<{ in_flight: number; open_connections: number } | undefined>(async () => {
      const body = JSON.parse((await httpRequest(`${gw.adminUrl}/server_info`, { headers: auth })).body) as { in_flight: number; open_connections: number };
      // Only this request is left.
      return body.in_flight === 1 && body.open_connections === 1 ? body : undefined;
    }, 5000, 'the watchers gone from the counts');
    assert.equal(info?.in_flight, 1);
  });

  test('at most 32 watchers at once: the 33rd gets 429 too_many_watchers; once one leaves, a new one is served', async () => {
    const watchers: StatusWatcher[] = [];
    try {
      for (let i = 0; i < 32; i++) watchers.push(await watchStatus(gw.adminUrl, auth));
      assert.ok(watchers.every((w) => w.status === 200));
      // As a watcher: an answer that streams (no cap) fails here at once instead of never ending.
      const refused = await watchStatus(gw.adminUrl, auth);
      watchers.push(refused);
      assert.equal(refused.status, 429);
      await within(refused.ended, 2000, 'the end of the 429');
      assert.equal(JSON.parse(refused.body()).error.code, 'too_many_watchers');
      assert.equal(refused.headers['retry-after'], '5');
      watchers.shift()!.close();
      const next = await eventually<StatusWatcher | undefined>(async () => {
        const w = await watchStatus(gw.adminUrl, auth);
        if (w.status === 200) return w;
        w.close();
        return undefined;
      }, 5000, 'a watcher served again');
      watchers.push(next!);
      await next!.waitFor((e) => e.name === 'status');
    } finally {
      for (const w of watchers) w.close();
    }
  });
});

test('admin.status_page: false: /status and /status/events are 404, and the OpenAPI document leaves them out', async () => {
  const gw = await startGateway({ config: config({ admin: { token: TOKEN, status_page: false } }) });
  try {
    for (const path of ['/status', '/status/events']) {
      const res = await httpRequest(`${gw.adminUrl}${path}`, { headers: auth });
      assert.equal(res.status, 404, path);
      assert.equal(JSON.parse(res.body).error.code, 'unknown_path');
    }
    const doc = JSON.parse((await httpRequest(`${gw.adminUrl}/openapi.json`, { headers: auth })).body) as { paths: Record<string, unknown> };
    assert.ok(!('/status' in doc.paths) && !('/status/events' in doc.paths));
    assert.ok('/server_info' in doc.paths);
  } finally {
    await gw.stop();
  }
});

test('workers: 2: both workers listed, in-flight and open streams summed over the group, each stream tagged with its worker', async () => {
  const gw = await startGateway({ config: config({ workers: 2, shutdown: { min_drain_secs: 0 } }) });
  let watcher: StatusWatcher | undefined;
  try {
    watcher = await watchStatus(gw.adminUrl, auth);
    const first = await watcher.waitFor((e) => e.name === 'status' && e.data.workers.length === 2 && e.data.workers.every((w: { state: string }) => w.state === 'serving'));
    const pids = first.data.workers.map((w: { pid: number }) => w.pid);
    assert.equal(new Set(pids).size, 2);
    assert.ok(!pids.includes(first.data.pid), 'the supervisor is not one of its workers');
    // Connections go to the workers in turn: two streams, one on each.
    const streams = [await openStream(gw, 30, 100), await openStream(gw, 30, 100)];
    const both = await watcher.waitFor((e) => e.name === 'status' && e.data.open_work.total === 2, 5000, 'both streams');
    assert.equal(both.data.in_flight, 2);
    assert.equal(both.data.workers.reduce((sum: number, w: { in_flight: number }) => sum + w.in_flight, 0), 2);
    assert.deepEqual(both.data.open_work.oldest.map((o: { worker: number }) => o.worker).sort(), [1, 2]);
    assert.deepEqual(both.data.in_flight_by, [{ endpoint: 'chat_completions', protocol: 'http1', count: 2 }]);
    assert.equal(both.data.targets.length, 2, 'each worker\'s target');
    gw.signal('SIGTERM');
    await Promise.all(streams.map((s) => s.done));
    const exited = await watcher.waitFor((e) => e.name === 'exited', 10_000, 'exited');
    assert.equal(exited.data.exit_code, 0);
    assert.ok(exited.data.timeline.some((m: { event: string }) => m.event === 'workers_exited'));
    assert.equal((await within(gw.exited, 5000, 'the group exit')).code, 0);
  } finally {
    watcher?.close();
    await gw.stop();
  }
});
