// E6a: a reload as one transaction over the parts of the process it changes (the routing, the
// settings, the listener set, the workers, the config kept for the admin API): every part prepares
// its share without changing what serves, then all switch, or every part prepared is undone.
import type { Config } from '../config/schema.ts';

/** What a reload brings: the whole new config, this process's own part of it, and what asked. */
export interface ConfigChange {
  /** The whole config (a supervisor passes it to its workers; the admin API shows it). */
  readonly full: Config;
  /** The part this process serves itself (`Supervision.own`): a supervisor's has only the admin listeners. */
  readonly own: Config;
  readonly trigger: string;
}

/** One part's share of a reload, prepared: nothing serving has changed yet. */
export interface PreparedChange {
  /** Switches this part to the new config. Every step that can fail belongs in the prepare. */
  commit(): void;
  /** Undoes the prepare (closes what it opened); the previous config serves as before. */
  abort(): void | Promise<void>;
}

/** A part of the process that a reload changes. */
export interface ReloadParticipant {
  /** Named in the line of a commit that threw. */
  readonly name: string;
  /** Prepares this part's share of `change`, or throws, having undone what it did. */
  prepare(change: ConfigChange): PreparedChange | Promise<PreparedChange>;
}

/** A participant refused the change: `message` is the reason logged, `fields` go on the failure's line. */
export class ReloadRefused extends Error {
  readonly fields: object;
  constructor(message: string, fields: object = {}) {
    super(message);
    this.fields = fields;
  }
}

/** How a prepared reload ended. */
export type ReloadOutcome =
  | { readonly ok: true }
  /**
   * Nothing changed (a part refused, or the process began draining before the commit); or the
   * commit of some part threw, a bug: the other parts switched (`fields.parts_failed`).
   */
  | { readonly ok: false; readonly reason: string; readonly fields: object };

/** Every part prepared; settle it once, by `commit()` or `abort()`. */
export interface PreparedReload {
  /**
   * Switches every part, in the participants' order, unless the process began draining since the
   * prepare (then aborts). A part whose commit throws is reported, and the others still switch.
   */
  commit(): ReloadOutcome;
  /** Undoes every part's prepare, in the reverse order. */
  abort(): Promise<void>;
}

export interface TransactionOptions {
  /** Why a prepared reload may no longer switch (the process began draining), or undefined. */
  refuseCommit(): string | undefined;
  /** A part's commit or abort threw (a bug): the other parts went on. */
  stepFailed(participant: string, step: 'commit' | 'abort', error: unknown): void;
}

/**
 * The reload transactions of one process: one at a time, from its prepare until its commit or
 * abort (a second SIGHUP, or a worker's next prepare, waits its turn).
 */
export class ReloadTransaction {
  readonly #participants: readonly ReloadParticipant[];
  readonly #options: TransactionOptions;
  #turn: Promise<void> = Promise.resolve();

  constructor(participants: readonly ReloadParticipant[], options: TransactionOptions) {
    this.#participants = participants;
    this.#options = options;
  }

  /** Prepares every part in order; if one throws, undoes the others in the reverse order and rethrows. */
  async prepare(change: ConfigChange): Promise<PreparedReload> {
    const release = await this.#takeTurn();
    const prepared: { name: string; change: PreparedChange }[] = [];
    let settled = false;
    const abort = async (): Promise<void> => {
      if (settled) return;
      settled = true;
      try {
        for (const part of prepared.reverse()) {
          try {
            await part.change.abort();
          } catch (error) {
            this.#options.stepFailed(part.name, 'abort', error);
          }
        }
      } finally {
        release();
      }
    };
    try {
      for (const participant of this.#participants) prepared.push({ name: participant.name, change: await participant.prepare(change) });
    } catch (error) {
      await abort();
      throw error;
    }
    return {
      abort,
      commit: (): ReloadOutcome => {
        if (settled) throw new Error('this reload was already settled');
        const refused = this.#options.refuseCommit();
        if (refused !== undefined) {
          void abort();
          return { ok: false, reason: refused, fields: {} };
        }
        settled = true;
        const failed: string[] = [];
        try {
          for (const part of prepared) {
            try {
              part.change.commit();
            } catch (error) {
              failed.push(part.name);
              this.#options.stepFailed(part.name, 'commit', error);
            }
          }
        } finally {
          release();
        }
        if (failed.length === 0) return { ok: true };
        return { ok: false, reason: `the commit of ${failed.join(', ')} failed; the other parts switched`, fields: { parts_failed: failed } };
      },
    };
  }

  /** Prepares and, when every part could, commits: the whole reload of a process that decides alone. */
  async run(change: ConfigChange): Promise<ReloadOutcome> {
    let prepared: PreparedReload;
    try {
      prepared = await this.prepare(change);
    } catch (error) {
      return { ok: false, reason: (error as Error).message, fields: error instanceof ReloadRefused ? error.fields : {} };
    }
    return prepared.commit();
  }

  #takeTurn(): Promise<() => void> {
    let done!: () => void;
    const previous = this.#turn;
    this.#turn = new Promise<void>((resolve) => (done = resolve));
    return previous.then(() => done);
  }
}
