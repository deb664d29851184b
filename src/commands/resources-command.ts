// `sluice apply -f FILE` and `sluice get KIND [NAME]`: the admin API's resource routes
// (admin/resources-api.ts) for people who prefer a command to curl.
//
// apply: makes the providers, models, teams and keys a YAML file lists be what the gateway stores,
// one at a time (providers first: a model needs its provider; teams before keys: a key needs its
// team), each a compare-and-swap on the revision it was read at. It never deletes what the file
// does not list. `${VAR}`s are resolved from apply's own environment, as the config loader
// resolves them, except in the fields that carry a credential (a provider's api_key and header
// values, a target's header values): those are sent as written, for each gateway to resolve from
// its own environment (the variables its `etcd.allowed_env` lists), so that the secret stays out
// of etcd. A client key is resolved here: the gateway keeps only its digest. A variable apply does
// not have stops it before any write.
// get: lists a kind (or shows one resource) as a table, as JSON, or as YAML that `apply -f` takes.
// What either prints of the gateway's answers is escaped (terminal-text.ts): a resource's name can
// hold control characters.
import { hash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import { Document, isScalar, parse, visit, type YAMLMap, type YAMLSeq } from 'yaml';
import type { z } from 'zod';
import { modelSchema, providerSchema, type Config } from '../config/schema.ts';
import { isResourceKind, REDACTED, RESOURCE_KINDS, SECRET_HEADER, VARIABLE_REFERENCE, type ResourceKind } from '../config/resources.ts';
import { interpolate, type MissingVariable } from '../config/interpolate.ts';
import { isSecretField, KEY_WITH_VARIABLE } from '../config/resource-variables.ts';
import { formatPath } from '../config/load.ts';
import { redactUrl } from '../config/redact-url.ts';
import { escapeControls, hasControl, printable } from './terminal-text.ts';
import { AdminUnreachable, adminRequest, adminToken, adminUrl, errorCode, errorMessage, type AdminAnswer } from './admin-client.ts';

export interface Output {
  out(line: string): void;
  err(line: string): void;
}

const PROCESS_OUTPUT: Output = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
};

export interface ApplyOptions {
  /** The YAML file; "-" reads standard input. */
  readonly file: string | undefined;
  readonly admin: string | undefined;
  readonly token: string | undefined;
  /** Where `${VAR}`s are resolved from (default: this process's environment). */
  readonly env?: NodeJS.ProcessEnv;
}

export interface GetOptions {
  readonly kind: string | undefined;
  readonly name: string | undefined;
  /** `json`, `yaml`, or undefined for a table. */
  readonly output: string | undefined;
  readonly admin: string | undefined;
  readonly token: string | undefined;
}

/** One resource of the file, as written (its body is what is PUT). */
interface FileItem {
  readonly kind: ResourceKind;
  readonly name: string;
  readonly body: Readonly<Record<string, unknown>>;
}

const URL_SCHEME = /^https?:\/\//i;

/** Exit codes. */
const OK = 0;
const FAILED = 1;
const USAGE = 2;

/** The answer stopped the whole command (no point asking again for the next resource). */
class Stop extends Error {}

/**
 * Reads and checks the file's shape, with its `${VAR}`s resolved from `env` (not in the fields
 * that carry a credential): every problem at once, or the resources in the order they are applied.
 * A problem names the place and the variable, never a value.
 */
export function readApplyFile(path: string, env: NodeJS.ProcessEnv = process.env): { ok: true; items: FileItem[] } | { ok: false; problems: string[] } {
  const file = path === '-' ? 'standard input' : path;
  let text: string;
  try {
    text = readFileSync(path === '-' ? 0 : path, 'utf8');
  } catch (error) {
    return { ok: false, problems: [`cannot read ${file}: ${(error as Error).message}`] };
  }
  let document: unknown;
  try {
    document = parse(text);
  } catch (error) {
    return { ok: false, problems: [`${file} is not valid YAML: ${(error as Error).message.trim()}`] };
  }
  const expected = `expected a mapping with ${RESOURCE_KINDS.map((k) => `"${k}:"`).join(', ')} lists (as in the config file)`;
  if (document === null || document === undefined) return { ok: false, problems: [`${file} is empty: ${expected}`] };
  if (typeof document !== 'object' || Array.isArray(document)) return { ok: false, problems: [`${file}: ${expected}`] };
  const top = document as Record<string, unknown>;
  const problems: string[] = [];
  const unknown = Object.keys(top).filter((key) => !isResourceKind(key));
  if (unknown.length > 0) {
    problems.push(
      `${file}: unknown top-level ${unknown.length === 1 ? 'key' : 'keys'} ${unknown.map((k) => `"${k}"`).join(', ')}: only ${RESOURCE_KINDS.join(', ')} can be applied (the rest of the config belongs to each host's config file)`,
    );
  }
  const items: FileItem[] = [];
  for (const kind of RESOURCE_KINDS) {
    const list = top[kind];
    if (list === undefined || list === null) continue;
    if (!Array.isArray(list)) {
      problems.push(`${kind}: expected a list`);
      continue;
    }
    const seen = new Map<string, number>();
    list.forEach((entry: unknown, index) => {
      const at = `${kind}[${index}]`;
      if (kind === 'keys' && typeof entry === 'string') {
        problems.push(`${at}: a bare key has no name to store it under: write it as {name: NAME, key: KEY} (or {name: NAME, key_sha256: DIGEST})`);
        return;
      }
      if (entry === null || typeof entry !== 'object' || Array.isArray(entry)) {
        problems.push(`${at}: expected a mapping with a name`);
        return;
      }
      const resolved = resolveFromEnvironment(kind, at, entry as Record<string, unknown>, env);
      if (!resolved.ok) {
        problems.push(...resolved.problems);
        return;
      }
      const body = resolved.body;
      if (typeof body.name !== 'string' || body.name === '') {
        problems.push(`${at}: expected a name`);
        return;
      }
      const first = seen.get(body.name);
      if (first !== undefined) {
        problems.push(`${at}: duplicate name "${body.name}" (also ${kind}[${first}])`);
        return;
      }
      seen.set(body.name, index);
      const redacted = redactedFields(kind, body);
      if (redacted.length > 0) {
        problems.push(`${at} (${body.name}): ${redacted.join(', ')} ${redacted.length === 1 ? 'is' : 'are'} "${REDACTED}", what \`sluice get\` shows in place of a secret: write the value or a \${VAR}`);
        return;
      }
      items.push({ kind, name: body.name, body });
    });
  }
  return problems.length > 0 ? { ok: false, problems } : { ok: true, items };
}

/**
 * One resource of the file with its `${VAR}`s resolved from `env` as the config loader resolves
 * them, except in the fields that carry a credential (sent as written). An unset variable, or a
 * client key that still holds "${" (`$${…}`, or a value that holds one), is a problem.
 */
function resolveFromEnvironment(kind: ResourceKind, at: string, entry: Record<string, unknown>, env: NodeJS.ProcessEnv): { ok: true; body: Record<string, unknown> } | { ok: false; problems: string[] } {
  const missing: MissingVariable[] = [];
  let body: Record<string, unknown>;
  try {
    body = interpolate(entry, env, missing, { where: (path) => !isSecretField(kind, path) }) as Record<string, unknown>;
  } catch (error) {
    return { ok: false, problems: [`${at}: ${(error as Error).message}`] };
  }
  const problems = missing.map((m) => `${at}.${formatPath(m.path)}: environment variable \${${m.variable}} is not set where sluice apply runs (write \${${m.variable}:-} for an optional value)`);
  if (kind === 'keys' && typeof body.key === 'string' && body.key.includes('${')) problems.push(`${at}.key: ${KEY_WITH_VARIABLE}`);
  return problems.length > 0 ? { ok: false, problems } : { ok: true, body };
}

/** The headers of a resource that the admin API may show as "[redacted]": a provider's, and each target's (with their path). */
function headerMaps(kind: ResourceKind, body: Record<string, unknown>): { at: string; headers: Record<string, unknown> }[] {
  const maps: { at: string; headers: Record<string, unknown> }[] = [];
  const add = (at: string, headers: unknown) => {
    if (headers && typeof headers === 'object' && !Array.isArray(headers)) maps.push({ at, headers: headers as Record<string, unknown> });
  };
  if (kind === 'providers') add('headers', body.headers);
  if (kind === 'models' && Array.isArray(body.targets)) body.targets.forEach((target: unknown, index) => add(`targets[${index}].headers`, (target as { headers?: unknown } | null)?.headers));
  return maps;
}

function redactedFields(kind: ResourceKind, body: Record<string, unknown>): string[] {
  const found: string[] = [];
  if (kind === 'providers' && body.api_key === REDACTED) found.push('api_key');
  // `sluice get` shows a base_url's userinfo, query and fragment as "[redacted]" (redact-url.ts).
  if (kind === 'providers' && typeof body.base_url === 'string' && body.base_url.includes(REDACTED)) found.push('base_url');
  for (const { at, headers } of headerMaps(kind, body)) for (const [header, value] of Object.entries(headers)) if (value === REDACTED) found.push(`${at}.${header}`);
  return found;
}

export async function applyResources(config: Config, options: ApplyOptions, io: Output = PROCESS_OUTPUT): Promise<number> {
  const fail = (line: string, code = FAILED) => {
    io.err(printable(`sluice apply: ${line}`));
    return code;
  };
  if (!options.file) return fail(`name the file to apply with -f FILE (a YAML file with ${RESOURCE_KINDS.map((k) => `${k}:`).join(', ')} lists)`, USAGE);
  const base = adminUrl(config, options.admin);
  if (!base) return fail('no admin listener in the config: name one with --admin URL');
  if (!URL_SCHEME.test(base)) return fail(`--admin takes a URL such as http://127.0.0.1:9901 (got ${redactUrl(base)})`, USAGE);
  const read = readApplyFile(options.file, options.env);
  if (!read.ok) {
    for (const problem of read.problems) io.err(printable(`sluice apply: ${problem}`));
    io.err('sluice apply: nothing was applied');
    return FAILED;
  }
  const token = adminToken(config, options.token);
  const ask = async (method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<AdminAnswer> => {
    const answer = await adminRequest(base, token, method, path, body, headers);
    if (answer.status === 401) throw new Stop(unauthorized(base, token));
    return answer;
  };
  let failed = 0;
  try {
    for (const item of read.items) {
      const label = `${item.kind}/${item.name}`;
      const path = `/config/${item.kind}/${encodeURIComponent(item.name)}`;
      const problem = (answer: AdminAnswer) => {
        failed++;
        io.err(printable(`sluice apply: ${label}: ${errorMessage(answer)} (${answer.status})`));
      };
      const found = await ask('GET', path);
      let precondition: Record<string, string>;
      let shown: Record<string, unknown> | undefined;
      if (found.status === 404 && errorCode(found) === 'resource_not_found') precondition = { 'if-none-match': '*' };
      else if (found.status === 404) throw new Stop(`the admin API at ${base} has no resource routes (GET ${path} answered 404: ${errorMessage(found)}): is it an older Sluice?`);
      else if (found.status === 200) {
        const answer = found.json as { item?: Record<string, unknown>; revision?: unknown } | undefined;
        shown = answer?.item;
        if (!answer || !shown || typeof answer.revision !== 'number') throw new Stop(`the admin API at ${base} answered GET ${path} with no item and revision: ${found.text.slice(0, 200)}`);
        if (unchanged(item, shown)) {
          io.out(printable(`${label} unchanged`));
          continue;
        }
        precondition = { 'if-match': `"${answer.revision}"` };
      } else {
        problem(found);
        continue;
      }
      const written = await ask('PUT', path, item.body, precondition);
      if (written.status !== 200 && written.status !== 201) {
        problem(written);
        continue;
      }
      io.out(printable(`${label} ${written.status === 201 ? 'created' : 'configured'}`));
      if (item.kind === 'providers' && shown?.api_key_set === true && item.body.api_key === undefined) {
        io.err(printable(`sluice apply: ${label}: note: the file gives no api_key, so the one the gateway had is removed`));
      }
      const result = written.json as { applied?: unknown; revision?: unknown } | undefined;
      if (result?.applied === false) io.err(printable(`sluice apply: ${label}: note: written (revision ${String(result.revision)}) but not yet served by the gateway at ${base}: see its log if it stays so`));
    }
  } catch (error) {
    if (error instanceof Stop || error instanceof AdminUnreachable) return fail(error.message);
    throw error;
  }
  return failed > 0 ? FAILED : OK;
}

/**
 * Whether the gateway already stores what the file says. A provider with a literal api_key (or a
 * secret header, a provider's or a target's) is never taken as unchanged: the API does not show
 * those, so they are written.
 */
function unchanged(item: FileItem, shown: Record<string, unknown>): boolean {
  const body = { ...item.body };
  if (item.kind === 'providers' && typeof body.api_key === 'string' && !VARIABLE_REFERENCE.test(body.api_key)) return false;
  if (headerMaps(item.kind, body).some(({ headers }) => Object.keys(headers).some((h) => SECRET_HEADER.test(h)))) return false;
  if (item.kind === 'keys' && typeof body.key === 'string') {
    // Stored as its digest: compared as one.
    body.key_sha256 = hash('sha256', body.key, 'base64');
    delete body.key;
  }
  const { revision: _revision, ...stored } = shown;
  return isDeepStrictEqual(withDefaults(item.kind, body), withDefaults(item.kind, stored));
}

const SHAPES: Partial<Record<ResourceKind, Record<string, z.ZodType>>> = { providers: providerSchema.shape, models: modelSchema.shape };

/** Fills the schema's defaults (a provider's anthropic_version, headers) so that leaving one out equals writing it. */
function withDefaults(kind: ResourceKind, object: Record<string, unknown>): Record<string, unknown> {
  const shape = SHAPES[kind];
  if (!shape) return object;
  const filled = { ...object };
  for (const [field, schema] of Object.entries(shape)) {
    if (filled[field] !== undefined) continue;
    const parsed = schema.safeParse(undefined);
    if (parsed.success && parsed.data !== undefined) filled[field] = parsed.data;
  }
  return filled;
}

function unauthorized(base: string, token: string | undefined): string {
  return token
    ? `the admin API at ${base} refused the admin token (401): it is wrong. Give the right one with --token, SLUICE_ADMIN_TOKEN, or admin.token in the --config file`
    : `the admin API at ${base} needs an admin token (401) and none was given: give it with --token, SLUICE_ADMIN_TOKEN, or admin.token in the --config file`;
}

const COLUMNS: Record<ResourceKind, { title: string; value: (item: Record<string, unknown>) => unknown }[]> = {
  providers: [
    { title: 'NAME', value: (i) => i.name },
    { title: 'TYPE', value: (i) => i.type },
    { title: 'BASE_URL', value: (i) => i.base_url },
  ],
  models: [
    { title: 'NAME', value: (i) => i.name },
    { title: 'PROVIDER', value: (i) => i.provider },
    { title: 'UPSTREAM_MODEL', value: (i) => i.upstream_model },
  ],
  teams: [
    { title: 'NAME', value: (i) => i.name },
    { title: 'LIMITS', value: (i) => limitsText(i.limits) },
    { title: 'BUDGET', value: (i) => budgetText(i.budget) },
    { title: 'USER_BUDGET', value: (i) => budgetText(i.user_budget) },
  ],
  keys: [
    { title: 'NAME', value: (i) => i.name },
    { title: 'TEAM', value: (i) => i.team },
    { title: 'MODELS', value: (i) => (Array.isArray(i.models) ? (i.models.length === 0 ? 'none' : i.models.join(',')) : 'all') },
    { title: 'LIMITS', value: (i) => limitsText(i.limits) },
    { title: 'BUDGET', value: (i) => budgetText(i.budget) },
    { title: 'STATE', value: (i) => keyState(i) },
    { title: 'KEY_SHA256', value: (i) => (typeof i.key_sha256 === 'string' ? `${i.key_sha256.slice(0, 12)}…` : undefined) },
  ],
};

const RATE_NAMES = ['rpm', 'tpm', 'concurrent'] as const;

/** A key's or a team's limits in a cell: `rpm=600 tpm=200000 concurrent=20; gpt-4o: tpm=50000`. */
function limitsText(limits: unknown): string | undefined {
  if (!limits || typeof limits !== 'object') return undefined;
  const rates = (scope: Record<string, unknown>) => RATE_NAMES.filter((r) => scope[r] !== undefined).map((r) => `${r}=${String(scope[r])}`).join(' ');
  const own = rates(limits as Record<string, unknown>);
  const models = (limits as { models?: unknown }).models;
  const perModel = models && typeof models === 'object' ? Object.entries(models).map(([model, scope]) => `${model}: ${scope && typeof scope === 'object' ? rates(scope as Record<string, unknown>) : ''}`) : [];
  return [own, ...perModel].filter((part) => part !== '').join('; ') || undefined;
}

/** `$250/month`. */
function budgetText(budget: unknown): string | undefined {
  if (!budget || typeof budget !== 'object') return undefined;
  const { usd, period } = budget as { usd?: unknown; period?: unknown };
  return `$${String(usd)}/${typeof period === 'string' ? period : 'month'}`;
}

/** `disabled`, `expires 2027-01-01`, or `enabled`. */
function keyState(key: Record<string, unknown>): string {
  if (key.enabled === false) return 'disabled';
  return typeof key.expires_at === 'string' ? `expires ${key.expires_at}` : 'enabled';
}

/** `provider` for `providers`, as people type it. */
function kindOf(text: string): ResourceKind | undefined {
  if (isResourceKind(text)) return text;
  const plural = `${text}s`;
  return isResourceKind(plural) ? plural : undefined;
}

export async function getResources(config: Config, options: GetOptions, io: Output = PROCESS_OUTPUT): Promise<number> {
  const fail = (line: string, code = FAILED) => {
    io.err(printable(`sluice get: ${line}`));
    return code;
  };
  if (options.kind === undefined) return fail(`name what to list: sluice get ${RESOURCE_KINDS.join('|')} [NAME]`, USAGE);
  const kind = kindOf(options.kind);
  if (!kind) return fail(`unknown kind "${options.kind}": expected ${RESOURCE_KINDS.join(', ')}`, USAGE);
  const output = options.output;
  if (output !== undefined && output !== 'json' && output !== 'yaml') return fail(`unknown output format "${output}": -o takes json or yaml (default: a table)`, USAGE);
  const base = adminUrl(config, options.admin);
  if (!base) return fail('no admin listener in the config: name one with --admin URL');
  if (!URL_SCHEME.test(base)) return fail(`--admin takes a URL such as http://127.0.0.1:9901 (got ${redactUrl(base)})`, USAGE);
  const token = adminToken(config, options.token);
  const path = options.name === undefined ? `/config/${kind}` : `/config/${kind}/${encodeURIComponent(options.name)}`;
  let answer: AdminAnswer;
  try {
    answer = await adminRequest(base, token, 'GET', path);
  } catch (error) {
    if (error instanceof AdminUnreachable) return fail(error.message);
    throw error;
  }
  if (answer.status === 401) return fail(unauthorized(base, token));
  if (answer.status === 404 && options.name !== undefined && errorCode(answer) === 'resource_not_found') return fail(`no ${kind}/${options.name}`);
  if (answer.status !== 200) return fail(`GET ${path}: ${errorMessage(answer)} (${answer.status})`);
  const body = answer.json as { items?: Record<string, unknown>[]; item?: Record<string, unknown>; revision?: number } | undefined;
  const items = options.name === undefined ? body?.items : body?.item ? [{ ...body.item, revision: body.revision }] : undefined;
  if (!Array.isArray(items)) return fail(`GET ${path} answered something else than resources: ${answer.text.slice(0, 200)}`);
  // Every string from the gateway printed harmlessly: escaped in place where the format has escapes, else each control as "?".
  if (output === 'json') io.out(escapeControls(JSON.stringify(answer.json, null, 2)));
  else if (output === 'yaml') io.out(escapeControls(asYaml(kind, items).trimEnd()));
  else for (const line of table(kind, items)) io.out(line);
  return OK;
}

/**
 * The items as a file `apply -f` takes: without what the API adds (revision, api_key_set). A string
 * holding a control character is written double-quoted, where escapeControls can escape it.
 */
function asYaml(kind: ResourceKind, items: Record<string, unknown>[]): string {
  const notes: (string | undefined)[] = [];
  const plain = items.map((item) => {
    const { revision: _revision, api_key_set, ...rest } = item;
    const hidden = redactedFields(kind, rest).map(printable);
    if (api_key_set === true) hidden.unshift('api_key');
    notes.push(
      hidden.length > 0
        ? ` ${hidden.join(', ')}: set on the gateway but not shown. Write ${hidden.length === 1 ? 'it' : 'them'} (or a \${VAR})\n before applying this: \`sluice apply\` refuses "${REDACTED}", and a provider applied\n without its api_key loses it.`
        : undefined,
    );
    return rest;
  });
  const document = new Document({ [kind]: plain });
  const sequence = document.get(kind) as YAMLSeq<YAMLMap>;
  sequence.items.forEach((node, index) => {
    const note = notes[index];
    if (note) node.commentBefore = note;
  });
  visit(document, {
    Scalar(_key, node) {
      if (isScalar(node) && typeof node.value === 'string' && hasControl(node.value)) node.type = 'QUOTE_DOUBLE';
    },
  });
  return document.toString({ lineWidth: 0 });
}

/** Aligned columns, the revision last. */
function table(kind: ResourceKind, items: Record<string, unknown>[]): string[] {
  const columns = [...COLUMNS[kind], { title: 'REVISION', value: (i: Record<string, unknown>) => i.revision }];
  const rows = [columns.map((c) => c.title), ...items.map((item) => columns.map((c) => cell(c.value(item))))];
  const widths = columns.map((_, index) => Math.max(...rows.map((row) => row[index]!.length)));
  return rows.map((row) => row.map((text, index) => (index === row.length - 1 ? text : text.padEnd(widths[index]! + 3))).join(''));
}

function cell(value: unknown): string {
  if (value === undefined || value === null || value === '') return '-';
  return printable(typeof value === 'string' ? value : JSON.stringify(value));
}
