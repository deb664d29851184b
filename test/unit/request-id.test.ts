// The request ids (src/server/request-id.ts): RFC 9562 version 7 UUIDs whose first 48 bits are the
// time they were made, so that the usage ledger's index on them grows at its end. Each is checked
// against its time, its version and variant bits, its uniqueness (across the random pool's refills)
// and its order: an id of a later millisecond sorts after every id of an earlier one.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { requestId } from '../../src/server/request-id.ts';

const SHAPE = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
/** The milliseconds of an id: its first 12 hex digits. */
const timeOf = (id: string): number => Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16);

describe('request ids', () => {
  test('a version 7 UUID whose time is the time it was made', () => {
    const before = Date.now();
    const id = requestId();
    const after = Date.now();
    assert.match(id, SHAPE);
    assert.ok(timeOf(id) >= before && timeOf(id) <= after, `${id}: ${timeOf(id)} not in [${before}, ${after}]`);
  });

  test('any 48-bit time is written whole (the bits above 32 too), in the id\'s shape', () => {
    for (const ms of [0, 1, 2 ** 32 - 1, 2 ** 32, 2 ** 40 + 12345, 2 ** 48 - 1]) {
      const id = requestId(ms);
      assert.match(id, SHAPE, String(ms));
      assert.equal(timeOf(id), ms);
    }
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 48 - 1 }), (ms) => {
        const id = requestId(ms);
        return SHAPE.test(id) && timeOf(id) === ms;
      }),
      { numRuns: 2000 },
    );
  });

  test('unique: 100,000 ids in one millisecond (the random pool refilled hundreds of times) are all different', () => {
    const ids = new Set<string>();
    for (let i = 0; i < 100_000; i++) ids.add(requestId(1_764_800_000_000));
    assert.equal(ids.size, 100_000);
    // The random part varies in each of its hex digits (not a counter, not a constant).
    const sample = [...ids].slice(0, 64);
    for (const at of [15, 16, 17, 20, 21, 22, 24, 30, 35]) assert.ok(new Set(sample.map((id) => id[at])).size > 4, `digit ${at} barely varies`);
  });

  test('ordered by time: ids of later milliseconds sort after those of earlier ones, as text', () => {
    const ids: string[] = [];
    for (let ms = 1_764_800_000_000; ms < 1_764_800_000_000 + 2000; ms += 7) for (let k = 0; k < 3; k++) ids.push(requestId(ms));
    const sorted = [...ids].sort();
    assert.deepEqual(sorted.map(timeOf), ids.map(timeOf));
  });
});
