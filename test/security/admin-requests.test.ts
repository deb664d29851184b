// Issue #24, defect 1, rule by rule over raw HTTP against the built program at the default settings
// (a config file with no admin token, the admin listener on loopback): the admin API answers only
// its own tools. Host (HTTP/2: :authority) must name the listener, on every route, the probes and
// /metrics included; a browser's request must come from the listener's own origin (Origin,
// Sec-Fetch-Site); a write's body must be application/json. Refusals are 421, 403 and 415 in the
// API's error shape, quoting at most a capped part of what was sent. Every answer carries nosniff
// and Cross-Origin-Resource-Policy, none a CORS header. curl, Node clients and `sluice` still work.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { hash } from 'node:crypto';
import { connect, type ClientHttp2Session } from 'node:http2';
import { promisify } from 'node:util';
import { runSluice, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { assertOpenAiError, rawRequest, type ParsedResponse } from '../support/reliability.ts';
import { requireTool } from '../support/system-tool.ts';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';

const exec = promisify(execFile);
const curl = requireTool('curl', 'curl');
const ECHO = { providers: [{ name: 'echo', type: 'echo' }], models: [{ name: 'echo', provider: 'echo' }] };
type Headers = readonly (readonly [string, string])[];

let gw: GatewayProcess;
let port: string;
/** Host as a client of this listener sends it. */
let own: string;

before(async () => {
  gw = await startGateway({ config: { ...ECHO, listeners: [{ name: 'proxy', address: '127.0.0.1:0', role: 'proxy' }, { name: 'admin', address: '127.0.0.1:0', role: 'admin', protocols: ['http1', 'h2'] }] } });
  port = new URL(gw.adminUrl).port;
  own = `127.0.0.1:${port}`;
});
after(async () => gw?.stop());

function ask(method: string, path: string, headers: Headers, body?: string, on: GatewayProcess = gw): Promise<ParsedResponse> {
  return rawRequest(on.adminUrl, { method, path, headers, ...(body === undefined ? {} : { body }) });
}

/** The refusal: its status, its code in the OpenAI error shape, and the defence-in-depth headers. */
function assertRefused(res: ParsedResponse, status: number, code: string, what: string): string {
  const body = res.body.toString('utf8');
  assert.equal(res.status, status, `${what}: ${body.slice(0, 300)}`);
  assert.equal(assertOpenAiError(body, what).code, code, what);
  assertAdminHeaders(res, what);
  return body;
}

function assertAdminHeaders(res: ParsedResponse, what: string): void {
  assert.equal(res.headers['x-content-type-options'], 'nosniff', what);
  assert.equal(res.headers['cross-origin-resource-policy'], 'same-origin', what);
  for (const name of Object.keys(res.headers)) assert.ok(!name.startsWith('access-control-'), `${what}: a CORS header ${name}`);
}

async function assertReady(what: string, on: GatewayProcess = gw): Promise<void> {
  const res = await ask('GET', '/readyz', [['Host', new URL(on.adminUrl).host]], undefined, on);
  assert.equal(res.status, 200, `${what}: readiness ${res.body.toString()}`);
  assert.equal(on.child.exitCode, null, `${what}: the gateway exited`);
}

const EVERY_ROUTE: readonly [string, string][] = [
  ['GET', '/livez'],
  ['GET', '/readyz'],
  ['GET', '/readyz?verbose'],
  ['GET', '/metrics'],
  ['GET', '/server_info'],
  ['GET', '/status'],
  ['GET', '/status/events'],
  ['GET', '/openapi.json'],
  ['GET', '/config/providers'],
  ['GET', '/no/such/route'],
  ['POST', '/healthcheck/fail'],
  ['POST', '/drain_listeners?graceful'],
  ['POST', '/hot_restart'],
  ['OPTIONS', '/server_info'],
];
/** Routes whose answer changes nothing and ends (no drain, no event stream). */
const HARMLESS_ROUTES: readonly [string, string][] = [
  ...EVERY_ROUTE.filter(([method, path]) => method !== 'POST' && path !== '/status/events'),
  ['POST', '/healthcheck/ok'],
  ['GET', '/healthcheck/ok'],
];

describe('Host', () => {
  test('a name that is not this listener is refused with 421 on every route, the probes and /metrics included; nothing changes', async () => {
    for (const [method, path] of EVERY_ROUTE) {
      const body = assertRefused(await ask(method, path, [['Host', `rebind.evil.example:${port}`]]), 421, 'host_not_allowed', `${method} ${path}`);
      assert.match(body, /rebind\.evil\.example/);
    }
    await assertReady('after the refused requests');
  });

  test('refused: other names, a loopback name inside another, an IP that is not this listener\'s, malformed and empty values; a huge one is quoted capped', async () => {
    for (const host of ['evil.example', 'localhost.evil.example', '127.0.0.1.nip.io', 'localhostx', 'notlocalhost', `10.0.0.1:${port}`, '[::2]', '[fe80::1]', '', '::1', '[::1', 'a b', `localhost:${port}x`, 'localhost:-1']) {
      assertRefused(await ask('GET', '/server_info', [['Host', host]]), 421, 'host_not_allowed', `Host ${JSON.stringify(host)}`);
    }
    const huge = `${'a'.repeat(8000)}.example`;
    const body = assertRefused(await ask('GET', '/server_info', [['Host', huge]]), 421, 'host_not_allowed', 'a huge Host');
    assert.ok(body.length < 600, `the answer quotes ${body.length} characters`);
    assert.match(body, /\(8008 characters\)/);
  });

  test('accepted: loopback names and addresses, any case, a trailing dot, any port (a port forward); HTTP/1.0 without Host', async () => {
    for (const host of [own, '127.0.0.1', '127.8.9.10:1', `localhost:${port}`, 'LOCALHOST', `localhost.:${port}`, `status.localhost:${port}`, `[::1]:${port}`, '[0:0:0:0:0:0:0:1]', 'localhost:8080']) {
      const res = await ask('GET', '/server_info', [['Host', host]]);
      assert.equal(res.status, 200, `Host ${host}: ${res.body.toString().slice(0, 200)}`);
    }
    const old = await rawRequest(gw.adminUrl, { path: '/readyz', version: '1.0' });
    assert.equal(old.status, 200, 'HTTP/1.0 without Host: no browser sends that');
  });

  test('HTTP/2: :authority is the Host', async () => {
    const session = connect(gw.adminUrl);
    try {
      const refused = await h2(session, { ':path': '/server_info', ':authority': `rebind.evil.example:${port}` });
      assert.equal(refused.status, 421, refused.body);
      assert.equal(JSON.parse(refused.body).error.code, 'host_not_allowed');
      assert.equal(refused.headers['cross-origin-resource-policy'], 'same-origin');
      assert.equal((await h2(session, { ':path': '/readyz', ':authority': own })).status, 200);
      const typed = await h2(session, { ':method': 'POST', ':path': '/healthcheck/fail', ':authority': own, 'content-type': 'text/plain' }, 'x');
      assert.equal(typed.status, 415, typed.body);
      const withBody = await h2(session, { ':method': 'POST', ':path': '/healthcheck/fail', ':authority': own }, '{}');
      assert.equal(withBody.status, 415, `a body without a Content-Type: ${withBody.body}`);
      const crossSite = await h2(session, { ':method': 'POST', ':path': '/healthcheck/fail', ':authority': own, origin: 'https://evil.example' });
      assert.equal(crossSite.status, 403, crossSite.body);
      await assertReady('after the HTTP/2 refusals');
      assert.equal((await h2(session, { ':method': 'POST', ':path': '/healthcheck/ok', ':authority': own })).status, 200, 'a bodyless POST');
    } finally {
      session.close();
    }
  });

  test('admin.allowed_hosts: exact names, subdomains of a wildcard (not the domain itself), IP addresses in any spelling', async () => {
    const allowed = await startGateway({ config: { ...ECHO, admin: { allowed_hosts: ['admin.example.com', '*.ops.example', '10.1.2.3', '[2001:db8::1]'] } } });
    try {
      const statusFor = async (host: string) => (await ask('GET', '/server_info', [['Host', host]], undefined, allowed)).status;
      for (const host of ['admin.example.com', 'Admin.Example.COM:443', 'a.ops.example', 'b.a.ops.example:1', '10.1.2.3:9901', '[2001:db8:0::1]:9901', 'localhost']) assert.equal(await statusFor(host), 200, host);
      for (const host of ['ops.example', 'evilops.example', 'x.admin.example.com', 'admin.example.com.evil.example', '10.1.2.4', '[2001:db8::2]']) assert.equal(await statusFor(host), 421, host);
    } finally {
      await allowed.stop();
    }
  });

  test('bound to every interface (0.0.0.0, as the Helm chart binds it for a ServiceMonitor): any IP address passes (Prometheus and kubelet send the pod IP), a name still does not', async () => {
    const token = 'scrape-token-0123456789abcdef';
    const wide = await startGateway({ config: { ...ECHO, listeners: [{ name: 'proxy', address: '127.0.0.1:0', role: 'proxy' }, { name: 'admin', address: '0.0.0.0:0', role: 'admin' }], admin: { allow_non_loopback: true, token } } });
    try {
      const at = wide.adminUrl.replace('0.0.0.0', '127.0.0.1');
      const widePort = new URL(at).port;
      const scrape = (host: string) => rawRequest(at, { path: '/metrics', headers: [['Host', host]] });
      for (const host of [`10.9.8.7:${widePort}`, `[2001:db8::5]:${widePort}`, `192.168.1.20:${widePort}`]) assert.equal((await scrape(host)).status, 200, host);
      assert.equal((await scrape(`sluice.default.svc:${widePort}`)).status, 421);
    } finally {
      await wide.stop();
    }
  });
});

describe('cross-origin requests', () => {
  test('Origin of another site, another port of 127.0.0.1 (the same site), "null" or another scheme: 403 on a text/plain POST, a bodyless POST and a GET; nothing changes', async () => {
    for (const origin of ['https://evil.example', `http://127.0.0.1:${Number(port) + 1}`, `http://localhost:${port}`, 'null', `https://${own}`, `http://${own}/`, `http://${own}, https://evil.example`]) {
      const host: [string, string] = ['Host', own];
      assertRefused(await ask('POST', '/healthcheck/fail', [host, ['Origin', origin], ['Content-Type', 'text/plain']], 'x'), 403, 'cross_origin_request', `text/plain POST from ${origin}`);
      assertRefused(await ask('POST', '/drain_listeners?graceful', [host, ['Origin', origin]]), 403, 'cross_origin_request', `bodyless POST from ${origin}`);
      assertRefused(await ask('GET', '/server_info', [host, ['Origin', origin]]), 403, 'cross_origin_request', `GET from ${origin}`);
    }
    await assertReady('after the cross-origin requests');
  });

  test('Sec-Fetch-Site: cross-site and same-site are refused everywhere (/metrics and /readyz too); same-origin passes; none passes for GET only', async () => {
    const host: [string, string] = ['Host', own];
    for (const site of ['cross-site', 'same-site', 'Cross-Site', 'nonsense', '']) {
      for (const path of ['/server_info', '/metrics', '/readyz']) assertRefused(await ask('GET', path, [host, ['Sec-Fetch-Site', site]]), 403, 'cross_origin_request', `${site} ${path}`);
    }
    assert.equal((await ask('GET', '/server_info', [host, ['Sec-Fetch-Site', 'same-origin']])).status, 200);
    assert.equal((await ask('GET', '/server_info', [host, ['Sec-Fetch-Site', 'Same-Origin']])).status, 200);
    assert.equal((await ask('GET', '/status', [host, ['Sec-Fetch-Site', 'none']])).status, 200, 'an address typed in the bar');
    assertRefused(await ask('POST', '/healthcheck/fail', [host, ['Sec-Fetch-Site', 'none']]), 403, 'cross_origin_request', 'none on a POST');
    await assertReady('after the cross-site requests');
  });

  test('the listener\'s own origin passes (default ports aside), as the status page\'s own requests do', async () => {
    assert.equal((await ask('POST', '/healthcheck/ok', [['Host', own], ['Origin', `http://${own}`], ['Sec-Fetch-Site', 'same-origin']])).status, 200);
    assert.equal((await ask('POST', '/healthcheck/ok', [['Host', 'LOCALHOST:80'], ['Origin', 'http://localhost']])).status, 200);
    assert.equal((await ask('GET', '/server_info', [['Host', `[::1]:${port}`], ['Origin', `http://[::1]:${port}`]])).status, 200);
  });

  test('no answer carries a CORS header; a preflight is refused (from another origin) or 405 (from this one)', async () => {
    for (const [method, path] of HARMLESS_ROUTES) {
      const res = await ask(method, path, [['Host', own]]);
      assertAdminHeaders(res, `${method} ${path}`);
    }
    const preflight: Headers = [['Host', own], ['Access-Control-Request-Method', 'POST'], ['Access-Control-Request-Headers', 'content-type']];
    assertRefused(await ask('OPTIONS', '/config/keys', [...preflight, ['Origin', 'https://evil.example']]), 403, 'cross_origin_request', 'a preflight from another origin');
    assertRefused(await ask('OPTIONS', '/healthcheck/fail', [...preflight, ['Origin', `http://${own}`]]), 405, 'method_not_allowed', 'a preflight from this origin');
  });
});

describe('writes take JSON', () => {
  test('a POST, PUT or DELETE with a Content-Type other than application/json, or a body without one, is 415; nothing changes', async () => {
    const host: [string, string] = ['Host', own];
    const cases: [string, string, Headers, string | undefined][] = [
      ['POST', '/healthcheck/fail', [host, ['Content-Type', 'text/plain']], 'x'],
      ['POST', '/healthcheck/fail', [host, ['Content-Type', 'application/x-www-form-urlencoded']], ''],
      ['POST', '/healthcheck/fail', [host, ['Content-Type', 'multipart/form-data; boundary=x']], '--x--\r\n'],
      ['POST', '/healthcheck/fail', [host, ['Content-Type', 'text/plain; application/json']], '{}'],
      ['POST', '/healthcheck/fail', [host, ['Content-Type', 'application/jsonx']], '{}'],
      ['POST', '/healthcheck/fail', [host], '{}'],
      ['POST', '/healthcheck/fail', [host, ['Transfer-Encoding', 'chunked']], '2\r\n{}\r\n0\r\n\r\n'],
      ['POST', '/drain_listeners?graceful', [host, ['Content-Type', 'text/plain']], 'x'],
      ['PUT', '/config/providers/x', [host, ['Content-Type', 'text/plain']], '{"type":"echo"}'],
      ['DELETE', '/config/providers/echo', [host, ['Content-Type', 'text/plain']], undefined],
    ];
    for (const [method, path, headers, body] of cases) {
      const message = assertRefused(await ask(method, path, headers, body), 415, 'unsupported_media_type', `${method} ${path} ${JSON.stringify(headers)}`);
      assert.match(message, /application\/json/);
    }
    await assertReady('after the writes that were not JSON');
  });

  test('JSON (any case, with parameters) and bodyless writes without a Content-Type pass: curl -X POST, Node fetch', async () => {
    const host: [string, string] = ['Host', own];
    assert.equal((await ask('POST', '/healthcheck/ok', [host, ['Content-Type', 'Application/JSON; charset=utf-8']], '{}')).status, 200);
    assert.equal((await ask('POST', '/healthcheck/ok', [host, ['Content-Length', '0']])).status, 200);
    const failed = await fetch(`${gw.adminUrl}/healthcheck/fail`, { method: 'POST' });
    assert.equal(failed.status, 200, await failed.text());
    assert.equal((await fetch(`${gw.adminUrl}/readyz`)).status, 503);
    assert.equal((await fetch(`${gw.adminUrl}/healthcheck/ok`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })).status, 200);
    await assertReady('restored');
    assert.equal((await ask('PUT', '/config/providers/x', [host, ['Content-Type', 'application/json']], '{"type":"echo"}')).status, 409, 'JSON reaches the route (a file is read-only)');
  });

  test('curl -X POST as documented, and sluice get', { skip: curl.skip }, async () => {
    const { stdout } = await exec('curl', ['-s', '-XPOST', `http://localhost:${port}/healthcheck/fail`]);
    assert.equal(JSON.parse(stdout).status, 'healthcheck_failed');
    await exec('curl', ['-s', '-XPOST', `${gw.adminUrl}/healthcheck/ok`]);
    await assertReady('after curl');
    const got = await runSluice(['get', 'models', '--admin', gw.adminUrl], { env: { SLUICE_CONFIG: undefined, SLUICE_ADMIN_TOKEN: undefined } });
    assert.equal(got.code, 0, got.stderr);
    assert.match(got.stdout, /echo/);
  });
});

describe('etcd mode with no admin token', { skip: etcdCheck().skip }, () => {
  let etcd: EtcdServer;
  let etcdGw: GatewayProcess;
  const prefix = `/sluice-admin-requests-${process.pid}/`;
  const team = JSON.stringify({ key_sha256: hash('sha256', 'sk-team-key-0123456789', 'base64') });
  before(async () => {
    etcd = await startEtcd();
    await etcd.put(`${prefix}providers/echo`, JSON.stringify({ type: 'echo' }));
    await etcd.put(`${prefix}models/echo`, JSON.stringify({ provider: 'echo' }));
    await etcd.put(`${prefix}keys/team`, team);
    etcdGw = await startGateway({ config: { etcd: { endpoints: [etcd.endpoint], prefix } } });
  });
  after(async () => {
    await etcdGw?.stop();
    await etcd?.close();
  });

  const keysInEtcd = async () => (await etcd.etcdctl('get', '--prefix', '--keys-only', `${prefix}keys/`)).split('\n').filter((l) => l !== '');

  test('POST /config/keys as text/plain (415), from another origin (403); a rotation from another origin (403): nothing written; JSON without Origin still creates one', async () => {
    const host: [string, string] = ['Host', new URL(etcdGw.adminUrl).host];
    const evil: [string, string] = ['Origin', 'https://evil.example'];
    const asked = (method: string, path: string, headers: Headers, body?: string) => ask(method, path, headers, body, etcdGw);
    assertRefused(await asked('POST', '/config/keys', [host, ['Content-Type', 'text/plain']], '{"name":"pwned"}'), 415, 'unsupported_media_type', 'text/plain');
    assertRefused(await asked('POST', '/config/keys', [host, evil, ['Content-Type', 'text/plain']], '{"name":"pwned"}'), 403, 'cross_origin_request', 'text/plain from another origin');
    assertRefused(await asked('POST', '/config/keys', [['Host', 'rebind.evil.example'], ['Content-Type', 'application/json']], '{"name":"pwned"}'), 421, 'host_not_allowed', 'rebound');
    assertRefused(await asked('POST', '/config/keys/team/rotate', [host, evil]), 403, 'cross_origin_request', 'a rotation from another origin');
    assertRefused(await asked('DELETE', '/config/keys/team', [host, ['Content-Type', 'text/plain']]), 415, 'unsupported_media_type', 'a DELETE typed text/plain');
    assert.deepEqual(await keysInEtcd(), [`${prefix}keys/team`]);
    assert.equal(await etcd.get(`${prefix}keys/team`), team);
    const created = await asked('POST', '/config/keys', [host, ['Content-Type', 'application/json']], '{"name":"ops"}');
    assert.equal(created.status, 201, created.body.toString());
    assert.deepEqual(await keysInEtcd(), [`${prefix}keys/ops`, `${prefix}keys/team`]);
  });
});

/** One HTTP/2 request on `session`; resolves with its status, headers and body. */
function h2(session: ClientHttp2Session, headers: Record<string, string>, body?: string): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    const stream = session.request(headers, { endStream: body === undefined });
    let status = 0;
    let received: Record<string, unknown> = {};
    let text = '';
    stream.on('response', (h) => {
      status = Number(h[':status']);
      received = h;
    });
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => (text += chunk));
    stream.on('end', () => resolve({ status, headers: received, body: text }));
    stream.on('error', reject);
    if (body !== undefined) stream.end(body);
  });
}
