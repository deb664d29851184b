// Reading, interpolating and validating a config; every problem is reported with its key path.
import { readFileSync } from 'node:fs';
import { parseDocument } from 'yaml';
import type { z } from 'zod';
import { configSchema, type Config } from './schema.ts';
import { interpolate, type MissingVariable } from './interpolate.ts';
import { defaultConfigText } from './default.ts';

export interface ConfigProblem {
  /** Dotted key path, e.g. `listeners[0].address`; empty for the whole document. */
  path: string;
  message: string;
}

export class ConfigError extends Error {
  readonly code = 'SLUICE_ERR_CONFIG';
  readonly problems: ConfigProblem[];
  readonly source: string;
  constructor(source: string, problems: ConfigProblem[]) {
    super(`invalid config (${source}):\n${problems.map((p) => `  - ${p.path || '(document)'}: ${p.message}`).join('\n')}`);
    this.source = source;
    this.problems = problems;
  }
}

export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out === '' ? String(part) : `.${String(part)}`;
  }
  return out;
}

/** Values under these keys may be credentials: a problem there never quotes the value. */
const SECRET_KEYS = new Set(['api_key', 'key', 'keys', 'headers']);

function describeIssue(issue: z.core.$ZodIssue): string {
  switch (issue.code) {
    case 'unrecognized_keys':
      return `unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `"${k}"`).join(', ')}`;
    case 'invalid_type':
      if (issue.input === undefined) return `required: expected ${issue.expected}`;
      if (issue.path.some((part) => typeof part === 'string' && SECRET_KEYS.has(part))) return `expected ${issue.expected}`;
      return `expected ${issue.expected}, got ${describeValue(issue.input)}`;
    case 'invalid_value':
      return `expected one of ${issue.values.map((v) => JSON.stringify(v)).join(' | ')}, got ${describeValue(issue.input)}`;
    default:
      return issue.message;
  }
}

function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'string') return `"${value.length > 40 ? `${value.slice(0, 40)}…` : value}"`;
  return `${typeof value} ${String(value)}`;
}

/** Parses and validates config text. Throws ConfigError listing every problem found. */
export function parseConfig(text: string, source: string, env: NodeJS.ProcessEnv = process.env): Config {
  const document = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (document.errors.length > 0) {
    throw new ConfigError(
      source,
      document.errors.map((e) => ({ path: '', message: `YAML syntax: ${e.message.split('\n')[0]}` })),
    );
  }
  let raw: unknown;
  try {
    raw = document.toJS({ maxAliasCount: 100 }) ?? {};
  } catch (error) {
    throw new ConfigError(source, [{ path: '', message: `YAML: ${(error as Error).message}` }]);
  }
  if (typeof raw !== 'object' || Array.isArray(raw)) {
    throw new ConfigError(source, [{ path: '', message: `expected a mapping at the top level, got ${describeValue(raw)}` }]);
  }
  const missing: MissingVariable[] = [];
  let resolved: unknown;
  try {
    resolved = interpolate(raw, env, missing);
  } catch (error) {
    throw new ConfigError(source, [{ path: '', message: (error as Error).message }]);
  }
  const problems: ConfigProblem[] = missing.map((m) => ({
    path: formatPath(m.path),
    message: `environment variable \${${m.variable}} is not set (write \${${m.variable}:-} for an optional value)`,
  }));
  // reportInput: describeIssue tells a wrong value ("got ...") from a missing one by `issue.input`.
  const result = configSchema.safeParse(resolved, { reportInput: true });
  if (!result.success) {
    for (const issue of result.error.issues) {
      // An unknown key is reported at its own path, one problem per key.
      if (issue.code === 'unrecognized_keys') {
        for (const key of issue.keys) problems.push({ path: formatPath([...issue.path, key]), message: `unknown key "${key}"` });
      } else {
        problems.push({ path: formatPath(issue.path), message: describeIssue(issue) });
      }
    }
  }
  if (problems.length > 0 || !result.success) throw new ConfigError(source, problems);
  return deepFreeze(result.data);
}

export function loadConfigFile(file: string, env: NodeJS.ProcessEnv = process.env): Config {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new ConfigError(file, [{ path: '', message: `cannot read file: ${(error as NodeJS.ErrnoException).code ?? String(error)}` }]);
  }
  return parseConfig(text, file, env);
}

/** The config used when none is given: the embedded default, with providers added for keys in env. */
export function loadDefaultConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return parseConfig(defaultConfigText(env), 'embedded default', env);
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const item of Object.values(value)) deepFreeze(item);
  }
  return value;
}
