// Issue 24, defect 6: with etcd authentication on, an etcd restart invalidates the gateway's auth
// token (etcd's default "simple" tokens live in the member's memory). The gateway must sign in again
// and resume its watch from the revision it applied, so that a change written after the restart
// (a key rotated, a model added through its own admin API) is served within 2 s; and while it does
// not follow etcd it must say so: a warning every 30 s, `config_source` in /server_info, the status
// stream, the page and `sluice status`. Against the built program and a real etcd on loopback ports, at the default
// etcd settings (request and dial timeouts, back-off).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { hash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import { spawn, type ChildProcess } from 'node:child_process';
import { MAIN, ROOT, eventually, metricValue, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { httpRequest, postJson, type RawResponse } from '../support/http.ts';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';
import { watchStatus } from '../support/status-stream.ts';
import { requireTool } from '../support/system-tool.ts';

const skip = etcdCheck().skip;
const browser = requireTool('chromium', 'chromium');
const PASSWORD = 'etcd-root-password-5f3a9c';
const TOKEN = 'ops-token-0123456789abcdef0123';
const BASE_KEY = 'sk-base-key-0123456789abcdef';
const ROUNDS = 10;
/** How soon a change written after etcd is back must be served. */
const APPLIED_WITHIN_MS = 2000;
const sha256 = (text: string) => hash('sha256', text, 'base64');
let prefixes = 0;

let etcd: EtcdServer;
before(async () => {
  if (!skip) etcd = await startEtcd({ auth: { password: PASSWORD } });
});
after(async () => {
  await etcd?.close();
});

/** A prefix of its own, with an echo provider, the model "base" and the key every request sends. */
async function seeded(): Promise<string> {
  const prefix = `/auth-restart-${process.pid}-${++prefixes}/`;
  await etcd.put(`${prefix}providers/echo`, JSON.stringify({ type: 'echo' }));
  await etcd.put(`${prefix}models/base`, JSON.stringify({ provider: 'echo' }));
  await etcd.put(`${prefix}keys/base`, JSON.stringify({ key_sha256: sha256(BASE_KEY) }));
  return prefix;
}

/** Nothing but what the test needs: the etcd settings are the defaults but for the credentials. */
const gatewayConfig = (prefix: string) => ({
  admin: { tokens: [{ name: 'ops', token: TOKEN }] },
  etcd: { endpoints: [etcd.endpoint], prefix, username: 'root', password: PASSWORD },
});

const json = (res: RawResponse) => JSON.parse(res.body) as Record<string, any>;
const chat = (gw: GatewayProcess, model: string, key = BASE_KEY) =>
  postJson(`${gw.proxyUrl}/v1/chat/completions`, { model, messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${key}` });
const adminCall = (gw: GatewayProcess, method: string, path: string, body?: unknown) =>
  httpRequest(`${gw.adminUrl}${path}`, { method, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
const configSource = async (gw: GatewayProcess) => json(await adminCall(gw, 'GET', '/server_info')).config_source as Record<string, any>;

/** Polls every 10 ms until `probe` holds; fails (naming `what`) once `deadline` (performance.now()) has passed. */
async function servedBy(deadline: number, probe: () => Promise<boolean>, what: string): Promise<number> {
  for (;;) {
    if (await probe()) return performance.now();
    if (performance.now() > deadline) throw new Error(`not served within ${APPLIED_WITHIN_MS} ms of the write: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('etcd with authentication, restarted', { skip }, () => {
  test(`${ROUNDS} etcd restarts (SIGKILL, same ports and data): each change written after the restart is served within 2 s, through etcdctl and through the admin API`, async () => {
    const prefix = await seeded();
    let key = 'sk-rotating-round-0-0123456789';
    await etcd.put(`${prefix}keys/rotating`, JSON.stringify({ key_sha256: sha256(key) }));
    const gw = await startGateway({ config: gatewayConfig(prefix) });
    const times: number[] = [];
    try {
      assert.equal((await chat(gw, 'base', key)).status, 200);
      for (let round = 1; round <= ROUNDS; round++) {
        await etcd.kill();
        await etcd.start();
        const at = `round ${round}`;
        if (round % 2 === 1) {
          // A key rotated by another client: the new key works, the old one is refused (a revoked key must not keep working).
          const previous = key;
          key = `sk-rotating-round-${round}-0123456789`;
          const writtenAt = performance.now();
          await etcd.put(`${prefix}keys/rotating`, JSON.stringify({ key_sha256: sha256(key) }));
          const served = await servedBy(writtenAt + APPLIED_WITHIN_MS, async () => (await chat(gw, 'base', key)).status === 200 && (await chat(gw, 'base', previous)).status === 401, `${at}: the rotated key`);
          times.push(served - writtenAt);
        } else {
          // A write through the gateway's own admin API: answered once this gateway serves it.
          const writtenAt = performance.now();
          const written = await adminCall(gw, 'PUT', `/config/models/round-${round}`, { provider: 'echo' });
          assert.equal(written.status, 201, `${at}: ${written.body}`);
          assert.equal(json(written).applied, true, `${at}: the write is applied by the gateway that made it`);
          const served = await servedBy(writtenAt + APPLIED_WITHIN_MS, async () => (await chat(gw, `round-${round}`)).status === 200, `${at}: the new model`);
          times.push(served - writtenAt);
        }
      }
      assert.equal(metricValue(await scrape(gw), 'sluice_etcd_connected'), 1);
      assert.equal((await configSource(gw)).following, true);
      // The restarts did invalidate the token, so the path under test was taken.
      assert.ok(gw.logs.some((l) => l.event === 'etcd_reauthenticated'), 'the gateway signed in again at least once');
      assert.ok(!gw.stdout().includes(PASSWORD), 'the password is never logged');
    } finally {
      await gw.stop();
      if (!etcd.running) await etcd.start();
    }
    process.stdout.write(`# applied after an etcd restart, ms: ${times.map((t) => t.toFixed(0)).join(' ')}\n`);
  });

  test('while etcd is down: /server_info, the status stream, the page and sluice status say it is not followed, a warning every 30 s says how long and why, readiness stays; back: the next change is served within 2 s', async () => {
    const prefix = await seeded();
    const gw = await startGateway({ config: gatewayConfig(prefix) });
    let context: BrowserContext | undefined;
    let cli: ChildProcess | undefined;
    let printed = '';
    let profile: string | undefined;
    try {
      const following = await configSource(gw);
      assert.deepEqual([following.source, following.following, following.last_error], ['etcd', true, null]);
      const revision = following.revision as number;
      assert.ok(revision > 0);
      const watcher = await watchStatus(gw.adminUrl, { authorization: `Bearer ${TOKEN}` });
      cli = spawn(process.execPath, [MAIN, 'status', '--admin', gw.adminUrl, '--token', TOKEN], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
      cli.stdout!.setEncoding('utf8').on('data', (c: string) => (printed += c));
      await eventually(() => /serving, ready \(pid/.test(printed), 10_000, 'sluice status');
      await etcd.kill();
      const killedAt = Date.now();
      const down = (await eventually(async () => {
        const state = await configSource(gw);
        return state.following === false ? state : undefined;
      }, 10_000, 'config_source.following false'))!;
      assert.equal(down.revision, revision, 'it still serves the revision it applied');
      assert.ok(Math.abs(Date.parse(down.since) - killedAt) < 5000, `since ${down.since}`);
      assert.equal(typeof down.last_error, 'string');
      assert.ok(down.last_error.length > 0);
      await watcher.waitFor((e) => e.name === 'status' && e.data.config.following === false && typeof e.data.config.last_error === 'string', 5000, 'the status stream says etcd is not followed');
      watcher.close();
      await eventually(() => /serving, ready, not following etcd \(pid \d+, v[^;]+; config: etcd; etcd: .+\)/.test(printed), 5000, 'sluice status says so');
      if (!browser.skip) {
        profile = mkdtempSync(join(tmpdir(), 'sluice-chromium-'));
        context = await chromium.launchPersistentContext(profile, {
          executablePath: '/usr/bin/chromium',
          headless: true,
          args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
        });
        const page = await context.newPage();
        await page.goto(`${gw.adminUrl}/status#token=${TOKEN}`);
        await eventually(async () => page.locator('#etcd-warning').isVisible(), 10_000, 'the page shows that etcd is not followed');
        const shown = (await page.locator('#etcd-warning').textContent()) ?? '';
        assert.match(shown, /Not following etcd for \d+\.\d s \(.+\)/);
        assert.match(shown, new RegExp(`revision ${revision}`));
      }
      // Readiness stays: a fleet keeps serving what it has while etcd is away.
      assert.equal((await httpRequest(`${gw.adminUrl}/readyz`)).status, 200);
      assert.equal((await chat(gw, 'base')).status, 200);
      assert.equal(metricValue(await scrape(gw), 'sluice_etcd_connected'), 0);
      // At the default interval: one warning 30 s after it stopped following, saying how long and why.
      const warning = await gw.waitForLog((l) => l.event === 'etcd_not_following', 45_000);
      assert.ok(Number(warning.for_secs) >= 29, `for_secs ${String(warning.for_secs)}`);
      assert.equal(warning.revision, revision);
      assert.equal(typeof warning.last_error, 'string');
      assert.ok(Date.now() - killedAt >= 29_000, 'not before 30 s');
      await etcd.start();
      const writtenAt = performance.now();
      await etcd.put(`${prefix}models/after-outage`, JSON.stringify({ provider: 'echo' }));
      await servedBy(writtenAt + APPLIED_WITHIN_MS, async () => (await chat(gw, 'after-outage')).status === 200, 'the change after a long outage');
      await eventually(() => /not following etcd[^]*\n\d\d:\d\d:\d\d serving, ready \(pid/.test(printed), 5000, 'sluice status says it follows again');
      assert.equal(printed.match(/not following etcd/g)?.length, 1, `one line when it stopped, however often the error changed:\n${printed}`);
      const back = await configSource(gw);
      assert.deepEqual([back.following, back.last_error], [true, null]);
      assert.equal(metricValue(await scrape(gw), 'sluice_etcd_connected'), 1);
      assert.ok(!gw.stdout().includes(PASSWORD), 'the password is never logged');
    } finally {
      cli?.kill('SIGKILL');
      await context?.close();
      if (profile) rmSync(profile, { recursive: true, force: true });
      await gw.stop();
      if (!etcd.running) await etcd.start();
    }
  });
});
