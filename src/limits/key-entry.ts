// A request's place in its key's `concurrent` limit, taken when the key is checked, before the body
// is read, and held until the request's admission takes it over or the request ends first.

/** No places: what an entry hands over once it was left or taken, or when it holds none. */
export const NOTHING: readonly string[] = Object.freeze([]);

/**
 * A request's place in its key's `concurrent` limit, taken when its key is checked, before its body
 * is read (a slow body is a request in progress too): renewed until it is handed to the request's
 * admission, or given back by `leave()` when the request ends before one.
 */
export interface Entry {
  /** The request ended before its admission: its place is given back (once; nothing once admitted). */
  leave(): void;
  /** `leave()` was called: the request must not be admitted. */
  readonly left: boolean;
}

/** An `Entry` as the limiter keeps it: what it holds, until its admission takes it or it is left. */
export class KeyEntry implements Entry {
  readonly #concurrency: readonly string[];
  readonly #giveBack: () => void;
  #state: 'held' | 'taken' | 'left' = 'held';

  constructor(concurrency: readonly string[], giveBack: () => void) {
    this.#concurrency = concurrency;
    this.#giveBack = giveBack;
  }

  get left(): boolean {
    return this.#state === 'left';
  }

  leave(): void {
    if (this.#state !== 'held') return;
    this.#state = 'left';
    this.#giveBack();
  }

  /** The admission takes over what is held (nothing, once left). */
  take(): readonly string[] {
    if (this.#state !== 'held') return NOTHING;
    this.#state = 'taken';
    return this.#concurrency;
  }
}
