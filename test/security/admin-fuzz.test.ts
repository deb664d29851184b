// Issue #24, defect 1: the admin API's request guard under hostile Host, Origin, Sec-Fetch-Site and
// Content-Type values (fast-check, against the built program at the default settings). Each value
// is drawn as one known to pass, one known to be refused, or random text (or a huge value), and the
// answer must agree: all known good, 200; anything known bad, the refusal of the first rule it
// breaks (421 Host, 403 origin, 415 media type); random, any of those. Always a complete answer in
// the API's error shape, never a 5xx, the nosniff and CORP headers, no CORS header, a quote of at
// most a capped part of a huge value; and afterwards the process is up with nothing in flight.
// SLUICE_FUZZ_SEED and SLUICE_FUZZ_RUNS as in test/e2e/fuzz.test.ts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type ClientHttp2Session } from 'node:http2';
import fc from 'fast-check';
import { drawn, known, type Drawn } from '../support/header-draws.ts';
import { eventually, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { assertOpenAiError, assertSettled, openConnections, rawRequest } from '../support/reliability.ts';

const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 20261203);
const RUNS = Number(process.env.SLUICE_FUZZ_RUNS ?? 200);
const params = (numRuns = RUNS): fc.Parameters<unknown> => ({ seed: SEED, numRuns, verbose: 1 });

let gw: GatewayProcess;
let port: number;

before(async () => {
  console.log(`admin fuzz: seed ${SEED}, ${RUNS} runs (set SLUICE_FUZZ_SEED / SLUICE_FUZZ_RUNS to change)`);
  gw = await startGateway({
    config: {
      providers: [{ name: 'echo', type: 'echo' }],
      models: [{ name: 'echo', provider: 'echo' }],
      listeners: [
        { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
        { name: 'admin', address: '127.0.0.1:0', role: 'admin', protocols: ['http1', 'h2'] },
      ],
    },
  });
  port = Number(new URL(gw.adminUrl).port);
});
after(async () => gw?.stop());

const hostArb = () =>
  drawn(
    known('good', `127.0.0.1:${port}`, `localhost:${port}`, 'LocalHost', `[::1]:${port}`, '127.3.4.5:1', `x.localhost:${port}`, 'localhost.'),
    known('bad', 'rebind.evil.example', `evil.example:${port}`, 'localhost.evil.example', `10.0.0.1:${port}`, '[::2]', 'localhost:x', `127.0.0.1.nip.io:${port}`),
  );
/** `same`: the request's own origin, built from its Host. */
const originArb = () =>
  drawn(known('good', undefined, 'same'), known('bad', 'https://evil.example', `http://127.0.0.1:${port + 1}`, 'null', `https://127.0.0.1:${port}`, `http://localhost:${port}/`), { good: 6, bad: 1 });
const siteArb = drawn(known('good', undefined, 'same-origin', 'Same-Origin', 'none'), known('bad', 'cross-site', 'same-site', ''), { good: 6, bad: 1 });
const typeArb = drawn(
  known('good', undefined, 'application/json', 'Application/JSON; charset=utf-8'),
  known('bad', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'text/plain; application/json'),
  { good: 2, bad: 2 },
);
const routeArb = fc.oneof(
  { weight: 1, arbitrary: fc.constantFrom(['GET', '/server_info'], ['GET', '/readyz'], ['GET', '/metrics'], ['GET', '/livez']) },
  { weight: 1, arbitrary: fc.constant(['POST', '/healthcheck/ok']) },
) as fc.Arbitrary<[string, string]>;

interface Case {
  route: [string, string];
  host: Drawn;
  origin: Drawn;
  site: Drawn;
  type: Drawn;
  body: string | undefined;
}
const caseArb = () => fc.record({ route: routeArb, host: hostArb(), origin: originArb(), site: siteArb, type: typeArb, body: fc.constantFrom(undefined, '{}') });

/** The request's headers, and what the guard must answer: the statuses allowed. */
function expectation(c: Case): { headers: [string, string][]; statuses: number[] } {
  const [method] = c.route;
  const headers: [string, string][] = [['Host', c.host.value!]];
  let origin = c.origin;
  if (origin.value === 'same') origin = { value: `http://${c.host.value}`, verdict: c.host.verdict };
  if (origin.value !== undefined) headers.push(['Origin', origin.value]);
  let site = c.site;
  if (site.value === 'none' && method !== 'GET' && method !== 'HEAD') site = { value: 'none', verdict: 'bad' };
  if (site.value !== undefined) headers.push(['Sec-Fetch-Site', site.value]);
  let type: Drawn = { value: undefined, verdict: 'good' };
  if (method === 'POST') {
    type = c.type.value === undefined && c.body !== undefined ? { value: undefined, verdict: 'bad' } : c.type;
    if (c.type.value !== undefined) headers.push(['Content-Type', c.type.value]);
  }
  // The rules in the guard's order: the first known-bad value decides; a random one before it may decide first.
  const rules: [Drawn, number][] = [
    [c.host, 421],
    [site, 403],
    [origin, 403],
    [type, 415],
  ];
  const statuses = new Set<number>();
  for (const [drawn, status] of rules) {
    if (drawn.verdict === 'good') continue;
    statuses.add(status);
    if (drawn.verdict === 'bad') return { headers, statuses: [...statuses] };
  }
  statuses.add(200);
  return { headers, statuses: [...statuses] };
}

function checkAnswer(status: number, headers: Record<string, unknown>, body: string, allowed: number[], what: string): void {
  assert.ok(allowed.includes(status), `${what}: ${status}, expected one of ${allowed.join(', ')}: ${body.slice(0, 300)}`);
  assert.equal(headers['x-content-type-options'], 'nosniff', what);
  assert.equal(headers['cross-origin-resource-policy'], 'same-origin', what);
  for (const name of Object.keys(headers)) assert.ok(!name.startsWith('access-control-'), `${what}: ${name}`);
  if (status >= 400) {
    assertOpenAiError(body, what);
    assert.ok(body.length < 1000, `${what}: an error of ${body.length} characters`);
  }
}

describe('the admin request guard under hostile values', () => {
  test('HTTP/1.1: Host, Origin, Sec-Fetch-Site and Content-Type', async () => {
    const seen = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(caseArb(), async (c) => {
        const { headers, statuses } = expectation(c);
        const [method, path] = c.route;
        const what = `${method} ${path} ${JSON.stringify(headers).slice(0, 400)}`;
        const res = await rawRequest(gw.adminUrl, { method, path, headers, ...(method === 'POST' && c.body !== undefined ? { body: c.body } : {}) });
        seen.set(res.status, (seen.get(res.status) ?? 0) + 1);
        checkAnswer(res.status, res.headers, res.body.toString('utf8'), statuses, what);
      }),
      params(),
    );
    console.log(`admin fuzz (HTTP/1.1): statuses ${JSON.stringify(Object.fromEntries([...seen].sort()))}`);
    for (const status of [200, 403, 415, 421]) assert.ok((seen.get(status) ?? 0) > 0, `no ${status} drawn: the cases do not cover every rule`);
    await settled('after HTTP/1.1');
  });

  test('HTTP/2: :authority, Origin, Sec-Fetch-Site and Content-Type', async () => {
    // A value HTTP/2 forbids may end the session: the next case gets a new one.
    const sessions: ClientHttp2Session[] = [];
    const session = () => {
      const last = sessions.at(-1);
      if (last && !last.closed && !last.destroyed) return last;
      sessions.push(connect(gw.adminUrl).on('error', () => {}));
      return sessions.at(-1)!;
    };
    const seen = new Map<number, number>();
    let answered = 0;
    try {
      await fc.assert(
        fc.asyncProperty(caseArb(), async (c) => {
          const { headers, statuses } = expectation(c);
          const [method, path] = c.route;
          const h2Headers: Record<string, string> = { ':method': method, ':path': path };
          // An HTTP/2 header value must be visible ASCII or obs-text: a tab is not sent.
          for (const [name, value] of headers) h2Headers[name === 'Host' ? ':authority' : name.toLowerCase()] = value.replaceAll('\t', ' ');
          const what = `h2 ${method} ${path} ${JSON.stringify(h2Headers).slice(0, 400)}`;
          const answer = await h2(session(), h2Headers, method === 'POST' ? c.body : undefined);
          if (answer === undefined) return; // refused by the client or the server's HTTP/2 layer (a value HTTP/2 forbids), before any route
          answered++;
          seen.set(answer.status, (seen.get(answer.status) ?? 0) + 1);
          checkAnswer(answer.status, answer.headers, answer.body, statuses, what);
        }),
        params(Math.ceil(RUNS / 2)),
      );
    } finally {
      for (const s of sessions) s.close();
    }
    console.log(`admin fuzz (HTTP/2): statuses ${JSON.stringify(Object.fromEntries([...seen].sort()))}, ${answered} answered`);
    assert.ok(answered >= RUNS / 4, `only ${answered} HTTP/2 cases were answered`);
    for (const status of [200, 403, 415, 421]) assert.ok((seen.get(status) ?? 0) > 0, `no ${status} drawn over HTTP/2`);
    await settled('after HTTP/2');
  });
});

/** The process is up and ready, nothing is in flight, and no admin connection is left open but the scrape's. */
async function settled(what: string): Promise<void> {
  await assertSettled(gw, what);
  const ready = await fetch(`${gw.adminUrl}/readyz`);
  assert.equal(ready.status, 200, `${what}: readiness`);
  await eventually(async () => openConnections(await scrape(gw), 'admin') <= 1, 8000, `${what}: admin connections closed`);
}

/** One HTTP/2 request; undefined when the stream is refused before an answer (a header value HTTP/2 does not allow). */
function h2(session: ClientHttp2Session, headers: Record<string, string>, body: string | undefined): Promise<{ status: number; headers: Record<string, unknown>; body: string } | undefined> {
  return new Promise((resolve) => {
    let stream;
    try {
      stream = session.request(headers, { endStream: body === undefined });
    } catch {
      return resolve(undefined);
    }
    let status = 0;
    let received: Record<string, unknown> = {};
    let text = '';
    stream.on('response', (h) => {
      status = Number(h[':status']);
      received = h;
    });
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => (text += chunk));
    stream.on('end', () => resolve(status === 0 ? undefined : { status, headers: received, body: text }));
    stream.on('error', () => resolve(undefined));
    if (body !== undefined) stream.end(body);
  });
}
