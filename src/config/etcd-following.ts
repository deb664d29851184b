// Whether the gateway follows etcd now, said wherever an operator looks. Following means that its
// watch is created and open: a change written to etcd arrives. Anything else (etcd down, the watch
// refused, the credentials refused, nothing read yet) is not following, however the resources
// serving were obtained: the gateway keeps serving them, and a change made meanwhile is not
// applied until it follows again. That is logged when it starts (`etcd_unavailable`), every
// 30 s while it lasts (`etcd_not_following`, with how long and the last error), and when it ends
// (`etcd_connected`); /server_info (`config_source`), the status stream and page, and
// `sluice_etcd_connected` show it.
import { redactUrlsIn } from './redact-url.ts';

/** What /server_info and the status stream show of it. */
/** The lines the etcd source writes (the process's logger; config/ knows no more of it). */
export interface EtcdLog {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

export interface FollowingInfo {
  readonly following: boolean;
  /** When the current state began (ISO 8601). */
  readonly since: string;
  /** Why it does not follow (the last failure), or null while it follows. */
  readonly last_error: string | null;
}

export interface FollowingOptions {
  log: EtcdLog;
  endpoints: readonly string[];
  /** Strings that must never appear in a message (the etcd password). */
  secrets: readonly string[];
  /** The revision of the resources serving, and whether there are any yet. */
  serving(): { revision: number; loaded: boolean };
  /** How often the warning is repeated while not following (the default: 30 s). */
  warnEveryMs?: number;
}

export const WARN_EVERY_MS = 30_000;
/** An error message is cut to this length (an etcd answer may be long). */
const ERROR_CHARS = 300;

export class EtcdFollowing {
  readonly #options: FollowingOptions;
  #following = false;
  /** Whether anything was logged yet (the first failure is said even though it follows nothing yet). */
  #said = false;
  #since = Date.now();
  #lastError: string | null = null;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(options: FollowingOptions) {
    this.#options = options;
  }

  get following(): boolean {
    return this.#following;
  }

  info(): FollowingInfo {
    return { following: this.#following, since: new Date(this.#since).toISOString(), last_error: this.#following ? null : this.#lastError };
  }

  /** The watch is created: changes arrive again. */
  resumed(): void {
    if (this.#closed || this.#following) return;
    const { revision } = this.#options.serving();
    const after = this.#said ? Math.round((Date.now() - this.#since) / 1000) : undefined;
    this.#options.log.info({ event: 'etcd_connected', endpoints: this.#options.endpoints, revision, ...(after !== undefined ? { after_secs: after } : {}) }, after !== undefined ? `following etcd again after ${after} s` : 'following etcd');
    this.#following = true;
    this.#said = true;
    this.#since = Date.now();
    this.#lastError = null;
    this.#stopWarning();
  }

  /** The watch ended, or a read or a watch failed: not following (again, or still). */
  lost(error: unknown): void {
    if (this.#closed) return;
    this.#lastError = this.#describe(error);
    if (this.#following || !this.#said) {
      const { revision, loaded } = this.#options.serving();
      this.#options.log.warn(
        { event: 'etcd_unavailable', endpoints: this.#options.endpoints, reason: this.#lastError, serving: loaded ? `revision ${revision}` : 'nothing yet' },
        loaded ? 'etcd is not followed; the gateway keeps serving what it has and retries' : 'etcd is not answering and there is no snapshot: not ready until it answers',
      );
      if (this.#following) this.#since = Date.now();
      this.#following = false;
      this.#said = true;
    }
    if (!this.#timer) {
      this.#timer = setInterval(() => this.#warn(), this.#options.warnEveryMs ?? WARN_EVERY_MS);
      this.#timer.unref();
    }
  }

  close(): void {
    this.#closed = true;
    this.#stopWarning();
  }

  #warn(): void {
    if (this.#following || this.#closed) return this.#stopWarning();
    const { revision, loaded } = this.#options.serving();
    const seconds = Math.round((Date.now() - this.#since) / 1000);
    this.#options.log.warn(
      { event: 'etcd_not_following', for_secs: seconds, last_error: this.#lastError, revision, endpoints: this.#options.endpoints },
      `not following etcd for ${seconds} s (${this.#lastError ?? 'no answer yet'}): ${loaded ? `serving revision ${revision}; changes made in etcd meanwhile are not applied` : 'nothing to serve yet'}`,
    );
  }

  #stopWarning(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** The error's message, cut, with any secret taken out (and any URL it quotes redacted). */
  #describe(error: unknown): string {
    let text = redactUrlsIn((error instanceof Error ? error.message : String(error)) || 'unknown error');
    for (const secret of this.#options.secrets) if (secret !== '') text = text.split(secret).join('[redacted]');
    return text.length > ERROR_CHARS ? `${text.slice(0, ERROR_CHARS)}…` : text;
  }
}
