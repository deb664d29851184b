// The process's limiter, wired to its metrics and log lines: on the store the config names, or the
// one given (a worker's: its supervisor's memory; a generation's: the counters handed over, E7).
import type { Config } from '../config/schema.ts';
import { redactUrl, redactUrlsIn } from '../config/redact-url.ts';
import { Limiter } from '../limits/limiter.ts';
import type { LimitEvents } from '../limits/limit-policy.ts';
import { openStore } from '../limits/open-store.ts';
import type { LimitStore } from '../limits/store.ts';
import type { Clock } from '../lifecycle/clock.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { Metrics } from '../telemetry/metrics.ts';

/** Where a limit store is, as its log lines say it: Redis's URL redacted, or `memory`. */
export function limitStoreName(settings: Config['limits']): string {
  return settings.store === 'redis' ? redactUrl(settings.redis!.url) : settings.store;
}

/** A limit store's errors as `limit_store_error` lines, at most one every 10 s (they come with every request while it is away). */
export function limitStoreErrorLog(logger: Logger, clock: Clock): (where: string, fields: object, error: Error) => void {
  let lastLogged = -Infinity;
  return (where, fields, error) => {
    const now = clock.now();
    if (now - lastLogged < 10_000) return;
    lastLogged = now;
    const reason = redactUrlsIn(error.message);
    logger.warn({ event: 'limit_store_error', store: where, reason, ...fields }, `the limit store (${where}) failed: ${reason}`);
  };
}

/** Store errors are counted always and logged once every 10 s. Warns when Redis cannot be reached at start. */
export async function createLimiter(config: Config, logger: Logger, metrics: Metrics, given: LimitStore | undefined, clock: Clock): Promise<Limiter> {
  const where = limitStoreName(config.limits);
  const logStoreError = limitStoreErrorLog(logger, clock);
  const logError = (fields: object, error: Error) => logStoreError(where, fields, error);
  const store = given ?? (await openStore(config.limits, (error) => logError({ operation: 'connect' }, error)));
  const events: LimitEvents = {
    refused: (key, scope, limit) => metrics.rateLimited.add(1, key, scope, limit),
    storeError: (operation, outcome, error) => {
      metrics.limitStoreErrors.labels(operation, outcome).inc();
      logError({ operation, outcome }, error);
    },
    notCommitted: (key, tokens, micros) =>
      logger.error({ event: 'usage_not_committed', key_name: key, tokens, cost_usd: micros / 1e6 }, `usage of key "${key}" could not be written to the limit store before the exit`),
  };
  // The budgets' days and months are the calendar's; renewals, retries and the exit's deadline the clock's.
  const limiter = new Limiter(store, events, Date.now, clock);
  if (store.ready && !(await store.ready(config.limits.redis!.connect_timeout_ms))) {
    logger.warn({ event: 'limit_store_unreachable', store: redactUrl(config.limits.redis!.url), on_store_error: config.limits.on_store_error }, 'Redis for the limits cannot be reached yet; limits.on_store_error applies until it can');
  }
  return limiter;
}
