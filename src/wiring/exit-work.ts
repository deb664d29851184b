// L9: the work of each exit step of one process, in the order of lifecycle/exit-steps.ts (what
// `sluice plan` counts): the pools, the snapshot write, the usage commit, the tracing flush and
// the status page's last event side by side; then the workers; then the logs.
import { redactUrlsIn } from '../config/redact-url.ts';
import type { StatusFeed } from '../admin/status-feed.ts';
import type { Supervision } from '../cluster/supervision.ts';
import type { Gateway } from '../gateway/gateway.ts';
import { ExitSequence, exitBoundMs } from '../lifecycle/exit-steps.ts';
import type { Lifecycle } from '../lifecycle/lifecycle.ts';
import type { Limiter } from '../limits/limiter.ts';
import type { BudgetAlerts } from '../limits/budget-alerts.ts';
import type { ProcessLedger } from './ledger.ts';
import type { BudgetSpend } from './budgets-view.ts';
import type { ConfigSourceControl } from '../running-gateway.ts';
import { flushLogger, type Logger } from '../telemetry/logger.ts';
import type { Tracing } from '../telemetry/tracing.ts';

export interface ExitParts {
  readonly gateway: Gateway;
  readonly configSource: ConfigSourceControl | undefined;
  readonly limiter: Limiter;
  readonly budgetAlerts: BudgetAlerts | undefined;
  /** `GET /budgets`' own Redis client, in a supervisor of workers on Redis (closed with the limits). */
  readonly budgetSpend: BudgetSpend;
  readonly ledger: ProcessLedger | undefined;
  readonly tracing: Tracing | undefined;
  readonly statusFeed: StatusFeed;
  readonly lifecycle: Lifecycle;
  readonly supervision: Supervision;
  readonly logger: Logger;
}

/** The lifecycle's `shutdown` hook: runs the exit steps; a step that fails is logged (`exit_step_failed`) and the others go on. */
export function exitWork(parts: ExitParts): (forced: boolean) => Promise<void> {
  const { gateway, limiter, budgetAlerts, budgetSpend, ledger, tracing, statusFeed, lifecycle, supervision, logger } = parts;
  return (forced) =>
    new ExitSequence()
      .set('upstream_pools', () => Promise.allSettled([...gateway.routing.providers.values()].map((p) => (forced ? p.destroy() : p.close()))))
      .set('snapshot_write', () => closeSource(parts.configSource, logger))
      .set('usage_commit', () => Promise.all([closeLimits(limiter, budgetAlerts), budgetSpend.close()]))
      .set('ledger_flush', (forced) => flushLedger(ledger, forced, logger))
      .set('tracing_flush', () => tracing?.shutdown())
      .set('status_page', () => statusFeed.close(lifecycle.forcedReason))
      .set('workers', () => supervision.stopped())
      .set('logs', () => flushLogger(logger))
      .run(forced, (step, error) => logger.warn({ event: 'exit_step_failed', step, reason: redactUrlsIn(String((error as Error)?.message ?? error)) }, `the exit step ${step} failed; the others went on`));
}

/** L9: the usage is committed to the limit store; the budget alerts then read their last totals and get what is left of the bound. */
async function closeLimits(limiter: Limiter, alerts: BudgetAlerts | undefined): Promise<void> {
  const startedAt = Date.now();
  await limiter.close(exitBoundMs('usage_commit'));
  await alerts?.close(Math.max(0, exitBoundMs('usage_commit') - (Date.now() - startedAt)));
}

/** L9: the ledger's spool is fsynced and shipped within its bound; what the store did not take is in the spool for the next start. */
async function flushLedger(ledger: ProcessLedger | undefined, forced: boolean, logger: Logger): Promise<void> {
  if (!ledger) return;
  const boundMs = exitBoundMs('ledger_flush');
  const { shipped, left } = await ledger.flush(boundMs, forced);
  if (left > 0) logger.warn({ event: 'ledger_flush_incomplete', shipped, left }, `the ledger's store did not take ${left} record(s) within ${boundMs / 1000} s; they stay in the spool and are shipped by the next start`);
}

/** L9: the etcd client closes; a snapshot write in progress gets its bound once nothing is in flight. */
async function closeSource(source: ConfigSourceControl | undefined, logger: Logger): Promise<void> {
  if (!source) return;
  const startedAt = Date.now();
  const boundMs = exitBoundMs('snapshot_write');
  if (!(await source.close(boundMs))) {
    logger.warn({ event: 'snapshot_flush_timeout', waited_ms: Date.now() - startedAt }, `the snapshot cache write did not finish within ${boundMs / 1000} s; exiting without it (the previous snapshot stays whole)`);
  }
}
