// L9, crash safety of the snapshot cache: whatever moment the process dies at, the file on disk is
// a whole snapshot (the old one or the new one), never a part of one. A child process writes
// snapshots of varying sizes (some ~200 KB, so a write is many pages and takes a while) in a tight
// loop, and is SIGKILLed at a random moment; each time the file must parse, be of this format and
// prefix, be internally consistent (one revision throughout, the size that revision was written
// with), and be read back by a fresh SnapshotCache, as a gateway restarting after the crash would.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { SNAPSHOT_FORMAT, SnapshotCache, type SnapshotLog } from '../../src/config/snapshot.ts';

const MODULE = pathToFileURL(resolve(import.meta.dirname, '..', '..', 'src', 'config', 'snapshot.ts')).href;
const PREFIX = '/sluice/';
const RUNS = 30;
const KILL_AFTER_MS = [20, 150] as const;

// The writer: one snapshot written and flushed before it says "ready" (so a file exists whenever it
// is killed), then one after another as fast as the disk allows. Snapshot n holds models(n)
// models, each naming n: a file that mixed two writes would not add up. (`models` is shared with
// the checks below by its source text: type stripping has blanked its annotations out.)
const WRITER = `
import { SnapshotCache } from ${JSON.stringify(MODULE)};
const [path, prefix] = process.argv.slice(2);
const log = { warn() {}, error(fields, message) { process.stderr.write(JSON.stringify(fields) + ' ' + message + '\\n'); } };
const cache = new SnapshotCache({ path, prefix, log });
${models.toString()}
function snapshot(revision) {
  const resources = new Map([['providers/openai', { value: JSON.stringify({ name: 'openai', type: 'openai', api_key: 'sk-' + revision }), revision }]]);
  for (let i = 0; i < models(revision); i++) {
    resources.set('models/m' + i, { value: JSON.stringify({ name: 'm' + i, provider: 'openai', upstream_model: ('r' + revision + '-').padEnd(480, 'x') }), revision });
  }
  return { resources, revision };
}
let revision = 1;
cache.write(snapshot(revision));
await cache.flush(60000);
process.stdout.write('ready\\n');
for (;;) {
  revision++;
  cache.write(snapshot(revision));
  await cache.flush(60000);
}
`;

/** How many models snapshot `revision` holds: every third one ~200 KB (400 × ~500 bytes), the others 1 to 7. */
function models(revision: number): number {
  return revision % 3 === 0 ? 400 : 1 + (revision % 7);
}

let dir: string;
let writer: string;
before(() => {
  dir = mkdtempSync(join(tmpdir(), 'sluice-snapshot-crash-'));
  writer = join(dir, 'writer.mjs');
  writeFileSync(writer, WRITER);
});
after(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** Starts the writer on `path`, waits for its first snapshot, SIGKILLs it `delayMs` later. */
async function writeAndKill(path: string, delayMs: number): Promise<void> {
  const child = spawn(process.execPath, [writer, path, PREFIX], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) => child.once('exit', (code, signal) => done({ code, signal })));
  try {
    await new Promise<void>((ready, fail) => {
      const timer = setTimeout(() => fail(new Error(`the writer was not ready within 10 s:\n${stderr}`)), 10_000);
      child.stdout.on('data', (chunk: string) => {
        stdout += chunk;
        if (stdout.includes('ready\n')) {
          clearTimeout(timer);
          ready();
        }
      });
      void exited.then(({ code, signal }) => {
        clearTimeout(timer);
        fail(new Error(`the writer exited (code ${code}, signal ${signal}) before it was ready:\n${stderr}`));
      });
    });
    await new Promise((r) => setTimeout(r, delayMs));
  } finally {
    child.kill('SIGKILL');
  }
  const { code, signal } = await exited;
  assert.equal(signal, 'SIGKILL', `the writer ended by itself (code ${code}) before it was killed:\n${stderr}`);
  assert.equal(stderr.includes('snapshot_write_failed'), false, `a write failed:\n${stderr}`);
}

interface Found {
  revision: number;
  bytes: number;
}

/** Checks the file left by a killed writer; returns its revision and size. */
async function checkSnapshot(path: string, what: string): Promise<Found> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    assert.fail(`${what}: no snapshot after the kill (${(error as NodeJS.ErrnoException).code}), though one was written before "ready"`);
  }
  let file: { format: unknown; prefix: unknown; revision: unknown; resources: Record<string, { revision: number; value: Record<string, unknown> }> };
  try {
    file = JSON.parse(text) as typeof file;
  } catch (error) {
    assert.fail(`${what}: the snapshot is not JSON (${text.length} bytes: ${(error as Error).message}), a torn write`);
  }
  assert.equal(file.format, SNAPSHOT_FORMAT, what);
  assert.equal(file.prefix, PREFIX, what);
  assert.equal(typeof file.revision, 'number', what);
  const revision = file.revision as number;
  const keys = Object.keys(file.resources);
  assert.equal(keys.length, 1 + models(revision), `${what}: revision ${revision} was written with ${1 + models(revision)} resources`);
  for (const key of keys) {
    const entry = file.resources[key]!;
    assert.equal(entry.revision, revision, `${what}: ${key} is of another write`);
    if (key.startsWith('models/')) assert.ok(String(entry.value.upstream_model).startsWith(`r${revision}-`), `${what}: ${key} is of another write`);
  }

  // What a gateway restarting after the crash does: a fresh cache reads it, without a warning.
  const warnings: unknown[] = [];
  const log: SnapshotLog = { warn: (fields) => warnings.push(fields), error: (fields) => warnings.push(fields) };
  const read = await new SnapshotCache({ path, prefix: PREFIX, log }).read();
  assert.deepEqual(warnings, [], what);
  assert.ok(read, `${what}: read() found no snapshot`);
  assert.equal(read.revision, revision, what);
  assert.equal(read.resources.size, 1 + models(revision), what);
  return { revision, bytes: text.length };
}

test(`a writer SIGKILLed at ${RUNS} random moments always leaves a whole snapshot`, async (t) => {
  const found: Found[] = [];
  for (let run = 0; run < RUNS; run++) {
    const delayMs = KILL_AFTER_MS[0] + Math.floor(Math.random() * (KILL_AFTER_MS[1] - KILL_AFTER_MS[0] + 1));
    const runDir = join(dir, `run-${run}`);
    mkdirSync(runDir);
    const path = join(runDir, 'sluice.snapshot.json');
    await writeAndKill(path, delayMs);
    found.push(await checkSnapshot(path, `run ${run} (killed ${delayMs} ms after its first snapshot)`));
    // Only the snapshot and, at most, the temporary file of the write the kill interrupted.
    const left = readdirSync(runDir).filter((name) => name !== 'sluice.snapshot.json');
    assert.ok(left.length <= 1 && left.every((name) => name.endsWith('.tmp')), `run ${run}: unexpected files ${JSON.stringify(left)}`);
  }
  // The kills must land among writes, large ones included, for the runs above to prove anything.
  const past = found.filter((f) => f.revision > 1).length;
  assert.ok(past >= RUNS / 2, `only ${past} of ${RUNS} runs got past their first snapshot before the kill`);
  const revisions = found.map((f) => f.revision);
  t.diagnostic(`revisions on disk at the kills: ${revisions.join(' ')}; largest file ${Math.max(...found.map((f) => f.bytes))} bytes`);
});
