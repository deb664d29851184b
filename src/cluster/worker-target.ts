// A worker process as the supervisor's connection dispatch sees it (connection-dispatch.ts): each
// connection goes to it over IPC with an acknowledged handoff (handoff.ts).
import type { Worker } from 'node:cluster';
import type { DispatchTarget, HeldLease } from './connection-dispatch.ts';
import { ConnectionHandoff } from './handoff.ts';
import type { ToWorker } from './messages.ts';

/** A worker as the connection dispatch sees it, with the connections handed to it and not yet confirmed. */
export interface WorkerTarget extends DispatchTarget {
  readonly handoff: ConnectionHandoff<HeldLease>;
}

/**
 * The worker process as a dispatch target: each connection goes as a bare handle and stays this
 * process's until the worker confirms it (handoff.ts). Once the worker has exited and every message
 * it sent has been read (the process's 'close'; its 'disconnect' is not emitted while node still
 * waits for the dead worker to acknowledge a handle), what it did not confirm goes back to the
 * dispatch for another worker.
 */
export function workerTarget(worker: Worker): WorkerTarget {
  const handoff = new ConnectionHandoff<HeldLease>(
    (id, lease, handle) => {
      if (!worker.isConnected()) return false;
      try {
        worker.send({ type: 'connection', lease: lease.id, handoff: id } satisfies ToWorker, handle as never);
        return true;
      } catch {
        return false;
      }
    },
    (returned) => returned.meta.returned(returned.socket),
  );
  worker.process.once('close', () => handoff.close());
  return {
    handoff,
    pass: (socket, lease) => handoff.pass(socket, lease),
    get backlog() {
      return handoff.backlog;
    },
  };
}
