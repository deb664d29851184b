// A connection as a handoff sees it, for unit tests: a handle to send (named, to tell connections
// apart) and a copy that can be closed.
import type { Socket } from 'node:net';

export function handoffSocket(name: string): Socket & { name: string } {
  let destroyed = false;
  return {
    name,
    _handle: { fd: name },
    on() {
      return this;
    },
    destroy() {
      destroyed = true;
    },
    get destroyed() {
      return destroyed;
    },
  } as unknown as Socket & { name: string };
}
