// E5: how each listener takes part in drains, and what runs when one is retired at once (an
// immediate drain, a failed health check: its HTTP/2 sessions get their GOAWAY).
import type { DrainPlan } from './drain-status.ts';
import type { ListenerScope } from './contracts.ts';

export class ListenerScopes {
  readonly #scopes = new Map<string, ListenerScope>();
  readonly #retireCallbacks = new Set<{ listener: string; callback: () => void }>();

  register(name: string, scope: ListenerScope): void {
    this.#scopes.set(name, scope);
  }

  get(listener: string | undefined): ListenerScope | undefined {
    return listener === undefined ? undefined : this.#scopes.get(listener);
  }

  /** `modify_only` listeners: retired only when changed or removed (and at the end of a drain that exits). */
  modifyOnly(listener: string | undefined): boolean {
    return this.get(listener)?.drainType === 'modify_only';
  }

  onRetire(listener: string, callback: () => void): () => void {
    const entry = { listener, callback };
    this.#retireCallbacks.add(entry);
    return () => this.#retireCallbacks.delete(entry);
  }

  /** Runs the retire callbacks of the listeners `include` selects. */
  retireNow(include: (listener: string) => boolean): void {
    for (const { listener, callback } of this.#retireCallbacks) if (include(listener)) callback();
  }

  /** Whether `plan` covers `listener` (E4: inbound only; E5: modify_only ones only when included). */
  inPlan(plan: DrainPlan, listener: string | undefined): boolean {
    const scope = this.get(listener);
    if (!scope) return true;
    if (scope.drainType === 'modify_only' && !plan.includeModifyOnly) return false;
    return !(plan.inboundOnly && scope.direction === 'outbound');
  }
}
