// An accepted connection passed from one process to another unread. Node's IPC carries a
// net.Socket's handle, and the receiving process wraps it in a net.Socket that starts reading at
// once: a process that passes such a connection on again (the keeper between two generations, a
// supervisor to its workers) would lose the bytes it read meanwhile. So a connection travels as
// its bare handle (node's own cluster passes connections the same way), and is wrapped, paused, by
// the process that takes it: nothing is read before the listener that serves it resumes it.
import { Socket } from 'node:net';

/** The bare handle of an accepted, unread connection, to send over IPC; the socket is done with it. */
export function detachHandle(socket: Socket): object | undefined {
  const internals = socket as unknown as { _handle: object | null };
  const handle = internals._handle ?? undefined;
  // Sent without keepOpen, node closes the handle once the other side has it.
  internals._handle = null;
  return handle;
}

/**
 * The bare handle of an accepted, unread connection, to send over IPC while this process keeps its
 * own copy open (node closes nothing it is handed bare): the connection stays this process's until
 * it closes the socket (see process-channel/handoff.ts).
 */
export function handleOf(socket: Socket): object | undefined {
  return (socket as unknown as { _handle: object | null })._handle ?? undefined;
}

/** A connection received as a bare handle, paused. */
export function adoptHandle(handle: unknown): Socket {
  return new Socket({ handle, readable: true, writable: true, pauseOnCreate: true } as unknown as ConstructorParameters<typeof Socket>[0]);
}
