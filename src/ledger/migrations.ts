// The ledger's schema, as numbered steps for both dialects. A store applies, at its open and in one
// transaction, the steps its database has not had yet, and records each in `ledger_schema`; a
// database that a newer Sluice has moved past this code's last step is refused (its tables may mean
// something this code does not know). A later step adds to the list, never edits one already
// shipped.
import type { Dialect } from './store.ts';

interface Types {
  /** Epoch ms, counts, micro-dollars. */
  readonly bigint: string;
  readonly int: string;
  readonly bool: string;
  /** JSON: text in SQLite, jsonb in PostgreSQL. */
  readonly json: string;
}

const TYPES: Record<Dialect, Types> = {
  sqlite: { bigint: 'INTEGER', int: 'INTEGER', bool: 'INTEGER', json: 'TEXT' },
  postgres: { bigint: 'BIGINT', int: 'INTEGER', bool: 'BOOLEAN', json: 'JSONB' },
};

export interface MigrationStep {
  readonly version: number;
  readonly description: string;
  /** The statements of this step in a dialect. */
  sql(dialect: Dialect): string[];
}

export const MIGRATIONS: readonly MigrationStep[] = [
  {
    version: 1,
    description: 'ledger_requests, one row per request, and ledger_claims',
    sql(dialect) {
      const t = TYPES[dialect];
      return [
        `CREATE TABLE ledger_requests (
          id TEXT PRIMARY KEY,
          kind TEXT NOT NULL,
          started_at ${t.bigint} NOT NULL,
          first_byte_ms ${t.bigint},
          ended_at ${t.bigint} NOT NULL,
          key TEXT NOT NULL,
          team TEXT NOT NULL,
          "user" TEXT NOT NULL,
          metadata ${t.json},
          tags ${t.json} NOT NULL,
          api TEXT NOT NULL,
          endpoint TEXT NOT NULL,
          model TEXT NOT NULL,
          route TEXT NOT NULL,
          provider TEXT NOT NULL,
          served_model TEXT NOT NULL,
          attempts ${t.json} NOT NULL,
          status ${t.int} NOT NULL,
          error TEXT NOT NULL,
          prompt_tokens ${t.bigint} NOT NULL,
          completion_tokens ${t.bigint} NOT NULL,
          cached_tokens ${t.bigint} NOT NULL,
          cache_write_tokens ${t.bigint} NOT NULL,
          usage_estimated ${t.bool} NOT NULL,
          cost_micros ${t.bigint},
          bytes_in ${t.bigint} NOT NULL,
          bytes_out ${t.bigint} NOT NULL,
          listener TEXT NOT NULL,
          worker ${t.int} NOT NULL,
          generation ${t.int} NOT NULL
        )`,
        'CREATE INDEX ledger_requests_started ON ledger_requests (started_at)',
        'CREATE INDEX ledger_requests_key_started ON ledger_requests (key, started_at)',
        'CREATE INDEX ledger_requests_team_started ON ledger_requests (team, started_at)',
        `CREATE TABLE ledger_claims (id TEXT PRIMARY KEY, claimed_at ${t.bigint} NOT NULL)`,
      ];
    },
  },
  {
    version: 2,
    description: 'ledger_bodies, the bodies of a request (ledger.bodies), deleted with their record or sooner',
    sql(dialect) {
      const t = TYPES[dialect];
      return [
        `CREATE TABLE ledger_bodies (
          id TEXT PRIMARY KEY REFERENCES ledger_requests (id) ON DELETE CASCADE,
          request_body TEXT NOT NULL,
          response_body TEXT NOT NULL,
          request_truncated ${t.bool} NOT NULL,
          response_truncated ${t.bool} NOT NULL,
          encoding TEXT NOT NULL,
          ended_at ${t.bigint} NOT NULL
        )`,
        'CREATE INDEX ledger_bodies_ended ON ledger_bodies (ended_at)',
      ];
    },
  },
];

/** The schema version this code writes and reads. */
export const LEDGER_SCHEMA_VERSION = MIGRATIONS.reduce((max, step) => Math.max(max, step.version), 0);

/** Made first (in the migration's transaction): one row per step applied. */
export function schemaTableSql(dialect: Dialect): string {
  return `CREATE TABLE IF NOT EXISTS ledger_schema (version ${TYPES[dialect].int} PRIMARY KEY, applied_at ${TYPES[dialect].bigint} NOT NULL)`;
}

/** Reads the version: one row, `version` (null on a fresh database). */
export const SCHEMA_VERSION_SQL = 'SELECT MAX(version) AS version FROM ledger_schema';

/** A database a newer Sluice has migrated: this one refuses to use it. */
export class LedgerSchemaTooNew extends Error {
  constructor(found: number) {
    super(
      `the ledger database has schema version ${found}, newer than this Sluice's ${LEDGER_SCHEMA_VERSION}: ` +
        'it was migrated by a newer Sluice; run that version, or point ledger at another database',
    );
    this.name = 'LedgerSchemaTooNew';
  }
}

/**
 * The statements that bring a database at version `current` (0: fresh) up to this code's, the
 * rows of `ledger_schema` included (their values inline: these are numbers this code chose).
 * Throws LedgerSchemaTooNew when the database is past this code.
 */
export function migrationSql(current: number, dialect: Dialect, now: number): string[] {
  if (current > LEDGER_SCHEMA_VERSION) throw new LedgerSchemaTooNew(current);
  return MIGRATIONS.filter((step) => step.version > current)
    .sort((a, b) => a.version - b.version)
    .flatMap((step) => [...step.sql(dialect), `INSERT INTO ledger_schema (version, applied_at) VALUES (${step.version}, ${Math.floor(now)})`]);
}
