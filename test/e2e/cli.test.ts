// The `sluice` command as an operator runs it: --version, --help, validate (good and broken configs),
// environment interpolation, SLUICE_CONFIG, the embedded default with and without provider keys,
// and a clear failure when a port is taken.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { join } from 'node:path';
import { ROOT, runSluice, startGateway, writeConfig, type GatewayProcess, type RunResult } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';

const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

/** The environment every child gets: none of the variables the CLI reads, unless a test sets them. */
const CLEAN_ENV: Record<string, string | undefined> = {
  SLUICE_CONFIG: undefined,
  SLUICE_PROXY_ADDRESS: undefined,
  SLUICE_ADMIN_ADDRESS: undefined,
  OPENAI_API_KEY: undefined,
  OPENAI_BASE_URL: undefined,
  ANTHROPIC_API_KEY: undefined,
  ANTHROPIC_BASE_URL: undefined,
};

/** Runs `sluice <args>` to completion (it must exit within the deadline). */
const run = (args: string[], env: Record<string, string | undefined> = {}, timeoutMs = 10_000): Promise<RunResult> => runSluice(args, { env: { ...CLEAN_ENV, ...env }, timeoutMs });

let mock: MockUpstream;
const gateways: GatewayProcess[] = [];

async function gateway(options: Parameters<typeof startGateway>[0]): Promise<GatewayProcess> {
  const gw = await startGateway({ ...options, env: { ...CLEAN_ENV, ...options?.env } });
  gateways.push(gw);
  return gw;
}

before(async () => {
  mock = await startMockUpstream();
});

after(async () => {
  await Promise.all(gateways.map((gw) => gw.stop()));
  await mock?.close();
});

function post(gw: GatewayProcess, path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${gw.proxyUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
}

const GOOD = `
listeners:
  - { name: proxy, address: "127.0.0.1:0", role: proxy }
  - { name: admin, address: "127.0.0.1:0", role: admin }
providers:
  - { name: up, type: openai, base_url: "http://127.0.0.1:9/v1", api_key: "sk-provider" }
  - { name: local, type: echo }
models:
  - { name: gpt-test, provider: up }
  - { name: echo, provider: local }
keys:
  - sk-client-key-1
  - { name: ci, key: sk-client-key-2 }
`;

describe('flags', () => {
  test('--version prints the package version', async () => {
    for (const flag of ['--version', '-v']) {
      const result = await run([flag]);
      assert.equal(result.code, 0);
      assert.equal(result.stdout, `${VERSION}\n`);
      assert.equal(result.stderr, '');
    }
  });

  test('--help exits 0 and describes the commands', async () => {
    const result = await run(['--help']);
    assert.equal(result.code, 0);
    assert.match(result.stdout, /validate/);
    assert.match(result.stdout, /--config/);
    assert.match(result.stdout, /SLUICE_CONFIG/);
    assert.ok(result.stdout.includes(VERSION));
  });

  test('an unknown command or flag exits 2 with the usage', async () => {
    const command = await run(['frobnicate']);
    assert.equal(command.code, 2);
    assert.match(command.stderr, /unknown command "frobnicate"/);
    assert.match(command.stderr, /Usage:/);
    const flag = await run(['--no-such-flag']);
    assert.equal(flag.code, 2);
    assert.match(flag.stderr, /no-such-flag/);
  });
});

describe('validate', () => {
  test('a good config exits 0 and summarises it', async () => {
    const file = writeConfig(GOOD);
    const result = await run(['validate', '--config', file]);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /config OK/);
    assert.match(result.stdout, /2 listeners, 2 providers, 2 models, 2 keys/);
  });

  test('the embedded default validates', async () => {
    const result = await run(['validate']);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /embedded default/);
  });

  test('a broken config exits 1 and names every bad key path', async () => {
    const file = writeConfig(`
listeners:
  - { name: proxy, address: "127.0.0.1:0", role: proxy, colour: blue }
  - { name: admin, address: "localhost:99999", role: admin }
  - { name: third, address: "not an address", role: proxy }
providers:
  - { name: up, type: openai, base_url: "http://127.0.0.1:9/v1", api_key: "\${SLUICE_TEST_SURELY_UNSET_VAR}" }
upstream: { timeout_ms: "soon", retries: 3 }
log: { level: loud }
telemetry: true
`);
    const result = await run(['validate', '--config', file]);
    assert.equal(result.code, 1);
    assert.equal(result.stdout, '');
    const problems = result.stderr.split('\n').filter((l) => l.startsWith('  - '));
    const expect = (path: string, message: RegExp) =>
      assert.ok(
        problems.some((l) => l.startsWith(`  - ${path}: `) && message.test(l)),
        `no problem reported at ${path} matching ${message}:\n${result.stderr}`,
      );
    // An unknown key is named either by its own path or by its mapping's path plus its name.
    const expectUnknown = (parent: string, key: string) =>
      assert.ok(
        problems.some(
          (l) =>
            l.startsWith(`  - ${parent ? `${parent}.${key}` : key}: `) ||
            (l.startsWith(`  - ${parent || '(document)'}: `) && l.includes(`unknown key "${key}"`)),
        ),
        `unknown key ${parent ? `${parent}.` : ''}${key} not reported:\n${result.stderr}`,
      );
    expectUnknown('', 'telemetry'); // unknown key at the top level
    expectUnknown('listeners[0]', 'colour'); // unknown key, nested
    expectUnknown('upstream', 'retries');
    expect('upstream.timeout_ms', /expected number, got "soon"/); // wrong type
    expect('log.level', /expected one of .*"info".*got "loud"/);
    expect('listeners[1].address', /expected an address/); // port out of range
    expect('listeners[2].address', /expected an address/);
    expect('providers[0].api_key', /SLUICE_TEST_SURELY_UNSET_VAR/); // ${VAR} with VAR unset
    assert.equal(problems.length, 8, result.stderr);
    assert.match(result.stderr, new RegExp(file.replaceAll(/[.*+?^${}()|[\]\\]/g, '\\$&')));
  });

  test('a model naming an unknown provider, and duplicate names, are reported by path', async () => {
    const file = writeConfig(`
listeners:
  - { name: proxy, address: "127.0.0.1:0", role: proxy }
providers:
  - { name: up, type: openai, base_url: "http://127.0.0.1:9/v1" }
models:
  - { name: a, provider: up }
  - { name: b, provider: missing-provider }
  - { name: a, provider: up }
`);
    const result = await run(['validate', '--config', file]);
    assert.equal(result.code, 1);
    assert.match(result.stderr, /models\[1\]\.provider: unknown provider "missing-provider"/);
    assert.match(result.stderr, /models\[2\]\.name: duplicate name "a"/);
  });

  test('${VAR} unset is an error even in an otherwise valid config; ${VAR:-default} is not', async () => {
    const file = writeConfig(`
listeners:
  - { name: proxy, address: "\${SLUICE_TEST_UNSET_ADDRESS:-127.0.0.1:0}", role: proxy }
providers:
  - { name: up, type: openai, base_url: "http://127.0.0.1:9/v1", api_key: "\${SLUICE_TEST_UNSET_KEY}" }
`);
    const missing = await run(['validate', '--config', file]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /providers\[0\]\.api_key: environment variable \$\{SLUICE_TEST_UNSET_KEY\} is not set/);
    assert.doesNotMatch(missing.stderr, /listeners/);
    const set = await run(['validate', '--config', file], { SLUICE_TEST_UNSET_KEY: 'sk-now-set' });
    assert.equal(set.code, 0, set.stderr);
  });

  test('a wrongly typed credential is reported without quoting its value', async () => {
    const file = writeConfig(`
listeners:
  - { name: proxy, address: "127.0.0.1:0", role: proxy }
providers:
  - { name: up, type: openai, base_url: "http://127.0.0.1:9/v1", api_key: 918273645546372819, headers: { x-org: 564738291029384756 } }
`);
    const result = await run(['validate', '--config', file]);
    assert.equal(result.code, 1);
    assert.match(result.stderr, /providers\[0\]\.api_key: expected string/);
    assert.match(result.stderr, /providers\[0\]\.headers\.x-org: expected string/);
    assert.doesNotMatch(result.stderr, /9182736455|5647382910/);
  });

  test('a YAML syntax error is one problem, placed where the mistake is, with the line and a caret', async () => {
    const file = writeConfig('listeners:\n  - name: proxy\n    address: "127.0.0.1:0\n    role: proxy\nlog:\n  level: info\n');
    const result = await run(['validate', '--config', file]);
    assert.equal(result.code, 1);
    const problems = result.stderr.split('\n').filter((l) => l.startsWith('  - '));
    assert.equal(problems.length, 1, result.stderr);
    // The quote opened on line 3, column 14, not where the parser gave up (line 7).
    assert.equal(problems[0], `  - (document): YAML syntax: the " quote opened here is never closed (${file}:3:14)`);
    assert.ok(result.stderr.includes('      ' + '    address: "127.0.0.1:0\n' + '      ' + ' '.repeat(13) + '^\n'), result.stderr);
    assert.doesNotMatch(result.stderr, /:\n*$/);
    // A key without its colon: the line of the key itself, and no dangling colon.
    const colon = await run(['validate', '--config', writeConfig('listeners:\n  - { name: proxy, address: "127.0.0.1:0", role: proxy }\nshutdown:\n  min_drain_secs: 3\n  max_drain_secs 5\n')]);
    const lines = colon.stderr.split('\n').filter((l) => l.startsWith('  - '));
    assert.equal(lines.length, 1, colon.stderr);
    assert.match(lines[0]!, /YAML syntax: implicit map keys need to be followed by map values \(.*:5:3\)$/);
  });

  test('an unquoted ${VAR} in a flow mapping is one problem that says to quote it', async () => {
    const file = writeConfig('listeners:\n  - { name: proxy, address: "127.0.0.1:0", role: proxy }\nproviders:\n  - { name: up, type: openai, api_key: ${SLUICE_TEST_KEY}, headers: { x-a: b } }\n');
    const result = await run(['validate', '--config', file], { SLUICE_TEST_KEY: 'sk-x' });
    assert.equal(result.code, 1);
    const problems = result.stderr.split('\n').filter((l) => l.startsWith('  - '));
    assert.deepEqual(problems, [`  - (document): YAML syntax: \${SLUICE_TEST_KEY} inside { } or [ ] must be quoted: write "\${SLUICE_TEST_KEY}" (${file}:4:40)`]);
  });

  test('an unknown key near a known one gets a "did you mean"', async () => {
    const file = writeConfig('listeners:\n  - name: proxy\n    address: "127.0.0.1:0"\n    role: proxy\n    protocol: [h2]\nshutdown:\n  min_drian_secs: 3\nprovider: []\n');
    const result = await run(['validate', '--config', file]);
    assert.equal(result.code, 1);
    assert.ok(result.stderr.includes(`  - listeners[0].protocol: unknown key "protocol" (did you mean "protocols"?) (${file}:5:5)`), result.stderr);
    assert.ok(result.stderr.includes(`  - shutdown.min_drian_secs: unknown key "min_drian_secs" (did you mean "min_drain_secs"?) (${file}:7:3)`), result.stderr);
    assert.ok(result.stderr.includes(`  - provider: unknown key "provider" (did you mean "providers"?) (${file}:8:1)`), result.stderr);
  });

  test('a value close to an allowed one gets a "did you mean"; an unknown top-level key gets the section it belongs in, or the list of keys', async () => {
    const file = writeConfig(
      'listeners:\n  - { name: proxy, address: "127.0.0.1:0", role: proxy }\nproviders:\n  - { name: a, type: antropic }\nlog: { level: wran }\nmin_drain_secs: 3\ntelemetry: {}\nlimits:\n  rpm: 5\n',
    );
    const result = await run(['validate', '--config', file]);
    assert.equal(result.code, 1);
    const problems = result.stderr.split('\n').filter((l) => l.startsWith('  - '));
    assert.ok(problems.includes(`  - providers[0].type: expected one of "openai" | "anthropic" | "azure_openai" | "bedrock" | "gemini" | "vertex" | "echo", got "antropic" (did you mean "anthropic"?) (${file}:4:22)`), result.stderr);
    assert.ok(problems.some((l) => l.startsWith('  - log.level: ') && l.includes('got "wran" (did you mean "warn"?)')), result.stderr);
    assert.ok(problems.includes(`  - min_drain_secs: unknown key "min_drain_secs" (did you mean "shutdown.min_drain_secs"?) (${file}:6:1)`), result.stderr);
    assert.ok(problems.includes(`  - limits.rpm: unknown key "rpm" (did you mean "limits.global.rpm"?) (${file}:9:3)`), result.stderr);
    const telemetry = problems.find((l) => l.startsWith('  - telemetry: unknown key "telemetry" (known keys: '));
    assert.ok(telemetry?.includes('listeners') && telemetry.includes('tracing'), result.stderr);
  });

  test('a value that came from a ${VAR} is never quoted (nor hinted at), a literal of the file is', async () => {
    const secret = 'antropic-secret-0123456789';
    const file = writeConfig(
      'listeners:\n  - { name: proxy, address: "127.0.0.1:0", role: proxy }\n  - { name: admin, address: "${SLUICE_TEST_ADDR}", role: admin }\nproviders:\n  - { name: a, type: "${SLUICE_TEST_TYPE}" }\n  - { name: b, type: antropic }\nmodels:\n  - { name: m, provider: "${SLUICE_TEST_PROVIDER}" }\nshutdown: { min_drain_secs: "${SLUICE_TEST_SECS}" }\n',
    );
    const result = await run(['validate', '--config', file], { SLUICE_TEST_ADDR: '10.9.8.7:6543', SLUICE_TEST_TYPE: secret, SLUICE_TEST_PROVIDER: secret, SLUICE_TEST_SECS: secret });
    assert.equal(result.code, 1);
    for (const leaked of [secret, '10.9.8.7', '6543']) assert.ok(!result.stderr.includes(leaked), `${leaked} in:\n${result.stderr}`);
    assert.match(result.stderr, /providers\[0\]\.type: expected one of "openai" \| "anthropic" \| "azure_openai" \| "bedrock" \| "gemini" \| "vertex" \| "echo" \(/);
    assert.match(result.stderr, /providers\[1\]\.type: expected one of "openai" \| "anthropic" \| "azure_openai" \| "bedrock" \| "gemini" \| "vertex" \| "echo", got "antropic" \(did you mean "anthropic"\?\)/);
    assert.match(result.stderr, /listeners\[1\]\.address: an admin listener binds to loopback unless admin\.allow_non_loopback is true \(/);
    assert.match(result.stderr, /models\[0\]\.provider: no provider of that name \(/);
    assert.match(result.stderr, /shutdown\.min_drain_secs: expected number, got a string \(/);
  });

  test('an unset ${VAR} is reported once, not again as the empty value it became', async () => {
    const file = writeConfig('listeners:\n  - name: proxy\n    address: ${SLUICE_TEST_UNSET_ADDR}\n    role: proxy\n');
    const result = await run(['validate', '--config', file]);
    assert.equal(result.code, 1);
    const problems = result.stderr.split('\n').filter((l) => l.startsWith('  - '));
    assert.equal(problems.length, 1, result.stderr);
    assert.match(problems[0]!, /^  - listeners\[0\]\.address: environment variable \$\{SLUICE_TEST_UNSET_ADDR\} is not set .*:3:14\)$/);
  });

  test('YAML syntax errors and a missing file exit 1', async () => {
    const syntax = await run(['validate', '--config', writeConfig('listeners: [ { name: proxy\n')]);
    assert.equal(syntax.code, 1);
    assert.match(syntax.stderr, /YAML syntax/);
    const absent = await run(['validate', '--config', '/nonexistent/sluice.yaml']);
    assert.equal(absent.code, 1);
    assert.match(absent.stderr, /cannot read file: ENOENT/);
  });
});

describe('config sources and interpolation', () => {
  test('${VAR} and ${VAR:-default} are resolved from the environment', async () => {
    mock.reset();
    const gw = await gateway({
      config: `
listeners:
  - { name: proxy, address: "\${SLUICE_TEST_LISTEN:-127.0.0.1:0}", role: proxy }
providers:
  - { name: up, type: openai, base_url: "\${SLUICE_TEST_BASE_URL}", api_key: "\${TEST_KEY}" }
models:
  - { name: "\${SLUICE_TEST_MODEL:-defaulted-model}", provider: up }
`,
      env: { TEST_KEY: 'sk-from-the-environment', SLUICE_TEST_BASE_URL: `${mock.url}/v1`, SLUICE_TEST_LISTEN: '', SLUICE_TEST_MODEL: undefined },
    });
    const res = await post(gw, '/v1/chat/completions', { model: 'defaulted-model', messages: [{ role: 'user', content: 'env' }] });
    assert.equal(res.status, 200);
    assert.equal(((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content, 'mock reply to: env');
    assert.equal(mock.received.length, 1);
    assert.equal(mock.received[0]!.headers.authorization, 'Bearer sk-from-the-environment');
  });

  test('SLUICE_CONFIG names the config file', async () => {
    const file = writeConfig(`
listeners:
  - { name: proxy, address: "127.0.0.1:0", role: proxy }
providers:
  - { name: local, type: echo }
models:
  - { name: only-in-sluice-config, provider: local }
`);
    const validated = await run(['validate'], { SLUICE_CONFIG: file });
    assert.equal(validated.code, 0, validated.stderr);
    assert.ok(validated.stdout.includes(file), validated.stdout);
    assert.match(validated.stdout, /1 listeners, 1 providers, 1 models/);
    const gw = await gateway({ useDefault: true, env: { SLUICE_CONFIG: file } });
    const models = (await (await fetch(`${gw.proxyUrl}/v1/models`)).json()) as { data: { id: string }[] };
    assert.deepEqual(models.data.map((m) => m.id), ['only-in-sluice-config']);
    assert.deepEqual(Object.keys(gw.urls), ['proxy']);
  });

  test('--config wins over SLUICE_CONFIG', async () => {
    const fromEnv = writeConfig('listeners:\n  - { name: proxy, address: "127.0.0.1:0", role: proxy }\n');
    const result = await run(['validate', '--config', writeConfig(GOOD)], { SLUICE_CONFIG: fromEnv });
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /2 listeners, 2 providers/);
  });
});

describe('the embedded default', () => {
  const addresses = { SLUICE_PROXY_ADDRESS: '127.0.0.1:0', SLUICE_ADMIN_ADDRESS: '127.0.0.1:0' };

  test('with no keys set, the echo model answers, plain and streamed', async () => {
    const gw = await gateway({ useDefault: true, env: addresses });
    assert.deepEqual(Object.keys(gw.urls).sort(), ['admin', 'proxy']);
    const ready = gw.logs.find((l) => l.event === 'ready')!;
    assert.deepEqual(ready.providers, ['echo (echo)']);
    const plain = await post(gw, '/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'hello default' }] });
    assert.equal(plain.status, 200);
    const body = (await plain.json()) as { object: string; choices: { message: { content: string } }[] };
    assert.equal(body.object, 'chat.completion');
    assert.equal(body.choices[0]!.message.content, 'echo: hello default');
    const streamed = await post(gw, '/v1/chat/completions', { model: 'echo', stream: true, messages: [{ role: 'user', content: 'stream default' }] });
    assert.equal(streamed.status, 200);
    assert.match(streamed.headers.get('content-type') ?? '', /^text\/event-stream/);
    const data = (await streamed.text())
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => l.slice(6));
    assert.equal(data.at(-1), '[DONE]');
    const text = data
      .slice(0, -1)
      .map((d) => (JSON.parse(d) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? '')
      .join('');
    assert.equal(text, 'echo: stream default');
    // Without keys, the provider model names are not routed.
    const gpt = await post(gw, '/v1/chat/completions', { model: 'gpt-4o-mini', messages: [] });
    assert.equal(gpt.status, 404);
    assert.equal(((await gpt.json()) as { error: { code: string } }).error.code, 'model_not_found');
    const metrics = await fetch(`${gw.adminUrl}/metrics`);
    assert.equal(metrics.status, 200);
    await metrics.arrayBuffer();
  });

  test('OPENAI_API_KEY and ANTHROPIC_API_KEY route the provider model names to their base URLs', async () => {
    mock.reset();
    const gw = await gateway({
      useDefault: true,
      env: {
        ...addresses,
        OPENAI_API_KEY: 'sk-test',
        OPENAI_BASE_URL: `${mock.url}/v1`,
        ANTHROPIC_API_KEY: 'sk-ant-test',
        ANTHROPIC_BASE_URL: mock.url,
      },
    });
    const chat = await post(gw, '/v1/chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'via openai' }] });
    assert.equal(chat.status, 200);
    assert.equal(((await chat.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content, 'mock reply to: via openai');
    const openaiSeen = mock.received.at(-1)!;
    assert.equal(openaiSeen.path, '/v1/chat/completions');
    assert.equal(openaiSeen.headers.authorization, 'Bearer sk-test');
    assert.equal((openaiSeen.json as { model: string }).model, 'gpt-4o-mini');

    const message = await post(gw, '/v1/messages', { model: 'claude-3-5-haiku-latest', max_tokens: 16, messages: [{ role: 'user', content: 'via anthropic' }] });
    assert.equal(message.status, 200);
    assert.equal(((await message.json()) as { type: string }).type, 'message');
    const anthropicSeen = mock.received.at(-1)!;
    assert.equal(anthropicSeen.path, '/v1/messages');
    assert.equal(anthropicSeen.headers['x-api-key'], 'sk-ant-test');
    assert.equal(anthropicSeen.headers.authorization, undefined);
    assert.equal((anthropicSeen.json as { model: string }).model, 'claude-3-5-haiku-latest');
    assert.equal(mock.received.length, 2);

    // echo still answers locally.
    const echo = await post(gw, '/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'still here' }] });
    assert.equal(((await echo.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content, 'echo: still here');
    assert.equal(mock.received.length, 2);
  });
});

describe('serve failures', () => {
  let busy: Server;
  let busyPort: number;

  before(async () => {
    busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    busyPort = (busy.address() as AddressInfo).port;
  });

  after(async () => {
    await new Promise<void>((resolve) => busy.close(() => resolve()));
  });

  for (const role of ['proxy', 'admin'] as const) {
    test(`a ${role} port already in use makes serve exit non-zero with a clear log line`, async () => {
      const listeners = [
        { name: 'proxy', address: role === 'proxy' ? `127.0.0.1:${busyPort}` : '127.0.0.1:0', role: 'proxy' },
        { name: 'admin', address: role === 'admin' ? `127.0.0.1:${busyPort}` : '127.0.0.1:0', role: 'admin' },
      ];
      const gw = await gateway({ config: { listeners }, waitReady: false });
      const exit = await Promise.race([
        gw.exited,
        new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`still running:\n${gw.stdout()}`)), 10_000).unref()),
      ]);
      assert.notEqual(exit.code, 0);
      assert.equal(exit.signal, null);
      const line = gw.logs.find((l) => l.event === 'start_failed');
      assert.ok(line, `no start_failed line in:\n${gw.stdout()}\n${gw.stderr()}`);
      assert.equal(line.level, 'fatal');
      assert.match(String(line.msg), /EADDRINUSE/);
      assert.ok(String(line.msg).includes(`127.0.0.1:${busyPort}`), String(line.msg));
      // One clear line: why in words, no stack trace, and the cause not repeated.
      assert.match(String(line.msg), /the address is already in use/);
      assert.equal(line.code, 'EADDRINUSE');
      assert.equal(line.err, undefined, JSON.stringify(line));
      assert.doesNotMatch(gw.stdout() + gw.stderr(), /\n\s+at /);
      assert.equal(String(line.msg).split('EADDRINUSE').length, 2, String(line.msg));
      assert.ok(!gw.logs.some((l) => l.event === 'ready'));
    });
  }
});
