// Issue 24, a leftover: `sluice validate` said nothing of a proxy listener open to the network with
// no client key, nor of `auth.require_key` with no key (a gateway that refuses everything). It now
// prints, on stderr, the warning the gateway logs at start for the same config (`proxy_open`, and
// the `ready` line's reason), and still exits 0: such a config is valid. Nothing is said of a
// listener on loopback, of one that needs a key, or in etcd mode at its default (a key required).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runSluice, startGateway, writeConfig } from '../support/gateway-process.ts';

const ECHO = { providers: [{ name: 'echo', type: 'echo' }], models: [{ name: 'echo', provider: 'echo' }] };
const ADMIN = { name: 'admin', address: '127.0.0.1:0', role: 'admin' };
const OPEN = [{ name: 'proxy', address: '0.0.0.0:0', role: 'proxy' }, ADMIN];
const LOOPBACK = [{ name: 'proxy', address: '127.0.0.1:0', role: 'proxy' }, ADMIN];

async function validate(config: Record<string, unknown>): Promise<{ stdout: string; warnings: string[] }> {
  const result = await runSluice(['validate', '--config', writeConfig(config)]);
  assert.equal(result.code, 0, `validate: ${result.stdout}${result.stderr}`);
  assert.match(result.stdout, /^config OK /);
  return { stdout: result.stdout, warnings: result.stderr.split('\n').filter((line) => line !== '') };
}

test('a proxy listener off loopback that needs no key: the warning the gateway logs at start (proxy_open), exit 0', async () => {
  const config = { listeners: OPEN, ...ECHO };
  const { warnings } = await validate(config);
  const gw = await startGateway({ config });
  try {
    const logged = await gw.waitForLog((l) => l.event === 'proxy_open');
    assert.deepEqual(warnings, [`warning: ${String(logged.msg)} [proxy_open]`]);
  } finally {
    await gw.stop();
  }
});

test('auth.require_key with no key: the reason the gateway gives for not being ready, exit 0', async () => {
  const config = { listeners: LOOPBACK, auth: { require_key: true }, ...ECHO };
  const { warnings } = await validate(config);
  const gw = await startGateway({ config });
  try {
    const ready = await gw.waitForLog((l) => l.event === 'ready');
    const reason = String(ready.msg).replace(/^sluice is listening, not ready: /, '');
    assert.notEqual(reason, ready.msg, `the gateway is ready: ${String(ready.msg)}`);
    assert.equal(warnings.length, 1, warnings.join('\n'));
    assert.ok(warnings[0]!.startsWith(`warning: ${reason}`), `${warnings[0]} / ${reason}`);
  } finally {
    await gw.stop();
  }
});

test('nothing to say: loopback, a key, a key required; etcd mode at its default', async () => {
  const key = { keys: [{ name: 'k', key: 'sk-validate-0123456789' }] };
  for (const config of [
    { listeners: LOOPBACK, ...ECHO },
    { listeners: OPEN, ...ECHO, ...key },
    { listeners: OPEN, auth: { require_key: true }, ...ECHO, ...key },
    { listeners: OPEN, etcd: { endpoints: ['http://127.0.0.1:2379'] } },
  ]) {
    const { warnings } = await validate(config);
    assert.deepEqual(warnings, [], JSON.stringify(config));
  }
});

test('etcd mode with auth.require_key off and a proxy off loopback: warned, since it is open whenever etcd holds no key', async () => {
  const { warnings } = await validate({ listeners: OPEN, auth: { require_key: false }, etcd: { endpoints: ['http://127.0.0.1:2379'] } });
  assert.equal(warnings.length, 1, warnings.join('\n'));
  assert.match(warnings[0]!, /^warning: proxy listener "proxy" on 0\.0\.0\.0:0 needs no client key: .* \[proxy_open\] \(while etcd holds no client key\)$/);
});
