// D1–D3: `sluice plan` (the built program), the Helm chart in deploy/helm/sluice (rendered by
// test/support/helm-render, every document validated against Kubernetes' schemas, its grace equal
// to the plan's for the same inputs), and deploy/systemd/sluice.service (systemd-analyze).
// The image's entrypoint as PID 1: deploy-entrypoint.test.ts.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parse, stringify } from 'yaml';
import { ROOT, runSluice } from '../support/gateway-process.ts';
import { find, renderChart, renderChartError, validateManifest, type Manifest } from '../support/helm.ts';
import { requireTool } from '../support/system-tool.ts';

const go = requireTool('go', 'golang-go');
const systemdAnalyze = requireTool('systemd-analyze', 'systemd');
const exec = promisify(execFile);

function configFile(config: unknown): string {
  const file = join(mkdtempSync(join(tmpdir(), 'sluice-plan-')), 'sluice.yaml');
  writeFileSync(file, typeof config === 'string' ? config : stringify(config));
  return file;
}

const LISTENERS = [
  { name: 'proxy', address: '0.0.0.0:8080', role: 'proxy' },
  { name: 'admin', address: '127.0.0.1:9901', role: 'admin' },
];

async function planJson(file: string, flags: string[] = []): Promise<any> {
  const result = await runSluice(['plan', '--config', file, '-o', 'json', ...flags], { env: { SLUICE_CONFIG: '' } });
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout);
}

describe('sluice plan', () => {
  test('text: each number with its reason, the issue example (preStop 5 + window 30 + longest 60 + exit 5 + margin 0)', async () => {
    const file = configFile({ workers: 1, listeners: LISTENERS, etcd: { endpoints: ['http://127.0.0.1:2379'] } });
    const result = await runSluice(['plan', '--config', file, '--longest-stream', '60', '--prestop', '5', '--margin', '0'], { env: { SLUICE_CONFIG: '' } });
    assert.equal(result.code, 0, result.stderr);
    const lines = result.stdout.split('\n');
    assert.ok(lines.includes('  terminationGracePeriodSeconds: 100 = preStop 5 + window 30 + longest work 60 + exit allowance 5 + margin 0'), result.stdout);
    assert.ok(lines.includes('  TimeoutStopSec=95 = window 30 + longest work 60 + exit allowance 5 + margin 0'), result.stdout);
    assert.ok(lines.some((l) => /^exit allowance +5 s +snapshot write ≤ 5 s ∥ status page ≤ 1 s \(L9\)$/.test(l)), result.stdout);
    assert.ok(lines.some((l) => l.startsWith('  readinessProbe: GET /readyz port 8080 periodSeconds 5 failureThreshold 2')), result.stdout);
    assert.ok(lines.some((l) => l.startsWith('  docker stop -t 95 ')), result.stdout);
    assert.ok(!result.stdout.includes('warning'), result.stdout);
  });

  test('warnings: a window shorter than the balancer detection, max_drain_secs cutting the longest stream; --strict exits 1', async () => {
    const file = configFile({ workers: 1, listeners: LISTENERS, shutdown: { min_drain_secs: 5, max_drain_secs: 30 } });
    const flags = ['--health-check-interval', '3', '--health-check-failures', '3', '--longest-stream', '120', '--grace', '20'];
    const lenient = await runSluice(['plan', '--config', file, ...flags], { env: { SLUICE_CONFIG: '' } });
    assert.equal(lenient.code, 0);
    for (const code of ['window_below_detection', 'max_drain_cuts_longest', 'grace_too_short']) assert.ok(lenient.stdout.includes(`warning (${code})`), lenient.stdout);
    assert.ok(lenient.stdout.includes('drain                  31 s   max_drain_secs 30 + forced end 1'), lenient.stdout);
    const strict = await runSluice(['plan', '--config', file, '--strict', ...flags], { env: { SLUICE_CONFIG: '' } });
    assert.equal(strict.code, 1);
    const clean = await runSluice(['plan', '--config', configFile({ workers: 1, listeners: LISTENERS }), '--strict'], { env: { SLUICE_CONFIG: '' } });
    assert.equal(clean.code, 0, clean.stdout);
  });

  test('json for tooling; an unset ${VAR} is read as a placeholder and said so; bad flags exit 2', async () => {
    const file = configFile(
      ['workers: 2', 'listeners: [{ name: proxy, address: "0.0.0.0:8080", role: proxy }]', 'providers: [{ name: o, type: openai, api_key: "${SLUICE_TEST_UNSET_KEY}" }]', 'limits: { store: redis, redis: { url: "redis://127.0.0.1:6379" } }'].join('\n'),
    );
    const json = await planJson(file, ['--longest-stream', '30', '--platform', 'systemd']);
    assert.equal(json.window_secs, 30);
    assert.equal(json.exit_allowance_secs, 5);
    assert.equal(json.systemd.TimeoutStopSec, 30 + 30 + 5 + 5);
    assert.equal(json.kubernetes, undefined);
    assert.deepEqual(json.placeholders, ['SLUICE_TEST_UNSET_KEY']);
    const bad = await runSluice(['plan', '--config', file, '--longest-stream', 'soon'], { env: { SLUICE_CONFIG: '' } });
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--longest-stream expects a number of seconds/);
    const broken = await runSluice(['plan', '--config', configFile({ listeners: LISTENERS, shutdown: { min_drain_secs: 'soon' } })], { env: { SLUICE_CONFIG: '' } });
    assert.equal(broken.code, 1);
    assert.match(broken.stderr, /shutdown\.min_drain_secs/);
  });
});

describe('docs/deployment.md', () => {
  test('the sluice plan sample is what the program prints for the config shown', async () => {
    const page = readFileSync(join(ROOT, 'docs', 'deployment.md'), 'utf8');
    const part = page.slice(page.indexOf('\n## sluice plan\n'), page.indexOf('\n## Kubernetes\n'));
    const config = /```yaml\n([\s\S]*?)```/.exec(part)?.[1];
    const sample = /`(sluice plan [^`]*)` prints:\n\n```\n([\s\S]*?)```/.exec(part);
    assert.ok(config && sample, 'the config and the sample are on the page');
    const dir = mkdtempSync(join(tmpdir(), 'sluice-docs-'));
    writeFileSync(join(dir, 'sluice.yaml'), config);
    const unset = Object.fromEntries(Object.keys(process.env).filter((n) => /^(SLUICE_|OPENAI_|ANTHROPIC_)/.test(n)).map((n) => [n, undefined]));
    const result = await runSluice(sample[1]!.split(' ').slice(1), { cwd: dir, env: unset });
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, sample[2]);
  });
});

/** Every document valid for its kind; the Deployment and the config it mounts. */
function checked(documents: Manifest[]): { deployment: Manifest; mounted: string } {
  for (const doc of documents) validateManifest(doc);
  const deployment = find(documents, 'Deployment');
  assert.ok(deployment);
  const holder = documents.find((d) => d.metadata.name.endsWith('-config'))!;
  return { deployment, mounted: (holder.data ?? holder.stringData)['sluice.yaml'] as string };
}

const VALUE_SETS: Array<[string, Record<string, unknown>, string[]]> = [
  // name, values, the same inputs as plan flags
  ['the default values', {}, ['--longest-stream', '60', '--margin', '5']],
  [
    'preStop, a long stream, etcd and Redis with workers, the secret env',
    {
      sizing: { longestSeconds: 300, preStopSeconds: 10, marginSeconds: 3 },
      secretEnv: { OPENAI_API_KEY: 'sk-test' },
      config: {
        workers: 4,
        listeners: LISTENERS,
        shutdown: { min_drain_secs: 45 },
        etcd: { endpoints: ['http://etcd:2379'] },
        limits: { store: 'redis', redis: { url: 'redis://redis:6379' } },
      },
    },
    ['--longest-stream', '300', '--prestop', '10', '--margin', '3'],
  ],
  [
    'max_drain_secs bounding the drain, one process, fractional window, config in a Secret',
    {
      configInSecret: true,
      sizing: { longestSeconds: 600, preStopSeconds: 0, marginSeconds: 0 },
      config: { workers: 1, listeners: LISTENERS, shutdown: { min_drain_secs: 12.5, max_drain_secs: 120 }, limits: { store: 'redis', redis: { url: 'redis://redis:6379' } } },
    },
    ['--longest-stream', '600', '--margin', '0'],
  ],
  [
    'tracing on with a long flush bound, workers and etcd (the workers\' flush, then the supervisor\'s snapshot)',
    {
      config: { workers: 2, listeners: LISTENERS, tracing: { enabled: true, flush_timeout_ms: 7500 }, etcd: { endpoints: ['http://etcd:2379'] } },
    },
    ['--longest-stream', '60', '--margin', '5'],
  ],
  [
    'the ServiceMonitor with the admin listener exposed',
    {
      metrics: { serviceMonitor: { enabled: true } },
      config: {
        workers: 1,
        listeners: [LISTENERS[0], { name: 'admin', address: '0.0.0.0:9901', role: 'admin' }],
        admin: { allow_non_loopback: true, token: '${SLUICE_ADMIN_TOKEN}' },
      },
      existingSecret: 'sluice-keys',
    },
    ['--longest-stream', '60', '--margin', '5'],
  ],
];

describe('the Helm chart (deploy/helm/sluice)', { skip: go.skip }, () => {
  for (const [name, values, flags] of VALUE_SETS) {
    test(`D1: ${name}: valid manifests; terminationGracePeriodSeconds is sluice plan's for the mounted config`, async () => {
      const { documents } = await renderChart(values);
      const { deployment, mounted } = checked(documents);
      const file = configFile(mounted);
      const validated = await runSluice(['validate', '--config', file], { env: { SLUICE_CONFIG: '', SLUICE_ADMIN_TOKEN: 'a-token-of-sixteen-chars', OPENAI_API_KEY: 'sk-x' } });
      assert.equal(validated.code, 0, `the mounted config is valid: ${validated.stderr}`);
      const plan = await planJson(file, flags);
      const pod = deployment.spec.template.spec;
      assert.equal(pod.terminationGracePeriodSeconds, plan.kubernetes.terminationGracePeriodSeconds);
      const container = pod.containers[0];
      assert.equal(container.command, undefined, 'the image\'s exec-form ENTRYPOINT stays PID 1');
      assert.equal(container.readinessProbe.httpGet.path, '/readyz');
      assert.equal(container.livenessProbe.httpGet.path, '/livez');
      assert.equal(container.readinessProbe.periodSeconds, plan.kubernetes.readinessProbe.periodSeconds);
      assert.equal(container.readinessProbe.failureThreshold, plan.kubernetes.readinessProbe.failureThreshold);
      assert.equal(container.ports.find((p: Manifest) => p.name === 'proxy').containerPort, plan.kubernetes.readinessProbe.httpGet.port);
      const preStop = (values.sizing as { preStopSeconds?: number } | undefined)?.preStopSeconds ?? 0;
      assert.deepEqual(container.lifecycle?.preStop?.exec?.command, preStop > 0 ? ['sleep', String(preStop)] : undefined);
      assert.ok(find(documents, 'PodDisruptionBudget'));
      assert.equal(find(documents, 'Service')!.spec.ports[0].targetPort, 'proxy');
    });
  }

  test('the values sluice plan -o values writes give the plan\'s grace', async () => {
    const file = configFile({ workers: 2, listeners: LISTENERS, shutdown: { min_drain_secs: 20 }, etcd: { endpoints: ['http://etcd:2379'] } });
    const flags = ['--longest-stream', '90', '--prestop', '7', '--margin', '4', '--health-check-interval', '2', '--health-check-failures', '3'];
    const result = await runSluice(['plan', '--config', file, '-o', 'values', ...flags], { env: { SLUICE_CONFIG: '' } });
    assert.equal(result.code, 0, result.stderr);
    const { documents } = await renderChart(parse(result.stdout) as Record<string, unknown>);
    const { deployment } = checked(documents);
    const plan = await planJson(file, flags);
    assert.equal(plan.kubernetes.terminationGracePeriodSeconds, 7 + 20 + 90 + 5 + 4);
    assert.equal(deployment.spec.template.spec.terminationGracePeriodSeconds, plan.kubernetes.terminationGracePeriodSeconds);
    assert.equal(deployment.spec.template.spec.containers[0].readinessProbe.periodSeconds, 2);
  });

  test('a changed config changes the pod template\'s checksum (a rollout); the same config does not', async () => {
    const checksum = async (values: Record<string, unknown>) => (await renderChart(values)).documents.find((d) => d.kind === 'Deployment')!.spec.template.metadata.annotations['checksum/config'];
    const one = await checksum({});
    assert.match(one, /^[0-9a-f]{64}$/);
    assert.equal(await checksum({}), one);
    assert.notEqual(await checksum({ config: { listeners: LISTENERS, shutdown: { min_drain_secs: 31 } } }), one);
    const noRollout = (await renderChart({ rolloutOnConfigChange: false })).documents.find((d) => d.kind === 'Deployment')!;
    assert.equal(noRollout.spec.template.metadata.annotations, null);
  });

  test('the chart refuses what cannot work: a loopback proxy, a window that is not a number, an exposed admin API without a token', async () => {
    assert.match(await renderChartError({ config: { listeners: [{ name: 'p', address: '127.0.0.1:8080', role: 'proxy' }] } }), /the proxy listener binds 127\.0\.0\.1:8080/);
    assert.match(await renderChartError({ config: { listeners: LISTENERS, shutdown: { min_drain_secs: '${WINDOW}' } } }), /config\.shutdown\.min_drain_secs must be a number/);
    const exposed = { listeners: [LISTENERS[0], { name: 'admin', address: '0.0.0.0:9901', role: 'admin' }], admin: { allow_non_loopback: true } };
    assert.match(await renderChartError({ config: exposed }), /give it admin\.token/);
    assert.match(await renderChartError({ metrics: { serviceMonitor: { enabled: true } } }), /metrics\.serviceMonitor needs the admin listener/);
  });

  test('the schema check can fail: a wrong type and an unknown kind are refused', () => {
    assert.throws(() => validateManifest({ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'x' }, spec: { selector: {}, template: { spec: { terminationGracePeriodSeconds: '95', containers: [] } } } }), /terminationGracePeriodSeconds/);
    assert.throws(() => validateManifest({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'x' } }), /unknown kind v1\/Pod/);
  });
});

describe('the systemd unit (deploy/systemd/sluice.service)', { skip: systemdAnalyze.skip }, () => {
  const UNIT = readFileSync(join(ROOT, 'deploy', 'systemd', 'sluice.service'), 'utf8');
  const setting = (name: string) => [...UNIT.matchAll(new RegExp(`^${name}=(.*)$`, 'gm'))].map((m) => m[1]!);

  /** A copy whose ExecStart runs this machine's node (verify checks that the program exists). */
  function verifiable(text: string): string {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-unit-'));
    const file = join(dir, 'sluice.service');
    writeFileSync(file, text.replace(/^ExecStart=\/usr\/bin\/node /m, `ExecStart=${process.execPath} `));
    return file;
  }

  /** systemd-analyze verify: exit 0 and not a word on stderr (an unknown key or a bad value is only a warning there). */
  async function verify(file: string): Promise<string> {
    try {
      const { stderr } = await exec('systemd-analyze', ['verify', '--man=no', file]);
      return stderr;
    } catch (error) {
      return String((error as { stderr?: string }).stderr ?? error) || 'failed';
    }
  }

  test('D2: systemd-analyze verify finds nothing; KillSignal=SIGTERM, KillMode=mixed, ExecReload sends SIGHUP', async () => {
    assert.equal(await verify(verifiable(UNIT)), '');
    assert.deepEqual(setting('KillSignal'), ['SIGTERM']);
    assert.deepEqual(setting('KillMode'), ['mixed']);
    assert.deepEqual(setting('ExecReload'), ['/bin/kill -HUP $MAINPID']);
    assert.match(setting('ExecStart')[0]!, /^\/usr\/bin\/node \/opt\/sluice\/dist\/main\.js serve --config /, 'node itself is the main process');
  });

  test('the verify check can fail: an unknown key and a bad signal are reported', async () => {
    assert.notEqual(await verify(verifiable(UNIT.replace('KillSignal=SIGTERM', 'KillSignal=SIGTERMINATE'))), '');
    assert.notEqual(await verify(verifiable(UNIT.replace('KillMode=mixed', 'KilMode=mixed'))), '');
  });

  test('hardened: systemd-analyze security rates the unit OK (exposure at most 2.0)', async () => {
    const { stdout } = await exec('systemd-analyze', ['security', '--offline=yes', '--no-pager', verifiable(UNIT)]);
    const level = Number(/Overall exposure level for [^:]+: ([\d.]+)/.exec(stdout)?.[1]);
    assert.ok(level <= 2, `exposure ${level}`);
  });

  test('TimeoutStopSec is sluice plan\'s for a config file with the defaults and --longest-stream 60', async () => {
    const plan = await planJson(configFile({ listeners: LISTENERS }), ['--longest-stream', '60', '--platform', 'systemd']);
    assert.deepEqual(setting('TimeoutStopSec'), [String(plan.systemd.TimeoutStopSec)]);
  });
});
