// `sluice apply`'s decisions (src/commands/resources-command.ts) against a fake admin API: a tiny
// in-memory implementation of GET/PUT /config/{kind}/{name} with revisions and If-Match /
// If-None-Match, as admin/resources-api.ts answers them. What is created, what is left unchanged
// (no write at all), what is replaced and at which revision, in which order; and how failures end.
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { hash } from 'node:crypto';
import fc from 'fast-check';
import { parse } from 'yaml';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { applyResources, getResources, readApplyFile, type Output } from '../../src/commands/resources-command.ts';
import { adminToken, adminUrl } from '../../src/commands/admin-client.ts';
import { loadDefaultConfig, parseConfig } from '../../src/config/load.ts';

const TOKEN = 'fake-admin-token-0123456789';
const CONFIG = loadDefaultConfig({});

interface Stored {
  item: Record<string, unknown>;
  revision: number;
}

interface Call {
  method: string;
  /** The raw path, as sent (percent-encoded). */
  path: string;
  ifMatch?: string;
  ifNoneMatch?: string;
  body?: Record<string, unknown>;
}

/** The admin API's resource routes, in memory. */
class FakeAdmin {
  readonly server: Server;
  readonly store = new Map<string, Stored>();
  readonly calls: Call[] = [];
  revision = 100;
  /** Called after each GET of one resource: a test may change the store there (a concurrent writer). */
  afterGet: ((key: string) => void) | undefined;
  /** A PUT of this key answers 400 (the resource does not fit). */
  refuse = new Set<string>();
  url = '';

  constructor() {
    this.server = createServer((req, res) => void this.#handle(req, res));
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  reset(): void {
    this.store.clear();
    this.calls.length = 0;
    this.afterGet = undefined;
    this.refuse.clear();
    this.revision = 100;
  }

  /** What the store holds, as a caller would PUT it (the revision is the store's). */
  seed(kind: string, item: Record<string, unknown>): number {
    const revision = ++this.revision;
    this.store.set(`${kind}/${String(item.name)}`, { item: stored(kind, item), revision });
    return revision;
  }

  writes(): string[] {
    return this.calls.filter((c) => c.method === 'PUT').map((c) => decodeURIComponent(c.path.slice('/config/'.length)));
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const path = req.url ?? '';
    const call: Call = { method: req.method ?? '', path };
    if (req.headers['if-match'] !== undefined) call.ifMatch = req.headers['if-match'];
    if (req.headers['if-none-match'] !== undefined) call.ifNoneMatch = req.headers['if-none-match'];
    if (text) call.body = JSON.parse(text) as Record<string, unknown>;
    this.calls.push(call);
    const send = (status: number, body: object) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const error = (status: number, code: string, message: string) => send(status, { error: { message, type: 'invalid_request_error', code } });
    if (req.headers.authorization !== `Bearer ${TOKEN}`) return error(401, 'invalid_admin_token', 'admin token missing or wrong');
    const [, config, kind, rawName, ...rest] = path.split('/');
    if (config !== 'config' || !kind || !['providers', 'models', 'teams', 'keys'].includes(kind) || rest.length > 0) return error(404, 'unknown_path', `no route for ${path}`);
    if (rawName === undefined) {
      if (req.method !== 'GET') return error(405, 'method_not_allowed', 'GET only');
      const items = [...this.store].filter(([key]) => key.startsWith(`${kind}/`)).map(([, s]) => ({ ...present(kind, s.item), revision: s.revision }));
      return send(200, { kind, source: 'etcd', revision: this.revision, items });
    }
    const name = decodeURIComponent(rawName);
    const key = `${kind}/${name}`;
    const found = this.store.get(key);
    if (req.method === 'GET') {
      if (!found) return error(404, 'resource_not_found', `no ${key}`);
      res.setHeader('etag', `"${found.revision}"`);
      send(200, { item: present(kind, found.item), revision: found.revision });
      this.afterGet?.(key);
      return;
    }
    if (req.method !== 'PUT') return error(405, 'method_not_allowed', 'GET, PUT');
    if (this.refuse.has(key)) return error(400, 'invalid_resource', `${key} does not fit the configuration: refused by the test`);
    const body = call.body ?? {};
    if (body.name !== undefined && body.name !== name) return error(400, 'invalid_resource', 'name mismatch');
    let expected: number;
    if (call.ifMatch !== undefined) expected = Number(/"?(\d+)"?/.exec(call.ifMatch)?.[1]);
    else if (call.ifNoneMatch !== undefined) expected = 0;
    else expected = found?.revision ?? 0;
    if ((found?.revision ?? 0) !== expected) return error(409, 'revision_conflict', `${key} is at revision ${found?.revision ?? 0}, not ${expected}: read it again`);
    const revision = ++this.revision;
    const item = stored(kind, { ...body, name });
    this.store.set(key, { item, revision });
    res.setHeader('etag', `"${revision}"`);
    send(expected === 0 ? 201 : 200, { item: present(kind, item), revision, applied: true });
  }
}

const sha256 = (text: string) => hash('sha256', text, 'base64');

/** As the admin API stores a resource: a client key as its digest. */
function stored(kind: string, item: Record<string, unknown>): Record<string, unknown> {
  if (kind !== 'keys' || typeof item.key !== 'string') return { ...item };
  const { key, ...rest } = item;
  return { ...rest, key_sha256: sha256(key) };
}

/** As the admin API shows one: a provider's literal api_key hidden. */
function present(kind: string, item: Record<string, unknown>): Record<string, unknown> {
  const shown = { ...item };
  if (kind === 'providers' && typeof shown.api_key === 'string' && !/^\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}$/.test(shown.api_key)) {
    delete shown.api_key;
    shown.api_key_set = true;
  }
  return shown;
}

function capture(): Output & { lines: string[]; errors: string[] } {
  const lines: string[] = [];
  const errors: string[] = [];
  return { lines, errors, out: (line) => lines.push(line), err: (line) => errors.push(line) };
}

const dir = mkdtempSync(join(tmpdir(), 'sluice-apply-'));
let files = 0;
function file(text: string): string {
  const path = join(dir, `apply-${++files}.yaml`);
  writeFileSync(path, text);
  return path;
}

const fake = new FakeAdmin();
before(() => fake.start());
after(() => new Promise<void>((resolve) => fake.server.close(() => resolve())));
beforeEach(() => fake.reset());

async function apply(path: string, token = TOKEN) {
  const io = capture();
  const code = await applyResources(CONFIG, { file: path, admin: fake.url, token }, io);
  return { code, lines: io.lines, errors: io.errors };
}

// Models listed before their provider in the file: applied after it all the same.
const FIRST = `
models:
  - { name: gpt-4o, provider: openai, upstream_model: gpt-4o-2024-08-06 }
  - { name: "openai/*", provider: openai }
keys:
  - { name: ci, key: sk-ci-0123456789 }
  - { name: ops, key_sha256: "${sha256('sk-ops-0123456789')}" }
providers:
  - { name: openai, type: openai, base_url: "https://api.openai.com/v1", api_key: "\${OPENAI_API_KEY}" }
  - { name: local, type: echo }
`;

describe('sluice apply against a fake admin API', () => {
  test('an empty store: everything is created, providers first, then models, then keys, each with If-None-Match: *', async () => {
    const result = await apply(file(FIRST));
    assert.deepEqual(result.errors, []);
    assert.equal(result.code, 0);
    assert.deepEqual(result.lines, [
      'providers/openai created',
      'providers/local created',
      'models/gpt-4o created',
      'models/openai/* created',
      'keys/ci created',
      'keys/ops created',
    ]);
    assert.deepEqual(fake.writes(), ['providers/openai', 'providers/local', 'models/gpt-4o', 'models/openai/*', 'keys/ci', 'keys/ops']);
    for (const call of fake.calls.filter((c) => c.method === 'PUT')) assert.equal(call.ifNoneMatch, '*', call.path);
    // Names are percent-encoded in the path; `${VAR}` goes as written (each gateway resolves it).
    assert.ok(fake.calls.some((c) => c.path === '/config/models/openai%2F*'));
    assert.equal(fake.calls.find((c) => c.method === 'PUT' && c.path === '/config/providers/openai')?.body?.api_key, '${OPENAI_API_KEY}');
    // The raw key is sent (the gateway stores its digest).
    assert.equal(fake.calls.find((c) => c.method === 'PUT' && c.path === '/config/keys/ci')?.body?.key, 'sk-ci-0123456789');
  });

  test('applied again: every resource is unchanged and nothing is written (a raw key is compared by its digest)', async () => {
    const path = file(FIRST);
    assert.equal((await apply(path)).code, 0);
    fake.calls.length = 0;
    const again = await apply(path);
    assert.deepEqual(again.errors, []);
    assert.equal(again.code, 0);
    assert.deepEqual(again.lines, [
      'providers/openai unchanged',
      'providers/local unchanged',
      'models/gpt-4o unchanged',
      'models/openai/* unchanged',
      'keys/ci unchanged',
      'keys/ops unchanged',
    ]);
    assert.deepEqual(fake.writes(), []);
  });

  test('an edited file: what changed is configured with If-Match of the revision read, the rest unchanged', async () => {
    assert.equal((await apply(file(FIRST))).code, 0);
    const modelRevision = fake.store.get('models/gpt-4o')!.revision;
    const keyRevision = fake.store.get('keys/ci')!.revision;
    fake.calls.length = 0;
    const edited = FIRST.replace('gpt-4o-2024-08-06', 'gpt-4o-2024-11-20').replace('sk-ci-0123456789', 'sk-ci-rotated-0000');
    const result = await apply(file(edited));
    assert.deepEqual(result.errors, []);
    assert.equal(result.code, 0);
    assert.deepEqual(result.lines, [
      'providers/openai unchanged',
      'providers/local unchanged',
      'models/gpt-4o configured',
      'models/openai/* unchanged',
      'keys/ci configured',
      'keys/ops unchanged',
    ]);
    const puts = fake.calls.filter((c) => c.method === 'PUT');
    assert.deepEqual(
      puts.map((c) => [c.path, c.ifMatch, c.ifNoneMatch]),
      [
        ['/config/models/gpt-4o', `"${modelRevision}"`, undefined],
        ['/config/keys/ci', `"${keyRevision}"`, undefined],
      ],
    );
    assert.equal(fake.store.get('models/gpt-4o')!.item.upstream_model, 'gpt-4o-2024-11-20');
    assert.equal(fake.store.get('keys/ci')!.item.key_sha256, sha256('sk-ci-rotated-0000'));
  });

  test('a key stored by digest and given raw (or the other way round) is unchanged when the digests match', async () => {
    fake.seed('keys', { name: 'raw-here', key_sha256: sha256('sk-raw-0123456789') });
    fake.seed('keys', { name: 'digest-here', key: 'sk-dig-0123456789' });
    fake.seed('keys', { name: 'other', key: 'sk-other-0123456789' });
    const result = await apply(
      file(`keys:
  - { name: raw-here, key: sk-raw-0123456789 }
  - { name: digest-here, key_sha256: "${sha256('sk-dig-0123456789')}" }
  - { name: other, key: sk-not-the-same-key }
`),
    );
    assert.deepEqual(result.lines, ['keys/raw-here unchanged', 'keys/digest-here unchanged', 'keys/other configured']);
    assert.equal(result.code, 0);
  });

  test('defaults count as written: a provider stored with anthropic_version and headers: {} equals one that leaves them out', async () => {
    fake.seed('providers', { name: 'claude', type: 'anthropic', base_url: 'https://api.anthropic.com', anthropic_version: '2023-06-01', headers: {} });
    const result = await apply(file('providers:\n  - { name: claude, type: anthropic, base_url: "https://api.anthropic.com" }\n'));
    assert.deepEqual(result.lines, ['providers/claude unchanged']);
    const changed = await apply(file('providers:\n  - { name: claude, type: anthropic, base_url: "https://api.anthropic.com", anthropic_version: "2024-01-01" }\n'));
    assert.deepEqual(changed.lines, ['providers/claude configured']);
  });

  test('a literal provider api_key is always written (the API never shows it); a file without one says that it removes it', async () => {
    const path = file('providers:\n  - { name: p, type: openai, base_url: "https://example.com/v1", api_key: sk-literal-secret }\n');
    assert.deepEqual((await apply(path)).lines, ['providers/p created']);
    const again = await apply(path);
    assert.deepEqual(again.lines, ['providers/p configured']);
    assert.deepEqual(again.errors, []);
    const without = await apply(file('providers:\n  - { name: p, type: openai, base_url: "https://example.com/v1" }\n'));
    assert.deepEqual(without.lines, ['providers/p configured']);
    assert.match(without.errors.join('\n'), /providers\/p: note: the file gives no api_key, so the one the gateway had is removed/);
    assert.equal(without.code, 0);
  });

  test('a failed resource is reported with its message and status; the next ones are still applied; exit 1', async () => {
    fake.refuse.add('models/bad');
    const result = await apply(
      file(`providers:
  - { name: local, type: echo }
models:
  - { name: bad, provider: local }
  - { name: good, provider: local }
`),
    );
    assert.equal(result.code, 1);
    assert.deepEqual(result.lines, ['providers/local created', 'models/good created']);
    assert.deepEqual(result.errors, ['sluice apply: models/bad: models/bad does not fit the configuration: refused by the test (400)']);
  });

  test('a concurrent change between the read and the write: the write is refused (409), not applied over it', async () => {
    const revision = fake.seed('models', { name: 'm', provider: 'local' });
    fake.afterGet = (key) => {
      if (key === 'models/m') fake.seed('models', { name: 'm', provider: 'someone-else' });
    };
    const result = await apply(file('models:\n  - { name: m, provider: local, upstream_model: x }\n'));
    assert.equal(result.code, 1);
    assert.deepEqual(result.lines, []);
    assert.equal(fake.calls.find((c) => c.method === 'PUT')?.ifMatch, `"${revision}"`);
    assert.match(result.errors.join('\n'), /^sluice apply: models\/m: models\/m is at revision \d+, not \d+: read it again \(409\)$/);
    assert.equal(fake.store.get('models/m')!.item.provider, 'someone-else');
  });

  test('a wrong token stops at the first answer, saying the token is wrong', async () => {
    const result = await apply(file(FIRST), 'not-the-token-000000');
    assert.equal(result.code, 1);
    assert.equal(fake.calls.length, 1);
    assert.match(result.errors.join('\n'), /refused the admin token \(401\): it is wrong/);
    const none = await applyResources({ ...CONFIG, admin: { ...CONFIG.admin, token: undefined, tokens: [] } }, { file: file(FIRST), admin: fake.url, token: undefined }, capture());
    assert.equal(none, 1);
  });

  test('an admin API that cannot be reached: one line, exit 1', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const io = capture();
    const code = await applyResources(CONFIG, { file: file(FIRST), admin: `http://127.0.0.1:${port}`, token: TOKEN }, io);
    assert.equal(code, 1);
    assert.deepEqual(io.lines, []);
    assert.equal(io.errors.length, 1);
    assert.match(io.errors[0]!, new RegExp(`^sluice apply: cannot reach the admin API at http://127\\.0\\.0\\.1:${port}: .*ECONNREFUSED`));
  });

  test('no -f: a usage error (2), nothing asked', async () => {
    const io = capture();
    assert.equal(await applyResources(CONFIG, { file: undefined, admin: fake.url, token: TOKEN }, io), 2);
    assert.match(io.errors[0]!, /-f FILE/);
    assert.equal(fake.calls.length, 0);
  });

  test('a file with problems is refused whole, every problem said, nothing asked', async () => {
    const result = await apply(
      file(`listeners: []
admin: { token: x }
keys:
  - sk-bare-key-0123456789
  - { key: sk-no-name-0123456 }
models:
  - { name: a, provider: p }
  - { name: a, provider: q }
providers:
  - { name: p, type: openai, headers: { Authorization: "[redacted]" } }
`),
    );
    assert.equal(result.code, 1);
    assert.equal(fake.calls.length, 0);
    const text = result.errors.join('\n');
    assert.match(text, /unknown top-level keys "listeners", "admin"/);
    assert.match(text, /keys\[0\]: a bare key has no name to store it under: write it as \{name: NAME, key: KEY\}/);
    assert.match(text, /keys\[1\]: expected a name/);
    assert.match(text, /models\[1\]: duplicate name "a" \(also models\[0\]\)/);
    assert.match(text, /providers\[0\] \(p\): headers\.Authorization is "\[redacted\]"/);
  });
});

describe('the apply file', () => {
  test('an empty file, a list at the top, YAML that does not parse, a file that is not there', () => {
    const problems = (text: string) => {
      const read = readApplyFile(file(text));
      assert.ok(!read.ok);
      return read.problems.join('\n');
    };
    assert.match(problems(''), /is empty: expected a mapping with "providers:", "models:", "teams:", "keys:" lists/);
    assert.match(problems('- a\n- b\n'), /expected a mapping/);
    assert.match(problems('models: [a\n'), /is not valid YAML/);
    assert.match(problems('models: { a: 1 }\n'), /models: expected a list/);
    assert.match(problems('foo: 1\n'), /unknown top-level key "foo"/);
    const missing = readApplyFile(join(dir, 'absent.yaml'));
    assert.ok(!missing.ok && /cannot read .*absent\.yaml/.test(missing.problems[0]!));
  });

  test('${VAR} is resolved from apply\'s environment as the loader resolves it, but not in the fields that carry a credential (each gateway resolves those)', () => {
    const text = `providers:
  - { name: "\${P_NAME}", type: openai, base_url: "\${BASE:-http://127.0.0.1:9/v1}", api_key: "\${OPENAI_API_KEY}", headers: { x-org: "org-\${ORG}", x-cost: "$$5" } }
models:
  - { name: m, provider: p, upstream_model: "a$$b-\${MODEL}", targets_note: "\${MODEL}" }
  - { name: t, targets: [{ provider: p, model: "\${MODEL}", headers: { authorization: "Bearer \${TOKEN}" } }] }
keys:
  - { name: team-a, key: "\${TEAM_A_KEY}", metadata: { team: "\${TEAM}" } }
`;
    const read = readApplyFile(file(text), { P_NAME: 'p', MODEL: 'gpt-4o', TEAM_A_KEY: 'sk-team-a-0123456789', TEAM: 'search', OPENAI_API_KEY: 'sk-never-read', TOKEN: 'never-read' });
    assert.ok(read.ok, read.ok ? '' : read.problems.join('\n'));
    const [provider, model, routed, key] = read.items.map((i) => i.body) as Record<string, any>[];
    assert.deepEqual(provider, { name: 'p', type: 'openai', base_url: 'http://127.0.0.1:9/v1', api_key: '${OPENAI_API_KEY}', headers: { 'x-org': 'org-${ORG}', 'x-cost': '$$5' } });
    assert.equal(model!.upstream_model, 'a$b-gpt-4o');
    assert.equal(model!.targets_note, 'gpt-4o', 'any other field, even one the schema will refuse, is resolved');
    assert.deepEqual(routed!.targets, [{ provider: 'p', model: 'gpt-4o', headers: { authorization: 'Bearer ${TOKEN}' } }]);
    assert.deepEqual(key, { name: 'team-a', key: 'sk-team-a-0123456789', metadata: { team: 'search' } });
  });

  test('a variable apply does not have, or a key that keeps "${", is a problem naming the place and the variable, never a value', () => {
    const read = readApplyFile(
      file('models:\n  - { name: m, provider: p, upstream_model: "${MODEL}" }\nkeys:\n  - { name: a, key: "${A_KEY}" }\n  - { name: b, key: "${B_KEY}" }\n  - { name: c, key: "$${C_KEY}" }\n'),
      { B_KEY: 'sk-${HIDDEN}-0123456789' },
    );
    assert.ok(!read.ok);
    assert.deepEqual(read.problems, [
      'models[0].upstream_model: environment variable ${MODEL} is not set where sluice apply runs (write ${MODEL:-} for an optional value)',
      'keys[0].key: environment variable ${A_KEY} is not set where sluice apply runs (write ${A_KEY:-} for an optional value)',
      'keys[1].key: a client key must not contain "${" (an unresolved ${VAR}?)',
      'keys[2].key: a client key must not contain "${" (an unresolved ${VAR}?)',
    ]);
  });

  test('a refused file: every problem, then "nothing was applied", and no request', async () => {
    const result = await apply(file('keys:\n  - { name: a, key: "${SLUICE_TEST_SURELY_UNSET_KEY}" }\n'));
    assert.equal(result.code, 1);
    assert.deepEqual(result.errors, [
      'sluice apply: keys[0].key: environment variable ${SLUICE_TEST_SURELY_UNSET_KEY} is not set where sluice apply runs (write ${SLUICE_TEST_SURELY_UNSET_KEY:-} for an optional value)',
      'sluice apply: nothing was applied',
    ]);
    assert.equal(fake.calls.length, 0);
  });

  test('empty lists are nothing to do', () => {
    const read = readApplyFile(file('providers: []\nmodels:\n'));
    assert.deepEqual(read, { ok: true, items: [] });
  });
});

describe('sluice get against a fake admin API', () => {
  async function get(kind: string | undefined, name?: string, output?: string) {
    const io = capture();
    const code = await getResources(CONFIG, { kind, name, output, admin: fake.url, token: TOKEN }, io);
    return { code, lines: io.lines, errors: io.errors };
  }

  test('a table with aligned columns; a provider without base_url shows "-"; a key digest is cut', async () => {
    fake.seed('providers', { name: 'openai', type: 'openai', base_url: 'https://api.openai.com/v1', api_key: 'sk-x' });
    fake.seed('providers', { name: 'e', type: 'echo' });
    fake.seed('keys', { name: 'ci', key: 'sk-ci-0123456789' });
    const providers = await get('providers');
    assert.equal(providers.code, 0);
    assert.deepEqual(providers.lines, [
      'NAME     TYPE     BASE_URL                    REVISION',
      'openai   openai   https://api.openai.com/v1   101',
      'e        echo     -                           102',
    ]);
    const keys = await get('key');
    assert.deepEqual(keys.lines, ['NAME   TEAM   MODELS   LIMITS   BUDGET   STATE     KEY_SHA256      REVISION', `ci     -      all      -        -        enabled   ${sha256('sk-ci-0123456789').slice(0, 12)}…   103`]);
    const one = await get('providers', 'e');
    assert.deepEqual(one.lines, ['NAME   TYPE   BASE_URL   REVISION', 'e      echo   -          102']);
  });

  test('get keys shows what each key may do: its models, limits (its own and per model), budget, and whether it is enabled or expires', async () => {
    fake.seed('keys', {
      name: 'search',
      key: 'sk-search-0123456789',
      models: ['gpt-4o*', 'claude-sonnet-*'],
      expires_at: '2027-06-30',
      limits: { rpm: 600, tpm: 200000, concurrent: 20, models: { 'gpt-4o': { tpm: 50000 } } },
      budget: { usd: 250, period: 'month' },
    });
    fake.seed('keys', { name: 'off', key: 'sk-off-0123456789', models: [], enabled: false, budget: { usd: 5, period: 'day' } });
    const keys = await get('keys');
    assert.equal(keys.code, 0, keys.errors.join('\n'));
    assert.deepEqual(keys.lines, [
      'NAME     TEAM   MODELS                    LIMITS                                                BUDGET       STATE                KEY_SHA256      REVISION',
      `search   -      gpt-4o*,claude-sonnet-*   rpm=600 tpm=200000 concurrent=20; gpt-4o: tpm=50000   $250/month   expires 2027-06-30   ${sha256('sk-search-0123456789').slice(0, 12)}…   101`,
      `off      -      none                      -                                                     $5/day       disabled             ${sha256('sk-off-0123456789').slice(0, 12)}…   102`,
    ]);
  });

  test('fuzz: whatever a name or value holds, no control character is printed raw, and -o json / -o yaml read back the same resource', async () => {
    const CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/;
    // Mostly controls, escape sequences and separators, among ordinary text.
    const hostile = fc.string({
      unit: fc.oneof(fc.constantFrom('\u001b', '\u009b', '\u0007', '\r', '\n', '\t', '\u2028', '\u202e', '\u0000', '"', '\\', '#', ': ', '[', '{', '$'), fc.string({ unit: 'binary', minLength: 1, maxLength: 1 })),
      minLength: 1,
      maxLength: 12,
    });
    const seed = Number(process.env.SLUICE_FUZZ_SEED ?? 20261203);
    await fc.assert(
      fc.asyncProperty(hostile, hostile, hostile, async (name, upstream, label) => {
        fake.reset();
        const item = { name, provider: upstream, upstream_model: upstream, metadata_like: { [label]: name } };
        fake.seed('models', item);
        for (const output of [undefined, 'json', 'yaml']) {
          const result = await get('models', undefined, output);
          assert.equal(result.code, 0, result.errors.join('\n'));
          const text = [...result.lines, ...result.errors].join('\n');
          assert.doesNotMatch(text, CONTROL, JSON.stringify(text));
          if (output === 'json') assert.deepEqual((JSON.parse(result.lines.join('\n')) as { items: object[] }).items, [{ ...item, revision: fake.revision }]);
          if (output === 'yaml') assert.deepEqual((parse(result.lines.join('\n')) as { models: object[] }).models, [item]);
          if (output === undefined) assert.equal(result.lines.length, 2, 'one line per resource, whatever its name holds');
        }
      }),
      { seed, numRuns: Number(process.env.SLUICE_FUZZ_RUNS ?? 100) },
    );
  });

  test('-o yaml is a file apply -f takes (no revision, no api_key_set), with a note for the secret not shown', async () => {
    fake.seed('providers', { name: 'openai', type: 'openai', base_url: 'https://api.openai.com/v1', api_key: 'sk-x' });
    fake.seed('models', { name: 'gpt-4o', provider: 'openai' });
    const yaml = await get('providers', undefined, 'yaml');
    assert.equal(yaml.code, 0);
    const text = yaml.lines.join('\n');
    assert.match(text, /# api_key: set on the gateway but not shown/);
    assert.doesNotMatch(text, /revision|api_key_set/);
    const models = await get('models', undefined, 'yaml');
    const path = file(`${models.lines.join('\n')}\n`);
    fake.calls.length = 0;
    assert.deepEqual((await apply(path)).lines, ['models/gpt-4o unchanged']);
  });

  test('usage errors exit 2; a name that is not there exits 1', async () => {
    assert.equal((await get(undefined)).code, 2);
    const unknown = await get('widgets');
    assert.equal(unknown.code, 2);
    assert.match(unknown.errors[0]!, /unknown kind "widgets": expected providers, models, teams, keys/);
    assert.equal((await get('models', undefined, 'xml')).code, 2);
    const missing = await get('models', 'nope');
    assert.equal(missing.code, 1);
    assert.deepEqual(missing.errors, ['sluice get: no models/nope']);
  });
});

describe('admin URL and token', () => {
  test('the token: --token, else SLUICE_ADMIN_TOKEN, else admin.token, else the first of admin.tokens', () => {
    const config = parseConfig(
      'listeners:\n  - { name: p, address: "127.0.0.1:8080", role: proxy }\n  - { name: a, address: "0.0.0.0:9901", role: admin }\nadmin: { allow_non_loopback: true, tokens: [{ name: ops, token: ops-token-0123456789ab }, { name: ci, token: ci-token-0123456789abcd }] }\n',
      'test',
      {},
    );
    assert.equal(adminToken(config, 'given', { SLUICE_ADMIN_TOKEN: 'env' }), 'given');
    assert.equal(adminToken(config, undefined, { SLUICE_ADMIN_TOKEN: 'env' }), 'env');
    assert.equal(adminToken(config, undefined, {}), 'ops-token-0123456789ab');
    assert.equal(adminToken({ ...config, admin: { ...config.admin, token: 'main-token-0123456789' } }, undefined, {}), 'main-token-0123456789');
    assert.equal(adminToken(CONFIG, undefined, {}), undefined);
    assert.equal(adminUrl(config, undefined), 'http://127.0.0.1:9901');
    assert.equal(adminUrl(config, 'http://h:1///'), 'http://h:1');
  });
});
