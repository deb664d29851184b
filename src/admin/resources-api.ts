// The admin API's resource routes: providers, models, teams and keys, read and written.
//   GET    /config/{kind}                 every resource of a kind (secrets left out)
//   GET    /config/{kind}/{name}          one, with its revision (also as ETag)
//   PUT    /config/{kind}/{name}          create or replace (If-Match: revision; If-None-Match: *)
//   DELETE /config/{kind}/{name}          (If-Match)
//   POST   /config/keys                   a new client key: {"name"}; the key is in the answer, once
//   POST   /config/keys/{name}/rotate     a new key for the name, in the answer, once
// A write is validated first (the resource's schema, and the whole config with it: a model's
// provider and a key's team must exist, a provider or a team in use stays), goes to etcd as a
// compare-and-swap on the key's revision, and is answered once this gateway serves it.
// Client keys are stored as SHA-256 digests only. Every write is an audit event.
import { randomBytes } from 'node:crypto';
import type { RequestContext } from '../server/context.ts';
import type { DrainDecision } from '../lifecycle/contracts.ts';
import { readBody } from '../server/body.ts';
import { sendError, sendJson } from '../server/respond.ts';
import { GatewayError, quoted } from '../api/errors.ts';
import { modelTargets, type Config, type ModelConfig } from '../config/schema.ts';
import { ConfigError, validateConfig } from '../config/load.ts';
import { isResourceKind, jsonSyntaxProblem, missingProvider, missingTeam, REDACTED, RESOURCE_KINDS, SECRET_HEADER, VARIABLE_REFERENCE, type Resource, type ResourceKind } from '../config/resources.ts';
import { ResourceStoreError, type ResourceStore, type WriteResult } from '../config/store.ts';
import { sha256 } from '../auth/keys.ts';
import { redactUrl } from '../config/redact-url.ts';

/** Longest wait, after a write, for this gateway to serve it before answering anyway (`applied: false`). */
const APPLY_WAIT_MS = 2000;
const BODY_LIMIT_BYTES = 1024 * 1024;

export interface AuditLog {
  info(fields: object, message: string): void;
}

export interface ResourcesEnvironment {
  readonly store: ResourceStore;
  /** The config serving now: a write is checked against it, with the resource changed. */
  readonly current: () => Config;
  readonly decision: DrainDecision;
  readonly audit: AuditLog;
}

const invalid = (message: string, code = 'invalid_resource') => new GatewayError(400, 'invalid_request_error', code, message);
const notFound = (kind: string, name: string) => new GatewayError(404, 'not_found_error', 'resource_not_found', `no ${kind}/${quoted(name)}`);

/** Routes a path under /config/ (`segments` after "config"); `who` is the admin token's name. */
export function serveResources(env: ResourcesEnvironment, ctx: RequestContext, segments: string[], who: string): void {
  const method = ctx.req.method ?? '';
  const fail = (error: GatewayError) => sendError(ctx, env.decision, error);
  const [kindText = '', rawName, action, ...rest] = segments;
  if (!isResourceKind(kindText) || rest.length > 0) return fail(new GatewayError(404, 'not_found_error', 'unknown_path', `no route for /config/${quoted(segments.join('/'))} (kinds: ${RESOURCE_KINDS.join(', ')})`));
  const kind = kindText;
  let name: string | undefined;
  try {
    name = rawName === undefined ? undefined : decodeURIComponent(rawName);
  } catch {
    return fail(invalid('the resource name is not valid percent-encoding', 'invalid_name'));
  }
  const allow = (expected: string) => fail(new GatewayError(405, 'invalid_request_error', 'method_not_allowed', `${method} is not allowed on ${quoted(ctx.req.url?.split('?')[0] ?? '')}; use ${expected}`, { allow: expected }));
  if (method !== 'GET' && method !== 'HEAD' && env.store.readOnly !== undefined) return fail(new GatewayError(409, 'invalid_request_error', 'read_only_source', env.store.readOnly));
  let work: Promise<Answer>;
  if (name === undefined) {
    if (method === 'GET') work = Promise.resolve(listAnswer(env.store, kind));
    else if (method === 'POST' && kind === 'keys') work = withBody(ctx, (body) => createKey(env, body, who));
    else return allow(kind === 'keys' ? 'GET, POST' : 'GET');
  } else if (action !== undefined) {
    if (kind !== 'keys' || action !== 'rotate') return fail(new GatewayError(404, 'not_found_error', 'unknown_path', `no route for ${quoted(ctx.req.url?.split('?')[0] ?? '')}`));
    if (method !== 'POST') return allow('POST');
    work = rotateKey(env, ctx, name, who);
  } else if (method === 'GET') {
    const found = env.store.get(kind, name);
    work = Promise.resolve(found ? { status: 200, body: { item: present(found, env.store.mode === 'etcd'), revision: found.revision }, etag: found.revision } : { error: notFound(kind, name) });
  } else if (method === 'PUT') work = withBody(ctx, (body) => put(env, ctx, kind, name, body, who));
  else if (method === 'DELETE') work = remove(env, ctx, kind, name, who);
  else return allow('GET, PUT, DELETE');
  work.then(
    (answer) => {
      if (ctx.res.headersSent || ctx.res.writableEnded) return;
      if ('error' in answer) return fail(answer.error);
      if (answer.etag !== undefined) ctx.res.setHeader('etag', `"${answer.etag}"`);
      sendJson(ctx, env.decision, answer.status, JSON.stringify(answer.body));
    },
    (error: unknown) => {
      if (ctx.res.headersSent || ctx.res.writableEnded) return;
      if (error instanceof ResourceStoreError) return fail(new GatewayError(error.status, error.status === 503 ? 'server_error' : 'invalid_request_error', error.code, error.message));
      if (error instanceof GatewayError) return fail(error);
      fail(new GatewayError(500, 'server_error', 'internal_error', 'internal gateway error'));
    },
  );
}

type Answer = { status: number; body: object; etag?: number } | { error: GatewayError };

function listAnswer(store: ResourceStore, kind: ResourceKind): Answer {
  const { items, revision } = store.list(kind);
  return { status: 200, body: { kind, source: store.mode, revision, items: items.map((r) => ({ ...present(r, store.mode === 'etcd'), revision: r.revision })) } };
}

/**
 * A resource as the API shows it: a provider's key only if it is a `${VAR}` reference, a header
 * whose name looks like a credential's (a provider's, a target's) as "[redacted]", a `base_url`
 * without its userinfo, query and fragment (redactUrl: a key may be written there, or expanded
 * there from the environment in a config file), a client key only as its digest. `asWritten`:
 * the stored form is what was written, its `${VAR}`s unresolved (etcd); otherwise (a config file)
 * every value is already the environment's, and every header value is redacted.
 */
export function present(resource: Resource, asWritten = true): Record<string, unknown> {
  const stored = { ...resource.stored };
  if (resource.kind === 'providers') {
    if (typeof stored.api_key === 'string' && !VARIABLE_REFERENCE.test(stored.api_key)) {
      delete stored.api_key;
      stored.api_key_set = true;
    }
    stored.headers = redactHeaders(stored.headers, asWritten);
    if (typeof stored.base_url === 'string') stored.base_url = redactUrl(stored.base_url);
  }
  if (resource.kind === 'models' && Array.isArray(stored.targets)) {
    stored.targets = stored.targets.map((target: unknown) =>
      target !== null && typeof target === 'object' && 'headers' in target ? { ...target, headers: redactHeaders(target.headers, asWritten) } : target,
    );
  }
  if (resource.kind === 'keys' && typeof stored.key === 'string') {
    stored.key_sha256 = sha256(stored.key);
    delete stored.key;
  }
  return stored;
}

function redactHeaders(headers: unknown, asWritten: boolean): unknown {
  if (!headers || typeof headers !== 'object') return headers;
  return Object.fromEntries(Object.entries(headers).map(([h, v]) => [h, !asWritten || SECRET_HEADER.test(h) ? REDACTED : v]));
}

async function withBody(ctx: RequestContext, then: (body: unknown) => Promise<Answer>): Promise<Answer> {
  const read = await readBody(ctx.req, BODY_LIMIT_BYTES);
  if (!read.ok) return read.error ? { error: read.error } : { error: invalid('the request body did not arrive') };
  let body: unknown;
  try {
    body = read.body.length === 0 ? undefined : JSON.parse(read.body.toString('utf8'));
  } catch (error) {
    // Said without quoting the body: it may hold a secret.
    return { error: invalid(`the body is ${jsonSyntaxProblem(error)}`, 'invalid_json') };
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return { error: invalid('expected a JSON object', 'invalid_json') };
  return then(body);
}

/** The revision a write must find: If-Match's, 0 for If-None-Match: *, else the key's revision now (read here: still a compare-and-swap). */
async function expectedRevision(env: ResourcesEnvironment, ctx: RequestContext, kind: ResourceKind, name: string): Promise<number | GatewayError> {
  const ifMatch = ctx.req.headers['if-match'];
  const ifNoneMatch = ctx.req.headers['if-none-match'];
  if (ifMatch !== undefined) {
    const match = /^\s*(?:W\/)?"?(\d+)"?\s*$/.exec(ifMatch);
    if (!match) return invalid('If-Match must be a revision, as the ETag gave it ("123")', 'invalid_precondition');
    return Number(match[1]);
  }
  if (ifNoneMatch !== undefined) {
    if (ifNoneMatch.trim() !== '*') return invalid('If-None-Match takes only "*" (create, never replace)', 'invalid_precondition');
    return 0;
  }
  return (await env.store.current(kind, name)).revision;
}

/**
 * Checks a resource alone, then the whole config with it in (a model's provider, a key's team must
 * exist). The store checks it with the variables this gateway lets a resource read; its reason
 * names fields, never values (a key's unknown team is named: it is a name, which no `${VAR}` fills).
 */
function validate(env: ResourcesEnvironment, kind: ResourceKind, name: string, body: object): Resource | GatewayError {
  const checked = env.store.check(kind, name, body);
  if (!checked.ok) return invalid(`${kind}/${quoted(name)}: ${checked.reason}`);
  return fits(env, kind, name, checked.resource) ?? checked.resource;
}

/** The whole-config problem the change would cause, if any. */
function fits(env: ResourcesEnvironment, kind: ResourceKind, name: string, resource: Resource | undefined): GatewayError | undefined {
  const { resources_pending: _pending, etcd: _etcd, ...current } = env.current();
  if (resource && kind === 'models') {
    const unknown = missingProvider(resource.value as ModelConfig, new Set(current.providers.map((p) => p.name)));
    if (unknown !== undefined) return invalid(`${kind}/${quoted(name)}: ${unknown}`);
  }
  if (resource && kind === 'keys') {
    const unknown = missingTeam(resource.value as { team?: string }, new Set(current.teams.map((t) => t.name)));
    if (unknown !== undefined) return invalid(`${kind}/${quoted(name)}: ${unknown}`);
  }
  const lists: Record<ResourceKind, unknown[]> = { providers: [...current.providers], models: [...current.models], teams: [...current.teams], keys: [...current.keys] };
  const others = lists[kind].filter((item) => typeof item === 'string' || (item as { name: string }).name !== name);
  lists[kind] = resource ? [...others, resource.value] : others;
  try {
    validateConfig({ ...current, ...lists }, 'admin API');
    return undefined;
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    const problems = error.problems.map((p) => `${p.path}: ${p.message}`).join('; ');
    if (!resource && kind === 'providers') {
      const users = current.models.filter((m) => modelTargets(m).some((t) => t.provider === name)).map((m) => m.name);
      if (users.length > 0) return new GatewayError(409, 'invalid_request_error', 'resource_in_use', `provider "${name}" is used by models ${users.map((u) => `"${u}"`).join(', ')}: change or delete them first`);
    }
    if (!resource && kind === 'teams') {
      const members = current.keys.filter((k) => typeof k !== 'string' && k.team === name).map((k) => (k as { name: string }).name);
      if (members.length > 0) return new GatewayError(409, 'invalid_request_error', 'resource_in_use', `team "${name}" is used by keys ${members.map((k) => `"${k}"`).join(', ')}: move them to another team or delete them first`);
    }
    return invalid(`${kind}/${quoted(name)} does not fit the configuration: ${problems}`);
  }
}

/**
 * A `name` in a PUT's body that is not the one in its URL: refused (400), as etcd refuses a key
 * whose value names another, rather than stored under the URL's name (which renamed the resource
 * the body described). Both names are quoted, each capped.
 */
function nameMismatch(kind: ResourceKind, name: string, given: unknown): GatewayError | undefined {
  if (given === undefined || given === name) return undefined;
  const what = typeof given === 'string' ? `"${quoted(given)}"` : `a ${given === null ? 'null' : Array.isArray(given) ? 'list' : typeof given}, not a name`;
  return invalid(`the body's name (${what}) is not the one in the URL (${kind}/"${quoted(name)}"): leave it out or make it the same`, 'name_mismatch');
}

/** A client key is stored as its digest: `{ key }` becomes `{ key_sha256 }`. */
function hashKey(body: Record<string, unknown>): Record<string, unknown> {
  if (typeof body.key !== 'string') return body;
  const { key, ...rest } = body;
  return { ...rest, key_sha256: sha256(key) };
}

async function put(env: ResourcesEnvironment, ctx: RequestContext, kind: ResourceKind, name: string, body: unknown, who: string): Promise<Answer> {
  const mismatch = nameMismatch(kind, name, (body as { name?: unknown }).name);
  if (mismatch) return { error: mismatch };
  if (kind === 'keys') {
    // The key as sent is checked before it becomes a digest: one holding "${" is refused, never stored as the hash of its text.
    const raw = env.store.check(kind, name, { ...(body as object), name });
    if (!raw.ok) return { error: invalid(`${kind}/${quoted(name)}: ${raw.reason}`) };
  }
  const stored = kind === 'keys' ? hashKey(body as Record<string, unknown>) : (body as Record<string, unknown>);
  const checked = validate(env, kind, name, { ...stored, name });
  if (checked instanceof GatewayError) return { error: checked };
  const expected = await expectedRevision(env, ctx, kind, name);
  if (expected instanceof GatewayError) return { error: expected };
  return write(env, who, 'put', checked, () => env.store.put(kind, name, checked.stored, expected), (revision, applied) => ({ status: expected === 0 ? 201 : 200, body: { item: present(checked), revision, applied }, etag: revision }));
}

async function remove(env: ResourcesEnvironment, ctx: RequestContext, kind: ResourceKind, name: string, who: string): Promise<Answer> {
  const problem = fits(env, kind, name, undefined);
  if (problem) return { error: problem };
  const expected = await expectedRevision(env, ctx, kind, name);
  if (expected instanceof GatewayError) return { error: expected };
  if (expected === 0) return { error: notFound(kind, name) };
  return write(env, who, 'delete', { kind, name }, () => env.store.delete(kind, name, expected), (revision, applied) => ({ status: 200, body: { deleted: `${kind}/${name}`, revision, applied } }));
}

async function createKey(env: ResourcesEnvironment, body: unknown, who: string): Promise<Answer> {
  const name = (body as { name?: unknown } | null)?.name;
  if (typeof name !== 'string') return { error: invalid('expected {"name": "..."}: the name of the new key (and optionally models, expires_at, enabled, metadata, limits, budget, team, user_budget)') };
  const key = newKey();
  // Anything else in the body (models, expires_at, …; or a field that does not exist) is the schema's to judge.
  const checked = validate(env, 'keys', name, { ...(body as object), name, key_sha256: sha256(key) });
  if (checked instanceof GatewayError) return { error: checked };
  return write(env, who, 'create_key', checked, () => env.store.put('keys', name, checked.stored, 0), (revision, applied) => ({ status: 201, body: { item: present(checked), key, revision, applied }, etag: revision }));
}

/** A stored resource's JSON as an object ({} when absent or unreadable). */
function parseStored(value: string | undefined): Record<string, unknown> {
  if (value === undefined) return {};
  try {
    const parsed: unknown = JSON.parse(value);
    return parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

async function rotateKey(env: ResourcesEnvironment, ctx: RequestContext, name: string, who: string): Promise<Answer> {
  const expected = await expectedRevision(env, ctx, 'keys', name);
  if (expected instanceof GatewayError) return { error: expected };
  if (expected === 0) return { error: notFound('keys', name) };
  const key = newKey();
  // The key changes; what it may do (models, expiry, enabled, metadata, limits, budget, team) stays.
  const { key: _key, key_sha256: _digest, ...policy } = parseStored((await env.store.current('keys', name)).value);
  const checked = validate(env, 'keys', name, { ...policy, name, key_sha256: sha256(key) });
  if (checked instanceof GatewayError) return { error: checked };
  return write(env, who, 'rotate_key', checked, () => env.store.put('keys', name, checked.stored, expected), (revision, applied) => ({ status: 200, body: { item: present(checked), key, revision, applied }, etag: revision }));
}

/** Every write: done (a compare-and-swap in the store), audited, then answered once this gateway serves it (or APPLY_WAIT_MS passed). */
async function write(
  env: ResourcesEnvironment,
  who: string,
  action: string,
  resource: Pick<Resource, 'kind' | 'name'>,
  operation: () => Promise<WriteResult>,
  answer: (revision: number, applied: boolean) => Answer,
): Promise<Answer> {
  const result = await operation();
  audit(env, who, action, `${resource.kind}/${resource.name}`, result.before, result.revision);
  return answer(result.revision, await env.store.applied(result.revision, APPLY_WAIT_MS));
}

/** The audit event: who, what, the key's revision before and etcd's after. Never a value (secrets). */
function audit(env: ResourcesEnvironment, who: string, action: string, resource: string, before: number, after: number): void {
  env.audit.info({ event: 'config_write', who, action, resource, before_revision: before, after_revision: after }, `${who}: ${action} ${resource} (revision ${before} → ${after})`);
}

/** A new client key: 32 random bytes, base64url, with a prefix that says whose it is. */
function newKey(): string {
  return `sk-sluice-${randomBytes(32).toString('base64url')}`;
}
