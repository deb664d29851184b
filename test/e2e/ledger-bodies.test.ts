// `ledger.bodies` against the built program (dist/, `npx tsc -p tsconfig.json` first) with a real
// SQLite file: off (the default), no body is stored or spooled; on, a JSON answer, a stream and a
// refusal have their bodies stored as the client sent and received them, cut at max_bytes with the
// flag, a key and an e-mail address of the prompt redacted in the store and in the spool's files on
// disk, and GET /requests/{id} shows them; a reload turns them on for the requests after it. The store is read directly (node:sqlite, read-only).
// Last, the bodies' retention: the store's pruneBodies on the gateway's file, and the retention job
// of src/wiring/ledger.ts on a clock of the test's own (bodies deleted, their records kept).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { pino } from 'pino';
import { stringify } from 'yaml';
import { eventually, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { ManualClock } from '../support/manual-clock.ts';
import { openLedgerStore } from '../../src/ledger/open-store.ts';
import type { LedgerRecord } from '../../src/ledger/record.ts';
import { parseConfig } from '../../src/config/load.ts';
import { startLedger } from '../../src/wiring/ledger.ts';
import type { Metrics } from '../../src/telemetry/metrics.ts';

const TOKEN = 'ledger-bodies-admin-0123456789abcdef';
const KEY = 'sk-ledger-bodies-client-0123456789';
const LIMITED = 'sk-ledger-bodies-limited-012345678';
/** What the prompts carry, and must never be found on disk. */
const SECRET = 'sk-proj-E2eLedgerBodies0123456789abcdefXYZ';
const EMAIL = 'ann.smith+ledger@mail.example.com';
const MAX_BYTES = 2048;

let mock: MockUpstream;
before(async () => {
  mock = await startMockUpstream({ record: false });
});
after(async () => {
  await mock?.close();
});

function config(ledger: Record<string, unknown>) {
  return {
    shutdown: { min_drain_secs: 0 },
    providers: [{ name: 'oa', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' }],
    models: [{ name: 'mock-gpt', provider: 'oa' }],
    keys: [
      { name: 'client', key: KEY },
      { name: 'limited', key: LIMITED, limits: { rpm: 1 } },
    ],
    admin: { tokens: [{ name: 'ops', token: TOKEN }] },
    ledger,
  };
}

interface Sent {
  id: string;
  status: number;
  /** The body sent, and the answer as the client received it. */
  request: string;
  response: string;
}

async function chat(gw: GatewayProcess, prompt: string, options: { stream?: boolean; key?: string; chunks?: number } = {}): Promise<Sent> {
  const request = JSON.stringify({ model: 'mock-gpt', messages: [{ role: 'user', content: prompt }], ...(options.stream ? { stream: true } : {}) });
  const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${options.key ?? KEY}`, ...(options.chunks ? mockHeader({ chunks: options.chunks }) : {}) },
    body: request,
  });
  const response = await res.text();
  return { id: res.headers.get('x-request-id')!, status: res.status, request, response };
}

type BodiesRow = { id: string; request_body: string; response_body: string; request_truncated: number; response_truncated: number; encoding: string; ended_at: number };

function query<T>(file: string, sql: string, ...params: string[]): T[] {
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    return db.prepare(sql).all(...params) as T[];
  } finally {
    db.close();
  }
}

/** Waits until the records of `ids` are in the store. */
async function stored(file: string, ids: readonly string[]): Promise<void> {
  await eventually(() => query<{ n: number }>(file, `SELECT COUNT(*) AS n FROM ledger_requests WHERE id IN (${ids.map(() => '?').join(',')})`, ...ids)[0]!.n === ids.length, 15_000, `${ids.length} records in the store`);
}

const bodiesOf = (file: string, id: string): BodiesRow | undefined => query<BodiesRow>(file, 'SELECT * FROM ledger_bodies WHERE id = ?', id).map((row) => ({ ...row }))[0];

/** The spool's segment files, as they are on disk. */
function spoolText(dir: string): string {
  return readdirSync(dir)
    .filter((name) => name.endsWith('.seg'))
    .map((name) => readFileSync(join(dir, name), 'utf8'))
    .join('');
}

/** What the redaction makes of `text`: the secret, the address and the configured pattern's match. */
const redacted = (text: string) => text.replaceAll(SECRET, '[redacted:api_key]').replaceAll(EMAIL, '[redacted:email]').replaceAll('INTERNAL-PROJECT-apollo', '[redacted]');

async function admin(gw: GatewayProcess, path: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${gw.adminUrl}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe('ledger.bodies off (the default)', () => {
  let dir: string;
  let gw: GatewayProcess;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-bodies-off-'));
    gw = await startGateway({ config: config({ sqlite_path: join(dir, 'ledger.sqlite'), spool_dir: join(dir, 'spool') }) });
  });
  after(async () => {
    await gw?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('the records are kept, no body: the table stays empty, the spool holds none, GET /requests/{id} shows none', async () => {
    const sent = [await chat(gw, `off: ${SECRET} ${EMAIL}`), await chat(gw, 'off stream', { stream: true })];
    assert.deepEqual(sent.map((s) => s.status), [200, 200]);
    const file = join(dir, 'ledger.sqlite');
    await stored(file, sent.map((s) => s.id));
    assert.equal(query<{ n: number }>(file, 'SELECT COUNT(*) AS n FROM ledger_bodies')[0]!.n, 0);
    const spool = spoolText(join(dir, 'spool'));
    for (const s of sent) assert.ok(spool.includes(s.id), 'the spool holds the records');
    assert.ok(!spool.includes('"bodies"') && !spool.includes('off stream') && !spool.includes(SECRET), 'and no body');
    const one = await admin(gw, `/requests/${sent[0]!.id}`);
    assert.equal(one.status, 200);
    assert.ok(!('bodies' in (one.body.request as object)));
  });

  test('a reload that turns them on: the requests admitted after it have their bodies', async () => {
    const address = (name: string) => `127.0.0.1:${new URL(gw.urls[name]!).port}`;
    const before = gw.logs.filter((l) => l.event === 'config_reloaded').length;
    const ledger = { sqlite_path: join(dir, 'ledger.sqlite'), spool_dir: join(dir, 'spool'), bodies: { enabled: true } };
    writeFileSync(gw.configFile, stringify({ workers: 1, listeners: [{ name: 'proxy', address: address('proxy'), role: 'proxy' }, { name: 'admin', address: address('admin'), role: 'admin' }], ...config(ledger) }));
    gw.signal('SIGHUP');
    await eventually(() => gw.logs.filter((l) => l.event === 'config_reloaded').length > before, 5000, 'the reload');
    const s = await chat(gw, 'after the reload');
    assert.equal(s.status, 200);
    const file = join(dir, 'ledger.sqlite');
    await stored(file, [s.id]);
    assert.equal(bodiesOf(file, s.id)?.request_body, s.request);
  });
});

describe('ledger.bodies on', () => {
  let dir: string;
  let file: string;
  let gw: GatewayProcess;
  const sent: Record<string, Sent> = {};
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-bodies-on-'));
    file = join(dir, 'ledger.sqlite');
    gw = await startGateway({
      config: config({
        sqlite_path: file,
        spool_dir: join(dir, 'spool'),
        bodies: { enabled: true, max_bytes: MAX_BYTES, redact: [{ pattern: String.raw`internal-project-\w+`, flags: 'i' }] },
      }),
    });
  });
  after(async () => {
    await gw?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a JSON answer: both bodies as sent and received, the key, the address and the configured pattern redacted, in the store and in the spool', async () => {
    const s = await chat(gw, `my key is ${SECRET}, mail ${EMAIL}; see INTERNAL-PROJECT-apollo`);
    assert.equal(s.status, 200);
    assert.ok(s.response.includes(SECRET), 'the client got the answer whole (the mock says the prompt back)');
    sent.json = s;
    await stored(file, [s.id]);
    const row = bodiesOf(file, s.id)!;
    assert.deepEqual(row, { id: s.id, request_body: redacted(s.request), response_body: redacted(s.response), request_truncated: 0, response_truncated: 0, encoding: 'utf8', ended_at: row.ended_at });
    assert.equal(row.ended_at, query<{ ended_at: number }>(file, 'SELECT ended_at FROM ledger_requests WHERE id = ?', s.id)[0]!.ended_at);
    const spool = spoolText(join(dir, 'spool'));
    assert.ok(spool.includes(s.id) && spool.includes('[redacted:api_key]') && spool.includes('[redacted:email]'), 'the spool holds the redacted bodies');
    assert.ok(!spool.includes(SECRET) && !spool.includes(EMAIL) && !spool.includes('INTERNAL-PROJECT-apollo'), 'and never the secret, the address or the pattern');
  });

  test('a stream: the events as the client got them, cut at max_bytes and marked truncated', async () => {
    const s = await chat(gw, 'tell a long story', { stream: true, chunks: 60 });
    assert.equal(s.status, 200);
    const received = Buffer.from(s.response);
    assert.ok(received.length > MAX_BYTES * 2, `a long stream (${received.length} bytes)`);
    assert.ok(s.response.endsWith('data: [DONE]\n\n'));
    sent.stream = s;
    await stored(file, [s.id]);
    const row = bodiesOf(file, s.id)!;
    assert.equal(row.request_body, s.request);
    assert.equal(row.request_truncated, 0);
    assert.equal(row.response_truncated, 1);
    assert.equal(Buffer.byteLength(row.response_body), MAX_BYTES, 'ASCII: cut at max_bytes exactly');
    assert.equal(row.response_body, received.subarray(0, MAX_BYTES).toString(), 'the first bytes the client got');
    assert.ok(row.response_body.startsWith('data: {"id":"chatcmpl-'));
  });

  test('a request body over max_bytes is cut too, on a character, and marked truncated', async () => {
    const s = await chat(gw, 'é'.repeat(3000));
    assert.equal(s.status, 200);
    await stored(file, [s.id]);
    const row = bodiesOf(file, s.id)!;
    assert.equal(row.request_truncated, 1);
    assert.equal(row.response_truncated, 1);
    assert.ok(Buffer.byteLength(row.request_body) <= MAX_BYTES && Buffer.byteLength(row.request_body) >= MAX_BYTES - 1);
    assert.ok(s.request.startsWith(row.request_body), 'the first bytes sent, whole characters');
  });

  test("a refusal (a key's rpm): the error body the client got", async () => {
    const first = await chat(gw, 'one', { key: LIMITED });
    const refused = await chat(gw, `two ${SECRET}`, { key: LIMITED });
    assert.deepEqual([first.status, refused.status], [200, 429]);
    sent.refused = refused;
    await stored(file, [first.id, refused.id]);
    const row = bodiesOf(file, refused.id)!;
    assert.deepEqual([row.request_body, row.response_body, row.response_truncated], [redacted(refused.request), refused.response, 0]);
    assert.match(row.response_body, /rate_limit_exceeded/);
  });

  test('GET /requests/{id} shows the bodies as stored; /requests (the log) does not', async () => {
    assert.ok(sent.json && sent.stream && sent.refused, 'runs after the tests above');
    for (const s of [sent.json, sent.stream, sent.refused]) {
      const one = await admin(gw, `/requests/${s.id}`);
      assert.equal(one.status, 200);
      const row = bodiesOf(file, s.id)!;
      assert.deepEqual((one.body.request as LedgerRecord).bodies, {
        request_body: row.request_body,
        response_body: row.response_body,
        request_truncated: row.request_truncated === 1,
        response_truncated: row.response_truncated === 1,
        encoding: 'utf8',
      });
    }
    const log = await admin(gw, '/requests?limit=50');
    assert.ok((log.body.items as object[]).length >= 3 && (log.body.items as object[]).every((item) => !('bodies' in item)));
  });

  test("the store's pruneBodies on the gateway's file: the bodies go, the records stay", async () => {
    assert.ok(sent.json, 'runs after the tests above');
    const records = () => query<{ n: number }>(file, 'SELECT COUNT(*) AS n FROM ledger_requests')[0]!.n;
    const before = records();
    assert.ok(query<{ n: number }>(file, 'SELECT COUNT(*) AS n FROM ledger_bodies')[0]!.n >= 5);
    const store = await openLedgerStore({ kind: 'sqlite', path: file });
    try {
      assert.ok((await store.pruneBodies(Date.now() + 1000, 1000)) >= 5);
      assert.equal((await store.request(sent.json.id))!.bodies, undefined);
    } finally {
      await store.close();
    }
    assert.equal(query<{ n: number }>(file, 'SELECT COUNT(*) AS n FROM ledger_bodies')[0]!.n, 0);
    assert.equal(records(), before);
  });
});

test('the retention job (src/wiring/ledger.ts): every 10 minutes, bodies older than bodies.retention_days are deleted, their records kept', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-bodies-retention-'));
  try {
    const file = join(dir, 'ledger.sqlite');
    const day = 86_400_000;
    const record = (id: string, endedAgoDays: number): LedgerRecord => {
      const ended = Date.now() - endedAgoDays * day;
      return {
        id,
        kind: 'request',
        started_at: ended - 1000,
        first_byte_ms: 10,
        ended_at: ended,
        key: 'k',
        team: '',
        user: '',
        metadata: null,
        tags: [],
        api: 'openai',
        endpoint: 'chat_completions',
        model: 'm',
        route: 'm',
        provider: 'oa',
        served_model: 'm',
        attempts: [],
        status: 200,
        error: '',
        prompt_tokens: 1,
        completion_tokens: 1,
        cached_tokens: 0,
        cache_write_tokens: 0,
        usage_estimated: false,
        cost_micros: null,
        bytes_in: 2,
        bytes_out: 2,
        listener: 'proxy',
        worker: 0,
        generation: 0,
        bodies: { request_body: '{}', response_body: '{}', request_truncated: false, response_truncated: false, encoding: 'utf8' },
      };
    };
    const seeded = await openLedgerStore({ kind: 'sqlite', path: file });
    await seeded.insert([record('old-1', 10), record('old-2', 8), record('recent', 6), record('today', 0), record('ancient', 100)]);
    await seeded.close();
    const settings = (bodies: Record<string, unknown>) =>
      parseConfig(JSON.stringify({ listeners: [{ name: 'proxy', address: '127.0.0.1:0', role: 'proxy' }], ledger: { sqlite_path: file, spool_dir: join(dir, 'spool'), retention_days: 90, bodies } }), join(dir, 'sluice.yaml'));
    const ids = (table: string) => query<{ id: string }>(file, `SELECT id FROM ${table} ORDER BY id`).map((r) => r.id);
    const run = async (bodies: Record<string, unknown>, check: () => boolean) => {
      const clock = new ManualClock();
      const metrics = { observeLedger: () => undefined } as unknown as Metrics;
      const ledger = (await startLedger({ config: settings(bodies), logger: pino({ level: 'silent' }), metrics, clock, place: { worker: 0, generation: 0 }, prunes: true }))!;
      try {
        await eventually(() => (ledger.info() as { store_open: boolean }).store_open, 5000, 'the store open');
        const before = ids('ledger_bodies');
        clock.advance(9 * 60_000);
        await new Promise((resolve) => setTimeout(resolve, 200));
        assert.deepEqual(ids('ledger_bodies'), before, 'nothing before the first run');
        clock.advance(60_000);
        await eventually(check, 5000, 'the retention run');
      } finally {
        const flushed = ledger.flush(0, true);
        clock.advance(1);
        await flushed;
      }
    };
    // The record of 100 days went with its bodies (records: 90 days); then the bodies of 8 and 10 days (bodies: 7).
    await run({ enabled: true, retention_days: 7 }, () => ids('ledger_bodies').join() === 'recent,today');
    assert.deepEqual(ids('ledger_requests'), ['old-1', 'old-2', 'recent', 'today'], 'the records kept (but the one past ledger.retention_days)');
    // Kept as long as the records (0), even with bodies now off: nothing more goes.
    await run({ enabled: false, retention_days: 0 }, () => true);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.deepEqual(ids('ledger_bodies'), ['recent', 'today']);
    // Bodies off, a retention of 5 days: the bodies stored before still go.
    await run({ enabled: false, retention_days: 5 }, () => ids('ledger_bodies').join() === 'today');
    assert.deepEqual(ids('ledger_requests'), ['old-1', 'old-2', 'recent', 'today']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
