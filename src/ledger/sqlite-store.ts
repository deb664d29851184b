// The ledger in a SQLite file (`ledger.store: sqlite`): the statements run in a thread of their own
// (sqlite-thread.ts), so an insert or a long usage query never holds up the gateway's event loop.
// Each call is one message with an id, answered by one message with the same id.
import { Worker } from 'node:worker_threads';
import type { LedgerRecord } from './record.ts';
import type { LinesInserted } from './line.ts';
import type { ThreadData, ThreadOps, ThreadReply, ThreadRequest } from './sqlite-thread.ts';
import type { LedgerStore, RequestsPage, RequestsQuery, UsageQuery, UsageRow } from './store.ts';

/** The thread's file next to this one: `.ts` when Node runs the sources, `.js` when built. */
const THREAD_URL = new URL(`./sqlite-thread${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url);

interface Pending {
  resolve(value: unknown): void;
  reject(error: Error): void;
}

function replyError(reply: { message: string; name: string }): Error {
  const error = new Error(reply.message);
  error.name = reply.name;
  return error;
}

export class SqliteStore implements LedgerStore {
  readonly kind = 'sqlite';
  readonly #worker: Worker;
  readonly #pending = new Map<number, Pending>();
  readonly #exited: Promise<void>;
  #nextId = 1;
  /** Why calls are refused (closed, or the thread ended); undefined while it serves. */
  #gone: Error | undefined;

  /** Opens (creating and migrating as needed) the database at `path`; rejects when it cannot. */
  static async open(path: string): Promise<SqliteStore> {
    const store = new SqliteStore(path);
    try {
      await store.#opened;
    } catch (error) {
      await store.#exited;
      throw error;
    }
    return store;
  }

  readonly #opened: Promise<void>;

  private constructor(path: string) {
    this.#worker = new Worker(THREAD_URL, { workerData: { path } satisfies ThreadData });
    this.#opened = new Promise<void>((resolve, reject) => this.#pending.set(0, { resolve: () => resolve(), reject }));
    this.#worker.on('message', (reply: ThreadReply) => this.#settle(reply));
    this.#worker.on('error', (error) => this.#end(new Error(`the SQLite ledger thread failed: ${error.message}`)));
    this.#exited = new Promise((resolve) =>
      this.#worker.once('exit', (code) => {
        this.#end(new Error(`the SQLite ledger thread exited (code ${code})`));
        resolve();
      }),
    );
  }

  #settle(reply: ThreadReply): void {
    const pending = this.#pending.get(reply.id);
    if (!pending) return;
    this.#pending.delete(reply.id);
    if (this.#pending.size === 0) this.#worker.unref();
    if (reply.ok) pending.resolve(reply.value);
    else pending.reject(replyError(reply));
  }

  /** Every call waiting, and every call after, is refused with `error`. */
  #end(error: Error): void {
    this.#gone ??= error;
    for (const pending of this.#pending.values()) pending.reject(this.#gone);
    this.#pending.clear();
  }

  #call<K extends keyof ThreadOps>(op: K, ...args: ThreadOps[K]['args']): Promise<ThreadOps[K]['result']> {
    return this.#post(op, [], ...args);
  }

  /** A call whose arguments hold `transfer` (moved to the thread, unusable here after). */
  #post<K extends keyof ThreadOps>(op: K, transfer: ArrayBuffer[], ...args: ThreadOps[K]['args']): Promise<ThreadOps[K]['result']> {
    if (this.#gone) return Promise.reject(this.#gone);
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      // The thread keeps the process alive only while a call waits for it.
      if (this.#pending.size === 0) this.#worker.ref();
      this.#pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.#worker.postMessage({ id, op, args } satisfies ThreadRequest, transfer);
    });
  }

  insert(records: readonly LedgerRecord[]): Promise<number> {
    if (records.length === 0) return Promise.resolve(0);
    return this.#call('insert', records);
  }

  /**
   * The spool's lines, checked and parsed in the thread: a copy of their bytes is handed over
   * (moved, not cloned), so this thread neither decodes nor serializes a record.
   */
  insertLines(bytes: Buffer): Promise<LinesInserted> {
    if (bytes.length === 0) return Promise.resolve({ added: 0, corrupt: 0 });
    const own = new Uint8Array(bytes);
    return this.#post('insertLines', [own.buffer], own);
  }

  usage(q: UsageQuery): Promise<UsageRow[]> {
    return this.#call('usage', q);
  }

  requests(q: RequestsQuery): Promise<RequestsPage> {
    return this.#call('requests', q);
  }

  request(id: string): Promise<LedgerRecord | undefined> {
    return this.#call('request', id);
  }

  prune(beforeMs: number, limit: number): Promise<number> {
    return this.#call('prune', beforeMs, limit);
  }

  pruneBodies(beforeMs: number, limit: number): Promise<number> {
    return this.#call('pruneBodies', beforeMs, limit);
  }

  claim(id: string): Promise<boolean> {
    return this.#call('claim', id, Date.now());
  }

  /** Waits for the calls sent, closes the database and ends the thread. */
  async close(): Promise<void> {
    if (!this.#gone) {
      const closing = this.#call('close');
      this.#gone = new Error('the SQLite ledger store is closed');
      await closing.catch(() => undefined);
      // Held until the thread has ended, or the process could exit first (nothing else waiting).
      this.#worker.ref();
    }
    await this.#exited;
  }
}
