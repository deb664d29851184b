// E6 through the file (issue 14, "File"): a change of the config file, saved in place or by rename
// as editors and Kubernetes' ConfigMap volumes do, is reloaded within a second as SIGHUP would; a
// broken save is refused and the last good config keeps serving; a save that changes nothing is
// not a reload.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { renameSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { request } from 'undici';
import { stringify } from 'yaml';
import { startGateway, eventually, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';

let mock: MockUpstream;
before(async () => {
  mock = await startMockUpstream({ record: false });
});
after(async () => {
  await mock?.close();
});

function config(models: string[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    workers: 1,
    listeners: [
      { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
      { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
    ],
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }],
    models: models.map((name) => ({ name, provider: 'up' })),
    shutdown: { min_drain_secs: 0 },
    ...extra,
  };
}

/** The same listeners as the running gateway (their ports bound), with `models`. */
function sameListeners(gw: GatewayProcess, models: string[], extra: Record<string, unknown> = {}): string {
  const text = config(models, extra) as { listeners: { name: string; address: string }[] };
  for (const l of text.listeners) l.address = new URL(gw.urls[l.name]!).host;
  return stringify(text);
}

async function status(gw: GatewayProcess, model: string): Promise<number> {
  const res = await request(`${gw.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }] }),
  });
  await res.body.text();
  return res.statusCode;
}

const reloads = (gw: GatewayProcess) => gw.logs.filter((l) => l.event === 'config_reloaded' || l.event === 'config_reload_failed');

test('a save in place is reloaded within a second (trigger "file change")', async () => {
  const gw = await startGateway({ config: config(['a']) });
  try {
    assert.equal(await status(gw, 'b'), 404);
    const savedAt = Date.now();
    writeFileSync(gw.configFile, sameListeners(gw, ['a', 'b']));
    const line = await gw.waitForLog((l) => l.event === 'config_reloaded', 5000);
    const tookMs = Date.now() - savedAt;
    assert.equal(line.trigger, 'file change');
    assert.ok(tookMs < 1000, `reloaded ${tookMs} ms after the save`);
    assert.equal(await status(gw, 'b'), 200);
  } finally {
    await gw.stop();
  }
});

test('a save by rename (a new file moved over the old one) is reloaded; a touch that changes nothing is not', async () => {
  const gw = await startGateway({ config: config(['a']) });
  try {
    const now = new Date();
    utimesSync(gw.configFile, now, now);
    await new Promise((r) => setTimeout(r, 600));
    assert.equal(reloads(gw).length, 0, 'same bytes: no reload');
    const temp = join(dirname(gw.configFile), '.sluice.yaml.tmp');
    writeFileSync(temp, sameListeners(gw, ['a', 'c']));
    renameSync(temp, gw.configFile);
    const line = await gw.waitForLog((l) => l.event === 'config_reloaded', 5000);
    assert.equal(line.trigger, 'file change');
    assert.equal(await status(gw, 'c'), 200);
    // And again: the watch follows the directory, not the inode the first rename replaced.
    writeFileSync(temp, sameListeners(gw, ['a', 'c', 'd']));
    renameSync(temp, gw.configFile);
    await eventually(async () => (await status(gw, 'd')) === 200, 5000, 'model d after a second rename');
  } finally {
    await gw.stop();
  }
});

test('a broken save is refused (logged with the file\'s problems, counted); the last good config serves; the fix applies', async () => {
  const gw = await startGateway({ config: config(['a']) });
  try {
    writeFileSync(gw.configFile, `${sameListeners(gw, ['a', 'b'])}\nbogus: [unclosed\n`);
    const failed = await gw.waitForLog((l) => l.event === 'config_reload_failed', 5000);
    assert.equal(failed.trigger, 'file change');
    assert.ok(Array.isArray(failed.problems) && failed.problems.length > 0);
    assert.equal(await status(gw, 'a'), 200);
    assert.equal(await status(gw, 'b'), 404);
    const ready = await request(`${gw.adminUrl}/readyz`);
    await ready.body.text();
    assert.equal(ready.statusCode, 200, 'a refused config changes nothing, readiness included');
    writeFileSync(gw.configFile, sameListeners(gw, ['a', 'b']));
    await gw.waitForLog((l) => l.event === 'config_reloaded' && l.trigger === 'file change', 5000);
    assert.equal(await status(gw, 'b'), 200);
  } finally {
    await gw.stop();
  }
});

test('reload.watch: false leaves the file alone (SIGHUP still reloads)', async () => {
  const gw = await startGateway({ config: config(['a'], { reload: { watch: false } }) });
  try {
    writeFileSync(gw.configFile, sameListeners(gw, ['a', 'b'], { reload: { watch: false } }));
    await new Promise((r) => setTimeout(r, 800));
    assert.equal(reloads(gw).length, 0);
    gw.signal('SIGHUP');
    const line = await gw.waitForLog((l) => l.event === 'config_reloaded', 5000);
    assert.equal(line.trigger, 'SIGHUP');
    assert.equal(await status(gw, 'b'), 200);
  } finally {
    await gw.stop();
  }
});
