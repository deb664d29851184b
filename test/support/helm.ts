// The Helm chart in deploy/helm/sluice rendered without Helm: test/support/helm-render (Go's
// text/template and sprig, from Debian's golang-go and golang-github-masterminds-sprig-dev, built
// offline in GOPATH mode) and every document validated against Kubernetes' schemas
// (kubernetes-models, @kubernetes-models/prometheus-operator).
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parseAllDocuments, stringify } from 'yaml';
import { Deployment } from 'kubernetes-models/apps/v1';
import { ConfigMap, Secret, Service } from 'kubernetes-models/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { ROOT } from './gateway-process.ts';

export const CHART = join(ROOT, 'deploy', 'helm', 'sluice');
/** Where Debian's golang-*-dev packages put their sources (a GOPATH). */
const DEBIAN_GOPATH = '/usr/share/gocode';

let built: string | undefined;

/** Builds the renderer once per test process (offline: GOPATH mode, Debian's sources). */
export function helmRenderer(): string {
  if (built) return built;
  const dir = mkdtempSync(join(tmpdir(), 'sluice-helm-render-'));
  const binary = join(dir, 'helm-render');
  execFileSync('go', ['build', '-o', binary, '.'], {
    cwd: join(ROOT, 'test', 'support', 'helm-render'),
    env: { ...process.env, GO111MODULE: 'off', GOPATH: DEBIAN_GOPATH, GOFLAGS: '', GOCACHE: join(dir, 'cache'), GOTOOLCHAIN: 'local' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  built = binary;
  return binary;
}

export type Manifest = Record<string, any>;

export interface Rendered {
  documents: Manifest[];
  text: string;
}

/** `helm template` of the chart with `values` (written to a file, like -f) and --set pairs. */
export async function renderChart(values: Record<string, unknown> = {}, sets: string[] = []): Promise<Rendered> {
  const file = join(mkdtempSync(join(tmpdir(), 'sluice-values-')), 'values.yaml');
  writeFileSync(file, stringify(values));
  const args = ['--name', 'gw', '--namespace', 'ai', '-f', file, ...sets.flatMap((s) => ['--set', s]), CHART];
  const { stdout } = await promisify(execFile)(helmRenderer(), args);
  const documents = parseAllDocuments(stdout).map((d) => {
    if (d.errors.length > 0) throw new Error(`rendered YAML does not parse: ${d.errors[0]!.message}\n${stdout}`);
    return d.toJS() as Manifest;
  });
  return { documents: documents.filter((d) => d !== null), text: stdout };
}

/** The rendering fails: its message (stderr). */
export async function renderChartError(values: Record<string, unknown>): Promise<string> {
  try {
    await renderChart(values);
  } catch (error) {
    return String((error as { stderr?: string }).stderr ?? error);
  }
  throw new Error('the chart rendered, but it should have failed');
}

const KINDS: Record<string, new (data: any) => { validate(): void }> = {
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
};

/** Validates one rendered document against its kind's schema; throws on an unknown kind or a schema error. */
export function validateManifest(doc: Manifest): void {
  const kind = `${doc.apiVersion}/${doc.kind}`;
  const Model = KINDS[kind];
  if (!Model) throw new Error(`unknown kind ${kind}: add its schema to test/support/helm.ts`);
  try {
    new Model(doc).validate();
  } catch (error) {
    throw new Error(`${kind} ${doc.metadata?.name}: ${(error as Error).message}`);
  }
}

export function find(documents: Manifest[], kind: string): Manifest | undefined {
  return documents.find((d) => d.kind === kind);
}
