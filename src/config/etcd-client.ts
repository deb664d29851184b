// The etcd3 client as the etcd source uses it, and what etcd3 does not do by itself.
//
// etcd's default auth tokens ("simple" tokens) live in one member's memory: an etcd restart, or a
// token left idle for --auth-token-ttl (5 min), invalidates them. etcd3 signs in again when a unary
// call meets `invalid auth token`, but never for a watch: etcd creates and cancels the watch at
// once, and etcd3's watch manager then waits for ever for the creation it sent, so no later watch
// on that client is created either. The only way out through etcd3's public API is a new client:
// a new sign-in and a new watch stream (`renew()`). The previous client is closed once its unary
// calls in progress have had their time (an admin write in progress finishes on it).
import { Etcd3, type IOptions } from 'etcd3';
import { noop } from 'cockatiel';
import { readFileSync } from 'node:fs';
import type { Config } from './schema.ts';

export type EtcdSettings = NonNullable<Config['etcd']>;

/**
 * How long gRPC waits before it connects again to an endpoint that refused or dropped it (doubling
 * from the first to the most). gRPC's own default grows to 2 minutes, which would leave a gateway
 * behind etcd long after etcd is back.
 */
export const RECONNECT_FIRST_MS = 250;
export const RECONNECT_MOST_MS = 1000;

/** A live connection is pinged after this long without a frame, and given up if the ping is not answered in time (a silent partition). */
const KEEPALIVE_MS = 10_000;
const KEEPALIVE_TIMEOUT_MS = 5_000;

export class EtcdConnection {
  readonly #settings: EtcdSettings;
  #client: Etcd3;
  /** Clients replaced by `renew()`, closed after the request timeout. */
  readonly #retiring = new Map<Etcd3, NodeJS.Timeout>();

  constructor(settings: EtcdSettings) {
    this.#settings = settings;
    this.#client = this.#build();
  }

  /** The client to use now (a later `renew()` replaces it: do not keep it). */
  get client(): Etcd3 {
    return this.#client;
  }

  /** A new client: a new sign-in, new connections, a new watch stream. The previous one is closed after the request timeout. */
  renew(): void {
    const previous = this.#client;
    this.#client = this.#build();
    const timer = setTimeout(() => {
      this.#retiring.delete(previous);
      previous.close();
    }, this.#settings.request_timeout_ms);
    timer.unref();
    this.#retiring.set(previous, timer);
  }

  close(): void {
    for (const [client, timer] of this.#retiring) {
      clearTimeout(timer);
      client.close();
    }
    this.#retiring.clear();
    this.#client.close();
  }

  #build(): Etcd3 {
    const settings = this.#settings;
    const tls = settings.tls;
    const options: IOptions = {
      hosts: [...settings.endpoints],
      dialTimeout: settings.dial_timeout_ms,
      ...(settings.username ? { auth: { username: settings.username, password: settings.password ?? '' } } : {}),
      ...(tls
        ? {
            credentials: {
              rootCertificate: readFileSync(tls.ca_file),
              ...(tls.key_file ? { privateKey: readFileSync(tls.key_file) } : {}),
              ...(tls.cert_file ? { certChain: readFileSync(tls.cert_file) } : {}),
            },
          }
        : {}),
      grpcOptions: {
        'grpc.initial_reconnect_backoff_ms': RECONNECT_FIRST_MS,
        'grpc.max_reconnect_backoff_ms': RECONNECT_MOST_MS,
        'grpc.keepalive_time_ms': KEEPALIVE_MS,
        'grpc.keepalive_timeout_ms': KEEPALIVE_TIMEOUT_MS,
      },
      // Unary calls fail after the timeout and are not retried here: a read is retried by the
      // sync loop, and a write's failure is the admin API caller's to see (503).
      defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + settings.request_timeout_ms }),
      // No retries and no circuit breaker: etcd3's default breaker refuses every call for 5 s after
      // three failures, which would keep a gateway away from an etcd that is back. The sync loop
      // has its own back-off.
      faultHandling: { global: noop, host: () => noop },
    };
    return new Etcd3(options);
  }
}

/**
 * Whether etcd refused the credentials' token rather than the request: an invalid or expired
 * token (etcd restarted, or the token idled out), or none where one is needed (`user name is
 * empty`). Signing in again may help; a wrong password (`authentication failed`) or a missing
 * permission does not, and is not one.
 */
export function isTokenRefusal(error: unknown): boolean {
  return TOKEN_REFUSAL.test(messageOf(error));
}

/**
 * Whether etcd answered and refused: the credentials, the token or the permission. Asking again
 * soon will not help (each sign-in costs etcd a password hash), unlike etcd not answering.
 */
export function isRefusal(error: unknown): boolean {
  const message = messageOf(error);
  return TOKEN_REFUSAL.test(message) || /authentication failed|authentication is not enabled|permission denied|user name not found|role is not granted/i.test(message);
}

const TOKEN_REFUSAL = /invalid auth token|auth token is expired|token (has )?expired|user name is empty/i;

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
