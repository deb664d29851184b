// What the proxy reports, turned into metrics and log lines: attempts, retries, failures told to
// clients, circuits opened, a retry budget spent, a provider's model list failing, a bug.
import type { GatewayEnvironment, RoutingEvents } from '../gateway/gateway.ts';
import type { Clock } from '../lifecycle/clock.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { Metrics } from '../telemetry/metrics.ts';

export type GatewayReports = Pick<GatewayEnvironment, 'upstreamError' | 'reportBug' | 'attempted' | 'retried' | 'budgetExhausted' | 'cooldownStarted'>;

export function gatewayReports(metrics: Metrics, logger: Logger, clock: Clock): GatewayReports {
  // An outage can spend the retry budget on every request: said once a minute per route, counted always.
  const budgetWarned = new Map<string, number>();
  const warnBudget = (route: string) => {
    const now = clock.now();
    if ((budgetWarned.get(route) ?? -Infinity) > now - 60_000) return;
    budgetWarned.set(route, now);
    logger.warn({ event: 'retry_budget_exhausted', route }, `route "${route}": the retry budget is spent; failures are returned without retry (sluice_route_retries_total{kind="budget_exhausted"} counts them)`);
  };
  return {
    upstreamError: (provider, kind) => metrics.upstreamErrors.labels(provider, kind).inc(),
    reportBug: (error, requestId) => logger.error({ event: 'handler_error', request_id: requestId, err: error }, 'request handler failed'),
    attempted: (provider, model, outcome) => metrics.attempts.add(1, provider, model, outcome),
    retried: (route, kind) => metrics.retries.add(1, route, kind),
    budgetExhausted: (route) => {
      metrics.retries.add(1, route, 'budget_exhausted');
      warnBudget(route);
    },
    cooldownStarted: (provider, model, failure, ms) =>
      logger.warn({ event: 'target_cooldown', provider, model, failure, cooldown_ms: Math.round(ms) }, `target ${provider}/${model} left out for ${Math.round(ms / 1000)} s after ${failure} failures`),
  };
}

/** A provider's model list, or a cloud provider's credentials, that cannot be had are logged once, until they can again. */
export function routingEvents(logger: Logger): RoutingEvents {
  return {
    credentialsFailed: (provider, source, reason) =>
      logger.error({ event: 'provider_credentials_failed', provider, source, reason }, `provider "${provider}": its ${source} could not be obtained; its requests fail with 503 until they can`),
    credentialsRecovered: (provider, source) => logger.info({ event: 'provider_credentials_recovered', provider, source }, `provider "${provider}": its ${source} can be obtained again`),
    failed: (provider, reason) =>
      logger.warn({ event: 'models_list_failed', provider, reason }, `could not fetch the model list of provider "${provider}"; /v1/models lists the exact names only`),
    recovered: (provider) => logger.info({ event: 'models_list_recovered', provider }, `the model list of provider "${provider}" is available again`),
  };
}
