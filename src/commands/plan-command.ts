// `sluice plan`: the platform's numbers (grace period, TimeoutStopSec, probes) sized from a config
// and the flags for what the config cannot know, each with its reason (src/deploy/plan.ts), as
// text, JSON for tooling, or a values file for the Helm chart in deploy/helm/sluice.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { parse, stringify } from 'yaml';
import { ConfigError, loadDefaultConfig, parseConfig } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import { PLATFORMS, plan, sizingFromConfig, type Plan, type Platform, type Term } from '../deploy/plan.ts';
import type { Output } from './resources-command.ts';

const PROCESS_OUTPUT: Output = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
};

/** Stands in for a `${VAR}` unset here (an API key is the deployment's, not the planner's). */
const PLACEHOLDER = 'sluice-plan-placeholder';

const SECONDS: Record<string, string> = {
  'longest-stream': 'longestSecs',
  'health-check-interval': 'healthCheckIntervalSecs',
  prestop: 'preStopSecs',
  margin: 'marginSecs',
  grace: 'graceSecs',
};

/**
 * Loads the config as `serve` would, except that a `${VAR}` unset here is given a placeholder (and
 * said so): the keys a config names are the deployment's. A number or setting that needs one still
 * fails, since the plan cannot be made without it.
 */
function loadForPlan(file: string | undefined): { config: Config; placeholders: string[] } {
  if (!file) return { config: loadDefaultConfig(), placeholders: [] };
  const text = readFileSync(file, 'utf8');
  try {
    return { config: parseConfig(text, file), placeholders: [] };
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    const unset = [...new Set(error.problems.flatMap((p) => [...p.message.matchAll(/environment variable \$\{([A-Za-z_][A-Za-z0-9_]*)\} is not set/g)].map((m) => m[1]!)))];
    if (unset.length === 0) throw error;
    const env = { ...process.env, ...Object.fromEntries(unset.map((name) => [name, PLACEHOLDER])) };
    return { config: parseConfig(text, file, env), placeholders: unset };
  }
}

const terms = (list: readonly Term[]) => list.map((t) => `${t.name} ${fmt(t.secs)}`).join(' + ');
const fmt = (secs: number) => String(Math.round(secs * 1000) / 1000);

function probeLine(name: string, p: Plan['probes'], which: 'readiness' | 'liveness' | 'startup', why: string): string {
  const probe = p[which];
  const port = p.port === undefined ? '(no proxy listener)' : String(p.port);
  return `  ${name}: ${p.scheme === 'HTTPS' ? 'HTTPS ' : ''}GET ${probe.path} port ${port} periodSeconds ${probe.periodSeconds} failureThreshold ${probe.failureThreshold} timeoutSeconds ${probe.timeoutSeconds}${why ? ` (${why})` : ''}`;
}

export function textReport(source: string, p: Plan, placeholders: readonly string[]): string[] {
  const lines = [`sluice plan for ${source}`, ''];
  const row = (name: string, secs: number, why: string) => lines.push(`${name.padEnd(20)}${`${fmt(secs)} s`.padStart(7)}   ${why}`);
  row('window', p.windowSecs, 'shutdown.min_drain_secs: the listeners keep accepting at least this long (L2, L5)');
  if (!p.detectionGiven && !p.platforms.includes('kubernetes')) {
    lines.push(`${'balancer detection'.padEnd(20)}${'-'.padStart(7)}   none given (--health-check-interval, --health-check-failures describe a balancer in front)`);
  } else {
    const { periodSeconds, failureThreshold } = p.probes.readiness;
    const within = p.detectionSecs <= p.windowSecs ? 'within the window' : 'LONGER than the window';
    row('balancer detection', p.detectionSecs, `health-check interval ${fmt(periodSeconds)} s × ${failureThreshold} failures${p.detectionGiven ? '' : ' (assumed: the readiness probe below)'}: ${within}`);
  }
  row('longest work', p.longestSecs, `${p.longestAssumed ? 'assumed' : '--longest-stream'}: the longest request, stream or WebSocket session to let finish (L5, L7)`);
  if (p.maxDrainSecs > 0) row('max drain', p.maxDrainSecs, 'shutdown.max_drain_secs: the drain is forced then, streams end with an error event (L8)');
  row('drain', p.drainSecs, p.drainWhy);
  row('exit allowance', p.exitAllowanceSecs, `${p.exitAllowanceWhy} (L9)`);
  if (p.platforms.includes('kubernetes')) {
    lines.push('', 'kubernetes (deploy/helm/sluice computes the same from its values)');
    lines.push(`  terminationGracePeriodSeconds: ${p.grace.secs} = ${terms(p.grace.terms)}`);
    lines.push(
      p.preStopSecs > 0
        ? `  preStop: sleep ${fmt(p.preStopSecs)} (the pod keeps serving while balancers that watch the API take it out; then SIGTERM)`
        : '  preStop: none (add one, --prestop, for balancers that watch the API instead of probing /readyz)',
    );
    lines.push(probeLine('readinessProbe', p.probes, 'readiness', `detection ${fmt(p.detectionSecs)} s; /readyz answers 503 from the signal on, L1`));
    lines.push(probeLine('livenessProbe', p.probes, 'liveness', 'lenient: /livez stays 200 during the drain, and a restart would kill the work in flight'));
    lines.push(probeLine('startupProbe', p.probes, 'startup', 'a start may take up to a minute: etcd, workers'));
  }
  if (p.platforms.includes('systemd')) {
    lines.push('', 'systemd (deploy/systemd/sluice.service)');
    lines.push(`  TimeoutStopSec=${p.stop.secs} = ${terms(p.stop.terms)}`);
    lines.push('  KillSignal=SIGTERM, KillMode=mixed (the main process drains; the workers follow it), ExecReload=/bin/kill -HUP $MAINPID');
  }
  if (p.platforms.includes('docker')) {
    lines.push('', 'docker (deploy/Dockerfile)');
    lines.push(`  docker stop -t ${p.stop.secs} (= ${terms(p.stop.terms)}); compose: stop_grace_period: ${p.stop.secs}s`);
    lines.push('  STOPSIGNAL SIGTERM to the exec-form ENTRYPOINT: node is PID 1 and gets the signal itself');
  }
  const notes = [...p.notes, ...(placeholders.length > 0 ? [`unset here, read as placeholders: ${placeholders.map((v) => `\${${v}}`).join(', ')}`] : [])];
  if (p.warnings.length > 0 || notes.length > 0) lines.push('');
  for (const w of p.warnings) lines.push(`warning (${w.code}): ${w.message}`);
  for (const n of notes) lines.push(`note: ${n}`);
  return lines;
}

export function jsonReport(source: string, p: Plan, placeholders: readonly string[]): object {
  const probe = (which: 'readiness' | 'liveness' | 'startup') => ({
    httpGet: { path: p.probes[which].path, port: p.probes.port ?? null, scheme: p.probes.scheme },
    periodSeconds: p.probes[which].periodSeconds,
    failureThreshold: p.probes[which].failureThreshold,
    timeoutSeconds: p.probes[which].timeoutSeconds,
  });
  return {
    config: source,
    window_secs: p.windowSecs,
    max_drain_secs: p.maxDrainSecs,
    longest_secs: p.longestSecs,
    longest_assumed: p.longestAssumed,
    prestop_secs: p.preStopSecs,
    margin_secs: p.marginSecs,
    detection_secs: p.detectionSecs,
    drain_secs: p.drainSecs,
    exit_allowance_secs: p.exitAllowanceSecs,
    exit_allowance: p.exitAllowanceWhy,
    ...(p.platforms.includes('kubernetes')
      ? {
          kubernetes: {
            terminationGracePeriodSeconds: p.grace.secs,
            terms: p.grace.terms,
            preStopSeconds: p.preStopSecs,
            readinessProbe: probe('readiness'),
            livenessProbe: probe('liveness'),
            startupProbe: probe('startup'),
          },
        }
      : {}),
    ...(p.platforms.includes('systemd') ? { systemd: { TimeoutStopSec: p.stop.secs, terms: p.stop.terms } } : {}),
    ...(p.platforms.includes('docker') ? { docker: { stop_timeout_secs: p.stop.secs, terms: p.stop.terms } } : {}),
    warnings: p.warnings,
    notes: p.notes,
    placeholders,
  };
}

/** A values file for deploy/helm/sluice: the sizing flags and the config itself (as written, `${VAR}`s kept). */
export function valuesReport(source: string, file: string, p: Plan): string {
  const values = {
    sizing: { longestSeconds: p.longestSecs, preStopSeconds: p.preStopSecs, marginSeconds: p.marginSecs },
    probes: { readiness: { periodSeconds: p.probes.readiness.periodSeconds, failureThreshold: p.probes.readiness.failureThreshold } },
    config: parse(readFileSync(file, 'utf8')) as unknown,
  };
  return `# sluice plan -o values, for deploy/helm/sluice (config: ${source})\n# terminationGracePeriodSeconds ${p.grace.secs} = ${terms(p.grace.terms)}\n${stringify(values)}`;
}

export async function planCommand(argv: string[], out: Output = PROCESS_OUTPUT): Promise<number> {
  let values;
  try {
    values = parseArgs({
      args: argv,
      options: {
        config: { type: 'string', short: 'c' },
        'longest-stream': { type: 'string' },
        'health-check-interval': { type: 'string' },
        'health-check-failures': { type: 'string' },
        prestop: { type: 'string' },
        margin: { type: 'string' },
        grace: { type: 'string' },
        platform: { type: 'string', default: 'all' },
        output: { type: 'string', short: 'o', default: 'text' },
        strict: { type: 'boolean', default: false },
      },
    }).values;
  } catch (error) {
    out.err(`sluice plan: ${(error as Error).message}`);
    return 2;
  }
  const flags: Record<string, number> = {};
  for (const [option, field] of Object.entries(SECONDS)) {
    const text = values[option as keyof typeof values] as string | undefined;
    if (text === undefined) continue;
    const secs = Number(text);
    if (text.trim() === '' || !Number.isFinite(secs) || secs < 0) {
      out.err(`sluice plan: --${option} expects a number of seconds >= 0, got "${text}"`);
      return 2;
    }
    flags[field] = secs;
  }
  if (values['health-check-failures'] !== undefined) {
    const n = Number(values['health-check-failures']);
    if (!Number.isInteger(n) || n < 1) {
      out.err(`sluice plan: --health-check-failures expects a whole number >= 1, got "${values['health-check-failures']}"`);
      return 2;
    }
    flags.healthCheckFailures = n;
  }
  if (flags.healthCheckIntervalSecs === 0) {
    out.err('sluice plan: --health-check-interval expects a number of seconds > 0');
    return 2;
  }
  const platform = values.platform;
  if (platform !== 'all' && !(PLATFORMS as readonly string[]).includes(platform)) {
    out.err(`sluice plan: --platform expects ${PLATFORMS.join(', ')} or all, got "${platform}"`);
    return 2;
  }
  const output = values.output;
  if (!['text', 'json', 'values'].includes(output)) {
    out.err(`sluice plan: -o expects text, json or values, got "${output}"`);
    return 2;
  }
  const file = values.config ?? (process.env.SLUICE_CONFIG || undefined);
  if (output === 'values' && !file) {
    out.err('sluice plan: -o values needs --config FILE (the chart mounts that config)');
    return 2;
  }
  let loaded;
  try {
    loaded = loadForPlan(file);
  } catch (error) {
    if (error instanceof ConfigError) {
      out.err(`sluice: ${error.message}`);
      return 1;
    }
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
      out.err(`sluice plan: cannot read ${file}`);
      return 1;
    }
    throw error;
  }
  const source = file ?? 'embedded default';
  const result = plan(sizingFromConfig(loaded.config), { ...flags, platforms: platform === 'all' ? PLATFORMS : [platform as Platform] });
  if (output === 'json') out.out(JSON.stringify(jsonReport(source, result, loaded.placeholders), null, 2));
  else if (output === 'values') out.out(valuesReport(source, file!, result).trimEnd());
  else for (const line of textReport(source, result, loaded.placeholders)) out.out(line);
  // Warnings go to stderr too when the output is meant for a file or a program.
  if (output !== 'text') for (const w of result.warnings) out.err(`warning (${w.code}): ${w.message}`);
  return values.strict && result.warnings.length > 0 ? 1 : 0;
}
