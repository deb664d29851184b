// Budget alerts against a real webhook receiver on 127.0.0.1: each crossing sent once (two
// instances sharing their claims, as a fleet shares the ledger's), the retries and what is final,
// the signature, the body, and the exit's wait. The back-off's sleep is injected and instant.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { BudgetAlerts, backoffMs, memoryClaims, type AlertClaims, type BudgetAlertOptions, type BudgetAlertSettings, type BudgetAlertSubject, type BudgetReading } from '../../src/limits/budget-alerts.ts';

interface Received {
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  readonly json: Record<string, unknown>;
}

/** What the receiver does with the nth request (from 0): a status (with headers, or later), or 'hang' (never answers). */
type Answer = (n: number, received: Received) => number | 'hang' | { status: number; headers?: Record<string, string>; delayMs?: number };

async function receiver(answer: Answer = () => 200) {
  const received: Received[] = [];
  let inFlight = 0;
  let mostInFlight = 0;
  const server = createServer((req, res: ServerResponse) => {
    mostInFlight = Math.max(mostInFlight, ++inFlight);
    res.on('close', () => inFlight--);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const r = { headers: req.headers, body, json: JSON.parse(body) as Record<string, unknown> };
      const n = received.length;
      received.push(r);
      const a = answer(n, r);
      if (a === 'hang') return;
      if (typeof a === 'number') res.writeHead(a).end('{}');
      else setTimeout(() => res.writeHead(a.status, a.headers).end(), a.delayMs ?? 0);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks/budget`,
    received,
    ids: () => received.map((r) => r.json['id']),
    /** The most requests it has had at once. */
    mostInFlight: () => mostInFlight,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function recorder() {
  const sent: BudgetAlertSubject[] = [];
  const failed: { alert: BudgetAlertSubject; error: string; attempts: number; final: boolean }[] = [];
  return {
    sent,
    failed,
    events: {
      sent: (alert: BudgetAlertSubject) => sent.push(alert),
      failed: (alert: BudgetAlertSubject, error: string, attempts: number, final: boolean) => failed.push({ alert, error, attempts, final }),
    },
  };
}

const settings = (url: string, over: Partial<BudgetAlertSettings> = {}): BudgetAlertSettings => ({ url, thresholds: [50, 80, 100], timeoutMs: 5000, maxAttempts: 10, ...over });

const MAY_1 = Date.UTC(2025, 4, 1);
const JUNE_1 = Date.UTC(2025, 5, 1);
const NOW = Date.UTC(2025, 4, 17, 12, 30);

const reading = (spentMicros: number, over: Partial<BudgetReading> = {}): BudgetReading => ({
  scope: 'key',
  name: 'k1',
  periodId: 'k1:2025-05',
  period: 'month',
  budgetMicros: 1_000_000,
  spentMicros,
  resetAt: JUNE_1,
  ...over,
});

/** Sleeps recorded, and at once. */
function instantSleep() {
  const slept: number[] = [];
  return { slept, sleep: (ms: number) => (slept.push(ms), Promise.resolve()) };
}

/** Until every alert has been sent or given up. */
async function settled(...alerts: BudgetAlerts[]): Promise<void> {
  const deadline = Date.now() + 5000;
  while (alerts.some((a) => a.pending > 0)) {
    if (Date.now() > deadline) throw new Error('the alerts never settled');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

function alertsFor(url: string, over: Partial<BudgetAlertSettings> = {}, claims: AlertClaims = memoryClaims(), options: BudgetAlertOptions = {}) {
  const events = recorder();
  const { slept, sleep } = instantSleep();
  const alerts = new BudgetAlerts(settings(url, over), claims, events.events, { now: () => NOW, sleep, ...options });
  return { alerts, ...events, slept };
}

/** A deterministic shuffle (a linear congruential generator): the same order on every run. */
function shuffled<T>(items: T[], seed: number): T[] {
  const out = [...items];
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

describe('budget alerts', () => {
  test('each threshold sent exactly once under 1000 readings in any order, from two instances sharing one claims', async () => {
    const hook = await receiver();
    try {
      const claims = memoryClaims();
      const a = alertsFor(hook.url, {}, claims);
      const b = alertsFor(hook.url, {}, claims);
      const readings: BudgetReading[] = [];
      for (let i = 0; i < 1000; i++) {
        const spent = Math.round((i / 1000) * 1_200_000);
        readings.push(i % 2 === 0 ? reading(spent) : reading(spent, { scope: 'team', name: 't1', periodId: '@team:t1:2025-05' }));
      }
      shuffled(readings, 7).forEach((r, i) => (i % 2 === 0 ? a : b).alerts.observe(r));
      await settled(a.alerts, b.alerts);
      const ids = hook.ids().map(String).sort();
      assert.deepEqual(ids, ['@team:t1:2025-05:100', '@team:t1:2025-05:50', '@team:t1:2025-05:80', 'k1:2025-05:100', 'k1:2025-05:50', 'k1:2025-05:80']);
      assert.equal(a.sent.length + b.sent.length, 6);
      assert.deepEqual([...a.failed, ...b.failed], []);
    } finally {
      await hook.close();
    }
  });

  test('retried after 503, 503, then 200: three requests, one sent, the back-off from a second', async () => {
    const hook = await receiver((n) => (n < 2 ? 503 : 200));
    try {
      const a = alertsFor(hook.url);
      a.alerts.observe(reading(500_000));
      await settled(a.alerts);
      assert.equal(hook.received.length, 3);
      assert.deepEqual(hook.ids(), ['k1:2025-05:50', 'k1:2025-05:50', 'k1:2025-05:50']);
      assert.equal(new Set(hook.received.map((r) => r.body)).size, 1, 'the same body each time');
      assert.deepEqual(a.sent, [{ scope: 'key', name: 'k1', threshold: 50 }]);
      assert.deepEqual(
        a.failed.map((f) => [f.error, f.attempts, f.final]),
        [
          ['HTTP 503', 1, false],
          ['HTTP 503', 2, false],
        ],
      );
      assert.equal(a.slept.length, 2);
      assert.ok(a.slept[0]! >= 500 && a.slept[0]! <= 1000, `first wait ${a.slept[0]}`);
      assert.ok(a.slept[1]! >= 1000 && a.slept[1]! <= 2000, `second wait ${a.slept[1]}`);
    } finally {
      await hook.close();
    }
  });

  test('408, 429 and 5xx are retried up to maxAttempts; the back-off doubles to at most 60 s', async () => {
    const statuses = [408, 429, 500, 502];
    const hook = await receiver((n) => statuses[n] ?? 504);
    try {
      const a = alertsFor(hook.url, { maxAttempts: 5, thresholds: [100] });
      a.alerts.observe(reading(1_000_000));
      await settled(a.alerts);
      assert.equal(hook.received.length, 5);
      assert.deepEqual(
        a.failed.map((f) => [f.error, f.attempts, f.final]),
        [
          ['HTTP 408', 1, false],
          ['HTTP 429', 2, false],
          ['HTTP 500', 3, false],
          ['HTTP 502', 4, false],
          ['HTTP 504', 5, true],
        ],
      );
      assert.deepEqual(a.sent, []);
    } finally {
      await hook.close();
    }
    for (let attempt = 1; attempt <= 12; attempt++) {
      const base = Math.min(60_000, 1000 * 2 ** (attempt - 1));
      for (let i = 0; i < 20; i++) {
        const ms = backoffMs(attempt);
        assert.ok(ms >= base / 2 && ms <= base, `attempt ${attempt}: ${ms}`);
      }
    }
  });

  test('a 400 is final at once', async () => {
    const hook = await receiver(() => 400);
    try {
      const a = alertsFor(hook.url);
      a.alerts.observe(reading(600_000));
      await settled(a.alerts);
      assert.equal(hook.received.length, 1);
      assert.deepEqual(a.failed, [{ alert: { scope: 'key', name: 'k1', threshold: 50 }, error: 'HTTP 400', attempts: 1, final: true }]);
      assert.deepEqual(a.slept, []);
      assert.deepEqual(a.sent, []);
    } finally {
      await hook.close();
    }
  });

  test('a network error is retried; a redirect is never followed (final)', async () => {
    const hook = await receiver((n) => (n === 0 ? { status: 302, headers: { location: '/elsewhere' } } : 200));
    try {
      const a = alertsFor(hook.url, { thresholds: [50] });
      a.alerts.observe(reading(600_000));
      await settled(a.alerts);
      assert.equal(hook.received.length, 1, 'the redirect not followed');
      assert.deepEqual(
        a.failed.map((f) => [f.error, f.final]),
        [['HTTP 302 (a redirect, not followed)', true]],
      );
    } finally {
      await hook.close();
    }
    // The receiver is gone: connection refused, retried.
    const gone = alertsFor(hook.url, { thresholds: [50], maxAttempts: 2 });
    gone.alerts.observe(reading(600_000));
    await settled(gone.alerts);
    assert.deepEqual(
      gone.failed.map((f) => [f.attempts, f.final]),
      [
        [1, false],
        [2, true],
      ],
    );
    assert.match(gone.failed[0]!.error, /ECONNREFUSED/);
  });

  test('the default sender gives up a POST after timeoutMs', async () => {
    const hook = await receiver(() => 'hang');
    try {
      const a = alertsFor(hook.url, { thresholds: [50], maxAttempts: 2, timeoutMs: 100 });
      a.alerts.observe(reading(600_000));
      await settled(a.alerts);
      assert.equal(hook.received.length, 2);
      assert.deepEqual(
        a.failed.map((f) => [f.error, f.attempts, f.final]),
        [
          ['timed out after 100 ms', 1, false],
          ['timed out after 100 ms', 2, true],
        ],
      );
    } finally {
      await hook.close();
    }
  });

  test('the headers and the signature: HMAC-SHA256 of the body verifies with the secret', async () => {
    const hook = await receiver();
    try {
      const secret = 'whsec-0123456789abcdef';
      const a = alertsFor(hook.url, { secret, headers: { Authorization: 'Bearer receiver-token-1234', 'Content-Type': 'text/plain' } });
      a.alerts.observe(reading(500_000));
      await settled(a.alerts);
      const [r] = hook.received;
      assert.ok(r);
      assert.equal(r.headers['x-sluice-signature'], `sha256=${createHmac('sha256', secret).update(r.body).digest('hex')}`);
      assert.notEqual(r.headers['x-sluice-signature'], `sha256=${createHmac('sha256', 'another').update(r.body).digest('hex')}`);
      assert.equal(r.headers['x-sluice-alert-id'], 'k1:2025-05:50');
      assert.equal(r.headers['content-type'], 'application/json', 'ours, not the configured one');
      assert.equal(r.headers['authorization'], 'Bearer receiver-token-1234');
    } finally {
      await hook.close();
    }
    // Without a secret: no signature.
    const plain = await receiver();
    try {
      const a = alertsFor(plain.url);
      a.alerts.observe(reading(500_000));
      await settled(a.alerts);
      assert.equal(plain.received[0]?.headers['x-sluice-signature'], undefined);
    } finally {
      await plain.close();
    }
  });

  test('the body: its fields and numbers; left never below 0; several crossings at once sent ascending, one after another', async () => {
    const hook = await receiver(() => ({ status: 200, delayMs: 20 }));
    try {
      const a = alertsFor(hook.url, { thresholds: [50, 80] });
      a.alerts.observe(reading(2_000_001, { scope: 'team', name: 'research', periodId: '@team:research:2025-05', budgetMicros: 2_500_000 }));
      await settled(a.alerts);
      assert.deepEqual(
        hook.received.map((r) => r.json),
        [50, 80].map((threshold) => ({
          type: 'budget.threshold_crossed',
          id: `@team:research:2025-05:${threshold}`,
          scope: 'team',
          name: 'research',
          period: 'month',
          period_resets_at: '2025-06-01T00:00:00.000Z',
          threshold_percent: threshold,
          budget_usd: 2.5,
          spent_usd: 2.000001,
          left_usd: 0.499999,
          at: '2025-05-17T12:30:00.000Z',
        })),
      );
      const day = alertsFor(hook.url, { thresholds: [100, 50, 80] });
      day.alerts.observe(reading(1_750_000, { periodId: 'k1:2025-05-17', period: 'day', resetAt: Date.UTC(2025, 4, 18) }));
      await settled(day.alerts);
      const later = hook.received.slice(2).map((r) => r.json);
      assert.deepEqual(
        later.map((j) => j['threshold_percent']),
        [50, 80, 100],
      );
      assert.equal(hook.mostInFlight(), 1, "a budget's alerts are sent one after another");
      assert.deepEqual(later.map((j) => [j['left_usd'], j['spent_usd'], j['period'], j['period_resets_at']])[2], [0, 1.75, 'day', '2025-05-18T00:00:00.000Z']);
    } finally {
      await hook.close();
    }
  });

  test('close() waits for a send in progress', async () => {
    const hook = await receiver(() => ({ status: 200, delayMs: 150 }));
    try {
      const a = alertsFor(hook.url, { thresholds: [50] });
      a.alerts.observe(reading(500_000));
      while (hook.received.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
      assert.equal(a.alerts.pending, 1);
      const started = Date.now();
      await a.alerts.close(5000);
      assert.ok(Date.now() - started >= 100, 'it waited for the answer');
      assert.deepEqual(a.sent, [{ scope: 'key', name: 'k1', threshold: 50 }]);
      assert.deepEqual(a.failed, []);
      assert.equal(a.alerts.pending, 0);
      a.alerts.observe(reading(900_000));
      assert.equal(a.alerts.pending, 0, 'nothing observed after close');
    } finally {
      await hook.close();
    }
  });

  test('close() is bounded by its timeout when the receiver hangs: what is left is reported final', async () => {
    const hook = await receiver(() => 'hang');
    try {
      const a = alertsFor(hook.url, { thresholds: [50], timeoutMs: 60_000 });
      a.alerts.observe(reading(500_000));
      while (hook.received.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
      const started = Date.now();
      await a.alerts.close(200);
      const took = Date.now() - started;
      assert.ok(took >= 150 && took < 2000, `close took ${took} ms`);
      assert.equal(a.alerts.pending, 0);
      assert.deepEqual(a.failed, [{ alert: { scope: 'key', name: 'k1', threshold: 50 }, error: 'the gateway exited before it was sent', attempts: 1, final: true }]);
      assert.deepEqual(a.sent, []);
    } finally {
      await hook.close();
    }
  });

  test('close() tries an alert waiting for its retry once more, at once', async () => {
    const hook = await receiver((n) => (n === 0 ? 503 : 200));
    try {
      const a = alertsFor(hook.url, { thresholds: [50] }, memoryClaims(), { sleep: () => new Promise(() => undefined) });
      a.alerts.observe(reading(500_000));
      while (a.failed.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
      await a.alerts.close(2000);
      assert.equal(hook.received.length, 2);
      assert.deepEqual(a.sent, [{ scope: 'key', name: 'k1', threshold: 50 }]);
    } finally {
      await hook.close();
    }
  });

  test('after close() a failure is final: no retry', async () => {
    const hook = await receiver(() => ({ status: 503, delayMs: 50 }));
    try {
      const a = alertsFor(hook.url, { thresholds: [50] });
      a.alerts.observe(reading(500_000));
      while (hook.received.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
      await a.alerts.close(2000);
      assert.equal(hook.received.length, 1);
      assert.deepEqual(a.failed, [{ alert: { scope: 'key', name: 'k1', threshold: 50 }, error: 'HTTP 503', attempts: 1, final: true }]);
    } finally {
      await hook.close();
    }
  });

  test('a reading below the first threshold sends nothing and asks no claim', async () => {
    const hook = await receiver();
    try {
      let asked = 0;
      const inner = memoryClaims();
      const a = alertsFor(hook.url, {}, { claim: (id) => (asked++, inner.claim(id)) });
      a.alerts.observe(reading(499_999));
      assert.equal(a.alerts.pending, 0);
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(hook.received.length, 0);
      assert.equal(asked, 0);
      // A hot budget past its thresholds asks the claims once per crossing, not per reading.
      for (let i = 0; i < 100; i++) a.alerts.observe(reading(500_000 + i));
      await settled(a.alerts);
      assert.equal(asked, 1);
      assert.equal(hook.received.length, 1);
    } finally {
      await hook.close();
    }
  });

  test('a new period id sends again', async () => {
    const hook = await receiver();
    try {
      const a = alertsFor(hook.url, { thresholds: [100] });
      a.alerts.observe(reading(1_000_000));
      a.alerts.observe(reading(1_200_000));
      await settled(a.alerts);
      a.alerts.observe(reading(1_300_000));
      a.alerts.observe(reading(1_000_000, { periodId: 'k1:2025-06', resetAt: Date.UTC(2025, 6, 1) }));
      await settled(a.alerts);
      assert.deepEqual(hook.ids(), ['k1:2025-05:100', 'k1:2025-06:100']);
    } finally {
      await hook.close();
    }
  });

  test('a claim that rejects is asked again on the next reading: not lost, not sent twice', async () => {
    const hook = await receiver();
    try {
      const inner = memoryClaims();
      let failures = 1;
      const claims: AlertClaims = { claim: (id) => (failures-- > 0 ? Promise.reject(new Error('the ledger is away: postgres://sluice:hunter2@db:5432/ledger')) : inner.claim(id)) };
      const a = alertsFor(hook.url, { thresholds: [50] }, claims);
      a.alerts.observe(reading(500_000));
      await settled(a.alerts);
      assert.equal(hook.received.length, 0);
      assert.deepEqual(a.failed, [{ alert: { scope: 'key', name: 'k1', threshold: 50 }, error: 'claiming it failed: the ledger is away: postgres://[redacted]@db:5432/ledger', attempts: 0, final: false }]);
      a.alerts.observe(reading(500_000));
      a.alerts.observe(reading(510_000));
      await settled(a.alerts);
      a.alerts.observe(reading(520_000));
      await settled(a.alerts);
      assert.deepEqual(hook.ids(), ['k1:2025-05:50']);
      assert.equal(a.sent.length, 1);
    } finally {
      await hook.close();
    }
  });

  test('the events never carry the URL’s credentials, the secret or the headers’ values', async () => {
    const secret = 'whsec-very-secret-value';
    const token = 'Bearer receiver-token-5678';
    const url = 'https://alerts:pw123@hooks.example.com/budget?token=query-secret';
    const a = alertsFor(url, { thresholds: [50], maxAttempts: 2, secret, headers: { authorization: token } }, memoryClaims(), {
      send: () => Promise.reject(new Error(`POST ${url} failed with ${token} and ${secret}`)),
    });
    a.alerts.observe(reading(500_000));
    await settled(a.alerts);
    assert.equal(a.failed.length, 2);
    const told = JSON.stringify(a.failed);
    for (const hidden of ['pw123', 'query-secret', 'receiver-token-5678', secret]) assert.ok(!told.includes(hidden), `${hidden} in ${told}`);
    assert.match(told, /hooks\.example\.com\/budget/);
  });
});
