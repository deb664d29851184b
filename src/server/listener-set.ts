// The listeners of one process, by name: opened at start, each stopped when the drain says, and
// changed by a reload as one of its participants (E6a): what a new config keeps, replaces, adds
// and removes.
import type { Config } from '../config/schema.ts';
import type { BoundListener } from '../lifecycle/process-info.ts';
import type { ConfigChange, PreparedChange, ReloadParticipant } from '../reload/transaction.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { Listener } from './listener.ts';

type ListenerConfig = Config['listeners'][number];

export class ListenerSet implements ReloadParticipant {
  readonly name = 'listeners';
  readonly #create: (listener: ListenerConfig, config: Config) => Listener;
  readonly #log: Logger;
  #listeners: Listener[] = [];

  /** `create` makes a listener of a config (not listening yet). */
  constructor(create: (listener: ListenerConfig, config: Config) => Listener, log: Logger) {
    this.#create = create;
    this.#log = log;
  }

  /** The listeners serving now. */
  get all(): readonly Listener[] {
    return this.#listeners;
  }

  /** Where each listens (`host:port`, the port bound when 0 was asked). */
  bound(): BoundListener[] {
    return this.#listeners.map((l) => ({ name: l.name, role: l.role, address: l.boundAddress }));
  }

  /** Opens the listeners of `config`; if one cannot, those open stop accepting and the error is thrown. */
  async open(config: Config): Promise<void> {
    this.#listeners = config.listeners.map((l) => this.#create(l, config));
    try {
      for (const listener of this.#listeners) {
        await listener.listen();
        this.logStarted({ name: listener.name, role: listener.role, address: listener.boundAddress });
      }
    } catch (error) {
      this.stopAccepting();
      throw error;
    }
  }

  /** L3, drain_listeners: the listeners `include` names (all without it) stop accepting. */
  stopAccepting(include?: (name: string) => boolean): void {
    for (const listener of this.#listeners) {
      if (include && !include(listener.name)) continue;
      listener.stopAccepting();
    }
  }

  /** The `listener_started` line (also for a worker's listeners, announced by its supervisor). */
  logStarted(l: BoundListener, extra: object = {}): void {
    this.#log.info({ event: 'listener_started', listener: l.name, role: l.role, address: l.address, ...extra }, `listening on ${l.address} (${l.role})`);
  }

  /**
   * Diffs the listeners by name. One whose address, TLS-ness and role stay keeps its socket and
   * only takes new protocol settings (`prepareReconfigure()`, which loads the new TLS material and
   * throws when it cannot). Any other gets a new `Listener`, whose socket comes from
   * `ListenerSockets` (the one already open on that address when it replaces a listener there:
   * nothing is refused) with its connections held until the commit. Throws, having let go of what
   * it acquired, when a step fails.
   */
  async prepare({ own: next, trigger }: ConfigChange): Promise<PreparedChange> {
    const old = new Map(this.#listeners.map((l) => [l.name, l]));
    const opened: Listener[] = [];
    const reconfigure: ((trigger: string) => void)[] = [];
    const kept: Listener[] = [];
    try {
      for (const l of next.listeners) {
        const existing = old.get(l.name);
        const step = existing?.prepareReconfigure(l, next.downstream);
        if (existing && step) {
          old.delete(l.name);
          reconfigure.push(step);
          kept.push(existing);
          continue;
        }
        const fresh = this.#create(l, next);
        opened.push(fresh);
        kept.push(fresh);
        await fresh.listen({ hold: true });
      }
    } catch (error) {
      for (const listener of opened) listener.discard();
      throw error;
    }
    // Old listeners not kept (replaced or removed).
    const removed = [...old.values()];
    return {
      abort: () => {
        for (const listener of opened) listener.discard();
      },
      commit: () => this.#commit(next, trigger, reconfigure, removed, opened, kept),
    };
  }

  /** The old listeners let go (each stops taking connections; a socket another still holds stays open), the new ones take theirs. */
  #commit(next: Config, trigger: string, reconfigure: ((trigger: string) => void)[], removed: Listener[], opened: Listener[], kept: Listener[]): void {
    for (const step of reconfigure) step(trigger);
    for (const g of removed) {
      g.stopAccepting();
      g.retireConnections();
      const replaced = next.listeners.some((l) => l.name === g.name);
      if (!replaced) this.#log.info({ event: 'listener_removed', listener: g.name }, 'listener removed; its connections are retired');
    }
    for (const fresh of opened) {
      fresh.release();
      this.logStarted({ name: fresh.name, role: fresh.role, address: fresh.boundAddress });
    }
    this.#listeners = kept;
  }
}
