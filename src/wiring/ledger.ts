// The usage ledger of one process (`ledger`, read at start): each finished request's record is
// appended to the local spool (synchronous, no I/O on the request's path), the shipper sends the
// spool to the store, the exit flushes it (L9), and the retention removes old records. The store
// may be away at the start or later: the spool keeps everything meanwhile (docs/usage-ledger.md).
import type { Config } from '../config/schema.ts';
import { redactUrl, redactUrlsIn } from '../config/redact-url.ts';
import { openLedgerStore } from '../ledger/open-store.ts';
import type { LedgerRecord } from '../ledger/record.ts';
import type { LinesInserted } from '../ledger/line.ts';
import { Shipper } from '../ledger/shipper.ts';
import { Spool } from '../ledger/spool.ts';
import type { LedgerStore, RequestsPage, RequestsQuery, UsageQuery, UsageRow } from '../ledger/store.ts';
import type { Clock, TimerHandle } from '../lifecycle/clock.ts';
import type { ExchangeContext } from '../server/context.ts';
import type { ExchangeLedger } from '../server/requests.ts';
import type { Logger } from '../telemetry/logger.ts';
import type { Metrics } from '../telemetry/metrics.ts';
import { ledgerRecord, type ProcessPlace } from './ledger-record.ts';
import { WORKER_SLOT_ENV } from '../cluster/messages.ts';
import { GENERATION_ENV } from '../hot-restart/messages.ts';

/** This process's place, as its records say it: its worker slot and its generation (0 each when none). */
export function processPlace(env: NodeJS.ProcessEnv = process.env): ProcessPlace {
  return { worker: Number(env[WORKER_SLOT_ENV]) || 0, generation: Number(env[GENERATION_ENV]) || 0 };
}

/** A store that could not be opened is tried again after this, doubling up to OPEN_RETRY_MAX_MS. */
const OPEN_RETRY_FIRST_MS = 1000;
const OPEN_RETRY_MAX_MS = 30_000;
/** The retention runs this often, deleting this many records at a time, with a pause between. */
const PRUNE_EVERY_MS = 10 * 60_000;
const PRUNE_BATCH = 1000;
const PRUNE_PAUSE_MS = 100;
/** A dropped record is logged at most this often (the metric counts each). */
const DROPPED_LOG_MS = 10_000;
const DAY_MS = 86_400_000;

/** The ledger of one process: what the request path, the admin API, the exit and the alerts see of it. */
export class ProcessLedger implements ExchangeLedger {
  readonly #spool: Spool;
  readonly #shipper: Shipper;
  readonly #store: PendingStore;
  readonly #place: ProcessPlace;
  /** `ledger.on_full: refuse`: the spool's size at which new requests are refused; Infinity: never. */
  readonly #refuseAtBytes: number;
  readonly #timers: TimerHandle[] = [];
  #refused = 0;
  #storeErrors = 0;

  constructor(spool: Spool, shipper: Shipper, store: PendingStore, place: ProcessPlace, refuseAtBytes: number) {
    this.#spool = spool;
    this.#shipper = shipper;
    this.#store = store;
    this.#place = place;
    this.#refuseAtBytes = refuseAtBytes;
  }

  /** The store, for the admin API's reads and the alerts' claims (its calls reject while it is not open). */
  get store(): LedgerStore {
    return this.#store;
  }

  record(ctx: ExchangeContext, status: number): void {
    this.#spool.append(ledgerRecord(ctx, status, this.#place, Date.now()));
  }

  /** `ledger.on_full: refuse` and the spool is full: a new request is refused (503) rather than go unrecorded. */
  refuses(): boolean {
    if (this.#spool.bytes < this.#refuseAtBytes) return false;
    this.#refused++;
    return true;
  }

  storeFailed(): void {
    this.#storeErrors++;
  }

  readings() {
    return {
      spooled: this.#spool.appended,
      dropped: this.#spool.dropped,
      refused: this.#refused,
      shipped: this.#shipper.shipped,
      corrupt: this.#shipper.corrupt,
      storeErrors: this.#storeErrors,
      lagRecords: this.#shipper.lag,
      lagSeconds: this.#shipper.oldestMs / 1000,
      spoolBytes: this.#spool.bytes,
    };
  }

  /** `/server_info`'s `ledger`. */
  info(): object {
    const r = this.readings();
    return { store: this.#store.kind, store_open: this.#store.open, spooled: r.spooled, shipped: r.shipped, dropped: r.dropped, lag_records: r.lagRecords, lag_seconds: Math.round(r.lagSeconds * 1000) / 1000, spool_bytes: r.spoolBytes };
  }

  keep(timer: TimerHandle): void {
    this.#timers.push(timer);
  }

  /**
   * L9, the exit's `ledger_flush`: the spool is fsynced and shipped until the store has everything
   * or `boundMs` has passed; what is left stays in the spool for the next start. Then it closes.
   */
  async flush(boundMs: number, forced: boolean): Promise<{ shipped: number; left: number }> {
    for (const timer of this.#timers) timer.cancel();
    const result = await this.#shipper.drain(forced ? 0 : boundMs);
    this.#shipper.close();
    await this.#spool.close();
    await this.#store.close();
    return result;
  }
}

/**
 * The store, opened in the background: a call waits for the first attempt to open it (so that a
 * start is not reported as an outage), then rejects while it is not open (the shipper retries, the
 * admin API answers 503), and opening is tried again with back-off. A gateway starts and records
 * while its database is away.
 */
class PendingStore implements LedgerStore {
  readonly kind: 'sqlite' | 'postgres';
  #store: LedgerStore | undefined;
  #closed = false;
  /** Settled once the first attempt to open has succeeded or failed (or the ledger closed). */
  readonly #firstTry: Promise<void>;
  #firstTried: () => void = () => {};

  constructor(kind: 'sqlite' | 'postgres', open: () => Promise<LedgerStore>, clock: Clock, failed: (error: Error, first: boolean) => void, opened: () => void) {
    this.kind = kind;
    let waitMs = OPEN_RETRY_FIRST_MS;
    let first = true;
    this.#firstTry = new Promise<void>((resolve) => (this.#firstTried = resolve));
    const attempt = async (): Promise<void> => {
      while (!this.#closed) {
        try {
          const store = await open();
          if (this.#closed) return void (await store.close());
          this.#store = store;
          if (!first) opened();
          this.#firstTried();
          return;
        } catch (error) {
          failed(error as Error, first);
          first = false;
          this.#firstTried();
          await new Promise<void>((resolve) => clock.after(waitMs, resolve));
          waitMs = Math.min(waitMs * 2, OPEN_RETRY_MAX_MS);
        }
      }
    };
    void attempt();
  }

  get open(): boolean {
    return this.#store !== undefined;
  }

  #ready(): LedgerStore {
    if (this.#store === undefined) throw new Error('the ledger store is not open yet');
    return this.#store;
  }

  insert(records: readonly LedgerRecord[]): Promise<number> {
    return this.#call((s) => s.insert(records));
  }
  insertLines(bytes: Buffer): Promise<LinesInserted> {
    return this.#call((s) => s.insertLines(bytes));
  }
  usage(q: UsageQuery): Promise<UsageRow[]> {
    return this.#call((s) => s.usage(q));
  }
  requests(q: RequestsQuery): Promise<RequestsPage> {
    return this.#call((s) => s.requests(q));
  }
  request(id: string): Promise<LedgerRecord | undefined> {
    return this.#call((s) => s.request(id));
  }
  prune(beforeMs: number, limit: number): Promise<number> {
    return this.#call((s) => s.prune(beforeMs, limit));
  }
  pruneBodies(beforeMs: number, limit: number): Promise<number> {
    return this.#call((s) => s.pruneBodies(beforeMs, limit));
  }
  claim(id: string): Promise<boolean> {
    return this.#call((s) => s.claim(id));
  }

  #call<T>(work: (store: LedgerStore) => Promise<T>): Promise<T> {
    if (this.#store !== undefined) return work(this.#store);
    return this.#firstTry.then(() => work(this.#ready()));
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#firstTried();
    await this.#store?.close();
    this.#store = undefined;
  }
}

export interface LedgerParts {
  readonly config: Config;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly clock: Clock;
  readonly place: ProcessPlace;
  /** Prunes old records (the process that holds the admin listeners: one per group). */
  readonly prunes: boolean;
}

/** The process's ledger; undefined when the config has none (or `ledger.enabled: false`): then nothing of it is loaded or costs anything. */
export async function startLedger({ config, logger, metrics, clock, place, prunes }: LedgerParts): Promise<ProcessLedger | undefined> {
  const settings = config.ledger;
  if (settings === undefined || !settings.enabled) return undefined;
  const where = settings.store === 'postgres' ? redactUrl(settings.postgres!.url) : settings.sqlite_path!;
  let droppedLoggedAt = -Infinity;
  let droppedSince = 0;
  const spool = new Spool({
    dir: settings.spool_dir!,
    fsync: settings.fsync,
    maxBytes: settings.spool_max_mb * 1024 * 1024,
    clock,
    events: {
      dropped: () => {
        droppedSince++;
        const now = clock.now();
        if (now - droppedLoggedAt < DROPPED_LOG_MS) return;
        droppedLoggedAt = now;
        logger.error(
          { event: 'ledger_spool_full', dropped: droppedSince, spool_max_mb: settings.spool_max_mb },
          `the ledger's spool is full (ledger.spool_max_mb ${settings.spool_max_mb}): ${droppedSince} record(s) dropped; is the store (${settings.store}) reachable?`,
        );
        droppedSince = 0;
      },
      writeFailed: (error) => logger.error({ event: 'ledger_spool_write_failed', reason: error.message }, `the ledger's spool could not be written (${error.message}); retrying`),
    },
  });
  let ledger: ProcessLedger | undefined;
  const store = new PendingStore(
    settings.store,
    () => openLedgerStore(settings.store === 'postgres' ? { kind: 'postgres', url: settings.postgres!.url, poolSize: settings.postgres!.pool_size } : { kind: 'sqlite', path: settings.sqlite_path! }),
    clock,
    (error, first) => {
      const reason = redactUrlsIn(error.message);
      if (first) logger.error({ event: 'ledger_store_unavailable', store: settings.store, where, reason }, `the ledger's store (${settings.store}, ${where}) cannot be opened: ${reason}; records are kept in the spool meanwhile`);
      // A schema newer than this code's is not something a retry fixes; said again every time, loudly.
      else if (error.name === 'LedgerSchemaTooNew') logger.error({ event: 'ledger_store_unavailable', store: settings.store, where, reason }, reason);
    },
    () => logger.info({ event: 'ledger_store_opened', store: settings.store, where }, `the ledger's store (${settings.store}) is open`),
  );
  const counted = <T,>(inserting: Promise<T>): Promise<T> =>
    inserting.catch((error: unknown) => {
      ledger?.storeFailed();
      throw error;
    });
  const shipper = new Shipper({
    spool,
    store: {
      insert: (records) => counted(store.insert(records)),
      insertLines: (bytes) => counted(store.insertLines(bytes)),
    },
    clock,
    events: {
      storeUnavailable: (error) => {
        const reason = redactUrlsIn(error.message);
        logger.warn({ event: 'ledger_store_unavailable', store: settings.store, where, reason }, `the ledger's store did not take records (${reason}); they wait in the spool and are retried`);
      },
      storeRecovered: (downMs, records) =>
        logger.info({ event: 'ledger_store_recovered', store: settings.store, down_ms: Math.round(downMs), records }, `the ledger's store takes records again after ${Math.round(downMs / 1000)} s; ${records} record(s) were waiting`),
      corrupt: (segment, lines) => logger.warn({ event: 'ledger_spool_corrupt', segment, lines }, `${lines} line(s) of the ledger's spool segment ${segment} were skipped (a bad checksum or a torn last line)`),
      ioFailed: (error) => logger.warn({ event: 'ledger_spool_io_failed', reason: error.message }, `the ledger's spool could not be read or cleaned (${error.message}); retrying`),
    },
  });
  // Refused a little before the spool is full, so that the records of the requests in flight still fit.
  const refuseAt = settings.on_full === 'refuse' ? settings.spool_max_mb * 1024 * 1024 * 0.95 : Infinity;
  ledger = new ProcessLedger(spool, shipper, store, place, refuseAt);
  const running = ledger;
  metrics.observeLedger(() => running.readings());
  // The orphans of a process that died (a crash, a SIGKILL) are claimed and shipped from here on.
  void shipper.start();
  if (prunes) {
    const records = settings.retention_days;
    // Bodies go sooner than their records (and with them: a record's prune takes its bodies).
    const bodies = settings.bodies.retention_days > 0 && (records === 0 || settings.bodies.retention_days < records) ? settings.bodies.retention_days : 0;
    if (records > 0 || bodies > 0) {
      running.keep(
        clock.every(PRUNE_EVERY_MS, () => {
          void (async () => {
            if (records > 0) await prune(RECORDS, store, clock, records, logger);
            if (bodies > 0) await prune(BODIES, store, clock, bodies, logger);
          })();
        }),
      );
    }
  }
  logger.info({ event: 'ledger_started', store: settings.store, where, spool_dir: settings.spool_dir, fsync: settings.fsync, on_full: settings.on_full }, `usage ledger on: spool ${settings.spool_dir}, store ${settings.store} (${where})`);
  return running;
}

/** What a retention deletes: the records (`ledger.retention_days`), or only their bodies (`ledger.bodies.retention_days`). */
interface Pruned {
  run(store: LedgerStore, beforeMs: number, limit: number): Promise<number>;
  logged(deleted: number, days: number): [object, string];
}

const RECORDS: Pruned = {
  run: (store, beforeMs, limit) => store.prune(beforeMs, limit),
  logged: (deleted, days) => [{ event: 'ledger_pruned', records: deleted, retention_days: days }, `${deleted} ledger record(s) older than ${days} days deleted`],
};

const BODIES: Pruned = {
  run: (store, beforeMs, limit) => store.pruneBodies(beforeMs, limit),
  logged: (deleted, days) => [{ event: 'ledger_bodies_pruned', bodies: deleted, retention_days: days }, `the bodies of ${deleted} ledger record(s) older than ${days} days deleted (the records kept)`],
};

/** Deletes what is older than the retention, a batch at a time with a pause between, so the store is never busy for long. */
async function prune(what: Pruned, store: LedgerStore, clock: Clock, days: number, logger: Logger): Promise<void> {
  const before = Date.now() - days * DAY_MS;
  let deleted = 0;
  try {
    for (;;) {
      const n = await what.run(store, before, PRUNE_BATCH);
      deleted += n;
      if (n < PRUNE_BATCH) break;
      await new Promise<void>((resolve) => clock.after(PRUNE_PAUSE_MS, resolve));
    }
  } catch {
    // The store is away: the next run deletes them.
  }
  if (deleted > 0) logger.info(...what.logged(deleted, days));
}
