// D1–D3, L8, L9: the platform's numbers sized from the config, pure (`sluice plan` prints them;
// the Helm chart in deploy/helm computes the same grace from its values, and a test checks that
// both agree). Every number comes with the reason it is what it is.
//
//   drain  = window + longest work             (L2/L5: the listeners accept for the window, and work
//                                                started at its end may run for the longest work)
//            or, with max_drain_secs, at most max_drain_secs + 1 s for the forced end (L8)
//   grace  = preStop + drain + exit allowance (L9) + margin         (terminationGracePeriodSeconds)
//   stop   = drain + exit allowance + margin                        (TimeoutStopSec, docker stop -t)
import type { Config } from '../config/schema.ts';
import { isLoopback, parseAddress } from '../config/schema.ts';
import { EXIT_STEPS, type ExitStep, type ExitStepName } from '../lifecycle/exit-steps.ts';
/** L8: a forced end (max_drain_secs, a second signal) finishes within about a second (Lifecycle.force()). */
export const FORCED_END_SECS = 1;

export const PLATFORMS = ['kubernetes', 'systemd', 'docker'] as const;
export type Platform = (typeof PLATFORMS)[number];

/** What the config says that matters for sizing (read by `sizingFromConfig`). */
export interface ConfigSizing {
  /** shutdown.min_drain_secs. */
  windowSecs: number;
  /** shutdown.max_drain_secs (0: none). */
  maxDrainSecs: number;
  /** `workers` is not 1: a supervisor and its workers, two exit steps one after the other. */
  group: boolean;
  /** etcd configured: a snapshot write may be under way at the exit (≤ 5 s). */
  etcd: boolean;
  /** limits.store redis: usage is committed to Redis at the exit (≤ 5 s). */
  redisLimits: boolean;
  /** A usage ledger: its spool is flushed and shipped at the exit (≤ 5 s). */
  ledger: boolean;
  /** limits.store memory with something to count (a limit, a key's limits or budget; in etcd mode, the keys to come). */
  memoryLimits: boolean;
  /** The tracing exporter's flush bound at the exit, in seconds (0: no tracing). */
  tracingFlushSecs: number;
  /** An admin listener serves the status page (admin.status_page): its watchers are told at the exit (≤ 1 s). */
  statusPage: boolean;
  hotRestart: boolean;
  parentShutdownSecs: number;
  /** The first proxy listener's port and whether it binds loopback only, and whether it has TLS. */
  proxy: { port: number; loopback: boolean; tls: boolean } | undefined;
}

/** What the config cannot know: the flags of `sluice plan`. */
export interface PlanFlags {
  /** The longest request, stream or session a rollout must preserve, in seconds (undefined: assumed). */
  longestSecs?: number | undefined;
  /** The balancer's health-check interval (the readiness probe's periodSeconds in Kubernetes). */
  healthCheckIntervalSecs?: number | undefined;
  /** Failed checks before the balancer stops routing (failureThreshold). */
  healthCheckFailures?: number | undefined;
  /** A preStop sleep before SIGTERM (Kubernetes only). */
  preStopSecs?: number | undefined;
  marginSecs?: number | undefined;
  /** The grace the platform gives today, to check it. */
  graceSecs?: number | undefined;
  platforms?: readonly Platform[] | undefined;
}

export const DEFAULTS = {
  /** When --longest-stream is not given (said so in the output). */
  longestSecs: 60,
  healthCheckIntervalSecs: 5,
  healthCheckFailures: 2,
  preStopSecs: 0,
  marginSecs: 5,
} as const;

export interface Term {
  name: string;
  secs: number;
}

export interface Warning {
  code: string;
  message: string;
}

export interface Probe {
  path: '/readyz' | '/livez';
  periodSeconds: number;
  failureThreshold: number;
  timeoutSeconds: number;
}

export interface Plan {
  windowSecs: number;
  maxDrainSecs: number;
  longestSecs: number;
  longestAssumed: boolean;
  preStopSecs: number;
  marginSecs: number;
  /** L9, with the steps it is made of (each step the longest of what runs in parallel in it). */
  exitAllowanceSecs: number;
  exitAllowanceWhy: string;
  /** How long until a health-checking balancer stops routing here (interval × failures). */
  detectionSecs: number;
  detectionGiven: boolean;
  /** From the signal until the listeners have closed and nothing is in flight. */
  drainSecs: number;
  drainWhy: string;
  /** terminationGracePeriodSeconds and its terms. */
  grace: { secs: number; terms: Term[] };
  /** TimeoutStopSec and `docker stop -t`: no preStop. */
  stop: { secs: number; terms: Term[] };
  probes: { readiness: Probe; liveness: Probe; startup: Probe; port: number | undefined; scheme: 'HTTP' | 'HTTPS' };
  platforms: readonly Platform[];
  warnings: Warning[];
  notes: string[];
}

/** The sizing-relevant part of a validated config. */
export function sizingFromConfig(config: Config): ConfigSizing {
  const proxy = config.listeners.find((l) => l.role === 'proxy');
  const address = proxy ? parseAddress(proxy.address) : undefined;
  // tracing (read at start): on, the exporter's flush at the exit is bounded by flush_timeout_ms (default 2000).
  const tracingFlushSecs = config.tracing.enabled ? config.tracing.flush_timeout_ms / 1000 : 0;
  return {
    windowSecs: config.shutdown.min_drain_secs,
    maxDrainSecs: config.shutdown.max_drain_secs,
    group: config.workers !== 1,
    etcd: config.etcd !== undefined,
    redisLimits: config.limits.store === 'redis',
    ledger: config.ledger !== undefined && config.ledger.enabled,
    memoryLimits:
      config.limits.store === 'memory' &&
      (config.etcd !== undefined || config.limits.global !== undefined || Object.keys(config.limits.models).length > 0 || config.keys.some((k) => typeof k !== 'string' && (k.limits !== undefined || k.budget !== undefined))),
    tracingFlushSecs,
    statusPage: config.admin.status_page && config.listeners.some((l) => l.role === 'admin'),
    hotRestart: config.hot_restart.enabled,
    parentShutdownSecs: config.shutdown.parent_shutdown_secs,
    proxy: address && proxy ? { port: address.port, loopback: isLoopback(address.host), tls: proxy.tls !== undefined } : undefined,
  };
}

const sum = (terms: readonly Term[]) => terms.reduce((total, t) => total + t.secs, 0);
/** Platforms take whole seconds: rounded up, never down. */
const whole = (secs: number) => Math.ceil(secs - 1e-9);
const fmt = (secs: number) => String(Math.round(secs * 1000) / 1000);

/**
 * L9: what the exit waits for once nothing is in flight: the steps of lifecycle/exit-steps.ts that
 * have something to do in this config, with their bounds. In one process, the snapshot write (etcd),
 * the usage commit (Redis), the tracing flush and the status page's last event run side by side.
 * In a group, each worker's exit (its Redis commit, its tracing flush: the workers serve, the
 * supervisor does not) ends before the supervisor's own (the snapshot: the etcd client is the
 * supervisor's; the status page: it serves the admin listeners), because a living worker holds the
 * supervisor's drain open: two steps, one after the other.
 */
export function exitAllowance(c: ConfigSizing): { secs: number; why: string } {
  const used: Record<ExitStepName, boolean> = {
    upstream_pools: true,
    snapshot_write: c.etcd,
    usage_commit: c.redisLimits,
    ledger_flush: c.ledger,
    tracing_flush: c.tracingFlushSecs > 0,
    status_page: c.statusPage,
    workers: c.group,
    logs: true,
  };
  const bound = (step: ExitStep) => (step.boundSecs === 'tracing.flush_timeout_ms' ? c.tracingFlushSecs : step.boundSecs);
  const waits = (side?: ExitStep['side']) => EXIT_STEPS.filter((step) => used[step.name] && bound(step) > 0 && (side === undefined || step.side === side));
  // Side by side within a stage (the longest bounds it), one stage after the other.
  const stage = (steps: readonly ExitStep[]) => {
    const stages = [...new Set(steps.map((step) => step.stage))].map((n) => steps.filter((step) => step.stage === n));
    return {
      secs: stages.reduce((total, parts) => total + Math.max(...parts.map(bound)), 0),
      what: stages.map((parts) => parts.map((step) => `${step.label} ≤ ${fmt(bound(step))} s`).join(' ∥ ')).join(', then '),
    };
  };
  const nothing = { secs: 0, why: 'nothing to flush (no etcd snapshot, no Redis usage commit, no usage ledger, no tracing export, no status page)' };
  if (!c.group) {
    const only = stage(waits());
    return only.secs === 0 ? nothing : { secs: only.secs, why: only.what };
  }
  const workers = stage(waits('serving'));
  const supervisor = stage(waits('holder'));
  const steps = [workers.secs > 0 ? `workers: ${workers.what}` : '', supervisor.secs > 0 ? `then supervisor: ${supervisor.what}` : ''].filter(Boolean);
  const secs = workers.secs + supervisor.secs;
  return secs === 0 ? nothing : { secs, why: steps.join(', ') };
}

/** How long readiness takes to stop traffic, and the probes to ask for. */
function probes(c: ConfigSizing, intervalSecs: number, failures: number): Plan['probes'] {
  return {
    readiness: { path: '/readyz', periodSeconds: intervalSecs, failureThreshold: failures, timeoutSeconds: Math.max(1, Math.min(intervalSecs, 2)) },
    // Lenient: liveness decides a restart, and restarting a gateway kills the work it carries (L1).
    liveness: { path: '/livez', periodSeconds: 10, failureThreshold: 6, timeoutSeconds: 5 },
    // A start may wait for etcd or the workers: up to a minute before liveness counts.
    startup: { path: '/livez', periodSeconds: 1, failureThreshold: 60, timeoutSeconds: 1 },
    port: c.proxy?.port,
    scheme: c.proxy?.tls ? 'HTTPS' : 'HTTP',
  };
}

export function plan(c: ConfigSizing, flags: PlanFlags = {}): Plan {
  const platforms = flags.platforms ?? PLATFORMS;
  const longestAssumed = flags.longestSecs === undefined;
  const longestSecs = flags.longestSecs ?? DEFAULTS.longestSecs;
  const detectionGiven = flags.healthCheckIntervalSecs !== undefined || flags.healthCheckFailures !== undefined;
  const interval = flags.healthCheckIntervalSecs ?? DEFAULTS.healthCheckIntervalSecs;
  const failures = flags.healthCheckFailures ?? DEFAULTS.healthCheckFailures;
  const detectionSecs = interval * failures;
  const preStopSecs = flags.preStopSecs ?? DEFAULTS.preStopSecs;
  const marginSecs = flags.marginSecs ?? DEFAULTS.marginSecs;
  const window = c.windowSecs;
  const exit = exitAllowance(c);

  // L5: the listeners close when the window is over and nothing is in flight; work that started
  // at the window's end may run `longest`. L8: max_drain_secs (from the signal) ends it sooner.
  const unbounded = window + longestSecs;
  const bounded = c.maxDrainSecs > 0 && c.maxDrainSecs + FORCED_END_SECS < unbounded;
  const drainTerms: Term[] = bounded
    ? [
        { name: 'max_drain_secs', secs: c.maxDrainSecs },
        { name: 'forced end', secs: FORCED_END_SECS },
      ]
    : [
        { name: 'window', secs: window },
        { name: 'longest work', secs: longestSecs },
      ];
  const drainSecs = sum(drainTerms);
  const drainWhy = bounded
    ? `max_drain_secs ${fmt(c.maxDrainSecs)} + forced end ${FORCED_END_SECS} (L8: it ends the drain before window ${fmt(window)} + longest work ${fmt(longestSecs)})`
    : `window ${fmt(window)} + longest work ${fmt(longestSecs)} (L5: work started at the end of the window still finishes)`;
  const tail: Term[] = [
    { name: 'exit allowance', secs: exit.secs },
    { name: 'margin', secs: marginSecs },
  ];
  const stopTerms = [...drainTerms, ...tail];
  const graceTerms = [{ name: 'preStop', secs: preStopSecs }, ...stopTerms];

  const result: Plan = {
    windowSecs: window,
    maxDrainSecs: c.maxDrainSecs,
    longestSecs,
    longestAssumed,
    preStopSecs,
    marginSecs,
    exitAllowanceSecs: exit.secs,
    exitAllowanceWhy: exit.why,
    detectionSecs,
    detectionGiven,
    drainSecs,
    drainWhy,
    grace: { secs: whole(sum(graceTerms)), terms: graceTerms },
    stop: { secs: whole(sum(stopTerms)), terms: stopTerms },
    probes: probes(c, interval, failures),
    platforms,
    warnings: [],
    notes: [],
  };
  result.warnings = warnings(c, result, flags);
  if (longestAssumed) result.notes.push(`longest work assumed ${DEFAULTS.longestSecs} s: give --longest-stream with the longest request, stream or WebSocket session a rollout must let finish`);
  if (!detectionGiven && platforms.includes('kubernetes')) result.notes.push(`balancer detection assumed ${interval} s × ${failures} (the readiness probe below); give --health-check-interval and --health-check-failures for a balancer with its own checks`);
  if (preStopSecs > 0 && !platforms.includes('kubernetes')) result.notes.push('preStop applies to Kubernetes only: TimeoutStopSec and docker stop -t leave it out');
  if (c.memoryLimits) {
    result.notes.push(
      'limits.store memory: the counters (requests and tokens per minute, concurrency, budgets spent) are this instance\'s. A hot restart carries them to the next generation; a restart, a rolling update (a new pod) or another replica starts from zero. limits.store redis keeps them across those and shares them',
    );
  }
  return result;
}

function warnings(c: ConfigSizing, p: Plan, flags: PlanFlags): Warning[] {
  const out: Warning[] = [];
  const kubernetes = p.platforms.includes('kubernetes');
  const containers = kubernetes || p.platforms.includes('docker');
  const behindBalancer = kubernetes || p.detectionGiven;
  if (p.windowSecs === 0 && behindBalancer) {
    out.push({
      code: 'window_zero_behind_balancer',
      message: `shutdown.min_drain_secs is 0: the listeners close as soon as nothing is in flight, while the balancer still routes here for up to ${fmt(p.detectionSecs)} s (refused connections). 0 is only for a single instance with nothing in front (D3)`,
    });
  } else if (behindBalancer && p.windowSecs < p.detectionSecs) {
    out.push({
      code: 'window_below_detection',
      message: `the window (shutdown.min_drain_secs ${fmt(p.windowSecs)}) is shorter than the balancer's detection time ${fmt(p.detectionSecs)} s (health-check interval × failures): it may route new connections here after the listeners closed. Raise min_drain_secs to at least ${fmt(p.detectionSecs)}, or check more often`,
    });
  }
  if (c.maxDrainSecs > 0 && c.maxDrainSecs < p.windowSecs) {
    out.push({ code: 'max_drain_below_window', message: `shutdown.max_drain_secs ${fmt(c.maxDrainSecs)} is shorter than the window ${fmt(p.windowSecs)}: the drain is forced before the balancer has stopped routing` });
  }
  if (c.maxDrainSecs > 0 && c.maxDrainSecs < p.windowSecs + p.longestSecs) {
    out.push({
      code: 'max_drain_cuts_longest',
      message: `shutdown.max_drain_secs ${fmt(c.maxDrainSecs)} is shorter than window ${fmt(p.windowSecs)} + longest work ${fmt(p.longestSecs)}: work of that length started late in the window is cut at max_drain_secs (with an error event, L8)`,
    });
  }
  if (flags.graceSecs !== undefined) {
    const needed = kubernetes ? p.grace.secs : p.stop.secs;
    const name = kubernetes ? 'terminationGracePeriodSeconds' : 'TimeoutStopSec / docker stop -t';
    if (flags.graceSecs < needed) {
      out.push({ code: 'grace_too_short', message: `the platform's grace ${fmt(flags.graceSecs)} s is shorter than the ${needed} s needed (${name}): what is still running then is killed (SIGKILL)` });
    }
  }
  if (c.hotRestart && kubernetes) {
    out.push({ code: 'hot_restart_in_kubernetes', message: 'hot_restart.enabled: in Kubernetes a rolling update replaces pods (D1); leave hot restart off there' });
  }
  if (c.hotRestart && c.parentShutdownSecs < p.longestSecs) {
    out.push({ code: 'parent_shutdown_cuts_longest', message: `shutdown.parent_shutdown_secs ${fmt(c.parentShutdownSecs)} is shorter than the longest work ${fmt(p.longestSecs)}: a hot restart cuts it in the old generation (E7)` });
  }
  if (containers && c.proxy?.loopback) {
    out.push({ code: 'proxy_on_loopback', message: 'the proxy listener binds a loopback address: in a container neither the probes nor the balancer reach it; bind 0.0.0.0 (or [::])' });
  }
  return out;
}
