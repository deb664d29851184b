// A web page must not use a proxy that needs no client key. At the default settings (the embedded
// default, with OPENAI_API_KEY set: the operator's own credential) the proxy listener on 127.0.0.1
// answers any request with no key, and the operator's browser can reach it. Headless Chromium
// opens two hostile pages:
//   - one of another origin (evil.example, mapped to 127.0.0.1): it sends what a browser sends
//     without a preflight (text/plain and form posts of JSON to every generating route, an image
//     load) and opens a realtime WebSocket, which no CORS rule restricts;
//   - one reached through DNS rebinding (rebind.evil.example on the proxy's own port): the proxy
//     is its own origin, so it may read every answer; only its Host gives it away (a GET carries no
//     Origin, and Chromium sends no Sec-Fetch-Site to an http:// name).
// Then the upstream received nothing (no request spent the operator's key), the pages read
// nothing, and the access log shows every request arrived and was refused: the test cannot pass
// because Chromium held a request back. With client keys configured, a page that holds a key
// still opens a realtime session (the OpenAI SDK's way in a browser), and one without gets 401.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, type GatewayProcess, type LogLine } from '../support/gateway-process.ts';
import { chromiumCheck } from '../support/chromium.ts';
import { hostilePage, openHostilePages, pageTries, type HostilePages, type PageResult, type PageResults } from '../support/hostile-pages.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';

const browser = chromiumCheck();
const EVIL_HOST = 'evil.example';
const REBIND_HOST = 'rebind.evil.example';
const OPERATOR_KEY = 'sk-operator-credential-0123456789';
const CLIENT_KEY = 'sk-client-key-for-a-browser-app';
/** The test's own request, told apart from the pages' in the access log. */
const OWN = 'test-own-request';

let mock: MockUpstream;
/** The page of another origin is served at http://evil.example:PORT. */
let pages: HostilePages;

before(async () => {
  if (browser.skip) return;
  mock = await startMockUpstream();
  pages = await openHostilePages({ pageHost: EVIL_HOST, resolve: [EVIL_HOST, REBIND_HOST] });
});

after(async () => {
  await pages?.close();
  await mock?.close();
});

/** The routes a page tries, each with a body a provider would answer (and charge the operator for). */
const GENERATING = [
  ['chat', '/v1/chat/completions', { model: 'gpt-4o', messages: [{ role: 'user', content: 'page-chat' }] }],
  ['completions', '/v1/completions', { model: 'gpt-3.5-turbo-instruct', prompt: 'page-completions' }],
  ['responses', '/v1/responses', { model: 'gpt-4o', input: 'page-responses' }],
  ['messages', '/v1/messages', { model: 'gpt-4o', max_tokens: 16, messages: [{ role: 'user', content: 'page-messages' }] }],
  ['embeddings', '/v1/embeddings', { model: 'text-embedding-3-small', input: 'page-embeddings' }],
] as const;

function attackPage(proxyOrigin: string, options: { sameOrigin: boolean; key?: string }): string {
  const script = `${pageTries(proxyOrigin)}
const GENERATING = ${JSON.stringify(GENERATING)};
const SAME_ORIGIN = ${options.sameOrigin};
const KEY = ${JSON.stringify(options.key ?? null)};
function realtimeTry(name) {
  return new Promise((resolve) => {
    const url = (target || location.origin).replace(/^http/, 'ws') + '/v1/realtime?model=gpt-realtime';
    const protocols = KEY ? ['realtime', 'openai-insecure-api-key.' + KEY] : ['realtime'];
    const result = { opened: false, messages: [], closed: null };
    results[name] = result;
    let ws;
    try {
      ws = new WebSocket(url, protocols);
    } catch (error) {
      result.error = String(error);
      return resolve();
    }
    const timer = setTimeout(() => { ws.close(); resolve(); }, 8000);
    ws.onopen = () => { result.opened = true; ws.send(JSON.stringify({ type: 'response.create' })); };
    ws.onmessage = (event) => {
      result.messages.push(String(event.data).slice(0, 200));
      if (String(event.data).includes('response.done')) { clearTimeout(timer); ws.close(); resolve(); }
    };
    ws.onclose = (event) => { result.closed = event.code; clearTimeout(timer); resolve(); };
  });
}
(async () => {
  for (const [name, path, body] of GENERATING) {
    await fetchTry(name + '_text_plain', path, { method: 'POST', mode: 'no-cors', headers: { 'content-type': 'text/plain' }, body: JSON.stringify(body) });
    if (SAME_ORIGIN) await fetchTry(name + '_json', path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  }
  // A text/plain form whose body is JSON: {"model":"gpt-4o","messages":[...],"x":"="}
  await formTry('form_chat', '/v1/chat/completions', 'text/plain', { '{"model":"gpt-4o","messages":[{"role":"user","content":"page-form"}],"x":"': '"}' });
  await fetchTry('read_models', '/v1/models');
  await imageTry('image_models', '/v1/models');
  await realtimeTry('realtime');
  window.attackDone = results;
})();
`;
  return hostilePage(script);
}


/** What reached the upstream: a request of the page's (a POST, or a realtime session) spent the operator's key. */
function spent(): string[] {
  return mock.received.filter((r) => r.method === 'POST' || r.path.includes('/realtime')).map((r) => `${r.method} ${r.path} ${r.body.slice(0, 80)}`);
}

/** Every path the page tried arrived at the proxy listener and was refused with `status` and `code`; none was answered. */
async function assertRefusedInLog(gw: GatewayProcess, status: number, code: string, since: number): Promise<void> {
  const proxy = (l: LogLine) => l.event === 'access' && l.listener === 'proxy';
  for (const path of [...GENERATING.map(([, p]) => p), '/v1/models', '/v1/realtime']) {
    await gw.waitForLog((l) => proxy(l) && l.path === path && l.status === status && l.error === code, 15_000).catch((error: Error) => {
      throw new Error(`no refused ${path} (${status} ${code}) in the access log: the browser's request did not arrive or was not refused\n${error.message.slice(0, 300)}`);
    });
  }
  const answered = gw.logs.slice(since).filter((l) => proxy(l) && l.downstream_request_id !== OWN && (Number(l.status) < 400 || l.status === 101));
  assert.deepEqual(answered, [], 'a request of the page was answered');
}

function assertNothingRead(results: PageResults, sameOrigin: boolean): void {
  const realtime = results.realtime as PageResult;
  assert.equal(realtime.opened, false, `the realtime session opened: ${JSON.stringify(realtime)}`);
  assert.deepEqual(realtime.messages, [], 'the page read realtime messages');
  for (const [name, result] of Object.entries(results)) {
    if (typeof result !== 'object' || name === 'realtime') continue;
    if (result.type === 'opaque') continue; // no-cors: the page reads nothing of it by design
    if (!sameOrigin) assert.match(String(result.error), /TypeError/, `${name}: ${JSON.stringify(result).slice(0, 300)}`);
    else {
      assert.equal(result.status, 421, `${name}: ${JSON.stringify(result).slice(0, 300)}`);
      assert.doesNotMatch(String(result.body), /"choices"|"content"|"data"|"output"/, `${name} read an answer`);
    }
  }
}

describe('a web page against a proxy that needs no key, at the default settings', { skip: browser.skip }, () => {
  test('the embedded default with OPENAI_API_KEY: pages of another origin and rebinding pages spend nothing and read nothing', async () => {
    const gw = await startGateway({
      useDefault: true,
      env: { SLUICE_PROXY_ADDRESS: '127.0.0.1:0', SLUICE_ADMIN_ADDRESS: '127.0.0.1:0', OPENAI_API_KEY: OPERATOR_KEY, OPENAI_BASE_URL: `${mock.url}/v1` },
    });
    try {
      // The operator's own tools are served: a program sends no Origin.
      const own = await fetch(`${gw.proxyUrl}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-request-id': OWN }, body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'own' }] }) });
      assert.equal(own.status, 200, await own.text());
      mock.reset();

      let since = gw.logs.length;
      const crossOrigin = await pages.visit(`${pages.origin}/attack.html`, attackPage(gw.proxyUrl, { sameOrigin: false }), 90_000);
      assert.deepEqual(spent(), [], 'the page of another origin spent the operator key');
      assertNothingRead(crossOrigin, false);
      await assertRefusedInLog(gw, 403, 'cross_origin_request', since);

      since = gw.logs.length;
      const port = new URL(gw.proxyUrl).port;
      const rebound = await pages.visit(`http://${REBIND_HOST}:${port}/rebind.html`, attackPage('', { sameOrigin: true }), 90_000);
      assert.deepEqual(spent(), [], 'the rebinding page spent the operator key');
      assertNothingRead(rebound, true);
      await assertRefusedInLog(gw, 421, 'host_not_allowed', since);
    } finally {
      await gw.stop();
    }
  });

  test('with client keys nothing changes for a browser: a page holding a key opens a realtime session, one without is refused', async () => {
    const gw = await startGateway({
      config: {
        providers: [{ name: 'openai', type: 'openai', base_url: `${mock.url}/v1`, api_key: OPERATOR_KEY }],
        models: [{ name: 'gpt-*', provider: 'openai' }],
        keys: [{ name: 'browser-app', key: CLIENT_KEY }],
      },
    });
    try {
      mock.reset();
      const withKey = await pages.visit(`${pages.origin}/app.html`, attackPage(gw.proxyUrl, { sameOrigin: false, key: CLIENT_KEY }), 90_000);
      const realtime = withKey.realtime as PageResult;
      assert.equal(realtime.opened, true, JSON.stringify(realtime));
      assert.ok(realtime.messages!.some((m) => m.includes('response.done')), JSON.stringify(realtime));
      // Its no-cors posts carry no key: refused as any request without one.
      const refused = gw.logs.filter((l) => l.event === 'access' && l.path === '/v1/chat/completions');
      assert.ok(refused.length > 0 && refused.every((l) => l.status === 401), JSON.stringify(refused));
      assert.deepEqual(
        mock.received.filter((r) => r.method === 'POST'),
        [],
        'a keyless post reached the upstream',
      );
    } finally {
      await gw.stop();
    }
  });
});
