// The ledger's own parts in isolation (#28): records appended to a spool at a steady rate, shipped
// to a SQLite store, and the CPU they cost per record, on this process's main thread (where a
// gateway's requests run) and in the whole process (SQLite's thread, V8's and libuv's included).
// No HTTP, no gateway: what the spool, the shipper and the store cost by themselves, beside the
// same loop making the same record objects with no ledger ('off'), in rounds taken in turn. The
// gateway's own cost of the ledger (the record's building, and everything under real load) is in
// bench/ledger.ts.
//
// The records' ids are the gateway's own (version 7 UUIDs, by time); `--ids v4` makes them random
// (version 4, as the gateway's were before), to show what that costs the store's index. `--rows N`
// starts each round's SQLite file with N records already in it (made once, copied for each round),
// as a ledger some days old is: what an insert costs depends on the size of the indexes it goes into.
//
//   npm run build && node bench/ledger-path.ts [--rate N] [--seconds S] [--rounds N] [--ids v7|v4] [--rows N]
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { spawnSync } from 'node:child_process';
import { median } from './stats.ts';
import { idMaker, sampleRecord as makeRecord } from './ledger-sample.ts';

const ROOT = resolve(import.meta.dirname, '..');
const { values } = parseArgs({
  options: {
    rate: { type: 'string', default: '5000' },
    seconds: { type: 'string', default: '6' },
    rounds: { type: 'string', default: '3' },
    ids: { type: 'string', default: 'v7' },
    rows: { type: 'string', default: '0' },
    child: { type: 'string' },
    template: { type: 'string' },
  },
});
if (values.ids !== 'v7' && values.ids !== 'v4') throw new Error('--ids is v7 or v4');
const ROWS = Number(values.rows);
const RATE = Number(values.rate);
const SECONDS = Number(values.seconds);

interface Sample {
  records: number;
  mainUs: number;
  processUs: number;
}

/** A SQLite file holding `rows` records spread over the week before now (made once; each round copies it). */
async function grownLedger(rows: number): Promise<string> {
  const { openLedgerStore } = (await import(join(ROOT, 'dist/ledger/open-store.js'))) as typeof import('../src/ledger/open-store.ts');
  const dir = mkdtempSync(join(tmpdir(), 'sluice-ledger-path-template-'));
  const path = join(dir, 'ledger.sqlite');
  const store = await openLedgerStore({ kind: 'sqlite', path });
  const newId = await idMaker(values.ids as 'v7' | 'v4');
  const start = Date.now() - 7 * 86_400_000;
  const step = (7 * 86_400_000) / rows;
  for (let i = 0; i < rows; ) {
    const batch = [];
    for (const end = Math.min(rows, i + 1000); i < end; i++) batch.push(makeRecord(newId, Math.round(start + i * step)));
    await store.insert(batch);
  }
  await store.close();
  return path;
}

/** One round in this process: appends at RATE for SECONDS (after a second's warm-up), then waits until all is shipped. */
async function child(on: boolean, template: string | undefined): Promise<Sample> {
  const { Spool } = (await import(join(ROOT, 'dist/ledger/spool.js'))) as typeof import('../src/ledger/spool.ts');
  const { Shipper } = (await import(join(ROOT, 'dist/ledger/shipper.js'))) as typeof import('../src/ledger/shipper.ts');
  const { openLedgerStore } = (await import(join(ROOT, 'dist/ledger/open-store.js'))) as typeof import('../src/ledger/open-store.ts');
  const dir = mkdtempSync(join(tmpdir(), 'sluice-ledger-path-'));
  if (template !== undefined) copyFileSync(template, join(dir, 'ledger.sqlite'));
  const store = await openLedgerStore({ kind: 'sqlite', path: join(dir, 'ledger.sqlite') });
  const newId = await idMaker(values.ids as 'v7' | 'v4');
  const spool = new Spool({ dir: join(dir, 'spool') });
  const shipper = new Shipper({ spool, store: { insert: (r) => store.insert(r), insertLines: (b) => store.insertLines(b) } });
  await shipper.start();
  const record = () => makeRecord(newId, Date.now());

  const phase = async (seconds: number): Promise<Sample> => {
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    const main0 = process.threadCpuUsage();
    let sent = 0;
    await new Promise<void>((done) => {
      const timer = setInterval(() => {
        const due = Math.floor(((performance.now() - t0) * RATE) / 1000);
        for (; sent < due; sent++) {
          const r = record();
          if (on) spool.append(r);
        }
        if (performance.now() - t0 >= seconds * 1000) {
          clearInterval(timer);
          done();
        }
      }, 1);
    });
    const deadline = performance.now() + 30_000;
    while (shipper.lag > 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    if (shipper.lag > 0) throw new Error(`the store did not catch up: ${shipper.lag} records left`);
    const cpu = process.cpuUsage(cpu0);
    const main = process.threadCpuUsage(main0);
    return { records: sent, mainUs: (main.user + main.system) / sent, processUs: (cpu.user + cpu.system) / sent };
  };
  await phase(1);
  const sample = await phase(SECONDS);
  await shipper.drain(5000);
  shipper.close();
  await spool.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
  return sample;
}

if (values.child !== undefined) {
  process.stdout.write(JSON.stringify(await child(values.child === 'on', values.template)));
} else {
  const template = ROWS > 0 ? await grownLedger(ROWS) : undefined;
  if (template !== undefined) process.stdout.write(`each round starts from a ledger of ${ROWS} records (ids ${values.ids})\n`);
  // Each round a fresh process, pinned to one CPU when taskset is there (its threads share it, as in bench/ledger.ts).
  const pin = spawnSync('taskset', ['--version']).status === 0;
  const samples: Record<'off' | 'on', Sample[]> = { off: [], on: [] };
  for (let round = 1; round <= Number(values.rounds); round++) {
    for (const mode of ['off', 'on'] as const) {
      const args = [process.execPath, import.meta.filename, '--child', mode, '--rate', String(RATE), '--seconds', String(SECONDS), '--ids', values.ids, ...(template !== undefined ? ['--template', template] : [])];
      const run = pin ? spawnSync('taskset', ['-c', '0', ...args], { encoding: 'utf8' }) : spawnSync(args[0]!, args.slice(1), { encoding: 'utf8' });
      if (run.status !== 0) throw new Error(`round ${round} ${mode} failed: ${run.stderr}`);
      const s = JSON.parse(run.stdout) as Sample;
      samples[mode].push(s);
      process.stdout.write(`round ${round} ${mode.padEnd(3)} ${s.records} records: main thread ${s.mainUs.toFixed(1)} µs/record, process ${s.processUs.toFixed(1)} µs/record\n`);
    }
  }
  const m = (mode: 'off' | 'on', f: (s: Sample) => number) => median(samples[mode].map(f));
  const main = m('on', (s) => s.mainUs) - m('off', (s) => s.mainUs);
  const all = m('on', (s) => s.processUs) - m('off', (s) => s.processUs);
  process.stdout.write(
    `\n${RATE} records/s, ${SECONDS} s, ${values.rounds} rounds${pin ? ', one CPU' : ''}, ids ${values.ids}, ${ROWS} records before (medians, on − off): ` +
      `main thread +${main.toFixed(1)} µs/record; whole process +${all.toFixed(1)} µs/record, of which off the main thread ${(all - main).toFixed(1)}\n`,
  );
  if (template !== undefined) rmSync(dirname(template), { recursive: true, force: true });
}
