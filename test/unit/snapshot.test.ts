// L9: the snapshot cache (src/config/snapshot.ts). What a gateway restarted while etcd is down
// starts from: it must read back exactly what was written, be readable by its user only (provider
// keys are in it), coalesce a burst of changes into one write after the one in progress, let a
// shutdown wait for the write with a deadline, and refuse a file that is not this gateway's.
import { afterEach, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SNAPSHOT_FORMAT, SnapshotCache, type Snapshot, type SnapshotLog } from '../../src/config/snapshot.ts';

const PREFIX = '/sluice/';

interface LogEntry {
  level: 'warn' | 'error';
  fields: Record<string, unknown>;
  message: string;
}

function recordingLog(): SnapshotLog & { entries: LogEntry[] } {
  const entries: LogEntry[] = [];
  return {
    entries,
    warn: (fields, message) => entries.push({ level: 'warn', fields: fields as Record<string, unknown>, message }),
    error: (fields, message) => entries.push({ level: 'error', fields: fields as Record<string, unknown>, message }),
  };
}

/** A snapshot at `revision` with one provider and `models` models (values as compact JSON, as etcd holds them). */
function snapshotAt(revision: number, models = 1): Snapshot {
  const resources = new Map<string, { value: string; revision: number }>();
  resources.set('providers/openai', { value: JSON.stringify({ name: 'openai', type: 'openai', api_key: 'sk-secret' }), revision: 2 });
  for (let i = 0; i < models; i++) resources.set(`models/m${i}`, { value: JSON.stringify({ name: `m${i}`, provider: 'openai' }), revision });
  return { resources, revision };
}

let dir: string;
let path: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'sluice-snapshot-'));
  path = join(dir, 'sluice.snapshot.json');
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

function cache(options: { delayMs?: number; prefix?: string } = {}) {
  const log = recordingLog();
  return { log, snapshots: new SnapshotCache({ path, prefix: options.prefix ?? PREFIX, log, ...(options.delayMs === undefined ? {} : { delayMs: options.delayMs }) }) };
}

describe('write and read', () => {
  test('a snapshot written is read back with its resources and revision, by a fresh cache as after a restart', async () => {
    const { snapshots, log } = cache();
    const written: Snapshot = {
      revision: 42,
      resources: new Map([
        ['providers/openai', { value: '{"name":"openai","type":"openai","api_key":"${OPENAI_API_KEY}"}', revision: 7 }],
        ['models/openai%2Fgpt-4o*', { value: '{"name":"openai/gpt-4o*","provider":"openai"}', revision: 42 }],
        ['keys/ci', { value: '{"name":"ci","key":"sk-client-1234"}', revision: 12 }],
      ]),
    };
    snapshots.write(written);
    assert.equal(await snapshots.flush(5000), true);
    assert.equal(snapshots.written, 1);

    const read = await cache().snapshots.read();
    assert.ok(read, 'expected the snapshot back');
    assert.equal(read.revision, 42);
    assert.deepEqual(read.resources, written.resources);
    assert.deepEqual(log.entries, []);

    // The values are kept as JSON in the file (not as JSON text in a string), each with its revision.
    const file = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
    assert.equal(file.format, SNAPSHOT_FORMAT);
    assert.equal(file.prefix, PREFIX);
    assert.equal(file.revision, 42);
    assert.equal(typeof file.written_at, 'string');
    assert.deepEqual(file.resources, {
      'keys/ci': { revision: 12, value: { name: 'ci', key: 'sk-client-1234' } },
      'models/openai%2Fgpt-4o*': { revision: 42, value: { name: 'openai/gpt-4o*', provider: 'openai' } },
      'providers/openai': { revision: 7, value: { name: 'openai', type: 'openai', api_key: '${OPENAI_API_KEY}' } },
    });
  });

  test('an empty set round-trips too (etcd reachable, nothing in it yet)', async () => {
    const { snapshots } = cache();
    snapshots.write({ resources: new Map(), revision: 1 });
    assert.equal(await snapshots.flush(5000), true);
    const read = await snapshots.read();
    assert.ok(read);
    assert.equal(read.revision, 1);
    assert.equal(read.resources.size, 0);
  });

  test('the file is readable and writable by its owner only (mode 0600), even replacing a 0644 one', async () => {
    // Provider keys may be in it.
    writeFileSync(path, '{}');
    chmodSync(path, 0o644);
    const { snapshots } = cache();
    snapshots.write(snapshotAt(3));
    assert.equal(await snapshots.flush(5000), true);
    assert.equal(statSync(path).mode & 0o777, 0o600);
  });

  test('the directory is created when missing, and no temporary file is left beside the snapshot', async () => {
    path = join(dir, 'nested', 'deeper', 'sluice.snapshot.json');
    const { snapshots } = cache();
    for (let revision = 1; revision <= 3; revision++) {
      snapshots.write(snapshotAt(revision));
      assert.equal(await snapshots.flush(5000), true);
    }
    assert.deepEqual(readdirSync(join(dir, 'nested', 'deeper')), ['sluice.snapshot.json']);
    assert.equal((await snapshots.read())?.revision, 3);
  });

  test('a write that fails is logged as an error, not thrown: the gateway serves on', async () => {
    // The directory cannot be created: a regular file is in its place.
    writeFileSync(join(dir, 'not-a-dir'), '');
    path = join(dir, 'not-a-dir', 'sluice.snapshot.json');
    const { snapshots, log } = cache();
    snapshots.write(snapshotAt(1));
    assert.equal(await snapshots.flush(5000), true);
    assert.equal(snapshots.written, 0);
    assert.equal(log.entries.length, 1);
    assert.equal(log.entries[0]!.level, 'error');
    assert.equal(log.entries[0]!.fields.event, 'snapshot_write_failed');
    // mkdir says EEXIST, an open below a file ENOTDIR: either way the errno code, not a stack.
    assert.match(String(log.entries[0]!.fields.reason), /^E(EXIST|NOTDIR)$/);
  });
});

describe('queued writes and flush', () => {
  test('of several writes queued behind the one in progress, only the latest is written', async () => {
    // A slow disk keeps the first write in progress while the others arrive.
    const { snapshots } = cache({ delayMs: 100 });
    snapshots.write(snapshotAt(1));
    for (let revision = 2; revision <= 6; revision++) snapshots.write(snapshotAt(revision, revision));
    assert.equal(await snapshots.flush(5000), true);
    assert.equal(snapshots.written, 2, 'the one in progress, then the latest: 2..5 were replaced before they started');
    const read = await snapshots.read();
    assert.equal(read?.revision, 6);
    assert.equal(read?.resources.size, 1 + 6);
  });

  test('flush with nothing to write resolves true at once', async () => {
    const { snapshots } = cache();
    assert.equal(await snapshots.flush(0), true);
  });

  test('flush resolves false after its timeout while the write is slower, and a later flush true once it is done', async () => {
    const { snapshots } = cache({ delayMs: 300 });
    snapshots.write(snapshotAt(1));
    const started = Date.now();
    assert.equal(await snapshots.flush(50), false);
    const waited = Date.now() - started;
    assert.ok(waited >= 45, `flush(50) gave up after ${waited} ms`);
    assert.equal(snapshots.written, 0, 'it gave up before the write (300 ms) was done');
    assert.equal(await snapshots.flush(5000), true);
    assert.equal(snapshots.written, 1);
    assert.equal((await snapshots.read())?.revision, 1);
  });

  test('a write made while a flush waits is included in what that flush waits for', async () => {
    const { snapshots } = cache({ delayMs: 50 });
    snapshots.write(snapshotAt(1));
    const flushed = snapshots.flush(5000);
    snapshots.write(snapshotAt(2));
    assert.equal(await flushed, true);
    assert.equal(snapshots.written, 2);
    assert.equal((await snapshots.read())?.revision, 2);
  });
});

describe('read', () => {
  test('a missing file is undefined, without a warning (a first start)', async () => {
    const { snapshots, log } = cache();
    assert.equal(await snapshots.read(), undefined);
    assert.deepEqual(log.entries, []);
  });

  const ignored: [string, () => string, RegExp][] = [
    ['another prefix', () => JSON.stringify({ format: SNAPSHOT_FORMAT, prefix: '/other/', revision: 3, written_at: '', resources: {} }), /prefix "\/other\/", not "\/sluice\/"/],
    ['a newer format', () => JSON.stringify({ format: SNAPSHOT_FORMAT + 1, prefix: PREFIX, revision: 3, written_at: '', resources: {} }), new RegExp(`format ${SNAPSHOT_FORMAT + 1} by a newer Sluice`)],
    ['non-JSON content', () => '{"format": 1, "prefix": "/sluice/", "revis', /not JSON/],
    ['JSON that is not a snapshot', () => '[1, 2, 3]', /not a snapshot/],
    ['a snapshot without resources', () => JSON.stringify({ format: SNAPSHOT_FORMAT, prefix: PREFIX, revision: 3 }), /not a snapshot/],
  ];
  for (const [what, content, reason] of ignored) {
    test(`${what}: ignored with a warning, read() is undefined`, async () => {
      writeFileSync(path, content());
      const { snapshots, log } = cache();
      assert.equal(await snapshots.read(), undefined);
      assert.equal(log.entries.length, 1, JSON.stringify(log.entries));
      const [entry] = log.entries;
      assert.equal(entry!.level, 'warn');
      assert.equal(entry!.fields.event, 'snapshot_ignored');
      assert.equal(entry!.fields.path, path);
      assert.match(String(entry!.fields.reason), reason);
    });
  }

  test('a snapshot another prefix wrote is not read by this one', async () => {
    const other = cache({ prefix: '/other/' });
    other.snapshots.write(snapshotAt(5));
    assert.equal(await other.snapshots.flush(5000), true);
    const { snapshots, log } = cache();
    assert.equal(await snapshots.read(), undefined);
    assert.equal(log.entries[0]?.fields.event, 'snapshot_ignored');
  });

  test('a file that cannot be read (a directory in its place) is ignored with a warning', async () => {
    rmSync(dir, { recursive: true, force: true });
    dir = mkdtempSync(join(tmpdir(), 'sluice-snapshot-'));
    path = dir;
    const { snapshots, log } = cache();
    assert.equal(await snapshots.read(), undefined);
    assert.equal(log.entries.length, 1);
    assert.equal(log.entries[0]!.fields.reason, 'EISDIR');
  });
});
