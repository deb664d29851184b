// Structured JSON logs (pino) on stdout. Secrets never reach here: callers log names and ids, never
// headers or keys, and the redact list below is a second line of defence for the event log.
import { pino, type Logger, type LoggerOptions as PinoOptions } from 'pino';

export type { Logger };

export interface LoggerOptions {
  level: string;
  /** Defaults to stdout; tests may pass another file descriptor. */
  fd?: number;
  /** In a worker process: its slot, added to every line; and writes stay whole lines of at most PIPE_BUF bytes. */
  worker?: number;
}

export interface Loggers {
  /** Events: lifecycle, errors, configuration. Redacts credential-like fields. */
  events: Logger;
  /** One line per finished request. Built from named fields only, so it skips redaction. */
  access: Logger;
}

/** Lines are written in batches of this size, and at least every FLUSH_MS. */
const BATCH_BYTES = 16 * 1024 - 1;
const FLUSH_MS = 100;
/**
 * Workers share stdout: a write of at most PIPE_BUF (4096) bytes to a pipe is never interleaved
 * with another process's, and sonic-boom cuts its writes between lines, so no line is torn.
 */
const SHARED_WRITE_BYTES = 4096;

export function createLoggers(options: LoggerOptions): Loggers {
  const shared = options.worker !== undefined;
  const destination = pino.destination({
    fd: options.fd ?? 1,
    sync: false,
    minLength: shared ? SHARED_WRITE_BYTES - 1 : BATCH_BYTES,
    ...(shared ? { maxWrite: SHARED_WRITE_BYTES } : {}),
  });
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
    base: shared ? { pid: process.pid, worker: options.worker } : { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  };
  const events = pino(
    {
      ...common,
      redact: {
        paths: ['authorization', 'api_key', 'key', '*.authorization', '*.api_key', '*["x-api-key"]', 'headers.authorization'],
        censor: '[redacted]',
      },
    },
    destination,
  );
  return { events, access: pino(common, destination) };
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
