// The ledger in PostgreSQL (`ledger.store: postgres`), shared by a fleet: a pool of a few
// connections, one multi-row INSERT ... ON CONFLICT DO NOTHING per batch. The `pg` client is loaded
// when this store is made, never by a gateway without it. A server that is down fails each call
// within the connect timeout; the pool reconnects by itself once it is back.
import { createRequire } from 'node:module';
import type { Pool, PoolClient, QueryResultRow } from 'pg';
import type { LedgerRecord } from './record.ts';
import { checkLines, recordsOf, type LinesInserted } from './line.ts';
import { migrationSql, schemaTableSql, SCHEMA_VERSION_SQL } from './migrations.ts';
import {
  POSTGRES_JSON_BODIES_INSERT,
  POSTGRES_JSON_INSERT,
  bodiesInsertStatement,
  bodiesStatement,
  claimStatement,
  insertStatement,
  pruneBodiesStatement,
  pruneStatement,
  requestsPage,
  requestStatement,
  requestsStatement,
  rowRecord,
  usageRows,
  usageStatement,
  withBodies,
  type LedgerStore,
  type RequestsPage,
  type RequestsQuery,
  type Statement,
  type UsageQuery,
  type UsageRow,
} from './store.ts';

const require = createRequire(import.meta.url);

export interface PostgresStoreOptions {
  /** `postgres://user:password@host:port/database`. */
  readonly url: string;
  /** Connections at most (default 4). */
  readonly poolSize?: number;
}

/** A connection not made within this fails the call (the server is down or unreachable). */
const CONNECT_TIMEOUT_MS = 2000;
/** The server cancels a statement running longer. */
const STATEMENT_TIMEOUT_MS = 10_000;
/** The client gives up on an answer that never comes (a server gone without closing the connection). */
const QUERY_TIMEOUT_MS = 12_000;
const IDLE_TIMEOUT_MS = 30_000;
/** Rows per INSERT statement: 30 parameters each (7 of bodies), under PostgreSQL's 65535. */
const INSERT_CHUNK = 1000;
/** Held for the migration's transaction: two gateways starting at once migrate one after the other. */
const MIGRATION_LOCK = 0x51_1ce_1ed;

export class PostgresStore implements LedgerStore {
  readonly kind = 'postgres';
  readonly #pool: Pool;

  /** Connects, and migrates the schema; rejects when the server cannot be reached or its schema is newer than this code's. */
  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    const store = new PostgresStore(options);
    try {
      await store.#migrate();
    } catch (error) {
      await store.close();
      throw error;
    }
    return store;
  }

  private constructor(options: PostgresStoreOptions) {
    const { Pool: PgPool } = require('pg') as typeof import('pg');
    this.#pool = new PgPool({
      connectionString: options.url,
      max: options.poolSize ?? 4,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      statement_timeout: STATEMENT_TIMEOUT_MS,
      query_timeout: QUERY_TIMEOUT_MS,
      idleTimeoutMillis: IDLE_TIMEOUT_MS,
      allowExitOnIdle: true,
      application_name: 'sluice-ledger',
    });
    // An idle connection the server ended (a restart): the pool drops it, and the next call connects anew.
    this.#pool.on('error', () => undefined);
  }

  async #migrate(): Promise<void> {
    await this.#transaction(async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      await client.query(schemaTableSql('postgres'));
      const { rows } = await client.query<{ version: number | null }>(SCHEMA_VERSION_SQL);
      for (const sql of migrationSql(Number(rows[0]?.version ?? 0), 'postgres', Date.now())) await client.query(sql);
    });
  }

  /** `fn` in a transaction on one connection; a connection that failed is destroyed, not given back. */
  async #transaction<T>(fn: (client: PoolClient) => Promise<T>): Promise<T> {
    const client = await this.#pool.connect();
    let broken: Error | undefined;
    try {
      await client.query('BEGIN');
      const result = await fn(client);
      await client.query('COMMIT');
      return result;
    } catch (error) {
      broken = error instanceof Error ? error : new Error(String(error));
      await client.query('ROLLBACK').then(
        () => (broken = undefined), // the connection is fine: back to the pool
        () => undefined,
      );
      throw error;
    } finally {
      client.release(broken);
    }
  }

  async #rows(s: Statement): Promise<QueryResultRow[]> {
    return (await this.#pool.query(s.sql, s.values)).rows;
  }

  async #count(s: Statement): Promise<number> {
    return (await this.#pool.query(s.sql, s.values)).rowCount ?? 0;
  }

  async insert(records: readonly LedgerRecord[]): Promise<number> {
    if (records.length === 0) return 0;
    // One statement is a transaction of its own; records with bodies are two (the bodies reference their records).
    if (records.length <= INSERT_CHUNK && !records.some((r) => r.bodies !== undefined)) return this.#count(insertStatement(records, 'postgres'));
    return this.#transaction(async (client) => {
      let added = 0;
      for (let i = 0; i < records.length; i += INSERT_CHUNK) {
        const chunk = records.slice(i, i + INSERT_CHUNK);
        const s = insertStatement(chunk, 'postgres');
        added += (await client.query(s.sql, s.values)).rowCount ?? 0;
        const bodies = bodiesInsertStatement(chunk, 'postgres');
        if (bodies !== undefined) await client.query(bodies.sql, bodies.values);
      }
      return added;
    });
  }

  /**
   * The spool's lines: checked here, then sent as one JSON array that the server parses. A batch it
   * refuses as data (class 22: a number that is not a whole one in a bigint's range, a text it
   * cannot hold, a line that is not JSON) is parsed here, line by line, and goes through `insert`,
   * which rounds and cleans each value; a line that is no record is counted as corrupt.
   */
  async insertLines(bytes: Buffer): Promise<LinesInserted> {
    const { lines, corrupt } = checkLines(bytes);
    if (lines.length === 0) return { added: 0, corrupt };
    try {
      return { added: await this.#insertJson(`[${lines.join(',')}]`), corrupt };
    } catch (error) {
      if (!String((error as { code?: unknown }).code ?? '').startsWith('22')) throw error;
      const parsed = recordsOf(lines);
      return { added: await this.insert(parsed.records), corrupt: corrupt + parsed.corrupt };
    }
  }

  /** The records as a JSON array's text, parsed by the server. */
  async #insertJson(json: string): Promise<number> {
    if (!json.includes('"bodies":')) return this.#count({ sql: POSTGRES_JSON_INSERT, values: [json] });
    return this.#transaction(async (client) => {
      const added = (await client.query(POSTGRES_JSON_INSERT, [json])).rowCount ?? 0;
      await client.query(POSTGRES_JSON_BODIES_INSERT, [json]);
      return added;
    });
  }

  async usage(q: UsageQuery): Promise<UsageRow[]> {
    return usageRows(q, await this.#rows(usageStatement(q, 'postgres')));
  }

  async requests(q: RequestsQuery): Promise<RequestsPage> {
    return requestsPage(q, await this.#rows(requestsStatement(q, 'postgres')));
  }

  async request(id: string): Promise<LedgerRecord | undefined> {
    const row = (await this.#rows(requestStatement(id, 'postgres')))[0];
    return row ? withBodies(rowRecord(row), (await this.#rows(bodiesStatement(id, 'postgres')))[0]) : undefined;
  }

  prune(beforeMs: number, limit: number): Promise<number> {
    return this.#count(pruneStatement(beforeMs, limit, 'postgres'));
  }

  pruneBodies(beforeMs: number, limit: number): Promise<number> {
    return this.#count(pruneBodiesStatement(beforeMs, limit, 'postgres'));
  }

  async claim(id: string): Promise<boolean> {
    return (await this.#count(claimStatement(id, Date.now(), 'postgres'))) === 1;
  }

  async close(): Promise<void> {
    if (!this.#pool.ended) await this.#pool.end();
  }
}
