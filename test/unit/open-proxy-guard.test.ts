// The open proxy's guard (src/gateway/open-proxy-guard.ts) on its own: the Host rule only over a
// loopback connection (IPv4, IPv6, IPv4-mapped), names against auth.allowed_hosts, Origin hosts,
// Sec-Fetch-Site without an Origin, and that no header value, of any type, makes it throw. Plus
// the config's auth.allowed_hosts syntax and where the guard exists at all.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import fc from 'fast-check';
import { OpenProxyGuard } from '../../src/gateway/open-proxy-guard.ts';
import { createRouting } from '../../src/gateway/gateway.ts';
import { ConfigError, parseConfig } from '../../src/config/load.ts';

type HeaderValue = string | string[] | undefined;

/** A request as the guard reads it: its headers, and its connection's local address (null: none known). */
function request(headers: Record<string, HeaderValue>, localAddress: string | null): IncomingMessage {
  return { method: 'POST', headers, socket: { localAddress: localAddress ?? undefined } } as unknown as IncomingMessage;
}

const guard = new OpenProxyGuard([]);
const codeOf = (headers: Record<string, HeaderValue>, localAddress: string | null = '127.0.0.1', g = guard) => g.refuse(request(headers, localAddress))?.code ?? 'ok';

describe('Host, over a loopback connection', () => {
  test('DNS names that are not loopback\'s are refused; loopback names, IP addresses, one-label names and malformed values pass', () => {
    for (const host of ['rebind.evil.example', 'evil.example:8080', 'EVIL.EXAMPLE.', 'localhost.evil.example', 'xn--e1afmkfd.example']) assert.equal(codeOf({ host }), 'host_not_allowed', host);
    for (const host of ['localhost', 'a.localhost', 'localhost.', '127.0.0.1:8080', '10.1.2.3', '[::1]:8080', '[2001:db8::1]', 'x', 'sluice:8080', 'x.', '', 'a:b']) assert.equal(codeOf({ host }), 'ok', JSON.stringify(host));
  });

  test('checked on every loopback local address (IPv6 and IPv4-mapped too); not on a connection from another machine', () => {
    for (const local of ['127.0.0.1', '127.8.9.1', '::1', '::ffff:127.0.0.1']) assert.equal(codeOf({ host: 'evil.example' }, local), 'host_not_allowed', local);
    for (const local of ['10.0.0.5', '::ffff:192.168.1.2', 'fd00::1', null]) assert.equal(codeOf({ host: 'evil.example' }, local), 'ok', String(local));
  });

  test('HTTP/2: :authority', () => {
    assert.equal(codeOf({ ':authority': 'evil.example', host: 'localhost' }), 'ok', 'an HTTP/1 request has no :authority: its Host decides');
  });

  test('auth.allowed_hosts: exact names and "*." wildcards', () => {
    const allowed = new OpenProxyGuard(['ai.example.com', '*.corp.example']);
    for (const host of ['ai.example.com', 'AI.example.com.', 'ui.corp.example', 'a.b.corp.example:443']) assert.equal(codeOf({ host }, '127.0.0.1', allowed), 'ok', host);
    for (const host of ['corp.example', 'example.com', 'ai.example.com.evil']) assert.equal(codeOf({ host }, '127.0.0.1', allowed), 'host_not_allowed', host);
  });
});

describe('Origin and Sec-Fetch-Site', () => {
  test('an Origin of this machine (or allowed) passes; any other, "null" and malformed ones are refused', () => {
    for (const origin of ['http://localhost:3000', 'https://app.localhost', 'http://127.0.0.1', 'http://[::1]:5173', 'HTTP://LOCALHOST']) assert.equal(codeOf({ host: 'localhost', origin }), 'ok', origin);
    for (const origin of ['https://evil.example', 'null', '', 'localhost', 'http://localhost/x', 'ftp://localhost', 'http://127.0.0.1.evil.example', 'http://[::2]']) {
      assert.equal(codeOf({ host: 'localhost', origin }), 'cross_origin_request', JSON.stringify(origin));
    }
    const allowed = new OpenProxyGuard(['*.corp.example']);
    assert.equal(codeOf({ host: 'localhost', origin: 'https://ui.corp.example' }, '127.0.0.1', allowed), 'ok');
  });

  test('the Origin decides when there is one; without, Sec-Fetch-Site cross-site and same-origin are refused', () => {
    assert.equal(codeOf({ origin: 'http://localhost:3000', 'sec-fetch-site': 'cross-site' }), 'ok');
    for (const [site, code] of [['cross-site', 'cross_origin_request'], ['SAME-ORIGIN', 'cross_origin_request'], ['same-site', 'ok'], ['none', 'ok'], ['other', 'ok']] as const) {
      assert.equal(codeOf({ 'sec-fetch-site': site }), code, site);
    }
  });

  test('a repeated header (a list, as HTTP/2 may give it) is read whole', () => {
    assert.equal(codeOf({ origin: ['http://localhost', 'https://evil.example'] }), 'cross_origin_request');
  });
});

test('no value of any header makes the guard throw', () => {
  const value = fc.oneof(fc.constant(undefined), fc.string({ maxLength: 80 }), fc.array(fc.string({ maxLength: 20 }), { maxLength: 3 }), fc.string({ unit: 'binary', maxLength: 40 }));
  fc.assert(
    fc.property(fc.record({ host: value, ':authority': value, origin: value, 'sec-fetch-site': value }), fc.constantFrom('127.0.0.1', '::1', '10.0.0.1', null), (headers, local) => {
      const refusal = guard.refuse(request(headers as Record<string, HeaderValue>, local));
      if (refusal) assert.ok(refusal.message.length < 700, refusal.message.slice(0, 100));
    }),
    { seed: 20261203, numRuns: 500 },
  );
});

describe('where the guard exists', () => {
  const events = { failed() {}, recovered() {}, credentialsFailed() {}, credentialsRecovered() {} };
  const BASE = 'listeners:\n  - { name: p, address: "127.0.0.1:8080", role: proxy }\nproviders:\n  - { name: echo, type: echo }\nmodels:\n  - { name: echo, provider: echo }\n';
  const parse = (extra = '') => parseConfig(BASE + extra, 'test.yaml', {});

  test('only while the proxy needs no key: none with keys, none with auth.require_key', () => {
    assert.ok(createRouting(parse(), events).openGuard, 'no keys: guarded');
    assert.equal(createRouting(parse('keys: ["sk-some-client-key"]\n'), events).openGuard, undefined);
    assert.equal(createRouting(parse('auth: { require_key: true }\n'), events).openGuard, undefined);
  });

  test('auth.allowed_hosts takes what admin.allowed_hosts takes, and refuses a port or a scheme', () => {
    const hosts = ['ai.example.com', '*.corp.example', '10.0.0.5'];
    assert.deepEqual(parse(`auth: { allowed_hosts: ${JSON.stringify(hosts)} }\n`).auth.allowed_hosts, hosts);
    assert.deepEqual(parse().auth.allowed_hosts, []);
    for (const entry of ['ai.example.com:443', 'https://ai.example.com', '*']) {
      assert.throws(
        () => parse(`auth: { allowed_hosts: [${JSON.stringify(entry)}] }\n`),
        (error: unknown) => error instanceof ConfigError && error.problems.some((p) => p.path === 'auth.allowed_hosts[0]' && /without a port/.test(p.message)),
        entry,
      );
    }
  });
});
