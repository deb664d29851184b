// The gateway's request ids: UUIDs of version 7 (RFC 9562), whose first 48 bits are the Unix time
// in milliseconds and the rest random. Ids made close in time sort close together, so that the
// usage ledger's index on them grows at its end (a version 4 id lands anywhere in it: measured, its
// SQLite insert cost about 10 µs more a record, and more as the table grows) while each stays as
// unique: 74 random bits in every millisecond.
import { randomFillSync } from 'node:crypto';

/** Random bytes for 256 ids, refilled when used up (one call to the system's generator per 256 ids). */
const POOL_IDS = 256;
const pool = Buffer.alloc(16 * POOL_IDS);
let next = POOL_IDS;
/** The id's text, written here a byte at a time and read as one flat string. */
const text = Buffer.alloc(36);
const HEX = Buffer.from('0123456789abcdef', 'latin1');
/** Where each of the 16 bytes' two digits go (the hyphens sit at 8, 13, 18 and 23). */
const AT = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
text.fill(0x2d);

/** A new version 7 UUID, `xxxxxxxx-xxxx-7xxx-[89ab]xxx-xxxxxxxxxxxx`, its time `nowMs` (default: now). */
export function requestId(nowMs: number = Date.now()): string {
  if (next === POOL_IDS) {
    randomFillSync(pool);
    next = 0;
  }
  const base = 16 * next++;
  const ms = Math.max(0, Math.floor(nowMs));
  // 48 bits of milliseconds: the high 16 apart (bit operations take 32).
  const high = Math.floor(ms / 2 ** 32) & 0xffff;
  const low = ms >>> 0;
  pool[base] = high >>> 8;
  pool[base + 1] = high & 0xff;
  pool[base + 2] = low >>> 24;
  pool[base + 3] = (low >>> 16) & 0xff;
  pool[base + 4] = (low >>> 8) & 0xff;
  pool[base + 5] = low & 0xff;
  pool[base + 6] = 0x70 | (pool[base + 6]! & 0x0f);
  pool[base + 8] = 0x80 | (pool[base + 8]! & 0x3f);
  for (let i = 0; i < 16; i++) {
    const byte = pool[base + i]!;
    const at = AT[i]!;
    text[at] = HEX[byte >>> 4]!;
    text[at + 1] = HEX[byte & 0x0f]!;
  }
  return text.toString('latin1');
}
