// A worker's limit store with limits.store memory: the supervisor's MemoryStore, asked over IPC, so
// that the workers of one instance share one set of counters (N workers must not allow N times a
// limit). A supervisor that does not answer in time counts as a store that cannot be reached.
import { StoreUnavailable, type Ask, type LimitStore, type Renewal, type Settlement, type Verdict } from '../limits/store.ts';
import type { FromWorker, LimitOperation, ToWorker } from './messages.ts';

const REPLY_TIMEOUT_MS = 2000;

/** The message could not be sent: the supervisor is gone. */
class NotSent extends StoreUnavailable {}

export class SupervisorStore implements LimitStore {
  readonly kind = 'memory';
  readonly #send: (message: FromWorker) => void;
  readonly #waiting = new Map<number, { resolve(value: unknown): void; reject(error: Error): void; timer: NodeJS.Timeout }>();
  #next = 0;

  constructor(send: (message: FromWorker) => void) {
    this.#send = send;
  }

  /** The supervisor's `limit_reply`. */
  replied(id: number, value: unknown, error: string | undefined): void {
    const waiting = this.#waiting.get(id);
    if (!waiting) return;
    this.#waiting.delete(id);
    clearTimeout(waiting.timer);
    if (error !== undefined) waiting.reject(new StoreUnavailable(error));
    else waiting.resolve(value);
  }

  acquire(ask: Ask): Promise<Verdict> {
    return this.#ask('acquire', [ask]) as Promise<Verdict>;
  }

  /**
   * IPC delivers in order and never loses a message while the channel is up, so a settlement that
   * was sent is done: a slow answer is not a failure (a retry would count it twice). Only one that
   * could not be sent (the supervisor is gone) fails.
   */
  async settle(settlement: Settlement): Promise<void> {
    await this.#ask('settle', [settlement]).catch((error: unknown) => {
      if (!(error instanceof NotSent)) return;
      throw error;
    });
  }

  async renew(renewals: readonly Renewal[], leaseMs: number): Promise<void> {
    await this.#ask('renew', [renewals, leaseMs]);
  }

  spent(ids: readonly string[]): Promise<number[]> {
    return this.#ask('spent', [ids]) as Promise<number[]>;
  }

  async close(): Promise<void> {}

  #ask(op: LimitOperation, args: unknown[]): Promise<unknown> {
    const id = ++this.#next;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiting.delete(id);
        reject(new StoreUnavailable('the supervisor did not answer'));
      }, REPLY_TIMEOUT_MS);
      this.#waiting.set(id, { resolve, reject, timer });
      try {
        this.#send({ type: 'limit', id, op, args });
      } catch (error) {
        clearTimeout(timer);
        this.#waiting.delete(id);
        reject(new NotSent((error as Error).message));
      }
    });
  }
}

/**
 * The supervisor's side: a worker's operation on the group's store (`store`: limits.store memory;
 * none otherwise), answered with `reply`, whether the worker serves in its slot or is being
 * recycled.
 */
export function answerLimit(store: LimitStore | undefined, message: Extract<FromWorker, { type: 'limit' }>, reply: (message: ToWorker) => void): void {
  const { id } = message;
  const fail = (error: unknown) => reply({ type: 'limit_reply', id, error: String((error as Error)?.message ?? error) });
  if (!store) return fail('no limit store');
  try {
    const args = message.args as never[];
    const result: unknown = message.op === 'acquire' ? store.acquire(args[0]!) : message.op === 'settle' ? store.settle(args[0]!) : message.op === 'renew' ? store.renew(args[0]!, args[1]!) : store.spent(args[0]!);
    Promise.resolve(result).then((value) => reply({ type: 'limit_reply', id, value }), fail);
  } catch (error) {
    fail(error);
  }
}
