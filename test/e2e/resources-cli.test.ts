// `sluice get` and `sluice apply` as an operator runs them (the built program) against a gateway
// in file mode: the resources are listed as a table, JSON or YAML; the admin API is read-only, so
// apply says so (409 read_only_source) unless nothing changes. Usage errors, a wrong token, and
// an admin API that cannot be reached. (Writes through etcd are tested with a real etcd.)
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { parse } from 'yaml';
import { runSluice, startGateway, writeConfig, type GatewayProcess, type RunResult } from '../support/gateway-process.ts';

const TOKEN = 'ops-admin-token-0123456789';

/** Runs `sluice <args>` to completion, without the variables the CLI reads unless given. */
const run = (args: string[], env: Record<string, string | undefined> = {}, timeoutMs = 15_000): Promise<RunResult> =>
  runSluice(args, { env: { SLUICE_CONFIG: undefined, SLUICE_ADMIN_TOKEN: undefined, ...env }, timeoutMs });

const RESOURCES = {
  providers: [
    { name: 'local', type: 'echo' },
    { name: 'upstream', type: 'openai', base_url: 'http://127.0.0.1:9/v1', api_key: 'sk-literal-secret-value' },
  ],
  models: [
    { name: 'echo', provider: 'local' },
    { name: 'gpt-4o', provider: 'upstream', upstream_model: 'gpt-4o-2024-08-06' },
    { name: 'claude-*', provider: 'upstream' },
  ],
  keys: [{ name: 'ci', key: 'sk-client-0123456789', models: ['echo', 'gpt-*'], limits: { rpm: 60, models: { echo: { tpm: 1000 } } }, budget: { usd: 10, period: 'day' } }],
};

let gw: GatewayProcess;
/** The CLI's own config: the gateway's admin listener at its real port, the token in admin.tokens. */
let cliConfig: string;
let dir: string;

before(async () => {
  gw = await startGateway({ config: { ...RESOURCES, admin: { tokens: [{ name: 'ops', token: TOKEN }] } } });
  dir = dirname(gw.configFile);
  const adminAddress = gw.adminUrl.replace(/^http:\/\//, '');
  cliConfig = writeConfig({
    listeners: [
      { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
      { name: 'admin', address: adminAddress, role: 'admin' },
    ],
    admin: { tokens: [{ name: 'ops', token: TOKEN }] },
  });
});
after(async () => gw?.stop());

/** The admin URL and token, given on the command line. */
const remote = () => ['--admin', gw.adminUrl, '--token', TOKEN];

function applyFile(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

describe('sluice get', () => {
  test('get models: a table of the config\'s models, aligned, nothing else on stdout or stderr', async () => {
    const result = await run(['get', 'models', ...remote()]);
    assert.equal(result.stderr, '');
    assert.equal(result.code, 0);
    assert.deepEqual(result.stdout.split('\n'), [
      'NAME       PROVIDER   UPSTREAM_MODEL      REVISION',
      'echo       local      -                   0',
      'gpt-4o     upstream   gpt-4o-2024-08-06   0',
      'claude-*   upstream   -                   0',
      '',
    ]);
  });

  test('the admin URL and token come from --config when not given (the first of admin.tokens)', async () => {
    const result = await run(['get', 'providers', '--config', cliConfig]);
    assert.equal(result.stderr, '');
    assert.equal(result.code, 0);
    assert.deepEqual(result.stdout.trimEnd().split('\n'), [
      'NAME       TYPE     BASE_URL                REVISION',
      'local      echo     -                       0',
      'upstream   openai   http://127.0.0.1:9/v1   0',
    ]);
  });

  test('SLUICE_ADMIN_TOKEN is the token when --token is not given; get keys shows what each key may do (models, limits, budget), never the key', async () => {
    const result = await run(['get', 'keys', '--admin', gw.adminUrl], { SLUICE_ADMIN_TOKEN: TOKEN });
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /^NAME\s+TEAM\s+MODELS\s+LIMITS\s+BUDGET\s+STATE\s+KEY_SHA256\s+REVISION\nci\s+-\s+echo,gpt-\*\s+rpm=60; echo: tpm=1000\s+\$10\/day\s+enabled\s+\S{12}…\s+0\n$/);
    assert.doesNotMatch(result.stdout, /sk-client/);
  });

  test('-o json prints the admin API\'s answer', async () => {
    const result = await run(['get', 'models', '-o', 'json', ...remote()]);
    assert.equal(result.code, 0, result.stderr);
    const body = JSON.parse(result.stdout) as { kind: string; source: string; revision: number; items: { name: string; revision: number }[] };
    assert.equal(body.kind, 'models');
    assert.equal(body.source, 'file');
    assert.deepEqual(body.items.map((i) => i.name), ['echo', 'gpt-4o', 'claude-*']);
    const one = await run(['get', 'models', 'gpt-4o', '--output', 'json', ...remote()]);
    assert.equal(one.code, 0, one.stderr);
    assert.deepEqual(JSON.parse(one.stdout), { item: { name: 'gpt-4o', provider: 'upstream', upstream_model: 'gpt-4o-2024-08-06' }, revision: 0 });
  });

  test('-o yaml prints what apply -f takes: no revision, secrets left out (and said so)', async () => {
    const result = await run(['get', 'providers', '-o', 'yaml', ...remote()]);
    assert.equal(result.code, 0, result.stderr);
    assert.doesNotMatch(result.stdout, /revision|api_key_set|sk-literal/);
    assert.match(result.stdout, /# api_key: set on the gateway but not shown/);
    const parsed = parse(result.stdout) as { providers: Record<string, unknown>[] };
    assert.deepEqual(Object.keys(parsed), ['providers']);
    assert.deepEqual(parsed.providers.map((p) => p.name), ['local', 'upstream']);
    assert.equal(parsed.providers[1]!.api_key, undefined);
  });

  test('get -o yaml, then apply -f of it: everything unchanged, exit 0 (nothing written, so file mode does not object)', async () => {
    const models = await run(['get', 'models', '-o', 'yaml', ...remote()]);
    const keys = await run(['get', 'keys', '-o', 'yaml', ...remote()]);
    assert.equal(models.code, 0);
    assert.equal(keys.code, 0);
    const path = applyFile('round-trip.yaml', models.stdout + keys.stdout);
    const result = await run(['apply', '-f', path, ...remote()]);
    assert.equal(result.stderr, '');
    assert.equal(result.code, 0);
    assert.equal(result.stdout, 'models/echo unchanged\nmodels/gpt-4o unchanged\nmodels/claude-* unchanged\nkeys/ci unchanged\n');
  });

  test('one by name; a name that is not there exits 1', async () => {
    const one = await run(['get', 'models', 'claude-*', ...remote()]);
    assert.equal(one.code, 0, one.stderr);
    assert.equal(one.stdout, 'NAME       PROVIDER   UPSTREAM_MODEL   REVISION\nclaude-*   upstream   -                0\n');
    const missing = await run(['get', 'models', 'nope', ...remote()]);
    assert.equal(missing.code, 1);
    assert.equal(missing.stdout, '');
    assert.equal(missing.stderr, 'sluice get: no models/nope\n');
  });
});

describe('sluice apply against a file-mode gateway', () => {
  test('a change is refused: the file is the source of truth (409 read_only_source), exit 1', async () => {
    const path = applyFile(
      'change.yaml',
      'providers:\n  - { name: local, type: echo }\nmodels:\n  - { name: echo, provider: local }\n  - { name: new-model, provider: local }\n',
    );
    const result = await run(['apply', '-f', path, ...remote()]);
    assert.equal(result.code, 1);
    assert.equal(result.stdout, 'providers/local unchanged\nmodels/echo unchanged\n');
    assert.match(result.stderr, /^sluice apply: models\/new-model: the configuration comes from the file .*sluice\.yaml, which is the source of truth: .* \(409\)\n$/);
  });

  test('a provider with a literal api_key is always written, so file mode refuses it', async () => {
    const path = applyFile('secret.yaml', 'providers:\n  - { name: upstream, type: openai, base_url: "http://127.0.0.1:9/v1", api_key: sk-literal-secret-value }\n');
    const result = await run(['apply', '-f', path, ...remote()]);
    assert.equal(result.code, 1);
    assert.match(result.stderr, /providers\/upstream: .*source of truth.*\(409\)/);
  });

  test('an unknown top-level key: exit 1, the key named, nothing asked', async () => {
    const path = applyFile('unknown.yaml', 'models:\n  - { name: echo, provider: local }\nlisteners: []\n');
    const result = await run(['apply', '-f', path, ...remote()]);
    assert.equal(result.code, 1);
    assert.equal(result.stdout, '');
    assert.match(result.stderr, /unknown top-level key "listeners": only providers, models, teams, keys can be applied/);
  });

  test('a bare key string is refused: it has no name', async () => {
    const path = applyFile('bare.yaml', 'keys:\n  - sk-bare-key-0123456789\n');
    const result = await run(['apply', '-f', path, ...remote()]);
    assert.equal(result.code, 1);
    assert.match(result.stderr, /keys\[0\]: a bare key has no name/);
  });
});

describe('usage, token and reachability', () => {
  test('usage errors exit 2', async () => {
    const unknownKind = await run(['get', 'widgets', ...remote()]);
    assert.equal(unknownKind.code, 2);
    assert.match(unknownKind.stderr, /unknown kind "widgets": expected providers, models, teams, keys/);
    const noKind = await run(['get', ...remote()]);
    assert.equal(noKind.code, 2);
    const tooMany = await run(['get', 'models', 'a', 'b', ...remote()]);
    assert.equal(tooMany.code, 2);
    const badOutput = await run(['get', 'models', '-o', 'xml', ...remote()]);
    assert.equal(badOutput.code, 2);
    assert.match(badOutput.stderr, /-o takes json or yaml/);
    const noFile = await run(['apply', ...remote()]);
    assert.equal(noFile.code, 2);
    assert.match(noFile.stderr, /sluice apply: name the file to apply with -f FILE/);
    const noScheme = await run(['get', 'models', '--admin', gw.adminUrl.replace('http://', ''), '--token', TOKEN]);
    assert.equal(noScheme.code, 2);
    assert.match(noScheme.stderr, /--admin takes a URL such as http:\/\/127\.0\.0\.1:9901/);
  });

  test('a wrong token exits 1 and says the token is wrong; none at all says it is missing', async () => {
    const wrong = await run(['get', 'models', '--admin', gw.adminUrl, '--token', 'wrong-token-000000000000']);
    assert.equal(wrong.code, 1);
    assert.equal(wrong.stdout, '');
    assert.match(wrong.stderr, /refused the admin token \(401\): it is wrong/);
    const path = applyFile('ok.yaml', 'models:\n  - { name: echo, provider: local }\n');
    const applyWrong = await run(['apply', '-f', path, '--admin', gw.adminUrl, '--token', 'wrong-token-000000000000']);
    assert.equal(applyWrong.code, 1);
    assert.match(applyWrong.stderr, /token/);
    const none = await run(['get', 'models', '--admin', gw.adminUrl]);
    assert.equal(none.code, 1);
    assert.match(none.stderr, /needs an admin token \(401\) and none was given/);
  });

  test('an admin API that cannot be reached: exit 1, saying where', async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const result = await run(['get', 'models', '--admin', `http://127.0.0.1:${port}`, '--token', TOKEN]);
    assert.equal(result.code, 1);
    assert.match(result.stderr, new RegExp(`^sluice get: cannot reach the admin API at http://127\\.0\\.0\\.1:${port}: `));
  });

  test('a config that does not load is not fatal with --admin; it is without', async () => {
    const broken = { SLUICE_CONFIG: join(dir, 'absent.yaml') };
    const withAdmin = await run(['get', 'models', ...remote()], broken);
    assert.equal(withAdmin.code, 0, withAdmin.stderr);
    assert.match(withAdmin.stdout, /^NAME\s+PROVIDER/);
    const without = await run(['get', 'models', '--token', TOKEN], broken);
    assert.equal(without.code, 1);
    assert.match(without.stderr, /^sluice: /);
  });

  test('--help names both commands and says apply never deletes', async () => {
    const help = await run(['--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /sluice apply -f FILE/);
    assert.match(help.stdout, /sluice get providers\|models\|teams\|keys \[NAME\] \[-o json\|yaml\]/);
    assert.match(help.stdout, /never deletes what the\s+file does not list/);
  });
});
