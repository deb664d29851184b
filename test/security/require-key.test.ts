// Issue 24, defect 4: deleting the last client key must not open the gateway. In etcd mode
// `auth.require_key` is on by default (nothing in these configs sets it): with no key, every proxy
// request is a 401 `no_client_keys` in the caller's shape (realtime upgrades included) and /readyz
// is 503 with the `client_keys` check failing, on one process and on a worker group (where the
// supervisor answers /readyz on the admin listener). A proxy listener on a non-loopback address
// that needs no key is warned about at start, and again by a reload that opens it.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { hash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { stringify } from 'yaml';
import { eventually, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { httpRequest, postJson, type RawResponse } from '../support/http.ts';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';
import { assertAnthropicError, assertOpenAiError } from '../support/reliability.ts';

const skip = etcdCheck().skip;
const TOKEN = 'require-key-admin-token-0123456789';
const KEY = 'sk-require-key-only-one-0001';
const sha256 = (text: string) => hash('sha256', text, 'base64');
let prefixes = 0;

let etcd: EtcdServer;
before(async () => {
  if (!skip) etcd = await startEtcd();
});
after(async () => {
  await etcd?.close();
});

/** A prefix of its own, with an echo provider, a model and (unless `key` is false) one client key. */
async function seeded(key = true): Promise<string> {
  const prefix = `/sluice-require-${process.pid}-${++prefixes}/`;
  await etcd.put(`${prefix}providers/echo`, JSON.stringify({ type: 'echo' }));
  await etcd.put(`${prefix}models/base`, JSON.stringify({ provider: 'echo' }));
  if (key) await etcd.put(`${prefix}keys/only`, JSON.stringify({ key_sha256: sha256(KEY) }));
  return prefix;
}

/** The bootstrap file of etcd mode, every setting at its default (no `auth` section). */
const bootstrap = (prefix: string, extra: Record<string, unknown> = {}) => ({
  admin: { tokens: [{ name: 'ops', token: TOKEN }] },
  etcd: { endpoints: [etcd.endpoint], prefix },
  ...extra,
});

const admin = (gw: GatewayProcess, method: string, path: string, body?: unknown): Promise<RawResponse> =>
  httpRequest(`${gw.adminUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
const chat = (gw: GatewayProcess, headers: Record<string, string> = {}) => postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: 'base', messages: [{ role: 'user', content: 'hi' }] }, headers);
const messages = (gw: GatewayProcess, headers: Record<string, string> = {}) =>
  postJson(`${gw.proxyUrl}/v1/messages`, { model: 'base', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }, { 'anthropic-version': '2023-06-01', ...headers });
const realtime = (gw: GatewayProcess) =>
  httpRequest(`${gw.proxyUrl}/v1/realtime?model=base`, {
    headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' },
  });

/** Every proxy route refuses with 401 `no_client_keys`, in the caller's shape. */
async function assertClosed(gw: GatewayProcess, what: string): Promise<void> {
  const openai = await chat(gw);
  assert.equal(openai.status, 401, `${what}: chat with no key: ${openai.body.slice(0, 300)}`);
  const error = assertOpenAiError(openai.body, `${what}: chat`);
  assert.equal(error.code, 'no_client_keys');
  assert.equal(error.type, 'authentication_error');
  assert.match(error.message, /auth\.require_key/);
  // A key that does not exist is refused the same way (there is none it could be).
  assert.equal(JSON.parse((await chat(gw, { authorization: 'Bearer sk-made-up-key-000000' })).body).error.code, 'no_client_keys');
  const anthropic = await messages(gw);
  assert.equal(anthropic.status, 401, `${what}: messages`);
  assert.equal(assertAnthropicError(anthropic.body, `${what}: messages`).type, 'authentication_error');
  const models = await httpRequest(`${gw.proxyUrl}/v1/models`);
  assert.equal(models.status, 401, `${what}: /v1/models`);
  const upgrade = await realtime(gw);
  assert.equal(upgrade.status, 401, `${what}: realtime upgrade`);
  assert.equal(JSON.parse(upgrade.body).error.code, 'no_client_keys');
}

/** /readyz is 503 on `base` with the `client_keys` check failing and saying why. */
async function assertNotReady(base: string, what: string): Promise<void> {
  const plain = await httpRequest(`${base}/readyz`);
  assert.equal(plain.status, 503, `${what}: /readyz ${plain.body}`);
  assert.equal(JSON.parse(plain.body).reason, 'client_keys');
  const verbose = JSON.parse((await httpRequest(`${base}/readyz?verbose`)).body) as { checks: { name: string; status: string; detail?: string }[] };
  const check = verbose.checks.find((c) => c.name === 'client_keys');
  assert.equal(check?.status, 'fail', `${what}: ${JSON.stringify(verbose)}`);
  assert.match(check.detail ?? '', /auth\.require_key is on and no client key exists/);
}

describe('etcd mode, at the default settings', { skip }, () => {
  test('deleting the last key through the admin API closes the gateway (401 no_client_keys, /readyz 503 client_keys) instead of opening it; a new key opens it again', async () => {
    const prefix = await seeded();
    const gw = await startGateway({ config: bootstrap(prefix) });
    try {
      assert.equal((await chat(gw, { authorization: `Bearer ${KEY}` })).status, 200);
      assert.equal(JSON.parse((await chat(gw)).body).error.code, 'missing_api_key');
      assert.equal((await httpRequest(`${gw.adminUrl}/readyz`)).status, 200);

      const deleted = await admin(gw, 'DELETE', '/config/keys/only');
      assert.ok(deleted.status < 300, `DELETE: ${deleted.status} ${deleted.body}`);
      await gw.waitForLog((l) => l.event === 'config_reloaded' && l.keys === 0);
      await assertClosed(gw, 'after the last key was deleted');
      assert.equal((await chat(gw, { authorization: `Bearer ${KEY}` })).status, 401, 'the deleted key');
      await assertNotReady(gw.adminUrl, 'admin listener');
      await assertNotReady(gw.proxyUrl, 'proxy listener');
      const line = await gw.waitForLog((l) => l.event === 'access' && l.path === '/v1/chat/completions' && l.error === 'no_client_keys');
      assert.equal(line.status, 401);

      const created = JSON.parse((await admin(gw, 'POST', '/config/keys', { name: 'second' })).body) as { key: string };
      await eventually(async () => (await chat(gw, { authorization: `Bearer ${created.key}` })).status === 200, 5000, 'the new key served');
      assert.equal(JSON.parse((await chat(gw)).body).error.code, 'missing_api_key');
      assert.equal((await httpRequest(`${gw.adminUrl}/readyz`)).status, 200);
    } finally {
      await gw.stop();
    }
  });

  test('a new etcd setup with no key yet is closed from its start, and a worker group\'s supervisor fails readiness for it too', async () => {
    const prefix = await seeded(false);
    const gw = await startGateway({ config: bootstrap(prefix, { workers: 2 }) });
    try {
      const ready = await gw.waitForLog((l) => l.event === 'ready');
      assert.match(String(ready.msg), /not ready: auth\.require_key is on and no client key exists/);
      await assertClosed(gw, 'a fresh setup');
      await assertNotReady(gw.adminUrl, 'the supervisor');
      await assertNotReady(gw.proxyUrl, 'a worker');
    } finally {
      await gw.stop();
    }
  });
});

describe('a proxy listener that needs no key, on a non-loopback address', () => {
  test('is warned about at start (one line with the listener and its address); a loopback one and a keyed one are not', async () => {
    const open = await startGateway({ config: { listeners: [{ name: 'public', address: '0.0.0.0:0', role: 'proxy' }, { name: 'local', address: '127.0.0.1:0', role: 'proxy' }, { name: 'admin', address: '127.0.0.1:0', role: 'admin' }] } });
    const keyed = await startGateway({ config: { listeners: [{ name: 'public', address: '0.0.0.0:0', role: 'proxy' }, { name: 'admin', address: '127.0.0.1:0', role: 'admin' }], keys: [KEY] } });
    try {
      const warnings = open.logs.filter((l) => l.event === 'proxy_open');
      assert.equal(warnings.length, 1, JSON.stringify(warnings));
      assert.equal(warnings[0]!.level, 'warn');
      assert.equal(warnings[0]!.listener, 'public');
      assert.equal(warnings[0]!.address, '0.0.0.0:0');
      assert.match(String(warnings[0]!.msg), /needs no client key/);
      assert.equal(keyed.logs.filter((l) => l.event === 'proxy_open').length, 0);
    } finally {
      await Promise.all([open.stop(), keyed.stop()]);
    }
  });

  test('a reload that removes the last key of the file warns again; one that keeps it open does not', async () => {
    const listeners = [{ name: 'public', address: '0.0.0.0:0', role: 'proxy' }, { name: 'admin', address: '127.0.0.1:0', role: 'admin' }];
    const gw = await startGateway({ config: { listeners, keys: [KEY] } });
    try {
      assert.equal(gw.logs.filter((l) => l.event === 'proxy_open').length, 0);
      writeFileSync(gw.configFile, stringify({ workers: 1, listeners }));
      gw.signal('SIGHUP');
      await gw.waitForLog((l) => l.event === 'config_reloaded' && l.keys === 0);
      await gw.waitForLog((l) => l.event === 'proxy_open' && l.listener === 'public');
      writeFileSync(gw.configFile, stringify({ workers: 1, listeners, log: { level: 'info' } }));
      gw.signal('SIGHUP');
      await gw.waitForLog((l) => l.event === 'config_reloaded' && gw.logs.filter((x) => x.event === 'config_reloaded').length === 2);
      assert.equal(gw.logs.filter((l) => l.event === 'proxy_open').length, 1, 'still open: said once');
    } finally {
      await gw.stop();
    }
  });
});

describe('auth.require_key in file mode', () => {
  test('true with no key: 401 no_client_keys and /readyz 503 client_keys; the embedded default (false) stays open on loopback', async () => {
    const closed = await startGateway({ config: { providers: [{ name: 'echo', type: 'echo' }], models: [{ name: 'base', provider: 'echo' }], auth: { require_key: true } } });
    const embedded = await startGateway({ useDefault: true, env: { SLUICE_PROXY_ADDRESS: '127.0.0.1:0', SLUICE_ADMIN_ADDRESS: '127.0.0.1:0' } });
    try {
      await assertClosed(closed, 'require_key: true');
      await assertNotReady(closed.adminUrl, 'require_key: true');
      assert.equal((await httpRequest(`${embedded.proxyUrl}/v1/models`)).status, 200, 'the embedded default needs no key');
      assert.equal((await httpRequest(`${embedded.adminUrl}/readyz`)).status, 200);
      assert.equal(embedded.logs.filter((l) => l.event === 'proxy_open').length, 0, 'loopback: no warning');
    } finally {
      await Promise.all([closed.stop(), embedded.stop()]);
    }
  });
});
