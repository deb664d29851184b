// A cloud credential that expires (AWS temporary keys, a Google or Microsoft Entra ID access
// token), kept fresh for the requests that need it: fetched once and shared, refreshed in the
// background before it expires so that no request waits for a refresh while the one it has is
// still good, and a failed fetch said once (until a fetch succeeds again) and answered with a
// clear error instead of a request sent without credentials.
import type { Clock } from '../lifecycle/clock.ts';
import { errors } from '../api/errors.ts';

/** What a credential source gives: a value, and when it stops being accepted (wall-clock ms since the epoch; Infinity: never). */
export interface Expiring<T> {
  readonly value: T;
  readonly expiresAt: number;
}

/** What a provider reports of its credentials. */
export interface CredentialEvents {
  /** A fetch failed; called once until a fetch succeeds again. `reason` names the failure, never a secret. */
  credentialsFailed(provider: string, source: string, reason: string): void;
  /** A fetch that had failed succeeded again. */
  credentialsRecovered(provider: string, source: string): void;
}


export interface RefreshingCredentialOptions<T> {
  /** The provider's name, for the errors and the events. */
  readonly provider: string;
  /** What the credential is, for people (`AWS credentials`, `Google access token`). */
  readonly source: string;
  readonly fetch: () => Promise<Expiring<T>>;
  readonly events: CredentialEvents;
  /** Monotonic time, for the retry pause; wall-clock expiry times are compared with `wallNow`. */
  readonly clock: Clock;
  readonly wallNow?: () => number;
}

/** A refresh starts this long before expiry, or at half the lifetime when that is shorter. */
const REFRESH_AHEAD_MS = 5 * 60_000;
/** After a failed fetch, requests fail at once for this long instead of each asking again. */
const RETRY_PAUSE_MS = 1000;

export class RefreshingCredential<T> {
  readonly #options: RefreshingCredentialOptions<T>;
  readonly #wallNow: () => number;
  #current: Expiring<T> | undefined;
  /** When the current credential was had (wall clock), to find half its lifetime. */
  #since = 0;
  #fetching: Promise<Expiring<T>> | undefined;
  /** The monotonic time before which no new fetch starts after a failure. */
  #pausedUntil = -Infinity;
  #failing = false;

  constructor(options: RefreshingCredentialOptions<T>) {
    this.#options = options;
    this.#wallNow = options.wallNow ?? Date.now;
  }

  /**
   * The credential for a request now. A fresh one is given at once; one near its expiry is given
   * while a refresh starts; none, or an expired one, waits for the fetch. Rejects with
   * the gateway's 503 (`upstream_credentials_unavailable`) when none can be had.
   */
  get(): Promise<T> {
    const now = this.#wallNow();
    const current = this.#current;
    if (current !== undefined && current.expiresAt > now) {
      if (now >= this.#refreshAt(current)) void this.#fetch().catch(() => undefined);
      return Promise.resolve(current.value);
    }
    return this.#fetch().then((fresh) => fresh.value);
  }

  /** When a refresh of `credential` starts. */
  #refreshAt(credential: Expiring<T>): number {
    const lifetime = credential.expiresAt - this.#since;
    return credential.expiresAt - Math.min(REFRESH_AHEAD_MS, lifetime / 2);
  }

  #fetch(): Promise<Expiring<T>> {
    if (this.#fetching) return this.#fetching;
    const { clock, provider, source, events } = this.#options;
    if (clock.now() < this.#pausedUntil) return Promise.reject(errors.upstreamCredentials(provider, source));
    const fetching = this.#options.fetch().then(
      (fresh) => {
        this.#fetching = undefined;
        this.#current = fresh;
        this.#since = this.#wallNow();
        if (this.#failing) {
          this.#failing = false;
          events.credentialsRecovered(provider, source);
        }
        return fresh;
      },
      (error: unknown) => {
        this.#fetching = undefined;
        this.#pausedUntil = clock.now() + RETRY_PAUSE_MS;
        if (!this.#failing) {
          this.#failing = true;
          events.credentialsFailed(provider, source, reasonOf(error));
        }
        throw errors.upstreamCredentials(provider, source);
      },
    );
    this.#fetching = fetching;
    return fetching;
  }
}

/** A failure's name and message, bounded; SDK messages name files, roles and endpoints, not secrets. */
function reasonOf(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.length > 300 ? `${text.slice(0, 300)}…` : text;
}
