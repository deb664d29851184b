// `${VAR}` and `${VAR:-default}` in config values, resolved from the environment after the YAML is
// parsed, so that a value containing YAML syntax (`#`, `: `) cannot change the document's shape.

const PATTERN = /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;

const MAX_DEPTH = 32;

export interface MissingVariable {
  path: (string | number)[];
  variable: string;
}

/**
 * Returns a copy of `value` with every string interpolated. `${VAR}` with VAR unset is reported in
 * `missing` (and becomes ""); `${VAR:-default}` uses the default when VAR is unset or empty; `$$` is
 * a literal `$`.
 */
export function interpolate(
  value: unknown,
  env: NodeJS.ProcessEnv,
  missing: MissingVariable[] = [],
  path: (string | number)[] = [],
): unknown {
  if (typeof value === 'string') {
    if (!value.includes('$')) return value;
    return value.replace(PATTERN, (whole, variable: string | undefined, fallback: string | undefined) => {
      if (whole === '$$') return '$';
      const found = env[variable!];
      if (fallback !== undefined) return found === undefined || found === '' ? fallback : found;
      if (found === undefined) {
        missing.push({ path, variable: variable! });
        return '';
      }
      return found;
    });
  }
  if (value !== null && typeof value === 'object') {
    // YAML aliases can make a document refer to itself: a config is a tree.
    if (path.length > MAX_DEPTH) throw new RangeError('the document is nested too deeply (a self-referencing alias?)');
    if (Array.isArray(value)) return value.map((item, index) => interpolate(item, env, missing, [...path, index]));
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      // Own data properties only: a `__proto__` key stays a key (and is then reported as unknown).
      Object.defineProperty(out, key, { value: interpolate(item, env, missing, [...path, key]), enumerable: true, writable: true, configurable: true });
    }
    return out;
  }
  return value;
}
