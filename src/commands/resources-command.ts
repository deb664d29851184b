// `sluice apply -f FILE` and `sluice get KIND [NAME]`: the admin API's resource routes
// (admin/resources-api.ts) for people who prefer a command to curl.
//
// apply: makes the providers, models and keys a YAML file lists be what the gateway stores, one at
// a time (providers first: a model needs its provider), each a compare-and-swap on the revision it
// was read at. It never deletes what the file does not list. `${VAR}`s are sent as written: each
// gateway resolves them from its own environment.
// get: lists a kind (or shows one resource) as a table, as JSON, or as YAML that `apply -f` takes.
import { hash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import { Document, parse, type YAMLMap, type YAMLSeq } from 'yaml';
import type { z } from 'zod';
import { modelSchema, providerSchema, type Config } from '../config/schema.ts';
import { isResourceKind, REDACTED, RESOURCE_KINDS, SECRET_HEADER, VARIABLE_REFERENCE, type ResourceKind } from '../config/resources.ts';
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

/** Reads and checks the file's shape: every problem at once, or the resources in the order they are applied. */
export function readApplyFile(path: string): { ok: true; items: FileItem[] } | { ok: false; problems: string[] } {
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
      const body = entry as Record<string, unknown>;
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

function redactedFields(kind: ResourceKind, body: Record<string, unknown>): string[] {
  if (kind !== 'providers') return [];
  const found: string[] = [];
  if (body.api_key === REDACTED) found.push('api_key');
  const headers = body.headers;
  if (headers && typeof headers === 'object') for (const [header, value] of Object.entries(headers)) if (value === REDACTED) found.push(`headers.${header}`);
  return found;
}

export async function applyResources(config: Config, options: ApplyOptions, io: Output = PROCESS_OUTPUT): Promise<number> {
  const fail = (line: string, code = FAILED) => {
    io.err(`sluice apply: ${line}`);
    return code;
  };
  if (!options.file) return fail('name the file to apply with -f FILE (a YAML file with providers:, models: and keys: lists)', USAGE);
  const base = adminUrl(config, options.admin);
  if (!base) return fail('no admin listener in the config: name one with --admin URL');
  if (!URL_SCHEME.test(base)) return fail(`--admin takes a URL such as http://127.0.0.1:9901 (got ${base})`, USAGE);
  const read = readApplyFile(options.file);
  if (!read.ok) {
    for (const problem of read.problems) io.err(`sluice apply: ${problem}`);
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
        io.err(`sluice apply: ${label}: ${errorMessage(answer)} (${answer.status})`);
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
          io.out(`${label} unchanged`);
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
      io.out(`${label} ${written.status === 201 ? 'created' : 'configured'}`);
      if (item.kind === 'providers' && shown?.api_key_set === true && item.body.api_key === undefined) {
        io.err(`sluice apply: ${label}: note: the file gives no api_key, so the one the gateway had is removed`);
      }
      const result = written.json as { applied?: unknown; revision?: unknown } | undefined;
      if (result?.applied === false) io.err(`sluice apply: ${label}: note: written (revision ${String(result.revision)}) but not yet served by the gateway at ${base}: see its log if it stays so`);
    }
  } catch (error) {
    if (error instanceof Stop || error instanceof AdminUnreachable) return fail(error.message);
    throw error;
  }
  return failed > 0 ? FAILED : OK;
}

/**
 * Whether the gateway already stores what the file says. A provider with a literal api_key (or a
 * secret header) is never taken as unchanged: the API does not show those, so they are written.
 */
function unchanged(item: FileItem, shown: Record<string, unknown>): boolean {
  const body = { ...item.body };
  if (item.kind === 'providers') {
    if (typeof body.api_key === 'string' && !VARIABLE_REFERENCE.test(body.api_key)) return false;
    const headers = body.headers;
    if (headers && typeof headers === 'object' && Object.keys(headers).some((h) => SECRET_HEADER.test(h))) return false;
  }
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
  keys: [
    { title: 'NAME', value: (i) => i.name },
    { title: 'KEY_SHA256', value: (i) => (typeof i.key_sha256 === 'string' ? `${i.key_sha256.slice(0, 12)}…` : undefined) },
  ],
};

/** `provider` for `providers`, as people type it. */
function kindOf(text: string): ResourceKind | undefined {
  if (isResourceKind(text)) return text;
  const plural = `${text}s`;
  return isResourceKind(plural) ? plural : undefined;
}

export async function getResources(config: Config, options: GetOptions, io: Output = PROCESS_OUTPUT): Promise<number> {
  const fail = (line: string, code = FAILED) => {
    io.err(`sluice get: ${line}`);
    return code;
  };
  if (options.kind === undefined) return fail(`name what to list: sluice get ${RESOURCE_KINDS.join('|')} [NAME]`, USAGE);
  const kind = kindOf(options.kind);
  if (!kind) return fail(`unknown kind "${options.kind}": expected ${RESOURCE_KINDS.join(', ')}`, USAGE);
  const output = options.output;
  if (output !== undefined && output !== 'json' && output !== 'yaml') return fail(`unknown output format "${output}": -o takes json or yaml (default: a table)`, USAGE);
  const base = adminUrl(config, options.admin);
  if (!base) return fail('no admin listener in the config: name one with --admin URL');
  if (!URL_SCHEME.test(base)) return fail(`--admin takes a URL such as http://127.0.0.1:9901 (got ${base})`, USAGE);
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
  if (output === 'json') io.out(JSON.stringify(answer.json, null, 2));
  else if (output === 'yaml') io.out(asYaml(kind, items).trimEnd());
  else for (const line of table(kind, items)) io.out(line);
  return OK;
}

/** The items as a file `apply -f` takes: without what the API adds (revision, api_key_set). */
function asYaml(kind: ResourceKind, items: Record<string, unknown>[]): string {
  const notes: (string | undefined)[] = [];
  const plain = items.map((item) => {
    const { revision: _revision, api_key_set, ...rest } = item;
    const hidden: string[] = [];
    if (api_key_set === true) hidden.push('api_key');
    const headers = rest.headers;
    if (headers && typeof headers === 'object') for (const [h, v] of Object.entries(headers)) if (v === REDACTED) hidden.push(`headers.${h}`);
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
  return typeof value === 'string' ? value : JSON.stringify(value);
}
