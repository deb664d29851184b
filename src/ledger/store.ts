// Where the ledger's records end up: a SQLite file or a PostgreSQL database, behind one interface
// (the shipper inserts, the admin API queries, the retention job prunes, budget alerts claim). A
// record's bodies (`ledger.bodies`) go to a table of their own, `ledger_bodies`, in the same
// transaction as the record, and are pruned sooner. The
// SQL the two stores run is built here, once, with the few places where the dialects differ
// (placeholders, booleans, JSON) named by a `Dialect`.
import { storableCount, storableText, type LedgerBodies, type LedgerRecord } from './record.ts';
import type { LinesInserted } from './line.ts';

export interface LedgerStore {
  readonly kind: 'sqlite' | 'postgres';
  /** Inserts the records whose id is not there yet, in one transaction; resolves with how many were new. */
  insert(records: readonly LedgerRecord[]): Promise<number>;
  /**
   * The same, given as the spool's lines (whole lines as written): checked and parsed by the store
   * (SQLite's in its own thread), the corrupt ones skipped and counted.
   */
  insertLines(bytes: Buffer): Promise<LinesInserted>;
  usage(q: UsageQuery): Promise<UsageRow[]>;
  requests(q: RequestsQuery): Promise<RequestsPage>;
  request(id: string): Promise<LedgerRecord | undefined>;
  /** Deletes at most `limit` records that ended before `beforeMs` (their bodies with them); resolves with how many. */
  prune(beforeMs: number, limit: number): Promise<number>;
  /** Deletes the bodies of at most `limit` records that ended before `beforeMs`, the records kept; resolves with how many. */
  pruneBodies(beforeMs: number, limit: number): Promise<number>;
  /** true the first time `id` is claimed (a budget alert sent once, across the fleet and restarts). */
  claim(id: string): Promise<boolean>;
  close(): Promise<void>;
}

/** What usage can be grouped by: a column of the record each. */
export type UsageGroup = 'key' | 'team' | 'model' | 'provider' | 'user';
export const USAGE_GROUPS: readonly UsageGroup[] = ['key', 'team', 'model', 'provider', 'user'];

/** Usage of the requests that started in [from, to) (epoch ms), summed per group and per bucket (UTC). */
export interface UsageQuery {
  from: number;
  to: number;
  groupBy: UsageGroup[];
  bucket?: 'hour' | 'day';
}

export interface UsageRow {
  /** The bucket's start, ISO in UTC. */
  bucket?: string;
  key?: string;
  team?: string;
  model?: string;
  provider?: string;
  user?: string;
  requests: number;
  /** Requests answered with a status >= 400. */
  errors: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  /** The sum of the costs (a record without a price counts 0). */
  cost_usd: number;
}

/** A page of records, newest first; each filter given narrows it. */
export interface RequestsQuery {
  from?: number;
  to?: number;
  key?: string;
  team?: string;
  model?: string;
  provider?: string;
  user?: string;
  status?: number;
  /** true: only status >= 400; false: only below. */
  errors?: boolean;
  error?: string;
  tag?: string;
  /** 1..500. */
  limit: number;
  /** The `next_cursor` of the page before. */
  cursor?: string;
}

export interface RequestsPage {
  /** Newest first (started_at desc, id desc). */
  items: RequestSummary[];
  next_cursor: string | null;
}

export type RequestSummary = Omit<LedgerRecord, 'attempts' | 'metadata'> & { attempt_count: number };

/**
 * Where a page ends: the last item's start and id, and the page's `from` (a later page asked
 * without `from` keeps the first page's, not one moved on by the clock). base64url JSON, opaque to
 * the caller.
 */
export interface Cursor {
  readonly startedAt: number;
  readonly id: string;
  readonly from?: number | undefined;
}

export function encodeCursor(cursor: Cursor): string {
  return Buffer.from(JSON.stringify([cursor.startedAt, cursor.id, cursor.from ?? null])).toString('base64url');
}

/** The cursor `encodeCursor` made, or undefined for anything else. */
export function decodeCursor(text: string): Cursor | undefined {
  if (!/^[A-Za-z0-9_-]+$/.test(text)) return undefined;
  try {
    const value: unknown = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
    if (!Array.isArray(value) || value.length !== 3) return undefined;
    const [startedAt, id, from] = value as unknown[];
    if (!Number.isSafeInteger(startedAt) || typeof id !== 'string') return undefined;
    // Within what a Date can hold (±8.64e15 ms): the range's words print it.
    if (from !== null && !(Number.isSafeInteger(from) && Math.abs(from as number) <= 8.64e15)) return undefined;
    if (Math.abs(startedAt as number) > 8.64e15) return undefined;
    return { startedAt: startedAt as number, id, ...(from !== null ? { from: from as number } : {}) };
  } catch {
    return undefined;
  }
}

/** The SQL dialect of a store. */
export type Dialect = 'sqlite' | 'postgres';

/** The columns of `ledger_requests`, one per field of the record, in the order of `recordRow`. */
export const COLUMNS = [
  'id',
  'kind',
  'started_at',
  'first_byte_ms',
  'ended_at',
  'key',
  'team',
  'user',
  'metadata',
  'tags',
  'api',
  'endpoint',
  'model',
  'route',
  'provider',
  'served_model',
  'attempts',
  'status',
  'error',
  'prompt_tokens',
  'completion_tokens',
  'cached_tokens',
  'cache_write_tokens',
  'usage_estimated',
  'cost_micros',
  'bytes_in',
  'bytes_out',
  'listener',
  'worker',
  'generation',
] as const satisfies readonly (keyof LedgerRecord)[];

type Column = (typeof COLUMNS)[number];
const JSON_COLUMNS: ReadonlySet<Column> = new Set(['metadata', 'tags', 'attempts']);
const NULLABLE_NUMBERS: ReadonlySet<Column> = new Set(['first_byte_ms', 'cost_micros']);
/** Numbers (BIGINT and INTEGER columns, and the summary's count). */
const NUMBER_COLUMNS: ReadonlySet<string> = new Set([
  'started_at',
  'first_byte_ms',
  'ended_at',
  'status',
  'prompt_tokens',
  'completion_tokens',
  'cached_tokens',
  'cache_write_tokens',
  'cost_micros',
  'bytes_in',
  'bytes_out',
  'worker',
  'generation',
  'attempt_count',
]);

/** A column's name in SQL (`user` is a reserved word in PostgreSQL). */
export function col(name: string): string {
  return name === 'user' ? '"user"' : name;
}

const cleanText = storableText;

/** JSON.stringify writes a NUL or a lone surrogate as these escapes: a value's JSON without them needs no cleaning. */
const UNCLEAN_JSON = /\\u(0000|d[89a-f])/i;

/** A value's strings cleaned, deep (metadata, tags, attempts). */
function cleanJson(value: unknown): unknown {
  if (typeof value === 'string') return cleanText(value);
  if (Array.isArray(value)) return value.map(cleanJson);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [cleanText(k), cleanJson(v)]));
  }
  return value;
}

/** A whole number a BIGINT column takes (a fraction rounded, anything not finite 0): one odd value never blocks a batch. */
function wholeNumber(value: unknown): number {
  return typeof value === 'number' ? storableCount(value) : 0;
}

type Bound = string | number | boolean | null;

/** A JSON column's text: its strings cleaned when JSON.stringify had to escape a NUL or a lone surrogate. */
function jsonText(value: unknown): string {
  const json = JSON.stringify(value);
  return UNCLEAN_JSON.test(json) ? JSON.stringify(cleanJson(value)) : json;
}

/** How the dialect binds one column's value. */
function binder(name: Column, dialect: Dialect): (value: unknown) => Bound {
  if (JSON_COLUMNS.has(name)) {
    const none = name === 'metadata' ? null : '[]';
    return (value) => (value === null || value === undefined ? none : jsonText(value));
  }
  if (name === 'usage_estimated') return dialect === 'sqlite' ? (value) => (value ? 1 : 0) : (value) => value === true;
  if (NULLABLE_NUMBERS.has(name)) return (value) => (value === null || value === undefined ? null : wholeNumber(value));
  if (NUMBER_COLUMNS.has(name)) return wholeNumber;
  return (value) => cleanText(typeof value === 'string' ? value : String(value ?? ''));
}

/** Each column's binder, per dialect (made once: a record's row is made per record in a batch). */
const BINDERS: Readonly<Record<Dialect, readonly ((value: unknown) => Bound)[]>> = {
  sqlite: COLUMNS.map((name) => binder(name, 'sqlite')),
  postgres: COLUMNS.map((name) => binder(name, 'postgres')),
};

/** A record's values in the order of COLUMNS, as the dialect binds them. */
export function recordRow(record: LedgerRecord, dialect: Dialect): Bound[] {
  const binders = BINDERS[dialect];
  const row = new Array<Bound>(COLUMNS.length);
  for (let i = 0; i < COLUMNS.length; i++) row[i] = binders[i]!(record[COLUMNS[i]!]);
  return row;
}

/**
 * A row read back as the record's fields: numbers from either driver (PostgreSQL's BIGINT comes as
 * a string), booleans from SQLite's 0/1, JSON from text or from PostgreSQL's parsed jsonb.
 */
function rowFields(row: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(row)) {
    if (NUMBER_COLUMNS.has(name)) out[name] = value === null ? null : Number(value);
    else if (name === 'usage_estimated') out[name] = value === true || value === 1;
    else if (JSON_COLUMNS.has(name as Column)) out[name] = typeof value === 'string' ? JSON.parse(value) : value;
    else out[name] = value;
  }
  return out;
}

export function rowRecord(row: Record<string, unknown>): LedgerRecord {
  return rowFields(row) as unknown as LedgerRecord;
}

export function rowSummary(row: Record<string, unknown>): RequestSummary {
  return rowFields(row) as unknown as RequestSummary;
}

/** The values of a statement, named by their placeholders in the dialect's form. */
export class Params {
  readonly values: (string | number | boolean | null)[] = [];
  readonly #dialect: Dialect;

  constructor(dialect: Dialect) {
    this.#dialect = dialect;
  }

  /** The placeholder of `value`. */
  add(value: string | number | boolean | null): string {
    this.values.push(value);
    return this.#dialect === 'sqlite' ? '?' : `$${this.values.length}`;
  }
}

export interface Statement {
  readonly sql: string;
  readonly values: (string | number | boolean | null)[];
}

/** One INSERT of `records`, each id once (an id already there, or twice in the batch, is skipped). */
export function insertStatement(records: readonly LedgerRecord[], dialect: Dialect): Statement {
  const params = new Params(dialect);
  const rows = records.map((r) => `(${recordRow(r, dialect).map((v) => params.add(v)).join(', ')})`);
  const sql = `INSERT INTO ledger_requests (${COLUMNS.map(col).join(', ')}) VALUES ${rows.join(', ')} ON CONFLICT (id) DO NOTHING`;
  return { sql, values: params.values };
}

/**
 * PostgreSQL: one INSERT of the records given as a JSON array's text (`$1`), parsed by the server:
 * the gateway builds no parameter per field. The text is read as `json`, each record once, straight
 * into the row's types: its numbers as `bigint` (the record's builder writes whole ones). A batch
 * the server refuses as data (class 22: a number with a fraction or out of range, a text it cannot
 * hold, a line that is no object) is inserted again through `insertStatement`, which rounds and
 * cleans each value. Read as `jsonb` with its numbers as `numeric` and rounded, the same batch cost
 * the server 8 to 18 % more CPU a record (`bench/ledger-floor.ts`).
 */
export const POSTGRES_JSON_INSERT = ((): string => {
  const typeOf = (name: Column) => (JSON_COLUMNS.has(name) ? 'jsonb' : name === 'usage_estimated' ? 'boolean' : NUMBER_COLUMNS.has(name) ? 'bigint' : 'text');
  const value = (name: Column) => {
    const c = `r.${col(name)}`;
    if (JSON_COLUMNS.has(name)) return name === 'metadata' ? c : `COALESCE(${c}, '[]'::jsonb)`;
    if (name === 'usage_estimated') return `COALESCE(${c}, false)`;
    if (NULLABLE_NUMBERS.has(name)) return c;
    if (NUMBER_COLUMNS.has(name)) return `COALESCE(${c}, 0)`;
    return `COALESCE(${c}, '')`;
  };
  return (
    `INSERT INTO ledger_requests (${COLUMNS.map(col).join(', ')}) SELECT ${COLUMNS.map(value).join(', ')} ` +
    `FROM json_to_recordset($1::json) AS r(${COLUMNS.map((name) => `${col(name)} ${typeOf(name)}`).join(', ')}) WHERE r.id IS NOT NULL ON CONFLICT (id) DO NOTHING`
  );
})();

/** PostgreSQL: the bodies of the records of `$1` (a JSON array's text) that have them, after their records' INSERT. */
export const POSTGRES_JSON_BODIES_INSERT =
  'INSERT INTO ledger_bodies (id, request_body, response_body, request_truncated, response_truncated, encoding, ended_at) ' +
  "SELECT r.id, COALESCE(b.request_body, ''), COALESCE(b.response_body, ''), COALESCE(b.request_truncated, false), COALESCE(b.response_truncated, false), " +
  "CASE WHEN b.encoding = 'base64' THEN 'base64' ELSE 'utf8' END, COALESCE(r.ended_at, 0) " +
  'FROM json_to_recordset($1::json) AS r(id text, ended_at bigint, bodies json) ' +
  'CROSS JOIN LATERAL json_to_record(r.bodies) AS b(request_body text, response_body text, request_truncated boolean, response_truncated boolean, encoding text) ' +
  "WHERE r.id IS NOT NULL AND json_typeof(r.bodies) = 'object' ON CONFLICT (id) DO NOTHING";

/** The columns of `ledger_bodies`, in the order of `bodiesRow`. */
export const BODY_COLUMNS = ['id', 'request_body', 'response_body', 'request_truncated', 'response_truncated', 'encoding', 'ended_at'] as const;

/** A record's bodies as the dialect binds them (its id and end beside them); undefined when it has none. */
export function bodiesRow(record: LedgerRecord, dialect: Dialect): (string | number | boolean | null)[] | undefined {
  const bodies = record.bodies;
  if (bodies === undefined || bodies === null || typeof bodies !== 'object') return undefined;
  const flag = (value: unknown) => (dialect === 'sqlite' ? (value === true ? 1 : 0) : value === true);
  const text = (value: unknown) => cleanText(typeof value === 'string' ? value : '');
  return [
    cleanText(String(record.id)),
    text(bodies.request_body),
    text(bodies.response_body),
    flag(bodies.request_truncated),
    flag(bodies.response_truncated),
    bodies.encoding === 'base64' ? 'base64' : 'utf8',
    wholeNumber(record.ended_at),
  ];
}

/**
 * One INSERT of the bodies of those of `records` that have them (undefined when none has), each
 * id once. Run after the records' INSERT in the same transaction: a body whose record the store
 * already had (a batch shipped again) is already there too, and is skipped.
 */
export function bodiesInsertStatement(records: readonly LedgerRecord[], dialect: Dialect): Statement | undefined {
  const params = new Params(dialect);
  const rows: string[] = [];
  for (const record of records) {
    const row = bodiesRow(record, dialect);
    if (row !== undefined) rows.push(`(${row.map((v) => params.add(v)).join(', ')})`);
  }
  if (rows.length === 0) return undefined;
  return { sql: `INSERT INTO ledger_bodies (${BODY_COLUMNS.join(', ')}) VALUES ${rows.join(', ')} ON CONFLICT (id) DO NOTHING`, values: params.values };
}

/** The bodies of one record; their row goes through `rowBodies`. */
export function bodiesStatement(id: string, dialect: Dialect): Statement {
  const params = new Params(dialect);
  return { sql: `SELECT request_body, response_body, request_truncated, response_truncated, encoding FROM ledger_bodies WHERE id = ${params.add(id)}`, values: params.values };
}

/** A row of `bodiesStatement` as LedgerBodies (SQLite's 0/1 made booleans). */
export function rowBodies(row: Record<string, unknown>): LedgerBodies {
  return {
    request_body: String(row.request_body),
    response_body: String(row.response_body),
    request_truncated: row.request_truncated === true || row.request_truncated === 1,
    response_truncated: row.response_truncated === true || row.response_truncated === 1,
    encoding: row.encoding === 'base64' ? 'base64' : 'utf8',
  };
}

/** `record` with its bodies when it has some (`row`: the row of `bodiesStatement`, if any). */
export function withBodies(record: LedgerRecord, row: Record<string, unknown> | undefined): LedgerRecord {
  return row === undefined ? record : { ...record, bodies: rowBodies(row) };
}

/** The bodies of at most `limit` records that ended before `beforeMs`, oldest first (the index on `ended_at`). */
export function pruneBodiesStatement(beforeMs: number, limit: number, dialect: Dialect): Statement {
  const params = new Params(dialect);
  const before = params.add(beforeMs);
  const sql = `DELETE FROM ledger_bodies WHERE id IN (SELECT id FROM ledger_bodies WHERE ended_at < ${before} ORDER BY ended_at, id LIMIT ${params.add(Math.max(0, Math.floor(limit)))})`;
  return { sql, values: params.values };
}

const BUCKET_MS = { hour: 3_600_000, day: 86_400_000 } as const;

/** The usage query; its rows go through `usageRows`. */
export function usageStatement(q: UsageQuery, dialect: Dialect): Statement {
  const params = new Params(dialect);
  const groups = USAGE_GROUPS.filter((g) => q.groupBy.includes(g));
  const bucket = q.bucket ? `(started_at / ${BUCKET_MS[q.bucket]}) * ${BUCKET_MS[q.bucket]}` : undefined;
  const keys = [...(bucket ? [`${bucket} AS bucket`] : []), ...groups.map(col)];
  const sql = [
    `SELECT ${[...keys, 'COUNT(*) AS requests', 'SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END) AS errors', 'SUM(prompt_tokens) AS prompt_tokens', 'SUM(completion_tokens) AS completion_tokens', 'SUM(cached_tokens) AS cached_tokens', 'SUM(COALESCE(cost_micros, 0)) AS cost_micros'].join(', ')}`,
    'FROM ledger_requests',
    `WHERE started_at >= ${params.add(q.from)} AND started_at < ${params.add(q.to)}`,
    ...(keys.length > 0 ? [`GROUP BY ${[...(bucket ? [bucket] : []), ...groups.map(col)].join(', ')}`] : []),
  ].join(' ');
  return { sql, values: params.values };
}

/** The usage query's rows as UsageRows, ordered by bucket then group (the same order in both dialects). */
export function usageRows(q: UsageQuery, rows: readonly Record<string, unknown>[]): UsageRow[] {
  const groups = USAGE_GROUPS.filter((g) => q.groupBy.includes(g));
  const out: UsageRow[] = [];
  for (const row of rows) {
    const requests = Number(row.requests);
    if (requests === 0) continue; // no GROUP BY: one row even over no records
    const usage: UsageRow = {
      requests,
      errors: Number(row.errors),
      prompt_tokens: Number(row.prompt_tokens),
      completion_tokens: Number(row.completion_tokens),
      cached_tokens: Number(row.cached_tokens),
      cost_usd: Number(row.cost_micros) / 1e6,
    };
    const keys: Partial<UsageRow> = {};
    if (q.bucket) keys.bucket = new Date(Number(row.bucket)).toISOString();
    for (const g of groups) keys[g] = String(row[g]);
    out.push({ ...keys, ...usage });
  }
  const order = ['bucket', ...groups] as const;
  return out.sort((a, b) => {
    for (const name of order) {
      const x = a[name] ?? '';
      const y = b[name] ?? '';
      if (x !== y) return x < y ? -1 : 1;
    }
    return 0;
  });
}

const SUMMARY_COLUMNS = COLUMNS.filter((c) => c !== 'attempts' && c !== 'metadata');

/** One page of records (one more than the limit, to know whether another follows); rows go through `requestsPage`. */
export function requestsStatement(q: RequestsQuery, dialect: Dialect): Statement {
  const params = new Params(dialect);
  const where: string[] = [];
  const cursor = q.cursor === undefined ? undefined : decodeCursor(q.cursor);
  if (q.cursor !== undefined && !cursor) throw new Error('cursor: not a cursor this ledger gave');
  // After a cursor, the index scan starts at its start (SQLite takes no bound from the row value below).
  const to = cursor ? Math.min(q.to ?? Infinity, cursor.startedAt + 1) : q.to;
  if (q.from !== undefined) where.push(`started_at >= ${params.add(q.from)}`);
  if (to !== undefined) where.push(`started_at < ${params.add(to)}`);
  for (const name of ['key', 'team', 'model', 'provider', 'user', 'error'] as const) {
    const value = q[name];
    if (value !== undefined) where.push(`${col(name)} = ${params.add(value)}`);
  }
  if (q.status !== undefined) where.push(`status = ${params.add(q.status)}`);
  if (q.errors !== undefined) where.push(q.errors ? 'status >= 400' : 'status < 400');
  if (q.tag !== undefined) {
    const tag = params.add(q.tag);
    where.push(dialect === 'sqlite' ? `EXISTS (SELECT 1 FROM json_each(ledger_requests.tags) WHERE json_each.value = ${tag})` : `tags @> jsonb_build_array(${tag}::text)`);
  }
  if (cursor) where.push(`(started_at, id) < (${params.add(cursor.startedAt)}, ${params.add(cursor.id)})`);
  const attemptCount = dialect === 'sqlite' ? 'json_array_length(attempts)' : 'jsonb_array_length(attempts)';
  const sql = [
    `SELECT ${[...SUMMARY_COLUMNS.map(col), `${attemptCount} AS attempt_count`].join(', ')}`,
    'FROM ledger_requests',
    ...(where.length > 0 ? [`WHERE ${where.join(' AND ')}`] : []),
    `ORDER BY started_at DESC, id DESC LIMIT ${params.add(q.limit + 1)}`,
  ].join(' ');
  return { sql, values: params.values };
}

export function requestsPage(q: RequestsQuery, rows: readonly Record<string, unknown>[]): RequestsPage {
  const items = rows.slice(0, q.limit).map(rowSummary);
  const last = items.at(-1);
  return { items, next_cursor: rows.length > q.limit && last ? encodeCursor({ startedAt: last.started_at, id: last.id, from: q.from }) : null };
}

export function requestStatement(id: string, dialect: Dialect): Statement {
  const params = new Params(dialect);
  return { sql: `SELECT ${COLUMNS.map(col).join(', ')} FROM ledger_requests WHERE id = ${params.add(id)}`, values: params.values };
}

/**
 * Oldest first (by start: the index there), among the records that ended before `beforeMs`. A
 * record starts before it ends: `started_at < beforeMs` bounds the index scan when there is little
 * or nothing to prune.
 */
export function pruneStatement(beforeMs: number, limit: number, dialect: Dialect): Statement {
  const params = new Params(dialect);
  const before = params.add(beforeMs);
  const bound = params.add(beforeMs);
  const sql = `DELETE FROM ledger_requests WHERE id IN (SELECT id FROM ledger_requests WHERE started_at < ${bound} AND ended_at < ${before} ORDER BY started_at, id LIMIT ${params.add(Math.max(0, Math.floor(limit)))})`;
  return { sql, values: params.values };
}

export function claimStatement(id: string, claimedAt: number, dialect: Dialect): Statement {
  const params = new Params(dialect);
  return { sql: `INSERT INTO ledger_claims (id, claimed_at) VALUES (${params.add(id)}, ${params.add(claimedAt)}) ON CONFLICT (id) DO NOTHING`, values: params.values };
}
