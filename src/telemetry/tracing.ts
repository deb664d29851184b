// OpenTelemetry traces, as the rest of the gateway sees them: interfaces only, and where spans go.
// With `tracing.enabled: false` (the default) nothing of the OpenTelemetry SDK is loaded and a
// request costs one null check; the SDK side is `otel-tracing.ts`, loaded by `start-tracing.ts`
// only when tracing is on.
import type { TracingConfig } from '../config/schema.ts';
import type { LifecycleLog } from '../lifecycle/contracts.ts';
import type { FinishedRequest } from './access-log.ts';

/** What a proxy request's span starts with. */
export interface RequestStart {
  readonly method: string;
  readonly path: string;
  /** The endpoint label ('chat_completions', 'messages', 'models', 'other', ...). */
  readonly endpoint: string;
  /** Our request id (the `x-request-id` answered). */
  readonly requestId: string;
  /** The caller's `traceparent` and `tracestate` headers, as received (validated by the tracer). */
  readonly traceparent: string | string[] | undefined;
  readonly tracestate: string | string[] | undefined;
}

/** One upstream attempt, as its span starts. */
export interface AttemptStart {
  /** The configured provider's name and its API type (`openai`, `anthropic`, `echo`). */
  readonly provider: string;
  readonly providerType: string;
  /** The model asked of the provider. */
  readonly model: string;
  /** The upstream origin (scheme://host:port); none for a provider that answers locally. */
  readonly origin: string | undefined;
  /** 1 for the first attempt of the request. */
  readonly number: number;
  /** The API the provider is spoken to in, when it is not the client's (a translation). */
  readonly translatedTo: string | undefined;
}

/** The span of one proxy request (a SERVER span). */
export interface RequestTrace {
  /** The request's body is read: its model and parameters (max_tokens, temperature, stream). */
  requested(body: Record<string, unknown>): void;
  /** An upstream attempt starts: its CLIENT span, a child of this one. */
  startAttempt(attempt: AttemptStart): AttemptTrace;
  /** The response closed: the facts of the access line. Ends the span. */
  end(finished: FinishedRequest): void;
}

/** The span of one upstream attempt (a CLIENT span). Every ending method after the first does nothing. */
export interface AttemptTrace {
  /** The `traceparent` to send upstream: this attempt's span. */
  readonly traceparent: string;
  /** Whether the caller's `tracestate` may go upstream (its `traceparent` was valid). */
  readonly keepsTracestate: boolean;
  /** The attempt's answer was taken: its status. */
  committed(status: number): void;
  /** The attempt failed before anything was committed (its failure class, and the status if it answered). Ends the span. */
  failed(kind: string, status: number | undefined): void;
  /** The committed answer ended: its usage, or why it broke (`errorType`). Ends the span. */
  end(usage: FinishedRequest['usage'], errorType?: string): void;
}

export interface Tracing {
  /** A proxy request's SERVER span: a child of the caller's `traceparent` when that is valid. */
  startRequest(start: RequestStart): RequestTrace;
  /**
   * The lifecycle's log, passed through unchanged, whose drain lines (`drain_started`,
   * `drain_progress`, `drain_forced`, `listeners_closing`, `process_exit`) also become events: on
   * the drain's own span, and on every request span still open.
   */
  lifecycleLog(log: LifecycleLog): LifecycleLog;
  /**
   * L9: exports what is left, within `flush_timeout_ms`. Never rejects; spans that could not be
   * exported are counted in one `traces_not_exported` line.
   */
  shutdown(): Promise<void>;
}

/** Where the traces go and as which service: the config first, then the standard OTEL_* variables. */
export interface TracingTarget {
  readonly endpoint: string;
  readonly serviceName: string;
}

export const DEFAULT_TRACES_ENDPOINT = 'http://127.0.0.1:4318/v1/traces';

/**
 * `tracing.endpoint`, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (as it is), else
 * OTEL_EXPORTER_OTLP_ENDPOINT with `/v1/traces` added, else the local collector's default;
 * `tracing.service_name`, else OTEL_SERVICE_NAME, else "sluice".
 */
export function tracingTarget(config: TracingConfig, env: NodeJS.ProcessEnv): TracingTarget {
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  const endpoint = config.endpoint ?? (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || undefined) ?? (base ? `${base.replace(/\/+$/, '')}/v1/traces` : DEFAULT_TRACES_ENDPOINT);
  return { endpoint, serviceName: config.service_name ?? (env.OTEL_SERVICE_NAME || undefined) ?? 'sluice' };
}
