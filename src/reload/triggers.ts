// E6: every trigger of a reload (SIGHUP, a change of the file, a change in etcd) goes through one
// procedure: the whole config is read again and applied, or refused with the last good one serving.
// A reload in progress is followed by one more (not one per change) when changes came meanwhile.
import { ConfigError } from '../config/load.ts';
import type { Config } from '../config/schema.ts';
import type { Logger } from '../telemetry/logger.ts';

export interface ReloadTriggerOptions {
  /** The whole config again (throws `ConfigError` for one that is not valid). */
  load(trigger: string): Config;
  /** Applies a valid config all or nothing; resolves false when it could not (reported by the gateway). */
  apply(next: Config, trigger: string): Promise<boolean>;
  /** A config was refused: counted and shown (the gateway's `reloadRejected`). */
  rejected(trigger: string, reason: string): void;
  /** A config was applied. */
  applied(next: Config): void;
  /** Whether the process is draining: no reload then. */
  draining(): boolean;
  log: Logger;
}

/** Runs one reload at a time; triggers that come meanwhile become one more reload. */
export class ReloadTriggers {
  readonly #options: ReloadTriggerOptions;
  #reloading = false;
  #again: string | undefined;

  constructor(options: ReloadTriggerOptions) {
    this.#options = options;
  }

  /** A trigger: reloads now, or once the reload in progress is over. */
  request(trigger: string): void {
    if (this.#reloading) {
      // A change of the file or a SIGHUP is not hidden by an etcd change after it (that one reads only etcd's).
      if (this.#again === undefined || this.#again === 'etcd') this.#again = trigger;
      return;
    }
    const settled = () => {
      this.#reloading = false;
      const next = this.#again;
      this.#again = undefined;
      if (next !== undefined) this.request(next);
    };
    this.#reloading = true;
    let running: Promise<void> | undefined;
    try {
      running = this.#reloadOnce(trigger);
    } finally {
      if (running) void running.finally(settled);
      else settled();
    }
  }

  #reloadOnce(trigger: string): Promise<void> | undefined {
    const { log } = this.#options;
    if (this.#options.draining()) {
      // A file change while draining is not worth a line per save.
      if (trigger === 'SIGHUP') log.warn({ event: 'config_reload_ignored', reason: 'draining', trigger }, 'SIGHUP ignored: the process is draining');
      return;
    }
    let next: Config;
    try {
      next = this.#options.load(trigger);
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      this.#options.rejected(trigger, error.problems.map((p) => (p.path ? `${p.path}: ${p.message}` : p.message)).join('; '));
      log.error({ event: 'config_reload_failed', trigger, source: error.source, problems: error.problems }, 'new configuration rejected; the last good one keeps serving');
      return;
    }
    // E6a: all or nothing; a reload that cannot be applied is logged and counted by the gateway and
    // changes nothing.
    return this.#options.apply(next, trigger).then(
      (applied) => {
        if (applied) this.#options.applied(next);
      },
      (error: unknown) => {
        // A bug, not a refused config: the gateway reports its own failures.
        log.error({ event: 'handler_error', err: error }, 'the reload failed unexpectedly');
      },
    );
  }
}
