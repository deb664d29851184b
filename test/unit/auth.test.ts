// Client API keys: open when none are configured, Bearer or x-api-key, digests only.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { inspect } from 'node:util';
import { ClientKeys, presentedKey, type AuthResult } from '../../src/auth/keys.ts';

const KEY = 'sk-sluice-0123456789abcdef';
const OTHER = 'sk-sluice-fedcba9876543210';

/** A result with its key's name in place of the key, for comparison. */
const named = (result: AuthResult) => (result.ok ? { ok: true, keyName: result.key.name } : result);

test('no keys configured → every request is let in (open)', () => {
  const keys = new ClientKeys([]);
  assert.equal(keys.enabled, false);
  assert.deepEqual(named(keys.check({})), { ok: true, keyName: '' });
  assert.deepEqual(named(keys.check({ authorization: 'Bearer whatever' })), { ok: true, keyName: '' });
});

test('keys configured → enabled', () => {
  assert.equal(new ClientKeys([KEY]).enabled, true);
});

test('Authorization: Bearer <key> is accepted', () => {
  assert.deepEqual(named(new ClientKeys([KEY]).check({ authorization: `Bearer ${KEY}` })), { ok: true, keyName: 'key-0' });
});

test('x-api-key: <key> is accepted', () => {
  assert.deepEqual(named(new ClientKeys([KEY]).check({ 'x-api-key': KEY })), { ok: true, keyName: 'key-0' });
});

test('the "Bearer" scheme is case-insensitive, surrounding spaces tolerated', () => {
  const keys = new ClientKeys([KEY]);
  for (const scheme of ['bearer', 'BEARER', 'BeArEr']) {
    assert.equal(keys.check({ authorization: `${scheme} ${KEY}` }).ok, true, scheme);
  }
  assert.equal(keys.check({ authorization: `Bearer   ${KEY}  ` }).ok, true);
});

test('a wrong key is invalid, by either header', () => {
  const keys = new ClientKeys([KEY]);
  assert.deepEqual(keys.check({ authorization: `Bearer ${OTHER}` }), { ok: false, reason: 'invalid' });
  assert.deepEqual(keys.check({ 'x-api-key': OTHER }), { ok: false, reason: 'invalid' });
  assert.deepEqual(keys.check({ 'x-api-key': KEY.slice(0, -1) }), { ok: false, reason: 'invalid' });
  assert.deepEqual(keys.check({ 'x-api-key': `${KEY}x` }), { ok: false, reason: 'invalid' });
  assert.deepEqual(keys.check({ 'x-api-key': KEY.toUpperCase() }), { ok: false, reason: 'invalid' });
});

test('no credentials → missing', () => {
  const keys = new ClientKeys([KEY]);
  assert.deepEqual(keys.check({}), { ok: false, reason: 'missing' });
  assert.deepEqual(keys.check({ 'content-type': 'application/json' }), { ok: false, reason: 'missing' });
});

test('a malformed Authorization header is invalid, not missing', () => {
  const keys = new ClientKeys([KEY]);
  for (const authorization of [KEY, `Basic ${KEY}`, 'Bearer', 'Bearer ', `Bearer ${KEY} extra`, `Bearer${KEY}`, '']) {
    assert.deepEqual(keys.check({ authorization }), { ok: false, reason: 'invalid' }, JSON.stringify(authorization));
  }
});

test('Authorization takes precedence over x-api-key', () => {
  const keys = new ClientKeys([KEY]);
  assert.equal(keys.check({ authorization: `Bearer ${KEY}`, 'x-api-key': OTHER }).ok, true);
  assert.deepEqual(keys.check({ authorization: `Bearer ${OTHER}`, 'x-api-key': KEY }), { ok: false, reason: 'invalid' });
});

test('named keys return their name; unnamed ones key-<index>', () => {
  const keys = new ClientKeys([KEY, { name: 'ci-runner', key: OTHER }, 'third-key-value']);
  assert.deepEqual(named(keys.check({ authorization: `Bearer ${OTHER}` })), { ok: true, keyName: 'ci-runner' });
  assert.deepEqual(named(keys.check({ 'x-api-key': KEY })), { ok: true, keyName: 'key-0' });
  assert.deepEqual(named(keys.check({ 'x-api-key': 'third-key-value' })), { ok: true, keyName: 'key-2' });
});

test('presentedKey', () => {
  assert.equal(presentedKey({ authorization: `Bearer ${KEY}` }), KEY);
  assert.equal(presentedKey({ 'x-api-key': KEY }), KEY);
  assert.equal(presentedKey({ authorization: 'Token abc' }), '');
  assert.equal(presentedKey({}), undefined);
});

test('the raw key is not retained anywhere on the object', () => {
  const keys = new ClientKeys([KEY, { name: 'named', key: OTHER }]);
  keys.check({ authorization: `Bearer ${KEY}` });
  const views = [
    JSON.stringify(keys),
    inspect(keys, { showHidden: true, depth: Infinity, getters: true }),
    JSON.stringify(Object.getOwnPropertyNames(keys).map((name) => (keys as unknown as Record<string, unknown>)[name])),
  ];
  for (const view of views) {
    for (const secret of [KEY, OTHER]) {
      assert.ok(!view.includes(secret), `key found in ${view}`);
      assert.ok(!view.includes(Buffer.from(secret).toString('base64')), `base64 key found in ${view}`);
      assert.ok(!view.includes(Buffer.from(secret).toString('hex')), `hex key found in ${view}`);
    }
  }
});

test('a key\'s models, expiry and enabled flag', () => {
  const keys = new ClientKeys([
    { name: 'limited', key: 'sk-limited-0001', models: ['gpt-4o', 'claude-*'] },
    { name: 'expired', key: 'sk-expired-0001', expires_at: '2026-01-01T00:00:00Z' },
    { name: 'later', key: 'sk-later-000001', expires_at: '2026-06-01' },
    { name: 'off', key: 'sk-disabled-001', enabled: false },
  ]);
  const now = Date.parse('2026-03-01T00:00:00Z');
  const limited = keys.check({ 'x-api-key': 'sk-limited-0001' }, now);
  assert.ok(limited.ok);
  assert.equal(limited.key.allows('gpt-4o'), true);
  assert.equal(limited.key.allows('claude-sonnet-4-5'), true);
  assert.equal(limited.key.allows('gpt-4o-mini'), false, 'an exact name is not a prefix');
  assert.equal(limited.key.allows('claude'), false);
  assert.deepEqual(keys.check({ 'x-api-key': 'sk-expired-0001' }, now), { ok: false, reason: 'expired', keyName: 'expired' });
  assert.equal(keys.check({ 'x-api-key': 'sk-later-000001' }, now).ok, true);
  assert.deepEqual(keys.check({ 'x-api-key': 'sk-later-000001' }, Date.parse('2026-06-01T00:00:00Z')), { ok: false, reason: 'expired', keyName: 'later' });
  assert.deepEqual(keys.check({ 'x-api-key': 'sk-disabled-001' }, now), { ok: false, reason: 'disabled', keyName: 'off' });
  const all = keys.check({ 'x-api-key': 'sk-later-000001' }, now);
  assert.ok(all.ok && all.key.allows('anything') && all.key.unrestricted);
});

test('a key required and none configured → every request refused as no_keys, whatever it presents', () => {
  const keys = new ClientKeys([], { required: true });
  assert.equal(keys.closed, true);
  for (const headers of [{}, { authorization: `Bearer ${KEY}` }, { 'x-api-key': KEY }, { authorization: 'Basic x' }]) {
    assert.deepEqual(keys.check(headers), { ok: false, reason: 'no_keys' }, JSON.stringify(headers));
  }
});

test('a key required and one configured → as without the requirement', () => {
  const keys = new ClientKeys([KEY], { required: true });
  assert.equal(keys.closed, false);
  assert.deepEqual(named(keys.check({ authorization: `Bearer ${KEY}` })), { ok: true, keyName: 'key-0' });
  assert.deepEqual(keys.check({}), { ok: false, reason: 'missing' });
  assert.equal(new ClientKeys([]).closed, false, 'not required: open, not closed');
});
