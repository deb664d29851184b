// A proxy that needs no client key answers no web page but this machine's (src/gateway/
// open-proxy-guard.ts), at the default settings of a config file without keys, over raw HTTP/1.1
// and HTTP/2: each rule with the values a browser sends and those a program sends, in the
// caller's API shape, realtime handshakes included; auth.allowed_hosts; a gateway with keys
// unaffected. Then Host, Origin and Sec-Fetch-Site are fuzzed (fast-check): each value drawn as
// one known to pass, one known to be refused, or random text, and the answer must agree; never a
// 5xx, a refusal in the OpenAI shape; afterwards nothing in flight.
// SLUICE_FUZZ_SEED and SLUICE_FUZZ_RUNS as in test/e2e/fuzz.test.ts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type ClientHttp2Session } from 'node:http2';
import fc from 'fast-check';
import { drawn as drawnValue, known, randomHeaderText, type Drawn } from '../support/header-draws.ts';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { assertCallerError, assertSettled, rawRequest } from '../support/reliability.ts';

const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 20261203);
const RUNS = Number(process.env.SLUICE_FUZZ_RUNS ?? 150);
const params = (numRuns = RUNS): fc.Parameters<unknown> => ({ seed: SEED, numRuns, verbose: 1 });

const ECHO = { providers: [{ name: 'echo', type: 'echo' }], models: [{ name: 'echo', provider: 'echo' }] };
const LISTENERS = [
  { name: 'proxy', address: '127.0.0.1:0', role: 'proxy', protocols: ['http1', 'h2'] },
  { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
];
const CHAT = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] });
const MESSAGES = JSON.stringify({ model: 'echo', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });

let gw: GatewayProcess;
let port: number;

before(async () => {
  console.log(`open proxy fuzz: seed ${SEED}, ${RUNS} runs (set SLUICE_FUZZ_SEED / SLUICE_FUZZ_RUNS to change)`);
  gw = await startGateway({ config: { ...ECHO, listeners: LISTENERS } });
  port = Number(new URL(gw.proxyUrl).port);
});
after(async () => gw?.stop());

type Headers = [string, string][];

async function post(path: string, headers: Headers, url = gw.proxyUrl): Promise<{ status: number; body: string }> {
  const body = path === '/v1/messages' ? MESSAGES : CHAT;
  const res = await rawRequest(url, { method: 'POST', path, headers: [['Content-Type', 'application/json'], ...headers], body });
  return { status: res.status, body: res.body.toString('utf8') };
}

/** A realtime handshake: its status line and body (refused before any route, or by routing: echo serves no realtime). */
async function handshake(headers: Headers): Promise<{ status: number; body: string }> {
  const res = await rawRequest(gw.proxyUrl, {
    path: '/v1/realtime?model=echo',
    headers: [['Upgrade', 'websocket'], ['Connection', 'Upgrade'], ['Sec-WebSocket-Version', '13'], ['Sec-WebSocket-Key', 'dGhlIHNhbXBsZSBub25jZQ=='], ...headers],
  });
  return { status: res.status, body: res.body.toString('utf8') };
}

describe('an open proxy and web pages, rule by rule', () => {
  test('what programs send is served: loopback names and addresses, IP addresses, one-label names', async () => {
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, 'LOCALHOST', 'a.b.localhost', 'localhost.', `[::1]:${port}`, '10.1.2.3', '[2001:db8::1]', 'x', 'sluice', 'sluice.']) {
      const res = await post('/v1/chat/completions', [['Host', host]]);
      assert.equal(res.status, 200, `Host ${host}: ${res.body}`);
    }
  });

  test('a DNS name that is not loopback\'s (a rebinding page\'s Host) is a 421, in the caller\'s shape, realtime included', async () => {
    for (const host of [`rebind.evil.example:${port}`, 'evil.example', 'EVIL.example.', 'localhost.evil.example', '127.0.0.1.nip.io', 'localtest.me']) {
      const chat = await post('/v1/chat/completions', [['Host', host]]);
      assert.equal(chat.status, 421, `Host ${host}: ${chat.body}`);
      assertCallerError(chat.body, 'openai', host, 'host_not_allowed');
      const messages = await post('/v1/messages', [['Host', host]]);
      assert.equal(messages.status, 421, `Host ${host}: ${messages.body}`);
      assertCallerError(messages.body, 'anthropic', host, 'host_not_allowed');
    }
    const models = await rawRequest(gw.proxyUrl, { path: '/v1/models', headers: [['Host', `rebind.evil.example:${port}`]] });
    assert.equal(models.status, 421, 'GET /v1/models');
    assert.doesNotMatch(models.body.toString('utf8'), /"data"/);
    const realtime = await handshake([['Host', `rebind.evil.example:${port}`]]);
    assert.equal(realtime.status, 421, realtime.body);
    assertCallerError(realtime.body, 'openai', 'realtime', 'host_not_allowed');
  });

  test('Origin: this machine\'s pages are served; any other, and "null", is a 403 in the caller\'s shape, realtime included', async () => {
    for (const origin of ['http://localhost:3000', 'http://127.0.0.1:9999', 'https://app.localhost', 'http://[::1]:3000', `http://127.0.0.1:${port}`]) {
      const res = await post('/v1/chat/completions', [['Host', `127.0.0.1:${port}`], ['Origin', origin]]);
      assert.equal(res.status, 200, `Origin ${origin}: ${res.body}`);
    }
    for (const origin of ['https://evil.example', 'null', 'http://localhost.evil.example', `http://rebind.evil.example:${port}`, 'http://10.0.0.5:8080', 'file://', 'localhost', '']) {
      const chat = await post('/v1/chat/completions', [['Host', `127.0.0.1:${port}`], ['Origin', origin]]);
      assert.equal(chat.status, 403, `Origin ${JSON.stringify(origin)}: ${chat.body}`);
      assertCallerError(chat.body, 'openai', origin, 'cross_origin_request');
      const messages = await post('/v1/messages', [['Host', `127.0.0.1:${port}`], ['Origin', origin]]);
      assert.equal(messages.status, 403, `Origin ${JSON.stringify(origin)}: ${messages.body}`);
      assertCallerError(messages.body, 'anthropic', origin, 'cross_origin_request');
    }
    const refused = await handshake([['Host', `127.0.0.1:${port}`], ['Origin', 'https://evil.example']]);
    assert.equal(refused.status, 403, refused.body);
    assertCallerError(refused.body, 'openai', 'realtime', 'cross_origin_request');
    // A local page's handshake goes on to routing (echo serves no realtime: a 400 that says so).
    const local = await handshake([['Host', `127.0.0.1:${port}`], ['Origin', 'http://localhost:3000']]);
    assert.equal(local.status, 400, local.body);
    assertCallerError(local.body, 'openai', 'realtime', 'unsupported_endpoint');
  });

  test('without an Origin, Sec-Fetch-Site cross-site or same-origin is a 403; same-site and none are served', async () => {
    for (const [site, status] of [['cross-site', 403], ['Same-Origin', 403], ['same-site', 200], ['none', 200]] as const) {
      const res = await rawRequest(gw.proxyUrl, { path: '/v1/models', headers: [['Host', `127.0.0.1:${port}`], ['Sec-Fetch-Site', site]] });
      assert.equal(res.status, status, `${site}: ${res.body.toString('utf8').slice(0, 300)}`);
    }
  });

  test('HTTP/2: the same by :authority and Origin', async () => {
    const session = connect(gw.proxyUrl).on('error', () => {});
    try {
      const ask = (extra: Record<string, string>) => h2(session, { ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json', ...extra }, CHAT);
      assert.equal((await ask({ ':authority': `127.0.0.1:${port}` }))?.status, 200);
      assert.equal((await ask({ ':authority': `rebind.evil.example:${port}` }))?.status, 421);
      assert.equal((await ask({ ':authority': `127.0.0.1:${port}`, origin: 'https://evil.example' }))?.status, 403);
    } finally {
      session.close();
    }
  });

  test('auth.allowed_hosts: a name it lists is served, as a Host and as a page\'s Origin', async () => {
    const allowed = await startGateway({ config: { ...ECHO, listeners: LISTENERS, auth: { allowed_hosts: ['ai.example.com', '*.corp.example'] } } });
    try {
      for (const [headers, status] of [
        [[['Host', 'ai.example.com']], 200],
        [[['Host', 'a.b.corp.example'], ['Origin', 'https://ui.corp.example']], 200],
        [[['Host', 'corp.example']], 421],
        [[['Host', 'ai.example.com'], ['Origin', 'https://evil.example']], 403],
      ] as [Headers, number][]) {
        const res = await post('/v1/chat/completions', headers, allowed.proxyUrl);
        assert.equal(res.status, status, `${JSON.stringify(headers)}: ${res.body}`);
      }
    } finally {
      await allowed.stop();
    }
  });

  test('a gateway with client keys is unaffected: a key is what lets a request in, whatever its Host or Origin', async () => {
    const keyed = await startGateway({ config: { ...ECHO, listeners: LISTENERS, keys: [{ name: 'app', key: 'sk-app-key-0123456789' }] } });
    try {
      const evil: Headers = [['Host', 'rebind.evil.example'], ['Origin', 'https://evil.example']];
      assert.equal((await post('/v1/chat/completions', evil, keyed.proxyUrl)).status, 401);
      assert.equal((await post('/v1/chat/completions', [...evil, ['Authorization', 'Bearer sk-app-key-0123456789']], keyed.proxyUrl)).status, 200);
    } finally {
      await keyed.stop();
    }
  });
});

const trimmed = randomHeaderText({ trim: true });
/** Drawn values, their random ones without leading or trailing white space. */
const drawn = (good: fc.Arbitrary<Drawn>, bad: fc.Arbitrary<Drawn>, weights = { good: 5, bad: 2 }) => drawnValue(good, bad, weights, trimmed);
const hostArb = () =>
  drawn(
    known('good', `127.0.0.1:${port}`, `localhost:${port}`, 'LocalHost', `[::1]:${port}`, 'x', 'sluice:8080', `x.localhost:${port}`, '10.0.0.1', 'localhost.'),
    known('bad', 'rebind.evil.example', `evil.example:${port}`, 'localhost.evil.example', `127.0.0.1.nip.io:${port}`, 'a.b.'),
  );
const originArb = () =>
  drawn(known('good', undefined, 'http://localhost:3000', `http://127.0.0.1:${port}`, 'http://[::1]'), known('bad', 'https://evil.example', 'null', `http://rebind.evil.example:${port}`, 'http://10.0.0.1'), { good: 6, bad: 2 });
const siteArb = drawn(known('good', undefined, 'same-site', 'none', 'NONE'), known('bad', 'cross-site', 'same-origin', 'Same-Origin'), { good: 6, bad: 2 });

interface Case {
  host: Drawn;
  origin: Drawn;
  site: Drawn;
}
const caseArb = () => fc.record({ host: hostArb(), origin: originArb(), site: siteArb });

/** The request's headers, and the statuses the guard may answer (its rules in order: Host, then Origin, or Sec-Fetch-Site without one). */
function expectation(c: Case): { headers: Headers; statuses: number[] } {
  const headers: Headers = [['Host', c.host.value!]];
  if (c.origin.value !== undefined) headers.push(['Origin', c.origin.value]);
  if (c.site.value !== undefined) headers.push(['Sec-Fetch-Site', c.site.value]);
  const rules: [Drawn, number][] = [[c.host, 421], c.origin.value !== undefined ? [c.origin, 403] : [c.site, 403]];
  const statuses = new Set<number>();
  for (const [value, status] of rules) {
    if (value.verdict === 'good') continue;
    statuses.add(status);
    if (value.verdict === 'bad') return { headers, statuses: [...statuses] };
  }
  statuses.add(200);
  return { headers, statuses: [...statuses] };
}

function checkAnswer(status: number, body: string, allowed: number[], what: string): void {
  // A random Host or Origin that HTTP/1.1 itself does not allow is Node's 400 before any route.
  assert.ok(allowed.includes(status) || status === 400, `${what}: ${status}, expected one of ${allowed.join(', ')}: ${body.slice(0, 300)}`);
  if (status >= 400) {
    assertCallerError(body, 'openai', what);
    assert.ok(body.length < 1000, `${what}: an error of ${body.length} characters`);
  }
}

describe('an open proxy under hostile Host, Origin and Sec-Fetch-Site values', () => {
  test('HTTP/1.1', async () => {
    const seen = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(caseArb(), async (c) => {
        const { headers, statuses } = expectation(c);
        const what = `POST /v1/chat/completions ${JSON.stringify(headers).slice(0, 400)}`;
        const res = await post('/v1/chat/completions', headers);
        seen.set(res.status, (seen.get(res.status) ?? 0) + 1);
        checkAnswer(res.status, res.body, statuses, what);
      }),
      params(),
    );
    console.log(`open proxy fuzz (HTTP/1.1): statuses ${JSON.stringify(Object.fromEntries([...seen].sort()))}`);
    for (const status of [200, 403, 421]) assert.ok((seen.get(status) ?? 0) > 0, `no ${status} drawn: the cases do not cover every rule`);
    await assertSettled(gw, 'after HTTP/1.1');
  });

  test('HTTP/2', async () => {
    const sessions: ClientHttp2Session[] = [];
    const session = () => {
      const last = sessions.at(-1);
      if (last && !last.closed && !last.destroyed) return last;
      sessions.push(connect(gw.proxyUrl).on('error', () => {}));
      return sessions.at(-1)!;
    };
    const seen = new Map<number, number>();
    let answered = 0;
    try {
      await fc.assert(
        fc.asyncProperty(caseArb(), async (c) => {
          const { headers, statuses } = expectation(c);
          const h2Headers: Record<string, string> = { ':method': 'POST', ':path': '/v1/chat/completions', 'content-type': 'application/json' };
          for (const [name, value] of headers) h2Headers[name === 'Host' ? ':authority' : name.toLowerCase()] = value.replaceAll('\t', ' ');
          const answer = await h2(session(), h2Headers, CHAT);
          if (answer === undefined) return; // a value HTTP/2 forbids: refused before any route
          answered++;
          seen.set(answer.status, (seen.get(answer.status) ?? 0) + 1);
          checkAnswer(answer.status, answer.body, statuses, `h2 ${JSON.stringify(h2Headers).slice(0, 400)}`);
        }),
        params(Math.ceil(RUNS / 2)),
      );
    } finally {
      for (const s of sessions) s.close();
    }
    console.log(`open proxy fuzz (HTTP/2): statuses ${JSON.stringify(Object.fromEntries([...seen].sort()))}, ${answered} answered`);
    assert.ok(answered >= RUNS / 4, `only ${answered} HTTP/2 cases were answered`);
    for (const status of [200, 403, 421]) assert.ok((seen.get(status) ?? 0) > 0, `no ${status} drawn over HTTP/2`);
    await assertSettled(gw, 'after HTTP/2');
  });
});

/** One HTTP/2 request; undefined when the stream is refused before an answer (a header value HTTP/2 does not allow). */
function h2(session: ClientHttp2Session, headers: Record<string, string>, body: string | undefined): Promise<{ status: number; body: string } | undefined> {
  return new Promise((resolve) => {
    let stream;
    try {
      stream = session.request(headers, { endStream: body === undefined });
    } catch {
      return resolve(undefined);
    }
    let status = 0;
    let text = '';
    stream.on('response', (h) => (status = Number(h[':status'])));
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => (text += chunk));
    stream.on('end', () => resolve(status === 0 ? undefined : { status, body: text }));
    stream.on('error', () => resolve(undefined));
    if (body !== undefined) stream.end(body);
  });
}
