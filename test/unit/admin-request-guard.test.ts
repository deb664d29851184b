// The admin API's request guard (src/admin/request-guard.ts) on its own: how a Host is matched
// against the listener's address (by name, by IP, bound to every interface, over TLS) and
// admin.allowed_hosts; origins with default ports; what counts as a body; quotes capped; and that
// no header value, of any type, makes it throw. Plus the config's admin.allowed_hosts syntax.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import fc from 'fast-check';
import { AdminRequestGuard, type GuardedListener } from '../../src/admin/request-guard.ts';
import { ConfigError, parseConfig } from '../../src/config/load.ts';

type HeaderValue = string | string[] | undefined;

/** A request as the guard reads it (an HTTP/1.1 one: method and headers). */
function request(method: string, headers: Record<string, HeaderValue>): IncomingMessage {
  return { method, headers } as unknown as IncomingMessage;
}

const LOOPBACK: GuardedListener = { configuredAddress: '127.0.0.1:9901', tls: false };

function codeOf(guard: AdminRequestGuard, listener: GuardedListener, method: string, headers: Record<string, HeaderValue>): string {
  return guard.refuse(request(method, headers), listener)?.code ?? 'ok';
}

describe('Host', () => {
  const guard = new AdminRequestGuard([]);
  const hostCode = (listener: GuardedListener, host: string) => codeOf(guard, listener, 'GET', { host });

  test('a listener bound by name answers to that name, any case, with a trailing dot; not to another', () => {
    const named: GuardedListener = { configuredAddress: 'admin.internal:9901', tls: false };
    for (const host of ['admin.internal', 'ADMIN.internal:9901', 'admin.internal.', 'localhost', '127.0.0.1']) assert.equal(hostCode(named, host), 'ok', host);
    for (const host of ['admin.internal.evil.example', 'x.admin.internal', 'internal', '10.0.0.5']) assert.equal(hostCode(named, host), 'host_not_allowed', host);
  });

  test('bound to one IP address: that address (any spelling) and loopback; another address is refused', () => {
    const v4: GuardedListener = { configuredAddress: '10.0.0.5:9901', tls: false };
    assert.equal(hostCode(v4, '10.0.0.5:9901'), 'ok');
    assert.equal(hostCode(v4, '[::ffff:10.0.0.5]'), 'ok');
    assert.equal(hostCode(v4, '10.0.0.6'), 'host_not_allowed');
    const v6: GuardedListener = { configuredAddress: '[2001:db8::1]:9901', tls: false };
    assert.equal(hostCode(v6, '[2001:DB8:0:0::1]:9901'), 'ok');
    assert.equal(hostCode(v6, '[2001:db8::2]'), 'host_not_allowed');
    assert.equal(hostCode(v6, '[::1]'), 'ok');
  });

  test('bound to every interface (0.0.0.0, ::, or no host): any IP address; a name only if loopback or allowed', () => {
    for (const configuredAddress of ['0.0.0.0:9901', '[::]:9901', ':9901']) {
      const wildcard: GuardedListener = { configuredAddress, tls: false };
      for (const host of ['10.1.2.3:9901', '[fd00::7]:9901', '203.0.113.9']) assert.equal(hostCode(wildcard, host), 'ok', `${configuredAddress} ${host}`);
      assert.equal(hostCode(wildcard, 'sluice.svc.cluster.local'), 'host_not_allowed', configuredAddress);
    }
  });

  test('loopback: localhost and its subdomains, 127.0.0.0/8, ::1 (and its IPv4-mapped forms); not names that merely contain them', () => {
    for (const host of ['localhost', 'a.b.localhost', '127.255.0.1', '[::1]', '[::ffff:127.0.0.1]']) assert.equal(hostCode(LOOPBACK, host), 'ok', host);
    for (const host of ['localhost.example', 'mylocalhost', '127.0.0.1.example', '128.0.0.1', '127.1', '[::2]']) assert.equal(hostCode(LOOPBACK, host), 'host_not_allowed', host);
  });

  test('malformed values are refused', () => {
    for (const host of ['', ':9901', '::1', '[::1', '[::1]x', '[::1]:80:80', 'a:b', 'localhost:80x', 'localhost :80']) assert.equal(hostCode(LOOPBACK, host), 'host_not_allowed', JSON.stringify(host));
  });

  test('admin.allowed_hosts: exact names, "*." wildcards for subdomains only, IP addresses with or without brackets', () => {
    const allowing = new AdminRequestGuard(['Admin.Example.com', '*.ops.example', '192.0.2.7', '[2001:db8::9]', '2001:db8::10']);
    const allowed = (host: string) => codeOf(allowing, LOOPBACK, 'GET', { host }) === 'ok';
    for (const host of ['admin.example.com', 'ADMIN.EXAMPLE.COM:1', 'a.ops.example', 'a.b.ops.example', '192.0.2.7:80', '[2001:db8:0::9]', '[2001:db8::10]']) assert.ok(allowed(host), host);
    for (const host of ['example.com', 'x.admin.example.com', 'ops.example', 'evilops.example', '192.0.2.8', '[2001:db8::11]']) assert.ok(!allowed(host), host);
  });

  test('no Host (HTTP/1.0): passes, unless an Origin comes with it', () => {
    assert.equal(codeOf(guard, LOOPBACK, 'GET', {}), 'ok');
    assert.equal(codeOf(guard, LOOPBACK, 'POST', { origin: 'http://127.0.0.1:9901' }), 'cross_origin_request');
  });
});

describe('origin', () => {
  const guard = new AdminRequestGuard([]);
  const TLS: GuardedListener = { configuredAddress: '127.0.0.1:9901', tls: true };

  test('the listener\'s own origin, by its scheme, default ports aside', () => {
    assert.equal(codeOf(guard, TLS, 'POST', { host: 'localhost:9901', origin: 'https://localhost:9901' }), 'ok');
    assert.equal(codeOf(guard, TLS, 'POST', { host: 'localhost:9901', origin: 'http://localhost:9901' }), 'cross_origin_request');
    assert.equal(codeOf(guard, TLS, 'POST', { host: 'localhost', origin: 'https://localhost:443' }), 'ok');
    assert.equal(codeOf(guard, TLS, 'POST', { host: 'localhost:443', origin: 'https://LOCALHOST' }), 'ok');
    assert.equal(codeOf(guard, LOOPBACK, 'POST', { host: 'localhost:80', origin: 'http://localhost' }), 'ok');
    assert.equal(codeOf(guard, LOOPBACK, 'POST', { host: 'localhost', origin: 'http://localhost:8080' }), 'cross_origin_request');
  });

  test('two listeners on one address (a reload that switches TLS on it) are told apart', () => {
    const plain: GuardedListener = { configuredAddress: '127.0.0.1:9901', tls: false };
    const secure: GuardedListener = { configuredAddress: '127.0.0.1:9901', tls: true };
    const fresh = new AdminRequestGuard([]);
    assert.equal(codeOf(fresh, plain, 'POST', { host: 'localhost:9901', origin: 'http://localhost:9901' }), 'ok');
    assert.equal(codeOf(fresh, secure, 'POST', { host: 'localhost:9901', origin: 'https://localhost:9901' }), 'ok');
    assert.equal(codeOf(fresh, secure, 'POST', { host: 'localhost:9901', origin: 'http://localhost:9901' }), 'cross_origin_request');
  });

  test('Sec-Fetch-Site: same-origin always, none for GET and HEAD only, anything else refused', () => {
    const site = (method: string, value: string) => codeOf(guard, LOOPBACK, method, { host: 'localhost', 'sec-fetch-site': value });
    assert.equal(site('POST', 'same-origin'), 'ok');
    assert.equal(site('GET', ' none '), 'ok');
    assert.equal(site('HEAD', 'none'), 'ok');
    assert.equal(site('POST', 'none'), 'cross_origin_request');
    for (const value of ['same-site', 'cross-site', '', 'same-origin, cross-site']) assert.equal(site('GET', value), 'cross_origin_request', value);
  });

  test('a repeated header (a list, as HTTP/2 may give it) is read whole, and so refused', () => {
    assert.equal(codeOf(guard, LOOPBACK, 'GET', { host: 'localhost', origin: ['http://localhost', 'https://evil.example'] }), 'cross_origin_request');
    assert.equal(codeOf(guard, LOOPBACK, 'GET', { host: 'localhost', 'sec-fetch-site': ['same-origin', 'cross-site'] }), 'cross_origin_request');
  });

  test('a quote is capped: an error about a huge value stays short', () => {
    const error = guard.refuse(request('GET', { host: 'localhost', origin: `https://${'x'.repeat(100_000)}.example` }), LOOPBACK);
    assert.ok(error && error.message.length < 400, `${error?.message.length} characters`);
    assert.match(error.message, /\(100016 characters\)/);
  });
});

describe('writes', () => {
  const guard = new AdminRequestGuard([]);
  const write = (method: string, headers: Record<string, HeaderValue>) => codeOf(guard, LOOPBACK, method, { host: 'localhost', ...headers });

  test('POST, PUT, DELETE and PATCH: a Content-Type must be application/json; a body needs one; a bodyless one needs none', () => {
    for (const method of ['POST', 'PUT', 'DELETE', 'PATCH']) {
      assert.equal(write(method, { 'content-type': 'text/plain' }), 'unsupported_media_type', method);
      assert.equal(write(method, { 'content-length': '2' }), 'unsupported_media_type', method);
      assert.equal(write(method, { 'transfer-encoding': 'chunked' }), 'unsupported_media_type', method);
      assert.equal(write(method, {}), 'ok', method);
      assert.equal(write(method, { 'content-length': '0' }), 'ok', method);
      assert.equal(write(method, { 'content-type': ' application/JSON ;charset=utf-8', 'content-length': '2' }), 'ok', method);
    }
    assert.equal(write('GET', { 'content-type': 'text/plain', 'content-length': '1' }), 'ok', 'a GET is no write');
    assert.equal(write('OPTIONS', { 'content-type': 'text/plain' }), 'ok', 'nor an OPTIONS (its route answers 405)');
  });
});

test('no value of any header makes the guard throw', () => {
  const guard = new AdminRequestGuard(['*.example.com', 'admin.internal', '[::1]']);
  const value = fc.oneof(fc.string({ unit: 'binary', maxLength: 40 }), fc.array(fc.string({ maxLength: 10 }), { maxLength: 3 }), fc.constant(undefined), fc.constantFrom('[', ']', ':', '[::]', '[]:', '*.', '%', '.'));
  const names = ['host', ':authority', 'origin', 'sec-fetch-site', 'content-type', 'content-length', 'transfer-encoding'];
  fc.assert(
    fc.property(
      fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', '', 'X'),
      fc.dictionary(fc.constantFrom(...names), value),
      fc.constantFrom('127.0.0.1:9901', '0.0.0.0:9901', '[::]:0', 'admin.internal:1', '[2001:db8::1]:2', ':0', 'bad'),
      fc.boolean(),
      (method, headers, configuredAddress, tls) => {
        const refused = guard.refuse(request(method, headers), { configuredAddress, tls });
        if (refused) assert.ok([421, 403, 415].includes(refused.status), refused.message);
      },
    ),
    { seed: 24, numRuns: 2000 },
  );
});

describe('admin.allowed_hosts in the config', () => {
  const config = (hosts: unknown) => `listeners:\n  - { name: p, address: "127.0.0.1:8080", role: proxy }\nadmin: { allowed_hosts: ${JSON.stringify(hosts)} }\n`;

  test('names, wildcards of subdomains and IP addresses are accepted; the default is none', () => {
    const hosts = ['admin.example.com', '*.example.com', 'my_host', '10.0.0.1', '[2001:db8::1]', '2001:db8::2', 'xn--bcher-kva.example'];
    assert.deepEqual(parseConfig(config(hosts), 'test.yaml', {}).admin.allowed_hosts, hosts);
    assert.deepEqual(parseConfig('listeners:\n  - { name: p, address: "127.0.0.1:8080", role: proxy }\n', 'test.yaml', {}).admin.allowed_hosts, []);
  });

  test('a port, a scheme, a bare or inner "*", spaces or non-ASCII are refused, each at its index', () => {
    const bad = ['admin.example.com:9901', 'http://admin.example.com', '*', '*.', 'a.*.example', '*.*.example', 'a b', 'bücher.example', '[::1]:80', '', '.example', 'example..com'];
    try {
      parseConfig(config(bad), 'test.yaml', {});
      assert.fail('accepted');
    } catch (error) {
      assert.ok(error instanceof ConfigError, String(error));
      for (let i = 0; i < bad.length; i++) {
        const problem = error.problems.find((p) => p.path === `admin.allowed_hosts[${i}]`);
        assert.ok(problem, `no problem for ${JSON.stringify(bad[i])}: ${JSON.stringify(error.problems)}`);
        assert.match(problem.message, /without a port/);
      }
    }
  });
});
