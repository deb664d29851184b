// Structured JSON logs (pino) on stdout, or readable lines for a terminal (pino-pretty). Secrets never
// reach here: callers log names and ids, never headers or keys, and the redact list below is a
// second line of defence for the event log.
import { createRequire } from 'node:module';
import { isatty } from 'node:tty';
import { pino, type DestinationStream, type Logger, type LoggerOptions as PinoOptions } from 'pino';
import type { prettyFactory as PrettyFactory } from 'pino-pretty';

export type { Logger };

export interface LoggerOptions {
  level: string;
  /** Defaults to stdout; tests may pass another file descriptor. */
  fd?: number;
  /** In a worker process: its slot, added to every line; and writes stay whole lines of at most PIPE_BUF bytes. */
  worker?: number;
  /**
   * Under hot restart (E7): `generation` is added to every line of a generation (0: the keeper's
   * lines, which say `keeper: true`), and writes stay whole lines, as a worker's.
   */
  generation?: number;
  /** `json` (one JSON object a line), `pretty` (for people), `auto` (pretty when the output is a terminal). Default `json`. */
  format?: LogFormat;
}

export type LogFormat = 'json' | 'pretty' | 'auto';

/** Whether `format` means readable lines on file descriptor `fd` (default stdout). */
export function isPretty(format: LogFormat | undefined, fd = 1): boolean {
  return format === 'pretty' || (format === 'auto' && isatty(fd));
}

export interface Loggers {
  /** Events: lifecycle, errors, configuration. Redacts credential-like fields. */
  events: Logger;
  /** One line per finished request. Built from named fields only, so it skips redaction. */
  access: Logger;
}

/** Lines are written in batches of about this size, and at least every FLUSH_MS. */
const BATCH_BYTES = 16 * 1024;
const FLUSH_MS = 100;
/**
 * Workers share stdout: a write of at most PIPE_BUF (4096) bytes to a pipe is never interleaved
 * with another process's, so a worker's batches stay within it (a longer line goes alone).
 */
const PIPE_BUF = 4096;

type SonicBoom = ReturnType<typeof pino.destination>;

/**
 * Gathers lines and hands them to the file descriptor's writer (sonic-boom) a batch at a time.
 * sonic-boom appends every write to one pending string and measures that string's byte length
 * each time, which per line costs more than serializing the line; a batch is measured once.
 */
class LineBatch implements DestinationStream {
  readonly #out: SonicBoom;
  /** Most bytes per batch; with `exact`, counted as UTF-8 bytes rather than UTF-16 units. */
  readonly #limit: number;
  readonly #exact: boolean;
  #lines: string[] = [];
  #size = 0;

  constructor(out: SonicBoom, limit: number, exact: boolean) {
    this.#out = out;
    this.#limit = limit;
    this.#exact = exact;
  }

  write(line: string): void {
    const size = this.#exact ? Buffer.byteLength(line) : line.length;
    if (this.#exact && this.#size + size > this.#limit) this.flush();
    this.#lines.push(line);
    this.#size += size;
    if (this.#size >= this.#limit) this.flush();
  }

  /** Hands the pending lines to the writer, which writes them out asynchronously. */
  flush(): void {
    if (this.#size === 0) return;
    const batch = this.#lines.length === 1 ? this.#lines[0]! : this.#lines.join('');
    this.#lines = [];
    this.#size = 0;
    this.#out.write(batch);
  }

  /** Writes everything pending before returning. */
  flushSync(): void {
    this.flush();
    this.#out.flushSync();
  }
}

/**
 * Turns each JSON line into a readable one (time, level, worker, event, message, then the other
 * fields on the same line) before batching. Only when asked for: the JSON path never comes here.
 */
class PrettyLines implements DestinationStream {
  readonly #batch: LineBatch;
  readonly #pretty: (line: string) => string;

  constructor(batch: LineBatch, colorize: boolean) {
    this.#batch = batch;
    // Loaded only when asked for: JSON logging never loads it.
    const { prettyFactory } = createRequire(import.meta.url)('pino-pretty') as { prettyFactory: typeof PrettyFactory };
    this.#pretty = prettyFactory({
      colorize,
      translateTime: 'SYS:HH:MM:ss.l',
      ignore: 'pid,hostname,event,worker,generation,keeper',
      singleLine: true,
      messageFormat: '{if keeper}[keeper] {end}{if generation}[gen {generation}] {end}{if worker}[worker {worker}] {end}{event}{if msg}: {msg}{end}',
    });
  }

  write(line: string): void {
    let text: string;
    try {
      text = this.#pretty(line);
    } catch {
      text = line;
    }
    this.#batch.write(text.endsWith('\n') ? text : `${text}\n`);
  }

  flush(): void {
    this.#batch.flush();
  }

  flushSync(): void {
    this.#batch.flushSync();
  }
}

export function createLoggers(options: LoggerOptions): Loggers {
  const shared = options.worker !== undefined || options.generation !== undefined;
  const tags = {
    ...(options.generation === 0 ? { keeper: true } : options.generation !== undefined ? { generation: options.generation } : {}),
    ...(options.worker !== undefined ? { worker: options.worker } : {}),
  };
  const fd = options.fd ?? 1;
  // sonic-boom writes each batch as handed over (maxWrite above any batch, so it never splits one).
  const out = pino.destination({ fd, sync: false, minLength: 0, ...(shared ? { maxWrite: PIPE_BUF } : {}) });
  const batch = shared ? new LineBatch(out, PIPE_BUF, true) : new LineBatch(out, BATCH_BYTES, false);
  // Colours only on a terminal, and never when NO_COLOR is set (https://no-color.org).
  const destination = isPretty(options.format, fd) ? new PrettyLines(batch, isatty(fd) && !process.env.NO_COLOR) : batch;
  // Batching must not hold a quiet gateway's lines back for long.
  setInterval(() => {
    try {
      destination.flush();
    } catch {
      // stdout closed: nothing left to do with the lines.
    }
  }, FLUSH_MS).unref();
  const common: PinoOptions = {
    level: options.level,
    base: { pid: process.pid, ...tags },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  };
  const events = pino(
    {
      ...common,
      redact: {
        paths: ['authorization', 'api_key', 'key', '*.authorization', '*.api_key', '*["x-api-key"]', '*["api-key"]', '*["x-goog-api-key"]', '*["x-amz-security-token"]', 'headers.authorization'],
        censor: '[redacted]',
      },
    },
    destination,
  );
  return { events, access: pino(common, destination) };
}

/**
 * Writes the line `logger.info(fields)` would (level, time, the base fields, then `fields`, undefined
 * ones left out), serialized by one JSON.stringify rather than pino's key-by-key serializer: several
 * times cheaper, for the line every request writes. `fields` must hold JSON values only (no Error,
 * no object pino would serialize its own way), and `logger` must be one of `createLoggers`'.
 */
export function writeInfo(logger: Logger, fields: object): void {
  if (!logger.isLevelEnabled('info')) return;
  const json = JSON.stringify(fields);
  const internals = logger as unknown as Record<symbol, unknown>;
  const stream = internals[pino.symbols.streamSym] as DestinationStream;
  // pino's base fields, serialized once by pino itself: `,"pid":123` (and `,"worker":1`).
  const base = internals[pino.symbols.chindingsSym] as string;
  stream.write(`{"level":"info","time":"${new Date().toISOString()}"${base}${json === '{}' ? '}' : `,${json.slice(1)}`}\n`);
}

/** Writes everything buffered; used on the way out (L9). */
export function flushLogger(logger: Logger): void {
  try {
    const stream = (logger as unknown as Record<symbol, unknown>)[pino.symbols.streamSym] as { flushSync?: () => void } | undefined;
    stream?.flushSync?.();
  } catch {
    // A closed stdout must not turn a clean exit into a crash.
  }
}
