// A worker process as the supervisor's connection dispatch sees it (connection-dispatch.ts): each
// connection goes to it over its channel with an acknowledged handoff (process-channel/handoff.ts).
import type { DispatchTarget, HeldLease } from './connection-dispatch.ts';
import type { ConnectionHandoff } from '../process-channel/handoff.ts';
import type { ProcessChannel } from '../process-channel/channel.ts';
import type { FromWorker, ToWorker } from './messages.ts';

/** A worker as the connection dispatch sees it, with the connections handed to it and not yet confirmed. */
export interface WorkerTarget extends DispatchTarget {
  readonly handoff: ConnectionHandoff<HeldLease>;
}

/**
 * The worker process as a dispatch target: each connection goes as a bare handle and stays this
 * process's until the worker confirms it (`connection_taken`; `connection_refused` gives it back).
 * Once the worker has exited and every message it sent has been read (the channel is gone: the
 * process's 'close'; its 'disconnect' is not emitted while node still waits for the dead worker to
 * acknowledge a handle), what it did not confirm goes back to the dispatch for another worker.
 */
export function workerTarget(channel: ProcessChannel<ToWorker, FromWorker>): WorkerTarget {
  const handoff = channel.handoff<HeldLease>({
    message: (id, lease) => ({ type: 'connection', lease: lease.id, handoff: id }),
    taken: 'connection_taken',
    refused: 'connection_refused',
    back: (returned) => returned.meta.returned(returned.socket),
  });
  return {
    handoff,
    pass: (socket, lease) => handoff.pass(socket, lease),
    get backlog() {
      return handoff.backlog;
    },
  };
}
