// Hostile input on the usage ledger's paths (R1: nothing a client sends ends the process or leaves a
// count raised), against the built program with a real SQLite file:
//  - the admin API's query strings of GET /usage, /requests and /requests/{id}: random and
//    adversarial parameters (huge, negative, not numbers, dates far away, repeated, unknown, unicode,
//    NUL, long, broken percent-encodings, SQL-looking text, random cursors). Each answer is the one a
//    model of the documented parameters expects: 200 (every item within the range and the filters),
//    400 `invalid_query` naming a parameter, 404 for an unknown id; never a 500. SQL text is a value,
//    never SQL: the store's rows and tables are what they were.
//  - the values a client chooses that reach the ledger and the budgets: OpenAI's `user` and
//    Anthropic's `metadata.user_id` of any JSON type (huge, NUL, lone surrogates, control characters,
//    markup), `x-sluice-tags` headers (many, long, commas only, non-ASCII bytes) and model names.
//    Each request is answered as its contract says; every one that reached its admission is shipped
//    with its values capped as documented (user and model <= 256 characters, <= 16 tags of <= 64); a per-user
//    budget is that user's, whatever the text; the lag goes back to 0, no spool line is corrupt,
//    nothing stays in flight.
//  - teams through the admin API (etcd): random team documents under random names are 200/201 or
//    400, never 500; what the answers said was written is what is stored.
// Reproducible: a fixed seed (SLUICE_FUZZ_SEED) and SLUICE_FUZZ_RUNS runs per property (default 200).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { request, type IncomingHttpHeaders } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import fc from 'fast-check';
import { eventually, metricValue, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { assertCallerError, assertOpenAiError, assertSettled } from '../support/reliability.ts';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';

const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 20261204);
const RUNS = Number(process.env.SLUICE_FUZZ_RUNS ?? 200);
const params = (numRuns = RUNS): fc.Parameters<unknown> => ({ seed: SEED, numRuns, verbose: 1, endOnFailure: true });

const TOKEN = 'ledger-fuzz-admin-0123456789abcdef';
const KEYS = { 'fz-member': 'sk-ledger-fuzz-member-000001', 'fz-solo': 'sk-ledger-fuzz-solo-0000001', 'fz-tight': 'sk-ledger-fuzz-tight-000001' } as const;
type KeyName = keyof typeof KEYS;
/** The documented caps of the ledger's client-chosen values. */
const USER_MAX = 256;
const MAX_TAGS = 16;
const TAG_MAX = 64;
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

let mock: MockUpstream;
let gw: GatewayProcess;
let dir: string;
let file: string;

before(async () => {
  console.log(`ledger fuzz: seed ${SEED}, ${RUNS} runs per property (set SLUICE_FUZZ_SEED / SLUICE_FUZZ_RUNS to change)`);
  mock = await startMockUpstream({ record: false });
  dir = mkdtempSync(join(tmpdir(), 'sluice-ledger-fuzz-'));
  file = join(dir, 'ledger.sqlite');
  gw = await startGateway({
    config: {
      workers: 1,
      shutdown: { min_drain_secs: 0 },
      providers: [
        { name: 'oa', type: 'openai', base_url: `${mock.url}/v1` },
        { name: 'an', type: 'anthropic', base_url: mock.url },
        { name: 'local', type: 'echo' },
      ],
      models: [
        { name: 'mock-gpt', provider: 'oa' },
        { name: 'claude-mock', provider: 'an' },
        { name: 'tight-gpt', provider: 'oa' },
        { name: 'echo-*', provider: 'local' },
      ],
      // $1 per million tokens: the fuzz never spends the budgets below. tight-gpt: $1 for 1,000 tokens.
      prices: { 'mock-gpt': { input: 1, output: 1 }, 'claude-mock': { input: 1, output: 1 }, 'tight-gpt': { input: 1000, output: 1000 } },
      teams: [{ name: 'fz-team', budget: { usd: 1000 }, user_budget: { usd: 100, period: 'day' }, metadata: { owner: 'fuzz' } }],
      keys: [
        { name: 'fz-member', key: KEYS['fz-member'], team: 'fz-team' },
        { name: 'fz-solo', key: KEYS['fz-solo'], user_budget: { usd: 100, period: 'day' } },
        { name: 'fz-tight', key: KEYS['fz-tight'], user_budget: { usd: 1, period: 'day' } },
      ],
      // Every request holds a place of 64: a place leaked would show as a 429 once 64 had.
      limits: { global: { concurrent: 64 } },
      ledger: { store: 'sqlite', sqlite_path: file, spool_dir: join(dir, 'spool') },
      admin: { tokens: [{ name: 'ops', token: TOKEN }] },
      log: { access_log: false },
    },
  });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------
// Exchanges, with the request target and the header bytes exactly as written.

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

/** One request on a connection of its own; `target` is sent as it is (no URL parser resolves or re-encodes it). */
function exchange(base: string, method: string, target: string, headers: Record<string, string | string[]>, body?: Buffer): Promise<Reply> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, method, path: target, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

const adminGet = (target: string) => exchange(gw.adminUrl, 'GET', target, { authorization: `Bearer ${TOKEN}` });

/** Rows of the SQLite store, read with a connection of the test's own (read-only). */
function query(sql: string, ...values: string[]): Record<string, unknown>[] {
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    return db.prepare(sql).all(...values) as Record<string, unknown>[];
  } finally {
    db.close();
  }
}

const rowCount = () => Number(query('SELECT COUNT(*) AS n FROM ledger_requests')[0]!.n);
const tables = () => query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").map((r) => String(r.name));

interface StoredRow {
  id: string;
  key: string;
  user: string;
  tags: string[];
  model: string;
  api: string;
  status: number;
  error: string;
}

function storedRows(ids: readonly string[]): Map<string, StoredRow> {
  const out = new Map<string, StoredRow>();
  if (!existsSync(file)) return out;
  for (let i = 0; i < ids.length; i += 400) {
    const part = ids.slice(i, i + 400);
    for (const row of query(`SELECT id, key, "user", tags, model, api, status, error FROM ledger_requests WHERE id IN (${part.map(() => '?').join(',')})`, ...part)) {
      out.set(String(row.id), { ...(row as unknown as StoredRow), tags: JSON.parse(String(row.tags)) as string[], status: Number(row.status) });
    }
  }
  return out;
}

/** Waits until every one of `ids` is in the store. */
async function shipped(ids: readonly string[], timeoutMs = 20_000): Promise<Map<string, StoredRow>> {
  let rows = new Map<string, StoredRow>();
  await eventually(
    () => {
      rows = storedRows(ids);
      return rows.size === ids.length;
    },
    timeoutMs,
    `${ids.length} records shipped`,
  ).catch((error: unknown) => {
    throw new Error(`${(error as Error).message}; missing: ${ids.filter((id) => !rows.has(id)).slice(0, 10).join(', ')}`);
  });
  return rows;
}

// ---------------------------------------------------------------------------------------------
// What the store keeps of a client's text, as documented: capped, and (SQLite or PostgreSQL alike)
// with a lone surrogate or a NUL made U+FFFD.

const kept = (text: string) => text.toWellFormed().replaceAll('\u0000', '\uFFFD');

/** The user a record may show for `sent` (a string): its first 256 characters (a pair cut there may lose its half). */
function keptUsers(sent: string): string[] {
  const capped = sent.slice(0, USER_MAX);
  const out = [kept(capped)];
  if (sent.length > USER_MAX && /[\uD800-\uDBFF]$/.test(capped)) out.push(kept(capped.slice(0, -1)));
  return out;
}

/** The tags of `x-sluice-tags` (every header's value joined): split at commas, trimmed, empty ones left out, at most 16 of at most 64 characters. */
function tagsOf(values: readonly string[]): string[] {
  const tags: string[] = [];
  for (const part of values.join(',').split(',')) {
    const tag = part.trim();
    if (tag === '') continue;
    tags.push(kept(tag.slice(0, TAG_MAX)));
    if (tags.length === MAX_TAGS) break;
  }
  return tags;
}

// ---------------------------------------------------------------------------------------------
// The query strings: a model of the documented parameters, as the oracle.

type Route = 'usage' | 'requests';
const USAGE_PARAMS = ['from', 'to', 'group_by', 'bucket'];
const TEXT_FILTERS = ['key', 'team', 'model', 'provider', 'user', 'error', 'tag'] as const;
const REQUESTS_PARAMS = ['from', 'to', ...TEXT_FILTERS, 'status', 'errors', 'limit', 'cursor'];
const GROUPS = ['key', 'team', 'model', 'provider', 'user'];

type Verdict = { kind: 'valid'; ms?: number } | { kind: 'invalid' } | { kind: 'either' };
const VALID: Verdict = { kind: 'valid' };
const INVALID: Verdict = { kind: 'invalid' };
const EITHER: Verdict = { kind: 'either' };

/** Days in a month of the proleptic Gregorian calendar. */
function daysIn(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

/**
 * An instant as documented: epoch milliseconds, or ISO 8601 (`2025-05-01`, `2025-05-01T12:00:00Z`,
 * UTC without an offset). Other ISO 8601 forms (week dates, basic format, a leap second, year 0) and
 * epoch numbers beyond 15 digits are not promised either way.
 */
function instant(value: string): Verdict {
  if (/^\d+$/.test(value)) return value.length <= 15 ? { kind: 'valid', ms: Number(value) } : EITHER;
  // A `+` written unencoded in a query string arrives as a space.
  const text = value.replace(/ (\d{2}:\d{2})$/, '+$1');
  const m = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:\d{2})?)?$/.exec(text);
  if (!m) return /^[+-]?\d{4}/.test(text) ? EITHER : INVALID;
  const [year, month, day, hour, minute, second] = [m[1], m[2], m[3], m[4] ?? '0', m[5] ?? '0', m[6] ?? '0'].map(Number) as [number, number, number, number, number, number];
  if (year === 0 || second === 60) return EITHER;
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month) || hour > 23 || minute > 59 || second > 59) return INVALID;
  const ms = Date.parse(m[4] === undefined ? `${text}T00:00:00Z` : m[8] === undefined ? `${text}Z` : text);
  return Number.isNaN(ms) ? EITHER : { kind: 'valid', ms };
}

/** The cursor a page of this API gave (`next_cursor`), and the `from` of that page. */
let givenCursor = { text: '', from: 0 };

/** A cursor: the one the API gave is valid; any other that decodes as the API's form is not promised either way; the rest is not a cursor. */
function cursor(value: string): Verdict {
  if (value === givenCursor.text) return { kind: 'valid', ms: givenCursor.from };
  try {
    const decoded: unknown = JSON.parse(Buffer.from(value, 'base64url').toString('utf8'));
    if (Array.isArray(decoded) && decoded.length === 3) return EITHER;
  } catch {
    // not JSON
  }
  return /^[A-Za-z0-9_-]+$/.test(value) && value.length > 8 ? EITHER : INVALID;
}

function whole(value: string, min: number, max: number): Verdict {
  if (!/^\d+$/.test(value)) return INVALID;
  if (value.length > 6) return Number(value) >= min && Number(value) <= max ? EITHER : INVALID;
  return Number(value) >= min && Number(value) <= max ? VALID : INVALID;
}

function verdictOf(route: Route, name: string, value: string): Verdict {
  switch (name) {
    case 'from':
    case 'to':
      return instant(value);
    case 'group_by':
      return value === '' || value.split(',').every((g) => GROUPS.includes(g.trim())) ? VALID : INVALID;
    case 'bucket':
      return value === 'hour' || value === 'day' ? VALID : INVALID;
    case 'limit':
      return whole(value, 1, 500);
    // `error`: the OpenAPI document's "every status >= 400".
    case 'status':
      return value === 'error' ? VALID : whole(value, 100, 599);
    case 'errors':
      return ['true', 'false', '1', '0'].includes(value) ? VALID : ['TRUE', 'FALSE', 'True', 'False'].includes(value) ? EITHER : INVALID;
    case 'cursor':
      return cursor(value);
    default:
      return route === 'requests' && (TEXT_FILTERS as readonly string[]).includes(name) ? VALID : INVALID;
  }
}

interface Expectation {
  /** 200, 400, or either of them. */
  status: 200 | 400 | 'either';
  /** A 400 names one of these. */
  names: Set<string>;
  /** The range, when the oracle knows it (`to` absent: now). */
  from?: number;
  to?: number;
}

/** What the gateway must answer for the parameters the server reads (`pairs`, decoded). */
function expectationOf(route: Route, pairs: readonly [string, string][], now: number): Expectation {
  const known = route === 'usage' ? USAGE_PARAMS : REQUESTS_PARAMS;
  const bad = new Set<string>();
  const maybe = new Set<string>();
  const values = new Map<string, Verdict>();
  for (const name of new Set(pairs.map(([n]) => n))) {
    const given = pairs.filter(([n]) => n === name);
    if (!known.includes(name) || given.length > 1) {
      bad.add(name);
      continue;
    }
    const verdict = verdictOf(route, name, given[0]![1]);
    values.set(name, verdict);
    if (verdict.kind === 'invalid') bad.add(name);
    else if (verdict.kind === 'either') maybe.add(name);
  }
  // `status=error` with `errors=false` asks for nothing that can be.
  const single = (name: string) => (values.get(name)?.kind === 'valid' ? pairs.find(([n]) => n === name)![1] : undefined);
  if (single('status') === 'error' && (single('errors') === 'false' || single('errors') === '0')) {
    bad.add('errors');
    bad.add('status');
  }
  // The range: [from, to), each given or defaulted (to: now; from: the cursor's page's, else 7 days or 24 hours before to).
  const ms = (name: string) => {
    const v = values.get(name);
    return v?.kind === 'valid' ? v.ms : undefined;
  };
  const unsure = (name: string) => values.has(name) && values.get(name)!.kind !== 'valid';
  let from: number | undefined;
  let to: number | undefined;
  if (!bad.has('from') && !bad.has('to') && !unsure('from') && !unsure('to') && !(values.has('cursor') && !values.has('from') && unsure('cursor'))) {
    const toGiven = values.has('to');
    to = toGiven ? ms('to')! : now;
    from = values.has('from') ? ms('from')! : values.get('cursor')?.kind === 'valid' ? givenCursor.from : to - (route === 'usage' ? 7 * DAY : DAY);
    // `to` defaulted to the server's clock: a `from` within a second of now may fall either side.
    if (!toGiven && Math.abs(from - now) < 1000) maybe.add('from');
    else if (from >= to) bad.add('from');
  } else {
    maybe.add('from');
  }
  const names = new Set([...bad, ...maybe]);
  if (names.has('from')) names.add('to');
  if (bad.size > 0) return { status: 400, names };
  if (maybe.size > 0) return { status: 'either', names };
  return { status: 200, names, from: from!, to: to! };
}

// Generators of parameters: valid values, invalid ones, and values no parameter should choke on.
const NOW = Date.now();
const sqlText = fc.constantFrom(
  "' OR 1=1 --",
  "'; DELETE FROM ledger_requests; --",
  '"; DROP TABLE ledger_requests; --',
  "x') UNION SELECT id, id, id FROM ledger_requests --",
  "%' OR '1'='1",
  '1; UPDATE ledger_requests SET status = 0',
  "key' OR key LIKE '%",
  '*/ DELETE FROM ledger_claims /*',
);
const oddText = fc.oneof(
  fc.string({ maxLength: 20 }),
  fc.string({ unit: 'binary', maxLength: 12 }),
  fc.constantFrom('', ' ', '\u0000', 'a\u0000b', '\uD800', '\uDFFF', '\u202E', '\uFEFF', '😀', 'null', 'undefined', 'NaN', '-0', '1e308', '0x1F', '__proto__', 'constructor', '[]', '{}', '%', '%zz', '<b>', '\\'),
  fc.integer({ min: 500, max: 3000 }).map((n) => 'x'.repeat(n)),
  sqlText,
);
const number = fc.oneof(
  fc.integer({ min: -1000, max: 1000 }).map(String),
  fc.constantFrom('0', '-1', '1e3', '1.5', 'NaN', 'Infinity', '-Infinity', '9007199254740993', '1'.repeat(40), '00000000000050', '+5', ' 5', '5 ', '٥', '0b1'),
  fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }).map(String),
);
const isoDate = (min: string, max: string) => fc.date({ min: new Date(min), max: new Date(max), noInvalidDate: true });
const instantText = fc.oneof(
  { weight: 3, arbitrary: fc.integer({ min: 0, max: NOW + 365 * DAY }).map(String) },
  { weight: 2, arbitrary: isoDate('0001-01-01', '9999-12-31').map((d) => d.toISOString().slice(0, 10)) },
  { weight: 3, arbitrary: isoDate(new Date(NOW - 30 * DAY).toISOString(), new Date(NOW + 30 * DAY).toISOString()).map((d) => d.toISOString()) },
  { weight: 1, arbitrary: isoDate('1970-01-01', '2100-01-01').map((d) => d.toISOString().slice(0, 16)) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(isoDate('1970-01-01', '2100-01-01'), fc.constantFrom('+', '-'), fc.integer({ min: 0, max: 23 }), fc.integer({ min: 0, max: 59 }), fc.integer({ min: 1, max: 9 }))
      .map(([d, sign, h, m, digits]) => `${d.toISOString().slice(0, 19)}.${'7'.repeat(digits)}${sign}${String(h).padStart(2, '0')}:${String(m).padStart(2, '0')}`),
  },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      'yesterday', '-1', '-86400000', 'NaN', '1e12', '2025-02-30', '2024-02-29', '2025-02-29', '2025-13-01', '2025-00-10', '2025-01-01T24:00:00Z',
      '2025-01-01T12:60Z', '2025-01-01T12:00:60Z', '2025-1-1', '01/02/2025', 'Infinity', '0x10', '2025-W01', '20250101', '+002025-01-01',
      '2025-01-01T00:00:00+25:00', '2025-01-01T00:00:00+02:00', '2025-01-01T00:00:00 02:00', '0000-01-01', '99999999999999999999', '275760-09-13',
      '1970-01-01', '1969-12-31T23:59:59.999Z', '9999-12-31T23:59:59.999999999Z',
    ),
  },
  { weight: 1, arbitrary: number },
  { weight: 1, arbitrary: oddText },
);
const groupByText = fc.oneof(
  fc.subarray(GROUPS, { minLength: 1 }).map((g) => g.join(',')),
  fc.array(fc.constantFrom(...GROUPS, ' key', 'team ', 'KEY', '', 'bucket', 'day', 'id', '*', "key'--", 'user;'), { maxLength: 6 }).map((g) => g.join(',')),
  oddText,
);

/** One parameter: a name (a known one mostly) and a value suited to it (or not). */
const paramFor = (route: Route) => {
  const names = route === 'usage' ? USAGE_PARAMS : REQUESTS_PARAMS;
  const valueFor = (name: string): fc.Arbitrary<string> => {
    switch (name) {
      case 'from':
      case 'to':
        return instantText;
      case 'group_by':
        return groupByText;
      case 'bucket':
        return fc.oneof(fc.constantFrom('hour', 'day', 'HOUR', 'week', 'minute', ''), oddText);
      case 'limit':
        return fc.oneof(fc.integer({ min: 1, max: 500 }).map(String), number, oddText);
      case 'status':
        return fc.oneof(fc.constantFrom('200', '429', '404', '100', '599', '99', '600', 'error'), number, oddText);
      case 'errors':
        return fc.oneof(fc.constantFrom('true', 'false', '1', '0', 'yes', 'no', '2', 'TRUE', 'null'), oddText);
      case 'cursor':
        return fc.oneof(
          fc.constant('GIVEN'),
          fc.base64String({ maxLength: 60 }),
          fc.uint8Array({ maxLength: 40 }).map((b) => Buffer.from(b).toString('base64url')),
          // The cursor's form with any values (a `from` within the dates JavaScript can write: see the todo below).
          fc
            .tuple(fc.oneof(fc.integer(), fc.maxSafeInteger(), fc.constant(-1)), fc.oneof(fc.string({ maxLength: 20 }), fc.integer()), fc.oneof(fc.constant(null), fc.integer({ min: -8.64e15, max: 8.64e15 }), fc.double()))
            .map((v) => Buffer.from(JSON.stringify(v)).toString('base64url')),
          oddText,
        );
      case 'user':
      case 'key':
      case 'team':
      case 'model':
      case 'tag':
        return fc.oneof(fc.constantFrom('fz-member', 'fz-solo', 'fz-tight', 'fz-team', 'mock-gpt', 'tight-gpt', 'echo-seed', 'seed-user', 'seed-poor', "o'brien", 'seed-tag', 'budget_exceeded', 'oa', 'local'), sqlText, oddText);
      default:
        return oddText;
    }
  };
  return fc.oneof(
    { weight: 8, arbitrary: fc.constantFrom(...names).chain((name) => valueFor(name).map((value): [string, string] => [name, value])) },
    {
      weight: 1,
      arbitrary: fc.tuple(
        fc.oneof(fc.constantFrom('', 'limit ', 'Limit', 'from[]', 'user_id', 'tags', 'group', 'bucket_size', '__proto__', 'constructor', 'cursor\u0000', 'ключ', route === 'usage' ? 'key' : 'group_by'), fc.string({ maxLength: 10 })),
        oddText,
      ),
    },
  );
};

/** How one name or value is written in the query string: percent-encoded one way or another, or broken. */
const writing = fc.constantFrom('encoded', 'encoded', 'encoded', 'plus', 'lower', 'raw', 'broken');
const BROKEN = ['%', '%z', '%zz', '%E0%A4', '%C3%28', '%FF', '%%', '%2', '%u0041'];

/** encodeURIComponent, a lone surrogate included (as the three bytes of its code, which no UTF-8 decoder takes). */
function percentEncode(text: string): string {
  return text.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]|[^\uD800-\uDFFF]+|[\uD800-\uDBFF][\uDC00-\uDFFF]/g, (part) => {
    if (part.isWellFormed()) return encodeURIComponent(part);
    const u = part.charCodeAt(0);
    return [0xe0 | (u >> 12), 0x80 | ((u >> 6) & 0x3f), 0x80 | (u & 0x3f)].map((b) => `%${b.toString(16).toUpperCase()}`).join('');
  });
}

function write(text: string, how: string, seed: number): string {
  const encoded = percentEncode(text);
  switch (how) {
    case 'plus':
      return encoded.replaceAll('%20', '+');
    case 'lower':
      return encoded.replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase());
    case 'raw':
      // Written as it is where the query's syntax allows (a `+` then reads as a space).
      return /^[A-Za-z0-9\-._~:+,'!*()/@$;]*$/.test(text) ? text : encoded;
    case 'broken': {
      const at = seed % (encoded.length + 1);
      return `${encoded.slice(0, at)}${BROKEN[seed % BROKEN.length]}${encoded.slice(at)}`;
    }
    default:
      return encoded;
  }
}

const instantMs = (text: string) => (/^\d+$/.test(text) ? Number(text) : Date.parse(text));
/** A range of two valid instants (from >= to is a mistake too). */
const validInstant = fc.oneof(fc.integer({ min: 0, max: NOW + 365 * DAY }).map(String), isoDate('1970-01-01', '2100-01-01').map((d) => d.toISOString()));
const rangePair = fc.tuple(validInstant, validInstant, fc.nat(3)).map(([a, b, order]): [string, string][] => {
  // Mostly in order (a 200 to check), now and then as drawn.
  const [from, to] = order > 0 && instantMs(a) > instantMs(b) ? [b, a] : [a, b];
  return [
    ['from', from],
    ['to', to],
  ];
});

const queryOf = (route: Route) =>
  fc
    .tuple(fc.array(fc.tuple(paramFor(route), writing, writing, fc.nat(), fc.boolean()), { maxLength: 6 }), fc.option(rangePair, { freq: 3, nil: undefined }), writing)
    .map(([items, range, how]) => (range === undefined ? items : [...items.filter(([[n]]) => n !== 'from' && n !== 'to'), ...range.map((pair) => [pair, 'encoded', how, 0, false] as (typeof items)[number])]))
    .chain((items) =>
      // Now and then a parameter twice.
      fc.oneof({ weight: 5, arbitrary: fc.constant(items) }, { weight: 1, arbitrary: fc.constant(items.length > 0 ? [...items, items[0]!] : items) }),
    )
    .map((items) =>
      items
        .map(([[name, value], nameHow, valueHow, seed, bare]) => {
          const v = value === 'GIVEN' ? givenCursor.text : value;
          return bare && v === '' ? write(name, nameHow, seed) : `${write(name, nameHow, seed)}=${write(v, valueHow, seed >> 3)}`;
        })
        .join('&'),
    )
    // Under the request line's limit (the 431 side is errors.test.ts's).
    .filter((q) => q.length < 7000);

/** The error body of a 400: `invalid_query`, its message naming one of `names` as "<name>: …". */
function assertNames(reply: Reply, names: Set<string>, context: string): void {
  const error = assertOpenAiError(reply.text, context);
  assert.equal(error.code, 'invalid_query', `${context}: ${reply.text.slice(0, 300)}`);
  assert.equal(error.type, 'invalid_request_error', context);
  assert.ok([...names].some((n) => error.message.startsWith(`${n}: `)), `${context}: the message names none of ${JSON.stringify([...names])}: ${error.message.slice(0, 300)}`);
}

interface Seeded {
  id: string;
  key: KeyName;
  user: string;
  tags: string[];
  model: string;
  status: number;
}

describe('the admin API\'s query strings (GET /usage, /requests, /requests/{id})', () => {
  const seeded: Seeded[] = [];
  let seededFrom = 0;
  let rowsBefore = 0;
  let tablesBefore: string[] = [];

  before(async () => {
    seededFrom = Date.now() - 1000;
    const plan: { key: KeyName; user: string; tags: string; model: string }[] = [
      { key: 'fz-member', user: 'seed-user', tags: 'seed-tag,a', model: 'mock-gpt' },
      { key: 'fz-member', user: "o'brien", tags: 'b', model: 'echo-seed' },
      { key: 'fz-solo', user: 'seed-user', tags: '', model: 'mock-gpt' },
      { key: 'fz-solo', user: '', tags: 'seed-tag', model: 'echo-seed' },
      { key: 'fz-solo', user: "' OR 1=1 --", tags: "' OR 1=1 --", model: 'mock-gpt' },
    ];
    for (let round = 0; round < 3; round++) {
      for (const p of plan) {
        const body = Buffer.from(JSON.stringify({ model: p.model, max_tokens: 5, messages: [{ role: 'user', content: 'seed' }], ...(p.user ? { user: p.user } : {}) }));
        const reply = await exchange(gw.proxyUrl, 'POST', '/v1/chat/completions', { authorization: `Bearer ${KEYS[p.key]}`, 'content-type': 'application/json', 'x-sluice-tags': p.tags }, body);
        assert.equal(reply.status, 200, reply.text);
        seeded.push({ id: String(reply.headers['x-request-id']), key: p.key, user: p.user, tags: tagsOf([p.tags]), model: p.model, status: 200 });
      }
    }
    // Two records of errors: a per-user budget spent by the first request refuses the second.
    for (const expected of [200, 429]) {
      const body = Buffer.from(JSON.stringify({ model: 'tight-gpt', max_tokens: 1, messages: [{ role: 'user', content: 'seed' }], user: 'seed-poor' }));
      const reply = await exchange(gw.proxyUrl, 'POST', '/v1/chat/completions', { authorization: `Bearer ${KEYS['fz-tight']}`, 'content-type': 'application/json', ...mockHeader({ usage: { prompt: 10, completion: 990 } }) }, body);
      assert.equal(reply.status, expected, reply.text);
      seeded.push({ id: String(reply.headers['x-request-id']), key: 'fz-tight', user: 'seed-poor', tags: [], model: 'tight-gpt', status: expected });
    }
    await shipped(seeded.map((s) => s.id));
    // A cursor as the API gives it, with the `from` of its page.
    const page = await adminGet(`/requests?limit=2&from=${seededFrom}`);
    assert.equal(page.status, 200, page.text);
    givenCursor = { text: String((JSON.parse(page.text) as { next_cursor: string }).next_cursor), from: seededFrom };
    assert.ok(givenCursor.text.length > 0);
    rowsBefore = rowCount();
    tablesBefore = tables();
  });

  for (const route of ['usage', 'requests'] as const) {
    test(`GET /${route}: 200 within the range and the filters, or 400 invalid_query naming a parameter; never a 500`, async () => {
      const seen = new Map<string, number>();
      let pagesWithItems = 0;
      await fc.assert(
        fc.asyncProperty(queryOf(route), async (q) => {
          const target = `/${route}${q === '' ? '' : `?${q}`}`;
          const now = Date.now();
          const pairs = [...new URLSearchParams(q)];
          const expected = expectationOf(route, pairs, now);
          const reply = await adminGet(target);
          const done = Date.now();
          seen.set(`${reply.status} (expected ${expected.status})`, (seen.get(`${reply.status} (expected ${expected.status})`) ?? 0) + 1);
          const context = `GET ${target.slice(0, 300)}`;
          assert.ok(reply.status === 200 || reply.status === 400, `${context}: ${reply.status} ${reply.text.slice(0, 300)}`);
          if (expected.status !== 'either') assert.equal(reply.status, expected.status, `${context}: ${reply.text.slice(0, 300)}`);
          if (reply.status === 400) return assertNames(reply, expected.names, context);
          const body = JSON.parse(reply.text) as Record<string, unknown>;
          if (route === 'usage') checkUsage(body, pairs, expected, context);
          else if (checkRequests(body, pairs, expected, done, context) > 0) pagesWithItems++;
        }),
        params(),
      );
      console.log(`ledger fuzz /${route}: ${JSON.stringify(Object.fromEntries([...seen].sort()))}`);
      assert.ok([...seen.keys()].some((k) => k.startsWith('200')) && [...seen.keys()].some((k) => k.startsWith('400')), 'both answers were seen');
      if (route === 'requests') assert.ok(pagesWithItems > 0, 'some pages had records to check against the filters');
      assert.equal(rowCount(), rowsBefore, 'no row was added or removed by a query');
      assert.deepEqual(tables(), tablesBefore, 'every table is still there');
      assert.deepEqual(storedRows(seeded.map((s) => s.id)).size, seeded.length, 'the seeded records are untouched');
      assert.ok(!gw.logs.some((l) => l.event === 'handler_error'), 'no handler failed');
      await assertSettled(gw, `after /${route}`);
    });
  }

  /** A 200 of /usage: its range and grouping as asked, its totals the sum of its rows. */
  function checkUsage(body: Record<string, unknown>, pairs: [string, string][], expected: Expectation, context: string): void {
    const groupText = pairs.find(([n]) => n === 'group_by')?.[1] ?? '';
    const groups = groupText === '' ? [] : [...new Set(groupText.split(',').map((g) => g.trim()))];
    assert.deepEqual([...(body.group_by as string[])].sort(), [...groups].sort(), context);
    if (expected.from !== undefined && pairs.some(([n]) => n === 'to')) {
      assert.equal(body.from, new Date(expected.from).toISOString(), context);
      assert.equal(body.to, new Date(expected.to!).toISOString(), context);
    }
    const rows = body.rows as Record<string, number | string>[];
    const totals = body.totals as Record<string, number>;
    assert.equal(totals.requests, rows.reduce((n, r) => n + Number(r.requests), 0), context);
    for (const row of rows) {
      assert.ok(Number(row.requests) >= 1, context);
      for (const g of groups) assert.equal(typeof row[g], 'string', `${context}: row without ${g}`);
    }
  }

  /** A 200 of /requests: every item within the range and each filter, at most `limit`; returns how many items. */
  function checkRequests(body: Record<string, unknown>, pairs: [string, string][], expected: Expectation, done: number, context: string): number {
    const items = body.items as Record<string, unknown>[];
    const given = new Map(pairs);
    const limit = given.has('limit') ? Number(given.get('limit')) : 50;
    assert.ok(items.length <= limit, `${context}: ${items.length} items for limit ${limit}`);
    assert.ok(body.next_cursor === null || typeof body.next_cursor === 'string', context);
    for (const item of items) {
      const started = Number(item.started_at);
      if (expected.from !== undefined) {
        assert.ok(started >= expected.from, `${context}: ${item.id} started ${started}, before from ${expected.from}`);
        assert.ok(started < (given.has('to') ? expected.to! : done), `${context}: ${item.id} started ${started}, not before to`);
      }
      for (const name of TEXT_FILTERS) {
        const value = given.get(name);
        if (value === undefined) continue;
        if (name === 'tag') assert.ok((item.tags as string[]).includes(value), `${context}: ${item.id} has not tag ${JSON.stringify(value)}`);
        else assert.equal(item[name], value, `${context}: ${item.id}'s ${name}`);
      }
      if (given.get('status') === 'error') assert.ok(Number(item.status) >= 400, `${context}: ${item.id} has status ${String(item.status)}`);
      else if (given.has('status')) assert.equal(item.status, Number(given.get('status')), context);
      const errors = given.get('errors');
      if (errors !== undefined) assert.equal(Number(item.status) >= 400, errors === 'true' || errors === '1' || errors === 'TRUE' || errors === 'True', context);
    }
    return items.length;
  }

  test('filters of SQL-looking text are compared as text: they match only a record whose value is that text', async () => {
    const injected = seeded.filter((s) => s.user === "' OR 1=1 --").map((s) => s.id).sort();
    for (const name of ['user', 'tag']) {
      const reply = await adminGet(`/requests?${name}=${encodeURIComponent("' OR 1=1 --")}&from=${seededFrom}`);
      assert.equal(reply.status, 200, reply.text);
      assert.deepEqual((JSON.parse(reply.text) as { items: { id: string }[] }).items.map((i) => i.id).sort(), injected, name);
    }
    for (const name of ['key', 'team', 'model', 'provider', 'error']) {
      const reply = await adminGet(`/requests?${name}=${encodeURIComponent("x' OR 1=1 --")}&from=${seededFrom}`);
      assert.equal(reply.status, 200, reply.text);
      assert.deepEqual((JSON.parse(reply.text) as { items: unknown[] }).items, [], name);
    }
    assert.equal(rowCount(), rowsBefore);
  });

  test('each filter answers exactly the seeded records it names (the oracle of the properties above, checked once against known data)', async () => {
    const cases: [string, (s: Seeded) => boolean][] = [
      ['key=fz-solo', (s) => s.key === 'fz-solo'],
      ['team=fz-team', (s) => s.key === 'fz-member'],
      [`user=${encodeURIComponent("o'brien")}`, (s) => s.user === "o'brien"],
      ['tag=seed-tag', (s) => s.tags.includes('seed-tag')],
      ['model=echo-seed', (s) => s.model === 'echo-seed'],
      ['status=429', (s) => s.status === 429],
      ['status=error', (s) => s.status >= 400],
      ['errors=true', (s) => s.status >= 400],
      ['errors=0', (s) => s.status < 400],
      ['error=budget_exceeded', (s) => s.status === 429],
      ['provider=oa&user=seed-user', (s) => s.model === 'mock-gpt' && s.user === 'seed-user'],
    ];
    for (const [filter, keep] of cases) {
      const reply = await adminGet(`/requests?${filter}&from=${seededFrom}&limit=500`);
      assert.equal(reply.status, 200, `${filter}: ${reply.text}`);
      const ids = (JSON.parse(reply.text) as { items: { id: string }[] }).items.map((i) => i.id).sort();
      assert.deepEqual(ids, seeded.filter(keep).map((s) => s.id).sort(), filter);
    }
  });

  test('GET /requests/{id}: the record for an id shipped, 404 unknown_request for any other, 400 for a broken percent-encoding; a query string changes nothing', async () => {
    const ids = seeded.map((s) => s.id);
    const seen = new Map<number, number>();
    const rawId = fc.oneof(
      { weight: 2, arbitrary: fc.constantFrom(...ids) },
      { weight: 1, arbitrary: fc.constantFrom(...ids).map((id) => id.toUpperCase()) },
      { weight: 1, arbitrary: fc.constantFrom(...ids).map((id) => encodeURIComponent(id).replace(/-/g, '%2D')) },
      { weight: 3, arbitrary: fc.tuple(oddText, writing, fc.nat()).map(([t, how, seed]) => write(t, how, seed) || 'x') },
      { weight: 1, arbitrary: fc.constantFrom('%', '%zz', '%E0%A4', '%00', '..', '.', 'a/b', '%2F', "'%20OR%201=1%20--", '%F0%9F%98%80', 'x'.repeat(6000)) },
    );
    await fc.assert(
      fc.asyncProperty(rawId, fc.option(queryOf('requests'), { nil: undefined }), async (raw, q) => {
        const target = `/requests/${raw}${q === undefined ? '' : `?${q}`}`;
        const reply = await adminGet(target);
        seen.set(reply.status, (seen.get(reply.status) ?? 0) + 1);
        const context = `GET ${target.slice(0, 200)}`;
        let id: string | undefined;
        try {
          id = decodeURIComponent(raw);
        } catch {
          id = undefined;
        }
        if (id === undefined) {
          assert.equal(reply.status, 400, `${context}: ${reply.text.slice(0, 200)}`);
          assert.equal(assertOpenAiError(reply.text, context).code, 'invalid_query');
        } else if (ids.includes(id)) {
          assert.equal(reply.status, 200, `${context}: ${reply.text.slice(0, 200)}`);
          assert.equal((JSON.parse(reply.text) as { request: { id: string } }).request.id, id);
        } else {
          assert.equal(reply.status, 404, `${context}: ${reply.text.slice(0, 200)}`);
          assert.equal(assertOpenAiError(reply.text, context).code, 'unknown_request');
        }
      }),
      params(Math.ceil(RUNS / 2)),
    );
    console.log(`ledger fuzz /requests/{id}: ${JSON.stringify(Object.fromEntries([...seen].sort()))}`);
    assert.equal(rowCount(), rowsBefore);
    assert.ok(!gw.logs.some((l) => l.event === 'handler_error'), 'no handler failed');
    await assertSettled(gw, 'after /requests/{id}');
  });
});

// ---------------------------------------------------------------------------------------------
// The client's values that reach the ledger and the budgets.

const chr = (c: number) => String.fromCharCode(c);
const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map(chr);
const controlChar = fc.oneof(fc.integer({ min: 0, max: 0x1f }).map(chr), fc.constantFrom('\u007f', '\u0085', '\u2028', '\u2029', '\u200b', '\ufeff', '\u202e'));
const markup = fc.constantFrom('<script>alert(1)</script>', '"', '\\', "'", '</td><td>', '${HOME}', '%s%n', '\u0000', "' OR 1=1 --", '{"a":1}', '\r\n', '../../', '__proto__', '&amp;', '<!--');
const hostileUnit = fc.oneof({ weight: 6, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }) }, { weight: 1, arbitrary: loneSurrogate }, { weight: 1, arbitrary: controlChar }, { weight: 1, arbitrary: fc.constantFrom('<', '>', '"', "'", '&', '\\', ',', ';', ':') });
/** Text a client may write, of at most `max` characters (besides the huge ones when `huge`). */
const hostileText = (max: number, huge: boolean) =>
  fc.oneof(
    { weight: 5, arbitrary: fc.string({ unit: hostileUnit, maxLength: max }) },
    { weight: 1, arbitrary: fc.tuple(markup, fc.string({ unit: hostileUnit, maxLength: 8 })).map(([m, s]) => m + s) },
    // Around the cap, an astral character cut in two there or not.
    { weight: 2, arbitrary: fc.tuple(fc.integer({ min: USER_MAX - 3, max: USER_MAX + 2 }), fc.constantFrom('', '😀', '\u0000', '\uD800')).map(([n, tail]) => 'u'.repeat(n) + tail + 'z') },
    ...(huge ? [{ weight: 1, arbitrary: fc.integer({ min: 1000, max: 100_000 }).map((n) => 'h'.repeat(n)) }] : []),
  );
/** A `user` of any JSON type (absent too). */
const userValue = fc.oneof({ weight: 6, arbitrary: hostileText(300, true) }, { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 2 }) }, { weight: 1, arbitrary: fc.constant(undefined) });

/** Header text (Node writes it byte for byte): visible ASCII, tabs, and bytes 0x80-0xFF (non-ASCII text is its UTF-8 bytes). */
const headerSafe = (text: string) => text.replace(/[^\t\x20-\x7e\x80-\xff]/g, '');
const tagHeader = fc.oneof(
  { weight: 4, arbitrary: fc.string({ unit: fc.oneof(fc.integer({ min: 0x21, max: 0x7e }).map(chr), fc.constantFrom(',', ' ', ',')), maxLength: 120 }) },
  { weight: 1, arbitrary: fc.string({ unit: fc.constantFrom(',', ' ', '\t'), maxLength: 30 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 30 }).map((s) => headerSafe(Buffer.from(s, 'utf8').toString('latin1'))) },
  { weight: 1, arbitrary: fc.string({ unit: fc.integer({ min: 0x80, max: 0xff }).map(chr), maxLength: 30 }) },
  { weight: 1, arbitrary: fc.integer({ min: 15, max: 80 }).map((n) => Array.from({ length: n }, (_, i) => `t${i}`).join(',')) },
  { weight: 1, arbitrary: fc.integer({ min: 60, max: 3000 }).map((n) => 'L'.repeat(n)) },
  { weight: 1, arbitrary: fc.constantFrom('', ',', ',,,,', ' , , ', "' OR 1=1 --", '<b>x</b>', 'a,a,a', ' a , b ') },
);
/** None, one or several `x-sluice-tags` headers, under the header size limit. */
const tagHeaders = fc.option(fc.array(tagHeader, { minLength: 1, maxLength: 5 }), { nil: undefined, freq: 3 }).map((values) => {
  if (values === undefined) return undefined;
  const out: string[] = [];
  let size = 0;
  for (const v of values) if ((size += v.length) < 10_000) out.push(v);
  return out.length > 0 ? out : undefined;
});

type Dialect = 'openai' | 'anthropic';
const PATH: Record<Dialect, string> = { openai: '/v1/chat/completions', anthropic: '/v1/messages' };
const NATIVE: Record<Dialect, string> = { openai: 'mock-gpt', anthropic: 'claude-mock' };
const KNOWN_MODELS = new Set(['mock-gpt', 'claude-mock', 'tight-gpt']);
const routed = (model: unknown): model is string => typeof model === 'string' && (KNOWN_MODELS.has(model) || model.startsWith('echo-'));
const crossed = (dialect: Dialect, model: string) => (dialect === 'openai' ? model === 'claude-mock' : model === 'mock-gpt' || model === 'tight-gpt');
const modelValue = (dialect: Dialect) =>
  fc.oneof(
    { weight: 5, arbitrary: fc.constant(NATIVE[dialect]) },
    { weight: 3, arbitrary: hostileText(40, false).map((s) => `echo-${s}`) },
    { weight: 1, arbitrary: fc.oneof(fc.string({ maxLength: 20 }), fc.constantFrom('', 'echo', 'ECHO-x', ' echo-x', 'mock-gpt ', '__proto__', 'echo*')) },
    { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 1 }) },
  );

/** A request as the fuzz sends it, and what the oracle expects of it. */
interface Sent {
  dialect: Dialect;
  key: KeyName;
  body: Buffer;
  tags: string[] | undefined;
  /** The user the request names (a string), or undefined when it names none of its API's. */
  user: string | undefined;
  model: unknown;
}

const sentRequest = fc
  .tuple(fc.constantFrom<Dialect>('openai', 'anthropic'), fc.constantFrom<KeyName>('fz-member', 'fz-solo'), tagHeaders, fc.boolean(), fc.uint8Array({ minLength: 1, maxLength: 8 }))
  .chain(([dialect, key, tags, rawBytes, bytes]) =>
    fc.tuple(modelValue(dialect), dialect === 'openai' ? userValue : fc.oneof({ weight: 5, arbitrary: userValue.map((u) => (u === undefined ? undefined : { user_id: u })) }, { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) })).map(([model, named]): Sent => {
      const base: Record<string, unknown> = { model, max_tokens: 5, messages: [{ role: 'user', content: 'fuzz' }] };
      let user: string | undefined;
      let body: Buffer;
      const field = dialect === 'openai' ? 'user' : 'metadata';
      if (named !== undefined) base[field] = named;
      if (dialect === 'openai') user = typeof named === 'string' ? named : undefined;
      else {
        const id = named !== null && typeof named === 'object' && !Array.isArray(named) ? (named as { user_id?: unknown }).user_id : undefined;
        user = typeof id === 'string' ? id : undefined;
      }
      if (rawBytes && typeof user === 'string' && user.length < 1000) {
        // The user's text followed by bytes that are not UTF-8: the gateway reads what a UTF-8 decoder makes of them.
        const marker = '\u0001MARK\u0001';
        const json = JSON.stringify({ ...base, [field]: dialect === 'openai' ? `${user}${marker}` : { user_id: `${user}${marker}` } });
        const [head, tail] = json.split(JSON.stringify(marker).slice(1, -1)) as [string, string];
        const junk = Buffer.from(bytes.map((b) => 0x80 | b));
        body = Buffer.concat([Buffer.from(head), junk, Buffer.from(tail)]);
        user = user + junk.toString('utf8');
      } else {
        body = Buffer.from(JSON.stringify(base));
      }
      return { dialect, key, body, tags, user, model };
    }),
  );

interface Answered {
  sent: Sent;
  id: string;
  status: number;
  recorded: boolean;
}

async function sendOne(sent: Sent, extraHeaders: Record<string, string> = {}): Promise<Reply> {
  const headers: Record<string, string | string[]> = { 'content-type': 'application/json', ...extraHeaders };
  if (sent.dialect === 'openai') headers.authorization = `Bearer ${KEYS[sent.key]}`;
  else Object.assign(headers, { 'x-api-key': KEYS[sent.key], 'anthropic-version': '2023-06-01' });
  if (sent.tags !== undefined) headers['x-sluice-tags'] = sent.tags;
  return exchange(gw.proxyUrl, 'POST', PATH[sent.dialect], headers, sent.body);
}

/** The record of `a`, as the store has it, checked against what its client sent. */
function checkRecord(a: Answered, row: StoredRow): void {
  const context = `${a.id} (${a.sent.dialect}, status ${a.status}, user ${JSON.stringify(a.sent.user)?.slice(0, 80)})`;
  assert.equal(row.key, a.sent.key, context);
  assert.equal(row.status, a.status, context);
  assert.equal(row.api, a.sent.dialect, context);
  // A client's model name is kept to 256 characters, as its user is.
  assert.ok(keptUsers(a.sent.model as string).includes(row.model), `${context}: stored model ${JSON.stringify(row.model).slice(0, 120)}`);
  assert.ok(row.user.length <= USER_MAX, `${context}: a user of ${row.user.length} characters`);
  assert.ok((a.sent.user === undefined ? [''] : keptUsers(a.sent.user)).includes(row.user), `${context}: stored user ${JSON.stringify(row.user).slice(0, 120)}`);
  assert.ok(row.tags.length <= MAX_TAGS && row.tags.every((t) => t.length <= TAG_MAX), `${context}: tags ${JSON.stringify(row.tags).slice(0, 200)}`);
  // Header bytes are read as ISO-8859-1 (Node's reading); read as UTF-8 would do too.
  const latin1 = tagsOf(a.sent.tags ?? []);
  const utf8 = tagsOf((a.sent.tags ?? []).map((t) => Buffer.from(t, 'latin1').toString('utf8')));
  assert.ok(isDeepEqual(row.tags, latin1) || isDeepEqual(row.tags, utf8), `${context}: tags ${JSON.stringify(row.tags).slice(0, 200)}, expected ${JSON.stringify(latin1).slice(0, 200)}`);
}

function isDeepEqual(a: unknown, b: unknown): boolean {
  try {
    assert.deepEqual(a, b);
    return true;
  } catch {
    return false;
  }
}

describe('values a client chooses: user, metadata.user_id, x-sluice-tags, model', () => {
  const answered: Answered[] = [];

  test('each request is answered as its contract says; every one that reached its admission is shipped, its values capped as documented', async () => {
    const seen = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(sentRequest, async (sent) => {
        const reply = await sendOne(sent);
        seen.set(reply.status, (seen.get(reply.status) ?? 0) + 1);
        const context = `${sent.dialect} model ${JSON.stringify(sent.model)?.slice(0, 60)}, user ${JSON.stringify(sent.user)?.slice(0, 60)}, tags ${JSON.stringify(sent.tags)?.slice(0, 100)}`;
        const id = reply.headers['x-request-id'];
        assert.equal(typeof id, 'string', `${context}: no x-request-id`);
        if (!(typeof sent.model === 'string' && sent.model !== '')) {
          assert.equal(reply.status, 400, `${context}: ${reply.text.slice(0, 200)}`);
          assertCallerError(reply.text, sent.dialect, context, 'model_required');
        } else if (!routed(sent.model)) {
          assert.equal(reply.status, 404, `${context}: ${reply.text.slice(0, 200)}`);
          assertCallerError(reply.text, sent.dialect, context, 'model_not_found');
        } else if (crossed(sent.dialect, sent.model)) {
          // Translated to the other API: its answer, or a 400 naming what it cannot express.
          assert.ok(reply.status === 200 || reply.status === 400, `${context}: ${reply.status} ${reply.text.slice(0, 200)}`);
        } else {
          assert.equal(reply.status, 200, `${context}: ${reply.text.slice(0, 300)}`);
          JSON.parse(reply.text);
        }
        if (reply.status >= 400) assertCallerError(reply.text, sent.dialect, context);
        answered.push({ sent, id: id as string, status: reply.status, recorded: routed(sent.model) });
      }),
      params(),
    );
    console.log(`ledger fuzz, client values: statuses ${JSON.stringify(Object.fromEntries([...seen].sort()))}`);
    const recorded = answered.filter((a) => a.recorded);
    assert.ok(recorded.length > RUNS / 3, `${recorded.length} of ${answered.length} reached admission`);
    const rows = await shipped(recorded.map((a) => a.id));
    for (const a of recorded) checkRecord(a, rows.get(a.id)!);
    assert.equal(storedRows(answered.filter((a) => !a.recorded).map((a) => a.id)).size, 0, 'a request that never reached its admission has no record');
    // What the admin API shows of the same records (the strings a client wrote, back through JSON and a query string).
    for (const a of recorded.slice(0, 120)) {
      const row = rows.get(a.id)!;
      const one = await adminGet(`/requests/${encodeURIComponent(a.id)}`);
      assert.equal(one.status, 200, one.text);
      const record = (JSON.parse(one.text) as { request: StoredRow }).request;
      assert.deepEqual([record.user, record.tags, record.model], [row.user, row.tags, row.model], a.id);
      if (row.user !== '') {
        const found = await adminGet(`/requests?user=${encodeURIComponent(row.user)}&key=${a.sent.key}&limit=500&from=${Date.now() - HOUR}`);
        assert.equal(found.status, 200, found.text);
        assert.ok((JSON.parse(found.text) as { items: { id: string }[] }).items.some((i) => i.id === a.id), `${a.id} found by its user ${JSON.stringify(row.user).slice(0, 80)}`);
      }
      if (row.tags.length > 0) {
        const found = await adminGet(`/requests?tag=${encodeURIComponent(row.tags.at(-1)!)}&limit=500&from=${Date.now() - HOUR}`);
        assert.equal(found.status, 200, found.text);
        assert.ok((JSON.parse(found.text) as { items: { id: string }[] }).items.some((i) => i.id === a.id), `${a.id} found by its tag ${JSON.stringify(row.tags.at(-1))}`);
      }
    }
  });

  test('a per-user budget is the user\'s, whatever its text: spent by one request, then refused through either API; a user that differs only past 256 characters shares it', async () => {
    // tight-gpt costs $1 for the 1,000 tokens the mock reports: a user's $1 a day is spent by one request.
    const spend = mockHeader({ usage: { prompt: 10, completion: 990 } });
    let n = 0;
    const users = fc.tuple(hostileText(300, false), fc.constantFrom<Dialect>('openai', 'anthropic'));
    await fc.assert(
      fc.asyncProperty(users, async ([text, again]) => {
        const user = `t${n++}:${text}`;
        const sent = (dialect: Dialect, who: string): Sent => ({
          dialect,
          key: 'fz-tight',
          body: Buffer.from(JSON.stringify({ model: 'tight-gpt', max_tokens: 1, messages: [{ role: 'user', content: 'x' }], ...(dialect === 'openai' ? { user: who } : { metadata: { user_id: who } }) })),
          tags: undefined,
          user: who,
          model: 'tight-gpt',
        });
        const context = `user ${JSON.stringify(user).slice(0, 120)} (${user.length} characters)`;
        const first = sent('openai', user);
        const paid = await sendOne(first, spend);
        assert.equal(paid.status, 200, `${context}: ${paid.text.slice(0, 300)}`);
        answered.push({ sent: first, id: String(paid.headers['x-request-id']), status: paid.status, recorded: true });
        const second = sent(again, user);
        const refused = await sendOne(second);
        assert.equal(refused.status, 429, `${context}, again through ${again}: ${refused.text.slice(0, 300)}`);
        assertCallerError(refused.text, again, context);
        const message = (JSON.parse(refused.text) as { error: { message: string } }).error.message;
        assert.match(message, / of API key "fz-tight" has spent its budget of \$1 for this day$/, context);
        answered.push({ sent: second, id: String(refused.headers['x-request-id']), status: refused.status, recorded: true });
        // Past the cap the same user; before it another.
        const longer = sent('openai', `${user}z`);
        const third = await sendOne(longer, spend);
        assert.equal(third.status, user.length >= USER_MAX ? 429 : 200, `${context} + "z": ${third.text.slice(0, 200)}`);
        answered.push({ sent: longer, id: String(third.headers['x-request-id']), status: third.status, recorded: true });
      }),
      params(Math.max(20, Math.floor(RUNS / 4))),
    );
    const tight = answered.filter((a) => a.sent.key === 'fz-tight');
    const rows = await shipped(tight.map((a) => a.id));
    for (const a of tight) checkRecord(a, rows.get(a.id)!);
  });

  test('a burst of requests at once whose values are long and not ASCII (3 bytes a character in UTF-8): each record shipped whole', async () => {
    // Together far more than one of the spool's 64 KiB buffers: lines are encoded across their ends.
    const wide = fc.string({ unit: fc.constantFrom('€', '你', 'ｗ', '😀', '\u0000', '\uD800', 'é'), minLength: 1000, maxLength: 3000, size: 'max' });
    const burst = fc.sample(fc.tuple(wide, wide, fc.array(wide.map((t) => headerSafe(Buffer.from(t.slice(0, 60), 'utf8').toString('latin1'))), { maxLength: 3 })), { seed: SEED, numRuns: 60 });
    const sent = burst.map(([user, model, tags], i): Sent => {
      const m = `echo-${model}`;
      return { dialect: i % 2 === 0 ? 'openai' : 'anthropic', key: 'fz-solo', body: Buffer.from(JSON.stringify({ model: m, max_tokens: 5, messages: [{ role: 'user', content: 'burst' }], ...(i % 2 === 0 ? { user } : { metadata: { user_id: user } }) })), tags: tags.length > 0 ? tags : undefined, user, model: m };
    });
    const replies = await Promise.all(sent.map((s) => sendOne(s)));
    const mine: Answered[] = replies.map((reply, i) => {
      assert.equal(reply.status, 200, reply.text.slice(0, 200));
      return { sent: sent[i]!, id: String(reply.headers['x-request-id']), status: reply.status, recorded: true };
    });
    answered.push(...mine);
    const rows = await shipped(mine.map((a) => a.id));
    for (const a of mine) checkRecord(a, rows.get(a.id)!);
  });

  test('afterwards: everything shipped once (lag 0, shipped = spooled = rows), no spool line corrupt or dropped, nothing in flight', async () => {
    let last = '';
    await eventually(
      async () => {
        const metrics = await scrape(gw);
        const lag = metricValue(metrics, 'sluice_ledger_lag_records');
        const spooled = metricValue(metrics, 'sluice_ledger_records_total');
        const shippedTotal = metricValue(metrics, 'sluice_ledger_shipped_total');
        last = `lag ${lag}, spooled ${spooled}, shipped ${shippedTotal}, rows ${rowCount()}`;
        return lag === 0 && spooled === shippedTotal && shippedTotal === rowCount();
      },
      20_000,
      'the ledger caught up',
    ).catch((error: Error) => {
      throw new Error(`${error.message}: ${last}`);
    });
    const metrics = await scrape(gw);
    assert.equal(metricValue(metrics, 'sluice_ledger_corrupt_total'), 0, 'no spool line corrupt');
    assert.equal(metricValue(metrics, 'sluice_ledger_dropped_total'), 0, 'no record dropped');
    assert.equal(metricValue(metrics, 'sluice_ledger_store_errors_total'), 0, 'no batch refused by the store');
    assert.ok(!gw.logs.some((l) => l.event === 'ledger_spool_corrupt' || l.event === 'ledger_spool_write_failed' || l.event === 'handler_error' || l.event === 'telemetry_error'), JSON.stringify(gw.logs.filter((l) => l.level === 'error').slice(0, 3)).slice(0, 1000));
    await assertSettled(gw, 'after the client values');
    assert.doesNotMatch(gw.stderr(), /uncaught|unhandled/i);
  });
});

// ---------------------------------------------------------------------------------------------
// Cases the properties above led to (bugs found in src/ and fixed).

describe('found by fuzzing', () => {
  test('a cursor whose page `from` is past the last date JavaScript can write, with a `to` before it, is a 400, not a 500', async () => {
    for (const from of [9007199254740991, 8.64e15 + 1]) {
      const cursorText = Buffer.from(JSON.stringify([0, 'x', from])).toString('base64url');
      const reply = await adminGet(`/requests?cursor=${cursorText}`);
      assert.equal(reply.status, 400, `from ${from}: ${reply.text.slice(0, 200)}`);
      assertNames(reply, new Set(['cursor', 'from', 'to']), `cursor with from ${from}`);
    }
  });

  test('a `?` written unencoded inside the query string is part of a value (RFC 3986 §3.4), not the end of the query', async () => {
    const reply = await adminGet(`/requests?user=seed-user?x&from=${Date.now() - HOUR}`);
    assert.equal(reply.status, 200, reply.text);
    assert.deepEqual((JSON.parse(reply.text) as { items: unknown[] }).items, [], 'no record has the user "seed-user?x"');
    const usage = await adminGet('/usage?bucket=day?group_by=key');
    assert.equal(usage.status, 400, `bucket "day?group_by=key" is not hour or day: ${usage.text.slice(0, 200)}`);
  });
});

// ---------------------------------------------------------------------------------------------
// Teams through the admin API (etcd: the file is read-only there).

const skip = etcdCheck().skip;
const LOAD_KEY = 'sk-ledger-fuzz-teams-load-01';

describe('random team documents through PUT /config/teams/<name>', { skip }, () => {
  let etcd: EtcdServer;
  let egw: GatewayProcess;
  const prefix = `/ledger-fuzz-${process.pid}/`;

  before(async () => {
    etcd = await startEtcd();
    await etcd.put(`${prefix}providers/echo`, JSON.stringify({ type: 'echo' }));
    await etcd.put(`${prefix}models/base`, JSON.stringify({ provider: 'echo' }));
    await etcd.put(`${prefix}keys/load`, JSON.stringify({ key: LOAD_KEY }));
    egw = await startGateway({
      config: { workers: 1, admin: { tokens: [{ name: 'ops', token: TOKEN }] }, etcd: { endpoints: [etcd.endpoint], prefix }, shutdown: { min_drain_secs: 0 }, log: { access_log: false } },
    });
  });
  after(async () => {
    await egw?.stop();
    await etcd?.close();
  });

  const put = (name: string, payload: string) => exchange(egw.adminUrl, 'PUT', `/config/teams/${name}`, { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, Buffer.from(payload));
  const serves = async () => (await exchange(egw.proxyUrl, 'POST', '/v1/chat/completions', { authorization: `Bearer ${LOAD_KEY}`, 'content-type': 'application/json' }, Buffer.from('{"model":"base","messages":[]}'))).status;

  const count = fc.oneof({ weight: 5, arbitrary: fc.integer({ min: 1, max: 1000 }) }, fc.constantFrom(0, -1, 0.5, 1e12, 1e308, '3', '${HOME}', null, true, [], {}), fc.jsonValue({ maxDepth: 1 }));
  const usd = fc.oneof({ weight: 5, arbitrary: fc.double({ min: 0.000001, max: 1e6, noNaN: true }) }, fc.constantFrom(0, -1, 1e308, -0, 'x', '5', '${HOME}', null, true), fc.jsonValue({ maxDepth: 1 }));
  const budget = fc.oneof({ weight: 4, arbitrary: fc.record({ usd, period: fc.constantFrom('day', 'month', 'week', '', 7, 'DAY') }, { requiredKeys: [] }) }, fc.jsonValue({ maxDepth: 2 }));
  const limits = fc.oneof({ weight: 4, arbitrary: fc.record({ rpm: count, tpm: count, concurrent: count, models: fc.jsonValue({ maxDepth: 1 }) }, { requiredKeys: [] }) }, fc.jsonValue({ maxDepth: 2 }));
  const metadata = fc.oneof(fc.dictionary(fc.string({ maxLength: 10 }), fc.string({ unit: hostileUnit, maxLength: 20 }), { maxKeys: 3 }), fc.jsonValue({ maxDepth: 2 }));
  const teamName = fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom('fz-t1', 'fz-t2', 'fz-t3') },
    { weight: 3, arbitrary: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_.-]{0,20}$/) },
    { weight: 2, arbitrary: fc.string({ unit: hostileUnit, minLength: 1, maxLength: 30 }).map(percentEncode) },
    { weight: 1, arbitrary: fc.constantFrom('..', '.', '%2E%2E', '%', '%ZZ', '%00', 'a%2Fb', '%F0%9F%98%80', '-x', '_x', 'x'.repeat(300), '%20x', "x'%20OR%201=1", '__proto__', 'constructor') },
  );
  const validBudget = fc.record({ usd: fc.double({ min: 0.000001, max: 1e6, noNaN: true }), period: fc.constantFrom('day', 'month') }, { requiredKeys: ['usd'] });
  const validLimits = fc.record({ rpm: fc.integer({ min: 1, max: 1000 }), tpm: fc.integer({ min: 1, max: 1_000_000 }), concurrent: fc.integer({ min: 1, max: 64 }) }, { requiredKeys: [] });
  const document = (name: string) =>
    fc.oneof(
      // Mostly valid, so that writes go through (then later ones replace them).
      {
        weight: 4,
        arbitrary: fc
          .record({ limits: validLimits, budget: validBudget, user_budget: validBudget, metadata: fc.dictionary(fc.string({ maxLength: 10 }), fc.string({ unit: hostileUnit, maxLength: 20 }), { maxKeys: 3 }), name: fc.constant(name) }, { requiredKeys: [] })
          .map((doc) => JSON.stringify(doc)),
      },
      {
        weight: 4,
        arbitrary: fc
          .record({ limits, budget, user_budget: budget, metadata, name: fc.constantFrom(name, 'other-name', 5), extra: fc.jsonValue({ maxDepth: 1 }) }, { requiredKeys: [] })
          .map((doc) => JSON.stringify(doc)),
      },
      { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)) },
      { weight: 1, arbitrary: fc.oneof(fc.string({ maxLength: 64 }), fc.constant('{"a":'.repeat(200)), fc.constant('')) },
    );

  test('each answer is 200/201 or a 400 with a message, never a 500; what was answered written is what is stored; the gateway serves on', async () => {
    const seen = new Map<number, number>();
    const written = new Map<string, Record<string, unknown>>();
    await fc.assert(
      fc.asyncProperty(teamName.chain((name) => document(name).map((payload) => [name, payload] as const)), async ([name, payload]) => {
        const reply = await put(name, payload);
        seen.set(reply.status, (seen.get(reply.status) ?? 0) + 1);
        const context = `PUT /config/teams/${name.slice(0, 80)} ${payload.slice(0, 200)}`;
        assert.ok([200, 201, 400].includes(reply.status), `${context}: ${reply.status} ${reply.text.slice(0, 300)}`);
        if (reply.status === 400) {
          const error = assertOpenAiError(reply.text, context);
          assert.ok(error.message.length > 0 && !error.message.includes('internal'), context);
        } else {
          written.set(decodeURIComponent(name), JSON.parse(payload) as Record<string, unknown>);
          assert.equal(written.get(decodeURIComponent(name))!.name ?? decodeURIComponent(name), decodeURIComponent(name), context);
        }
      }),
      params(Math.min(RUNS, 100)),
    );
    console.log(`ledger fuzz, teams: answers ${JSON.stringify(Object.fromEntries([...seen].sort()))}`);
    assert.ok(seen.has(400) && (seen.has(200) || seen.has(201)), `both valid and invalid teams were written: ${JSON.stringify(Object.fromEntries(seen))}`);
    // The list is what the answers said: each team written, as it was last written.
    const list = await exchange(egw.adminUrl, 'GET', '/config/teams', { authorization: `Bearer ${TOKEN}` });
    assert.equal(list.status, 200, list.text);
    const items = (JSON.parse(list.text) as { items: (Record<string, unknown> & { name: string; revision: number })[] }).items;
    assert.deepEqual(items.map((t) => t.name).sort(), [...written.keys()].sort());
    for (const { revision, ...item } of items) {
      void revision;
      assert.deepEqual(item, { ...written.get(item.name), name: item.name }, `teams/${item.name}`);
    }
    // A key of each team written is served, or refused by its team's limits; never a 5xx.
    let n = 0;
    for (const team of [...written.keys()].slice(0, 5)) {
      const key = `sk-ledger-fuzz-team-key-${n}`;
      const made = await exchange(egw.adminUrl, 'PUT', `/config/keys/fz-member-${n++}`, { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, Buffer.from(JSON.stringify({ key, team })));
      assert.equal(made.status, 201, made.text);
      await eventually(async () => (await exchange(egw.proxyUrl, 'POST', '/v1/chat/completions', { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, Buffer.from('{"model":"base","max_tokens":5,"messages":[]}'))).status !== 401, 3000, `key of team ${team} known`);
      const reply = await exchange(egw.proxyUrl, 'POST', '/v1/chat/completions', { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, Buffer.from('{"model":"base","max_tokens":5,"messages":[]}'));
      assert.ok([200, 429].includes(reply.status), `a key of team ${team}: ${reply.status} ${reply.text.slice(0, 200)}`);
    }
    assert.equal(await serves(), 200, 'the gateway still serves');
    assert.ok(!egw.logs.some((l) => l.event === 'handler_error'), 'no handler failed');
    assert.equal(metricValue(await scrape(egw), 'sluice_in_flight_requests', { endpoint: 'config' }) ?? 0, 0, 'nothing left in flight on the resource routes');
    assert.equal(egw.child.exitCode, null, 'the process runs');
  });
});
