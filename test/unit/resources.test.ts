// Providers, models and keys as resources (src/config/resources.ts): the key layout etcd, the
// snapshot and the admin API share, the check of one resource on its own, the set that keeps each
// key's last good value, and the composition of a config from a bootstrap file and the resources,
// in which a resource that does not fit with the others is left out alone instead of failing all.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { checkResource, parseResourceKey, resourceKey, ResourceSet, RESOURCE_KINDS, type Checked, type Resource, type ResourceChange } from '../../src/config/resources.ts';
import type { ResourceVariables } from '../../src/config/resource-variables.ts';
import { parseConfig } from '../../src/config/load.ts';
import type { Config } from '../../src/config/schema.ts';

const BOOTSTRAP = 'listeners:\n  - { name: proxy, address: "127.0.0.1:8080", role: proxy }\nshutdown: { min_drain_secs: 3 }\n';

function ok(checked: Checked): Resource {
  assert.ok(checked.ok, `expected the resource to be accepted, got: ${checked.ok ? '' : checked.reason}`);
  return checked.resource;
}

function reasonOf(checked: Checked): string {
  assert.ok(!checked.ok, `expected the resource to be rejected, got ${JSON.stringify(checked.ok && checked.resource.value)}`);
  return checked.reason;
}

/** A gateway's environment `env`, every variable of it allowed (etcd.allowed_env). */
const allowing = (env: Record<string, string>): ResourceVariables => ({ env, allowed: new Set(Object.keys(env)) });

const change = (key: string, value: object | string | undefined, revision: number): ResourceChange => ({
  key,
  value: value === undefined || typeof value === 'string' ? value : JSON.stringify(value),
  revision,
});

describe('resource keys', () => {
  test('kind/name, the name percent-encoded: "/" is escaped so the key has one slash, "*" is kept', () => {
    assert.equal(resourceKey('models', 'gpt-4o'), 'models/gpt-4o');
    assert.equal(resourceKey('models', 'openai/gpt-4o*'), 'models/openai%2Fgpt-4o*');
    assert.equal(resourceKey('models', '*'), 'models/*');
    assert.equal(resourceKey('providers', 'openai'), 'providers/openai');
    assert.deepEqual(parseResourceKey('models/openai%2Fgpt-4o*'), { kind: 'models', name: 'openai/gpt-4o*' });
    assert.deepEqual(parseResourceKey('keys/ci'), { kind: 'keys', name: 'ci' });
  });

  test('parseResourceKey(resourceKey(kind, name)) is (kind, name), for any name', () => {
    for (const name of ['gpt-4o', 'openai/gpt-4o', 'claude-*', '*', 'a/b/c', '%41', '100%', 'with space', '..', 'ü-模型', '?#&=+']) {
      for (const kind of RESOURCE_KINDS) assert.deepEqual(parseResourceKey(resourceKey(kind, name)), { kind, name }, `${kind} ${JSON.stringify(name)}`);
    }
    fc.assert(
      fc.property(fc.constantFrom(...RESOURCE_KINDS), fc.string({ unit: 'grapheme', minLength: 1, maxLength: 30 }), (kind, name) => {
        assert.deepEqual(parseResourceKey(resourceKey(kind, name)), { kind, name });
      }),
    );
  });

  test('a key that is not kind/<encoded name> is refused', () => {
    const bad = [
      'models', // no name
      'models/', // an empty name
      'model/gpt-4o', // not a kind
      'routes/x',
      '/models/gpt-4o', // the prefix left on
      'models/openai/gpt-4o', // a raw "/" in the name: its key is models/openai%2Fgpt-4o
      'models/%ZZ', // not percent-encoding
      'models/%E0%A4%A', // a truncated sequence
      'models/%41', // "A", which is never encoded: two keys for one name would be two resources
      'models/a%2fb', // lower-case hex: the same
      'models/with space',
      '',
    ];
    for (const key of bad) assert.equal(parseResourceKey(key), undefined, JSON.stringify(key));
  });
});

describe('checkResource', () => {
  test('a provider: its name filled in from the key, the defaults applied, the revision kept', () => {
    const resource = ok(checkResource('providers', 'openai', '{"type":"openai","base_url":"https://api.openai.com/v1"}', 7));
    assert.equal(resource.kind, 'providers');
    assert.equal(resource.name, 'openai');
    assert.equal(resource.revision, 7);
    assert.deepEqual(resource.stored, { type: 'openai', base_url: 'https://api.openai.com/v1', name: 'openai' });
    assert.deepEqual(resource.value, { name: 'openai', type: 'openai', base_url: 'https://api.openai.com/v1', anthropic_version: '2023-06-01', headers: {} });
  });

  test('a model whose name has "/" and "*", and its own name written out matching the key', () => {
    const resource = ok(checkResource('models', 'openai/gpt-4o*', '{"name":"openai/gpt-4o*","provider":"openai","upstream_model":"gpt-4o"}', 3));
    assert.deepEqual(resource.value, { name: 'openai/gpt-4o*', provider: 'openai', upstream_model: 'gpt-4o' });
  });

  test('a key: the key itself or its SHA-256 digest; an object is taken as well as JSON text', () => {
    assert.deepEqual(ok(checkResource('keys', 'ci', { key: 'sk-client-1234' }, 1)).value, { name: 'ci', key: 'sk-client-1234' });
    const digest = 'n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg=';
    assert.deepEqual(ok(checkResource('keys', 'ci', { key_sha256: digest }, 1)).value, { name: 'ci', key_sha256: digest });
  });

  test('a name other than the key\'s is refused, naming the key\'s and not quoting the one written', () => {
    const reason = reasonOf(checkResource('providers', 'openai', '{"name":"anthropic","type":"anthropic"}', 1));
    assert.match(reason, /^name: .*"openai"/);
    assert.doesNotMatch(reason, /anthropic/);
  });

  test('not JSON, or JSON that is not an object, is refused; where, but not a word of the text', () => {
    assert.equal(reasonOf(checkResource('models', 'm', '{"provider" 1}', 1)), 'not JSON (line 1, column 13)');
    assert.equal(reasonOf(checkResource('models', 'm', '{"provider":', 1)), 'not JSON');
    // JSON.parse's own message would quote the text around the error ("Unexpected token ... "{"api_key": sk-liv"...").
    for (const text of ['{"api_key": sk-live-0123456789}', 'sk-live-0123456789', '{"type":"openai","api_key":"sk-live-0123456789" "x":1}']) {
      const reason = reasonOf(checkResource('providers', 'p', text, 1));
      assert.match(reason, /^not JSON/);
      assert.doesNotMatch(reason, /sk-live|0123456789/, reason);
    }
    for (const text of ['[]', 'null', '"openai"', '42']) assert.equal(reasonOf(checkResource('models', 'm', text, 1)), 'expected a JSON object', text);
  });

  test("a provider that uses the gateway's own cloud identity sends only to its cloud when it is a resource", () => {
    const check = (body: object) => checkResource('providers', 'p', JSON.stringify(body), 1);
    for (const base_url of ['http://127.0.0.1:9/', 'https://evil.example/', 'https://amazonaws.com.evil.example/', 'http://bedrock-runtime.us-east-1.amazonaws.com/']) {
      assert.match(reasonOf(check({ type: 'bedrock', region: 'us-east-1', base_url })), /^base_url: a bedrock provider defined as a resource authenticates with the gateway's own AWS identity/, base_url);
    }
    assert.match(reasonOf(check({ type: 'vertex', project: 'my-project', base_url: 'https://vertex.evil.example/' })), /own Google Cloud identity/);
    assert.match(reasonOf(check({ type: 'azure_openai', auth: 'entra_id', base_url: 'https://x.openai.azure.com.evil.example/' })), /own Microsoft Entra ID identity/);
    // Their own clouds, the default endpoints, and a key-authenticated provider anywhere, are taken.
    assert.equal(check({ type: 'bedrock', region: 'us-east-1', base_url: 'https://bedrock-runtime.us-east-1.amazonaws.com' }).ok, true);
    assert.equal(check({ type: 'bedrock', region: 'us-east-1' }).ok, true);
    assert.equal(check({ type: 'vertex', project: 'my-project', base_url: 'https://europe-west4-aiplatform.googleapis.com' }).ok, true);
    assert.equal(check({ type: 'azure_openai', auth: 'entra_id', base_url: 'https://x.openai.azure.com' }).ok, true);
    assert.equal(check({ type: 'azure_openai', base_url: 'https://proxy.example', api_key: 'a-key' }).ok, true);
  });

  test('a schema error names the field and what it expects, never the value; a value close to an allowed one gets a "did you mean"', () => {
    assert.equal(reasonOf(checkResource('providers', 'p', '{"type":"azure"}', 1)), 'type: expected one of "openai" | "anthropic" | "azure_openai" | "bedrock" | "gemini" | "vertex" | "echo"');
    assert.equal(reasonOf(checkResource('providers', 'p', '{"type":"antropic"}', 1)), 'type: expected one of "openai" | "anthropic" | "azure_openai" | "bedrock" | "gemini" | "vertex" | "echo" (did you mean "anthropic"?)');
    assert.equal(reasonOf(checkResource('models', 'm', '{"provider":"p","retry":{"max_attempts":"sk-live-0123456789"}}', 1)), 'retry.max_attempts: expected number, got a string');
    assert.match(reasonOf(checkResource('models', 'm', '{}', 1)), /^provider: required/);
    assert.match(reasonOf(checkResource('models', 'm', '{"provider":"p","extra":1}', 1)), /^extra: unknown key "extra"/);
    assert.equal(reasonOf(checkResource('models', 'm', '{"provider":"p","retyr":{}}', 1)), 'retyr: unknown key "retyr" (did you mean "retry"?)');
    assert.equal(reasonOf(checkResource('keys', 'k', '{"key_sha256":"n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg=","rpm":5}', 1)), 'rpm: unknown key "rpm" (did you mean "limits.rpm"?)');
    assert.match(reasonOf(checkResource('providers', 'p', '{"type":"openai","base_url":"ftp://x"}', 1)), /^base_url: /);
    assert.match(reasonOf(checkResource('keys', 'k', '{"key":"short"}', 1)), /^key: expected a client key of at least 8 characters$/);
    // A provider's name must be a plain name (a model's need not): the key's name is checked as its name.
    assert.match(reasonOf(checkResource('providers', 'a/b', '{"type":"openai"}', 1)), /^name: /);
  });

  test('an allowed ${VAR} in a secret-bearing field is resolved for the value it serves, and kept as written in what is stored', () => {
    const resource = ok(checkResource('providers', 'openai', '{"type":"openai","api_key":"${OPENAI_KEY}","headers":{"x-org":"org-${ORG}","x-price":"$$5"}}', 1, allowing({ OPENAI_KEY: 'sk-from-env', ORG: '42' })));
    const value = resource.value as { api_key: string; headers: Record<string, string> };
    assert.equal(value.api_key, 'sk-from-env');
    assert.deepEqual(value.headers, { 'x-org': 'org-42', 'x-price': '$5' });
    // What the snapshot and the admin API keep: the reference, not the secret.
    assert.equal(resource.stored.api_key, '${OPENAI_KEY}');
    const fallback = ok(checkResource('providers', 'p', '{"type":"openai","api_key":"${UNSET:-sk-default}"}', 1, { env: {}, allowed: new Set(['UNSET']) }));
    assert.equal((fallback.value as { api_key: string }).api_key, 'sk-default');
    const target = ok(checkResource('models', 'm', '{"targets":[{"provider":"p","headers":{"authorization":"Bearer ${TOKEN}"}}]}', 1, allowing({ TOKEN: 't0k' })));
    assert.equal((target.value as { targets: { headers: Record<string, string> }[] }).targets[0]!.headers.authorization, 'Bearer t0k');
  });

  test('an allowed ${VAR} not set on this gateway is refused, naming the field and the variable', () => {
    assert.equal(
      reasonOf(checkResource('providers', 'openai', '{"type":"openai","api_key":"${OPENAI_KEY}"}', 1, { env: {}, allowed: new Set(['OPENAI_KEY']) })),
      'api_key: environment variable ${OPENAI_KEY} is not set on this gateway',
    );
  });

  test('a ${VAR} not in etcd.allowed_env is refused in any field, even with a default; by default nothing is allowed', () => {
    const env = { SECRET: 'sk-live-0123456789' };
    for (const form of ['${SECRET}', '${SECRET:-x}', 'pre-${SECRET}']) {
      for (const variables of [undefined, { env, allowed: new Set(['OTHER']) }]) {
        const reason = reasonOf(checkResource('providers', 'p', { type: 'openai', api_key: form }, 1, variables));
        assert.equal(reason, 'api_key: environment variable ${SECRET} is not one this gateway allows (etcd.allowed_env)');
      }
    }
  });

  test('a ${VAR} outside a secret-bearing field is refused, naming the field and the variable, even an allowed one; $${VAR} is text, left as written', () => {
    const variables = allowing({ SECRET: 'sk-live-0123456789' });
    const cases: [string, string, object, string][] = [
      ['providers', 'p', { type: '${SECRET}' }, 'type'],
      ['providers', 'p', { type: 'openai', base_url: 'https://${SECRET}.test' }, 'base_url'],
      ['models', 'm', { provider: 'p', retry: { max_attempts: '${SECRET:-3}' } }, 'retry.max_attempts'],
      ['models', 'm', { provider: 'p', upstream_model: '${SECRET}' }, 'upstream_model'],
      ['keys', 'k', { key_sha256: 'n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg=', metadata: { team: '${SECRET}' } }, 'metadata.team'],
      ['keys', 'k', { key_sha256: 'n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg=', limits: { rpm: '${SECRET}' } }, 'limits.rpm'],
    ];
    for (const [kind, name, document, field] of cases) {
      const reason = reasonOf(checkResource(kind as 'providers', name, document, 1, variables));
      assert.match(reason, new RegExp(`^${field.replace('.', '\\.')}: \\$\\{SECRET\\} is refused here: environment variables are read only in`), reason);
      assert.doesNotMatch(reason, /sk-live/);
    }
    const literal = ok(checkResource('models', 'm', { provider: 'p', upstream_model: 'a$${SECRET}b$$' }, 1, variables));
    assert.equal((literal.value as { upstream_model: string }).upstream_model, 'a$${SECRET}b$$');
  });

  test('a client key holding "${" is refused, naming the variable, whatever is allowed', () => {
    assert.match(reasonOf(checkResource('keys', 'k', { key: '${TEAM_KEY}' }, 1, allowing({ TEAM_KEY: 'sk-team-0123456789' }))), /^key: a client key must not contain "\$\{": \$\{TEAM_KEY\} would never be resolved/);
    assert.match(reasonOf(checkResource('keys', 'k', { key: 'sk-${1}-0123456789' }, 1)), /^key: a client key must not contain "\$\{"/);
  });
});

describe('ResourceSet', () => {
  const provider = (type = 'openai') => ({ type });

  test('apply: a new value that is not valid is reported as rejected, and the last good one stays', () => {
    const set = new ResourceSet();
    assert.deepEqual(set.apply([change('providers/openai', provider(), 2)]), []);
    const rejected = set.apply([change('providers/openai', { type: 'azure' }, 3)]);
    assert.equal(rejected.length, 1);
    assert.equal(rejected[0]!.key, 'providers/openai');
    assert.match(rejected[0]!.reason, /^type: /);
    const kept = set.get('providers', 'openai');
    assert.equal(kept?.revision, 2);
    assert.equal((kept?.value as { type: string }).type, 'openai');

    // A key never valid stays absent; the other changes of the batch apply.
    const batch = set.apply([change('models/m', '{"provider":', 4), change('models/n', { provider: 'openai' }, 5), change('nonsense', {}, 6)]);
    assert.deepEqual(
      batch.map((r) => r.key),
      ['models/m', 'nonsense'],
    );
    assert.match(batch[1]!.reason, /not a resource key/);
    assert.equal(set.get('models', 'm'), undefined);
    assert.equal(set.get('models', 'n')?.revision, 5);
    assert.equal(set.size, 2);
  });

  test('apply: a deletion removes the key (whatever its last value), and deleting an absent key is no error', () => {
    const set = new ResourceSet();
    set.apply([change('providers/openai', provider(), 2), change('models/openai%2Fgpt-4o', { provider: 'openai' }, 3)]);
    assert.deepEqual(set.apply([change('models/openai%2Fgpt-4o', undefined, 4), change('models/never', undefined, 4)]), []);
    assert.equal(set.get('models', 'openai/gpt-4o'), undefined);
    assert.deepEqual(
      set.list('providers').map((r) => r.name),
      ['openai'],
    );
    assert.equal(set.size, 1);
  });

  test('entries(): what the snapshot keeps, the stored JSON with its ${VAR}s unresolved', () => {
    const set = new ResourceSet();
    set.apply([change('providers/openai', { type: 'openai', api_key: '${KEY}' }, 9)], allowing({ KEY: 'sk-secret' }));
    const entries = set.entries();
    assert.deepEqual([...entries.keys()], ['providers/openai']);
    assert.deepEqual(JSON.parse(entries.get('providers/openai')!.value), { type: 'openai', api_key: '${KEY}', name: 'openai' });
    assert.equal(entries.get('providers/openai')!.revision, 9);
    assert.ok(!entries.get('providers/openai')!.value.includes('sk-secret'));
  });

  test('replaceAll: keys absent from the full read are deleted, new ones added, the revision taken', () => {
    const set = new ResourceSet();
    set.apply([change('providers/a', provider(), 2), change('providers/b', provider(), 3), change('models/m', { provider: 'a' }, 4)]);
    const read = new Map([
      ['providers/b', { value: JSON.stringify(provider()), revision: 3 }],
      ['providers/c', { value: JSON.stringify(provider('anthropic')), revision: 8 }],
    ]);
    assert.deepEqual(set.replaceAll(read, 10), []);
    assert.equal(set.revision, 10);
    assert.deepEqual(
      set.list('providers').map((r) => [r.name, r.revision]),
      [
        ['b', 3],
        ['c', 8],
      ],
    );
    assert.deepEqual(set.list('models'), []);
  });

  test('replaceAll: a key whose value is invalid keeps its last good one and is reported again on each full read', () => {
    const set = new ResourceSet();
    set.apply([change('providers/a', provider(), 2)]);
    const read = new Map([['providers/a', { value: '{"type":"azure"}', revision: 5 }]]);
    for (const revision of [6, 7]) {
      const rejected = set.replaceAll(read, revision);
      assert.deepEqual(
        rejected.map((r) => r.key),
        ['providers/a'],
        `full read at ${revision}`,
      );
      assert.equal(set.get('providers', 'a')?.revision, 2);
    }
  });

  test('list() is sorted by name, per kind', () => {
    const set = new ResourceSet();
    set.apply([change('providers/p', provider(), 1), ...['zeta', 'alpha', 'Mid', 'beta-*'].map((name, i) => change(resourceKey('models', name), { provider: 'p' }, 2 + i))]);
    assert.deepEqual(
      set.list('models').map((r) => r.name),
      ['Mid', 'alpha', 'beta-*', 'zeta'],
    );
  });
});

describe('ResourceSet.compose', () => {
  const bootstrap = (): Config => parseConfig(BOOTSTRAP, 'test', {});

  function fullSet(): ResourceSet {
    const set = new ResourceSet();
    const rejected = set.apply(
      [
        change('providers/openai', { type: 'openai', base_url: 'https://api.openai.com/v1', api_key: '${OPENAI_KEY}' }, 2),
        change('providers/local', { type: 'echo' }, 3),
        // Valid on its own; the whole-config check refuses it (an echo provider answers locally).
        change('providers/echo-bad', { type: 'echo', base_url: 'http://upstream.test' }, 4),
        change(resourceKey('models', 'gpt-4o'), { provider: 'openai', upstream_model: 'gpt-4o-2024-08-06' }, 5),
        change(resourceKey('models', 'echo-*'), { provider: 'local' }, 6),
        change('models/orphan', { provider: 'missing' }, 7),
        change('keys/ci', { key: 'sk-client-1234' }, 8),
      ],
      allowing({ OPENAI_KEY: 'sk-openai' }),
    );
    assert.deepEqual(rejected, [], 'each resource is valid on its own');
    return set;
  }

  test('the resources go into the bootstrap config, which keeps its own settings', () => {
    const set = new ResourceSet();
    set.apply([change('providers/openai', { type: 'openai', api_key: '${OPENAI_KEY}' }, 2), change('models/gpt-4o', { provider: 'openai' }, 3), change('keys/ci', { key: 'sk-client-1234' }, 4)], allowing({ OPENAI_KEY: 'sk-openai' }));
    const { config, rejected } = set.compose(bootstrap(), 'etcd');
    assert.deepEqual(rejected, []);
    assert.deepEqual(
      config.providers.map((p) => [p.name, p.api_key]),
      [['openai', 'sk-openai']],
    );
    assert.deepEqual(config.models, [{ name: 'gpt-4o', provider: 'openai' }]);
    assert.deepEqual(config.keys, [{ name: 'ci', key: 'sk-client-1234' }]);
    assert.equal(config.listeners[0]?.name, 'proxy');
    assert.equal(config.shutdown.min_drain_secs, 3);
    assert.ok(Object.isFrozen(config), 'a composed config is frozen like a loaded one');
  });

  test('a model of a missing provider and an echo provider with a base_url are left out, with their reasons; the rest is kept', () => {
    const { config, rejected } = fullSet().compose(bootstrap(), 'etcd');
    const reasons = new Map(rejected.map((r) => [r.key, r.reason]));
    assert.equal(reasons.get('models/orphan'), 'provider: no provider of that name (known: "echo-bad", "local", "openai")');
    assert.match(reasons.get('providers/echo-bad') ?? '(none)', /^base_url: an echo provider answers locally and takes no base_url$/);
    assert.equal(rejected.length, 2, JSON.stringify(rejected));
    assert.deepEqual(
      config.providers.map((p) => p.name),
      ['local', 'openai'],
    );
    assert.deepEqual(
      config.models.map((m) => m.name),
      ['echo-*', 'gpt-4o'],
    );
    assert.deepEqual(config.keys, [{ name: 'ci', key: 'sk-client-1234' }]);
  });

  test('a model of a provider left out by the whole-config check is left out in turn', () => {
    const set = fullSet();
    set.apply([change('models/via-bad', { provider: 'echo-bad' }, 9)]);
    const { config, rejected } = set.compose(bootstrap(), 'etcd');
    const reasons = new Map(rejected.map((r) => [r.key, r.reason]));
    assert.match(reasons.get('models/via-bad') ?? '(none)', /^provider: no provider of that name/);
    assert.ok(reasons.has('providers/echo-bad'));
    assert.ok(!config.models.some((m) => m.name === 'via-bad'));
    assert.deepEqual(
      config.providers.map((p) => p.name),
      ['local', 'openai'],
    );
  });

  test('a model name pattern with "*" not at its end (valid alone, refused by the whole-config check) is left out', () => {
    const set = fullSet();
    set.apply([change(resourceKey('models', 'a*b'), { provider: 'local' }, 9)]);
    const { config, rejected } = set.compose(bootstrap(), 'etcd');
    assert.match(rejected.find((r) => r.key === 'models/a*b')?.reason ?? '(none)', /^name: a "\*" may only end/);
    assert.ok(!config.models.some((m) => m.name === 'a*b'));
  });

  test('auth.require_key, on by default in etcd mode, stays on in the composed config (which has no etcd section)', () => {
    const etcd = (extra = '') => parseConfig(`${BOOTSTRAP}etcd: { endpoints: ["http://127.0.0.1:2379"] }\n${extra}`, 'test', {});
    assert.equal(etcd().auth.require_key, true);
    const { config } = new ResourceSet().compose(etcd(), 'etcd');
    assert.equal(config.etcd, undefined);
    assert.equal(config.auth.require_key, true);
    assert.equal(fullSet().compose(etcd(), 'etcd').config.auth.require_key, true);
    // Turned off on purpose: the bootstrap file says so, and the composed config too.
    assert.equal(new ResourceSet().compose(etcd('auth: { require_key: false }\n'), 'etcd').config.auth.require_key, false);
    assert.equal(bootstrap().auth.require_key, false, 'file mode: off by default');
  });

  test('no resources: the bootstrap config as it is', () => {
    const { config, rejected } = new ResourceSet().compose(bootstrap(), 'etcd');
    assert.deepEqual(rejected, []);
    assert.deepEqual(config, bootstrap());
  });

  // The bootstrap of etcd mode is a file with an `etcd:` section; composing resources into it must
  // not trip the file check "with etcd configured, providers live in etcd" (meant for the file).
  test('compose into a bootstrap with etcd configured (etcd mode) does not trip the file-only check', () => {
    const etcdBootstrap = parseConfig(`${BOOTSTRAP}etcd: { endpoints: ["http://127.0.0.1:2379"] }\n`, 'test', {});
    const set = new ResourceSet();
    set.apply([change('providers/local', { type: 'echo' }, 2)]);
    const { config, rejected } = set.compose(etcdBootstrap, 'etcd');
    assert.deepEqual(rejected, []);
    assert.deepEqual(
      config.providers.map((p) => p.name),
      ['local'],
    );
  });
});
