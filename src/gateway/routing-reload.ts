// E6: the routing's part of a reload. A new `Routing` snapshot is built from the new config
// (unchanged providers and their targets' states carried over); the commit swaps it in between
// requests and closes the pools of removed or changed providers (undici's `close()` lets the
// requests in progress finish); an abort closes the providers built for nothing.
import type { Config } from '../config/schema.ts';
import type { ConfigChange, PreparedChange, ReloadParticipant } from '../reload/transaction.ts';
import { createRouting, type Gateway, type Routing, type RoutingEvents } from './gateway.ts';


/** Closes the providers of `from` that `to` does not keep. */
function closeNotKept(from: Routing, to: Routing): void {
  for (const [name, provider] of from.providers) if (to.providers.get(name) !== provider) void provider.close();
}

export class RoutingReload implements ReloadParticipant {
  readonly name = 'routing';
  readonly #gateway: Gateway;
  readonly #events: RoutingEvents;
  /** The config the gateway's routing was built from. */
  #config: Config;

  constructor(gateway: Gateway, config: Config, events: RoutingEvents) {
    this.#gateway = gateway;
    this.#config = config;
    this.#events = events;
  }

  prepare({ own: next }: ConfigChange): PreparedChange {
    const gateway = this.#gateway;
    const routing = createRouting(next, this.#events, { config: this.#config, routing: gateway.routing });
    return {
      commit: () => {
        const previous = gateway.routing;
        gateway.setRouting(routing);
        this.#config = next;
        closeNotKept(previous, routing);
      },
      // Providers built for the new config only: nothing was routed to them.
      abort: () => closeNotKept(routing, gateway.routing),
    };
  }
}
