// Loaded into a gateway under test with `node --import` (test/support/cost-counters.ts adds it),
// never by the program itself: the shipped hot path carries no counter. It counts the work the
// process does that a regression in the request path would add to:
//
// - `JSON.parse` and `JSON.stringify` calls (Node's own internals use their captured copies and are
//   not counted: its IPC, for one);
// - writes to client sockets: calls of `_write`/`_writev` on a socket a server of this process
//   accepted. That is one write request handed to libuv (a write(2) or writev(2)), whatever was
//   corked into it: an HTTP response's head and first chunk, or a chunk's size line, data and CRLF,
//   go out as one. Counting `socket.write()` calls instead would count Node's chunk framing three
//   times per chunk. Several response writes in one turn of the event loop are corked into one
//   socket write, so these are counted too:
// - response writes: calls of an HTTP response's `write()`, and of its `end()` with data, each a
//   chunk of its own on the wire (with its size line and CRLF when the body is chunked);
// - writes to and reads from upstream sockets (those this process connected), a read being one
//   buffer pushed by a read(2): the read count tells a test that each upstream event was its own read;
// - buffers allocated through the public API: `Buffer.alloc`, `allocUnsafe`, `allocUnsafeSlow`,
//   `from`, `concat`, `copyBytesFrom`, and `TextEncoder.prototype.encode` (each a new backing
//   store). A call made inside another one (`Buffer.concat` calls `Buffer.allocUnsafe`) is one
//   allocation, counted once. Views (`subarray`, `slice`) allocate no bytes and are not counted;
// - exchanges finished: an HTTP response closed (finished or cut), counted one turn of the event
//   loop after its `close`, so that whatever its `close` listeners do has been done and counted.
// What the log's writer does when a write to stdout or stderr completes is counted apart, as
// 'calls in log writes': the logger hands its lines over in batches, every 100 ms or 16 KiB, so
// how often that happens depends on time, not on the requests (each line's serialization is
// counted where it happens, once per line).
// With SLUICE_COST_SITES=1 every counted call also records where it was made (its first frames
// outside this file), so that a test can say which line a new call comes from.
//
// The counts belong to this process; the test drives them over the IPC channel it spawned the
// process with (messages `{ cost: … }`): reset, read once N exchanges have finished since the
// reset, and wait until the upstream reads pass a number (how the mock upstream paces a stream).
// The preload's own bookkeeping uses the original functions, so it counts nothing of itself.
//
// Only node: built-ins and erasable TypeScript: Node runs this file by type stripping.
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { Buffer } from 'node:buffer';
import { subscribe } from 'node:diagnostics_channel';
import type { ServerResponse } from 'node:http';
import { fileURLToPath } from 'node:url';
import { dirname, resolve } from 'node:path';
import { COUNTER_NAMES, type CostReply, type CostRequest, type CounterName, type Counts, type Sites } from './cost-counters-protocol.ts';

const zero = (): Counts => Object.fromEntries(COUNTER_NAMES.map((name) => [name, 0])) as Counts;

let counts = zero();
let sites: Sites = {};
let exchanges = 0;
/** The test's pending requests: a read once enough exchanges finished, a pace once a read came. */
let readWaiter: { id: number; exchanges: number } | undefined;
let readsWaiter: { id: number; reads: number } | undefined;

const send = process.send?.bind(process);
if (send === undefined) throw new Error('cost-counters-preload: the gateway must be spawned with an IPC channel');

// -- where a call was made ---------------------------------------------------------------------

const WITH_SITES = process.env.SLUICE_COST_SITES === '1';
const THIS_FILE = fileURLToPath(import.meta.url);
const ROOT = resolve(dirname(THIS_FILE), '..', '..') + '/';
const DEPENDENCY = /^.*\/node_modules\//;
const SITE_FRAMES = 3;

/** The first frames outside this file (and Node's own, with `ownOnly`), shortened: `src/gateway/relay.ts:84 < …`. */
function site(ownOnly = false): string {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 12;
  const stack = new Error().stack ?? '';
  Error.stackTraceLimit = limit;
  const frames: string[] = [];
  for (const line of stack.split('\n').slice(1)) {
    if (line.includes(THIS_FILE) || (ownOnly && line.includes('(node:'))) continue;
    const at = /\(?((?:file:\/\/)?[^()\s]+):(\d+):\d+\)?$/.exec(line.trim());
    if (at === null) continue;
    frames.push(`${at[1]!.replace('file://', '').replace(ROOT, '').replace(DEPENDENCY, 'node_modules/')}:${at[2]}`);
    if (frames.length === SITE_FRAMES) break;
  }
  return frames.join(' < ');
}

/** Inside the callback of a write to stdout or stderr (the log's writer). */
let inLogWrite = 0;

function count(counter: CounterName, where?: string): void {
  const name: CounterName = inLogWrite > 0 ? 'calls in log writes' : counter;
  counts[name]++;
  if (!WITH_SITES) return;
  where ??= site();
  const byName = (sites[name] ??= {});
  byName[where] = (byName[where] ?? 0) + 1;
}

// -- JSON --------------------------------------------------------------------------------------

const parse = JSON.parse;
const stringify = JSON.stringify;
JSON.parse = function countedParse(this: unknown, ...args: unknown[]): unknown {
  count('JSON.parse');
  return Reflect.apply(parse, JSON, args);
} as typeof JSON.parse;
JSON.stringify = function countedStringify(this: unknown, ...args: unknown[]): string {
  count('JSON.stringify');
  return Reflect.apply(stringify, JSON, args) as string;
} as typeof JSON.stringify;

// -- sockets -----------------------------------------------------------------------------------

const UPSTREAM = Symbol('connected by this process');
/** Where the first of the writes a socket write sends out was made (with sites). */
const FIRST_WRITE = Symbol('first write since the last flush');
type Counted = net.Socket & { [UPSTREAM]?: true; [FIRST_WRITE]?: string; server?: unknown };

const socketProto = net.Socket.prototype as unknown as Record<string, (...args: unknown[]) => unknown>;
const connect = socketProto.connect!;
socketProto.connect = function countedConnect(this: Counted, ...args: unknown[]): unknown {
  this[UPSTREAM] = true;
  return Reflect.apply(connect, this, args);
};

const byteLength = (chunk: Buffer | string): number => (typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length);

function wroteTo(socket: Counted, bytes: number): void {
  if (socket[UPSTREAM]) count('upstream socket writes');
  else if (socket.server) {
    // A corked socket flushes on a later tick, where no stack leads back to who wrote.
    count('client socket writes', socket[FIRST_WRITE]);
    socket[FIRST_WRITE] = undefined;
    counts['client bytes written'] += bytes;
  }
}

if (WITH_SITES) {
  const socketWrite = socketProto.write!;
  socketProto.write = function notedWrite(this: Counted, ...args: unknown[]): unknown {
    if (this.server && !this[UPSTREAM] && this[FIRST_WRITE] === undefined) this[FIRST_WRITE] = site(true);
    return Reflect.apply(socketWrite, this, args);
  };
}

const write = socketProto._write!;
socketProto._write = function countedWrite(this: Counted, ...args: unknown[]): unknown {
  wroteTo(this, byteLength(args[0] as Buffer | string));
  return Reflect.apply(write, this, args);
};
const writev = socketProto._writev!;
socketProto._writev = function countedWritev(this: Counted, ...args: unknown[]): unknown {
  let bytes = 0;
  for (const { chunk } of args[0] as { chunk: Buffer | string }[]) bytes += byteLength(chunk);
  wroteTo(this, bytes);
  return Reflect.apply(writev, this, args);
};

// Readable.prototype.push, as net.Socket inherits it: called once per read(2), with its bytes.
const push = socketProto.push!;
socketProto.push = function countedPush(this: Counted, ...args: unknown[]): unknown {
  if (args[0] !== null && this[UPSTREAM]) {
    counts['upstream socket reads']++;
    if (readsWaiter !== undefined && counts['upstream socket reads'] > readsWaiter.reads) {
      const { id } = readsWaiter;
      readsWaiter = undefined;
      send({ cost: 'reads-above', id, reads: counts['upstream socket reads'] } satisfies CostReply);
    }
  }
  return Reflect.apply(push, this, args);
};

// -- responses -------------------------------------------------------------------------------------

// Inherited from OutgoingMessage; its `end(data)` writes through an internal function, not `write`.
const responseProto = http.ServerResponse.prototype as unknown as Record<string, (...args: unknown[]) => unknown>;
const responseWrite = responseProto.write!;
responseProto.write = function countedResponseWrite(this: unknown, ...args: unknown[]): unknown {
  count('response writes');
  return Reflect.apply(responseWrite, this, args);
};
const responseEnd = responseProto.end!;
responseProto.end = function countedResponseEnd(this: unknown, ...args: unknown[]): unknown {
  if (args[0] !== undefined && args[0] !== null && typeof args[0] !== 'function') count('response writes');
  return Reflect.apply(responseEnd, this, args);
};

// -- buffers -----------------------------------------------------------------------------------

let inside = 0;
function countAllocations<T extends object>(owner: T, method: keyof T & string, name: CounterName): void {
  const original = owner[method] as (...args: unknown[]) => { byteLength: number };
  (owner as Record<string, unknown>)[method] = function countedAllocation(this: unknown, ...args: unknown[]) {
    if (inside > 0) return Reflect.apply(original, this, args);
    inside++;
    try {
      const made = Reflect.apply(original, this, args);
      count(name);
      if (inLogWrite === 0) {
        counts['buffers allocated']++;
        counts['buffer bytes allocated'] += made.byteLength;
      }
      return made;
    } finally {
      inside--;
    }
  };
}
countAllocations(Buffer, 'alloc', 'Buffer.alloc');
countAllocations(Buffer, 'allocUnsafe', 'Buffer.allocUnsafe');
countAllocations(Buffer, 'allocUnsafeSlow', 'Buffer.allocUnsafeSlow');
countAllocations(Buffer, 'from', 'Buffer.from');
countAllocations(Buffer, 'concat', 'Buffer.concat');
countAllocations(Buffer, 'copyBytesFrom', 'Buffer.copyBytesFrom');
countAllocations(TextEncoder.prototype, 'encode', 'TextEncoder.encode');

// -- the log's writes ----------------------------------------------------------------------------

// sonic-boom (pino's writer) calls `fs.write(fd, …, callback)` through the module object.
const fsWrite = fs.write as (...args: unknown[]) => unknown;
const countedFsWrite = function countedFsWrite(this: unknown, ...args: unknown[]): unknown {
  const last = args.length - 1;
  const callback = args[last];
  if ((args[0] === 1 || args[0] === 2) && typeof callback === 'function') {
    args[last] = function inLog(this: unknown, ...results: unknown[]): unknown {
      inLogWrite++;
      try {
        return Reflect.apply(callback, this, results);
      } finally {
        inLogWrite--;
      }
    };
  }
  return Reflect.apply(fsWrite, fs, args);
};
// Node's own properties of fs.write (what util.promisify reads) stay as they were.
for (const key of Reflect.ownKeys(fsWrite)) {
  if (!(key in countedFsWrite)) Object.defineProperty(countedFsWrite, key, Object.getOwnPropertyDescriptor(fsWrite, key)!);
}
(fs as { write: unknown }).write = countedFsWrite;

// -- exchanges ---------------------------------------------------------------------------------

// Published before the server's 'request' event: a cut response closes too, finished or not.
subscribe('http.server.request.start', (message) => {
  const { response } = message as { response: ServerResponse };
  response.once('close', () =>
    setImmediate(() => {
      exchanges++;
      answerRead();
    }),
  );
});

function answerRead(): void {
  if (readWaiter === undefined || exchanges < readWaiter.exchanges) return;
  const { id } = readWaiter;
  readWaiter = undefined;
  send!({ cost: 'read', id, counts: { ...counts }, sites, exchanges } satisfies CostReply);
}

// -- the test's requests -----------------------------------------------------------------------

process.on('message', (message: unknown) => {
  const request = message as Partial<CostRequest> | null;
  if (request === null || typeof request !== 'object' || typeof request.cost !== 'string') return;
  switch (request.cost) {
    case 'reset':
      counts = zero();
      sites = {};
      exchanges = 0;
      send({ cost: 'reset', id: request.id! } satisfies CostReply);
      return;
    case 'read':
      readWaiter = { id: request.id!, exchanges: request.exchanges! };
      return answerRead();
    case 'reads-above':
      if (counts['upstream socket reads'] > request.reads!) {
        send({ cost: 'reads-above', id: request.id!, reads: counts['upstream socket reads'] } satisfies CostReply);
        return;
      }
      readsWaiter = { id: request.id!, reads: request.reads! };
      return;
    default:
  }
});
// The channel must not keep the gateway alive once it has drained.
process.channel?.unref();
