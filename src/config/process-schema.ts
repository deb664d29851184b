// How the gateway runs and what it tells: its worker processes and their recycling, hot restart,
// shutdown and drains, reload on a change of the file, the log and tracing.
import { z } from 'zod';
import { fromEnv, positiveMilliseconds, positiveSeconds, seconds } from './value-schemas.ts';

export const shutdownSchema = z.strictObject({
  /** L2: the listeners keep accepting for at least this long after the signal. */
  min_drain_secs: seconds.default(30),
  /** L8: optional backstop; 0 means the drain has no deadline of its own. */
  max_drain_secs: seconds.default(0),
  /** O1: how often "still draining" is logged. */
  progress_log_secs: positiveSeconds.default(5),
  /** E1: `immediate` retires every connection from the start; `gradual` with a rising probability. */
  drain_strategy: z.enum(['immediate', 'gradual']).default('immediate'),
  /** E1/E2/E4: the time a drain is spread over (admin graceful drains keep accepting this long). Default: min_drain_secs. */
  drain_time_secs: seconds.optional(),
  /**
   * E3: the proactive drain resets upgraded (WebSocket) connections, as Envoy does, instead of
   * leaving them to finish. Off by default: a drain never cuts a session in flight.
   */
  reset_upgraded_on_proactive_drain: fromEnv(z.boolean()).default(false),
  /** E7: an old generation still draining this long after a hot restart is ended (L8 error events). */
  parent_shutdown_secs: positiveSeconds.default(900),
});

export const reloadSchema = z.strictObject({
  /** E6: the config file is watched, and a change (saved in place or by rename) is reloaded as on SIGHUP. */
  watch: fromEnv(z.boolean()).default(true),
});

export const tracingSchema = z.strictObject({
  /** OpenTelemetry traces over OTLP/HTTP (JSON): off by default, and then nothing of the SDK is loaded. Read at start. */
  enabled: fromEnv(z.boolean()).default(false),
  /**
   * The collector's OTLP/HTTP traces URL. Unset: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
   * OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces added, else http://127.0.0.1:4318/v1/traces.
   */
  endpoint: z.url({ protocol: /^https?$/, error: 'expected an http:// or https:// URL' }).optional(),
  /** Headers sent with every export (an authorization token, say): may hold secrets, never logged. Added to OTEL_EXPORTER_OTLP_HEADERS. */
  headers: z.record(z.string(), z.string()).default({}),
  /** The share of new traces recorded (0 to 1); a request with a `traceparent` follows its caller's decision. */
  sample_ratio: fromEnv(z.number().min(0).max(1)).default(1),
  /** `service.name` of every span. Unset: OTEL_SERVICE_NAME, else "sluice". */
  service_name: z.string().min(1).optional(),
  /** L9: at the exit, the spans not yet exported get at most this long; the rest are counted as lost. */
  flush_timeout_ms: positiveMilliseconds.default(2000),
});
export type TracingConfig = z.infer<typeof tracingSchema>;

export const workersRecycleSchema = z.strictObject({
  /** A worker whose resident memory passes this many MiB is replaced (its replacement serves first); 0: never. */
  max_rss_mb: fromEnv(z.number().nonnegative()).default(0),
  /** A worker that has started this many requests is replaced; 0: never. */
  max_requests: fromEnv(z.number().int().nonnegative()).default(0),
});

export const hotRestartSchema = z.strictObject({
  /**
   * E7: run under a process that stays (the PID a platform watches) and starts each generation of
   * the gateway, so that `sluice restart` or SIGUSR2 replaces the running one without a refused
   * connection. Read at start only.
   */
  enabled: fromEnv(z.boolean()).default(false),
  /** E7: a new generation not ready this long after it was started is stopped; the old one keeps serving. */
  start_timeout_secs: positiveSeconds.default(60),
});

export const logSchema = z.strictObject({
  level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  access_log: fromEnv(z.boolean()).default(true),
  /** `json` lines, `pretty` lines for people, or `auto`: pretty when stdout is a terminal. Read at start. */
  format: z.enum(['json', 'pretty', 'auto']).default('auto'),
});

/**
 * Processes serving the proxy listeners: `auto` (the default) is one per CPU Node may use
 * (os.availableParallelism()), sized down for memory (`workerCount`); 1 runs everything in one
 * process, with no supervisor.
 */
const WORKERS = 'expected "auto" or a whole number of worker processes from 1 to 256';
export const workersSchema = fromEnv(z.union([z.literal('auto'), z.number().int(WORKERS).min(1, WORKERS).max(256, WORKERS)], { error: WORKERS })).default('auto');
