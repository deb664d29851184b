// The test's side of the cost counters (cost-counters-preload.ts, loaded into the gateway by
// `node --import`): starts the built gateway with them, resets and reads them over the IPC channel,
// and paces the mock upstream's streams so that every upstream event is a read of its own.
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT, startGateway, type GatewayOptions, type GatewayProcess } from './gateway-process.ts';
import type { Pacer } from './mock-upstream.ts';
import { COUNTER_NAMES, type CostReply, type CostRequest, type CounterName, type Counts, type Sites } from './cost-counters-protocol.ts';

export { COUNTER_NAMES, type CounterName, type Counts, type Sites };

export const COST_PRELOAD = join(ROOT, 'test', 'support', 'cost-counters-preload.ts');

/** An answer from the gateway's counters takes this long at most (a loaded machine included). */
const REPLY_TIMEOUT_MS = 30_000;

type Distribute<T> = T extends unknown ? Omit<T, 'id'> : never;

export class CostCounters {
  readonly #child: ChildProcess;
  readonly #pending = new Map<number, { resolve: (reply: CostReply) => void; reject: (error: Error) => void; timer: NodeJS.Timeout }>();
  #nextId = 1;

  constructor(child: ChildProcess) {
    this.#child = child;
    child.on('message', (message: unknown) => {
      const reply = message as Partial<CostReply> | null;
      if (reply === null || typeof reply !== 'object' || typeof reply.id !== 'number') return;
      const waiting = this.#pending.get(reply.id);
      if (waiting === undefined) return;
      this.#pending.delete(reply.id);
      clearTimeout(waiting.timer);
      waiting.resolve(reply as CostReply);
    });
    child.once('exit', () => {
      for (const { reject, timer } of this.#pending.values()) {
        clearTimeout(timer);
        reject(new Error('the gateway exited before its cost counters answered'));
      }
      this.#pending.clear();
    });
  }

  #ask(request: Distribute<CostRequest>): Promise<CostReply> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new Error(`the gateway's cost counters did not answer ${JSON.stringify(request)} within ${REPLY_TIMEOUT_MS} ms`));
      }, REPLY_TIMEOUT_MS);
      this.#pending.set(id, { resolve, reject, timer });
      this.#child.send({ ...request, id } as CostRequest);
    });
  }

  /** Every counter back to 0, and the finished exchanges too. */
  async reset(): Promise<void> {
    await this.#ask({ cost: 'reset' });
  }

  /** The counts since the last reset, read once `exchanges` HTTP exchanges have finished since then (and their `close` handled). */
  async read(exchanges: number): Promise<{ counts: Counts; sites: Sites }> {
    const reply = await this.#ask({ cost: 'read', exchanges });
    if (reply.cost !== 'read') throw new Error(`unexpected reply ${JSON.stringify(reply)}`);
    return { counts: reply.counts, sites: reply.sites };
  }

  /** Resolves with the upstream reads since the last reset once they exceed `reads` (at once if they do). */
  async upstreamReadsAbove(reads: number): Promise<number> {
    const reply = await this.#ask({ cost: 'reads-above', reads });
    if (reply.cost !== 'reads-above') throw new Error(`unexpected reply ${JSON.stringify(reply)}`);
    return reply.reads;
  }

  /**
   * A pace for the mock upstream (`mock.pace(...)`): the next event of a stream is written only
   * once the gateway has read the one before, so that each is a read of its own however loaded the
   * machine (two writes that reach the gateway between two of its reads would be one read).
   * One stream at a time.
   */
  pacer(): Pacer {
    let seen = -1;
    return async (index) => {
      // The first event goes out with the response head: only where the reads stand is noted.
      seen = await this.upstreamReadsAbove(index === 0 ? -1 : seen);
    };
  }
}

export interface CountedGateway {
  readonly gateway: GatewayProcess;
  readonly counters: CostCounters;
}

/** The built gateway with the cost counters loaded (and an IPC channel to read them). */
export async function startCountedGateway(options: GatewayOptions): Promise<CountedGateway> {
  const gateway = await startGateway({
    ...options,
    // Source maps: the call sites a failing check prints are lines of src/, not of dist/.
    nodeArgs: [...(options.nodeArgs ?? []), '--enable-source-maps', '--import', pathToFileURL(COST_PRELOAD).href],
    env: { SLUICE_COST_SITES: '1', ...options.env },
    ipc: true,
  });
  return { gateway, counters: new CostCounters(gateway.child) };
}
