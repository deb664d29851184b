// E6a, a worker's side: the supervisor asks every worker to prepare a reload (by id) and later says
// commit or abort. A settlement may arrive before its prepare is over (the supervisor stopped
// waiting): it is kept and applied once the prepare ends.
export type Settlement = 'commit' | 'abort';

/** `P`: a prepared reload (the running gateway's, which reports its own outcome). */
export class RemoteSettlements<P> {
  /** Prepared and awaiting the supervisor's word, by id. */
  readonly #prepared = new Map<number, P>();
  /** The supervisor's word, come before the prepare was over. */
  readonly #early = new Map<number, Settlement>();
  readonly #settle: (prepared: P, settlement: Settlement) => void;

  /** `settle` commits or aborts a prepared reload (and reports how it went). */
  constructor(settle: (prepared: P, settlement: Settlement) => void) {
    this.#settle = settle;
  }

  /** The prepare of `id` is over: settled now if the word came already, else kept for it. */
  prepared(id: number, prepared: P): void {
    const early = this.#early.get(id);
    this.#early.delete(id);
    if (early) this.#settle(prepared, early);
    else this.#prepared.set(id, prepared);
  }

  /** The prepare of `id` failed: a word that came for it is forgotten. */
  failed(id: number): void {
    this.#early.delete(id);
  }

  /** The supervisor's word on `id`. */
  settled(id: number, settlement: Settlement): void {
    const prepared = this.#prepared.get(id);
    this.#prepared.delete(id);
    if (prepared) this.#settle(prepared, settlement);
    else this.#early.set(id, settlement);
  }
}
