// E4: the health check failed on purpose by the admin API (`/healthcheck/fail`), and restored.
// While failed, readiness is 503 and every `default` listener retires its connections at once.
import type { LifecycleHooks, LifecycleLog } from './contracts.ts';
import type { ListenerScopes } from './listener-scopes.ts';

export class HealthOverride {
  #failed = false;
  readonly #log: LifecycleLog;
  readonly #hooks: LifecycleHooks;
  readonly #scopes: ListenerScopes;
  readonly #numbers: () => { in_flight: number; open_connections: number };

  constructor(log: LifecycleLog, hooks: LifecycleHooks, scopes: ListenerScopes, numbers: () => { in_flight: number; open_connections: number }) {
    this.#log = log;
    this.#hooks = hooks;
    this.#scopes = scopes;
    this.#numbers = numbers;
  }

  get failed(): boolean {
    return this.#failed;
  }

  /** Must a response on `listener` close its connection because of the override? (`modify_only` ones are spared.) */
  retires(listener: string | undefined): boolean {
    return this.#failed && !this.#scopes.modifyOnly(listener);
  }

  /** Readiness fails and every `default` listener retires its connections at once (no drain time). */
  fail(): boolean {
    if (this.#failed) return false;
    this.#failed = true;
    this.#log.info({ event: 'healthcheck_failed', ...this.#numbers() }, 'health check failed by the admin API');
    this.#scopes.retireNow((listener) => !this.#scopes.modifyOnly(listener));
    this.#hooks.commanded?.({ kind: 'healthcheck', failed: true });
    return true;
  }

  /** Readiness passes again (when not draining); connections already told to go stay told. */
  restore(): boolean {
    if (!this.#failed) return false;
    this.#failed = false;
    this.#log.info({ event: 'healthcheck_ok' }, 'health check restored by the admin API');
    this.#hooks.commanded?.({ kind: 'healthcheck', failed: false });
    return true;
  }
}
