// A proxy listener that lets any request in (no client key configured, none required) on an address
// other than loopback: whoever reaches it spends the providers' credentials. Said at start and
// again each time a reload opens one (keys removed, a listener moved off loopback, require_key
// turned off); a reload that leaves it as it was says nothing more.
import { isLoopback, parseAddress, requiresClientKey, type Config } from '../config/schema.ts';

/** Why a gateway that requires a key and has none serves nothing: its `ready` line, its readiness check, `sluice validate`. */
export const NO_CLIENT_KEYS = 'auth.require_key is on and no client key exists: every proxy request gets 401 no_client_keys';

export interface OpenListener {
  readonly name: string;
  /** As configured (`0.0.0.0:8080`). */
  readonly address: string;
}

/** The proxy listeners of `config` on a non-loopback address that need no client key. */
export function openProxyListeners(config: Config): OpenListener[] {
  if (config.keys.length > 0 || requiresClientKey(config)) return [];
  return config.listeners
    .filter((l) => l.role === 'proxy' && !isLoopback(parseAddress(l.address)?.host ?? ''))
    .map((l) => ({ name: l.name, address: l.address }));
}

/** What is said of an open listener: the `proxy_open` warning at start, and `sluice validate`'s. */
export function openProxyMessage(listener: OpenListener): string {
  return `proxy listener "${listener.name}" on ${listener.address} needs no client key: anyone who can reach it can use every configured provider (add keys, or set auth.require_key: true)`;
}

/** Calls `warn` for each open listener of a config that was not open in the config before it. */
export class OpenProxyWarnings {
  readonly #warn: (listener: OpenListener) => void;
  #open = new Set<string>();

  constructor(warn: (listener: OpenListener) => void) {
    this.#warn = warn;
  }

  check(config: Config): void {
    const open = new Set<string>();
    for (const listener of openProxyListeners(config)) {
      const id = `${listener.name}\u0000${listener.address}`;
      open.add(id);
      if (!this.#open.has(id)) this.#warn(listener);
    }
    this.#open = open;
  }
}
