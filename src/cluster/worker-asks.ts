// Asking every running worker of the group at once, each over its own channel (queries, and the
// prepare of a reload, E6a): each answer is matched to its worker; one that does not answer in time,
// exits, or leaves its slot meanwhile answers nothing.
import type { FromWorker, ToWorker } from './messages.ts';
import type { WorkerProcess, WorkerSlot, WorkerState } from './worker-slot.ts';

export interface WorkerReply<T> {
  slot: number;
  pid: number | undefined;
  state: WorkerState;
  /** Undefined when the worker did not answer in time (or is not running). */
  value: T | undefined;
}

/** A reply, and whether that worker was asked. */
export type AskedReply<T> = WorkerReply<T> & { asked: boolean };

/** Sends `message(id, proc)` to every worker starting or serving; resolves with every slot's answer. */
export async function askWorkers<T>(slots: readonly WorkerSlot[], message: (id: number, proc: WorkerProcess) => ToWorker, timeoutMs: number): Promise<AskedReply<T>[]> {
  const asked = slots.filter((s) => s.current?.channel.connected && (s.state === 'ready' || s.state === 'starting'));
  const replies = new Map<number, unknown>();
  await Promise.all(
    asked.map(async (slot) => {
      const proc = slot.current!;
      const reply = await proc.channel.request<Extract<FromWorker, { type: 'reply' }>>((id) => message(id, proc), timeoutMs);
      if (reply && slot.current === proc) replies.set(slot.index, reply.value);
    }),
  );
  return slots.map((s) => ({ slot: s.index, pid: s.current?.worker.process.pid, state: s.state, value: replies.get(s.index) as T | undefined, asked: asked.includes(s) }));
}
