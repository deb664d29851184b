// The status page (GET /status) in headless Chromium (Debian's `chromium`, driven by playwright-core)
// against the built program: it loads with the admin token from the URL fragment, shows the
// numbers, updates after requests, and shows a drain in progress (the window's progress bar, what
// it waits for, the stream with its age, the timeline), then the exit. It asks for the token
// without one, and loads nothing from anywhere else. With SLUICE_UPDATE_SCREENSHOTS=1 the drain is
// photographed into docs/images/status-page.png.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { ROOT, eventually, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { chromiumCheck, launchChromium, type Chromium } from '../support/chromium.ts';

const browser = chromiumCheck();
const TOKEN = 'page-token-0123456789abcdef';
let mock: MockUpstream;
let chromium: Chromium | undefined;
let context: BrowserContext;

before(async () => {
  if (browser.skip) return;
  mock = await startMockUpstream();
  chromium = await launchChromium();
  context = chromium.context;
});
after(async () => {
  await chromium?.close();
  await mock?.close();
});

function config(extra: Record<string, unknown> = {}) {
  return {
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' }],
    models: [{ name: 'gpt-4o-mini', provider: 'up' }],
    admin: { token: TOKEN },
    ...extra,
  };
}

const chat = (stream: boolean) => JSON.stringify({ model: 'gpt-4o-mini', stream, messages: [{ role: 'user', content: 'hi' }] });

/** A page that records every request it makes and every console error. */
async function openPage(): Promise<{ page: Page; requests: string[]; problems: string[] }> {
  const page = await context.newPage();
  const requests: string[] = [];
  const problems: string[] = [];
  page.on('request', (r) => requests.push(r.url()));
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(e.message));
  return { page, requests, problems };
}

const textOf = (page: Page, selector: string) => page.locator(selector).textContent({ timeout: 2000 }).then((t) => t ?? '');
const until = (what: string, probe: () => Promise<unknown>, ms = 10_000) => eventually(probe, ms, what);

describe('the status page in Chromium', { skip: browser.skip }, () => {
  let gw: GatewayProcess;
  before(async () => {
    // Chromium opens a spare connection it may never use: a fresh connection, which the drain holds
    // for fresh_connection_grace_secs once the listeners have closed (L6); 1 s instead of 10.
    gw = await startGateway({ config: config({ shutdown: { min_drain_secs: 4 }, downstream: { fresh_connection_grace_secs: 1 } }) });
  });
  after(async () => gw?.stop());

  test('without a token it asks for one; the form connects', async () => {
    const { page, problems } = await openPage();
    try {
      const answer = await page.goto(`${gw.adminUrl}/status`);
      assert.equal(answer?.status(), 200);
      await until('the token form', async () => (await page.locator('#login').isVisible()) && /needed/.test(await textOf(page, '#link')));
      await page.fill('#token', TOKEN);
      await page.click('#login button');
      await until('live', async () => (await textOf(page, '#link')) === 'live' && (await textOf(page, '#state')) === 'serving');
      assert.equal(await page.locator('#login').isVisible(), false);
      // The 401 the page met first is the only console complaint allowed.
      assert.ok(problems.every((p) => /401/.test(p)), problems.join('\n'));
    } finally {
      await page.close();
    }
  });

  test('loads with the token from the fragment, shows the numbers, updates after requests, shows the drain with the open stream and its age, then the exit', async () => {
    const { page, requests, problems } = await openPage();
    try {
      await page.goto(`${gw.adminUrl}/status#token=${TOKEN}`);
      await until('serving, live', async () => (await textOf(page, '#state')) === 'serving' && (await textOf(page, '#link')) === 'live');
      assert.ok(!page.url().includes(TOKEN), 'the token is taken out of the address bar');
      assert.equal(await textOf(page, '#inflight'), '0');
      assert.match(await textOf(page, '#source'), /^file/);
      assert.match(await textOf(page, '#connections'), /admin/);
      // Requests: the rate rises above 0.
      for (let i = 0; i < 10; i++) await (await fetch(`${gw.proxyUrl}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chat(false) })).text();
      await until('requests/s above 0', async () => Number(await textOf(page, '#rps')) > 0);
      // The target, once used: its circuit, in flight and latency.
      await until('the target', async () => /up\s*gpt-4o-mini\s*closed\s*0\s*\d+\s*0/.test(await textOf(page, '#targets')));
      // A stream of about 7 s, past the 4 s window.
      const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...mockHeader({ chunks: 50, sseIntervalMs: 140 }) }, body: chat(true) });
      assert.equal(res.status, 200);
      const streamDone = res.text();
      streamDone.catch(() => {});
      await until('the open stream listed', async () => /stream\s*chat_completions\s*gpt-4o-mini/.test(await textOf(page, '#open')));
      assert.equal(await textOf(page, '#inflight'), '1');
      gw.signal('SIGTERM');
      await until('draining', async () => (await textOf(page, '#state')) === 'draining' && (await page.locator('#drain').isVisible()));
      assert.match(await textOf(page, '#timeline'), /\+0\.0 s\s+drain started \(SIGTERM\)/);
      assert.match(await textOf(page, '#waiting'), /window open .* in flight: 0 requests, 1 stream, 0 sessions/);
      const width = async () => Number((await page.locator('#fill').evaluate((e) => (e as HTMLElement).style.width)).replace('%', ''));
      const ageOf = async () => Number(/(\d+\.\d) s/.exec(await textOf(page, '#open'))?.[1]);
      const firstWidth = await width();
      const firstAge = await ageOf();
      await until('the window bar and the age move on', async () => (await width()) > firstWidth && (await ageOf()) > firstAge);
      assert.match(await textOf(page, '#window'), /^window \d+\.\d s of 4\.0 s/);
      if (process.env.SLUICE_UPDATE_SCREENSHOTS === '1') {
        mkdirSync(join(ROOT, 'docs', 'images'), { recursive: true });
        writeFileSync(join(ROOT, 'docs', 'images', 'status-page.png'), await page.screenshot({ fullPage: true }));
      }
      assert.match(await textOf(page, '#timeline'), /\+4\.0 s\s+window over \(to come\)/);
      await until('the window over', async () => /window over(?! \(to come\))/.test(await textOf(page, '#timeline')), 8000);
      assert.equal(await width(), 100);
      assert.match(await textOf(page, '#waiting'), /window over; waiting for 0 requests, 1 stream, 0 sessions/);
      assert.ok((await streamDone).includes('data: [DONE]'));
      await until('exited', async () => (await textOf(page, '#state')) === 'exited', 8000);
      assert.match(await textOf(page, '#ready'), /exit code 0/);
      assert.match(await textOf(page, '#timeline'), /listeners closed[\s\S]*exited/);
      assert.equal((await gw.exited).code, 0);
      // Nothing but this listener was asked for anything, and nothing was refused by the page's policy.
      assert.ok(requests.length >= 2);
      for (const url of requests) assert.ok(url.startsWith(`${gw.adminUrl}/status`), url);
      assert.deepEqual(problems, []);
    } finally {
      await page.close();
    }
  });
});

test('the page writes what clients send as text: a model name with markup stays text', { skip: browser.skip }, async () => {
  const gw = await startGateway({ config: { providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }], models: [{ name: '*', provider: 'up' }], admin: { token: TOKEN } } });
  const { page, problems } = await openPage();
  try {
    const hostile = '<img src=x onerror="document.title=\'owned\'">';
    const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...mockHeader({ chunks: 40, sseIntervalMs: 100 }) },
      body: JSON.stringify({ model: hostile, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(res.status, 200);
    const done = res.text();
    done.catch(() => {});
    await page.goto(`${gw.adminUrl}/status#token=${TOKEN}`);
    await until('the stream listed', async () => (await textOf(page, '#open')).includes(hostile));
    assert.equal(await page.locator('#open img').count(), 0);
    assert.notEqual(await page.title(), 'owned');
    assert.deepEqual(problems, []);
    await done;
  } finally {
    await page.close();
    await gw.stop();
  }
});

test('admin.status_page: false: the page is 404', { skip: browser.skip }, async () => {
  const gw = await startGateway({ config: config({ admin: { token: TOKEN, status_page: false } }) });
  const { page } = await openPage();
  try {
    const answer = await page.goto(`${gw.adminUrl}/status#token=${TOKEN}`);
    assert.equal(answer?.status(), 404);
  } finally {
    await page.close();
    await gw.stop();
  }
});
