// How each reload went, told everywhere an operator looks: the log line, the two metrics
// (`sluice_config_reloads_total`, `sluice_config_last_reload_successful`) and the status page's
// last reload.
import type { Logger } from '../telemetry/logger.ts';
import type { Metrics } from '../telemetry/metrics.ts';

/** How the last reload went (none yet: null). */
export interface LastReload {
  at: string;
  trigger: string;
  outcome: 'success' | 'failure';
  reason?: string;
}

export class ReloadReport {
  readonly #metrics: Pick<Metrics, 'configReloads' | 'configLastReloadSuccessful'>;
  readonly #log: Logger;
  #last: LastReload | null = null;

  constructor(metrics: Pick<Metrics, 'configReloads' | 'configLastReloadSuccessful'>, log: Logger) {
    this.#metrics = metrics;
    this.#log = log;
  }

  /** The last reload, for the status page (none yet: null). */
  get last(): LastReload | null {
    return this.#last;
  }

  /** A reload switched; `fields` say what serves now. */
  succeeded(trigger: string, fields: object): void {
    this.#count(trigger, 'success');
    this.#log.info({ event: 'config_reloaded', trigger, ...fields }, 'configuration reloaded');
  }

  /** A valid config could not be applied: the previous one keeps serving. `fields` go on the line. */
  failed(trigger: string, reason: string, fields: object = {}): void {
    this.#count(trigger, 'failure', reason);
    this.#log.error({ event: 'config_reload_failed', reason, trigger, ...fields }, `applying the new configuration failed; the previous one keeps serving: ${reason}`);
  }

  /** A config that is not valid was refused (the caller logged its problems). */
  rejected(trigger = 'unknown', reason = 'the new configuration is not valid'): void {
    this.#count(trigger, 'failure', reason);
  }

  /** A worker's reload that another process of the group could not prepare. */
  abandoned(): void {
    this.#log.info({ event: 'config_reload_abandoned', reason: 'another process of the group could not prepare it' }, 'reload abandoned; the previous configuration keeps serving');
  }

  #count(trigger: string, outcome: LastReload['outcome'], reason?: string): void {
    this.#metrics.configReloads.labels(outcome).inc();
    this.#metrics.configLastReloadSuccessful.set(outcome === 'success' ? 1 : 0);
    this.#last = { at: new Date().toISOString(), trigger, outcome, ...(reason !== undefined ? { reason } : {}) };
  }
}
