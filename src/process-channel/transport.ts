// The IPC channel under a ProcessChannel (channel.ts): a child process as its parent sees it
// (`node:child_process` or a `node:cluster` worker), or this process as its child side (`process`).
// Tests give a ProcessChannel a fake one.
import type { ChildProcess } from 'node:child_process';
import type { Worker } from 'node:cluster';
import type { Server, Socket } from 'node:net';

export interface Transport {
  /** The channel is open: a message can be written. */
  connected(): boolean;
  /** Writes `message` (with `handle`); `written` is called once written or once it could not be. Throws when the channel is closed. */
  write(message: unknown, handle: object | undefined, written: (() => void) | undefined): void;
  /** Every message received, with the handle that came with it. */
  listen(receive: (message: unknown, handle: unknown) => void): void;
  /** Called once, when the other side is gone and every message it sent has been received. */
  whenGone(gone: () => void): void;
}

type Handle = Server | Socket | undefined;

/**
 * This process as a child: its parent is on the other end. Gone at the 'disconnect' (the parent
 * exited or closed the channel).
 */
export function parentTransport(proc: NodeJS.Process = process): Transport {
  return {
    connected: () => Boolean(proc.send) && proc.connected,
    write(message, handle, written) {
      if (!proc.send) throw new Error('no IPC channel');
      if (handle || written) proc.send(message, handle as Handle, undefined, written ? () => written() : undefined);
      else proc.send(message);
    },
    listen: (receive) => void proc.on('message', receive),
    whenGone: (gone) => void proc.once('disconnect', gone),
  };
}

/**
 * A process spawned with an IPC channel. Gone at its 'close': it exited and every message it sent
 * has been read (node emits no 'disconnect' while a handle it sent waits for the dead child's
 * acknowledgement).
 */
export function childTransport(child: ChildProcess): Transport {
  return {
    connected: () => child.connected,
    write(message, handle, written) {
      if (handle || written) child.send(message as never, handle as Handle, written ? () => written() : undefined);
      else child.send(message as never);
    },
    listen: (receive) => void child.on('message', receive),
    whenGone: (gone) => void child.once('close', gone),
  };
}

/** A `node:cluster` worker: as `childTransport`, over the worker's own channel. */
export function workerTransport(worker: Worker): Transport {
  return {
    connected: () => worker.isConnected(),
    write(message, handle, written) {
      if (handle || written) worker.send(message as never, handle as Handle, written ? () => written() : undefined);
      else worker.send(message as never);
    },
    listen: (receive) => void worker.on('message', receive),
    whenGone: (gone) => void worker.process.once('close', gone),
  };
}
