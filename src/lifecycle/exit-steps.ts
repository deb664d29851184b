// L9: what a process does at its exit, once nothing is in flight, and in which order. One list,
// read by the composition root (which gives each step its work, app.ts) and by `sluice plan` (which
// adds up the bounds into the exit allowance, deploy/plan.ts), so that the two cannot disagree.

/** Where a step runs: each process that serves requests, or the one that holds the config source and the admin listeners (one process: both). */
export type ExitSide = 'serving' | 'holder';

export interface ExitStep {
  readonly name: ExitStepName;
  /** How `sluice plan` names it. */
  readonly label: string;
  /** Steps of one stage run side by side; a stage starts once every step of the one before has settled. */
  readonly stage: number;
  readonly side: ExitSide;
  /**
   * The longest it may take, in seconds, when it has something to do: it is cut off then. 0: it
   * waits for nothing (the upstream pools: nothing is in flight by now). The tracing flush's is the
   * config's (`tracing.flush_timeout_ms`).
   */
  readonly boundSecs: number | 'tracing.flush_timeout_ms';
}

export const EXIT_STEPS = [
  // The upstream pools close once their requests are done (nothing is in flight by now); a forced
  // end (L8) destroys them, aborting what is still going upstream.
  { name: 'upstream_pools', label: 'upstream pools', stage: 1, side: 'serving', boundSecs: 0 },
  // The etcd client closes; a snapshot write in progress gets at most this long.
  { name: 'snapshot_write', label: 'snapshot write', stage: 1, side: 'holder', boundSecs: 5 },
  // The usage of the requests that finished is committed to the limit store, then its client closes.
  { name: 'usage_commit', label: 'usage commit to Redis', stage: 1, side: 'serving', boundSecs: 5 },
  // The usage ledger's spool is fsynced and shipped to its store; what the store has not taken by
  // then stays in the spool, shipped by the next start.
  { name: 'ledger_flush', label: 'usage ledger flush', stage: 1, side: 'serving', boundSecs: 5 },
  // The spans not yet exported.
  { name: 'tracing_flush', label: 'tracing flush', stage: 1, side: 'serving', boundSecs: 'tracing.flush_timeout_ms' },
  // Whoever watches the status page or `sluice status` gets the feed's last event, `exited`.
  { name: 'status_page', label: 'status page', stage: 1, side: 'holder', boundSecs: 1 },
  // A supervisor's workers have exited (its drain waited for them: this only collects them).
  { name: 'workers', label: 'workers', stage: 2, side: 'holder', boundSecs: 0 },
  // Every log line buffered is written: nothing may be logged after this.
  { name: 'logs', label: 'logs', stage: 3, side: 'serving', boundSecs: 0 },
] as const satisfies readonly { name: string; label: string; stage: number; side: ExitSide; boundSecs: number | 'tracing.flush_timeout_ms' }[];

export type ExitStepName = (typeof EXIT_STEPS)[number]['name'];

/** One step of the list. */
export function exitStep(name: ExitStepName): ExitStep {
  return EXIT_STEPS.find((step) => step.name === name)!;
}

/** A step's fixed bound in milliseconds (the tracing flush's is the config's). */
export function exitBoundMs(name: Exclude<ExitStepName, 'tracing_flush'>): number {
  return (exitStep(name).boundSecs as number) * 1000;
}

/**
 * A process's exit, as the list orders it: each step given its work by the composition root, run
 * stage by stage. A step that fails (or throws) does not stop the others; a step given no work is
 * skipped.
 */
export class ExitSequence {
  readonly #work = new Map<ExitStepName, (forced: boolean) => unknown>();

  /** Gives a step its work. */
  set(name: ExitStepName, work: (forced: boolean) => unknown): this {
    this.#work.set(name, work);
    return this;
  }

  /** The steps given work, by stage: what `run` will do, in its order. */
  stages(): ExitStepName[][] {
    const stages = new Map<number, ExitStepName[]>();
    for (const step of EXIT_STEPS) {
      if (!this.#work.has(step.name)) continue;
      const names = stages.get(step.stage) ?? [];
      names.push(step.name);
      stages.set(step.stage, names);
    }
    return [...stages.keys()].sort((a, b) => a - b).map((stage) => stages.get(stage)!);
  }

  /** `forced` (L8): nothing may be waited for; each step's work is told so. `failed` hears of a step that failed. */
  async run(forced: boolean, failed?: (name: ExitStepName, error: unknown) => void): Promise<void> {
    for (const names of this.stages()) {
      const results = await Promise.allSettled(names.map(async (name) => this.#work.get(name)!(forced)));
      results.forEach((result, i) => {
        if (result.status === 'rejected') failed?.(names[i]!, result.reason);
      });
    }
  }
}
