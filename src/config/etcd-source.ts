// The etcd source: the bootstrap file keeps what belongs to the host (listeners, admin, TLS,
// workers, `etcd`), and the resources (providers, models, teams, keys) live in etcd, one key each
// under the prefix. They are read once, then watched from the revision last applied, so that a
// reconnect misses nothing; a watch that etcd cancels (its history compacted) is followed by a
// full read again. What is applied is kept in the snapshot cache (L9), which a start reads before
// etcd answers. It is also the admin API's store: writes go to etcd as compare-and-swap
// transactions and come back through the watch like any other change. The client, and why it is
// renewed when etcd refuses its auth token, is in `etcd-client.ts`; whether it follows etcd now,
// and how that is said, in `etcd-following.ts`.
import type { Etcd3, IKeyValue, Watcher } from 'etcd3';
import type { ConfigSource } from './source.ts';
import type { Config } from './schema.ts';
import { checkResource, parseResourceKey, resourceKey, ResourceSet, type Checked, type Rejection, type Resource, type ResourceKind } from './resources.ts';
import type { ResourceVariables } from './resource-variables.ts';
import type { SnapshotCache } from './snapshot.ts';
import { ResourceStoreError, type ResourceStore, type WriteResult } from './store.ts';
import { EtcdConnection, isRefusal, isTokenRefusal, type EtcdSettings } from './etcd-client.ts';
import { EtcdFollowing, type EtcdLog, type FollowingInfo } from './etcd-following.ts';
import { redactUrl, redactUrlsIn } from './redact-url.ts';

export type { EtcdSettings } from './etcd-client.ts';

export interface EtcdSourceOptions {
  /** The bootstrap file. */
  bootstrap: ConfigSource;
  /** `etcd` of the bootstrap file as it was at start (read at start only). */
  settings: EtcdSettings;
  snapshot: SnapshotCache | undefined;
  log: EtcdLog;
  /** Watch the bootstrap file too (`reload.watch`). */
  watchFile: boolean;
  env?: NodeJS.ProcessEnv;
}

/** What the metrics show of the etcd source. */
export interface SourceState {
  /** The etcd revision of the resources serving. */
  readonly revision: number;
  /** Whether it follows etcd now (its watch is open): `sluice_etcd_connected`. */
  readonly connected: boolean;
  /** The same, with since when and the last error, for /server_info and the status stream. */
  readonly following: FollowingInfo;
  readonly loaded: boolean;
  /** Resources rejected since the start, by kind. */
  readonly rejected: ReadonlyMap<ResourceKind, number>;
  /** Full reads of every key (the first, and one after each compaction that cancelled the watch). */
  readonly fullReads: number;
}

/**
 * After a failure the sync loop waits, doubling from the least to the most (each wait drawn
 * between half and all of it, so that a fleet does not retry in step): a gateway is back on an
 * etcd that is back within about a second.
 */
const BACKOFF_MIN_MS = 250;
const BACKOFF_MAX_MS = 1000;
/** After etcd refused (the credentials, a permission, a token signed in again): fixing that takes a person, and each sign-in costs etcd a password hash. */
const REFUSED_RETRY_MS = 10_000;

/** A watch that etcd refused or did not create in time: etcd3's watch manager may be stuck on it, so the client is renewed. */
class WatchNotCreated extends Error {}

export class EtcdSource implements ConfigSource, ResourceStore {
  readonly name: string;
  readonly mode = 'etcd' as const;
  readonly readOnly = undefined;
  readonly #options: EtcdSourceOptions;
  readonly #settings: EtcdSettings;
  readonly #etcd: EtcdConnection;
  readonly #following: EtcdFollowing;
  readonly #resources = new ResourceSet();
  readonly #rejectedCounts = new Map<ResourceKind, number>();
  /** Rejections found when composing (a model of a missing provider), logged once each until they go. */
  #reported = new Map<string, string>();
  #loaded = false;
  /** The bootstrap file's config as last read. */
  #bootstrap: Config | undefined;
  /** The revision of the resources in each config `load()` gave (to know what serves once it is applied). */
  readonly #revisionOf = new WeakMap<Config, number>();
  /** The revision of the resources serving: that of the last config the gateway applied. */
  #servedRevision = 0;
  #fullReads = 0;
  #closed = false;
  #changed: ((trigger: string) => void) | undefined;
  #watcher: Watcher | undefined;
  #wake: (() => void) | undefined;
  /** What a resource may read of this process's environment: the variables `etcd.allowed_env` lists (read at start), in secret-bearing fields. */
  readonly #variables: ResourceVariables;
  /** The endpoints as they are logged and shown (the source's name, `resources_pending`): never a URL's userinfo or query. */
  readonly #shownEndpoints: readonly string[];

  constructor(options: EtcdSourceOptions) {
    this.#options = options;
    this.#settings = options.settings;
    this.#variables = { env: options.env ?? process.env, allowed: new Set(options.settings.allowed_env) };
    this.#shownEndpoints = options.settings.endpoints.map(redactUrl);
    this.name = `${options.bootstrap.name} + etcd ${this.#shownEndpoints.join(',')} ${options.settings.prefix}`;
    this.#etcd = new EtcdConnection(options.settings);
    this.#following = new EtcdFollowing({
      log: options.log,
      endpoints: this.#shownEndpoints,
      secrets: [options.settings.password ?? ''],
      serving: () => ({ revision: this.#servedRevision, loaded: this.#loaded }),
    });
  }

  get state(): SourceState {
    return {
      revision: this.#servedRevision,
      connected: this.#following.following,
      following: this.#following.info(),
      loaded: this.#loaded,
      rejected: this.#rejectedCounts,
      fullReads: this.#fullReads,
    };
  }

  /**
   * Applies the snapshot, if there is one, then starts following etcd. Without a snapshot it
   * waits for etcd's first answer (or its first failure) so that a start with etcd up serves at
   * once; with one, it does not wait at all.
   */
  async start(): Promise<void> {
    const { snapshot, log } = this.#options;
    const saved = await snapshot?.read();
    if (saved) {
      this.#reject(this.#resources.replaceAll(saved.resources, saved.revision, this.#env));
      this.#loaded = true;
      log.info({ event: 'snapshot_loaded', path: snapshot!.path, revision: saved.revision, resources: this.#resources.size }, `applied the snapshot cache (etcd revision ${saved.revision}); following etcd from there`);
    }
    const first = this.#follow();
    if (!saved) await first;
  }

  /**
   * The config now: the bootstrap file completed with the resources. Throws a ConfigError. The
   * file is read again unless the trigger is a change in etcd (a fleet's frequent case: no disk
   * read, one validation instead of two).
   */
  load(trigger?: string): Config {
    const reread = trigger !== 'etcd' || !this.#bootstrap;
    const bootstrap = reread ? this.#options.bootstrap.load() : this.#bootstrap!;
    this.#bootstrap = bootstrap;
    if (reread && JSON.stringify(bootstrap.etcd) !== JSON.stringify(this.#settings)) {
      this.#options.log.warn({ event: 'config_reload_partial', setting: 'etcd', reason: 'read at start' }, 'the etcd settings are read at start: this change applies when the gateway is restarted');
    }
    if (!this.#loaded) {
      return { ...bootstrap, resources_pending: `waiting for etcd (${this.#shownEndpoints.join(', ')}); there is no snapshot cache to start from` };
    }
    const { config, rejected } = this.#resources.compose(bootstrap, this.name);
    this.#revisionOf.set(config, this.#resources.revision);
    // Logged once each (every reload composes again), counted once each.
    const now = new Map(rejected.map((r) => [r.key, r.reason]));
    this.#reject(rejected.filter((r) => this.#reported.get(r.key) !== r.reason));
    this.#reported = now;
    return config;
  }

  watch(changed: (trigger: string) => void): () => void {
    this.#changed = changed;
    const unwatchFile = this.#options.watchFile ? this.#options.bootstrap.watch(changed) : () => {};
    return () => {
      this.#changed = undefined;
      unwatchFile();
    };
  }

  /** L9: stops following etcd and gives a snapshot write in progress up to `flushMs`; false if it did not finish. */
  async close(flushMs: number): Promise<boolean> {
    this.#closed = true;
    this.#following.close();
    this.#wake?.();
    const watcher = this.#watcher;
    this.#watcher = undefined;
    // A watch etcd3 is stuck on never answers its cancel: the client's close ends it.
    await Promise.race([watcher?.cancel().catch(() => {}), new Promise((resolve) => setTimeout(resolve, 100))]);
    this.#etcd.close();
    return this.#options.snapshot ? this.#options.snapshot.flush(flushMs) : true;
  }

  get #env(): ResourceVariables {
    return this.#variables;
  }

  // -------------------------------------------------------------------------------------------
  // Following etcd

  /**
   * Reads everything, then watches from the revision applied; after a failure, backs off and
   * resumes from there. A watch that etcd refused or did not create renews the client (see
   * `etcd-client.ts`); a refused auth token is tried again at once, with a new sign-in. Resolves
   * after the first read (or its failure).
   */
  #follow(): Promise<void> {
    let first!: () => void;
    const firstDone = new Promise<void>((resolve) => (first = resolve));
    void (async () => {
      let backoff = BACKOFF_MIN_MS;
      let listed = false;
      /** A sign-in again was tried at once since the last watch created: the next one waits its turn. */
      let signedInAgain = false;
      while (!this.#closed) {
        let wait = backoff;
        try {
          if (!listed) {
            await this.#list();
            listed = true;
            first();
          }
          const ended = await this.#watchFrom(this.#resources.revision + 1, () => {
            backoff = BACKOFF_MIN_MS;
            signedInAgain = false;
          });
          if (this.#closed) break;
          if (ended === 'compacted') {
            // The history since the revision applied is gone: read everything again, at once.
            this.#options.log.warn({ event: 'etcd_watch_compacted', revision: this.#resources.revision }, 'etcd compacted the history this gateway was following; reading every resource again');
            listed = false;
            continue;
          }
          // The watch stream ended (etcd went away, or the connection broke): said now, resumed after the back-off.
          this.#following.lost(new Error('the watch stream ended'));
        } catch (error) {
          first();
          if (this.#closed) break;
          this.#following.lost(error);
          if (isRefusal(error)) wait = REFUSED_RETRY_MS;
          const token = isTokenRefusal(error);
          if (token || error instanceof WatchNotCreated) this.#etcd.renew();
          if (token) {
            this.#options.log.info({ event: 'etcd_reauthenticated', reason: this.#following.info().last_error }, 'etcd refused the auth token (etcd restarted, or the token expired): signing in again');
            if (!signedInAgain) {
              signedInAgain = true;
              continue;
            }
          }
        }
        if (this.#closed) break;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, wait * (0.5 + Math.random() / 2));
          this.#wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      }
      first();
    })();
    return firstDone;
  }

  /** A full read of the prefix: the resources become exactly what etcd holds. */
  async #list(): Promise<void> {
    const { prefix } = this.#settings;
    const response = await this.#etcd.client.getAll().prefix(prefix).exec();
    this.#fullReads++;
    const entries = new Map<string, { value: string; revision: number }>();
    for (const kv of response.kvs) entries.set(kv.key.toString().slice(prefix.length), { value: kv.value.toString(), revision: Number(kv.mod_revision) });
    const before = JSON.stringify([...this.#resources.entries()]);
    const previous = this.#resources.revision;
    this.#reject(this.#resources.replaceAll(entries, Number(response.header.revision), this.#env));
    const changed = !this.#loaded || JSON.stringify([...this.#resources.entries()]) !== before;
    // Nothing changed since what serves: it serves this revision too.
    if (!changed && this.#servedRevision >= previous) this.#servedRevision = this.#resources.revision;
    this.#loaded = true;
    this.#applied(changed);
  }

  /**
   * Watches from `revision` until the watch breaks ('broken') or etcd cancels it for compaction
   * ('compacted'); `created` is called once etcd has created it. Rejects when it is not created:
   * a WatchNotCreated when etcd refused it or did not answer within the request timeout.
   */
  #watchFrom(revision: number, created: () => void): Promise<'broken' | 'compacted'> {
    const { prefix } = this.#settings;
    return new Promise((resolve, reject) => {
      const watcher = this.#etcd.client.watch().prefix(prefix).startRevision(String(revision)).watcher();
      this.#watcher = watcher;
      let settled = false;
      let isCreated = false;
      // etcd3 would resume by itself from its own idea of the revision: this source resumes from
      // the revision it applied, with a new watcher.
      const end = (outcome: 'broken' | 'compacted' | Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (this.#watcher === watcher) this.#watcher = undefined;
        void watcher.cancel().catch(() => {});
        if (outcome instanceof Error) reject(outcome);
        else resolve(outcome);
      };
      const timer = setTimeout(() => end(new WatchNotCreated(`etcd did not create the watch within ${this.#settings.request_timeout_ms} ms`)), this.#settings.request_timeout_ms);
      watcher.on('connected', () => {
        if (settled) return;
        isCreated = true;
        clearTimeout(timer);
        created();
        this.#following.resumed();
      });
      watcher.on('data', (response: { events: { type: string; kv: IKeyValue }[]; header: { revision: string }; compact_revision?: string }) => {
        if (settled) return;
        const changes = response.events.map((event) => ({
          key: event.kv.key.toString().slice(prefix.length),
          value: event.type === 'Delete' ? undefined : event.kv.value.toString(),
          revision: Number(event.kv.mod_revision),
        }));
        if (changes.length === 0) return;
        this.#reject(this.#resources.apply(changes, this.#env));
        this.#resources.revision = Math.max(this.#resources.revision, ...changes.map((c) => c.revision));
        this.#applied(true);
      });
      watcher.on('disconnected', (error: Error) => end(isCreated ? 'broken' : error));
      // After its creation, etcd cancels a watch only when its start revision was compacted away. At
      // its creation it refuses one (created and cancelled at once: an invalid auth token, a missing
      // permission), and etcd3 then waits for ever for that creation: the client is renewed.
      watcher.on('error', (error: Error) => end(isCreated || /compact/i.test(error.message) ? 'compacted' : new WatchNotCreated(error.message)));
    });
  }

  /** After a read or a watch event: the snapshot records the set and its revision; the gateway is told when the set changed. */
  #applied(changed: boolean): void {
    this.#options.snapshot?.write({ resources: this.#resources.entries(), revision: this.#resources.revision });
    if (changed) this.#changed?.('etcd');
  }

  #reject(rejected: readonly Rejection[]): void {
    for (const r of rejected) {
      const kind = parseResourceKey(r.key)?.kind;
      if (kind) this.#rejectedCounts.set(kind, (this.#rejectedCounts.get(kind) ?? 0) + 1);
      this.#options.log.error({ event: 'resource_rejected', resource: r.key, reason: r.reason }, `resource ${r.key} rejected (every other change applies): ${r.reason}`);
    }
  }

  // -------------------------------------------------------------------------------------------
  // The admin API's store

  list(kind: ResourceKind): { items: Resource[]; revision: number } {
    return { items: this.#resources.list(kind), revision: this.#resources.revision };
  }

  get(kind: ResourceKind, name: string): Resource | undefined {
    return this.#resources.get(kind, name);
  }

  /** Whether `document` would be accepted as `kind/name` here (a write is checked before it goes to etcd). */
  check(kind: ResourceKind, name: string, document: unknown): Checked {
    return checkResource(kind, name, document, 0, this.#env);
  }

  /** What `kind/name` is in etcd now: its JSON and revision (0: absent). */
  async current(kind: ResourceKind, name: string): Promise<{ value: string | undefined; revision: number }> {
    const kv = await this.#call((client) => client.get(this.#settings.prefix + resourceKey(kind, name)).exec());
    const found = kv.kvs[0];
    return found ? { value: found.value.toString(), revision: Number(found.mod_revision) } : { value: undefined, revision: 0 };
  }

  /** Writes `stored` as `kind/name` if the key's revision is still `expected` (0: absent). */
  async put(kind: ResourceKind, name: string, stored: object, expected: number): Promise<WriteResult> {
    const key = this.#settings.prefix + resourceKey(kind, name);
    const result = await this.#call((client) => client.if(key, 'Mod', '==', expected).then(client.put(key).value(JSON.stringify(stored))).else(client.get(key)).commit());
    if (!result.succeeded) throw conflict(kind, name, expected, revisionOf(result));
    return { before: expected, revision: Number(result.header.revision) };
  }

  async delete(kind: ResourceKind, name: string, expected: number): Promise<WriteResult> {
    const key = this.#settings.prefix + resourceKey(kind, name);
    const result = await this.#call((client) => client.if(key, 'Mod', '==', expected).then(client.delete().key(key)).else(client.get(key)).commit());
    if (!result.succeeded) throw conflict(kind, name, expected, revisionOf(result));
    return { before: expected, revision: Number(result.header.revision) };
  }

  /** The gateway now serves `config` (as `load()` gave it): its resources' revision is the one serving. */
  serving(config: Config): void {
    const revision = this.#revisionOf.get(config);
    if (revision !== undefined) this.#servedRevision = Math.max(this.#servedRevision, revision);
  }

  /** Resolves once this gateway serves `revision` (or after `timeoutMs`): a write is answered when it serves here. */
  async applied(revision: number, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (this.#servedRevision < revision) {
      if (Date.now() >= deadline) return false;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    return true;
  }

  /**
   * One call to etcd for the admin API. etcd3 signs in again by itself on `invalid auth token`; a
   * token refused otherwise is signed in again here, and the call made once more (etcd refused it
   * before doing anything).
   */
  async #call<T>(call: (client: Etcd3) => Promise<T>): Promise<T> {
    try {
      return await call(this.#etcd.client);
    } catch (error) {
      if (!isTokenRefusal(error)) throw unavailable(error);
      this.#etcd.renew();
      try {
        return await call(this.#etcd.client);
      } catch (again) {
        throw unavailable(again);
      }
    }
  }
}

function unavailable(error: unknown): ResourceStoreError {
  return new ResourceStoreError(503, 'etcd_unavailable', `etcd did not answer (${redactUrlsIn((error as Error).message)}); nothing was written`);
}

/** The revision a failed compare found (from the transaction's `else` read; 0: absent). */
function revisionOf(result: { responses: { response_range?: { kvs: IKeyValue[] } | null }[] }): number {
  const kv = result.responses[0]?.response_range?.kvs[0];
  return kv ? Number(kv.mod_revision) : 0;
}

function conflict(kind: ResourceKind, name: string, expected: number, found: number): ResourceStoreError {
  const what = `${kind}/${name}`;
  const message =
    expected === 0
      ? `${what} already exists (revision ${found}); send If-Match with its revision to replace it`
      : found === 0
        ? `${what} was deleted meanwhile (expected revision ${expected})`
        : `${what} changed meanwhile: it is at revision ${found}, not ${expected}; read it again and retry`;
  return new ResourceStoreError(409, 'revision_conflict', message, found);
}
