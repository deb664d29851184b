// The usage ledger's shipper on a real spool directory, with an in-memory store keyed by id (as the
// real stores are: an id they hold is ignored) that can be made to fail, hang, or "crash" around
// its commit: what a full spool does once shipped, the replay of a dead process's spool, corrupt
// lines, exactly-once across a crash, a store outage (reported once, then its recovery), the exit's
// drain with and without a store, and the memory a large spool is shipped in.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SIDECAR_SUFFIX, Spool } from '../../src/ledger/spool.ts';
import { checkLines, encodeLine, recordsOf } from '../../src/ledger/line.ts';
import { Shipper, type LedgerSink } from '../../src/ledger/shipper.ts';
import type { LedgerRecord } from '../../src/ledger/record.ts';

const root = mkdtempSync(join(tmpdir(), 'sluice-shipper-'));
after(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const freshDir = (): string => {
  const dir = join(root, `d${++dirs}`);
  mkdirSync(dir);
  return dir;
};

function record(i: number, padding = 400): LedgerRecord {
  return {
    id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    kind: 'request',
    started_at: Date.now() - 1000,
    first_byte_ms: 100,
    ended_at: Date.now(),
    key: 'k1',
    team: 't1',
    user: '',
    metadata: padding > 0 ? { note: 'x'.repeat(padding) } : null,
    tags: [],
    api: 'openai',
    endpoint: 'chat',
    model: 'gpt-4o',
    route: 'gpt-4o',
    provider: 'openai',
    served_model: 'gpt-4o',
    attempts: [{ target: 'openai/gpt-4o', outcome: 'success', status: 200, ms: 90 }],
    status: 200,
    error: '',
    prompt_tokens: 10,
    completion_tokens: 20,
    cached_tokens: 0,
    cache_write_tokens: 0,
    usage_estimated: false,
    cost_micros: 42,
    bytes_in: 100,
    bytes_out: 200,
    listener: 'main',
    worker: 0,
    generation: 0,
  };
}
const range = (from: number, to: number): number[] => Array.from({ length: to - from }, (_, i) => from + i);

/** The store: keeps a Map by id (an id it has is ignored), and can be made to fail, hang, or hang right after a commit. */
class FakeStore implements LedgerSink {
  readonly rows = new Map<string, LedgerRecord>();
  calls = 0;
  /** Records in the calls that reached the commit (a duplicate counted each time). */
  committed = 0;
  maxBatch = 0;
  #inFlight = 0;
  maxInFlight = 0;
  fail: Error | undefined;
  hang = false;
  /** Hangs call `n` before its commit ('before') or after it ('after'): the process "dies" there. */
  crashAt: { call: number; when: 'before' | 'after' } | undefined;

  async insert(records: readonly LedgerRecord[]): Promise<number> {
    const call = ++this.calls;
    this.maxBatch = Math.max(this.maxBatch, records.length);
    this.maxInFlight = Math.max(this.maxInFlight, ++this.#inFlight);
    try {
      await sleep(0);
      if (this.fail) throw this.fail;
      if (this.hang || (this.crashAt?.call === call && this.crashAt.when === 'before')) await new Promise<never>(() => {});
      this.committed += records.length;
      let added = 0;
      for (const r of records) {
        if (this.rows.has(r.id)) continue;
        this.rows.set(r.id, r);
        added++;
      }
      if (this.crashAt?.call === call) await new Promise<never>(() => {});
      return added;
    } finally {
      this.#inFlight--;
    }
  }
}

async function waitFor(what: string, condition: () => boolean, timeoutMs = 5000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > until) assert.fail(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

const files = (dir: string): string[] => readdirSync(dir).sort();
const segments = (dir: string): string[] => files(dir).filter((name) => name.endsWith('.seg'));
const lineCount = (dir: string): number => segments(dir).reduce((n, name) => n + readFileSync(join(dir, name), 'utf8').split('\n').length - 1, 0);

async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '']);
  await once(child, 'exit');
  assert.throws(() => process.kill(child.pid!, 0), { code: 'ESRCH' });
  return child.pid!;
}

/** Writes `ids` into a spool owned by `pid`/`startMs` (a process that is then "gone"). */
async function leaveSpool(dir: string, pid: number, startMs: number, ids: number[]): Promise<void> {
  const writer = new Spool({ dir, pid, startMs });
  for (const i of ids) writer.append(record(i));
  await writer.close();
}

describe('shipping', () => {
  test('what is appended reaches the store; rotated segments are deleted once shipped; the current one is shipped as far as fsynced', async () => {
    const dir = freshDir();
    const store = new FakeStore();
    const lineBytes = Buffer.byteLength(encodeLine(record(0)));
    const spool = new Spool({ dir, segmentBytes: lineBytes * 4, fsync: 'always' });
    const shipper = new Shipper({ spool, store });
    await shipper.start();
    for (const i of range(0, 10)) {
      spool.append(record(i));
      await spool.flush();
    }
    await waitFor('10 records', () => store.rows.size === 10 && shipper.lag === 0);
    await waitFor('the rotated segments deleted', () => segments(dir).length === 1);
    assert.match(segments(dir)[0]!, /-000003\.seg$/, 'the third, still written (2 lines of 4)');
    // Its progress: noted after a batch's insert, without waiting for the write, and at most once a
    // second; so the end of its first line or of both, whichever batch came last within the second.
    const note = join(dir, segments(dir)[0]! + SIDECAR_SUFFIX);
    const noted = () => (existsSync(note) ? readFileSync(note, 'utf8') : '');
    await waitFor(`its progress noted (${lineBytes} or ${lineBytes * 2})`, () => noted() === `${lineBytes}\n` || noted() === `${lineBytes * 2}\n`);
    assert.equal(shipper.shipped, 10);
    shipper.close();
    await spool.close();
  });

  test('full: appends are dropped; once the shipper has deleted the shipped segments they succeed again', async () => {
    const dir = freshDir();
    const store = new FakeStore();
    const lineBytes = Buffer.byteLength(encodeLine(record(0)));
    let dropped = 0;
    const spool = new Spool({ dir, maxBytes: lineBytes * 20, events: { dropped: () => dropped++ } });
    const accepted = range(0, 30).map((i) => spool.append(record(i)));
    assert.equal(accepted.filter(Boolean).length, 20);
    assert.deepEqual([spool.dropped, dropped], [10, 10]);
    const shipper = new Shipper({ spool, store });
    await shipper.start();
    // The file is gone from the directory as soon as the unlink runs in libuv's pool; the spool counts its bytes off once it hears of it.
    await waitFor('the 20 shipped, their segment deleted and its bytes counted off', () => store.rows.size === 20 && segments(dir).length === 0 && spool.bytes === 0);
    assert.equal(spool.append(record(100)), true, 'room again');
    await waitFor('the new one shipped', () => store.rows.has(record(100).id));
    shipper.close();
    await spool.close();
  });
});

describe('replay', () => {
  test("at start: a dead process's spool and this pid's of another start are shipped from their sidecar and deleted; a live process's is left alone", async () => {
    const dir = freshDir();
    const live = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)']);
    try {
      const dead = await deadPid();
      await leaveSpool(dir, dead, 1000, range(0, 5));
      await leaveSpool(dir, live.pid!, 1000, range(5, 10));
      await leaveSpool(dir, process.pid, 2000, range(10, 15));
      const lineBytes = Buffer.byteLength(encodeLine(record(0)));
      writeFileSync(join(dir, `${dead}.1000-000001.seg${SIDECAR_SUFFIX}`), `${lineBytes * 2}\n`); // 0 and 1 shipped already
      writeFileSync(join(dir, `${process.pid}.2000-000001.seg${SIDECAR_SUFFIX}`), `${lineBytes + 7}\n`); // not a line's end: ignored
      const liveFile = `${live.pid}.1000-000001.seg`;
      const liveBytes = readFileSync(join(dir, liveFile));
      const store = new FakeStore();
      const spool = new Spool({ dir });
      const shipper = new Shipper({ spool, store });
      await shipper.start();
      assert.equal(shipper.lag, 3 + 5, 'counted at the claim');
      await waitFor('the orphans shipped', () => shipper.lag === 0 && files(dir).length === 1);
      assert.deepEqual([...store.rows.keys()].sort(), [...range(2, 5), ...range(10, 15)].map((i) => record(i).id).sort());
      assert.deepEqual(files(dir), [liveFile]);
      assert.deepEqual(readFileSync(join(dir, liveFile)), liveBytes, 'untouched');
      shipper.close();
      await spool.close();
    } finally {
      live.kill();
    }
  });

  test('orphans are looked for again every scanMs', async () => {
    const dir = freshDir();
    const store = new FakeStore();
    const spool = new Spool({ dir });
    const shipper = new Shipper({ spool, store, scanMs: 30 });
    await shipper.start();
    await leaveSpool(dir, await deadPid(), 1000, range(0, 3));
    await waitFor('the late orphan shipped', () => store.rows.size === 3 && segments(dir).length === 0);
    shipper.close();
    await spool.close();
  });

  for (const via of ['records', 'lines'] as const) {
    test(`a flipped byte and a torn tail: those lines are skipped and reported, the others shipped (a store taking ${via})`, async () => {
      const dir = freshDir();
      const dead = await deadPid();
      const flipped = Buffer.from(encodeLine(record(2)));
      flipped[100] = flipped[100]! ^ 0x20;
      writeFileSync(join(dir, `${dead}.1000-000001.seg`), Buffer.concat([Buffer.from(encodeLine(record(1))), flipped, Buffer.from(encodeLine(record(3)) + encodeLine(record(4)).slice(0, 50))]));
      const store = new FakeStore();
      const corrupt: [string, number][] = [];
      const spool = new Spool({ dir });
      // A store taking the lines checks them itself (as SQLite's thread does) and says how many were corrupt.
      const sink: LedgerSink =
        via === 'records'
          ? store
          : {
              insert: (records) => store.insert(records),
              insertLines: async (bytes) => {
                const checked = checkLines(bytes);
                const { records, corrupt } = recordsOf(checked.lines);
                return { added: await store.insert(records), corrupt: checked.corrupt + corrupt };
              },
            };
      const shipper = new Shipper({ spool, store: sink, events: { corrupt: (segment, lines) => corrupt.push([segment, lines]) } });
      await shipper.start();
      await waitFor('shipped', () => segments(dir).length === 0);
      assert.deepEqual([...store.rows.keys()], [record(1).id, record(3).id]);
      assert.deepEqual(corrupt, [[`${process.pid}.${spool.startMs}-000001.seg`, 2]]);
      assert.equal(shipper.corrupt, 2);
      assert.equal(shipper.shipped, 2);
      shipper.close();
      await spool.close();
    });
  }
});

describe('exactly once', () => {
  for (const when of ['after', 'before'] as const) {
    test(`a crash ${when} the store's commit of a batch, before its progress is noted: the next start ships that batch again and no record twice in the store`, { timeout: 20_000 }, async () => {
      const dir = freshDir();
      const store = new FakeStore();
      store.crashAt = { call: 3, when };
      const spool = new Spool({ dir });
      // Progress noted after every batch (by default at most once a second: see the next test).
      const shipper = new Shipper({ spool, store, noteEveryMs: 0 });
      for (const i of range(0, 2000)) spool.append(record(i, 100));
      await waitFor('the third batch sent', () => store.calls === 3);
      await sleep(20);
      // The process dies here: the third batch is in the store's hands ('after': committed) and never acknowledged.
      shipper.close();
      await spool.close();
      assert.equal(store.rows.size, when === 'after' ? 1500 : 1000);
      store.crashAt = undefined;
      let sent = 0;
      const next = new Spool({ dir });
      const again = new Shipper({ spool: next, store: { insert: (records) => ((sent += records.length), store.insert(records)) } });
      await again.start();
      const result = await again.drain(5000);
      assert.deepEqual(result, { shipped: 1000, left: 0 });
      assert.equal(sent, 1000, 'the unacknowledged batch and what followed it, nothing before');
      assert.equal(store.rows.size, 2000, 'every id, once');
      assert.equal(store.committed - store.rows.size, when === 'after' ? 500 : 0, 'at most the unacknowledged batch went twice');
      assert.deepEqual(files(dir), []);
      again.close();
      await next.close();
    });
  }
});

describe('store outage', () => {
  test('records pile up (lag and oldest age grow), the outage is reported once, and its end with how long and how many', { timeout: 20_000 }, async () => {
    const dir = freshDir();
    const store = new FakeStore();
    store.fail = new Error('connect ECONNREFUSED');
    const unavailable: Error[] = [];
    const recovered: [number, number][] = [];
    const spool = new Spool({ dir });
    const shipper = new Shipper({
      spool,
      store,
      retryFirstMs: 5,
      retryMaxMs: 20,
      events: { storeUnavailable: (e) => unavailable.push(e), storeRecovered: (ms, n) => recovered.push([ms, n]) },
    });
    await shipper.start();
    const down = Date.now();
    for (const i of range(0, 10)) spool.append(record(i));
    await spool.flush();
    await waitFor('several tries', () => store.calls >= 5);
    assert.deepEqual(unavailable.map((e) => e.message), ['connect ECONNREFUSED'], 'once, not per retry');
    assert.equal(shipper.lag, 10);
    const age = shipper.oldestMs;
    await sleep(40);
    for (const i of range(10, 25)) spool.append(record(i));
    assert.equal(shipper.lag, 25, 'counted before they are written');
    await spool.flush();
    assert.equal(shipper.lag, 25);
    assert.ok(shipper.oldestMs >= age + 35, `${shipper.oldestMs} after ${age}`);
    assert.equal(store.rows.size, 0);
    store.fail = undefined;
    await waitFor('caught up', () => shipper.lag === 0);
    const outage = Date.now() - down;
    assert.equal(store.rows.size, 25);
    assert.equal(recovered.length, 1);
    assert.equal(recovered[0]![1], 25);
    assert.ok(recovered[0]![0] >= 40 && recovered[0]![0] <= outage, `${recovered[0]![0]} ms of ${outage}`);
    assert.equal(shipper.oldestMs, 0);
    assert.equal(unavailable.length, 1);
    // The next outage is reported again.
    store.fail = new Error('again');
    spool.append(record(99));
    await waitFor('the second outage', () => unavailable.length === 2);
    store.fail = undefined;
    await waitFor('the second recovery', () => recovered.length === 2);
    shipper.close();
    await spool.close();
  });
});

describe('drain', () => {
  test('everything appended before the drain is in the store when it resolves, and the spool is empty', { timeout: 20_000 }, async () => {
    const dir = freshDir();
    const store = new FakeStore();
    const spool = new Spool({ dir, fsyncMs: 10_000 });
    const shipper = new Shipper({ spool, store });
    await shipper.start();
    for (const i of range(0, 1200)) spool.append(record(i, 50));
    assert.equal(store.rows.size, 0);
    assert.deepEqual(await shipper.drain(5000), { shipped: 1200, left: 0 });
    assert.equal(store.rows.size, 1200);
    assert.deepEqual(files(dir), []);
    shipper.close();
    await spool.close();
  });

  test('a store that hangs: the drain resolves at its deadline with what is left, which stays in the files and is shipped by the next start', { timeout: 20_000 }, async () => {
    const dir = freshDir();
    const store = new FakeStore();
    store.hang = true;
    const spool = new Spool({ dir });
    const shipper = new Shipper({ spool, store });
    await shipper.start();
    for (const i of range(0, 300)) spool.append(record(i));
    const start = Date.now();
    const result = await shipper.drain(200);
    const took = Date.now() - start;
    assert.deepEqual(result, { shipped: 0, left: 300 });
    assert.ok(took >= 190 && took < 1500, `${took} ms`);
    assert.equal(lineCount(dir), 300);
    shipper.close();
    await spool.close();
    const good = new FakeStore();
    const next = new Spool({ dir });
    const again = new Shipper({ spool: next, store: good });
    await again.start();
    assert.deepEqual(await again.drain(5000), { shipped: 300, left: 0 });
    assert.equal(good.rows.size, 300);
    assert.deepEqual(files(dir), []);
    again.close();
    await next.close();
  });
});

describe('memory', () => {
  test('a spool of 50,000 records is shipped a chunk at a time: batches of at most 500, reads of at most 1 MiB, one batch at a time', async (t) => {
    const probe = await open(join(root, 'probe'), 'w');
    const proto = Object.getPrototypeOf(probe) as { read: (...args: unknown[]) => Promise<unknown> };
    await probe.close();
    const read = proto.read;
    let reads = 0;
    let largest = 0;
    proto.read = function (this: unknown, ...args: unknown[]) {
      reads++;
      largest = Math.max(largest, typeof args[2] === 'number' ? args[2] : Infinity);
      return read.apply(this, args);
    };
    try {
      const dir = freshDir();
      const store = new FakeStore();
      const spool = new Spool({ dir, maxBytes: 1024 ** 3 });
      for (let i = 0; i < 50_000; i += 5000) {
        for (const n of range(i, i + 5000)) spool.append(record(n, 300));
        await spool.flush();
      }
      await spool.close(); // left as a dead process leaves it: replayed from the files
      const next = new Spool({ dir, maxBytes: 1024 ** 3 });
      const shipper = new Shipper({ spool: next, store });
      const start = Date.now();
      await shipper.start();
      assert.deepEqual(await shipper.drain(60_000), { shipped: 50_000, left: 0 });
      t.diagnostic(`50,000 records shipped in ${Date.now() - start} ms: ${store.calls} batches, ${reads} reads of at most ${largest} bytes`);
      assert.equal(store.rows.size, 50_000);
      assert.ok(store.maxBatch <= 500, `a batch of ${store.maxBatch}`);
      assert.equal(store.maxInFlight, 1);
      assert.ok(largest <= 1 << 20, `a read of ${largest} bytes`);
      assert.ok(reads >= 100, `${reads} reads`);
      assert.deepEqual(files(dir), []);
      shipper.close();
      await next.close();
    } finally {
      proto.read = read;
    }
  });
});
