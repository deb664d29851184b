// The status page's Usage and Requests views in headless Chromium (Debian's `chromium`, driven by
// playwright-core) against the built program with a SQLite ledger: requests of two keys (one of a
// team, one with a fallback) made through the mock upstream show as their spend by key, in the
// charts, the top keys and the budgets; the request log lists them a page at a time, filters them,
// and opens one with its attempts. A `user` holding markup stays text (no element, no dialog, no
// error), the page asks nothing of another origin, a read-only admin token sees both views, and a
// gateway without a ledger says so.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { eventually, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { chromiumCheck, launchChromium, type Chromium } from '../support/chromium.ts';

const browser = chromiumCheck();
const TOKEN = 'usage-page-token-0123456789abcdef';
const READ_TOKEN = 'usage-page-reader-0123456789abcdef';
const ALICE = 'sk-alice-0123456789abcdef';
const BOB = 'sk-bob-0123456789abcdef';
const HOSTILE = '<img src=x onerror=alert(1)>';
/** Bob's requests: more than a page of the list (50). */
const BOB_REQUESTS = 51;
/** The mock reports 11 prompt and 7 completion tokens; at $1000 a million each, a request costs $0.018. */
const PER_REQUEST = 0.018;

let mock: MockUpstream;
let chromium: Chromium | undefined;
let context: BrowserContext;
let dir: string;

before(async () => {
  if (browser.skip) return;
  mock = await startMockUpstream();
  chromium = await launchChromium();
  context = chromium.context;
  dir = mkdtempSync(join(tmpdir(), 'sluice-usage-page-'));
});
after(async () => {
  await chromium?.close();
  await mock?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function config(ledger: boolean) {
  return {
    providers: [
      { name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' },
      // Nothing listens there: a connect failure, and the route falls back to `up`.
      { name: 'dead', type: 'openai', base_url: 'http://127.0.0.1:1/v1', api_key: 'sk-dead' },
    ],
    models: [
      { name: 'gpt-4o-mini', provider: 'up' },
      { name: 'routed', targets: [{ provider: 'dead', model: 'gpt-4o-mini', priority: 0 }, { provider: 'up', model: 'gpt-4o-mini', priority: 1 }] },
    ],
    prices: { 'gpt-4o-mini': { input: 1000, output: 1000 } },
    teams: [{ name: 'research' }],
    keys: [
      { name: 'alice', key: ALICE, team: 'research', budget: { usd: 1, period: 'month' } },
      { name: 'bob', key: BOB },
    ],
    admin: { tokens: [{ name: 'ops', token: TOKEN }, { name: 'viewer', token: READ_TOKEN, scope: 'read' }] },
    ...(ledger ? { ledger: { store: 'sqlite', sqlite_path: join(dir, 'ledger.sqlite'), spool_dir: join(dir, 'spool') } } : {}),
  };
}

async function chat(gw: GatewayProcess, key: string, body: Record<string, unknown> = {}, headers: Record<string, string> = {}): Promise<void> {
  const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...headers },
    // max_tokens: the request's hold on alice's $1 budget is its prompt and 10 tokens, not 4,096.
    body: JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], ...body }),
  });
  const text = await res.text();
  assert.equal(res.status, 200, text);
}

async function admin<T>(gw: GatewayProcess, path: string): Promise<T> {
  const res = await fetch(`${gw.adminUrl}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } });
  assert.equal(res.status, 200, path);
  return (await res.json()) as T;
}

/** A page that records every request it makes, every console error, page error and dialog. */
async function openPage(): Promise<{ page: Page; requests: string[]; problems: string[] }> {
  const page = await context.newPage();
  const requests: string[] = [];
  const problems: string[] = [];
  page.on('request', (r) => requests.push(r.url()));
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(e.message));
  page.on('dialog', (d) => {
    problems.push(`dialog: ${d.message()}`);
    void d.dismiss();
  });
  return { page, requests, problems };
}

const textOf = (page: Page, selector: string) => page.locator(selector).textContent({ timeout: 2000 }).then((t) => t ?? '');
const until = (what: string, probe: () => Promise<unknown>, ms = 10_000) => eventually(probe, ms, what);
/** The cells of each row of a table body, as text. */
const cells = (page: Page, tbody: string) => page.locator(`${tbody} tr`).evaluateAll((rows) => rows.map((r) => [...r.children].map((c) => c.textContent ?? '')));

describe('the Usage and Requests views with a ledger', { skip: browser.skip }, () => {
  let gw: GatewayProcess;
  let routedId: string;

  before(async () => {
    gw = await startGateway({ config: config(true) });
    await chat(gw, ALICE, { user: HOSTILE }, { 'x-sluice-tags': 'nightly' });
    await chat(gw, ALICE);
    await chat(gw, ALICE);
    for (let i = 0; i < BOB_REQUESTS - 1; i++) await chat(gw, BOB);
    await chat(gw, BOB, { model: 'routed' });
    // A request reaches the ledger once shipped: the list has them all within a few seconds.
    const listed = await eventually(
      async () => {
        const answer = await admin<{ items: { id: string; model: string }[] }>(gw, '/requests?limit=500');
        return answer.items.length === 3 + BOB_REQUESTS ? answer : undefined;
      },
      15_000,
      'the ledger listing every request',
    );
    routedId = listed!.items.find((r) => r.model === 'routed')!.id;
  });
  after(async () => gw?.stop());

  test('Usage: the spend by key in the totals, the charts, the top keys; the budget spent and left', async () => {
    const { page, requests, problems } = await openPage();
    try {
      await page.goto(`${gw.adminUrl}/status#usage&token=${TOKEN}`);
      assert.equal(new URL(page.url()).hash, '#usage', 'the token is taken out, the view kept');
      await until('the totals', async () => (await textOf(page, '#total-requests')) === String(3 + BOB_REQUESTS));
      assert.equal(await page.locator('#view-usage').isVisible(), true);
      assert.equal(await page.locator('#view-status').isVisible(), false);
      assert.equal(await textOf(page, '#total-spend'), `$${((3 + BOB_REQUESTS) * PER_REQUEST).toFixed(3)}`);
      // The top keys, by spend.
      assert.deepEqual(await cells(page, '#top-keys'), [
        ['bob', String(BOB_REQUESTS), '0', String(11 * BOB_REQUESTS), String(7 * BOB_REQUESTS), `$${(BOB_REQUESTS * PER_REQUEST).toFixed(3)}`],
        ['alice', '3', '0', '33', '21', '$0.054'],
      ]);
      // By key: one colour a key, today's bar made of both, each segment's value in its tooltip.
      await page.selectOption('#group', 'key');
      await until('the legend by key', async () => /bob .*alice/.test(await textOf(page, '#legend')));
      const tips = await page.locator('#spend-chart rect title').allTextContents();
      const today = new Date().toISOString().slice(5, 10);
      assert.deepEqual(tips.sort(), [`${today} alice: $0.054`, `${today} bob: $${(BOB_REQUESTS * PER_REQUEST).toFixed(3)}`]);
      assert.deepEqual((await page.locator('#tokens-chart rect title').allTextContents()).sort(), [`${today} alice: 54`, `${today} bob: ${short(18 * BOB_REQUESTS)}`]);
      // By team: alice's requests are research's, bob's none.
      await page.selectOption('#group', 'team');
      await until('the legend by team', async () => /\(none\) .*research \$0\.054/.test(await textOf(page, '#legend')));
      // The budget: alice's $1 a month, what is spent and left.
      const budgets = await cells(page, '#budgets');
      const alice = budgets.find((row) => row[1] === 'alice');
      assert.ok(alice, JSON.stringify(budgets));
      assert.deepEqual([alice[0], alice[2], alice[4], alice[5]], ['key', 'month', '$0.054 of $1.00 (5%)', '$0.946']);
      const bar = await page.locator('#budgets .meter div').first().evaluate((e) => (e as HTMLElement).style.width);
      assert.equal(bar, '5%');
      for (const url of requests) assert.ok(url.startsWith(`${gw.adminUrl}/`), `asked another origin: ${url}`);
      assert.ok(requests.some((url) => url.startsWith(`${gw.adminUrl}/usage?`)));
      assert.deepEqual(problems, []);
    } finally {
      await page.close();
    }
  });

  test('Requests: the list a page at a time, a user with markup as text, filters, and a request opened with its attempts', async () => {
    const { page, requests, problems } = await openPage();
    try {
      await page.goto(`${gw.adminUrl}/status#requests&token=${TOKEN}`);
      await until('the first page', async () => (await page.locator('#request-list tr.pick').count()) === 50);
      assert.equal(await page.locator('#more').isVisible(), true);
      await page.click('#more');
      await until('the next page', async () => (await page.locator('#request-list tr.pick').count()) === 3 + BOB_REQUESTS);
      assert.equal(await page.locator('#more').isVisible(), false);
      const rows = await cells(page, '#request-list');
      // Newest first: the routed request, then bob's, then alice's; the first of all (hers) last.
      assert.deepEqual(rows[0]!.slice(1, 7), ['bob', '-', '-', 'routed', 'up', '200']);
      assert.deepEqual(rows.at(-1)!.slice(1, 8), ['alice', 'research', HOSTILE, 'gpt-4o-mini', 'up', '200', '11 / 7']);
      assert.equal(rows.at(-1)![8], '$0.018');
      assert.match(rows.at(-1)![9]!, /^\d+ ms$/);
      assert.match(rows.at(-1)![10]!, /^\d+ ms$/);
      // The markup is text: no element made of it, no dialog, no error.
      assert.equal(await page.locator('img').count(), 0);
      // Filters: alice's requests; the user's; the tag; no error at all.
      await page.fill('#f-key', 'alice');
      await page.click('#filters button');
      await until('alice only', async () => (await page.locator('#request-list tr.pick').count()) === 3);
      await page.fill('#f-key', '');
      await page.fill('#f-user', HOSTILE);
      await page.fill('#f-tag', 'nightly');
      await page.click('#filters button');
      await until('the tagged one', async () => (await page.locator('#request-list tr.pick').count()) === 1);
      await page.fill('#f-user', '');
      await page.fill('#f-tag', '');
      await page.fill('#f-status', 'error');
      await page.click('#filters button');
      await until('no errors', async () => (await page.locator('#request-list tr.pick').count()) === 0 && /none/.test(await textOf(page, '#request-list')));
      // The routed request opened: its three attempts, the first two to nowhere (a connect failure is
      // retried once on its target, then the route falls back).
      await page.fill('#f-status', '');
      await page.fill('#f-model', 'routed');
      await page.click('#filters button');
      await until('the routed one', async () => (await page.locator('#request-list tr.pick').count()) === 1);
      await page.click('#request-list tr.pick');
      await until('its detail', async () => (await textOf(page, '#detail-id')) === routedId && (await page.locator('#attempts tr').count()) === 3);
      const attempts = await cells(page, '#attempts');
      assert.deepEqual(attempts.map((a) => a.slice(0, 3)), [
        ['dead/gpt-4o-mini', 'connect', '-'],
        ['dead/gpt-4o-mini', 'connect', '-'],
        ['up/gpt-4o-mini', 'success', '200'],
      ]);
      for (const a of attempts) assert.match(a[3]!, /^\d+ ms$/);
      const fields = await page.locator('#detail-fields').textContent();
      assert.match(fields ?? '', /keybob/);
      assert.match(fields ?? '', /provider, served modelup, gpt-4o-mini/);
      for (const url of requests) assert.ok(url.startsWith(`${gw.adminUrl}/`), `asked another origin: ${url}`);
      assert.deepEqual(problems, []);
    } finally {
      await page.close();
    }
  });

  test('the hostile user opened: text in the detail too; nothing ran', async () => {
    const { page, problems } = await openPage();
    try {
      await page.goto(`${gw.adminUrl}/status#requests&token=${TOKEN}`);
      await page.fill('#f-tag', 'nightly');
      await page.click('#filters button');
      await until('the tagged one', async () => (await page.locator('#request-list tr.pick').count()) === 1);
      await page.click('#request-list tr.pick');
      await until('its detail', async () => (await page.locator('#attempts tr').count()) === 1);
      const fields = await page.locator('#detail-fields dd').allTextContents();
      assert.ok(fields.includes(HOSTILE), fields.join('\n'));
      assert.ok(fields.includes('nightly'));
      assert.equal(await page.locator('img').count(), 0);
      assert.deepEqual(problems, []);
    } finally {
      await page.close();
    }
  });

  test('a read-only admin token sees both views', async () => {
    const { page, problems } = await openPage();
    try {
      await page.goto(`${gw.adminUrl}/status#usage&token=${READ_TOKEN}`);
      await until('the totals', async () => (await textOf(page, '#total-requests')) === String(3 + BOB_REQUESTS));
      assert.equal((await cells(page, '#top-keys')).length, 2);
      assert.equal(await page.locator('#usage-note').isVisible(), false);
      await page.click('#tab-requests');
      await until('the list', async () => (await page.locator('#request-list tr.pick').count()) === 50);
      assert.equal(new URL(page.url()).hash, '#requests');
      await page.click('#tab-status');
      await until('the status view', async () => (await page.locator('#view-status').isVisible()) && (await textOf(page, '#state')) === 'serving');
      assert.deepEqual(problems, []);
    } finally {
      await page.close();
    }
  });
});

/** As the page writes a number of tokens on a chart: 918 or 1.2k. */
function short(n: number): string {
  return n >= 1000 ? `${(n / 1000).toFixed(1).replace(/\.0$/, '')}k` : String(n);
}

test('without a ledger both views say so; the budgets are still listed', { skip: browser.skip }, async () => {
  const gw = await startGateway({ config: config(false) });
  const { page, problems } = await openPage();
  try {
    await page.goto(`${gw.adminUrl}/status#usage&token=${TOKEN}`);
    await until('the note', async () => /^The usage ledger is not enabled on this gateway: add a ledger section/.test(await textOf(page, '#usage-note')));
    assert.equal(await page.locator('#usage-data').isVisible(), false);
    await until('the budget', async () => (await cells(page, '#budgets')).some((row) => row[1] === 'alice'));
    await page.click('#tab-requests');
    await until('the note', async () => /^The usage ledger is not enabled on this gateway: add a ledger section/.test(await textOf(page, '#requests-note')));
    assert.equal(await page.locator('#requests-data').isVisible(), false);
    // The only complaints: the 404s of the ledger's routes.
    assert.ok(problems.every((p) => /404/.test(p)), problems.join('\n'));
  } finally {
    await page.close();
    await gw.stop();
  }
});
