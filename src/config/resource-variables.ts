// Which fields of a resource (from etcd or the admin API) may read the gateway's environment, and
// which variables. Whoever holds an admin token or can write to etcd writes resources; the
// environment is the gateway host's, secrets included. So `${VAR}` expands only where a credential
// goes (a provider's api_key, a header's value: sent upstream, never validated against a list,
// never shown) and only for the variables the bootstrap file lists in `etcd.allowed_env`. Anywhere
// else a `${VAR}` is refused, naming the variable and the field: a value there is validated,
// compared, logged, traced or shown, and could be read back. `$$` is an escape only where
// variables expand; elsewhere text is taken exactly as written.
import { interpolate, referencesIn, type MissingVariable } from './interpolate.ts';
import { formatPath } from './load.ts';

export interface ResourceVariables {
  /** Where variables are read from. */
  readonly env: NodeJS.ProcessEnv;
  /** The variables a resource may read (`etcd.allowed_env`). */
  readonly allowed: ReadonlySet<string>;
}

/** Nothing expands: what a resource is checked with unless a gateway allows variables. */
export const NO_VARIABLES: ResourceVariables = Object.freeze({ env: {}, allowed: new Set<string>() });

const MAX_DEPTH = 32;

/** Said where a `${VAR}` is refused for the field it is in. */
export const SECRET_FIELDS = "a provider's api_key and header values, and a target's header values";

/** Said of a client key holding "${": the gateway stores only a key's digest, so a variable in it can never be resolved later. */
export const KEY_WITH_VARIABLE = 'a client key must not contain "${" (an unresolved ${VAR}?)';

/** Whether `path` in a resource of `kind` holds a credential: a provider's `api_key` or a header's value (a provider's, a target's). */
export function isSecretField(kind: string, path: readonly (string | number)[]): boolean {
  if (kind === 'providers') return (path.length === 1 && path[0] === 'api_key') || (path.length === 2 && path[0] === 'headers');
  if (kind === 'models') return path.length === 4 && path[0] === 'targets' && typeof path[1] === 'number' && path[2] === 'headers';
  return false;
}

/**
 * The resource with its variables expanded, or why it cannot be: each problem names the field and
 * the variable, never a value (of the field, or of the variable).
 */
export function resolveVariables(kind: string, document: Readonly<Record<string, unknown>>, variables: ResourceVariables): { ok: true; value: unknown } | { ok: false; problems: string[] } {
  const problems = new Set<string>();
  let expands = false;
  eachString(document, [], 0, (text, path) => {
    if (kind === 'keys' && path.length === 1 && path[0] === 'key' && text.includes('${')) {
      const named = referencesIn(text).map((variable) => `\${${variable}}`);
      problems.add(
        named.length === 0
          ? `key: ${KEY_WITH_VARIABLE}`
          : `key: a client key must not contain "\${": ${named.join(', ')} would never be resolved (only the key's digest is kept); resolve it before sending the key, as sluice apply does`,
      );
      return;
    }
    const secret = isSecretField(kind, path);
    if (secret && text.includes('$')) expands = true;
    for (const variable of referencesIn(text)) {
      if (!secret) problems.add(`${formatPath(path)}: \${${variable}} is refused here: environment variables are read only in ${SECRET_FIELDS}`);
      else if (!variables.allowed.has(variable)) problems.add(`${formatPath(path)}: environment variable \${${variable}} is not one this gateway allows (etcd.allowed_env)`);
    }
  });
  if (problems.size > 0) return { ok: false, problems: [...problems] };
  if (!expands) return { ok: true, value: document };
  const missing: MissingVariable[] = [];
  const value = interpolate(document, variables.env, missing, { where: (path) => isSecretField(kind, path) });
  if (missing.length > 0) return { ok: false, problems: missing.map((m) => `${formatPath(m.path)}: environment variable \${${m.variable}} is not set on this gateway`) };
  return { ok: true, value };
}

function eachString(value: unknown, path: (string | number)[], depth: number, visit: (text: string, path: (string | number)[]) => void): void {
  if (typeof value === 'string') return visit(value, path);
  if (value === null || typeof value !== 'object') return;
  if (depth > MAX_DEPTH) throw new RangeError('the document is nested too deeply');
  if (Array.isArray(value)) value.forEach((item, index) => eachString(item, [...path, index], depth + 1, visit));
  else for (const [key, item] of Object.entries(value)) eachString(item, [...path, key], depth + 1, visit);
}
