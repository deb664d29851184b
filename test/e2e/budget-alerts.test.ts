// Budget alerts (`budget_alerts`) through the built gateway, spending with real requests (priced
// usage from the mock, each with a max_tokens small enough that its hold fits what is left): a local
// receiver gets exactly one signed POST per threshold crossed (50, 80, 100 %) per budget, a key's and
// a team's, each budget's in order (the next one only after the previous one was answered), with the
// body the docs give; a receiver that answers 503 twice gets the same alert again, and takes it once;
// with a ledger, a gateway restarted on the same files (its memory limit store starting over, so the
// budget is spent past 50 % again) does not send the 50 % alert a second time in the same period; and
// neither the webhook URL's secret query parameter, its userinfo, a header's value nor the signing
// secret ever shows in the gateway's output or its /metrics.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { eventually, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { assertOpenAiError } from '../support/reliability.ts';

const TOKEN = 'budget-alerts-admin-0123456789ab';
/** Secrets that must never show in the gateway's output or metrics. */
const SIGNING_SECRET = 'whsec-signing-secret-0123456789';
const URL_SECRET = 'url-query-secret-0123456789abcdef';
const USERINFO_SECRET = 'url-userinfo-secret-0123456789';
const HEADER_SECRET = 'header-value-secret-0123456789';
const SECRETS = [SIGNING_SECRET, URL_SECRET, USERINFO_SECRET, HEADER_SECRET];

const KEYS = { alerted: 'sk-alerts-alerted-000001', mate: 'sk-alerts-mate-00000001', retried: 'sk-alerts-retried-00001', restarted: 'sk-alerts-restarted-001', unlucky: 'sk-alerts-unlucky-00001' } as const;
/** $1,000 per million tokens: 100 tokens cost $0.1. */
const PRICE = { input: 1000, output: 1000 };
const TENTH = mockHeader({ usage: { prompt: 10, completion: 90 } });
const DOLLAR = mockHeader({ usage: { prompt: 10, completion: 990 } });
/** How long "no more alerts" is waited for. */
const QUIET_MS = 1200;

/** One POST the receiver got. */
interface Received {
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  readonly json: Record<string, unknown>;
  readonly arrivedAt: number;
  /** The status it was answered with, and when. */
  status: number;
  answeredAt: number;
}

interface Receiver {
  readonly url: string;
  readonly posts: Received[];
  waitFor(count: number, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/**
 * A webhook receiver on 127.0.0.1: records each POST and answers it after `delayMs` with the status
 * `answer` gives for its alert id and attempt (1 for the first POST of that id).
 */
function startReceiver(answer: (alertId: string, attempt: number) => number = () => 200, delayMs = 150): Promise<Receiver> {
  const posts: Received[] = [];
  const attempts = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let json: Record<string, unknown> = {};
      try {
        json = JSON.parse(body) as Record<string, unknown>;
      } catch {
        // kept as text: the assertions say what it was
      }
      const id = String(req.headers['x-sluice-alert-id'] ?? '');
      const attempt = (attempts.get(id) ?? 0) + 1;
      attempts.set(id, attempt);
      const post: Received = { path: req.url ?? '', headers: req.headers, body, json, arrivedAt: Date.now(), status: answer(id, attempt), answeredAt: 0 };
      posts.push(post);
      setTimeout(() => {
        post.answeredAt = Date.now();
        res.writeHead(post.status, { 'content-type': 'application/json' }).end('{}');
      }, delayMs);
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      resolve({
        url: `http://127.0.0.1:${port}`,
        posts,
        waitFor: (count, timeoutMs = 8000) => eventually(() => posts.length >= count, timeoutMs, `${count} alert POST(s) (got ${posts.length})`).then(() => undefined),
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    }),
  );
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

let mock: MockUpstream;
const gateways: GatewayProcess[] = [];

before(async () => {
  mock = await startMockUpstream({ record: false });
});
after(async () => {
  for (const gw of gateways) await gw.stop();
  await mock?.close();
});

/** A gateway with the mock's model priced, `keys` and `teams`, and `alerts` as its budget_alerts. */
async function gateway(alerts: Record<string, unknown>, keys: Record<string, unknown>[], teams: Record<string, unknown>[] = [], extra: Record<string, unknown> = {}): Promise<GatewayProcess> {
  const gw = await startGateway({
    config: {
      workers: 1,
      shutdown: { min_drain_secs: 0 },
      providers: [{ name: 'oa', type: 'openai', base_url: `${mock.url}/v1` }],
      models: [{ name: 'mock-gpt', provider: 'oa' }],
      prices: { 'mock-gpt': PRICE },
      teams,
      keys,
      budget_alerts: alerts,
      admin: { tokens: [{ name: 'ops', token: TOKEN }] },
      // Every retry is logged too (at debug): more lines a secret could slip into.
      log: { level: 'debug' },
      ...extra,
    },
  });
  gateways.push(gw);
  return gw;
}

/**
 * A chat completion whose answer reports `usage` (its cost at PRICE); max_tokens 10, so that what it
 * holds on its budgets while it runs (its prompt and 10 tokens: about $0.04) fits what is left.
 */
async function chat(gw: GatewayProcess, key: string, usage: Record<string, string>): Promise<{ status: number; text: string }> {
  const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...usage },
    body: JSON.stringify({ model: 'mock-gpt', max_tokens: 10, messages: [{ role: 'user', content: 'spend' }] }),
  });
  return { status: res.status, text: await res.text() };
}

/** `count` requests in a row, each answered 200. */
async function spend(gw: GatewayProcess, key: string, count: number, usage = TENTH): Promise<void> {
  for (let i = 0; i < count; i++) {
    const res = await chat(gw, key, usage);
    assert.equal(res.status, 200, `request ${i + 1} of ${count}: ${res.text.slice(0, 300)}`);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The signature header is sha256=<hex HMAC-SHA256 of the body with the secret>. */
function assertSigned(post: Received, secret: string): void {
  const header = String(post.headers['x-sluice-signature'] ?? '');
  assert.match(header, /^sha256=[0-9a-f]{64}$/, `signature header: ${header}`);
  const expected = createHmac('sha256', secret).update(post.body).digest();
  assert.ok(timingSafeEqual(Buffer.from(header.slice('sha256='.length), 'hex'), expected), 'the signature is the HMAC-SHA256 of the body');
}

/** The first instant of the next UTC month, as the alert's period_resets_at says it. */
function nextMonth(now = new Date()): string {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)).toISOString();
}

interface ExpectedAlert {
  scope: 'key' | 'team';
  name: string;
  threshold: number;
  budget: number;
  spent: number;
}

/** The alert's body, field by field as the docs give it; its id ends with the threshold and is the x-sluice-alert-id. */
function assertAlert(post: Received, e: ExpectedAlert, window: { from: number; to: number }): void {
  const what = `${e.scope} ${e.name} ${e.threshold} %`;
  assert.equal(post.headers['content-type'], 'application/json', what);
  const body = post.json;
  assert.deepEqual(Object.keys(body).sort(), ['at', 'budget_usd', 'id', 'left_usd', 'name', 'period', 'period_resets_at', 'scope', 'spent_usd', 'threshold_percent', 'type'], what);
  assert.equal(body.type, 'budget.threshold_crossed', what);
  assert.equal(body.scope, e.scope, what);
  assert.equal(body.name, e.name, what);
  assert.equal(body.period, 'month', what);
  assert.equal(body.period_resets_at, nextMonth(), what);
  assert.equal(body.threshold_percent, e.threshold, what);
  assert.equal(body.budget_usd, e.budget, what);
  assert.ok(Math.abs(Number(body.spent_usd) - e.spent) < 1e-9, `${what}: spent ${String(body.spent_usd)}, expected ${e.spent}`);
  assert.ok(Math.abs(Number(body.left_usd) - Math.max(0, e.budget - e.spent)) < 1e-9, `${what}: left ${String(body.left_usd)}`);
  assert.equal(typeof body.id, 'string', what);
  assert.ok(String(body.id).endsWith(`:${e.threshold}`), `${what}: id ${String(body.id)}`);
  assert.equal(post.headers['x-sluice-alert-id'], body.id, what);
  const at = Date.parse(String(body.at));
  assert.ok(at >= window.from - 5 && at <= window.to + 5, `${what}: at ${String(body.at)}`);
}

/** The part of an alert's id that names its budget's period (the id without ":<threshold>"). */
const periodOf = (post: Received) => String(post.json.id).replace(/:\d+$/, '');

/** A budget's POSTs arrived in the order of their thresholds, each after the previous one was answered. */
function assertInOrder(posts: readonly Received[], what: string): void {
  assert.deepEqual(posts.map((p) => p.json.threshold_percent), [...posts.map((p) => Number(p.json.threshold_percent))].sort((a, b) => a - b), `${what}: thresholds in order`);
  for (let i = 1; i < posts.length; i++) {
    assert.ok(posts[i]!.arrivedAt >= posts[i - 1]!.answeredAt && posts[i - 1]!.answeredAt > 0, `${what}: the ${String(posts[i]!.json.threshold_percent)} % alert came before the ${String(posts[i - 1]!.json.threshold_percent)} % one was answered`);
  }
}

/** No secret in what the gateway wrote or serves. */
async function assertNoSecrets(gw: GatewayProcess, what: string): Promise<void> {
  const places: [string, string][] = [['stdout', gw.stdout()], ['stderr', gw.stderr()]];
  if (gw.child.exitCode === null && gw.child.signalCode === null) {
    places.push(['/metrics', await scrape(gw)]);
    const info = await fetch(`${gw.adminUrl}/server_info`, { headers: { authorization: `Bearer ${TOKEN}` } });
    places.push(['/server_info', await info.text()]);
  }
  for (const [where, text] of places) {
    for (const secret of SECRETS) assert.ok(!text.includes(secret), `${what}: a secret (${secret.slice(0, 12)}…) in ${where}`);
  }
}

describe('budget alerts of a key and of its team', () => {
  let receiver: Receiver;
  let gw: GatewayProcess;

  before(async () => {
    receiver = await startReceiver();
    gw = await gateway(
      { url: `${receiver.url}/hooks/sluice?token=${URL_SECRET}`, secret: SIGNING_SECRET, headers: { authorization: `Bearer ${HEADER_SECRET}` } },
      [
        { name: 'alerted', key: KEYS.alerted, team: 'squad', budget: { usd: 1 } },
        { name: 'mate', key: KEYS.mate, team: 'squad' },
      ],
      [{ name: 'squad', budget: { usd: 2 } }],
    );
  });
  after(async () => {
    await receiver?.close();
  });

  test('one signed POST per threshold per budget, in order, each with the body the docs give; a budget spent refuses the next request', async () => {
    const from = Date.now();
    const expectAlerts = async (count: number) => {
      await receiver.waitFor(count);
      await sleep(300);
      assert.equal(receiver.posts.length, count, `${count} alerts so far: ${receiver.posts.map((p) => `${String(p.json.scope)}:${String(p.json.threshold_percent)}`).join(', ')}`);
    };
    // The key's $1: 50 % at the 5th request of $0.1, 80 % at the 8th, 100 % at the 10th (also the team's 50 % of $2).
    await spend(gw, KEYS.alerted, 4);
    await expectAlerts(0);
    await spend(gw, KEYS.alerted, 1);
    await expectAlerts(1);
    await spend(gw, KEYS.alerted, 2);
    await expectAlerts(1);
    await spend(gw, KEYS.alerted, 1);
    await expectAlerts(2);
    await spend(gw, KEYS.alerted, 2);
    await expectAlerts(4);
    const spent = await chat(gw, KEYS.alerted, TENTH);
    assert.equal(spent.status, 429, spent.text);
    assert.equal(assertOpenAiError(spent.text).message, 'API key "alerted" has spent its budget of $1 for this month');
    // The team's 80 % and 100 % at once: one request of $1 takes it from $1 to $2.
    await spend(gw, KEYS.mate, 1, DOLLAR);
    await expectAlerts(6);
    const teamSpent = await chat(gw, KEYS.mate, TENTH);
    assert.equal(teamSpent.status, 429, teamSpent.text);
    assert.equal(assertOpenAiError(teamSpent.text).message, 'team "squad" has spent its budget of $2 for this month');
    await sleep(QUIET_MS);
    assert.equal(receiver.posts.length, 6, 'no alert more');
    const window = { from, to: Date.now() };

    const key = receiver.posts.filter((p) => p.json.scope === 'key');
    const team = receiver.posts.filter((p) => p.json.scope === 'team');
    assert.deepEqual(key.map((p) => p.json.threshold_percent), [50, 80, 100]);
    assert.deepEqual(team.map((p) => p.json.threshold_percent), [50, 80, 100]);
    [0.5, 0.8, 1].forEach((s, i) => assertAlert(key[i]!, { scope: 'key', name: 'alerted', threshold: [50, 80, 100][i]!, budget: 1, spent: s }, window));
    [1, 2, 2].forEach((s, i) => assertAlert(team[i]!, { scope: 'team', name: 'squad', threshold: [50, 80, 100][i]!, budget: 2, spent: s }, window));
    assertInOrder(key, 'the key');
    assertInOrder(team, 'the team');
    // One period per budget; an id per alert.
    assert.equal(new Set(key.map(periodOf)).size, 1);
    assert.equal(new Set(team.map(periodOf)).size, 1);
    assert.notEqual(periodOf(key[0]!), periodOf(team[0]!));
    assert.equal(new Set(receiver.posts.map((p) => p.json.id)).size, 6, 'an id per alert');
    for (const post of receiver.posts) {
      assert.equal(post.path, `/hooks/sluice?token=${URL_SECRET}`, 'the webhook URL as configured');
      assert.equal(post.headers.authorization, `Bearer ${HEADER_SECRET}`, 'the configured header');
      assertSigned(post, SIGNING_SECRET);
      assert.equal(post.status, 200);
    }
    assert.equal(gw.logs.filter((l) => l.event === 'budget_alert_sent').length, 6);
    // GET /budgets agrees with the last alert of each budget.
    const budgets = (await (await fetch(`${gw.adminUrl}/budgets`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as { budgets: { scope: string; name: string; spent_usd: number; left_usd: number }[] };
    assert.deepEqual(
      budgets.budgets.filter((b) => b.name === 'alerted' || b.name === 'squad').map((b) => [b.scope, b.name, b.spent_usd, b.left_usd]).sort(),
      [['key', 'alerted', 1, 0], ['team', 'squad', 2, 0]],
    );
    await assertNoSecrets(gw, 'key and team');
  });
});

describe('a receiver that fails', () => {
  test('503 twice, then 200: each alert is retried with the same body, id and signature, and accepted exactly once per threshold', async () => {
    const receiver = await startReceiver((_, attempt) => (attempt <= 2 ? 503 : 200), 20);
    try {
      const gw = await gateway({ url: `${receiver.url}/hook?token=${URL_SECRET}`, secret: SIGNING_SECRET }, [{ name: 'retried', key: KEYS.retried, budget: { usd: 1 } }]);
      await spend(gw, KEYS.retried, 10);
      // Back-off from 1 s, doubled: each alert takes up to 3 s, one after another.
      await receiver.waitFor(9, 20_000);
      await sleep(QUIET_MS);
      assert.equal(receiver.posts.length, 9, `9 POSTs: ${receiver.posts.map((p) => `${String(p.json.threshold_percent)}→${p.status}`).join(', ')}`);
      const accepted = receiver.posts.filter((p) => p.status === 200);
      assert.deepEqual(accepted.map((p) => p.json.threshold_percent), [50, 80, 100], 'one accepted alert per threshold, in order');
      for (const threshold of [50, 80, 100]) {
        const tries = receiver.posts.filter((p) => p.json.threshold_percent === threshold);
        assert.deepEqual(tries.map((p) => p.status), [503, 503, 200], `${threshold} %: answered`);
        assert.equal(new Set(tries.map((p) => p.body)).size, 1, `${threshold} %: the same body each time`);
        assert.equal(new Set(tries.map((p) => p.headers['x-sluice-alert-id'])).size, 1, `${threshold} %: the same id each time`);
        assert.equal(new Set(tries.map((p) => p.headers['x-sluice-signature'])).size, 1, `${threshold} %: the same signature each time`);
        for (const p of tries) assertSigned(p, SIGNING_SECRET);
        // Waited for between attempts (a back-off of 1 s, then 2 s, each at least half of it).
        assert.ok(tries[1]!.arrivedAt - tries[0]!.answeredAt >= 450, `${threshold} %: retried after ${tries[1]!.arrivedAt - tries[0]!.answeredAt} ms`);
        const body = tries[0]!.json;
        assert.equal(body.scope, 'key');
        assert.equal(body.name, 'retried');
        assert.ok(Number(body.spent_usd) * 100 >= threshold * 1 - 1e-9, `${threshold} %: spent ${String(body.spent_usd)}`);
      }
      assertInOrder(accepted, 'the accepted alerts');
      assert.equal(gw.logs.filter((l) => l.event === 'budget_alert_sent').length, 3);
      assert.equal(gw.logs.filter((l) => l.event === 'budget_alert_retry').length, 6);
      assert.equal(gw.logs.filter((l) => l.event === 'budget_alert_failed').length, 0);
      await assertNoSecrets(gw, 'retries');
    } finally {
      await receiver.close();
    }
  });

  test('a webhook nobody answers: each alert given up after max_attempts, logged, with no secret of the URL in any line', async () => {
    const port = await closedPort();
    const gw = await gateway({ url: `http://alerts:${USERINFO_SECRET}@127.0.0.1:${port}/hook?token=${URL_SECRET}`, secret: SIGNING_SECRET, headers: { 'x-receiver-key': HEADER_SECRET }, max_attempts: 2 }, [
      { name: 'unlucky', key: KEYS.unlucky, budget: { usd: 0.1 } },
    ]);
    // One request of $0.1 crosses 50, 80 and 100 % of $0.1 at once.
    await spend(gw, KEYS.unlucky, 1);
    await eventually(() => gw.logs.filter((l) => l.event === 'budget_alert_failed').length === 3, 15_000, 'three alerts given up');
    const failed = gw.logs.filter((l) => l.event === 'budget_alert_failed');
    assert.deepEqual(failed.map((l) => l.threshold_percent), [50, 80, 100]);
    for (const line of failed) {
      assert.equal(line.attempts, 2);
      assert.match(String(line.reason), /ECONNREFUSED/);
    }
    await assertNoSecrets(gw, 'a webhook nobody answers');
  });
});

describe('with a ledger, across a restart', () => {
  test('a gateway restarted on the same files does not send the 50 % alert again in the same period (its claim is in the store); the 80 % one it does', async () => {
    const receiver = await startReceiver();
    const dir = mkdtempSync(join(tmpdir(), 'sluice-alerts-ledger-'));
    const file = join(dir, 'ledger.sqlite');
    try {
      const start = () =>
        gateway({ url: `${receiver.url}/hook?token=${URL_SECRET}`, secret: SIGNING_SECRET }, [{ name: 'restarted', key: KEYS.restarted, budget: { usd: 1 } }], [], {
          ledger: { store: 'sqlite', sqlite_path: file, spool_dir: join(dir, 'spool') },
        });
      const first = await start();
      await spend(first, KEYS.restarted, 5);
      await receiver.waitFor(1);
      assert.equal(receiver.posts[0]!.json.threshold_percent, 50);
      await assertNoSecrets(first, 'the first gateway');
      first.signal('SIGTERM');
      assert.equal((await first.exited).code, 0, first.stderr());
      await assertNoSecrets(first, 'the first gateway, exited');

      const second = await start();
      // Its limit store (memory) starts over: the same $0.5 is spent again, past 50 %.
      await spend(second, KEYS.restarted, 5);
      const budgets = (await (await fetch(`${second.adminUrl}/budgets`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as { budgets: { name: string; spent_usd: number }[] };
      assert.equal(budgets.budgets.find((b) => b.name === 'restarted')?.spent_usd, 0.5, 'the second gateway counted from 0');
      await sleep(QUIET_MS);
      assert.equal(receiver.posts.length, 1, `no second 50 % alert: ${receiver.posts.map((p) => String(p.json.threshold_percent)).join(', ')}`);
      await spend(second, KEYS.restarted, 3);
      await receiver.waitFor(2);
      await sleep(300);
      assert.deepEqual(receiver.posts.map((p) => p.json.threshold_percent), [50, 80]);
      assert.equal(periodOf(receiver.posts[0]!), periodOf(receiver.posts[1]!), 'the same budget period');
      for (const post of receiver.posts) assertSigned(post, SIGNING_SECRET);
      // The claims, as the store has them (read with a connection of the test's own).
      const db = new DatabaseSync(file, { readOnly: true });
      try {
        const claims = db.prepare('SELECT id FROM ledger_claims ORDER BY id').all().map((r) => String(r.id));
        assert.deepEqual(claims, receiver.posts.map((p) => String(p.json.id)).sort());
      } finally {
        db.close();
      }
      await assertNoSecrets(second, 'the second gateway');
    } finally {
      await receiver.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
