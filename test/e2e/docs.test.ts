// The commands and output samples of the README and docs/, run against the built program: a sample
// that no longer says what the program does fails here. (docs/clients.md has its own file,
// test/e2e/clients.test.ts.)
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ROOT, runSluice, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { requireTool } from '../support/system-tool.ts';
import { parse } from 'yaml';
import { defaultConfigText } from '../../src/config/default.ts';

const curl = requireTool('curl', 'curl');
const exec = promisify(execFile);

const read = (file: string): string => readFileSync(join(ROOT, file), 'utf8');
const README = read('README.md');
const CONFIGURATION = read('docs/configuration.md');
const ADMIN_API = read('docs/admin-api.md');

/** The fenced blocks of `text` (optionally only those of one language), in order. */
function blocks(text: string, lang = '[a-z]*'): string[] {
  return [...text.matchAll(new RegExp('^```' + lang + '\\n([\\s\\S]*?)^```$', 'gm'))].map((m) => m[1]!);
}

/** The section of a markdown page under `heading`, up to the next heading of the same level. */
function section(text: string, heading: string): string {
  const start = text.indexOf(`\n${heading}\n`);
  assert.ok(start !== -1, `no heading ${heading}`);
  const level = heading.split(' ')[0]!;
  const end = text.indexOf(`\n${level} `, start + heading.length + 2);
  return text.slice(start, end === -1 ? undefined : end);
}

/** `env`, and none of the variables the program reads (each set to undefined: removed). */
function cleanEnv(env: Record<string, string> = {}): Record<string, string | undefined> {
  const removed = Object.keys(process.env).filter((name) => /^(SLUICE_|OPENAI_|ANTHROPIC_)/.test(name));
  return { ...Object.fromEntries(removed.map((name) => [name, undefined])), ...env };
}

/** Runs `sluice <args>` in `cwd` to completion. */
const sluice = (args: string[], cwd: string, env: Record<string, string> = {}) => runSluice(args, { cwd, env: cleanEnv(env), timeoutMs: 10_000 });

/** A new directory holding `text` as sluice.yaml, so that the program names the file as the docs do. */
function configDir(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-docs-'));
  writeFileSync(join(dir, 'sluice.yaml'), text);
  return dir;
}

describe('docs/configuration.md', () => {
  test('the usage lines are those of --help', async () => {
    const usage = blocks(section(CONFIGURATION, '## Finding the config'))[0]!;
    const help = await sluice(['--help'], ROOT);
    assert.equal(help.code, 0);
    const helpLines = help.stdout.split('\n').map((l) => l.trim());
    for (const line of usage.trim().split('\n')) assert.ok(helpLines.includes(line.trim()), `--help has no line: ${line}`);
  });

  test('validate: the broken file gives exactly the documented output, exit 1', async () => {
    const text = section(CONFIGURATION, '## Validating a config');
    const [file, output] = blocks(text);
    assert.ok(file && output);
    const result = await sluice(['validate', '--config', 'sluice.yaml'], configDir(file));
    assert.equal(result.code, 1);
    assert.equal(result.stdout, '');
    assert.equal(result.stderr, output);
  });

  test('validate: the complete example gives the documented summary line', async () => {
    const line = /`(config OK \(sluice\.yaml\): [^`]*)`/.exec(section(CONFIGURATION, '## Validating a config'))?.[1];
    assert.ok(line, 'no summary line on the page');
    const complete = section(CONFIGURATION, '## Complete example');
    const example = blocks(complete, 'yaml')[0]!;
    // The variables the example says it assumes, each set to a valid value.
    const names = [...complete.split('```')[0]!.matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((m) => m[1]!);
    assert.ok(names.length >= 5, names.join());
    const env = Object.fromEntries(names.map((n) => [n, `value-of-${n.toLowerCase()}`]));
    const result = await sluice(['validate', '--config', 'sluice.yaml'], configDir(example), env);
    assert.equal(result.code, 0, result.stderr);
    // `workers: auto` counts this machine's CPUs; the page shows 2.
    assert.equal(result.stdout, `${line.replace(/\d+ workers$/, `${Math.max(1, availableParallelism())} workers`)}\n`);
  });

  test('the embedded default is shown as the program has it, without and with the provider keys', () => {
    const [plain, both] = blocks(section(CONFIGURATION, '## The embedded default'), 'yaml');
    assert.equal(plain, defaultConfigText({}));
    assert.equal(both, defaultConfigText({ OPENAI_API_KEY: 'x', ANTHROPIC_API_KEY: 'y' }));
  });
});

describe('README', () => {
  const gateways: GatewayProcess[] = [];
  after(async () => {
    await Promise.all(gateways.map((gw) => gw.stop()));
  });

  test('the sample config validates with the variables it names', async () => {
    const sample = blocks(section(README, '## Run it with your config'), 'yaml')[0]!;
    const names = [...new Set([...sample.matchAll(/\$\{([A-Z_]+)\}/g)].map((m) => m[1]!))];
    assert.deepEqual(names.sort(), ['ANTHROPIC_API_KEY', 'OPENAI_API_KEY', 'SLUICE_CLIENT_KEY']);
    const env = Object.fromEntries(names.map((n) => [n, `value-of-${n.toLowerCase()}`]));
    const result = await sluice(['validate', '--config', 'sluice.yaml'], configDir(sample), env);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /^config OK \(sluice\.yaml\): 2 listeners, 3 providers, 3 models, 1 keys, \d+ workers\n$/);
  });

  test('"Run it in production": the plan command runs on the sample config and prints the sums it promises', async () => {
    const sample = blocks(section(README, '## Run it with your config'), 'yaml')[0]!;
    const command = blocks(section(README, '## Run it in production'), 'sh')[0]!.trim();
    const args = command.split(/\s+/);
    assert.equal(args.shift(), 'sluice');
    // The keys are left unset: the plan reads them as placeholders (sizing needs none of them).
    const result = await sluice(args, configDir(sample));
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /^sluice plan for sluice\.yaml$/m);
    assert.match(result.stdout, /terminationGracePeriodSeconds: \d+ = preStop 5 \+ window \d+ \+ longest work 120 \+/);
    assert.match(result.stdout, /TimeoutStopSec=\d+ = window \d+ \+ longest work 120 \+/);
    assert.match(result.stdout, /docker stop -t \d+/);
  });

  test('"Try it" on the embedded default: the chat answer, the stream, readiness, the metrics', { skip: curl.skip }, async () => {
    // The embedded default, as `npm start` runs it, on free ports instead of 8080 and 9901.
    const gw = await startGateway({ useDefault: true, env: { SLUICE_PROXY_ADDRESS: '127.0.0.1:0', SLUICE_ADMIN_ADDRESS: '127.0.0.1:0' } });
    gateways.push(gw);
    const commands = blocks(section(README, '## Try it'), 'sh')[0]!
      .replaceAll('localhost:8080', new URL(gw.proxyUrl).host)
      .replaceAll('localhost:9901', new URL(gw.adminUrl).host)
      .replace(/\\\n\s*/g, '')
      .split('\n')
      .filter((l) => l.trim() !== '');
    assert.equal(commands.length, 4);
    const outputs: string[] = [];
    for (const command of commands) outputs.push((await exec('sh', ['-ec', command])).stdout);
    const [chat, stream, ready, metrics] = outputs as [string, string, string, string];
    assert.equal((JSON.parse(chat) as { choices: { message: { content: string } }[] }).choices[0]!.message.content, 'echo: hello');
    assert.match(stream, /^data: \{"id":"chatcmpl-/);
    assert.ok(stream.endsWith('data: [DONE]\n\n'), stream);
    assert.equal((JSON.parse(ready) as { status: string }).status, 'ready');
    assert.match(metrics, /^sluice_requests_total\{endpoint="chat_completions",status="200",model="echo",key=""\} 2$/m);
  });

  test('"Hot restart": with the setting shown, `sluice restart` prints the documented lines and exits 0; the keeper stays', async () => {
    const text = section(README, '## Hot restart');
    const enable = parse(blocks(text, 'yaml')[0]!) as Record<string, unknown>;
    assert.deepEqual(enable, { hot_restart: { enabled: true } });
    assert.match(blocks(text, 'sh')[0]!, /^npx sluice restart --config sluice\.yaml$/m);
    // The first fence with no language: the output.
    const output = [...text.matchAll(/^```([a-z]*)\n([\s\S]*?)^```$/gm)].find((m) => m[1] === '')![2]!;
    const gw = await startGateway({
      config: { ...enable, workers: 1, shutdown: { min_drain_secs: 0 }, providers: [{ name: 'echo', type: 'echo' }], models: [{ name: 'echo', provider: 'echo' }] },
    });
    gateways.push(gw);
    // The sample's config names 127.0.0.1:9901; this one listens on a free port, named with --admin.
    const result = await sluice(['restart', '--admin', gw.adminUrl], ROOT);
    assert.equal(result.code, 0, result.stderr);
    // Process ids and the version differ from run to run.
    const shape = (t: string) => t.replace(/pid \d+/g, 'pid N').replace(/version [^)]+/g, 'version V');
    assert.equal(shape(result.stdout), shape(output));
    assert.equal(gw.child.exitCode, null, 'the keeper stays');
    // The keeper passes SIGTERM on; it exits once the generation has drained.
    gw.signal('SIGTERM');
    assert.equal((await gw.exited).code, 0, gw.stdout().slice(-2000));
  });
});

describe('docs/admin-api.md', () => {
  const gateways: GatewayProcess[] = [];
  after(async () => {
    await Promise.all(gateways.map((gw) => gw.stop()));
  });

  test('the readiness checks listed are those /readyz?verbose reports, with and without workers', async () => {
    const row = ADMIN_API.split('\n').find((l) => l.startsWith('| `GET /readyz'))!;
    const listed = [...row.matchAll(/`([a-z_]+)`/g)].map((m) => m[1]!).filter((n) => n !== 'verbose' && n !== 'workers');
    assert.match(row, /`workers_ready` with `workers` > 1/);
    const checks = async (gw: GatewayProcess) =>
      ((await (await fetch(`${gw.adminUrl}/readyz?verbose`)).json()) as { checks: { name: string }[] }).checks.map((c) => c.name).sort();
    const single = await startGateway({ config: { workers: 1 } });
    gateways.push(single);
    assert.deepEqual(await checks(single), listed.filter((n) => n !== 'workers_ready').sort());
    const group = await startGateway({ config: { workers: 2 } });
    gateways.push(group);
    assert.deepEqual(await checks(group), [...listed].sort());
  });
});

describe('docs/routing.md, docs/translation.md and the README\'s routing sample', () => {
  const LISTENERS = 'listeners:\n  - { name: proxy, address: "127.0.0.1:0", role: proxy }\n';
  const PROVIDERS =
    'providers:\n  - { name: openai, type: openai, api_key: x }\n  - { name: azure, type: openai, base_url: "https://example.openai.azure.com/openai/v1", api_key: x }\n  - { name: anthropic, type: anthropic, api_key: x }\n';
  const env = { OPENAI_API_KEY: 'sk-a', AZURE_API_KEY: 'sk-b', ANTHROPIC_API_KEY: 'sk-c' };
  const validate = async (text: string, expect: RegExp) => {
    const result = await sluice(['validate', '--config', 'sluice.yaml'], configDir(text), env);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, expect);
  };

  test('the routed example of docs/routing.md validates', async () => {
    const example = blocks(section(read('docs/routing.md'), '## Routes with targets'), 'yaml')[1]!;
    await validate(LISTENERS + example, /^config OK \(sluice\.yaml\): 1 listeners, 3 providers, 1 models/);
  });

  test('the example of docs/translation.md validates', async () => {
    const example = blocks(read('docs/translation.md'), 'yaml')[0]!;
    await validate(LISTENERS + example, /^config OK \(sluice\.yaml\): 1 listeners, 2 providers, 2 models/);
  });

  test('the README\'s routing sample validates with the providers it names', async () => {
    const sample = blocks(section(README, '## Routing and translation'), 'yaml')[0]!;
    await validate(LISTENERS + PROVIDERS + sample, /^config OK \(sluice\.yaml\): 1 listeners, 3 providers, 1 models/);
  });
});
