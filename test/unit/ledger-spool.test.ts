// The usage ledger's spool on a real directory: the line format and its checksum, when a batch
// reaches the disk (the batch timer on a manual clock, 'always' without one), an append that never
// throws and never waits, the size cap, rotation, reading back past corrupt lines, the orphans it
// claims, and what an append costs (printed, not asserted).
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHook } from 'node:async_hooks';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { setTimeout as sleep } from 'node:timers/promises';
import { SIDECAR_SUFFIX, Spool, type SpoolListener } from '../../src/ledger/spool.ts';
import { decodeLine, encodeLine } from '../../src/ledger/line.ts';
import type { LedgerRecord } from '../../src/ledger/record.ts';
import type { Clock, TimerHandle } from '../../src/lifecycle/clock.ts';
import { ManualClock } from '../support/manual-clock.ts';

const root = mkdtempSync(join(tmpdir(), 'sluice-spool-'));
after(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const freshDir = (): string => join(root, `d${++dirs}`);

/** A record of about 1 KB when `padding` is left at its default. */
function record(i: number, padding = 560): LedgerRecord {
  return {
    id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    kind: 'request',
    started_at: 1_760_000_000_000 + i,
    first_byte_ms: 120,
    ended_at: 1_760_000_000_900 + i,
    key: 'team-a-prod',
    team: 'team-a',
    user: 'user-42',
    metadata: { cost_center: 'cc-1234', env: 'prod', note: 'x'.repeat(padding) },
    tags: ['batch', 'nightly'],
    api: 'openai',
    endpoint: 'chat',
    model: 'gpt-4o',
    route: 'gpt-4o',
    provider: 'openai',
    served_model: 'gpt-4o-2024-08-06',
    attempts: [{ target: 'openai/gpt-4o-2024-08-06', outcome: 'success', status: 200, ms: 812 }],
    status: 200,
    error: '',
    prompt_tokens: 1234,
    completion_tokens: 321,
    cached_tokens: 0,
    cache_write_tokens: 0,
    usage_estimated: false,
    cost_micros: 6543,
    bytes_in: 2048,
    bytes_out: 4096,
    listener: 'main',
    worker: 0,
    generation: 0,
  };
}

const segments = (dir: string): string[] => readdirSync(dir).filter((name) => name.endsWith('.seg')).sort();
const lines = (path: string): string[] => readFileSync(path, 'utf8').split('\n').slice(0, -1);

/** A listener whose `durable` calls are kept, and a promise for the next one. */
function listen(spool: Spool): { durable: { segment: string; offset: number; records: number }[]; rotated: string[]; next: () => Promise<void> } {
  const durable: { segment: string; offset: number; records: number }[] = [];
  const rotated: string[] = [];
  let wake: (() => void) | undefined;
  const listener: SpoolListener = {
    durable: (segment, offset, records) => {
      durable.push({ segment, offset, records });
      wake?.();
    },
    rotated: (segment) => rotated.push(segment),
  };
  spool.subscribe(listener);
  return { durable, rotated, next: () => new Promise<void>((resolve) => (wake = resolve)) };
}

/** A clock that counts the timers set on it. */
function counting(clock: Clock): Clock & { timers: number } {
  const counted = {
    timers: 0,
    now: () => clock.now(),
    after: (ms: number, fn: () => void): TimerHandle => {
      counted.timers++;
      return clock.after(ms, fn);
    },
    every: (ms: number, fn: () => void): TimerHandle => clock.every(ms, fn),
  };
  return counted;
}

type Method = (...args: unknown[]) => Promise<unknown>;
/** Records the FileHandle calls named (the spool's writes and fdatasyncs) while `body` runs. */
async function spyFileHandle<T>(methods: string[], body: (calls: string[]) => Promise<T>): Promise<T> {
  const probe = await open(join(root, 'probe'), 'w');
  const proto = Object.getPrototypeOf(probe) as Record<string, Method>;
  await probe.close();
  const originals = new Map(methods.map((m) => [m, proto[m]!]));
  const calls: string[] = [];
  for (const [name, original] of originals) {
    proto[name] = function (this: unknown, ...args: unknown[]) {
      calls.push(name);
      return original.apply(this, args);
    };
  }
  try {
    return await body(calls);
  } finally {
    for (const [name, original] of originals) proto[name] = original;
  }
}

async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '']);
  await once(child, 'exit');
  assert.throws(() => process.kill(child.pid!, 0), { code: 'ESRCH' });
  return child.pid!;
}

describe('the line format', () => {
  test('`<crc32 of the JSON bytes, 8 hex> <JSON>\\n`, one line per record, read back whole', async () => {
    const dir = freshDir();
    const spool = new Spool({ dir });
    const unicode = { ...record(1), user: 'zoë 東京 🚀' };
    assert.equal(spool.append(unicode), true);
    assert.equal(spool.append(record(2)), true);
    await spool.flush();
    const [name] = segments(dir);
    assert.match(name!, new RegExp(`^${process.pid}\\.${spool.startMs}-000001\\.seg$`));
    const [first, second] = lines(join(dir, name!));
    for (const [line, expected] of [[first!, unicode], [second!, record(2)]] as const) {
      const match = /^([0-9a-f]{8}) (\{.*\})$/.exec(line);
      assert.ok(match, line.slice(0, 40));
      assert.equal(match[1], crc32(Buffer.from(match[2]!, 'utf8')).toString(16).padStart(8, '0'));
      assert.deepEqual(JSON.parse(match[2]!), expected);
    }
    assert.equal(encodeLine(unicode), `${first}\n`);
    assert.deepEqual(decodeLine(Buffer.from(first!)), unicode);
    await spool.close();
  });

  test('a flipped byte or a torn tail skips that line only, counted as corrupt; the rest is read', async () => {
    const dir = freshDir();
    const spool = new Spool({ dir });
    const good = [1, 2, 3, 4].map((i) => encodeLine(record(i)));
    const flipped = Buffer.from(good[1]!);
    flipped[200] = flipped[200]! ^ 0x01;
    const torn = encodeLine(record(5)).slice(0, 300);
    const name = `${spool.pid}.${spool.startMs}-000900.seg`;
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, name), Buffer.concat([Buffer.from(good[0]!), flipped, Buffer.from(good[2]! + 'not a record\n' + good[3]! + torn)]));
    const whole = await spool.read(name, 0, { maxRecords: 500, maxBytes: 1 << 20 });
    assert.deepEqual(whole.records.map((r) => r.id), [record(1).id, record(3).id, record(4).id]);
    assert.equal(whole.corrupt, 3, 'the flipped line, the line that is no record, the torn tail');
    assert.equal(whole.eof, true);
    // A segment still written is read only as far as asked (its fsynced end): no torn tail there.
    const upTo = good[0]!.length + flipped.length;
    const partial = await spool.read(name, 0, { limit: upTo, maxRecords: 500, maxBytes: 1 << 20 });
    assert.deepEqual([partial.records.length, partial.corrupt, partial.end, partial.eof], [1, 1, upTo, true]);
    // In chunks of at most 2 lines, each chunk starting where the last ended.
    const seen: string[] = [];
    let corrupt = 0;
    for (let from = 0; ; ) {
      const chunk = await spool.read(name, from, { maxRecords: 2, maxBytes: 1 << 20 });
      assert.ok(chunk.records.length + chunk.corrupt <= 2);
      seen.push(...chunk.records.map((r) => r.id));
      corrupt += chunk.corrupt;
      from = chunk.end;
      if (chunk.eof) break;
    }
    assert.deepEqual([seen.length, corrupt], [3, 3]);
    // A line longer than the chunk's bytes is still read whole.
    const small = await spool.read(name, 0, { maxRecords: 500, maxBytes: 100 });
    assert.deepEqual(small.records.map((r) => r.id), [record(1).id]);
    await spool.close();
  });
});

describe('writes', () => {
  test("'batch': nothing is written before fsyncMs; at fsyncMs one write and one fdatasync take every pending record; one timer per batch", { timeout: 20_000 }, async () => {
    await spyFileHandle(['writev', 'datasync'], async (calls) => {
      const manual = new ManualClock();
      const timed = counting(manual);
      const dir = freshDir();
      const spool = new Spool({ dir, clock: timed, fsyncMs: 50 });
      const heard = listen(spool);
      for (let i = 0; i < 100; i++) assert.equal(spool.append(record(i)), true);
      assert.equal(timed.timers, 1, 'one timer for the batch, none per append');
      manual.advance(49);
      await sleep(30);
      assert.deepEqual(calls, [], 'not written before fsyncMs');
      assert.equal(heard.durable.length, 0);
      const durable = heard.next();
      manual.advance(1);
      await durable;
      assert.deepEqual(calls, ['writev', 'datasync'], 'one write, then its fdatasync, before it is reported on disk');
      assert.deepEqual(heard.durable.map((d) => d.records), [100]);
      assert.equal(lines(join(dir, segments(dir)[0]!)).length, 100);
      // The next batch: a new timer from its first append.
      spool.append(record(100));
      spool.append(record(101));
      assert.equal(timed.timers, 2);
      const second = heard.next();
      manual.advance(50);
      await second;
      assert.deepEqual(heard.durable.map((d) => d.records), [100, 2]);
      await spool.close();
    });
  });

  test("'always': written at once without a timer; what comes during a write is the next batch", { timeout: 20_000 }, async () => {
    await spyFileHandle(['writev', 'datasync'], async (calls) => {
      const clock = counting(new ManualClock());
      const dir = freshDir();
      const spool = new Spool({ dir, clock, fsync: 'always' });
      const heard = listen(spool);
      const first = heard.next();
      spool.append(record(1));
      await first;
      assert.deepEqual(calls, ['writev', 'datasync']);
      const second = heard.next();
      spool.append(record(2));
      await sleep(0);
      for (let i = 3; i <= 50; i++) spool.append(record(i));
      await second;
      await spool.flush();
      assert.equal(clock.timers, 0, 'no timer');
      assert.equal(heard.durable.reduce((n, d) => n + d.records, 0), 50);
      assert.ok(heard.durable.length <= 4, `${heard.durable.length} batches for 50 records`);
      assert.equal(calls.filter((c) => c === 'datasync').length, heard.durable.length);
      await spool.close();
    });
  });

  test('append never throws and never waits: an unserializable record is dropped; a failed write is reported once, kept and written again', { timeout: 20_000 }, async () => {
    const blocker = join(root, `blocker-${++dirs}`);
    writeFileSync(blocker, 'a file where the spool expects a directory');
    const manual = new ManualClock();
    const failures: Error[] = [];
    let dropped = 0;
    const spool = new Spool({ dir: join(blocker, 'spool'), clock: manual, events: { writeFailed: (e) => failures.push(e), dropped: () => dropped++ } });
    const heard = listen(spool);
    const cyclic: Record<string, unknown> = { ...record(0) };
    cyclic.self = cyclic;
    assert.equal(spool.append(cyclic as unknown as LedgerRecord), false);
    assert.equal(spool.append({ ...record(0), cost_micros: 1n } as unknown as LedgerRecord), false);
    assert.deepEqual([spool.dropped, dropped], [2, 2]);
    assert.equal(spool.append(record(1)), true, 'accepted: the disk is not looked at');
    manual.advance(50);
    await spool.flush();
    for (let i = 0; i < 4; i++) {
      manual.advance(5000); // the retries
      await spool.flush();
    }
    assert.equal(failures.length, 1, 'reported once, not per retry');
    assert.equal(spool.queued, 1, 'kept');
    unlinkSync(blocker);
    const durable = heard.next();
    manual.advance(5000);
    await durable;
    assert.equal(spool.queued, 0);
    assert.equal(lines(join(blocker, 'spool', segments(join(blocker, 'spool'))[0]!)).length, 1);
    await spool.close();
  });

  test('no promise is made by an append', async () => {
    const spool = new Spool({ dir: freshDir(), fsyncMs: 10_000 });
    let promises = 0;
    const hook = createHook({ init: (_id, type) => void (type === 'PROMISE' && promises++) }).enable();
    for (let i = 0; i < 1000; i++) spool.append(record(i));
    hook.disable();
    assert.equal(promises, 0);
    await spool.close();
  });

  test('full (segments + pending >= maxBytes): append returns false and each record is counted as dropped', async () => {
    const dir = freshDir();
    let dropped = 0;
    const lineBytes = Buffer.byteLength(encodeLine(record(0)));
    const spool = new Spool({ dir, maxBytes: lineBytes * 10, events: { dropped: () => dropped++ } });
    const accepted = Array.from({ length: 25 }, (_, i) => spool.append(record(i)));
    assert.deepEqual(accepted, [...Array<boolean>(10).fill(true), ...Array<boolean>(15).fill(false)]);
    assert.deepEqual([spool.dropped, dropped, spool.appended], [15, 15, 10]);
    await spool.flush();
    assert.equal(spool.append(record(99)), false, 'still full once written: the segments count');
    assert.equal(spool.bytes, lineBytes * 10);
    await spool.close();
    assert.equal(spool.append(record(100)), false, 'closed');
  });

  test('segments rotate at segmentBytes: each rotated one is reported, the next one numbered on', async () => {
    const dir = freshDir();
    const lineBytes = Buffer.byteLength(encodeLine(record(0)));
    const spool = new Spool({ dir, segmentBytes: lineBytes * 3, fsync: 'always' });
    const heard = listen(spool);
    for (let i = 0; i < 7; i++) {
      spool.append(record(i));
      await spool.flush();
    }
    assert.deepEqual(segments(dir).map((n) => n.slice(-10)), ['000001.seg', '000002.seg', '000003.seg']);
    assert.deepEqual(segments(dir).map((n) => lines(join(dir, n)).length), [3, 3, 1]);
    assert.deepEqual(heard.rotated, segments(dir).slice(0, 2));
    await spool.seal();
    assert.deepEqual(heard.rotated, segments(dir), 'sealed: the current one too');
    spool.append(record(7));
    await spool.flush();
    assert.equal(segments(dir).length, 4, 'an append after a seal starts a new segment');
    await spool.close();
  });
});

describe('orphans', () => {
  test("claimed: a dead pid's segments and this pid's of another start (renamed into this spool's names, sidecar and all); a live process's left alone", async () => {
    const dir = freshDir();
    const live = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)']);
    try {
      const dead = await deadPid();
      const writers = [new Spool({ dir, pid: dead, startMs: 1000 }), new Spool({ dir, pid: live.pid!, startMs: 1000 }), new Spool({ dir, startMs: 1000 })];
      writers.forEach((w, i) => w.append(record(i)));
      await Promise.all(writers.map((w) => w.close()));
      writeFileSync(join(dir, `${dead}.1000-000001.seg${SIDECAR_SUFFIX}`), '0\n');
      writeFileSync(join(dir, `${dead}.999-000001.seg${SIDECAR_SUFFIX}`), '0\n'); // its segment is gone
      const spool = new Spool({ dir });
      const claimed = await spool.claimOrphans();
      assert.deepEqual(claimed, [`${process.pid}.${spool.startMs}-000001.seg`, `${process.pid}.${spool.startMs}-000002.seg`]);
      const firstIds = new Map<string, string>();
      for (const name of claimed) firstIds.set((await spool.read(name, 0, { maxRecords: 10, maxBytes: 1 << 20 })).records[0]!.id, name);
      assert.deepEqual([...firstIds.keys()].sort(), [record(0).id, record(2).id].sort(), "the dead pid's and this pid's other start's");
      const deadOnes = firstIds.get(record(0).id)!;
      assert.deepEqual(readdirSync(dir).sort(), [...claimed, `${deadOnes}${SIDECAR_SUFFIX}`, `${live.pid}.1000-000001.seg`].sort(), 'the sidecar moved along; the stray one removed');
      assert.deepEqual(await spool.claimOrphans(), [], 'claimed once');
      assert.equal(spool.bytes, 3 * Buffer.byteLength(encodeLine(record(0))), 'the directory recounted');
      await spool.close();
    } finally {
      live.kill();
    }
  });
});

describe('cost', () => {
  test('µs per append of a ~1 KB record (printed, not asserted)', async (t) => {
    const spool = new Spool({ dir: freshDir(), fsyncMs: 60_000, maxBytes: 1024 ** 3 });
    const sample = record(0);
    const bytes = Buffer.byteLength(encodeLine(sample));
    for (let i = 0; i < 2000; i++) spool.append({ ...sample, id: `w${i}` });
    const n = 20_000;
    const records = Array.from({ length: n }, (_, i) => ({ ...sample, id: `r${i}` }));
    const time = (fn: (r: LedgerRecord) => unknown): number => {
      const start = process.hrtime.bigint();
      for (const r of records) fn(r);
      return Number(process.hrtime.bigint() - start) / 1000 / n;
    };
    const stringify = time((r) => JSON.stringify(r));
    const append = time((r) => spool.append(r));
    assert.equal(spool.appended, 2000 + n);
    t.diagnostic(`append: ${append.toFixed(2)} µs per ${bytes}-byte line (${n} appends; JSON.stringify alone: ${stringify.toFixed(2)} µs)`);
    await spool.close();
  });
});
