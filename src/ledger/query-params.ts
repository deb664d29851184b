// The admin API's query strings for the ledger, read into the stores' queries: `/usage` (from, to,
// group_by, bucket) and `/requests` (from, to, the filters, limit, cursor). Every mistake is one
// message naming the parameter, for a 400; an unknown parameter is a mistake too (a misspelt filter
// silently ignored would answer with more than was asked for).
import { decodeCursor, USAGE_GROUPS, type RequestsQuery, type UsageGroup, type UsageQuery } from './store.ts';

export type Parsed<Q> = { ok: true; query: Q } | { ok: false; message: string };

const HOUR_MS = 3_600_000;
const USAGE_RANGE_MS = 7 * 24 * HOUR_MS;
const REQUESTS_RANGE_MS = 24 * HOUR_MS;
export const DEFAULT_LIMIT = 50;
export const MAX_LIMIT = 500;

const USAGE_PARAMS = ['from', 'to', 'group_by', 'bucket'];
const TEXT_FILTERS = ['key', 'team', 'model', 'provider', 'user', 'error', 'tag'] as const;
const REQUESTS_PARAMS = ['from', 'to', ...TEXT_FILTERS, 'status', 'errors', 'limit', 'cursor'];

/** A mistake in one parameter: its message names it. */
class ParamError extends Error {}

/** A parameter's one value (undefined when absent); given twice is a mistake. */
function single(params: URLSearchParams, name: string): string | undefined {
  const values = params.getAll(name);
  if (values.length > 1) throw new ParamError(`${name}: given ${values.length} times; give it once`);
  return values[0];
}

function checkNames(params: URLSearchParams, known: readonly string[]): void {
  for (const name of new Set(params.keys())) {
    if (!known.includes(name)) throw new ParamError(`${name}: not a parameter here (known: ${known.join(', ')})`);
  }
}

const ISO = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})?)?$/;

/**
 * An instant: epoch milliseconds (digits), or an ISO 8601 date (`2025-05-01`, midnight UTC) or
 * date-time (`2025-05-01T12:00:00Z`; without an offset it is UTC, not the server's zone).
 */
function parseInstant(name: string, given: string): number {
  if (/^\d{1,15}$/.test(given)) return Number(given);
  // `+02:00` unencoded in a query string arrives as ` 02:00`.
  const text = given.replace(/ (\d{2}:\d{2})$/, '+$1');
  const m = ISO.exec(text);
  if (!m) throw new ParamError(`${name}: "${text}" is neither an ISO 8601 date or date-time (2025-05-01, 2025-05-01T12:00:00Z) nor epoch milliseconds`);
  const [, year, month, day, hour = '00', minute = '00', second = '00'] = m;
  const ms = Date.parse(m[4] === undefined ? `${text}T00:00:00Z` : m[7] === undefined ? `${text}Z` : text);
  // Date.parse rolls over what does not exist (02-30); the fields as written must each be in range.
  const fields = Number(month) >= 1 && Number(month) <= 12 && Number(day) >= 1 && Number(day) <= new Date(Date.UTC(Number(year), Number(month), 0)).getUTCDate();
  if (Number.isNaN(ms) || !fields || Number(hour) > 23 || Number(minute) > 59 || Number(second) > 59) throw new ParamError(`${name}: "${text}" is not a valid date`);
  return ms;
}

/** [from, to): each given or defaulted (to: now; from: `defaultFrom`, else `defaultMs` before to). */
function range(params: URLSearchParams, now: number, defaultMs: number, defaultFrom?: number): { from: number; to: number } {
  const fromText = single(params, 'from');
  const toText = single(params, 'to');
  const to = toText === undefined ? now : parseInstant('to', toText);
  const from = fromText !== undefined ? parseInstant('from', fromText) : (defaultFrom ?? to - defaultMs);
  if (from >= to) throw new ParamError(`from: must be before to (from ${new Date(from).toISOString()}, to ${new Date(to).toISOString()})`);
  return { from, to };
}

function groupBy(text: string | undefined): UsageGroup[] {
  if (text === undefined || text === '') return [];
  const groups: UsageGroup[] = [];
  for (const item of text.split(',')) {
    const name = item.trim();
    if (!(USAGE_GROUPS as readonly string[]).includes(name)) throw new ParamError(`group_by: "${name}" is not one of ${USAGE_GROUPS.join(', ')}`);
    if (!groups.includes(name as UsageGroup)) groups.push(name as UsageGroup);
  }
  return groups;
}

function integer(name: string, text: string, min: number, max: number): number {
  const n = /^\d{1,6}$/.test(text) ? Number(text) : NaN;
  if (!(n >= min && n <= max)) throw new ParamError(`${name}: "${text}" is not a whole number from ${min} to ${max}`);
  return n;
}

function flag(name: string, text: string): boolean {
  if (text === 'true' || text === '1') return true;
  if (text === 'false' || text === '0') return false;
  throw new ParamError(`${name}: "${text}" is not true or false`);
}

function parsed<Q>(read: () => Q): Parsed<Q> {
  try {
    return { ok: true, query: read() };
  } catch (error) {
    if (error instanceof ParamError) return { ok: false, message: error.message };
    throw error;
  }
}

/** `/usage`'s parameters; `now` (epoch ms) ends the default range (the last 7 days). */
export function parseUsageQuery(params: URLSearchParams, now: number = Date.now()): Parsed<UsageQuery> {
  return parsed(() => {
    checkNames(params, USAGE_PARAMS);
    const query: UsageQuery = { ...range(params, now, USAGE_RANGE_MS), groupBy: groupBy(single(params, 'group_by')) };
    const bucket = single(params, 'bucket');
    if (bucket !== undefined) {
      if (bucket !== 'hour' && bucket !== 'day') throw new ParamError(`bucket: "${bucket}" is not hour or day`);
      query.bucket = bucket;
    }
    return query;
  });
}

/** `/requests`' parameters; `now` (epoch ms) ends the default range (the last 24 hours). */
export function parseRequestsQuery(params: URLSearchParams, now: number = Date.now()): Parsed<RequestsQuery> {
  return parsed(() => {
    checkNames(params, REQUESTS_PARAMS);
    const cursorText = single(params, 'cursor');
    const cursor = cursorText === undefined ? undefined : decodeCursor(cursorText);
    if (cursorText !== undefined && !cursor) throw new ParamError('cursor: not a cursor this API gave (pass the next_cursor of the page before, as it is)');
    const limit = single(params, 'limit');
    const query: RequestsQuery = {
      // A later page asked without `from` keeps the first page's range.
      ...range(params, now, REQUESTS_RANGE_MS, cursor?.from),
      limit: limit === undefined ? DEFAULT_LIMIT : integer('limit', limit, 1, MAX_LIMIT),
    };
    if (cursorText !== undefined) query.cursor = cursorText;
    for (const name of TEXT_FILTERS) {
      const value = single(params, name);
      if (value !== undefined) query[name] = value;
    }
    const status = single(params, 'status');
    // `status=error`: every status >= 400, as `errors=true` says it.
    if (status === 'error') query.errors = true;
    else if (status !== undefined) query.status = integer('status', status, 100, 599);
    const errors = single(params, 'errors');
    if (errors !== undefined) {
      const wanted = flag('errors', errors);
      if (status === 'error' && !wanted) throw new ParamError('errors: false contradicts status=error');
      query.errors = wanted;
    }
    return query;
  });
}
