// The OpenTelemetry side of `tracing.ts`, loaded only when `tracing.enabled` is true: a SERVER span
// per proxy request and its attempts' (otel-request-spans.ts), a span for the drain (otel-drain-spans.ts),
// exported by otel-export.ts. Nothing here may fail a request or the exit.
import { ROOT_CONTEXT, SpanKind, TraceFlags, createTraceState, trace, type Context } from '@opentelemetry/api';
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import { ATTR_HTTP_REQUEST_METHOD, ATTR_HTTP_ROUTE, ATTR_URL_PATH } from '@opentelemetry/semantic-conventions';
import type { TracingConfig } from '../config/schema.ts';
import type { LifecycleLog } from '../lifecycle/contracts.ts';
import type { Logger } from './logger.ts';
import type { RequestStart, RequestTrace, Tracing, TracingTarget } from './tracing.ts';
import { MAX_TRACESTATE, parseTraceparent } from './trace-context.ts';
import { OpenRequestSpans, OtelRequestTrace, short } from './otel-request-spans.ts';
import { SpanExport } from './otel-export.ts';
import { DrainSpans } from './otel-drain-spans.ts';

/** The GenAI operation of each endpoint label (those that name a model). */
const OPERATIONS: ReadonlyMap<string, string> = new Map([
  ['chat_completions', 'chat'],
  ['messages', 'chat'],
  ['responses', 'chat'],
  ['completions', 'text_completion'],
  ['embeddings', 'embeddings'],
  ['count_tokens', 'count_tokens'],
]);

/** The paths served, as `http.route` (anything else is left out: no unbounded span names). */
const ROUTES: ReadonlyMap<string, string> = new Map([
  ['chat_completions', '/v1/chat/completions'],
  ['completions', '/v1/completions'],
  ['embeddings', '/v1/embeddings'],
  ['responses', '/v1/responses'],
  ['messages', '/v1/messages'],
  ['count_tokens', '/v1/messages/count_tokens'],
]);

export class OtelTracing implements Tracing {
  readonly #export: SpanExport;
  /** Request spans still open (recording ones): each gets the drain's events. */
  readonly #open: OpenRequestSpans;
  readonly #drain: DrainSpans;

  /** `exporter`: where the spans go instead of the OTLP/HTTP exporter (unit tests). */
  constructor(config: TracingConfig, target: TracingTarget, logger: Logger, version: string, exporter?: SpanExporter) {
    this.#export = new SpanExport(config, target, logger, version, exporter);
    this.#open = new OpenRequestSpans(this.#export.tracer);
    this.#drain = new DrainSpans(this.#export.tracer, this.#open, logger);
    const endpoint = this.#export.endpoint;
    logger.info(
      { event: 'tracing_started', endpoint, sample_ratio: config.sample_ratio, service_name: target.serviceName, flush_timeout_ms: config.flush_timeout_ms },
      `exporting traces to ${endpoint}`,
    );
  }

  startRequest(start: RequestStart): RequestTrace {
    const parent = parseTraceparent(start.traceparent);
    let context: Context = ROOT_CONTEXT;
    if (parent) {
      const state = typeof start.tracestate === 'string' && start.tracestate.length <= MAX_TRACESTATE ? createTraceState(start.tracestate) : undefined;
      context = trace.setSpanContext(ROOT_CONTEXT, { traceId: parent.traceId, spanId: parent.spanId, traceFlags: parent.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE, isRemote: true, ...(state ? { traceState: state } : {}) });
    }
    const route = ROUTES.get(start.endpoint) ?? (start.endpoint === 'models' ? '/v1/models' : undefined);
    const span = this.#export.tracer.startSpan(
      route ? `${start.method} ${route}` : start.method,
      {
        kind: SpanKind.SERVER,
        attributes: {
          [ATTR_HTTP_REQUEST_METHOD]: start.method,
          [ATTR_URL_PATH]: short(start.path),
          ...(route ? { [ATTR_HTTP_ROUTE]: route } : {}),
          'sluice.request_id': start.requestId,
          ...(this.#drain.draining ? { 'sluice.arrived_while_draining': true } : {}),
        },
      },
      context,
    );
    const request = new OtelRequestTrace(this.#open, span, OPERATIONS.get(start.endpoint), parent !== undefined);
    if (span.isRecording()) this.#open.add(request);
    return request;
  }

  lifecycleLog(log: LifecycleLog): LifecycleLog {
    return this.#drain.lifecycleLog(log);
  }

  async shutdown(): Promise<void> {
    const startedAt = Date.now();
    // A forced exit may leave requests open: their spans end now, with what they know.
    for (const request of this.#open.list()) request.abandon();
    this.#drain.end();
    await this.#export.shutdown(startedAt);
  }
}
