// The supervisor's half of the group's limit store (limits.store memory): it answers each worker's
// `limit` operation on the supervisor's store with a `limit_reply`, whether the worker serves in its
// slot or is being recycled (its requests are still admitted and settled). The worker's half is
// supervisor-store.ts.
import type { LimitStore } from '../limits/store.ts';
import type { FromWorker, ToWorker } from './messages.ts';
import type { WorkerChannel } from './worker-slot.ts';

/** Answers the `limit` messages of this worker's channel on `store()` (none: limits.store is not memory). */
export function serveLimits(channel: WorkerChannel, store: () => LimitStore | undefined): void {
  channel.on('limit', (message) => answerLimit(store(), message, (reply) => void channel.send(reply)));
}

/** One worker's operation on the group's store (`store`; none otherwise), answered with `reply`. */
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
