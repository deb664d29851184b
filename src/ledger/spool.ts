// The usage ledger's local spool: every finished request's record is appended here first, on the
// request path, so that a slow or absent store never holds a request up and a crash loses at most
// the last `fsyncMs` of records. Records are lines in segment files `<pid>.<startMs>-<seq>.seg`
// (`<crc32 of the JSON, 8 hex> <JSON>\n`); the shipper (shipper.ts) reads them back, sends them to
// the store and deletes what it shipped. A segment whose owner is gone (a dead pid, or this pid
// with another start: PID 1 in a restarted container) is claimed by renaming it into this spool's
// names, so that of several workers sharing the directory exactly one ships it.
import { crc32 } from 'node:zlib';
import { mkdir, open, readdir, rename, stat, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { systemClock, type Clock, type TimerHandle } from '../lifecycle/clock.ts';
import type { LedgerRecord } from './record.ts';
import { checkLines, decodeLine, LINE_OVERHEAD, NEWLINE, recordsOf, SPACE } from './line.ts';

/** The shipper's progress in a segment is kept beside it, in `<segment>.shipped`. */
export const SIDECAR_SUFFIX = '.shipped';

const SEGMENT_NAME = /^(\d+)\.(\d+)-(\d{6,})\.seg$/;
/** A failed write is tried again after this, doubling up to RETRY_MAX_MS. */
const RETRY_FIRST_MS = 250;
const RETRY_MAX_MS = 5000;
/** A segment is at most a quarter of the spool, so that shipped segments can always free room. */
const SEGMENTS_PER_SPOOL = 4;
/** How much `count` reads at a time. */
const COUNT_CHUNK_BYTES = 1 << 20;
/** Appended lines are encoded straight into buffers of this size (a longer line gets one of its own). */
const APPEND_CHUNK_BYTES = 1 << 16;
const HEX_DIGITS = Buffer.from('0123456789abcdef', 'latin1');

export interface SpoolEvents {
  /** A record was refused (the spool is full, closed, or the record cannot be serialized); called once per record. */
  dropped(): void;
  /** A write or its fdatasync failed; the records are kept and written again (reported once until a write succeeds). */
  writeFailed(error: Error): void;
}

export interface SpoolOptions {
  dir: string;
  /** 'batch' (default): written and fdatasync'ed `fsyncMs` after the first pending append; 'always': at once when nothing is being written. */
  fsync?: 'batch' | 'always';
  /** Default 50. */
  fsyncMs?: number;
  /** The directory's segments and the records not yet written stay below this (default 1 GiB). */
  maxBytes?: number;
  /** A segment is rotated once it reaches this (default 8 MiB, at most maxBytes / 4). */
  segmentBytes?: number;
  clock?: Clock;
  events?: Partial<SpoolEvents>;
  /** The owner named in the segment files (default this process and now); tests write another's. */
  pid?: number;
  startMs?: number;
}

/** What the shipper hears from the spool it ships. */
export interface SpoolListener {
  /** `records` more lines of `segment` are on disk and fdatasync'ed, up to byte `offset`; the first was appended at `firstAt` (epoch ms). */
  durable(segment: string, offset: number, records: number, firstAt: number): void;
  /** `segment` is written no more (rotated, sealed, or left after a failed write): it may be shipped to its end and deleted. */
  rotated(segment: string): void;
}

/** Lines read back from a segment. */
export interface SegmentChunk {
  /**
   * The whole lines read, as written (each with its newline), not yet checked: a store with its
   * own thread (`insertLines`) checks and parses them there.
   */
  readonly bytes: Buffer;
  /** How many lines `bytes` holds. */
  readonly count: number;
  /** A torn tail taken after them (1, or 0): a finished segment's last bytes had no newline. */
  readonly torn: number;
  /** The good lines' records (parsed on first use). */
  readonly records: LedgerRecord[];
  /** Lines skipped (checked on first use): a bad checksum, not a record, or the torn tail. */
  readonly corrupt: number;
  /** The byte offset after the last line taken (where the next read starts). */
  readonly end: number;
  /** Everything up to the limit (or the file's end) was taken. */
  readonly eof: boolean;
}

export interface ReadLimits {
  /** Read up to this byte offset (the fsynced end of a segment still written); undefined: to the file's end, a torn tail counting as corrupt. */
  limit?: number | undefined;
  maxRecords: number;
  maxBytes: number;
}

interface Batch {
  readonly buffers: Buffer[];
  readonly records: number;
  readonly bytes: number;
  readonly firstAt: number;
}

interface OpenSegment {
  readonly name: string;
  readonly fh: FileHandle;
  size: number;
}

/** Two spools of one process never share a start (the start names the owner). */
let lastStartMs = 0;

/** Whether process `pid` exists (EPERM: it does, another user's). */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

function errorCode(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | undefined)?.code;
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/** Reads until `buffer` is full or the file ends; resolves with the bytes read. */
async function readFully(fh: FileHandle, buffer: Buffer, position: number): Promise<number> {
  let got = 0;
  while (got < buffer.length) {
    const { bytesRead } = await fh.read(buffer, got, buffer.length - got, position + got);
    if (bytesRead === 0) break;
    got += bytesRead;
  }
  return got;
}

/** One writev for the batch (more only when the system writes part of it). */
async function writeFully(fh: FileHandle, buffers: Buffer[]): Promise<void> {
  let left = buffers;
  while (left.length > 0) {
    let { bytesWritten } = await fh.writev(left);
    const rest: Buffer[] = [];
    for (const buffer of left) {
      if (bytesWritten >= buffer.length) bytesWritten -= buffer.length;
      else {
        rest.push(bytesWritten > 0 ? buffer.subarray(bytesWritten) : buffer);
        bytesWritten = 0;
      }
    }
    left = rest;
  }
}

/** How many whole lines `buffer` begins with, at most `maxLines`, and the bytes they take. */
function wholeLines(buffer: Buffer, maxLines: number): { count: number; used: number; full: boolean } {
  let count = 0;
  let used = 0;
  while (count < maxLines) {
    const newline = buffer.indexOf(NEWLINE, used);
    if (newline < 0) break;
    count++;
    used = newline + 1;
  }
  return { count, used, full: count >= maxLines };
}

/** A chunk of whole lines; they are checked and parsed only when asked for. */
function chunkOf(bytes: Buffer, count: number, torn: number, end: number, eof: boolean): SegmentChunk {
  let parsed: { records: LedgerRecord[]; corrupt: number } | undefined;
  const parse = () => {
    if (parsed) return parsed;
    const checked = checkLines(bytes);
    const { records, corrupt } = recordsOf(checked.lines);
    return (parsed = { records, corrupt: checked.corrupt + corrupt });
  };
  return {
    bytes,
    count,
    torn,
    get corrupt() {
      return parse().corrupt + torn;
    },
    get records() {
      return parse().records;
    },
    end,
    eof,
  };
}

/**
 * The spool. `append` is synchronous and cheap (JSON.stringify, then the line encoded straight
 * into a pending buffer and its crc32 taken there); the lines are written in batches (one writev
 * and one fdatasync each), by one chain of file operations.
 */
export class Spool {
  readonly #dir: string;
  readonly #mode: 'batch' | 'always';
  readonly #fsyncMs: number;
  readonly #maxBytes: number;
  readonly #segmentBytes: number;
  readonly #clock: Clock;
  readonly #events: Partial<SpoolEvents>;
  readonly #pid: number;
  readonly #startMs: number;
  #seq = 0;
  #listener: SpoolListener | undefined;

  /** Appended lines not yet taken by a write: whole buffers, then `#chunk` up to `#used`. */
  #full: Buffer[] = [];
  #chunk: Buffer = Buffer.alloc(0);
  #used = 0;
  #pendingRecords = 0;
  #pendingBytes = 0;
  #pendingFirstAt = 0;
  /** Taken by the write in progress. */
  #inflight: Batch | undefined;
  /** The directory's segments, as last counted plus what was written since. */
  #diskBytes = 0;

  /** The batch timer, or the retry timer after a failed write. */
  #timer: TimerHandle | undefined;
  /** A write is queued on the chain and has not yet taken the pending lines. */
  #writeQueued = false;
  /** The chain of file operations (writes, rotations): one at a time. */
  #tail: Promise<void> = Promise.resolve();
  #current: OpenSegment | undefined;
  #dirReady = false;
  #failing = false;
  #retryMs = RETRY_FIRST_MS;
  #closed = false;

  #appended = 0;
  #dropped = 0;

  readonly #onTimer = (): void => {
    this.#timer = undefined;
    this.#startWrite();
  };

  constructor(options: SpoolOptions) {
    this.#dir = options.dir;
    this.#mode = options.fsync ?? 'batch';
    this.#fsyncMs = options.fsyncMs ?? 50;
    this.#maxBytes = options.maxBytes ?? 1024 ** 3;
    this.#segmentBytes = Math.max(1, Math.min(options.segmentBytes ?? 8 * 1024 ** 2, Math.floor(this.#maxBytes / SEGMENTS_PER_SPOOL)));
    this.#clock = options.clock ?? systemClock;
    this.#events = options.events ?? {};
    this.#pid = options.pid ?? process.pid;
    this.#startMs = options.startMs ?? Math.max(Date.now(), lastStartMs + 1);
    lastStartMs = Math.max(lastStartMs, this.#startMs);
  }

  get dir(): string {
    return this.#dir;
  }

  /** The owner named in this spool's segments. */
  get pid(): number {
    return this.#pid;
  }

  get startMs(): number {
    return this.#startMs;
  }

  /** Records accepted since the start. */
  get appended(): number {
    return this.#appended;
  }

  /** Records refused since the start. */
  get dropped(): number {
    return this.#dropped;
  }

  /** The directory's segments plus what is not yet written, as counted against maxBytes. */
  get bytes(): number {
    return this.#diskBytes + this.#queuedBytes;
  }

  /** Records accepted and not yet on disk. */
  get queued(): number {
    return this.#pendingRecords + (this.#inflight?.records ?? 0);
  }

  /** When (epoch ms) the oldest record not yet on disk was appended; undefined when none. */
  get queuedSince(): number | undefined {
    if (this.#inflight) return this.#inflight.firstAt;
    return this.#pendingRecords > 0 ? this.#pendingFirstAt : undefined;
  }

  get #queuedBytes(): number {
    return this.#pendingBytes + (this.#inflight?.bytes ?? 0);
  }

  /** The shipper's hook (one listener). */
  subscribe(listener: SpoolListener): void {
    this.#listener = listener;
  }

  /**
   * Queues `record` for the disk: false (and counted as dropped) when the spool is full or closed,
   * or the record cannot be serialized. Never throws, never waits.
   */
  append(record: LedgerRecord): boolean {
    if (this.#closed) return this.#drop();
    let json: string;
    try {
      json = JSON.stringify(record);
    } catch {
      return this.#drop();
    }
    if (typeof json !== 'string') return this.#drop();
    // Encoded straight into the pending buffer (a UTF-16 unit is at most 3 UTF-8 bytes); kept only if it fits the spool.
    const chunk = this.#room(json.length * 3 + LINE_OVERHEAD);
    const start = this.#used;
    const length = chunk.write(json, start + 9);
    const bytes = length + LINE_OVERHEAD;
    if (this.#diskBytes + this.#queuedBytes + bytes > this.#maxBytes) return this.#drop();
    const crc = crc32(chunk.subarray(start + 9, start + 9 + length));
    for (let digit = 0; digit < 8; digit++) chunk[start + digit] = HEX_DIGITS[(crc >>> (28 - 4 * digit)) & 15]!;
    chunk[start + 8] = SPACE;
    chunk[start + 9 + length] = NEWLINE;
    this.#used = start + bytes;
    if (this.#pendingRecords === 0) this.#pendingFirstAt = Date.now();
    this.#pendingRecords++;
    this.#pendingBytes += bytes;
    this.#appended++;
    if (this.#mode === 'always') {
      if (!this.#failing) this.#startWrite();
    } else {
      this.#timer ??= this.#clock.after(this.#fsyncMs, this.#onTimer);
    }
    return true;
  }

  /** Writes and fdatasyncs what is pending now; resolves when done or failed (never rejects). */
  flush(): Promise<void> {
    if (this.#pendingRecords > 0) {
      this.#timer?.cancel();
      this.#timer = undefined;
      this.#startWrite();
    }
    return this.#tail;
  }

  /** Flushes, then ends the current segment (it may be shipped to its end and deleted); a later append starts another. */
  seal(): Promise<void> {
    void this.flush();
    return this.#enqueue(() => this.#endSegment());
  }

  /** Seals and refuses any further record. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.seal();
    this.#timer?.cancel();
    this.#timer = undefined;
  }

  /**
   * Claims the orphans in the directory, oldest first: segments whose owner pid is not alive, or
   * is this process's with another start. Each is renamed into this spool's names (with its
   * sidecar), so no other worker ships it too; a segment another process claimed first is skipped.
   * Also recounts the directory's bytes and removes sidecars whose segment is gone. Resolves with
   * the claimed segments' new names.
   */
  async claimOrphans(): Promise<string[]> {
    let names: string[];
    try {
      names = await readdir(this.#dir);
    } catch (error) {
      if (errorCode(error) === 'ENOENT') return [];
      throw error;
    }
    const present = new Set(names);
    const segments: { name: string; pid: number; startMs: number; seq: number }[] = [];
    for (const name of names) {
      const match = SEGMENT_NAME.exec(name);
      if (match) segments.push({ name, pid: Number(match[1]), startMs: Number(match[2]), seq: Number(match[3]) });
    }
    segments.sort((a, b) => a.startMs - b.startMs || a.seq - b.seq);
    const claimed: string[] = [];
    let bytes = 0;
    for (const segment of segments) {
      const from = join(this.#dir, segment.name);
      try {
        bytes += (await stat(from)).size;
      } catch {
        continue;
      }
      if (!this.#isOrphan(segment.pid, segment.startMs)) continue;
      const name = this.#nextName();
      try {
        await rename(from, join(this.#dir, name));
      } catch (error) {
        if (errorCode(error) === 'ENOENT') continue;
        throw error;
      }
      await rename(from + SIDECAR_SUFFIX, join(this.#dir, name) + SIDECAR_SUFFIX).catch(() => undefined);
      claimed.push(name);
    }
    for (const name of names) {
      if (name.endsWith(SIDECAR_SUFFIX) && !present.has(name.slice(0, -SIDECAR_SUFFIX.length))) {
        await unlink(join(this.#dir, name)).catch(() => undefined);
      }
    }
    this.#diskBytes = bytes;
    return claimed;
  }

  /**
   * Reads lines back from `segment` at byte `from`: at most `maxRecords` lines and about
   * `maxBytes` (more only for a single line longer than that).
   */
  async read(segment: string, from: number, limits: ReadLimits): Promise<SegmentChunk> {
    const fh = await open(join(this.#dir, segment), 'r');
    try {
      const finished = limits.limit === undefined;
      const end = limits.limit ?? (await fh.stat()).size;
      let want = Math.min(limits.maxBytes, end - from);
      for (;;) {
        if (want <= 0) return chunkOf(Buffer.alloc(0), 0, 0, from, true);
        const buffer = Buffer.allocUnsafe(want);
        const got = await readFully(fh, buffer, from);
        const atEnd = got < want || from + got >= end;
        const { count, used, full } = wholeLines(buffer.subarray(0, got), limits.maxRecords);
        if (used === 0 && !atEnd) {
          want = Math.min(end - from, want * 2);
          continue;
        }
        const torn = atEnd && finished && !full && used < got ? 1 : 0;
        const taken = torn === 1 ? got : used;
        return chunkOf(buffer.subarray(0, used), count, torn, from + taken, atEnd && taken === got);
      }
    } finally {
      await fh.close();
    }
  }

  /** How many lines `segment` holds from byte `from` on, and the `ended_at` of the first good one (read in 1 MiB pieces). */
  async count(segment: string, from: number): Promise<{ lines: number; firstAt: number | undefined }> {
    const fh = await open(join(this.#dir, segment), 'r');
    try {
      const buffer = Buffer.allocUnsafe(COUNT_CHUNK_BYTES);
      let lines = 0;
      let firstAt: number | undefined;
      for (let position = from; ; ) {
        const got = await readFully(fh, buffer, position);
        if (got === 0) break;
        let start = 0;
        for (let newline = buffer.indexOf(NEWLINE, 0); newline >= 0 && newline < got; newline = buffer.indexOf(NEWLINE, newline + 1)) {
          lines++;
          if (firstAt === undefined) firstAt = decodeLine(buffer, start, newline)?.ended_at;
          start = newline + 1;
        }
        position += got;
        if (got < buffer.length) break;
      }
      return { lines, firstAt };
    } finally {
      await fh.close();
    }
  }

  /** Deletes a shipped segment and its sidecar. */
  async remove(segment: string): Promise<void> {
    const path = join(this.#dir, segment);
    let size = 0;
    try {
      size = (await stat(path)).size;
      await unlink(path);
      this.#diskBytes = Math.max(0, this.#diskBytes - size);
    } catch (error) {
      if (errorCode(error) !== 'ENOENT') throw error;
    }
    await unlink(path + SIDECAR_SUFFIX).catch(() => undefined);
  }

  #isOrphan(pid: number, startMs: number): boolean {
    if (pid === this.#pid) return startMs !== this.#startMs;
    return !isAlive(pid);
  }

  #nextName(): string {
    this.#seq++;
    return `${this.#pid}.${this.#startMs}-${String(this.#seq).padStart(6, '0')}.seg`;
  }

  #drop(): false {
    this.#dropped++;
    try {
      this.#events.dropped?.();
    } catch {
      // the caller's counting must not make append throw
    }
    return false;
  }

  /** The pending buffer, with at least `bytes` free after `#used`. */
  #room(bytes: number): Buffer {
    if (this.#chunk.length - this.#used < bytes) {
      if (this.#used > 0) this.#full.push(this.#chunk.subarray(0, this.#used));
      this.#chunk = Buffer.allocUnsafe(Math.max(APPEND_CHUNK_BYTES, bytes));
      this.#used = 0;
    }
    return this.#chunk;
  }

  /** Takes the pending lines; the rest of the current buffer goes on taking appends. */
  #takePending(): Batch {
    const buffers = this.#full;
    if (this.#used > 0) {
      buffers.push(this.#chunk.subarray(0, this.#used));
      this.#chunk = this.#chunk.subarray(this.#used);
      this.#used = 0;
    }
    const batch: Batch = { buffers, records: this.#pendingRecords, bytes: this.#pendingBytes, firstAt: this.#pendingFirstAt };
    this.#full = [];
    this.#pendingRecords = 0;
    this.#pendingBytes = 0;
    return batch;
  }

  /** Puts a batch that could not be written back in front of what was appended since. */
  #putBack(batch: Batch): void {
    this.#full = batch.buffers.concat(this.#full);
    this.#pendingRecords += batch.records;
    this.#pendingBytes += batch.bytes;
    this.#pendingFirstAt = batch.firstAt;
  }

  #enqueue(op: () => Promise<void>): Promise<void> {
    this.#tail = this.#tail.then(op);
    return this.#tail;
  }

  /** Queues a write of whatever is pending when it starts (once: later appends join it). */
  #startWrite(): void {
    if (this.#writeQueued) return;
    this.#writeQueued = true;
    void this.#enqueue(async () => {
      this.#writeQueued = false;
      await this.#writeBatch();
    });
  }

  async #writeBatch(): Promise<void> {
    if (this.#pendingRecords === 0) return;
    const batch = this.#takePending();
    this.#inflight = batch;
    try {
      const segment = await this.#segment();
      await writeFully(segment.fh, batch.buffers);
      segment.size += batch.bytes;
      this.#diskBytes += batch.bytes;
      // Counted on disk now: not a second time as in flight while the fdatasync runs.
      this.#inflight = { ...batch, bytes: 0 };
      await segment.fh.datasync();
      this.#inflight = undefined;
      this.#failing = false;
      this.#retryMs = RETRY_FIRST_MS;
      this.#listener?.durable(segment.name, segment.size, batch.records, batch.firstAt);
      if (segment.size >= this.#segmentBytes) await this.#endSegment();
    } catch (error) {
      this.#inflight = undefined;
      this.#putBack(batch);
      // What reached the file may end in a torn line: the batch is written again to a new segment.
      await this.#endSegment();
      if (!this.#failing) {
        this.#failing = true;
        try {
          this.#events.writeFailed?.(asError(error));
        } catch {
          // reporting must not stop the retries
        }
      }
      this.#timer?.cancel();
      this.#timer = this.#closed ? undefined : this.#clock.after(this.#retryMs, this.#onTimer);
      this.#retryMs = Math.min(RETRY_MAX_MS, this.#retryMs * 2);
    }
  }

  async #segment(): Promise<OpenSegment> {
    if (this.#current) return this.#current;
    if (!this.#dirReady) {
      await mkdir(this.#dir, { recursive: true });
      this.#dirReady = true;
    }
    for (;;) {
      const name = this.#nextName();
      try {
        this.#current = { name, fh: await open(join(this.#dir, name), 'ax'), size: 0 };
        return this.#current;
      } catch (error) {
        if (errorCode(error) === 'EEXIST') continue;
        if (errorCode(error) === 'ENOENT') this.#dirReady = false;
        throw error;
      }
    }
  }

  async #endSegment(): Promise<void> {
    const segment = this.#current;
    if (!segment) return;
    this.#current = undefined;
    await segment.fh.close().catch(() => undefined);
    this.#listener?.rotated(segment.name);
  }
}
