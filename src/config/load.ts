// Reading, interpolating and validating a config; every problem is reported with its key path.
import { readFileSync } from 'node:fs';
import { isMap, isPair, isScalar, LineCounter, parseDocument, type Document } from 'yaml';
import type { z } from 'zod';
import { configSchema, type Config } from './schema.ts';
import { interpolate, type MissingVariable, type ValuePath } from './interpolate.ts';
import { defaultConfigText } from './default.ts';

export interface ConfigProblem {
  /** Dotted key path, e.g. `listeners[0].address`; empty for the whole document. */
  path: string;
  message: string;
  /** Where in the file, 1-based, when known. */
  line?: number;
  column?: number;
  /** The source line and a caret under the column (YAML syntax errors). */
  excerpt?: string;
}

export class ConfigError extends Error {
  readonly code = 'SLUICE_ERR_CONFIG';
  readonly problems: ConfigProblem[];
  readonly source: string;
  constructor(source: string, problems: ConfigProblem[]) {
    super(`invalid config (${source}):\n${problems.map((p) => formatProblem(source, p)).join('\n')}`);
    this.source = source;
    this.problems = problems;
  }
}

/** `  - path: message (file:line:column)`, then the excerpt, if any, indented. */
function formatProblem(source: string, problem: ConfigProblem): string {
  const where = problem.line === undefined ? '' : ` (${source}:${problem.line}:${problem.column ?? 1})`;
  const excerpt = problem.excerpt ? `\n${problem.excerpt.replace(/^/gm, '      ')}` : '';
  return `  - ${problem.path || '(document)'}: ${problem.message}${where}${excerpt}`;
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
const SECRET_KEYS = new Set(['api_key', 'key', 'keys', 'headers', 'token', 'tokens', 'password', 'url']);

const isSecretPath = (path: readonly PropertyKey[]) => path.some((part) => typeof part === 'string' && SECRET_KEYS.has(part));

/** What a problem may say of the value it is about. */
export interface Telling {
  /** Whether the value at `path` may be quoted (a literal of the operator's own file). */
  quote(path: readonly PropertyKey[]): boolean;
  /** Whether the allowed value closest to the one at `path` may be suggested (not when it came from a variable). */
  hint(path: readonly PropertyKey[]): boolean;
}

/** A resource (etcd, the admin API): whoever wrote it must read nothing back through a problem, so no value is ever quoted. */
const RESOURCE_TELLING: Telling = { quote: () => false, hint: (path) => !isSecretPath(path) };

/** The operator's own file: its literals are quoted, but never a credential's, nor a value that came from a `${VAR}`. */
function fileTelling(expanded: readonly (readonly PropertyKey[])[]): Telling {
  const fromVariable = new Set(expanded.map((path) => formatPath(path)));
  const quote = (path: readonly PropertyKey[]) => !isSecretPath(path) && !fromVariable.has(formatPath(path));
  return { quote, hint: quote };
}

function describeIssue(issue: z.core.$ZodIssue, telling: Telling): string {
  switch (issue.code) {
    case 'unrecognized_keys':
      return `unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `"${k}"`).join(', ')}`;
    case 'invalid_type':
      if (issue.input === undefined) return `required: expected ${issue.expected}`;
      if (isSecretPath(issue.path)) return `expected ${issue.expected}`;
      return `expected ${issue.expected}, got ${telling.quote(issue.path) ? describeValue(issue.input) : typeName(issue.input)}`;
    case 'invalid_value': {
      const got = telling.quote(issue.path) ? `, got ${describeValue(issue.input)}` : '';
      const options = issue.values.filter((v): v is string => typeof v === 'string');
      const near = typeof issue.input === 'string' && telling.hint(issue.path) ? closest(issue.input, options) : undefined;
      return `expected one of ${issue.values.map((v) => JSON.stringify(v)).join(' | ')}${got}${near === undefined ? '' : ` (did you mean "${near}"?)`}`;
    }
    case 'custom': {
      // A cross-check's message quotes values only where each of them may be (schema.ts: `quoting`).
      const params = issue.params as { quoted?: unknown; of?: PropertyKey[][] } | undefined;
      if (typeof params?.quoted === 'string' && (params.of ?? [issue.path]).every((path) => telling.quote(path))) return params.quoted;
      return issue.message;
    }
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

/** What a value is, without the value. */
function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  return `a ${typeof value}`;
}

/** The candidate closest to `text` (an edit distance up to a third of its length, at least 1), if any. */
function closest(text: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const allowed = Math.max(1, Math.floor(candidate.length / 3));
    // Lengths further apart than that are never close (and a huge hostile value costs nothing).
    if (Math.abs(text.length - candidate.length) > allowed) continue;
    const distance = editDistance(text.toLowerCase(), candidate.toLowerCase());
    if (distance <= allowed && distance < bestDistance) [best, bestDistance] = [candidate, distance];
  }
  return best !== text ? best : undefined;
}

/** Parses and validates config text. Throws ConfigError listing every problem found. */
export function parseConfig(text: string, source: string, env: NodeJS.ProcessEnv = process.env): Config {
  const lines = new LineCounter();
  const document = parseDocument(text, { prettyErrors: false, uniqueKeys: true, lineCounter: lines });
  if (document.errors.length > 0) throw new ConfigError(source, [syntaxProblem(text, document.errors, lines)]);
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
  const expanded: ValuePath[] = [];
  let resolved: unknown;
  try {
    resolved = interpolate(raw, env, missing, { expanded });
  } catch (error) {
    throw new ConfigError(source, [{ path: '', message: (error as Error).message }]);
  }
  const locate = (path: readonly PropertyKey[], key = false) => locationOf(document, lines, path, key);
  const problems: ConfigProblem[] = missing.map((m) => ({
    path: formatPath(m.path),
    message: `environment variable \${${m.variable}} is not set (write \${${m.variable}:-} for an optional value)`,
    ...locate(m.path),
  }));
  // A value whose variable is unset is reported once, as such, not again as the "" it became.
  const unset = new Set(problems.map((p) => p.path));
  // reportInput: describeIssue tells a wrong value ("got ...") from a missing one by `issue.input`.
  const result = configSchema.safeParse(resolved, { reportInput: true });
  if (!result.success) {
    for (const problem of issueProblems(result.error.issues, { telling: fileTelling(expanded) })) {
      if (problem.unknownKey) problems.push({ path: problem.path, message: problem.message, ...locate(problem.at, true) });
      else if (!unset.has(problem.path)) problems.push({ path: problem.path, message: problem.message, ...locate(problem.at) });
    }
  }
  if (problems.length > 0 || !result.success) throw new ConfigError(source, problems);
  return deepFreeze(result.data);
}

/** Issues of a value of the right type that failed a check (a string too short, a refinement), or of a mapping's keys. */
const VALUE_CHECKS = new Set<string>(['unrecognized_keys', 'too_small', 'too_big', 'invalid_format', 'not_multiple_of', 'custom']);

/**
 * A union (a client key: a string or a mapping) that failed is reported as the problems of the
 * one branch whose type fits the value, rather than zod's bare "Invalid input".
 */
function unionBranch(issue: z.core.$ZodIssue): z.core.$ZodIssue[] {
  if (issue.code !== 'invalid_union' || !Array.isArray(issue.errors)) return [issue];
  // A branch fits when its problems are inside the value (its keys), or checks of a value of its
  // type (a string too short), not the value's type itself.
  const fitting = issue.errors.filter((branch) => branch.every((inner) => inner.path.length > 0 || VALUE_CHECKS.has(inner.code)));
  if (fitting.length === 0) return [issue];
  // Of several (a key given as `key` or as `key_sha256`), the one with the fewest problems; the first on a tie.
  const best = fitting.reduce((a, b) => (b.length < a.length ? b : a));
  return best.flatMap((inner) => unionBranch({ ...inner, path: [...issue.path, ...inner.path] } as z.core.$ZodIssue));
}

// ---------------------------------------------------------------------------------------------
// Locations and hints

/** Line and column of the node at `path` (of its key with `key`), or of its nearest ancestor. */
function locationOf(document: Document, lines: LineCounter, path: readonly PropertyKey[], key: boolean): { line?: number; column?: number } {
  for (let length = path.length; length >= 0; length--) {
    const parent = length > 0 ? document.getIn(path.slice(0, length - 1), true) : undefined;
    let offset: number | undefined;
    if (length === 0) offset = document.contents?.range?.[0];
    else if (isMap(parent)) {
      const pair = parent.items.find((item) => isPair(item) && isScalar(item.key) && String(item.key.value) === String(path[length - 1]));
      const node = key && length === path.length ? pair?.key : (pair?.value ?? pair?.key);
      offset = (node as { range?: [number, number, number] } | undefined)?.range?.[0];
    } else {
      offset = (document.getIn(path.slice(0, length), true) as { range?: [number, number, number] } | undefined)?.range?.[0];
    }
    if (offset !== undefined) {
      const { line, col } = lines.linePos(offset);
      return { line, column: col };
    }
  }
  return {};
}

/** The first YAML syntax error (later ones are mostly its echoes), said plainly and placed. */
function syntaxProblem(text: string, yamlErrors: readonly { code: string; message: string; pos: [number, number] }[], lines: LineCounter): ConfigProblem {
  const flowVariable = unquotedVariableInFlow(text);
  if (flowVariable) {
    return {
      path: '',
      message: `YAML syntax: \${${flowVariable.name}} inside { } or [ ] must be quoted: write "\${${flowVariable.name}}"`,
      ...at(text, lines, flowVariable.offset),
    };
  }
  const first = yamlErrors[0]!;
  // The parser's message ends in its own "at line L, column C:" and an excerpt: ours replace them.
  let message = first.message.replace(/ at line \d+, column \d+:?[\s\S]*$/, '').trim();
  let offset = first.pos[0];
  const opener = unclosedOpener(text);
  if (opener && (first.code === 'MISSING_CHAR' || first.code === 'BAD_INDENT' || first.code === 'UNEXPECTED_TOKEN') && opener.offset <= offset) {
    // An unclosed quote or bracket is found where the file ends or the next key starts: point at
    // where it was opened instead.
    offset = opener.offset;
    message = `${opener.what} is never closed`;
  }
  return { path: '', message: `YAML syntax: ${message[0]!.toLowerCase()}${message.slice(1)}`, ...at(text, lines, offset) };
}

/** The line, column and excerpt (the line and a caret) of `offset`. */
function at(text: string, lines: LineCounter, offset: number): Pick<ConfigProblem, 'line' | 'column' | 'excerpt'> {
  const { line, col: found } = lines.linePos(Math.min(offset, text.length));
  const source = text.split(/\r?\n/)[line - 1] ?? '';
  if (source.trim() === '') return { line, column: found };
  // A position in the indentation means the item that starts after it.
  const indent = /^[ ]*/.exec(source)![0].length;
  const col = found <= indent ? indent + 1 : found;
  return { line, column: col, excerpt: `${source}\n${' '.repeat(Math.max(0, col - 1))}^` };
}

/**
 * The first `${VAR}` written unquoted inside a flow collection (`{ key: ${VAR} }`), where YAML
 * reads its `{` as the start of a mapping. Tracks quotes, comments and bracket depth line by line.
 */
function unquotedVariableInFlow(text: string): { name: string; offset: number } | undefined {
  let depth = 0;
  let quote = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quote) {
      if (c === quote && !(quote === '"' && text[i - 1] === '\\')) quote = '';
      continue;
    }
    if (c === '#' && (i === 0 || /\s/.test(text[i - 1]!))) {
      while (i < text.length && text[i] !== '\n') i++;
      continue;
    }
    if ((c === '"' || c === "'") && (i === 0 || /[\s,[{:]/.test(text[i - 1]!))) quote = c;
    else if (c === '[' || c === '{') {
      if (c === '{' && text[i - 1] === '$' && depth > 0) {
        const match = /^\$\{([A-Za-z_][A-Za-z0-9_]*)/.exec(text.slice(i - 1));
        if (match) return { name: match[1]!, offset: i - 1 };
      }
      depth++;
    } else if ((c === ']' || c === '}') && depth > 0) depth--;
  }
  return undefined;
}

/** The first quote or bracket left open, if any (the same scan as above). */
function unclosedOpener(text: string): { what: string; offset: number } | undefined {
  const open: { what: string; offset: number }[] = [];
  let quote: { what: string; offset: number; char: string } | undefined;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quote) {
      if (c === quote.char && !(quote.char === '"' && text[i - 1] === '\\')) quote = undefined;
      continue;
    }
    if (c === '#' && (i === 0 || /\s/.test(text[i - 1]!))) {
      while (i < text.length && text[i] !== '\n') i++;
      continue;
    }
    if ((c === '"' || c === "'") && (i === 0 || /[\s,[{:]/.test(text[i - 1]!))) quote = { what: `the ${c} quote opened here`, offset: i, char: c };
    else if ((c === '[' || c === '{') && (open.length > 0 || i === 0 || /[\s:,-]/.test(text[i - 1]!))) open.push({ what: `the ${c} opened here`, offset: i });
    else if ((c === ']' || c === '}') && open.length > 0) open.pop();
  }
  return quote ?? open[0];
}

/**
 * What to say after `unknown key "x"`: the closest key allowed at the same place (`did you mean`);
 * else the same key (or one close to it) a level or two further in (`did you mean
 * "shutdown.min_drain_secs"?`: a key written in the wrong section); else the keys allowed there.
 */
function suggestKey(key: string, schemaPath: readonly PropertyKey[], parentPath: readonly PropertyKey[]): string {
  const parent = [...schemaPath, ...parentPath];
  const known = keysAt(parent);
  const near = closest(key, known);
  if (near !== undefined) return ` (did you mean "${near}"?)`;
  const deeper = nestedKeys(parent);
  const exact = deeper.filter((path) => path.at(-1)!.toLowerCase() === key.toLowerCase());
  const found = exact.length > 0 ? exact : deeper.filter((path) => closest(key, [path.at(-1)!]) !== undefined);
  if (found.length > 0 && found.length <= 4) return ` (did you mean ${found.map((path) => `"${formatPath([...parentPath, ...path])}"`).join(' or ')}?)`;
  return known.length > 0 && known.length <= 30 ? ` (known keys: ${known.join(', ')})` : '';
}

type SchemaDef = { type: string; shape?: Record<string, unknown>; innerType?: unknown; element?: unknown; out?: unknown; options?: unknown[] };
const defOf = (schema: unknown): SchemaDef | undefined => (schema as { _zod?: { def?: SchemaDef } } | undefined)?._zod?.def;

/** The schema below optional, default, preprocessing and unions (their mapping option). */
function unwrap(schema: unknown): unknown {
  for (let guard = 0; guard < 20; guard++) {
    const def = defOf(schema);
    if (!def) return schema;
    if (def.innerType !== undefined) schema = def.innerType;
    else if (def.type === 'pipe') schema = def.out;
    else if (def.type === 'union') schema = def.options?.find((option) => defOf(unwrap(option))?.type === 'object');
    else return schema;
  }
  return schema;
}

/** The fixed mapping (its keys and their schemas) at `path` of the config, if that is one. */
function shapeAt(path: readonly PropertyKey[]): Record<string, unknown> | undefined {
  let schema: unknown = configSchema;
  for (const part of path) {
    const def = defOf(unwrap(schema));
    if (def?.type === 'array' && typeof part === 'number') schema = def.element;
    else if (def?.type === 'object' && def.shape && typeof part === 'string') schema = def.shape[part];
    else return undefined;
  }
  const def = defOf(unwrap(schema));
  return def?.type === 'object' ? def.shape : undefined;
}

/** The keys the schema allows in the mapping at `path` (none when it is not a fixed mapping). */
function keysAt(path: readonly PropertyKey[]): string[] {
  return Object.keys(shapeAt(path) ?? {});
}

/** nestedKeys by schema place (list indexes are all one place): the schema never changes. */
const nestedKeysCache = new Map<string, string[][]>();

/** The keys of the mappings within two sections below `path` (not its own), as paths from it. */
function nestedKeys(path: readonly PropertyKey[]): string[][] {
  const place = path.map((part) => (typeof part === 'number' ? '[]' : String(part))).join('\0');
  let found = nestedKeysCache.get(place);
  if (!found) nestedKeysCache.set(place, (found = keysBelow(path, 2)));
  return found;
}

function keysBelow(path: readonly PropertyKey[], depth: number): string[][] {
  const found: string[][] = [];
  const walk = (at: string[], left: number) => {
    for (const section of keysAt([...path, ...at])) {
      const inner = [...at, section];
      const keys = keysAt([...path, ...inner]);
      for (const key of keys) found.push([...inner, key]);
      if (left > 1) walk(inner, left - 1);
    }
  };
  walk([], depth);
  return found;
}

/** Edit distance with adjacent transpositions (optimal string alignment). */
function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}

/** A problem of a schema validation, and where it is in the validated value (`at`). */
export interface IssueProblem extends ConfigProblem {
  readonly at: readonly PropertyKey[];
  /** An unknown key: located at the key, not its value. */
  readonly unknownKey: boolean;
}

/**
 * Problems of a schema validation: one per unknown key (with a suggestion), one per other issue.
 * `prefix` is put before each path; `schemaPath` is where the value validated sits in the config
 * (a resource: `[kind, 0]`), for the suggestions. By default nothing is quoted (a resource).
 */
export function issueProblems(
  issues: readonly z.core.$ZodIssue[],
  options: { prefix?: readonly PropertyKey[]; schemaPath?: readonly PropertyKey[]; telling?: Telling; limit?: number } = {},
): IssueProblem[] {
  const { prefix = [], schemaPath = [], telling = RESOURCE_TELLING, limit = Infinity } = options;
  const problems: IssueProblem[] = [];
  let more = 0;
  for (const issue of issues.flatMap((i) => unionBranch(i))) {
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) {
        if (problems.length >= limit) more++;
        else {
          const at = [...issue.path, key];
          problems.push({ path: formatPath([...prefix, ...at]), message: `unknown key "${key}"${suggestKey(key, schemaPath, issue.path)}`, at, unknownKey: true });
        }
      }
    } else if (problems.length >= limit) more++;
    else problems.push({ path: formatPath([...prefix, ...issue.path]), message: describeIssue(issue, telling), at: issue.path, unknownKey: false });
  }
  if (more > 0) problems.push({ path: '', message: `and ${more} more problem${more === 1 ? '' : 's'}`, at: [], unknownKey: false });
  return problems;
}

/** Validates a configuration put together in memory (the bootstrap file and the resources). Throws ConfigError. */
export function validateConfig(raw: unknown, source: string): Config {
  // Its problems quote no value: resources are in it (issueProblems' default).
  const result = configSchema.safeParse(raw, { reportInput: true });
  if (!result.success) throw new ConfigError(source, issueProblems(result.error.issues).map(({ path, message }) => ({ path, message })));
  return deepFreeze(result.data);
}

export function loadConfigFile(file: string, env: NodeJS.ProcessEnv = process.env): Config {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new ConfigError(file, [{ path: '', message: `cannot read file: ${(error as NodeJS.ErrnoException).code ?? String(error)}` }]);
  }
  return withLedgerPaths(parseConfig(text, file, env), file);
}

/** The config used when none is given: the embedded default, with providers added for keys in env. */
export function loadDefaultConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return withLedgerPaths(parseConfig(defaultConfigText(env), 'embedded default', env), 'sluice');
}

/**
 * The ledger's files, when the config does not name them: beside the config file, named after it
 * (`sluice.yaml.ledger.sqlite`, `sluice.yaml.ledger-spool/`), as the snapshot is. Settled here, so
 * that every process of a group and every reload reads the same paths.
 */
function withLedgerPaths(config: Config, base: string): Config {
  const ledger = config.ledger;
  if (ledger === undefined || (ledger.sqlite_path !== undefined && ledger.spool_dir !== undefined)) return config;
  const paths = { sqlite_path: ledger.sqlite_path ?? `${base}.ledger.sqlite`, spool_dir: ledger.spool_dir ?? `${base}.ledger-spool` };
  return deepFreeze({ ...config, ledger: { ...ledger, ...paths } });
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const item of Object.values(value)) deepFreeze(item);
  }
  return value;
}
