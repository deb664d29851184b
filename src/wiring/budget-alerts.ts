// `budget_alerts`: after a request's spend is settled on its budgets, their totals are read from
// the limit store (off the request's path, one read in flight per budget) and handed to the
// alerts, which send each crossing of a threshold once (limits/budget-alerts.ts).
import type { Config } from '../config/schema.ts';
import { BudgetAlerts, memoryClaims, type AlertClaims } from '../limits/budget-alerts.ts';
import type { BudgetOwner } from '../limits/budgets.ts';
import type { Limiter } from '../limits/limiter.ts';
import type { BudgetLimit } from '../limits/store.ts';
import type { Logger } from '../telemetry/logger.ts';

/** Watches the limiter's spend and alerts; undefined when `budget_alerts` is not configured. `claims`: the ledger's store when there is one. */
export function watchBudgets(config: Config, limiter: Limiter, logger: Logger, claims: AlertClaims | undefined): BudgetAlerts | undefined {
  const settings = config.budget_alerts;
  if (settings === undefined) return undefined;
  const alerts = new BudgetAlerts(
    {
      url: settings.url,
      thresholds: [...settings.thresholds].sort((a, b) => a - b),
      ...(settings.headers ? { headers: settings.headers } : {}),
      ...(settings.secret ? { secret: settings.secret } : {}),
      timeoutMs: settings.timeout_ms,
      maxAttempts: settings.max_attempts,
    },
    claims ?? memoryClaims(),
    {
      sent: (alert) => logger.info({ event: 'budget_alert_sent', scope: alert.scope, name: alert.name, threshold_percent: alert.threshold }, `budget alert sent: ${alert.scope} "${alert.name}" crossed ${alert.threshold} % of its budget`),
      failed: (alert, error, attempts, final) =>
        (final ? logger.warn.bind(logger) : logger.debug.bind(logger))(
          { event: final ? 'budget_alert_failed' : 'budget_alert_retry', scope: alert.scope, name: alert.name, threshold_percent: alert.threshold, attempts, reason: error },
          final ? `budget alert for ${alert.scope} "${alert.name}" (${alert.threshold} %) given up after ${attempts} attempts: ${error}` : `budget alert for ${alert.scope} "${alert.name}" failed (${error}); retrying`,
        ),
    },
  );
  const reading = new Map<string, { owner: BudgetOwner; period: BudgetLimit; again: boolean }>();
  const read = (id: string): void => {
    const entry = reading.get(id)!;
    Promise.resolve(limiter.store.spent([id])).then(
      ([spent]) => {
        if (entry.owner.scope !== 'user') {
          alerts.observe({ scope: entry.owner.scope, name: entry.owner.name, periodId: id, period: entry.owner.budget.period, budgetMicros: entry.period.maxMicros, spentMicros: spent ?? 0, resetAt: entry.period.resetAt });
        }
        settle(id, entry);
      },
      () => settle(id, entry),
    );
  };
  const settle = (id: string, entry: { again: boolean }): void => {
    if (entry.again) {
      entry.again = false;
      read(id);
    } else reading.delete(id);
  };
  limiter.spendWatch = (owners, periods) => {
    owners.forEach((owner, i) => {
      // Per-user budgets are many and chosen by clients: they are enforced, not alerted on.
      if (owner.scope === 'user') return;
      const period = periods[i]!;
      const current = reading.get(period.id);
      if (current) {
        current.again = true;
        return;
      }
      reading.set(period.id, { owner, period, again: false });
      read(period.id);
    });
  };
  return alerts;
}
