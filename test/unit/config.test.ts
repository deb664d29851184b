// Config loading: YAML parsing, `${VAR}` interpolation, validation with key paths, defaults, and the
// embedded default config.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, formatPath, loadConfigFile, loadDefaultConfig, parseConfig, type ConfigProblem } from '../../src/config/load.ts';
import { configSchema, listenerProtocols, parseAddress, workerCount } from '../../src/config/schema.ts';
import { interpolate, type MissingVariable } from '../../src/config/interpolate.ts';
import { defaultConfigText } from '../../src/config/default.ts';

const PROXY = 'listeners:\n  - { name: proxy, address: "127.0.0.1:8080", role: proxy }\n';

/** Parses `text` and returns the problems it is rejected with (fails if it is accepted). */
function problemsOf(text: string, env: NodeJS.ProcessEnv = {}): ConfigProblem[] {
  try {
    parseConfig(text, 'test.yaml', env);
  } catch (error) {
    assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${String(error)}`);
    assert.equal(error.code, 'SLUICE_ERR_CONFIG');
    assert.equal(error.source, 'test.yaml');
    assert.ok(error.problems.length > 0);
    return error.problems;
  }
  assert.fail('expected the config to be rejected');
}

function problemAt(problems: ConfigProblem[], path: string): ConfigProblem {
  const found = problems.find((p) => p.path === path);
  assert.ok(found, `expected a problem at "${path}", got ${JSON.stringify(problems)}`);
  return found;
}

function isDeeplyFrozen(value: unknown, path = '$'): string | undefined {
  if (value === null || typeof value !== 'object') return undefined;
  if (!Object.isFrozen(value)) return path;
  for (const [key, item] of Object.entries(value)) {
    const notFrozen = isDeeplyFrozen(item, `${path}.${key}`);
    if (notFrozen) return notFrozen;
  }
  return undefined;
}

describe('defaults', () => {
  test('a config with only a proxy listener gets every default filled in', () => {
    const config = parseConfig(PROXY, 'test.yaml', {});
    assert.deepEqual(config, {
      workers: 'auto',
      listeners: [{ name: 'proxy', address: '127.0.0.1:8080', role: 'proxy', drain_type: 'default', direction: 'inbound' }],
      providers: [],
      models: [],
      keys: [],
      // Off: with no etcd section nothing is written at run time, and no key means open (and warned about off loopback).
      auth: { require_key: false, allowed_hosts: [] },
      shutdown: { min_drain_secs: 30, max_drain_secs: 0, progress_log_secs: 5, drain_strategy: 'immediate', reset_upgraded_on_proactive_drain: false, parent_shutdown_secs: 900 },
      downstream: {
        idle_timeout_secs: 0,
        fresh_connection_grace_secs: 10,
        request_body_limit_bytes: 10 * 1024 * 1024,
        headers_timeout_secs: 30,
        request_timeout_secs: 300,
        drain_timeout_secs: 5,
        max_connections: 0,
      },
      upstream: { connect_timeout_ms: 5000, timeout_ms: 600_000, max_connections: 0 },
      routing: { cooldown_failures: 3, cooldown_secs: 30, cooldown_max_secs: 300, retry_budget_percent: 20, min_retry_concurrency: 3 },
      limits: { store: 'memory', on_store_error: 'open', lease_secs: 30, estimate_output_tokens: 500, budget_hold_output_tokens: 4096, read_after_disconnect_secs: 30, models: {} },
      prices: {},
      log: { level: 'info', access_log: true, format: 'auto' },
      admin: { allow_non_loopback: false, allowed_hosts: [], tokens: [], status_page: true },
      hot_restart: { enabled: false, start_timeout_secs: 60 },
      workers_recycle: { max_rss_mb: 0, max_requests: 0 },
      reload: { watch: true },
      snapshot: {},
      teams: [],
      tracing: { enabled: false, headers: {}, sample_ratio: 1, flush_timeout_ms: 2000 },
    });
  });

  test('a partly given section keeps its given values and defaults the rest', () => {
    const config = parseConfig(`${PROXY}shutdown: { min_drain_secs: 2 }\nlog: { level: debug }\n`, 'test.yaml', {});
    assert.deepEqual(config.shutdown, { min_drain_secs: 2, max_drain_secs: 0, progress_log_secs: 5, drain_strategy: 'immediate', reset_upgraded_on_proactive_drain: false, parent_shutdown_secs: 900 });
    assert.deepEqual(config.log, { level: 'debug', access_log: true, format: 'auto' });
  });

  test('provider defaults: anthropic_version and headers', () => {
    const config = parseConfig(`${PROXY}providers:\n  - { name: e, type: echo }\n`, 'test.yaml', {});
    assert.deepEqual(config.providers, [{ name: 'e', type: 'echo', anthropic_version: '2023-06-01', headers: {} }]);
  });

  test('an empty document is rejected for its missing listeners', () => {
    const problems = problemsOf('');
    assert.match(problemAt(problems, 'listeners').message, /required/);
  });

  test('two parses do not share default objects', () => {
    const a = parseConfig(PROXY, 'test.yaml', {});
    const b = parseConfig(PROXY, 'test.yaml', {});
    assert.notEqual(a.shutdown, b.shutdown);
    assert.notEqual(a.providers, b.providers);
  });
});

describe('unknown keys', () => {
  test('an unknown top-level key is rejected and named', () => {
    const problems = problemsOf(`${PROXY}bogus: 1\n`);
    assert.equal(problems.length, 1);
    assert.match(problems[0]!.message, /unknown key "bogus"/);
  });

  test('an unknown nested key is rejected and named, with the path of its mapping', () => {
    assert.match(problemAt(problemsOf(`${PROXY}shutdown:\n  bogus: 1\n`), 'shutdown.bogus').message, /unknown key "bogus"/);
    const listeners = 'listeners:\n  - { name: p, address: "127.0.0.1:8080", role: proxy }\n  - { name: a, address: "127.0.0.1:9090", role: admin, tls_cert: x }\n';
    assert.match(problemAt(problemsOf(listeners), 'listeners[1].tls_cert').message, /unknown key "tls_cert"/);
  });

  test(
    'the problem path of an unknown key is the key itself (shutdown.bogus, listeners[1].tls_cert, bogus)',
    () => {
      assert.ok(problemsOf(`${PROXY}shutdown:\n  bogus: 1\n`).some((p) => p.path === 'shutdown.bogus'));
      const listeners = 'listeners:\n  - { name: p, address: "127.0.0.1:8080", role: proxy }\n  - { name: a, address: "127.0.0.1:9090", role: admin, tls_cert: x }\n';
      assert.ok(problemsOf(listeners).some((p) => p.path === 'listeners[1].tls_cert'));
      assert.ok(problemsOf(`${PROXY}bogus: 1\n`).some((p) => p.path === 'bogus'));
    },
  );

  test('an unknown key with no close sibling: the section it belongs in (a level or two further in), else the keys allowed there', () => {
    const problems = problemsOf(`${PROXY}min_drain_secs: 3\nenabled: true\nlimits:\n  rpm: 5\ntelemetry: {}\nshutdown:\n  tracing: 1\n`);
    assert.equal(problemAt(problems, 'min_drain_secs').message, 'unknown key "min_drain_secs" (did you mean "shutdown.min_drain_secs"?)');
    assert.equal(problemAt(problems, 'enabled').message, 'unknown key "enabled" (did you mean "hot_restart.enabled" or "tracing.enabled" or "ledger.enabled" or "ledger.bodies.enabled"?)');
    assert.equal(problemAt(problems, 'limits.rpm').message, 'unknown key "rpm" (did you mean "limits.global.rpm"?)');
    assert.match(problemAt(problems, 'telemetry').message, /^unknown key "telemetry" \(known keys: workers, listeners, providers, .*, tracing, ledger, budget_alerts\)$/);
    assert.match(problemAt(problems, 'shutdown.tracing').message, /^unknown key "tracing" \(known keys: min_drain_secs, /);
  });

  test('several unknown keys in one mapping are all named', () => {
    const problems = problemsOf(`${PROXY}log: { colour: red, style: json }\n`);
    const text = problems.map((p) => p.message).join('\n');
    assert.match(text, /"colour"/);
    assert.match(text, /"style"/);
  });
});

describe('types', () => {
  test('a wrong type names the path and the expected type', () => {
    const problems = problemsOf(`${PROXY}shutdown: { min_drain_secs: "soon" }\nlog: { access_log: "yes" }\nkeys: 5\n`);
    assert.match(problemAt(problems, 'shutdown.min_drain_secs').message, /expected number/);
    assert.match(problemAt(problems, 'log.access_log').message, /expected boolean/);
    assert.match(problemAt(problems, 'keys').message, /expected array/);
  });

  test('a wrong type is not reported as missing, and the value given is shown', () => {
    const problems = problemsOf(`${PROXY}shutdown: { min_drain_secs: "soon" }\nlog: { level: loud }\n`);
    assert.equal(problemAt(problems, 'shutdown.min_drain_secs').message, 'expected number, got "soon"');
    assert.match(problemAt(problems, 'log.level').message, /got "loud"$/);
    const address = problemsOf('listeners:\n  - { name: p, address: 8080, role: proxy }\n');
    assert.equal(problemAt(address, 'listeners[0].address').message, 'expected string, got number 8080');
  });

  test('a value under a credential key (api_key, keys, key, headers) is never quoted in a problem', () => {
    const secret = 'sk-live-0123456789';
    const text = `${PROXY}providers:
  - { name: o, type: openai, api_key: 987654321, headers: "authorization: Bearer ${secret}" }
  - { name: p, type: openai, headers: { authorization: 11223344 } }
keys: "${secret}"
`;
    const problems = problemsOf(text);
    assert.equal(problemAt(problems, 'providers[0].api_key').message, 'expected string');
    assert.equal(problemAt(problems, 'providers[0].headers').message, 'expected record');
    assert.equal(problemAt(problems, 'providers[1].headers.authorization').message, 'expected string');
    assert.equal(problemAt(problems, 'keys').message, 'expected array');
    const all = JSON.stringify(problems);
    for (const leaked of [secret, '987654321', '11223344']) assert.ok(!all.includes(leaked), `${leaked} in ${all}`);
    const named = problemsOf(`${PROXY}keys: [{ name: ci, key: 12345678901 }]\n`);
    assert.ok(!JSON.stringify(named).includes('12345678901'), JSON.stringify(named));
  });

  test('a value that came from a ${VAR} is never quoted, nor hinted at; a literal of the file is, with a "did you mean" for an allowed value', () => {
    const secret = 'antropic-0123456789';
    const text = `${PROXY}  - { name: a, address: "\${ADDR}", role: admin }
providers:
  - { name: p, type: "\${TYPE}" }
  - { name: q, type: antropic }
  - { name: r, type: "\${NEAR}" }
models:
  - { name: m, provider: "\${PROVIDER}" }
  - { name: n, provider: ghost }
shutdown: { min_drain_secs: "\${SECS}" }
log: { level: WARN }
`;
    const problems = problemsOf(text, { ADDR: '10.1.2.3:4567', TYPE: secret, NEAR: 'antropic', PROVIDER: secret, SECS: secret });
    for (const leaked of [secret, '10.1.2.3', '4567']) assert.ok(!JSON.stringify(problems).includes(leaked), `${leaked} in ${JSON.stringify(problems)}`);
    assert.equal(problemAt(problems, 'providers[0].type').message, 'expected one of "openai" | "anthropic" | "azure_openai" | "bedrock" | "gemini" | "vertex" | "echo"');
    assert.equal(problemAt(problems, 'providers[1].type').message, 'expected one of "openai" | "anthropic" | "azure_openai" | "bedrock" | "gemini" | "vertex" | "echo", got "antropic" (did you mean "anthropic"?)');
    assert.equal(problemAt(problems, 'providers[2].type').message, 'expected one of "openai" | "anthropic" | "azure_openai" | "bedrock" | "gemini" | "vertex" | "echo"', 'no hint from a value that came from a variable');
    assert.equal(problemAt(problems, 'listeners[1].address').message, 'an admin listener binds to loopback unless admin.allow_non_loopback is true');
    assert.equal(problemAt(problems, 'models[0].provider').message, 'no provider of that name');
    assert.equal(problemAt(problems, 'models[1].provider').message, 'unknown provider "ghost" (known: "p", "q", "r")');
    assert.equal(problemAt(problems, 'shutdown.min_drain_secs').message, 'expected number, got a string');
    assert.match(problemAt(problems, 'log.level').message, /got "WARN" \(did you mean "warn"\?\)$/);
  });

  test('a cross-check quotes a value only if every value it quotes may be (a provider name from a ${VAR} hides the list of known ones)', () => {
    const text = `${PROXY}providers:\n  - { name: "\${NAME}", type: echo }\nmodels:\n  - { name: m, provider: ghost }\n`;
    const problems = problemsOf(text, { NAME: 'secret-provider-name' });
    assert.equal(problemAt(problems, 'models[0].provider').message, 'no provider of that name');
    const timeouts = problemsOf(`${PROXY}downstream: { headers_timeout_secs: 50, request_timeout_secs: "\${RT}" }\n`, { RT: '20' });
    assert.equal(problemAt(timeouts, 'downstream.headers_timeout_secs').message, 'must not exceed downstream.request_timeout_secs');
    const literal = problemsOf(`${PROXY}downstream: { headers_timeout_secs: 50, request_timeout_secs: 20 }\n`);
    assert.equal(problemAt(literal, 'downstream.headers_timeout_secs').message, 'must not exceed downstream.request_timeout_secs (20)');
  });

  test('a missing required field is reported as required', () => {
    const problems = problemsOf('listeners:\n  - { name: p, role: proxy }\n');
    assert.match(problemAt(problems, 'listeners[0].address').message, /^required: expected string$/);
  });

  test('an enum value outside the set lists the allowed values', () => {
    const problems = problemsOf('listeners:\n  - { name: p, address: "127.0.0.1:8080", role: proxi }\n');
    assert.match(problemAt(problems, 'listeners[0].role').message, /"proxy" \| "admin"/);
  });

  test('negative seconds and a non-URL base_url are rejected', () => {
    const problems = problemsOf(`${PROXY}shutdown: { min_drain_secs: -1 }\nproviders:\n  - { name: o, type: openai, base_url: "ftp://x" }\n`);
    assert.match(problemAt(problems, 'shutdown.min_drain_secs').message, />= 0/);
    assert.match(problemAt(problems, 'providers[0].base_url').message, /http/);
  });

  test('a client key shorter than 8 characters is rejected', () => {
    const problems = problemsOf(`${PROXY}keys: ["short", { name: ci, key: "tiny" }, "long-enough-key"]\n`);
    assert.ok(problems.some((p) => p.path.startsWith('keys[0]')));
    assert.ok(problems.some((p) => p.path.startsWith('keys[1]')));
    assert.ok(!problems.some((p) => p.path.startsWith('keys[2]')));
  });
});

describe('listeners', () => {
  test('addresses that do not parse are rejected at their path', () => {
    const bad = ['localhost', '1.2.3.4:70000', 'a b:80', 'host:', '[zz]:80', '127.0.0.1:123456'];
    const text = `listeners:\n  - { name: proxy, address: "127.0.0.1:8080", role: proxy }\n${bad
      .map((address, i) => `  - { name: l${i}, address: "${address}", role: admin }\n`)
      .join('')}`;
    const problems = problemsOf(text);
    bad.forEach((address, i) => assert.match(problemAt(problems, `listeners[${i + 1}].address`).message, /host:port/, address));
    assert.equal(problems.length, bad.length);
  });

  test('parseAddress: host:port, [v6]:port, :port', () => {
    assert.deepEqual(parseAddress('127.0.0.1:8080'), { host: '127.0.0.1', port: 8080 });
    assert.deepEqual(parseAddress('[::1]:9000'), { host: '::1', port: 9000 });
    assert.deepEqual(parseAddress(':80'), { host: '0.0.0.0', port: 80 });
    assert.deepEqual(parseAddress('example.com:0'), { host: 'example.com', port: 0 });
    assert.equal(parseAddress('::1:80'), undefined);
    assert.equal(parseAddress('127.0.0.1:65536'), undefined);
    assert.equal(parseAddress('127.0.0.1'), undefined);
  });

  test('duplicate listener names and addresses are rejected', () => {
    const text = 'listeners:\n  - { name: p, address: "127.0.0.1:8080", role: proxy }\n  - { name: p, address: "127.0.0.1:8080", role: admin }\n';
    const problems = problemsOf(text);
    assert.match(problemAt(problems, 'listeners[1].name').message, /duplicate name "p"/);
    assert.match(problemAt(problems, 'listeners[1].address').message, /already used by listeners\[0\]/);
  });

  test('port 0 may repeat (each gets its own ephemeral port)', () => {
    const text = 'listeners:\n  - { name: p, address: "127.0.0.1:0", role: proxy }\n  - { name: a, address: "127.0.0.1:0", role: admin }\n';
    assert.equal(parseConfig(text, 'test.yaml', {}).listeners.length, 2);
  });

  test('tls: cert_file and key_file required, handshake timeout defaulted, unknown keys rejected', () => {
    const ok = parseConfig('listeners:\n  - { name: p, address: "127.0.0.1:8443", role: proxy, tls: { cert_file: c.pem, key_file: k.pem } }\n', 'test.yaml', {});
    assert.deepEqual(ok.listeners[0]!.tls, { cert_file: 'c.pem', key_file: 'k.pem', handshake_timeout_secs: 10 });
    const problems = problemsOf('listeners:\n  - { name: p, address: "127.0.0.1:8443", role: proxy, tls: { cert_file: c.pem, bogus: 1 } }\n');
    assert.match(problemAt(problems, 'listeners[0].tls.key_file').message, /required/);
    assert.match(problemAt(problems, 'listeners[0].tls.bogus').message, /unknown key "bogus"/);
  });

  test('protocols: a non-empty list of http1 / h2; default both with TLS, http1 without', () => {
    const text = `listeners:
  - { name: a, address: "127.0.0.1:1", role: proxy }
  - { name: b, address: "127.0.0.1:2", role: proxy, tls: { cert_file: c, key_file: k } }
  - { name: c, address: "127.0.0.1:3", role: proxy, protocols: [h2] }
`;
    const config = parseConfig(text, 'test.yaml', {});
    assert.deepEqual(config.listeners.map((l) => listenerProtocols(l)), [['http1'], ['http1', 'h2'], ['h2']]);
    assert.ok(problemsOf('listeners:\n  - { name: a, address: "127.0.0.1:1", role: proxy, protocols: [] }\n').some((p) => p.path === 'listeners[0].protocols'));
    assert.ok(problemsOf('listeners:\n  - { name: a, address: "127.0.0.1:1", role: proxy, protocols: [h3] }\n').some((p) => p.path === 'listeners[0].protocols[0]'));
  });

  test('at least one listener, and at least one proxy listener', () => {
    assert.match(problemAt(problemsOf('listeners: []\n'), 'listeners').message, /at least one listener/);
    const adminOnly = 'listeners:\n  - { name: a, address: "127.0.0.1:9901", role: admin }\n';
    assert.match(problemAt(problemsOf(adminOnly), 'listeners').message, /role "proxy"/);
  });
});

describe('providers and models', () => {
  test('duplicate provider and model names are rejected', () => {
    const text = `${PROXY}providers:\n  - { name: e, type: echo }\n  - { name: e, type: echo }\nmodels:\n  - { name: m, provider: e }\n  - { name: m, provider: e }\n`;
    const problems = problemsOf(text);
    assert.match(problemAt(problems, 'providers[1].name').message, /duplicate name "e"/);
    assert.match(problemAt(problems, 'models[1].name').message, /duplicate name "m"/);
  });

  test('a model with an unknown provider is reported at models[i].provider, listing the known ones', () => {
    const problems = problemsOf(`${PROXY}providers:\n  - { name: e, type: echo }\nmodels:\n  - { name: m, provider: ghost }\n`);
    assert.equal(problems.length, 1);
    assert.equal(problems[0]!.path, 'models[0].provider');
    assert.match(problems[0]!.message, /unknown provider "ghost" \(known: "e"\)/);
    const none = problemsOf(`${PROXY}models:\n  - { name: m, provider: ghost }\n`);
    assert.match(problemAt(none, 'models[0].provider').message, /none configured/);
  });

  test('a "*" is allowed only at the end of a model name', () => {
    const good = ['*', 'gpt-*', 'o1*', 'exact-name'];
    const bad = ['a*b', '*-mini', '**', 'gpt-*-x'];
    const text = `${PROXY}providers:\n  - { name: e, type: echo }\nmodels:\n${[...good, ...bad]
      .map((name) => `  - { name: "${name}", provider: e }\n`)
      .join('')}`;
    const problems = problemsOf(text);
    assert.deepEqual(
      problems.map((p) => p.path),
      bad.map((_, i) => `models[${good.length + i}].name`),
    );
    for (const p of problems) assert.match(p.message, /may only end/);
  });

  test('an echo provider takes no base_url', () => {
    const problems = problemsOf(`${PROXY}providers:\n  - { name: e, type: echo, base_url: "http://x" }\n`);
    assert.match(problemAt(problems, 'providers[0].base_url').message, /echo/);
  });

  test('azure_openai needs its endpoint; api_version and preset belong to their types; a hosted preset needs a key', () => {
    assert.match(problemAt(problemsOf(`${PROXY}providers:\n  - { name: a, type: azure_openai }\n`), 'providers[0].base_url').message, /required for azure_openai/);
    assert.match(problemAt(problemsOf(`${PROXY}providers:\n  - { name: a, type: openai, api_version: 2024-10-21 }\n`), 'providers[0].api_version').message, /azure_openai providers only/);
    assert.match(problemAt(problemsOf(`${PROXY}providers:\n  - { name: a, type: azure_openai, base_url: "https://r.openai.azure.com", api_version: "24-10-21" }\n`), 'providers[0].api_version').message, /API version such as/);
    assert.match(problemAt(problemsOf(`${PROXY}providers:\n  - { name: a, type: anthropic, preset: groq }\n`), 'providers[0].preset').message, /openai providers only/);
    assert.match(problemAt(problemsOf(`${PROXY}providers:\n  - { name: g, type: openai, preset: groq }\n`), 'providers[0].api_key').message, /groq API refuses a request without a key/);
    assert.equal(parseConfig(`${PROXY}providers:\n  - { name: g, type: openai, preset: groq, headers: { Authorization: "Bearer x" } }\n`, 'test.yaml', {}).providers[0]!.preset, 'groq');
    assert.equal(parseConfig(`${PROXY}providers:\n  - { name: o, type: openai, preset: ollama }\n`, 'test.yaml', {}).providers[0]!.preset, 'ollama', 'a local server needs no key');
  });

  test('upstream_model is carried through', () => {
    const config = parseConfig(`${PROXY}providers:\n  - { name: e, type: echo }\nmodels:\n  - { name: fast, provider: e, upstream_model: echo-1 }\n`, 'test.yaml', {});
    assert.deepEqual(config.models, [{ name: 'fast', provider: 'e', upstream_model: 'echo-1' }]);
  });
});

describe('interpolation', () => {
  const provider = (apiKey: string, baseUrl = 'http://upstream.test/v1') =>
    `${PROXY}providers:\n  - { name: o, type: openai, api_key: "${apiKey}", base_url: "${baseUrl}" }\n`;

  test('${VAR} is replaced by its value', () => {
    const config = parseConfig(provider('${KEY}'), 'test.yaml', { KEY: 'sk-123' });
    assert.equal(config.providers[0]!.api_key, 'sk-123');
  });

  test('${VAR} inside a longer string', () => {
    const config = parseConfig(provider('pre-${KEY}-post'), 'test.yaml', { KEY: 'x' });
    assert.equal(config.providers[0]!.api_key, 'pre-x-post');
  });

  test('${VAR:-default} uses the default when VAR is unset, the value when set', () => {
    const text = provider('k', '${URL:-http://fallback.test/v1}');
    assert.equal(parseConfig(text, 'test.yaml', {}).providers[0]!.base_url, 'http://fallback.test/v1');
    assert.equal(parseConfig(text, 'test.yaml', { URL: 'https://set.test' }).providers[0]!.base_url, 'https://set.test');
  });

  test('${VAR:-default} uses the default when VAR is set but empty', () => {
    const config = parseConfig(provider('k', '${URL:-http://fallback.test/v1}'), 'test.yaml', { URL: '' });
    assert.equal(config.providers[0]!.base_url, 'http://fallback.test/v1');
  });

  test('${VAR:-} gives an empty string for an unset optional variable, with no problem', () => {
    const config = parseConfig(provider('${KEY:-}'), 'test.yaml', {});
    assert.equal(config.providers[0]!.api_key, '');
  });

  test('${VAR} set to the empty string is the empty string, not a problem', () => {
    assert.equal(parseConfig(provider('${KEY}'), 'test.yaml', { KEY: '' }).providers[0]!.api_key, '');
  });

  test('$$ is a literal $, and $${VAR} is not interpolated', () => {
    const config = parseConfig(provider('a$$b$${KEY}'), 'test.yaml', { KEY: 'nope' });
    assert.equal(config.providers[0]!.api_key, 'a$b${KEY}');
  });

  test('a lone $ not followed by { is kept', () => {
    assert.equal(parseConfig(provider('pa$s'), 'test.yaml', {}).providers[0]!.api_key, 'pa$s');
  });

  test('a missing variable is reported with its path and name', () => {
    const problems = problemsOf(provider('${OPENAI_KEY_MISSING}'));
    assert.equal(problems.length, 1);
    assert.equal(problems[0]!.path, 'providers[0].api_key');
    assert.match(problems[0]!.message, /\$\{OPENAI_KEY_MISSING\} is not set/);
  });

  test('a missing variable in a list item and in a nested mapping are reported at their paths', () => {
    const text = `${PROXY}providers:\n  - { name: e, type: openai, headers: { x-org: "\${ORG}" } }\nkeys: ["\${CLIENT_KEY}"]\n`;
    const problems = problemsOf(text);
    assert.ok(problems.some((p) => p.path === 'providers[0].headers.x-org' && p.message.includes('${ORG}')), JSON.stringify(problems));
    assert.ok(problems.some((p) => p.path === 'keys[0]' && p.message.includes('${CLIENT_KEY}')), JSON.stringify(problems));
  });

  test('happens after YAML parsing: a value with "#" or ": " does not change the document shape', () => {
    const tricky = 'sk-1 # not a comment: {also: not, a: mapping}\nbogus: 1';
    const config = parseConfig(provider('${KEY}'), 'test.yaml', { KEY: tricky });
    assert.equal(config.providers[0]!.api_key, tricky);
    assert.deepEqual(Object.keys(config.providers[0]!).sort(), ['anthropic_version', 'api_key', 'base_url', 'headers', 'name', 'type']);
  });

  test('happens after YAML parsing: an unquoted ${VAR} holding YAML flow syntax stays a string', () => {
    const text = `listeners:\n  - name: proxy\n    address: \${ADDR}\n    role: proxy\n`;
    const problems = problemsOf(text, { ADDR: '{ host: x }' });
    assert.match(problemAt(problems, 'listeners[0].address').message, /host:port/);
    const config = parseConfig(text, 'test.yaml', { ADDR: '[::1]:8080' });
    assert.equal(config.listeners[0]!.address, '[::1]:8080');
  });

  test('keys are not interpolated, only values', () => {
    const out = interpolate({ '${K}': '${K}' }, { K: 'v' });
    assert.deepEqual(out, { '${K}': 'v' });
  });

  test('interpolate() tells which strings a variable went into, and interpolates only where told', () => {
    const expanded: (string | number)[][] = [];
    const out = interpolate({ a: '${X}', b: 'plain $$', c: ['${Y:-y}'], d: '$${X}' }, { X: 'x' }, [], { expanded });
    assert.deepEqual(out, { a: 'x', b: 'plain $', c: ['y'], d: '${X}' });
    assert.deepEqual(expanded, [['a'], ['c', 0]]);
    const only = interpolate({ secret: '${X}', other: '${X} $$' }, { X: 'x' }, [], { where: (path) => path[0] === 'secret' });
    assert.deepEqual(only, { secret: 'x', other: '${X} $$' });
  });

  test('interpolate() leaves non-strings alone and reports missing paths', () => {
    const missing: MissingVariable[] = [];
    const out = interpolate({ a: [1, true, null, '${X}'], b: { c: '${Y:-y}' } }, {}, missing);
    assert.deepEqual(out, { a: [1, true, null, ''], b: { c: 'y' } });
    assert.deepEqual(missing, [{ path: ['a', 3], variable: 'X' }]);
  });
});

describe('errors', () => {
  test('a YAML syntax error is one problem, at the line and column where the bracket was opened', () => {
    const problems = problemsOf('listeners: [\n  { name: p\n');
    assert.equal(problems.length, 1, JSON.stringify(problems));
    assert.equal(problems[0]!.path, '');
    assert.equal(problems[0]!.message, 'YAML syntax: the [ opened here is never closed');
    assert.deepEqual([problems[0]!.line, problems[0]!.column], [1, 12]);
    assert.equal(problems[0]!.excerpt, 'listeners: [\n           ^');
  });

  test('a YAML syntax error message ends with what is wrong, not a dangling "at line …:"', () => {
    for (const text of [`${PROXY}log:\n  level info\n  access_log: true\n`, `${PROXY}log:\n  level: info\n access_log: true\n`, 'a:\n\tb: 1\n']) {
      const [problem] = problemsOf(text);
      assert.doesNotMatch(problem!.message, /at line|:$/, problem!.message);
      assert.ok(problem!.line! >= 1, JSON.stringify(problem));
    }
    // A mapping item indented one space too few: its own line, at the key (column 2), not the line before.
    const [misindented] = problemsOf(`${PROXY}log:\n  level: info\n access_log: true\n`);
    assert.deepEqual([misindented!.line, misindented!.column], [5, 2]);
  });

  test('an unquoted ${VAR} in a flow collection is one problem saying to quote it; quoted, or in block style, it is fine', () => {
    const flow = `${PROXY}providers:\n  - { name: up, type: openai, api_key: \${KEY}, base_url: "http://x/v1" }\n`;
    const problems = problemsOf(flow, { KEY: 'k' });
    assert.deepEqual(problems.map((p) => [p.message, p.line, p.column]), [['YAML syntax: ${KEY} inside { } or [ ] must be quoted: write "${KEY}"', 4, 40]]);
    assert.equal(parseConfig(flow.replace('${KEY}', '"${KEY}"'), 'test.yaml', { KEY: 'k' }).providers[0]!.api_key, 'k');
    assert.equal(parseConfig(`${PROXY}providers:\n  - name: up\n    type: openai\n    api_key: \${KEY}\n`, 'test.yaml', { KEY: 'k' }).providers[0]!.api_key, 'k');
  });

  test('an unknown key gets "did you mean" from the keys allowed at its place, or the list of them', () => {
    const problems = problemsOf(`${PROXY}providers:\n  - { name: up, type: openai, api_kye: x }\nkeys: [{ name: ci, kye: "12345678" }]\nlog: { levle: info, zzz: 1 }\n`);
    assert.equal(problemAt(problems, 'providers[0].api_kye').message, 'unknown key "api_kye" (did you mean "api_key"?)');
    assert.equal(problemAt(problems, 'log.levle').message, 'unknown key "levle" (did you mean "level"?)');
    assert.equal(problemAt(problems, 'log.zzz').message, 'unknown key "zzz" (known keys: level, access_log, format)');
    assert.match(problemAt(problems, 'keys[0].kye').message, /did you mean "key"\?/);
  });

  test('schema problems carry the line and column of their value, or of the key for an unknown key', () => {
    const problems = problemsOf(`${PROXY}shutdown:\n  min_drain_secs: soon\n  bogus: 1\n`);
    const wrong = problemAt(problems, 'shutdown.min_drain_secs');
    assert.deepEqual([wrong.line, wrong.column], [4, 19]);
    const unknown = problemAt(problems, 'shutdown.bogus');
    assert.deepEqual([unknown.line, unknown.column], [5, 3]);
    // A required key that is missing: where its mapping is.
    const required = problemAt(problemsOf('listeners:\n  - { name: p, role: proxy }\n'), 'listeners[0].address');
    assert.equal(required.line, 2);
  });

  test('an unset ${VAR} is reported once, not again as the empty string it became', () => {
    const problems = problemsOf('listeners:\n  - name: p\n    address: ${NO_SUCH_ADDR}\n    role: proxy\n');
    assert.deepEqual(problems.map((p) => p.path), ['listeners[0].address']);
    assert.match(problems[0]!.message, /\$\{NO_SUCH_ADDR\} is not set/);
  });

  test('the error text names the file, line and column of each problem', () => {
    try {
      parseConfig(`${PROXY}shutdown:\n  min_drian_secs: 1\n`, 'sluice.yaml', {});
      assert.fail('accepted');
    } catch (error) {
      assert.ok(error instanceof ConfigError);
      assert.equal(error.message, 'invalid config (sluice.yaml):\n  - shutdown.min_drian_secs: unknown key "min_drian_secs" (did you mean "min_drain_secs"?) (sluice.yaml:4:3)');
    }
  });

  test('a duplicated YAML key is a syntax error', () => {
    const problems = problemsOf(`${PROXY}log: { level: info }\nlog: { level: debug }\n`);
    assert.match(problems[0]!.message, /YAML syntax: .*unique/i);
  });

  test('a document that is not a mapping is rejected', () => {
    assert.match(problemsOf('- a\n- b\n')[0]!.message, /expected a mapping at the top level, got a list/);
    assert.match(problemsOf('42\n')[0]!.message, /got number 42/);
  });

  test('several problems are reported at once', () => {
    const text = `listeners:
  - { name: proxy, address: "nowhere", role: proxy }
providers:
  - { name: e, type: echo, api_key: "\${MISSING_KEY}" }
models:
  - { name: m, provider: ghost }
shutdown: { bogus: 1 }
`;
    const problems = problemsOf(text);
    const paths = problems.map((p) => p.path);
    for (const path of ['listeners[0].address', 'providers[0].api_key', 'models[0].provider', 'shutdown.bogus']) {
      assert.ok(paths.includes(path), `expected ${path} among ${JSON.stringify(paths)}`);
    }
  });

  test('the error message lists every problem with its path', () => {
    try {
      parseConfig(`${PROXY}models:\n  - { name: m, provider: ghost }\nkeys: ["\${K}"]\n`, 'my.yaml', {});
      assert.fail('expected a ConfigError');
    } catch (error) {
      assert.ok(error instanceof ConfigError);
      assert.match(error.message, /^invalid config \(my\.yaml\):/);
      assert.match(error.message, /\n {2}- models\[0\]\.provider: unknown provider/);
      assert.match(error.message, /\n {2}- keys\[0\]: environment variable \$\{K\}/);
    }
  });

  test(
    'a type error does not hide cross-field problems (unknown provider, duplicates, no proxy listener)',
    () => {
      const text = `${PROXY}providers:\n  - { name: e, type: echo }\nmodels:\n  - { name: m, provider: ghost }\nshutdown: { min_drain_secs: "x" }\n`;
      const paths = problemsOf(text).map((p) => p.path);
      assert.ok(paths.includes('shutdown.min_drain_secs'));
      assert.ok(paths.includes('models[0].provider'), JSON.stringify(paths));
    },
  );

  test('formatPath', () => {
    assert.equal(formatPath([]), '');
    assert.equal(formatPath(['listeners', 1, 'address']), 'listeners[1].address');
    assert.equal(formatPath([0, 'a']), '[0].a');
  });

  test('loadConfigFile reads a file, and reports an unreadable one', () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-config-'));
    try {
      const file = join(dir, 'sluice.yaml');
      writeFileSync(file, PROXY);
      assert.equal(loadConfigFile(file, {}).listeners[0]!.name, 'proxy');
      const missing = join(dir, 'absent.yaml');
      assert.throws(
        () => loadConfigFile(missing, {}),
        (error: unknown) => error instanceof ConfigError && error.source === missing && /cannot read file: ENOENT/.test(error.problems[0]!.message),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('result', () => {
  test('is deeply frozen', () => {
    const config = parseConfig(
      `${PROXY}providers:\n  - { name: o, type: openai, base_url: "http://x.test", headers: { x-org: a } }\nkeys: [{ name: ci, key: "0123456789" }]\n`,
      'test.yaml',
      {},
    );
    assert.equal(isDeeplyFrozen(config), undefined);
    assert.throws(() => {
      (config.listeners as unknown as unknown[]).push({});
    }, TypeError);
    assert.throws(() => {
      (config.providers[0]!.headers as Record<string, string>)['x-org'] = 'b';
    }, TypeError);
    assert.throws(() => {
      (config.shutdown as { min_drain_secs: number }).min_drain_secs = 1;
    }, TypeError);
  });
});

describe('embedded default', () => {
  test('without keys: only the echo provider, proxy and admin listeners on loopback', () => {
    const config = loadDefaultConfig({});
    assert.deepEqual(config.providers.map((p) => [p.name, p.type]), [['echo', 'echo']]);
    assert.ok(config.models.every((m) => m.provider === 'echo'));
    assert.deepEqual(config.models.map((m) => m.name), ['echo', 'echo-*']);
    assert.deepEqual(
      config.listeners.map((l) => [l.name, l.address, l.role]),
      [
        ['proxy', '127.0.0.1:8080', 'proxy'],
        ['admin', '127.0.0.1:9901', 'admin'],
      ],
    );
    assert.equal(isDeeplyFrozen(config), undefined);
  });

  test('an empty OPENAI_API_KEY counts as no key', () => {
    assert.deepEqual(loadDefaultConfig({ OPENAI_API_KEY: '', ANTHROPIC_API_KEY: '' }).providers.map((p) => p.name), ['echo']);
  });

  test('with OPENAI_API_KEY: an openai provider and its model patterns', () => {
    const config = loadDefaultConfig({ OPENAI_API_KEY: 'sk-test' });
    const openai = config.providers.find((p) => p.name === 'openai');
    assert.ok(openai);
    assert.equal(openai.type, 'openai');
    assert.equal(openai.api_key, 'sk-test');
    assert.equal(openai.base_url, 'https://api.openai.com/v1');
    const patterns = config.models.filter((m) => m.provider === 'openai').map((m) => m.name);
    for (const pattern of ['gpt-*', 'text-embedding-*', 'o1*']) assert.ok(patterns.includes(pattern), pattern);
    assert.equal(config.providers.find((p) => p.name === 'anthropic'), undefined);
  });

  test('with ANTHROPIC_API_KEY: an anthropic provider and claude-*', () => {
    const config = loadDefaultConfig({ ANTHROPIC_API_KEY: 'sk-ant-test' });
    const anthropic = config.providers.find((p) => p.name === 'anthropic');
    assert.ok(anthropic);
    assert.equal(anthropic.api_key, 'sk-ant-test');
    assert.equal(anthropic.base_url, 'https://api.anthropic.com');
    assert.deepEqual(config.models.filter((m) => m.provider === 'anthropic').map((m) => m.name), ['claude-*']);
    assert.equal(config.providers.find((p) => p.name === 'openai'), undefined);
  });

  test('base URL overrides from OPENAI_BASE_URL / ANTHROPIC_BASE_URL', () => {
    const config = loadDefaultConfig({
      OPENAI_API_KEY: 'sk-test',
      ANTHROPIC_API_KEY: 'sk-ant-test',
      OPENAI_BASE_URL: 'http://127.0.0.1:4010/v1',
      ANTHROPIC_BASE_URL: 'http://127.0.0.1:4011',
    });
    assert.equal(config.providers.find((p) => p.name === 'openai')!.base_url, 'http://127.0.0.1:4010/v1');
    assert.equal(config.providers.find((p) => p.name === 'anthropic')!.base_url, 'http://127.0.0.1:4011');
  });

  test('a key with YAML syntax in it is taken verbatim', () => {
    const key = 'sk-"quoted" # and: {flow}';
    const config = loadDefaultConfig({ OPENAI_API_KEY: key });
    assert.equal(config.providers.find((p) => p.name === 'openai')!.api_key, key);
  });

  test('SLUICE_PROXY_ADDRESS and SLUICE_ADMIN_ADDRESS override the listener addresses', () => {
    const config = loadDefaultConfig({ SLUICE_PROXY_ADDRESS: '0.0.0.0:18080', SLUICE_ADMIN_ADDRESS: '[::1]:19901' });
    assert.equal(config.listeners.find((l) => l.role === 'proxy')!.address, '0.0.0.0:18080');
    assert.equal(config.listeners.find((l) => l.role === 'admin')!.address, '[::1]:19901');
  });

  test('a bad SLUICE_PROXY_ADDRESS is reported against the embedded default', () => {
    assert.throws(
      () => loadDefaultConfig({ SLUICE_PROXY_ADDRESS: 'nowhere' }),
      (error: unknown) => error instanceof ConfigError && error.source === 'embedded default' && error.problems.some((p) => p.path === 'listeners[0].address'),
    );
  });

  test('the default text validates against the schema as-is for every key combination', () => {
    for (const env of [{}, { OPENAI_API_KEY: 'a' }, { ANTHROPIC_API_KEY: 'b' }, { OPENAI_API_KEY: 'a', ANTHROPIC_API_KEY: 'b' }]) {
      const text = defaultConfigText(env);
      assert.doesNotThrow(() => parseConfig(text, 'embedded default', env));
      assert.equal(configSchema.safeParse(loadDefaultConfig(env)).success, true);
    }
  });
});

describe('values from the environment', () => {
  test('a number or boolean setting may come from ${VAR} (interpolation yields text)', () => {
    const config = parseConfig(
      `${PROXY}shutdown: { min_drain_secs: "\${DRAIN}" }\nlog: { access_log: "\${ACCESS}" }\n`,
      'test',
      { DRAIN: '12.5', ACCESS: 'false' },
    );
    assert.equal(config.shutdown.min_drain_secs, 12.5);
    assert.equal(config.log.access_log, false);
  });

  test('text that is not a number is still refused for a number setting', () => {
    const problems = problemsOf(`${PROXY}shutdown: { min_drain_secs: "soon" }\n`);
    assert.ok(problems.some((p) => p.path === 'shutdown.min_drain_secs'), JSON.stringify(problems));
  });

  test('headers_timeout_secs may not exceed request_timeout_secs', () => {
    const problems = problemsOf(`${PROXY}downstream: { headers_timeout_secs: 60, request_timeout_secs: 30 }\n`);
    assert.ok(problems.some((p) => p.path === 'downstream.headers_timeout_secs'), JSON.stringify(problems));
  });
});

describe('admin listener exposure', () => {
  test('an admin listener must bind to loopback unless admin.allow_non_loopback is true', () => {
    const exposed = 'listeners:\n  - { name: p, address: "0.0.0.0:8080", role: proxy }\n  - { name: a, address: "0.0.0.0:9901", role: admin }\n';
    assert.ok(problemsOf(exposed).some((p) => p.path === 'listeners[1].address' && /loopback/.test(p.message)));
    assert.equal(parseConfig(`${exposed}admin: { allow_non_loopback: true, token: "0123456789abcdef0123" }\n`, 'test', {}).admin.allow_non_loopback, true);
    for (const host of ['127.0.0.1', '[::1]', 'localhost', '127.0.0.2']) {
      assert.doesNotThrow(() => parseConfig(`listeners:\n  - { name: p, address: "0.0.0.0:8080", role: proxy }\n  - { name: a, address: "${host}:9901", role: admin }\n`, 'test', {}), host);
    }
  });
});

describe('workers', () => {
  test('defaults to auto: one worker per CPU Node may use, at least one', () => {
    const config = parseConfig(PROXY, 'test.yaml', {});
    assert.equal(config.workers, 'auto');
    const GB = 1024 ** 3;
    assert.equal(workerCount(config, 8, 64 * GB), 8);
    assert.equal(workerCount(config, 0, 64 * GB), 1);
    assert.equal(workerCount(config, 64, 256 * GB), 8, 'auto: at most 8 processes');
    assert.equal(workerCount(config, 16, 2 * GB), 4, 'auto: half the memory at 256 MB each');
    assert.equal(workerCount(config, 4, 512 * 1024 ** 2), 1, 'a container of 512 MB: one process');
    assert.equal(workerCount(parseConfig(`workers: 3\n${PROXY}`, 'test.yaml', {}), 8, GB), 3, 'a number is taken as it is');
    assert.equal(workerCount(parseConfig(`workers: 64\n${PROXY}`, 'test.yaml', {}), 64, GB), 64);
  });

  test('takes a number from the environment, and names the key when it is wrong', () => {
    assert.equal(parseConfig(`workers: "\${W}"\n${PROXY}`, 'test.yaml', { W: '2' }).workers, 2);
    assert.equal(parseConfig(`workers: "\${W:-auto}"\n${PROXY}`, 'test.yaml', {}).workers, 'auto');
    for (const bad of ['0', '1.5', 'many', '1000']) {
      const problems = problemsOf(`workers: ${bad}\n${PROXY}`);
      assert.equal(problems.length, 1, bad);
      assert.equal(problems[0]!.path, 'workers');
      assert.match(problems[0]!.message, /"auto" or a whole number of worker processes from 1 to 256/);
    }
  });

  test('the embedded default reads SLUICE_WORKERS', () => {
    assert.equal(loadDefaultConfig({ SLUICE_WORKERS: '4' }).workers, 4);
    assert.equal(loadDefaultConfig({}).workers, 'auto');
  });
});

describe('cloud providers', () => {
  const LISTENERS = 'listeners:\n  - { name: proxy, address: "127.0.0.1:0", role: proxy }\n';
  test('each needs its own settings, and their fields are refused on another type', () => {
    const problems = problemsOf(`${LISTENERS}providers:\n  - { name: a, type: bedrock }\n  - { name: b, type: vertex }\n  - { name: c, type: gemini }\n  - { name: d, type: openai, region: us-east-1 }\n  - { name: e, type: bedrock, region: us-east-1, api_key: k }\n  - { name: f, type: azure_openai, base_url: "https://x.openai.azure.com", auth: entra_id, api_key: k }\n`);
    assert.match(problemAt(problems, 'providers[0].region').message, /required for bedrock/);
    assert.match(problemAt(problems, 'providers[1].project').message, /required for vertex/);
    assert.match(problemAt(problems, 'providers[2].api_key').message, /required for gemini/);
    assert.match(problemAt(problems, 'providers[3].region').message, /region is for bedrock providers only/);
    assert.match(problemAt(problems, 'providers[4].api_key').message, /the gateway's own cloud identity/);
    assert.match(problemAt(problems, 'providers[5].api_key').message, /auth entra_id/);
  });

  test('a provider that is null (not a mapping) is a problem at its path, not a crash (found by fuzzing)', () => {
    const problems = problemsOf(`${LISTENERS}providers:\n  - null\n`);
    assert.ok(problems.some((p) => p.path.startsWith('providers[0]')), JSON.stringify(problems));
  });
});
