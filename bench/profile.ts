// Where a case's CPU goes: the gateway (this checkout's build, the production config of
// bench/cases.ts) under --cpu-prof, loaded by wrk with one case, then its profile read two ways:
// the top functions by self time, and the busy time by the gateway's own source file.
//   npm run build && node bench/profile.ts [--cases stream,chat] [--seconds 10] [--alloc]
// Profiles are written to bench/results/profiles/<case>.cpuprofile (open them in Chrome's DevTools).
// With --alloc, the allocations are sampled instead (bench/alloc-sampling.mjs, every object
// allocated, collected ones included) and read per request: by function and by source file.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { cleanUp, startMock, stop } from './processes.ts';
import { caseScript, pickCases, startCaseGateway } from './cases.ts';
import { runWrk } from './wrk.ts';
import { allocations, byOwnFile, topSelf } from './cpu-profile.ts';

const ROOT = resolve(import.meta.dirname, '..');
const PROFILES = join(ROOT, 'bench', 'results', 'profiles');
const { values } = parseArgs({
  options: { cases: { type: 'string', default: 'chat,stream' }, seconds: { type: 'string', default: '10' }, alloc: { type: 'boolean', default: false } },
});
const CASES = pickCases(values.cases);
const SECONDS = Number(values.seconds);
const TMP = mkdtempSync(join(tmpdir(), 'sluice-profile-'));
cleanUp.push(TMP);
mkdirSync(PROFILES, { recursive: true });

const mock = await startMock();
for (const c of CASES) {
  const name = values.alloc ? `${c.id}.allocations.json` : `${c.id}.cpuprofile`;
  const file = join(PROFILES, name);
  if (values.alloc) process.env.SLUICE_ALLOC_PROFILE = file;
  const flags = values.alloc ? ['--import', pathToFileURL(join(ROOT, 'bench', 'alloc-sampling.mjs')).href] : ['--cpu-prof', '--cpu-prof-dir', PROFILES, '--cpu-prof-name', name];
  const gateway = await startCaseGateway(c.id, ROOT, mock.url, TMP, flags);
  const lua = join(TMP, `${c.id}.lua`);
  writeFileSync(lua, caseScript(c));
  // No warm-up left out: the whole run is profiled, the start included (the load dominates it).
  const load = await runWrk(`${gateway.url}/v1/chat/completions`, lua, SECONDS, { threads: 1, connections: 32 });
  await stop(gateway);
  if (values.alloc) {
    process.stdout.write(`\n## ${c.name}: ${load.requests} requests in ${SECONDS} s\n\n${allocations(file, load.requests)}\n`);
    continue;
  }
  process.stdout.write(`\n## ${c.name}: ${load.requests} requests in ${SECONDS} s\n\nTop 20 functions by self time:\n${topSelf(file, 20)}\n\nBusy time by the gateway's source file (what it calls included):\n${byOwnFile(file)}\n`);
}
await stop(mock);
process.exit(0);
