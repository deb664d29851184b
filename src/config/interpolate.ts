// `${VAR}` and `${VAR:-default}` in config values, resolved from the environment after the YAML is
// parsed, so that a value containing YAML syntax (`#`, `: `) cannot change the document's shape.

const PATTERN = /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;

const MAX_DEPTH = 32;

export type ValuePath = (string | number)[];

export interface MissingVariable {
  path: ValuePath;
  variable: string;
}

export interface InterpolateOptions {
  /** Filled with the path of every string a variable's value (or default) went into: it may hold a secret, never to be quoted. */
  readonly expanded?: ValuePath[];
  /** Only the strings at paths it accepts are interpolated; the others are left exactly as written. Default: every string. */
  readonly where?: (path: readonly (string | number)[]) => boolean;
}

/**
 * Returns a copy of `value` with every string interpolated. `${VAR}` with VAR unset is reported in
 * `missing` (and becomes ""); `${VAR:-default}` uses the default when VAR is unset or empty; `$$` is
 * a literal `$`.
 */
export function interpolate(value: unknown, env: NodeJS.ProcessEnv, missing: MissingVariable[] = [], options: InterpolateOptions = {}): unknown {
  return walk(value, env, missing, options, []);
}

/** The variables `text` refers to, in order (a `$${…}` is an escape, not a reference; a default's text is not read). */
export function referencesIn(text: string): string[] {
  if (!text.includes('${')) return [];
  const names: string[] = [];
  for (const match of text.matchAll(PATTERN)) if (match[1] !== undefined) names.push(match[1]);
  return names;
}

function walk(value: unknown, env: NodeJS.ProcessEnv, missing: MissingVariable[], options: InterpolateOptions, path: ValuePath): unknown {
  if (typeof value === 'string') {
    if (!value.includes('$') || (options.where && !options.where(path))) return value;
    let substituted = false;
    const out = value.replace(PATTERN, (whole, variable: string | undefined, fallback: string | undefined) => {
      if (whole === '$$') return '$';
      substituted = true;
      const found = env[variable!];
      if (fallback !== undefined) return found === undefined || found === '' ? fallback : found;
      if (found === undefined) {
        missing.push({ path, variable: variable! });
        return '';
      }
      return found;
    });
    if (substituted) options.expanded?.push(path);
    return out;
  }
  if (value !== null && typeof value === 'object') {
    // YAML aliases can make a document refer to itself: a config is a tree.
    if (path.length > MAX_DEPTH) throw new RangeError('the document is nested too deeply (a self-referencing alias?)');
    if (Array.isArray(value)) return value.map((item, index) => walk(item, env, missing, options, [...path, index]));
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      // Own data properties only: a `__proto__` key stays a key (and is then reported as unknown).
      Object.defineProperty(out, key, { value: walk(item, env, missing, options, [...path, key]), enumerable: true, writable: true, configurable: true });
    }
    return out;
  }
  return value;
}
