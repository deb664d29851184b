// A tiny HTTP/2 frame writer and reader for tests that must send what no well-behaved client
// sends (invalid frames, floods, rapid resets, endless CONTINUATION): RFC 9113 frames and an
// HPACK header block made of literals without indexing (RFC 7541 §6.2.2), which every decoder
// must accept and which needs no table or Huffman code.
import { connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export const FrameType = {
  DATA: 0,
  HEADERS: 1,
  PRIORITY: 2,
  RST_STREAM: 3,
  SETTINGS: 4,
  PUSH_PROMISE: 5,
  PING: 6,
  GOAWAY: 7,
  WINDOW_UPDATE: 8,
  CONTINUATION: 9,
} as const;

export const Flag = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

export function frame(type: number, flags: number, streamId: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type & 0xff;
  head[4] = flags & 0xff;
  head.writeUInt32BE(streamId >>> 0, 5);
  return Buffer.concat([head, payload]);
}

/** HPACK integer with an N-bit prefix (RFC 7541 §5.1); `first` holds the bits above the prefix. */
function hpackInt(value: number, prefixBits: number, first = 0): Buffer {
  const max = (1 << prefixBits) - 1;
  if (value < max) return Buffer.from([first | value]);
  const bytes = [first | max];
  value -= max;
  while (value >= 128) {
    bytes.push((value % 128) + 128);
    value = Math.floor(value / 128);
  }
  bytes.push(value);
  return Buffer.from(bytes);
}

function hpackString(text: string | Buffer): Buffer {
  const bytes = typeof text === 'string' ? Buffer.from(text, 'latin1') : text;
  return Buffer.concat([hpackInt(bytes.length, 7), bytes]);
}

/** A header block of literal fields without indexing, new names (0x00 prefix). */
export function headerBlock(fields: [string, string][]): Buffer {
  return Buffer.concat(fields.flatMap(([name, value]) => [Buffer.from([0]), hpackString(name), hpackString(value)]));
}

export function settings(entries: [number, number][] = [], ack = false): Buffer {
  const payload = Buffer.alloc(entries.length * 6);
  entries.forEach(([id, value], i) => {
    payload.writeUInt16BE(id, i * 6);
    payload.writeUInt32BE(value >>> 0, i * 6 + 2);
  });
  return frame(FrameType.SETTINGS, ack ? Flag.ACK : 0, 0, payload);
}

export function headers(streamId: number, fields: [string, string][], options: { endStream?: boolean; endHeaders?: boolean } = {}): Buffer {
  const flags = (options.endStream ? Flag.END_STREAM : 0) | (options.endHeaders === false ? 0 : Flag.END_HEADERS);
  return frame(FrameType.HEADERS, flags, streamId, headerBlock(fields));
}

export function rstStream(streamId: number, code = 0x8 /* CANCEL */): Buffer {
  const payload = Buffer.alloc(4);
  payload.writeUInt32BE(code);
  return frame(FrameType.RST_STREAM, 0, streamId, payload);
}

export function ping(data = Buffer.alloc(8), ack = false): Buffer {
  return frame(FrameType.PING, ack ? Flag.ACK : 0, 0, data);
}

export function windowUpdate(streamId: number, increment: number): Buffer {
  const payload = Buffer.alloc(4);
  payload.writeUInt32BE(increment >>> 0);
  return frame(FrameType.WINDOW_UPDATE, 0, streamId, payload);
}

export function data(streamId: number, payload: Buffer, endStream = false): Buffer {
  return frame(FrameType.DATA, endStream ? Flag.END_STREAM : 0, streamId, payload);
}

/** The request pseudo-headers of a request to the gateway. */
export function requestFields(method: string, path: string, extra: [string, string][] = [], scheme = 'http'): [string, string][] {
  return [[':method', method], [':scheme', scheme], [':authority', 'localhost'], [':path', path], ...extra];
}

export interface ReadFrame {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
}

/** A connection that writes raw frames and parses what the server sends back. */
export interface RawH2 {
  readonly socket: Socket;
  readonly frames: ReadFrame[];
  /** Resolves when the socket has closed (either side). */
  readonly closed: Promise<void>;
  isClosed(): boolean;
  write(bytes: Buffer): boolean;
  /** Resolves with the first frame received (now or later) that `match` accepts, or undefined at the deadline or close. */
  waitFor(match: (f: ReadFrame) => boolean, timeoutMs: number): Promise<ReadFrame | undefined>;
  /** The last stream id of the last GOAWAY received, if any. */
  goaway(): { lastStreamId: number; code: number } | undefined;
  destroy(): void;
}

/**
 * Opens a connection (cleartext, or TLS with ALPN h2 when `tls` is given) and, unless `preface`
 * is false, writes the client preface and an empty SETTINGS frame.
 */
export function openRawH2(url: string, options: { tls?: { ca: Buffer }; preface?: boolean; read?: boolean } = {}): Promise<RawH2> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket: Socket = options.tls
      ? tlsConnect({ host: hostname, port: Number(port), ca: options.tls.ca, servername: 'localhost', ALPNProtocols: ['h2'] })
      : netConnect({ host: hostname, port: Number(port) });
    const frames: ReadFrame[] = [];
    const waiters = new Set<() => void>();
    let buffered: Buffer = Buffer.alloc(0);
    let isClosed = false;
    const closed = new Promise<void>((r) =>
      socket.once('close', () => {
        isClosed = true;
        for (const wake of waiters) wake();
        r();
      }),
    );
    socket.on('error', () => socket.destroy());
    if (options.read !== false) {
      socket.on('data', (chunk: Buffer) => {
        buffered = buffered.length ? Buffer.concat([buffered, chunk]) : chunk;
        while (buffered.length >= 9) {
          const length = buffered.readUIntBE(0, 3);
          if (buffered.length < 9 + length) break;
          frames.push({ type: buffered[3]!, flags: buffered[4]!, streamId: buffered.readUInt32BE(5) & 0x7fffffff, payload: buffered.subarray(9, 9 + length) });
          buffered = buffered.subarray(9 + length);
        }
        for (const wake of waiters) wake();
      });
    }
    const raw: RawH2 = {
      socket,
      frames,
      closed,
      isClosed: () => isClosed,
      write: (bytes) => !socket.destroyed && socket.write(bytes),
      waitFor(match, timeoutMs) {
        return new Promise((done) => {
          let seen = 0;
          const check = () => {
            for (; seen < frames.length; seen++) {
              if (match(frames[seen]!)) return finish(frames[seen]);
            }
            if (isClosed) finish(undefined);
          };
          const timer = setTimeout(() => finish(undefined), timeoutMs);
          const finish = (found: ReadFrame | undefined) => {
            clearTimeout(timer);
            waiters.delete(check);
            done(found);
          };
          waiters.add(check);
          check();
        });
      },
      goaway() {
        const last = frames.findLast((f) => f.type === FrameType.GOAWAY && f.payload.length >= 8);
        return last ? { lastStreamId: last.payload.readUInt32BE(0) & 0x7fffffff, code: last.payload.readUInt32BE(4) } : undefined;
      },
      destroy: () => socket.destroy(),
    };
    const ready = () => {
      socket.off('error', reject);
      if (options.preface !== false) socket.write(Buffer.concat([PREFACE, settings()]));
      resolve(raw);
    };
    socket.once('error', reject);
    socket.once(options.tls ? 'secureConnect' : 'connect', ready);
  });
}
