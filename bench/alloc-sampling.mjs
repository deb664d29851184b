// Loaded with `node --import` by bench/profile.ts --alloc: samples every allocation of the process
// (one in ALLOC_INTERVAL bytes, objects a GC has since collected included, which `--heap-prof`
// leaves out) and writes the profile as JSON to SLUICE_ALLOC_PROFILE when the process exits.
import { Session } from 'node:inspector';
import { writeFileSync } from 'node:fs';

const file = process.env.SLUICE_ALLOC_PROFILE;
if (file) {
  const session = new Session();
  session.connect();
  session.post('HeapProfiler.startSampling', {
    samplingInterval: Number(process.env.SLUICE_ALLOC_INTERVAL || 4096),
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  // An in-process session answers synchronously: the profile is written before the exit ends.
  process.on('exit', () => {
    session.post('HeapProfiler.stopSampling', (error, result) => {
      if (!error) writeFileSync(file, JSON.stringify(result.profile));
    });
  });
}
