// What the machine offers the gateway's processes: the CPUs Node may use (affinity mask, cgroup
// quota) and the memory (the cgroup's limit when there is one, else the machine's).
import { availableParallelism, totalmem } from 'node:os';

export interface MachineShape {
  readonly cpus: number;
  readonly memory: number;
}

export function machineShape(): MachineShape {
  const total = totalmem();
  // 0 (or an absurd number, on some systems) when no cgroup limits it.
  const limit = process.constrainedMemory();
  return { cpus: availableParallelism(), memory: limit > 0 && limit < total ? limit : total };
}
