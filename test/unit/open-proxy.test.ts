// Which proxy listeners anyone can use (no client key, none required, not on loopback), and that a
// reload warns only for one that it opens.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openProxyListeners, OpenProxyWarnings, type OpenListener } from '../../src/auth/open-proxy.ts';
import { parseConfig } from '../../src/config/load.ts';

const config = (listeners: string, extra = '') => parseConfig(`listeners:\n${listeners}${extra}`, 'test', {});
const PUBLIC = '  - { name: public, address: "0.0.0.0:8080", role: proxy }\n';
const LOCAL = '  - { name: local, address: "127.0.0.1:8081", role: proxy }\n  - { name: v6, address: "[::1]:8082", role: proxy }\n  - { name: named, address: "localhost:8083", role: proxy }\n';
const ADMIN = '  - { name: admin, address: "127.0.0.1:9901", role: admin }\n';

test('a proxy listener off loopback with no key and none required is open; loopback ones and admin ones are not', () => {
  assert.deepEqual(openProxyListeners(config(PUBLIC + LOCAL + ADMIN)), [{ name: 'public', address: '0.0.0.0:8080' }]);
  assert.deepEqual(openProxyListeners(config('  - { name: all, address: ":8080", role: proxy }\n  - { name: v6all, address: "[::]:8081", role: proxy }\n')).map((l) => l.name), ['all', 'v6all']);
});

test('a key, or auth.require_key, closes it', () => {
  assert.deepEqual(openProxyListeners(config(PUBLIC, 'keys: ["sk-some-client-key"]\n')), []);
  assert.deepEqual(openProxyListeners(config(PUBLIC, 'auth: { require_key: true }\n')), []);
  assert.deepEqual(openProxyListeners(config(PUBLIC, 'etcd: { endpoints: ["http://127.0.0.1:2379"] }\n')), [], 'etcd mode requires a key by default');
});

test('warned once when it opens; not again while it stays open; again after it was closed and opened', () => {
  const warned: OpenListener[] = [];
  const warnings = new OpenProxyWarnings((l) => warned.push(l));
  warnings.check(config(PUBLIC));
  warnings.check(config(PUBLIC, 'log: { level: debug }\n'));
  assert.equal(warned.length, 1);
  warnings.check(config(PUBLIC, 'keys: ["sk-some-client-key"]\n'));
  warnings.check(config(PUBLIC));
  assert.equal(warned.length, 2);
  warnings.check(config('  - { name: public, address: "0.0.0.0:9090", role: proxy }\n'));
  assert.deepEqual(warned.at(-1), { name: 'public', address: '0.0.0.0:9090' }, 'moved: warned for the new address');
});
