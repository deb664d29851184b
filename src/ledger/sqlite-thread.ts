// The SQLite ledger's own thread: node:sqlite is synchronous, so its statements run here, never on
// the gateway's event loop. sqlite-store.ts sends `{ id, op, args }` and gets `{ id, ok, value }` or
// `{ id, ok: false, message }` back; id 0 is the open (the database opened and migrated, or why
// not). WAL and a busy timeout let several processes (a gateway's workers) write the same file.
import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { DatabaseSync, type SQLInputValue, type StatementSync } from 'node:sqlite';
import type { LedgerRecord } from './record.ts';
import { checkLines, recordsOf, type LinesInserted } from './line.ts';
import { migrationSql, schemaTableSql, SCHEMA_VERSION_SQL } from './migrations.ts';
import {
  bodiesInsertStatement,
  bodiesStatement,
  claimStatement,
  col,
  COLUMNS,
  recordRow,
  pruneBodiesStatement,
  pruneStatement,
  requestsPage,
  requestStatement,
  requestsStatement,
  rowRecord,
  usageRows,
  usageStatement,
  withBodies,
  type RequestsPage,
  type RequestsQuery,
  type Statement,
  type UsageQuery,
  type UsageRow,
} from './store.ts';

/** The operations of the thread: their arguments and what they resolve with. */
export interface ThreadOps {
  insert: { args: [records: readonly LedgerRecord[]]; result: number };
  /** The same, as the spool's lines (their bytes, moved here): checked and parsed here, off the gateway's thread. */
  insertLines: { args: [bytes: Uint8Array]; result: LinesInserted };
  usage: { args: [q: UsageQuery]; result: UsageRow[] };
  requests: { args: [q: RequestsQuery]; result: RequestsPage };
  request: { args: [id: string]; result: LedgerRecord | undefined };
  prune: { args: [beforeMs: number, limit: number]; result: number };
  pruneBodies: { args: [beforeMs: number, limit: number]; result: number };
  claim: { args: [id: string, claimedAt: number]; result: boolean };
  close: { args: []; result: void };
}

export interface ThreadRequest {
  readonly id: number;
  readonly op: keyof ThreadOps;
  readonly args: readonly unknown[];
}

export type ThreadReply = { readonly id: number; readonly ok: true; readonly value: unknown } | { readonly id: number; readonly ok: false; readonly message: string; readonly name: string };

export interface ThreadData {
  readonly path: string;
}

/** How long a statement waits for another process's write lock before SQLITE_BUSY. */
const BUSY_TIMEOUT_MS = 5000;
/** Rows per INSERT statement (30 columns each, 7 of bodies: well under SQLite's 32766 variables). */
/** The INSERT of one record (its id once: one already there is skipped). */
const ONE_ROW_INSERT = `INSERT INTO ledger_requests (${COLUMNS.map(col).join(', ')}) VALUES (${COLUMNS.map(() => '?').join(', ')}) ON CONFLICT (id) DO NOTHING`;
/** Prepared statements kept (the SQL of an insert depends on its row count; most batches are full). */
const STATEMENT_CACHE = 16;

class LedgerDatabase {
  readonly #db: DatabaseSync;
  readonly #statements = new Map<string, StatementSync>();

  constructor(path: string) {
    this.#db = new DatabaseSync(path, { timeout: BUSY_TIMEOUT_MS });
    this.#db.exec('PRAGMA journal_mode = WAL');
    this.#db.exec('PRAGMA synchronous = NORMAL');
    // A record's bodies reference it (ON DELETE CASCADE): pruning records prunes their bodies. (node:sqlite
    // turns foreign keys on by default; said here, since the cascade depends on it.)
    this.#db.exec('PRAGMA foreign_keys = ON');
    this.#write(() => {
      this.#db.exec(schemaTableSql('sqlite'));
      const row = this.#db.prepare(SCHEMA_VERSION_SQL).get();
      for (const sql of migrationSql(Number(row?.version ?? 0), 'sqlite', Date.now())) this.#db.exec(sql);
    });
  }

  /** A write transaction, begun IMMEDIATE: it waits (busy timeout) for the write lock at once, never half-way. */
  #write<T>(fn: () => T): T {
    this.#db.exec('BEGIN IMMEDIATE');
    try {
      const result = fn();
      this.#db.exec('COMMIT');
      return result;
    } catch (error) {
      if (this.#db.isTransaction) this.#db.exec('ROLLBACK');
      throw error;
    }
  }

  #prepare(sql: string): StatementSync {
    let statement = this.#statements.get(sql);
    if (!statement) {
      statement = this.#db.prepare(sql);
      if (this.#statements.size >= STATEMENT_CACHE) this.#statements.delete(this.#statements.keys().next().value!);
      this.#statements.set(sql, statement);
    }
    return statement;
  }

  #all(s: Statement): Record<string, unknown>[] {
    return this.#prepare(s.sql).all(...(s.values as SQLInputValue[])) as Record<string, unknown>[];
  }

  #run(s: Statement): number {
    return Number(this.#prepare(s.sql).run(...(s.values as SQLInputValue[])).changes);
  }

  /** Inserts the records whose id is not there yet, in one transaction; returns how many were new. */
  #insert(records: readonly LedgerRecord[]): number {
    return this.#write(() => {
      // One prepared statement of one row, run for each record in the transaction: cheaper in
      // SQLite than a statement of many rows (measured: about a quarter less CPU a record).
      const insert = this.#prepare(ONE_ROW_INSERT);
      let added = 0;
      for (const record of records) {
        added += Number(insert.run(...(recordRow(record, 'sqlite') as SQLInputValue[])).changes);
        if (record.bodies !== undefined) {
          const bodies = bodiesInsertStatement([record], 'sqlite');
          if (bodies !== undefined) this.#run(bodies);
        }
      }
      return added;
    });
  }

  readonly ops: { [K in keyof ThreadOps]: (...args: ThreadOps[K]['args']) => ThreadOps[K]['result'] } = {
    insert: (records) => this.#insert(records),
    insertLines: (bytes) => {
      const checked = checkLines(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
      const { records, corrupt } = recordsOf(checked.lines);
      return { added: records.length === 0 ? 0 : this.#insert(records), corrupt: checked.corrupt + corrupt };
    },
    usage: (q) => usageRows(q, this.#all(usageStatement(q, 'sqlite'))),
    requests: (q) => requestsPage(q, this.#all(requestsStatement(q, 'sqlite'))),
    request: (id) => {
      const row = this.#all(requestStatement(id, 'sqlite'))[0];
      return row ? withBodies(rowRecord(row), this.#all(bodiesStatement(id, 'sqlite'))[0]) : undefined;
    },
    prune: (beforeMs, limit) => this.#write(() => this.#run(pruneStatement(beforeMs, limit, 'sqlite'))),
    pruneBodies: (beforeMs, limit) => this.#write(() => this.#run(pruneBodiesStatement(beforeMs, limit, 'sqlite'))),
    claim: (id, claimedAt) => this.#run(claimStatement(id, claimedAt, 'sqlite')) === 1,
    close: () => {
      this.#statements.clear();
      this.#db.close();
    },
  };
}

/**
 * The thread's nice value over the process's (Linux gives each thread its own): when it and the
 * gateway's event loop want the same CPU, the requests go first and the records wait in the spool,
 * which is what it is for; on an idle CPU the thread runs at full speed. 10 more gets it about a
 * tenth of a CPU it shares with a busy event loop, several times what the inserts of a saturated
 * gateway need.
 */
const THREAD_NICER_BY = 10;

/** Lowers this thread's priority (only this thread's: its id from /proc/thread-self); elsewhere than Linux, or when refused, it keeps the process's. */
function yieldToRequests(): void {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').at(-1));
    if (Number.isSafeInteger(tid) && tid > 0 && tid !== process.pid) setPriority(tid, Math.min(19, getPriority(tid) + THREAD_NICER_BY));
  } catch {
    // no /proc (not Linux), or not allowed: the thread runs at the process's priority
  }
}

function failure(id: number, error: unknown): ThreadReply {
  const e = error instanceof Error ? error : new Error(String(error));
  return { id, ok: false, message: e.message, name: e.name };
}

function serve(): void {
  const port = parentPort;
  if (!port) throw new Error('sqlite-thread.ts runs in a worker thread (sqlite-store.ts starts it)');
  yieldToRequests();
  let db: LedgerDatabase;
  try {
    db = new LedgerDatabase((workerData as ThreadData).path);
  } catch (error) {
    port.postMessage(failure(0, error));
    port.close();
    return;
  }
  port.postMessage({ id: 0, ok: true, value: undefined } satisfies ThreadReply);
  port.on('message', (request: ThreadRequest) => {
    let reply: ThreadReply;
    try {
      const op = db.ops[request.op] as (...args: readonly unknown[]) => unknown;
      reply = { id: request.id, ok: true, value: op(...request.args) };
    } catch (error) {
      reply = failure(request.id, error);
    }
    port.postMessage(reply);
    if (request.op === 'close') port.close();
  });
}

serve();
