// Structured JSON logs (pino) on stdout. Secrets never reach here: callers log names and ids, never
// headers or keys, and the redact list below is a second line of defence.
import { pino, type Logger } from 'pino';

export type { Logger };

export interface LoggerOptions {
  level: string;
  /** Defaults to stdout; tests may pass another file descriptor. */
  fd?: number;
}

export function createLogger(options: LoggerOptions): Logger {
  const destination = pino.destination({ fd: options.fd ?? 1, sync: false });
  return pino(
    {
      level: options.level,
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: {
        paths: ['authorization', 'api_key', 'key', '*.authorization', '*.api_key', '*["x-api-key"]', 'headers.authorization'],
        censor: '[redacted]',
      },
    },
    destination,
  );
}

/** Writes everything buffered; used on the way out (L9). */
export function flushLogger(logger: Logger): void {
  try {
    logger.flush();
    const stream = (logger as unknown as Record<symbol, unknown>)[pino.symbols.streamSym] as { flushSync?: () => void } | undefined;
    stream?.flushSync?.();
  } catch {
    // A closed stdout must not turn a clean exit into a crash.
  }
}
