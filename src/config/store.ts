// What the admin API's resource routes read and write: the etcd source (writes are transactions
// on etcd), or, in file mode, the config as loaded (read-only: the file is the source of truth).
import type { Config } from './schema.ts';
import { checkResource, RESOURCE_KINDS, type Checked, type Resource, type ResourceKind } from './resources.ts';

export class ResourceStoreError extends Error {
  readonly status: number;
  readonly code: string;
  /** With a revision conflict: the revision found. */
  readonly found: number | undefined;
  constructor(status: number, code: string, message: string, found?: number) {
    super(message);
    this.status = status;
    this.code = code;
    this.found = found;
  }
}

export interface WriteResult {
  /** The key's revision before the write (0: it was absent). */
  readonly before: number;
  /** etcd's revision after the write. */
  readonly revision: number;
}

export interface ResourceStore {
  /** `etcd`: writable. `file` / `embedded`: read-only. */
  readonly mode: 'etcd' | 'file' | 'embedded';
  /** Why writes are refused (409), when they are. */
  readonly readOnly: string | undefined;
  /** The resources applied, and the revision they are at (0 outside etcd). */
  list(kind: ResourceKind): { items: Resource[]; revision: number };
  get(kind: ResourceKind, name: string): Resource | undefined;
  /** Whether `document` would be accepted as `kind/name` (with the variables this gateway lets a resource read): checked before a write. */
  check(kind: ResourceKind, name: string, document: unknown): Checked;
  /** The key as the store holds it now (not as applied here): what a compare-and-swap compares with. */
  current(kind: ResourceKind, name: string): Promise<{ value: string | undefined; revision: number }>;
  /** Writes `stored` if the key is still at revision `expected` (0: absent); a 409 ResourceStoreError if not. */
  put(kind: ResourceKind, name: string, stored: object, expected: number): Promise<WriteResult>;
  delete(kind: ResourceKind, name: string, expected: number): Promise<WriteResult>;
  /** Resolves true once this gateway applies `revision`, false after `timeoutMs`. */
  applied(revision: number, timeoutMs: number): Promise<boolean>;
}

/** The resources of a config loaded from a file (or the embedded default): listed, never written. */
export function configStore(config: Config, mode: 'file' | 'embedded', source: string): ResourceStore {
  const byKind = new Map<ResourceKind, Resource[]>();
  for (const kind of RESOURCE_KINDS) {
    const items = (config[kind] as readonly unknown[]).map((item, index) => {
      // A bare key string has the name the gateway gives it (key-N).
      const object = typeof item === 'string' ? { name: `key-${index}`, key: item } : (item as { name: string });
      // Already interpolated by the loader: checked as it is (nothing expands again).
      const checked = checkResource(kind, object.name, object, 0);
      return checked.ok ? checked.resource : { kind, name: object.name, stored: object, value: object, revision: 0 };
    });
    byKind.set(kind, items);
  }
  const reason =
    mode === 'file'
      ? `the configuration comes from the file ${source}, which is the source of truth: edit it (a change is applied within a second), or configure etcd to write through this API`
      : 'the gateway runs its embedded default configuration: write a config file (sluice --config FILE), or configure etcd to write through this API';
  const readOnly = (): never => {
    throw new ResourceStoreError(409, 'read_only_source', reason);
  };
  return {
    mode,
    readOnly: reason,
    list: (kind) => ({ items: byKind.get(kind) ?? [], revision: 0 }),
    get: (kind, name) => byKind.get(kind)?.find((r) => r.name === name),
    check: (kind, name, document) => checkResource(kind, name, document, 0),
    current: readOnly,
    put: readOnly,
    delete: readOnly,
    applied: () => Promise.resolve(true),
  };
}
