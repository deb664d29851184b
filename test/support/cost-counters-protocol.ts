// What the cost counters count and the messages that drive them: shared by the preload that runs
// in the gateway (cost-counters-preload.ts) and the test's side (cost-counters.ts).
//
// Only erasable TypeScript: Node runs this file by type stripping, in the gateway too.

/** Every counter, by the name a test prints and asserts. */
export const COUNTER_NAMES = [
  'JSON.parse',
  'JSON.stringify',
  'response writes',
  'client socket writes',
  'client bytes written',
  'upstream socket writes',
  'upstream socket reads',
  'buffers allocated',
  'buffer bytes allocated',
  'Buffer.alloc',
  'Buffer.allocUnsafe',
  'Buffer.allocUnsafeSlow',
  'Buffer.from',
  'Buffer.concat',
  'Buffer.copyBytesFrom',
  'TextEncoder.encode',
  'calls in log writes',
] as const;
export type CounterName = (typeof COUNTER_NAMES)[number];
export type Counts = Record<CounterName, number>;
/** Where the counted calls were made (with SLUICE_COST_SITES=1): by counter, by call site, how many. */
export type Sites = Partial<Record<CounterName, Record<string, number>>>;

/** A message from the test, and the answer to it (the same `cost` and `id`). */
export type CostRequest =
  | { cost: 'reset'; id: number }
  | { cost: 'read'; id: number; exchanges: number }
  | { cost: 'reads-above'; id: number; reads: number };
export type CostReply =
  | { cost: 'reset'; id: number }
  | { cost: 'read'; id: number; counts: Counts; sites: Sites; exchanges: number }
  | { cost: 'reads-above'; id: number; reads: number };

