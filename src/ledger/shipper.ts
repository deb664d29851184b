// The usage ledger's shipper: reads the spool's segments back (a chunk at a time, never the whole
// spool), sends the lines to the store in batches (the store checks each line's checksum: SQLite's
// in its own thread) and notes its progress in a sidecar beside each segment; a segment shipped to
// its end and no longer written is deleted. The store ignores an id it already has, so a progress
// note lost in a crash only ships a batch again. While the store is down the same batch is retried
// with back-off, and the outage is reported once when it starts and once when it ends.
import { open, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { systemClock, type Clock, type TimerHandle } from '../lifecycle/clock.ts';
import type { LedgerRecord } from './record.ts';
import { SIDECAR_SUFFIX, type SegmentChunk, type Spool } from './spool.ts';
import { decodeLine, NEWLINE, type LinesInserted } from './line.ts';

/** Where the records go: the ledger store (its `insert` ignores ids it already holds). */
export interface LedgerSink {
  /** Inserts the records whose id is not there yet, in one transaction; resolves with how many were new. */
  insert(records: readonly LedgerRecord[]): Promise<number>;
  /**
   * The same, given the spool's lines as written (`bytes`: whole lines, each with its newline):
   * the store checks and parses them (in its own thread, for SQLite), skipping the corrupt ones.
   * Resolves with how many records were new and how many lines were corrupt.
   */
  insertLines?(bytes: Buffer): Promise<LinesInserted>;
}

export interface ShipperEvents {
  /** The store failed; called once per outage (the batch is retried with back-off meanwhile). */
  storeUnavailable(error: Error): void;
  /** The store took a batch again after `downMs`; `records` were waiting then. */
  storeRecovered(downMs: number, records: number): void;
  /** `lines` lines of `segment` were skipped: a bad checksum, not a record, or a torn tail. */
  corrupt(segment: string, lines: number): void;
  /** The spool's directory or a segment could not be read or deleted (tried again later). */
  ioFailed(error: Error): void;
}

export interface ShipperOptions {
  spool: Spool;
  store: LedgerSink;
  events?: Partial<ShipperEvents>;
  clock?: Clock;
  /** How often orphan segments are looked for (default 10 s). */
  scanMs?: number;
  /** The store is retried after this, doubling up to retryMaxMs (defaults 250 ms and 5 s). */
  retryFirstMs?: number;
  retryMaxMs?: number;
  /** A batch is at most this many records (default 500) read from at most about this many bytes (default 1 MiB). */
  chunkRecords?: number;
  /** A segment's progress is noted beside it at most this often (default 1000 ms): a crash ships again what followed the last note. */
  noteEveryMs?: number;
  chunkBytes?: number;
}

export interface DrainResult {
  /** Records the store took during the drain. */
  shipped: number;
  /** Records not in the store when it ended (still in the spool's files, shipped by the next start). */
  left: number;
}

/** A segment's records appended within this of a mark's share it: the lag's age is right to this (and a segment's marks stay few: ten a second at most). */
const MARK_MS = 100;

interface Mark {
  /** The byte offset where the records of this mark end. */
  end: number;
  /** Epoch ms: the oldest of them. */
  at: number;
}

interface Segment {
  readonly name: string;
  /** Shipped up to this byte offset. */
  offset: number;
  /** Fsynced up to this byte offset (a segment still written is shipped that far). */
  durable: number;
  /** This spool's current segment. */
  writing: boolean;
  /** Lines not yet shipped (the lag). */
  unshipped: number;
  /** When the unshipped records were appended, oldest first. */
  marks: Mark[];
  /** Claimed from a process that is gone: its age is read from the records' `ended_at`. */
  readonly claimed: boolean;
  /** When its progress was last noted beside it (clock ms). */
  notedAt: number;
}

/** A segment's progress is noted beside it at most this often (a crash ships again what followed the note: the store keeps each record once). */
const NOTE_EVERY_MS = 1000;

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/**
 * Ships one spool. Made right after its spool, before the first append: it hears of the spool's
 * own segments from the spool (`subscribe`) and finds the orphans itself (`start`).
 */
export class Shipper {
  readonly #spool: Spool;
  readonly #store: LedgerSink;
  readonly #events: Partial<ShipperEvents>;
  readonly #clock: Clock;
  readonly #scanMs: number;
  readonly #retryFirstMs: number;
  readonly #retryMaxMs: number;
  readonly #chunkRecords: number;
  readonly #chunkBytes: number;
  /** Known segments with something to ship, in the order they are shipped. */
  readonly #segments = new Map<string, Segment>();

  #running: Promise<void> | undefined;
  #again = false;
  #scanning = false;
  #scanTimer: TimerHandle | undefined;
  #sleepTimer: TimerHandle | undefined;
  #wake: (() => void) | undefined;
  #retryMs: number;
  /** clock.now() when the current outage began. */
  #downSince: number | undefined;
  #closed = false;
  readonly #noteEveryMs: number;
  #shipped = 0;
  #corrupt = 0;

  constructor(options: ShipperOptions) {
    this.#spool = options.spool;
    this.#store = options.store;
    this.#events = options.events ?? {};
    this.#clock = options.clock ?? systemClock;
    this.#scanMs = options.scanMs ?? 10_000;
    this.#retryFirstMs = options.retryFirstMs ?? 250;
    this.#retryMaxMs = options.retryMaxMs ?? 5000;
    this.#chunkRecords = options.chunkRecords ?? 500;
    this.#noteEveryMs = options.noteEveryMs ?? NOTE_EVERY_MS;
    this.#chunkBytes = options.chunkBytes ?? 1 << 20;
    this.#retryMs = this.#retryFirstMs;
    this.#spool.subscribe({
      durable: (name, offset, records, firstAt) => this.#durable(name, offset, records, firstAt),
      rotated: (name) => this.#rotated(name),
    });
  }

  /** Records accepted by the spool and not yet in the store. */
  get lag(): number {
    let lag = this.#spool.queued;
    for (const segment of this.#segments.values()) lag += segment.unshipped;
    return lag;
  }

  /** The age (ms) of the oldest record not yet in the store; 0 when none. */
  get oldestMs(): number {
    let oldest = this.#spool.queuedSince ?? Infinity;
    for (const segment of this.#segments.values()) {
      const at = segment.marks[0]?.at;
      if (at !== undefined && segment.unshipped > 0) oldest = Math.min(oldest, at);
    }
    return oldest === Infinity ? 0 : Math.max(0, Date.now() - oldest);
  }

  /** Records the store took since the start. */
  get shipped(): number {
    return this.#shipped;
  }

  /** Lines skipped as corrupt since the start. */
  get corrupt(): number {
    return this.#corrupt;
  }

  /** Claims the orphans found now (the first scan is awaited), ships them, and looks again every `scanMs`. */
  async start(): Promise<void> {
    await this.#scan();
    if (!this.#closed) this.#scanTimer ??= this.#clock.every(this.#scanMs, () => void this.#scan());
  }

  /**
   * For the exit: flushes and seals the spool, then ships until everything is in the store or
   * `deadlineMs` (from now) has passed. What is left stays in the segment files.
   */
  async drain(deadlineMs: number): Promise<DrainResult> {
    const before = this.#shipped;
    let timer: TimerHandle | undefined;
    const deadline = new Promise<void>((resolve) => (timer = this.#clock.after(Math.max(0, deadlineMs), resolve)));
    await Promise.race([this.#shipAll(), deadline]);
    timer?.cancel();
    return { shipped: this.#shipped - before, left: this.lag };
  }

  /** Stops the timers and the shipping (a batch in the store's hands is not waited for). The spool is closed apart. */
  close(): void {
    this.#closed = true;
    this.#scanTimer?.cancel();
    this.#scanTimer = undefined;
    this.#sleepTimer?.cancel();
    this.#wake?.();
  }

  #durable(name: string, offset: number, records: number, firstAt: number): void {
    const segment = this.#segment(name, true);
    segment.durable = offset;
    segment.unshipped += records;
    const last = segment.marks.at(-1);
    if (last && firstAt - last.at < MARK_MS) last.end = offset;
    else segment.marks.push({ end: offset, at: firstAt });
    this.#kick();
  }

  #rotated(name: string): void {
    this.#segment(name, false).writing = false;
    this.#kick();
  }

  #segment(name: string, writing: boolean): Segment {
    let segment = this.#segments.get(name);
    if (!segment) {
      segment = { name, offset: 0, durable: 0, writing, unshipped: 0, marks: [], claimed: false, notedAt: -Infinity };
      this.#segments.set(name, segment);
    }
    return segment;
  }

  async #scan(): Promise<void> {
    if (this.#scanning || this.#closed) return;
    this.#scanning = true;
    try {
      const claimed = await this.#spool.claimOrphans();
      for (const name of claimed) {
        const offset = await this.#progress(name);
        const { lines, firstAt } = await this.#spool.count(name, offset).catch(() => ({ lines: 0, firstAt: undefined }));
        const marks = firstAt === undefined ? [] : [{ end: Infinity, at: firstAt }];
        this.#segments.set(name, { name, offset, durable: 0, writing: false, unshipped: lines, marks, claimed: true, notedAt: -Infinity });
      }
      if (claimed.length > 0) this.#kick();
    } catch (error) {
      this.#report('ioFailed', asError(error));
    } finally {
      this.#scanning = false;
    }
  }

  /** The sidecar's offset, when it is the end of a line of the segment; else 0 (shipped again, the store ignores what it has). */
  async #progress(name: string): Promise<number> {
    const path = join(this.#spool.dir, name);
    let offset: number;
    try {
      const match = /^(\d+)\n$/.exec(await readFile(path + SIDECAR_SUFFIX, 'latin1'));
      offset = match ? Number(match[1]) : 0;
      if (offset === 0) return 0;
      const fh = await open(path, 'r');
      try {
        const byte = Buffer.alloc(1);
        const { bytesRead } = await fh.read(byte, 0, 1, offset - 1);
        return bytesRead === 1 && byte[0] === 0x0a ? offset : 0;
      } finally {
        await fh.close();
      }
    } catch {
      return 0;
    }
  }

  #kick(): void {
    if (this.#closed) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = (async () => {
      do {
        this.#again = false;
        await this.#ship();
      } while (this.#again && !this.#closed);
    })().finally(() => (this.#running = undefined));
  }

  #next(): Segment | undefined {
    for (const segment of this.#segments.values()) {
      if (!segment.writing || segment.offset < segment.durable) return segment;
    }
    return undefined;
  }

  async #ship(): Promise<void> {
    for (let segment = this.#next(); segment && !this.#closed; segment = this.#next()) {
      await this.#shipChunk(segment);
    }
  }

  async #shipChunk(segment: Segment): Promise<void> {
    const finished = !segment.writing;
    let chunk: SegmentChunk;
    try {
      chunk = await this.#spool.read(segment.name, segment.offset, {
        limit: finished ? undefined : segment.durable,
        maxRecords: this.#chunkRecords,
        maxBytes: this.#chunkBytes,
      });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
        this.#segments.delete(segment.name);
        return;
      }
      this.#report('ioFailed', asError(error));
      await this.#sleep(this.#retryMaxMs);
      return;
    }
    if (!finished && chunk.end === segment.offset) {
      // Its fsynced end cannot be read (cut short from outside): nothing to ship until more is written.
      segment.durable = segment.offset;
      return;
    }
    if (segment.claimed && segment.marks[0] && chunk.count > 0) {
      const first = decodeLine(chunk.bytes, 0, chunk.bytes.indexOf(NEWLINE));
      if (first) segment.marks[0].at = first.ended_at;
    }
    const bad = chunk.count > 0 ? await this.#insert(chunk) : 0;
    if (bad === undefined) return;
    const corrupt = bad + chunk.torn;
    if (corrupt > 0) {
      this.#corrupt += corrupt;
      this.#report('corrupt', segment.name, corrupt);
    }
    this.#shipped += chunk.count - bad;
    segment.offset = chunk.end;
    segment.unshipped = Math.max(0, segment.unshipped - chunk.count - chunk.torn);
    while (segment.marks[0] && segment.marks[0].end <= segment.offset) segment.marks.shift();
    if (finished && chunk.eof) {
      this.#segments.delete(segment.name);
      await this.#spool.remove(segment.name).catch((error: unknown) => this.#report('ioFailed', asError(error)));
    } else if (chunk.count + chunk.torn > 0 && this.#clock.now() - segment.notedAt >= this.#noteEveryMs) {
      // No fsync, and at most once a second: a stale note only ships again what followed it.
      segment.notedAt = this.#clock.now();
      await writeFile(join(this.#spool.dir, segment.name + SIDECAR_SUFFIX), `${segment.offset}\n`).catch(() => undefined);
    }
  }

  /**
   * Sends one chunk's lines, retrying with back-off until the store takes them; resolves with how
   * many were corrupt (skipped), or undefined when closed first.
   */
  async #insert(chunk: SegmentChunk): Promise<number | undefined> {
    const store = this.#store;
    const send =
      store.insertLines !== undefined
        ? async () => (await store.insertLines!(chunk.bytes)).corrupt
        : async () => {
            if (chunk.records.length > 0) await store.insert(chunk.records);
            return chunk.corrupt - chunk.torn;
          };
    for (;;) {
      if (this.#closed) return undefined;
      let corrupt: number;
      try {
        corrupt = await send();
      } catch (error) {
        if (this.#downSince === undefined) {
          this.#downSince = this.#clock.now();
          this.#report('storeUnavailable', asError(error));
        }
        await this.#sleep(this.#retryMs);
        this.#retryMs = Math.min(this.#retryMaxMs, this.#retryMs * 2);
        continue;
      }
      if (this.#closed) return undefined;
      this.#retryMs = this.#retryFirstMs;
      if (this.#downSince !== undefined) {
        const downMs = this.#clock.now() - this.#downSince;
        this.#downSince = undefined;
        this.#report('storeRecovered', downMs, this.lag);
      }
      return corrupt;
    }
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.#wake = resolve;
      this.#sleepTimer = this.#clock.after(ms, resolve);
    });
  }

  /** Ships until nothing is left to ship (the spool sealed first, so its segments are all finished). */
  async #shipAll(): Promise<void> {
    await this.#spool.seal();
    while (!this.#closed && this.#next()) {
      this.#kick();
      await this.#running;
    }
  }

  #report<E extends keyof ShipperEvents>(event: E, ...args: Parameters<ShipperEvents[E]>): void {
    try {
      (this.#events[event] as ((...a: Parameters<ShipperEvents[E]>) => void) | undefined)?.(...args);
    } catch {
      // a failing listener must not stop the shipping
    }
  }
}
