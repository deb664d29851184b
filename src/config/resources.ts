// Providers, models, teams and keys as resources: one per key, `<kind>/<name>`, each a JSON
// document that the schema's item type validates. What the etcd source, the snapshot cache and the
// admin API share. A resource that is not valid is rejected alone: the others apply, and the key
// keeps the last value of it that was valid (or stays absent).
import { ConfigError, issueProblems, validateConfig } from './load.ts';
import { NO_VARIABLES, resolveVariables, type ResourceVariables } from './resource-variables.ts';
import { modelSchema, modelTargets, namedKeySchema, providerSchema, teamSchema, type Config, type ModelConfig, type ProviderConfig } from './schema.ts';

/** The kinds, in the order a set of them is written (`sluice apply`): a model needs its provider, a key its team. */
export const RESOURCE_KINDS = ['providers', 'models', 'teams', 'keys'] as const;
export type ResourceKind = (typeof RESOURCE_KINDS)[number];

const SCHEMAS = { providers: providerSchema, models: modelSchema, teams: teamSchema, keys: namedKeySchema } as const;

/** A whole-config problem's path that starts in a resource's list: `keys[2].team`. */
const RESOURCE_PATH = new RegExp(`^(${RESOURCE_KINDS.join('|')})\\[(\\d+)\\]`);

/** What the admin API shows of a provider's secrets: an `api_key` only when it is a `${VAR}` reference... */
export const VARIABLE_REFERENCE = /^\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}$/;
/** ...and a header's value only when its name does not look like a credential's (else "[redacted]"). */
export const SECRET_HEADER = /auth|key|token|secret|cookie|password/i;
export { REDACTED } from './redact-url.ts';

export function isResourceKind(text: string): text is ResourceKind {
  return (RESOURCE_KINDS as readonly string[]).includes(text);
}

/** The key of a resource below the prefix: `models/gpt-4o`. The name is percent-encoded (a model name may hold "/" or "*"). */
export function resourceKey(kind: ResourceKind, name: string): string {
  return `${kind}/${encodeURIComponent(name)}`;
}

export function parseResourceKey(key: string): { kind: ResourceKind; name: string } | undefined {
  const slash = key.indexOf('/');
  const kind = key.slice(0, slash);
  if (slash < 0 || !isResourceKind(kind)) return undefined;
  try {
    const name = decodeURIComponent(key.slice(slash + 1));
    return name === '' || resourceKey(kind, name) !== key ? undefined : { kind, name };
  } catch {
    return undefined;
  }
}

/**
 * Where a text that is not JSON is wrong, without a word of the text: JSON.parse's own message
 * quotes the text around the error, which may be a secret written in a broken document.
 */
export function jsonSyntaxProblem(error: unknown): string {
  const where = /at position (\d+)(?: \(line (\d+) column (\d+)\))?/.exec((error as Error)?.message ?? '');
  if (!where) return 'not JSON';
  return where[2] !== undefined ? `not JSON (line ${where[2]}, column ${where[3]})` : `not JSON (at character ${Number(where[1]) + 1})`;
}

/** A resource as stored (its `${VAR}`s not resolved) and as it serves (resolved, validated). */
export interface Resource {
  readonly kind: ResourceKind;
  readonly name: string;
  /** The JSON object stored, with its `name`. */
  readonly stored: Readonly<Record<string, unknown>>;
  /** The validated value, its allowed `${VAR}`s resolved from this process's environment. */
  readonly value: unknown;
  /** The etcd revision of its last change (0 when not from etcd). */
  readonly revision: number;
}

/** Problems said of one resource, at most (then how many more). */
const MAX_PROBLEMS = 20;

export type Checked = { ok: true; resource: Resource } | { ok: false; reason: string };

/**
 * Checks one resource: a JSON object (text) or an object, of its kind's schema, with the `${VAR}`s
 * that `variables` allows resolved (resource-variables.ts; by default none). Its `name`, when
 * given, must be the one of its key (it is filled in when not). A reason names fields and what
 * they expect, never a value: whoever wrote the resource must not read anything back through it.
 */
export function checkResource(kind: ResourceKind, name: string, document: string | unknown, revision: number, variables: ResourceVariables = NO_VARIABLES): Checked {
  let parsed: unknown = document;
  if (typeof document === 'string') {
    try {
      parsed = JSON.parse(document);
    } catch (error) {
      return { ok: false, reason: jsonSyntaxProblem(error) };
    }
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return { ok: false, reason: 'expected a JSON object' };
  const object = parsed as Record<string, unknown>;
  if (object.name !== undefined && object.name !== name) return { ok: false, reason: `name: not the name in its key ("${name}"); leave it out or make it the same` };
  const stored = { ...object, name };
  let resolved: ReturnType<typeof resolveVariables>;
  try {
    resolved = resolveVariables(kind, stored, variables);
  } catch (error) {
    return { ok: false, reason: (error as Error).message };
  }
  if (!resolved.ok) return { ok: false, reason: resolved.problems.join('; ') };
  const result = SCHEMAS[kind].safeParse(resolved.value, { reportInput: true });
  if (!result.success) {
    // A hostile document can have any number of problems: the first few say enough.
    const problems = issueProblems(result.error.issues, { schemaPath: [kind, 0], limit: MAX_PROBLEMS });
    return { ok: false, reason: problems.map((p) => (p.path ? `${p.path}: ${p.message}` : p.message)).join('; ') };
  }
  if (kind === 'providers') {
    const foreign = identityLeak(result.data as ProviderConfig);
    if (foreign !== undefined) return { ok: false, reason: foreign };
  }
  return { ok: true, resource: { kind, name, stored, value: result.data, revision } };
}

/** The domains each cloud identity's requests may go to, when the provider is a resource. */
const IDENTITY_DOMAINS: Readonly<Record<string, { readonly cloud: string; readonly domains: readonly string[] }>> = {
  bedrock: { cloud: 'AWS', domains: ['.amazonaws.com', '.amazonaws.com.cn'] },
  vertex: { cloud: 'Google Cloud', domains: ['.googleapis.com'] },
  azure_openai: { cloud: 'Microsoft Entra ID', domains: ['.openai.azure.com', '.cognitiveservices.azure.com', '.services.ai.azure.com', '.azure-api.net'] },
};

/**
 * Why a provider resource may not use the gateway's own cloud identity as written: whoever holds an
 * admin token or writes to etcd could otherwise point a provider that signs with, or sends a
 * bearer token of, the gateway's identity at a server of theirs. Such a provider's base_url must be
 * https on its cloud's domains; another one is for the bootstrap file.
 */
function identityLeak(provider: ProviderConfig): string | undefined {
  const usesIdentity = provider.type === 'bedrock' || provider.type === 'vertex' || (provider.type === 'azure_openai' && provider.auth === 'entra_id');
  if (!usesIdentity || provider.base_url === undefined) return undefined;
  const rule = IDENTITY_DOMAINS[provider.type]!;
  const url = new URL(provider.base_url);
  if (url.protocol === 'https:' && rule.domains.some((domain) => url.hostname.endsWith(domain))) return undefined;
  return `base_url: a ${provider.type} provider defined as a resource authenticates with the gateway's own ${rule.cloud} identity, so it sends only over https to ${rule.domains.map((d) => `*${d}`).join(', ')}; any other base_url belongs in the bootstrap file`;
}

/**
 * Why a model cannot route (a target's provider is not among `providers`), or undefined. The
 * providers' names are their keys and are listed; the name written is not quoted.
 */
export function missingProvider(model: ModelConfig, providers: ReadonlySet<string>): string | undefined {
  const missing = modelTargets(model).findIndex((t) => !providers.has(t.provider));
  if (missing === -1) return undefined;
  const known = [...providers].map((p) => `"${p}"`).join(', ') || 'none';
  return `${model.targets ? `targets[${missing}].provider` : 'provider'}: no provider of that name (known: ${known})`;
}

/**
 * Why a key cannot serve (its `team` is not among `teams`), or undefined. Its team is named: past
 * the schema it is a name of letters, digits, "_", "." and "-", which no `${VAR}` can fill.
 */
export function missingTeam(key: { readonly team?: string | undefined }, teams: ReadonlySet<string>): string | undefined {
  if (key.team === undefined || teams.has(key.team)) return undefined;
  const known = [...teams].map((t) => `"${t}"`).join(', ') || 'none';
  return `team: no team "${key.team}" (known: ${known})`;
}

export interface Rejection {
  /** The resource's key (`models/gpt-4o`). */
  readonly key: string;
  readonly reason: string;
}

/** One change of a key: its new JSON, or deleted. */
export interface ResourceChange {
  readonly key: string;
  readonly value: string | undefined;
  readonly revision: number;
}

/**
 * The resources applied: for each key the last value that was valid on its own. What a config is
 * composed from, what the snapshot holds and what the admin API lists.
 */
export class ResourceSet {
  readonly #resources = new Map<string, Resource>();
  /** The etcd revision these resources are at (0: not from etcd). */
  revision = 0;

  /** Applies changes in order. A key whose new value is not valid keeps its last good one: it is returned as rejected. */
  apply(changes: readonly ResourceChange[], variables: ResourceVariables = NO_VARIABLES): Rejection[] {
    const rejected: Rejection[] = [];
    for (const change of changes) {
      const at = parseResourceKey(change.key);
      if (!at) {
        rejected.push({ key: change.key, reason: `not a resource key: expected <${RESOURCE_KINDS.join('|')}>/<name, percent-encoded>` });
        continue;
      }
      if (change.value === undefined) {
        this.#resources.delete(change.key);
        continue;
      }
      const checked = checkResource(at.kind, at.name, change.value, change.revision, variables);
      if (checked.ok) this.#resources.set(change.key, checked.resource);
      else rejected.push({ key: change.key, reason: checked.reason });
    }
    return rejected;
  }

  /** Replaces everything by `entries` (a full read): keys absent from it are deleted. */
  replaceAll(entries: ReadonlyMap<string, { value: string; revision: number }>, revision: number, variables: ResourceVariables = NO_VARIABLES): Rejection[] {
    const changes: ResourceChange[] = [];
    for (const key of this.#resources.keys()) if (!entries.has(key)) changes.push({ key, value: undefined, revision });
    for (const [key, entry] of entries) {
      const known = this.#resources.get(key);
      // Unchanged since applied: nothing to check again (a key rejected before is checked again: its revision differs).
      if (known && known.revision === entry.revision && known.revision !== 0) continue;
      changes.push({ key, value: entry.value, revision: entry.revision });
    }
    this.revision = revision;
    return this.apply(changes, variables);
  }

  get(kind: ResourceKind, name: string): Resource | undefined {
    return this.#resources.get(resourceKey(kind, name));
  }

  list(kind: ResourceKind): Resource[] {
    return [...this.#resources.values()].filter((r) => r.kind === kind).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Key → stored JSON and revision: what the snapshot keeps. */
  entries(): Map<string, { value: string; revision: number }> {
    return new Map([...this.#resources].map(([key, r]) => [key, { value: JSON.stringify(r.stored), revision: r.revision }]));
  }

  get size(): number {
    return this.#resources.size;
  }

  /**
   * The config `bootstrap` (the host's part, from the file) completed with these resources. A
   * resource that does not fit with the others (a model of a provider that is not there, a key of a
   * team that is not there) is left out and returned as rejected; the rest is validated as one
   * config (a failure there throws a ConfigError: nothing applies).
   */
  compose(bootstrap: Config, source: string): { config: Config; rejected: Rejection[] } {
    const rejected: Rejection[] = [];
    let included = RESOURCE_KINDS.flatMap((kind) => this.list(kind));
    const providers = new Set(included.filter((r) => r.kind === 'providers').map((r) => r.name));
    const teams = new Set(included.filter((r) => r.kind === 'teams').map((r) => r.name));
    included = included.filter((r) => {
      // A key left out rather than served without its team: the team's limits and budget would not count it.
      const reason = r.kind === 'models' ? missingProvider(r.value as ModelConfig, providers) : r.kind === 'keys' ? missingTeam(r.value as { team?: string }, teams) : undefined;
      if (reason === undefined) return true;
      rejected.push({ key: resourceKey(r.kind, r.name), reason });
      return false;
    });
    // What the whole-config checks still find in one resource (an echo provider with a base_url) leaves that one out.
    for (let attempt = 0; ; attempt++) {
      const { resources_pending: _pending, etcd: _etcd, ...host } = bootstrap;
      const raw = { ...host, ...Object.fromEntries(RESOURCE_KINDS.map((kind) => [kind, included.filter((r) => r.kind === kind).map((r) => r.value)])) };
      try {
        return { config: validateConfig(raw, source), rejected };
      } catch (error) {
        if (!(error instanceof ConfigError) || attempt > included.length) throw error;
        const culprits = new Set<Resource>();
        for (const problem of error.problems) {
          const match = RESOURCE_PATH.exec(problem.path);
          const kind = match?.[1] as ResourceKind | undefined;
          const resource = kind ? included.filter((r) => r.kind === kind)[Number(match![2])] : undefined;
          if (!resource) throw error;
          if (!culprits.has(resource)) rejected.push({ key: resourceKey(resource.kind, resource.name), reason: problem.path.replace(/^[a-z]+\[\d+\]\.?/, '') + (problem.path.includes('.') ? ': ' : '') + problem.message });
          culprits.add(resource);
        }
        included = included.filter((r) => !culprits.has(r));
      }
    }
  }
}
