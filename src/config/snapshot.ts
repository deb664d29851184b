// L9: the snapshot cache. The resources last applied from etcd are kept in a file, so that a
// gateway restarted while etcd is down starts with them and serves. A write goes to a temporary
// file beside the snapshot, is fsynced, renamed over it and the directory fsynced: whatever ends
// the process when, the file on disk is the old snapshot or the new one, never a part of one.
import { mkdir, open, readdir, rename, rm, readFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** Bumped when the layout changes: a snapshot of a newer format is ignored (with a warning). */
export const SNAPSHOT_FORMAT = 1;

export interface SnapshotLog {
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

export interface Snapshot {
  /** Key below the prefix → stored JSON text and the revision of its last change. */
  resources: Map<string, { value: string; revision: number }>;
  /** The etcd revision the set is at. */
  revision: number;
}

interface SnapshotFile {
  format: number;
  prefix: string;
  revision: number;
  written_at: string;
  resources: Record<string, { revision: number; value: unknown }>;
}

export interface SnapshotOptions {
  path: string;
  /** The etcd prefix it belongs to: a snapshot of another prefix is not this gateway's. */
  prefix: string;
  log: SnapshotLog;
  /** Test seam (SLUICE_TEST_SNAPSHOT_DELAY_MS): a slow disk, between writing the data and its fsync. */
  delayMs?: number;
}

export class SnapshotCache {
  readonly #options: SnapshotOptions;
  /** The write in progress, if any. */
  #writing: Promise<void> | undefined;
  /** What to write once the current write is done (only the latest counts). */
  #next: Snapshot | undefined;
  #written = 0;
  /** The last write failed (logged once until one succeeds). */
  #failing = false;

  constructor(options: SnapshotOptions) {
    this.#options = options;
  }

  get path(): string {
    return this.#options.path;
  }

  /** Writes completed since the start. */
  get written(): number {
    return this.#written;
  }

  /** The snapshot on disk, or undefined (none, unreadable, another prefix, a newer format: each but "none" with a warning). */
  async read(): Promise<Snapshot | undefined> {
    const { path, prefix, log } = this.#options;
    await this.#removeLeftovers();
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') log.warn({ event: 'snapshot_ignored', path, reason: (error as NodeJS.ErrnoException).code ?? String(error) }, 'the snapshot cache cannot be read; waiting for etcd');
      return undefined;
    }
    const ignore = (reason: string) => {
      log.warn({ event: 'snapshot_ignored', path, reason }, `the snapshot cache is ignored (${reason}); waiting for etcd`);
      return undefined;
    };
    let file: SnapshotFile;
    try {
      file = JSON.parse(text) as SnapshotFile;
    } catch {
      return ignore('not JSON');
    }
    if (typeof file !== 'object' || file === null || typeof file.format !== 'number') return ignore('not a snapshot');
    if (file.format > SNAPSHOT_FORMAT) return ignore(`written in format ${file.format} by a newer Sluice; this one reads format ${SNAPSHOT_FORMAT}`);
    if (file.prefix !== prefix) return ignore(`it holds prefix "${String(file.prefix)}", not "${prefix}"`);
    if (typeof file.revision !== 'number' || typeof file.resources !== 'object' || file.resources === null) return ignore('not a snapshot');
    const resources = new Map<string, { value: string; revision: number }>();
    for (const [key, entry] of Object.entries(file.resources)) {
      resources.set(key, { value: JSON.stringify(entry?.value), revision: Number(entry?.revision) || 0 });
    }
    return { resources, revision: file.revision };
  }

  /** Writes `snapshot` soon: after the write in progress, if any (a later call replaces one not started yet). */
  write(snapshot: Snapshot): void {
    this.#next = snapshot;
    if (!this.#writing) this.#writing = this.#drain();
  }

  /** Resolves true once nothing is left to write, or false after `timeoutMs` (L9: the shutdown's allowance). */
  async flush(timeoutMs: number): Promise<boolean> {
    const writing = this.#writing;
    if (!writing) return true;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    try {
      return await Promise.race([writing.then(() => true as const), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  async #drain(): Promise<void> {
    try {
      while (this.#next) {
        const snapshot = this.#next;
        this.#next = undefined;
        try {
          await this.#writeFile(snapshot);
          this.#written++;
          if (this.#failing) this.#options.log.warn({ event: 'snapshot_write_recovered', path: this.#options.path }, 'the snapshot cache is written again');
          this.#failing = false;
        } catch (error) {
          if (!this.#failing) {
            this.#options.log.error({ event: 'snapshot_write_failed', path: this.#options.path, reason: (error as NodeJS.ErrnoException).code ?? (error as Error).message }, 'the snapshot cache could not be written (said once until it works again); the gateway serves on, but a restart while etcd is down would find an older snapshot or none');
          }
          this.#failing = true;
        }
      }
    } finally {
      this.#writing = undefined;
    }
  }

  /** Temporary files of processes that were killed while writing (a living one's are left alone). */
  async #removeLeftovers(): Promise<void> {
    const directory = dirname(this.#options.path);
    const pattern = new RegExp(`^\\.${basename(this.#options.path).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\.(\\d+)\\.tmp$`);
    let names: string[];
    try {
      names = await readdir(directory);
    } catch {
      return;
    }
    for (const name of names) {
      const pid = Number(pattern.exec(name)?.[1]);
      if (!pid || pid === process.pid || alive(pid)) continue;
      await rm(join(directory, name), { force: true });
    }
  }

  async #writeFile(snapshot: Snapshot): Promise<void> {
    const { path, prefix, delayMs } = this.#options;
    const resources: SnapshotFile['resources'] = {};
    for (const [key, entry] of [...snapshot.resources].sort(([a], [b]) => (a < b ? -1 : 1))) resources[key] = { revision: entry.revision, value: JSON.parse(entry.value) as unknown };
    const file: SnapshotFile = { format: SNAPSHOT_FORMAT, prefix, revision: snapshot.revision, written_at: new Date().toISOString(), resources };
    const directory = dirname(path);
    await mkdir(directory, { recursive: true });
    const temporary = join(directory, `.${basename(path)}.${process.pid}.tmp`);
    // Provider keys may be in it: readable by this user only.
    const handle = await open(temporary, 'w', 0o600);
    try {
      await handle.writeFile(`${JSON.stringify(file, null, 1)}\n`);
      if (delayMs) await new Promise((resolve) => setTimeout(resolve, delayMs));
      await handle.sync();
    } catch (error) {
      await handle.close();
      await rm(temporary, { force: true });
      throw error;
    }
    await handle.close();
    await rename(temporary, path);
    const dir = await open(directory, 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
