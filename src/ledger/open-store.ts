// The store `ledger.store` names: a SQLite file, or PostgreSQL (its client and its module loaded
// only then: a gateway without PostgreSQL never loads `pg`).
import type { LedgerStore } from './store.ts';

export type LedgerStoreOptions = { kind: 'sqlite'; path: string } | { kind: 'postgres'; url: string; poolSize?: number };

/** Opens the store, its schema migrated; rejects when it cannot be opened or its schema is newer than this code's. */
export async function openLedgerStore(options: LedgerStoreOptions): Promise<LedgerStore> {
  if (options.kind === 'sqlite') {
    const { SqliteStore } = await import('./sqlite-store.ts');
    return SqliteStore.open(options.path);
  }
  const { PostgresStore } = await import('./postgres-store.ts');
  return PostgresStore.open({ url: options.url, ...(options.poolSize !== undefined ? { poolSize: options.poolSize } : {}) });
}
