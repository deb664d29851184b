// `sluice usage`: the usage ledger's totals (GET /usage of the admin API, admin/usage-api.ts) by
// key, team, model, provider or user, per hour or day, for people who prefer a command to curl: an
// aligned table with a total line, the API's JSON, or CSV for a spreadsheet. What it prints of the
// gateway's answer is escaped (terminal-text.ts): a key's name, a team, a `user` are chosen by
// admins and clients and may hold control characters; in CSV a cell that a spreadsheet would take
// for a formula is defused.
import { parseArgs } from 'node:util';
import { ConfigError, loadDefaultConfig } from '../config/load.ts';
import { embeddedSource, fileSource } from '../config/source.ts';
import type { Config } from '../config/schema.ts';
import { redactUrl } from '../config/redact-url.ts';
import { AdminUnreachable, adminRequest, adminToken, adminUrl, errorCode, errorMessage, type AdminAnswer } from './admin-client.ts';
import { escapeControls, printable } from './terminal-text.ts';

/** Where the command writes: `write` takes text as is (its own line ends), `err` one line. */
export interface UsageOutput {
  write(text: string): void;
  err(line: string): void;
}

const PROCESS_OUTPUT: UsageOutput = {
  write: (text) => void process.stdout.write(text),
  err: (line) => process.stderr.write(`${line}\n`),
};

/** What the API groups by. */
export const GROUPS = ['key', 'team', 'model', 'provider', 'user'] as const;
export type Group = (typeof GROUPS)[number];

/** One row of GET /usage. */
export interface UsageRow {
  readonly bucket?: string;
  readonly key?: string;
  readonly team?: string;
  readonly model?: string;
  readonly provider?: string;
  readonly user?: string;
  readonly requests: number;
  readonly errors: number;
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly cached_tokens: number;
  readonly cost_usd: number;
}

export type UsageTotals = Omit<UsageRow, 'bucket' | Group>;

/** GET /usage's answer. */
export interface UsageAnswer {
  readonly from: string;
  readonly to: string;
  readonly group_by: readonly string[];
  readonly bucket: 'hour' | 'day' | null;
  readonly rows: readonly UsageRow[];
  readonly totals: UsageTotals;
}

const OUTPUTS = ['table', 'json', 'csv'] as const;
const BUCKETS = ['hour', 'day'] as const;
const URL_SCHEME = /^https?:\/\//i;

/** Exit codes. */
const OK = 0;
const FAILED = 1;
const USAGE = 2;

/** `sluice usage [flags]` (argv without `usage`): 0 printed, 1 the API refused or could not be reached, 2 a bad flag. */
export async function usageCommand(argv: string[], io: UsageOutput = PROCESS_OUTPUT, env: NodeJS.ProcessEnv = process.env, now: () => number = Date.now): Promise<number> {
  const fail = (line: string, code = FAILED) => {
    io.err(printable(`sluice usage: ${line}`));
    return code;
  };
  let values;
  try {
    values = parseArgs({
      args: argv,
      options: {
        config: { type: 'string', short: 'c' },
        url: { type: 'string' },
        admin: { type: 'string' },
        token: { type: 'string' },
        from: { type: 'string' },
        to: { type: 'string' },
        by: { type: 'string' },
        bucket: { type: 'string' },
        output: { type: 'string', short: 'o', default: 'table' },
      },
    }).values;
  } catch (error) {
    return fail((error as Error).message, USAGE);
  }
  const output = values.output;
  if (!(OUTPUTS as readonly string[]).includes(output)) return fail(`-o takes ${OUTPUTS.join(', ')} (got "${output}")`, USAGE);
  const by = values.by === undefined ? undefined : values.by.split(',').map((g) => g.trim()).filter((g) => g !== '');
  const unknown = by?.find((g) => !(GROUPS as readonly string[]).includes(g));
  if (unknown !== undefined) return fail(`--by takes a list of ${GROUPS.join(', ')} (got "${unknown}")`, USAGE);
  if (values.bucket !== undefined && !(BUCKETS as readonly string[]).includes(values.bucket)) return fail(`--bucket takes hour or day (got "${values.bucket}")`, USAGE);
  const given = values.url ?? values.admin;
  const file = values.config ?? (env.SLUICE_CONFIG || undefined);
  let config: Config;
  try {
    config = (file ? fileSource(file) : embeddedSource()).load();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    // With --url the config is not needed (its `${VAR}`s may not be set here).
    if (!given) return fail(error.message);
    config = loadDefaultConfig(env);
  }
  const base = adminUrl(config, given);
  if (!base) return fail('no admin listener in the config: name one with --url URL');
  if (!URL_SCHEME.test(base)) return fail(`--url takes a URL such as http://127.0.0.1:9901 (got ${redactUrl(base)})`, USAGE);
  const query = new URLSearchParams();
  if (values.from !== undefined) query.set('from', instant(values.from, now()));
  if (values.to !== undefined) query.set('to', instant(values.to, now()));
  if (by !== undefined) query.set('group_by', by.join(','));
  if (values.bucket !== undefined) query.set('bucket', values.bucket);
  const path = `/usage${query.size > 0 ? `?${query}` : ''}`;
  let answer: AdminAnswer;
  try {
    answer = await adminRequest(base, adminToken(config, values.token, env), 'GET', path);
  } catch (error) {
    if (error instanceof AdminUnreachable) return fail(error.message);
    throw error;
  }
  if (answer.status !== 200) return fail(refusal(answer));
  const usage = answer.json as UsageAnswer | undefined;
  if (!isUsageAnswer(usage)) return fail(`GET /usage answered something else than usage: ${answer.text.slice(0, 200)}`);
  if (output === 'json') io.write(`${escapeControls(JSON.stringify(usage, null, 2))}\n`);
  else if (output === 'csv') io.write(usageCsv(usage));
  else io.write(usageTable(usage).map((line) => `${line}\n`).join(''));
  return OK;
}

const AGO = /^(\d{1,6})([mhd])$/;
const UNIT_MS = { m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/**
 * `--from`/`--to` as the API takes them: `30m`, `24h`, `7d` (that long before `now`) become an
 * ISO instant; anything else (an ISO date or date-time, epoch ms) is sent as written, for the API
 * to check.
 */
export function instant(text: string, now: number): string {
  const ago = AGO.exec(text.trim());
  if (!ago) return text;
  return new Date(now - Number(ago[1]) * UNIT_MS[ago[2] as keyof typeof UNIT_MS]).toISOString();
}

/** An error answer in one line: its status, its code and its message. */
function refusal(answer: AdminAnswer): string {
  const code = errorCode(answer);
  const hint = answer.status === 401 ? ' (give the admin token with --token, SLUICE_ADMIN_TOKEN, or admin.token in the --config file)' : '';
  return `GET /usage: ${answer.status}${code ? ` ${code}` : ''}: ${errorMessage(answer)}${hint}`;
}

function isUsageAnswer(value: unknown): value is UsageAnswer {
  const v = value as Partial<UsageAnswer> | undefined;
  return typeof v === 'object' && v !== null && Array.isArray(v.rows) && Array.isArray(v.group_by) && typeof v.totals === 'object' && v.totals !== null;
}

/** The groups a row has, in the API's order: the bucket first when there is one. */
function groupsOf(usage: UsageAnswer): string[] {
  return [...(usage.bucket ? ['bucket'] : []), ...usage.group_by];
}

/**
 * Dollars with 2 to 6 decimals: as many as the amount needs (the ledger counts micro-dollars), at
 * least cents. `$12.50`, `$0.000123`, `$3.00`.
 */
export function formatUsd(usd: number): string {
  if (!Number.isFinite(usd)) return '-';
  const [whole, decimals = ''] = usd.toFixed(6).split('.');
  return `$${whole}.${decimals.replace(/0+$/, '').padEnd(2, '0')}`;
}

interface Column {
  readonly title: string;
  readonly numeric: boolean;
  readonly value: (row: UsageRow | UsageTotals) => string;
}

const group = (name: string): Column => ({
  title: name.toUpperCase(),
  numeric: false,
  value: (row) => {
    const value = (row as Record<string, unknown>)[name];
    return value === undefined || value === null || value === '' ? '-' : printable(String(value));
  },
});

const count = (title: string, value: (row: UsageTotals) => number): Column => ({ title, numeric: true, value: (row) => String(value(row)) });

const MEASURES: readonly Column[] = [
  count('REQUESTS', (r) => r.requests),
  count('ERRORS', (r) => r.errors),
  count('TOKENS_IN', (r) => r.prompt_tokens),
  count('TOKENS_OUT', (r) => r.completion_tokens),
  { title: 'COST', numeric: true, value: (r) => formatUsd(r.cost_usd) },
];

/**
 * The table: a line with the range, then one row per group (names left-aligned, numbers
 * right-aligned) and a TOTAL line. Every name is printed with its control characters as "?".
 */
export function usageTable(usage: UsageAnswer): string[] {
  const names = groupsOf(usage);
  // Without any group the totals are the only row, under a column of their own.
  const groups = names.length > 0 ? names.map(group) : [{ title: '', numeric: false, value: () => '' }];
  const columns = [...groups, ...MEASURES];
  const body = names.length > 0 ? usage.rows.map((row) => columns.map((c) => c.value(row))) : [];
  const total = [...groups.map((_, i) => (i === 0 ? 'TOTAL' : '')), ...MEASURES.map((c) => c.value(usage.totals))];
  const rows = [columns.map((c) => c.title), ...body, total];
  const widths = columns.map((_, index) => Math.max(...rows.map((row) => row[index]!.length)));
  const line = (row: string[]) => row.map((text, index) => (columns[index]!.numeric ? text.padStart(widths[index]!) : text.padEnd(widths[index]!))).join('   ').trimEnd();
  const range = `usage from ${printable(String(usage.from))} to ${printable(String(usage.to))}${usage.group_by.length > 0 ? ` by ${printable(usage.group_by.join(','))}` : ''}${usage.bucket ? `, per ${usage.bucket}` : ''}`;
  return [range, '', ...rows.map(line)];
}

const FORMULA = /^[=+\-@]/;
const CSV_QUOTED = /[",\r\n]/;

/**
 * One CSV field (RFC 4180): quoted when it holds a comma, a double quote or a line break, its
 * quotes doubled. A text starting with = + - or @ gets a leading `'`, so that a spreadsheet shows
 * it instead of running it as a formula. Numbers are written as they are.
 */
export function csvField(value: string | number): string {
  if (typeof value === 'number') return String(value);
  const text = FORMULA.test(value) ? `'${value}` : value;
  return CSV_QUOTED.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

const CSV_MEASURES = ['requests', 'errors', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cost_usd'] as const;

/**
 * The rows as CSV (RFC 4180, CRLF line ends): a header with the API's field names, then one record
 * per row; no total record (a spreadsheet adds up the columns). Control characters of names are "?".
 */
export function usageCsv(usage: UsageAnswer): string {
  const groups = groupsOf(usage);
  const header = [...groups, ...CSV_MEASURES].map(csvField).join(',');
  const records = usage.rows.map((row) =>
    [
      ...groups.map((name) => {
        const value = (row as unknown as Record<string, unknown>)[name];
        return csvField(value === undefined || value === null ? '' : printable(String(value)));
      }),
      ...CSV_MEASURES.map((name) => csvField(name === 'cost_usd' ? Math.round(row.cost_usd * 1e6) / 1e6 : row[name])),
    ].join(','),
  );
  return [header, ...records].map((record) => `${record}\r\n`).join('');
}
