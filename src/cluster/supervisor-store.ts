// A worker's limit store with limits.store memory: the supervisor's MemoryStore, asked over the
// worker's channel, so that the workers of one instance share one set of counters (N workers must
// not allow N times a limit). A supervisor that does not answer in time counts as a store that
// cannot be reached. The supervisor's half is limit-server.ts.
import { StoreUnavailable, type Ask, type LimitStore, type Renewal, type Settlement, type Verdict } from '../limits/store.ts';
import type { ProcessChannel } from '../process-channel/channel.ts';
import type { FromWorker, LimitOperation, ToWorker } from './messages.ts';

const REPLY_TIMEOUT_MS = 2000;

export class SupervisorStore implements LimitStore {
  readonly kind = 'memory';
  readonly #channel: ProcessChannel<FromWorker, ToWorker>;

  /** `channel` must match `limit_reply` to its requests (ChannelOptions.replies). */
  constructor(channel: ProcessChannel<FromWorker, ToWorker>) {
    this.#channel = channel;
  }

  acquire(ask: Ask): Promise<Verdict> {
    return this.#ask('acquire', [ask]) as Promise<Verdict>;
  }

  /**
   * IPC delivers in order and never loses a message while the channel is up, so a settlement that
   * was sent is done: a slow answer is not a failure (a retry would count it twice), and neither is
   * a supervisor gone (its counters went with it).
   */
  async settle(settlement: Settlement): Promise<void> {
    await this.#ask('settle', [settlement]).catch(() => {});
  }

  async renew(renewals: readonly Renewal[], leaseMs: number): Promise<void> {
    await this.#ask('renew', [renewals, leaseMs]);
  }

  spent(ids: readonly string[]): Promise<number[]> {
    return this.#ask('spent', [ids]) as Promise<number[]>;
  }

  async close(): Promise<void> {}

  async #ask(op: LimitOperation, args: unknown[]): Promise<unknown> {
    const reply = await this.#channel.request<Extract<ToWorker, { type: 'limit_reply' }>>((id) => ({ type: 'limit', id, op, args }), REPLY_TIMEOUT_MS);
    if (!reply) throw new StoreUnavailable('the supervisor did not answer');
    if (reply.error !== undefined) throw new StoreUnavailable(reply.error);
    return reply.value;
  }
}
