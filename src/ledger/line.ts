// A record's line in the ledger's spool: `<crc32 of the JSON, 8 hex> <JSON>\n`. The spool writes
// them; they are checked (and parsed) where they are read: in the SQLite store's own thread, or on
// the gateway's thread for a store that runs there (PostgreSQL's driver).
import { crc32 } from 'node:zlib';
import type { LedgerRecord } from './record.ts';

/** A line's end, and the byte between its checksum and its JSON. */
export const NEWLINE = 0x0a;
export const SPACE = 0x20;
/** The checksum, a space and the newline around the JSON. */
export const LINE_OVERHEAD = 10;
/** Every record's JSON starts so (`id` is its first field). */
const RECORD_START = '{"id":"';

/** What a store did with a chunk of the spool's lines: the records new to it, and the lines skipped as corrupt. */
export interface LinesInserted {
  added: number;
  corrupt: number;
}

/** `<crc32 of the JSON bytes, 8 hex> <JSON>\n` (what the spool's `append` writes, as a string). */
export function encodeLine(record: LedgerRecord): string {
  const json = JSON.stringify(record);
  return `${crc32(json).toString(16).padStart(8, '0')} ${json}\n`;
}

/**
 * The JSON of `buffer[start, end)` (a line without its newline), unparsed, or undefined when its
 * checksum is wrong or it is not a record's.
 */
function checkedLine(buffer: Buffer, start = 0, end = buffer.length): string | undefined {
  if (end - start < 11 || buffer[start + 8] !== SPACE) return undefined;
  let sum = 0;
  for (let i = start; i < start + 8; i++) {
    const c = buffer[i]!;
    const digit = c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x61 && c <= 0x66 ? c - 0x57 : -1;
    if (digit < 0) return undefined;
    sum = sum * 16 + digit;
  }
  if (crc32(buffer.subarray(start + 9, end)) !== sum) return undefined;
  const json = buffer.toString('utf8', start + 9, end);
  return json.startsWith(RECORD_START) ? json : undefined;
}

/** The lines of `buffer` (whole lines, each with its newline): the JSON of each good one, and how many were not. */
export function checkLines(buffer: Buffer): { lines: string[]; corrupt: number } {
  const lines: string[] = [];
  let corrupt = 0;
  for (let start = 0; start < buffer.length; ) {
    let newline = buffer.indexOf(NEWLINE, start);
    if (newline < 0) newline = buffer.length;
    const json = checkedLine(buffer, start, newline);
    if (json !== undefined) lines.push(json);
    else corrupt++;
    start = newline + 1;
  }
  return { lines, corrupt };
}

/**
 * The records of checked lines, each parsed apart: a line whose checksum matches but whose JSON is
 * not a record (written by something else than a spool) is counted, never allowed to hold up the
 * batch it is in.
 */
export function recordsOf(lines: readonly string[]): { records: LedgerRecord[]; corrupt: number } {
  const records: LedgerRecord[] = [];
  let corrupt = 0;
  for (const json of lines) {
    const record = parsedRecord(json);
    if (record === undefined) corrupt++;
    else records.push(record);
  }
  return { records, corrupt };
}

function parsedRecord(json: string): LedgerRecord | undefined {
  try {
    const record: unknown = JSON.parse(json);
    if (typeof record !== 'object' || record === null || typeof (record as { id?: unknown }).id !== 'string') return undefined;
    return record as LedgerRecord;
  } catch {
    return undefined;
  }
}

/** The record of `buffer[start, end)` (a line without its newline), or undefined when its checksum or its JSON is wrong. */
export function decodeLine(buffer: Buffer, start = 0, end = buffer.length): LedgerRecord | undefined {
  const json = checkedLine(buffer, start, end);
  return json === undefined ? undefined : parsedRecord(json);
}
