// Where the spans go: an SDK tracer provider, a batch span processor (its queue is bounded: spans
// beyond it are dropped, never waited for) and the OTLP/HTTP (JSON) exporter, each counted. Export
// failures are logged at most once a minute; the exit waits for the export at most `flush_timeout_ms`.
import { randomUUID } from 'node:crypto';
import { TraceFlags, type Attributes, type Context, type Link, type SpanKind, type Tracer } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  SamplingDecision,
  TraceIdRatioBasedSampler,
  type ReadableSpan,
  type Sampler,
  type SamplingResult,
  type Span as SdkSpan,
  type SpanExporter,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';
import type { TracingConfig } from '../config/schema.ts';
import type { Logger } from './logger.ts';
import type { TracingTarget } from './tracing.ts';
import { redactUrl, redactUrlsIn } from '../config/redact-url.ts';
import { MAX_TEXT } from './otel-request-spans.ts';

/** The drain's own span: always recorded, whatever the sample ratio. */
export const DRAIN_SPAN = 'sluice.drain';
/** Export failures are logged at most this often (always counted). */
const FAILURE_LOG_INTERVAL_MS = 60_000;
/** An export request not answered by then fails (and is retried by the exporter within it). */
const EXPORT_TIMEOUT_MS = 10_000;

/** Always records the drain's span; every other span as `inner` decides. */
class DrainAlwaysSampler implements Sampler {
  readonly #inner: Sampler;
  constructor(inner: Sampler) {
    this.#inner = inner;
  }
  shouldSample(context: Context, traceId: string, spanName: string, spanKind: SpanKind, attributes: Attributes, links: Link[]): SamplingResult {
    if (spanName === DRAIN_SPAN) return { decision: SamplingDecision.RECORD_AND_SAMPLED };
    return this.#inner.shouldSample(context, traceId, spanName, spanKind, attributes, links);
  }
  toString(): string {
    return `DrainAlways{${this.#inner.toString()}}`;
  }
}

/** Counts the spans handed to the batch processor (sampled ones: the only ones it exports). */
class CountingProcessor implements SpanProcessor {
  readonly #inner: SpanProcessor;
  ended = 0;
  constructor(inner: SpanProcessor) {
    this.#inner = inner;
  }
  onStart(span: SdkSpan, parent: Context): void {
    this.#inner.onStart(span, parent);
  }
  onEnd(span: ReadableSpan): void {
    if ((span.spanContext().traceFlags & TraceFlags.SAMPLED) !== 0) this.ended++;
    this.#inner.onEnd(span);
  }
  forceFlush(): Promise<void> {
    return this.#inner.forceFlush();
  }
  shutdown(): Promise<void> {
    return this.#inner.shutdown();
  }
}

type ExportCallback = Parameters<SpanExporter['export']>[1];

/** Counts the spans the collector took, and reports each failed export. */
class CountingExporter implements SpanExporter {
  readonly #inner: SpanExporter;
  readonly #failed: (spans: number, error: Error | undefined) => void;
  exported = 0;
  constructor(inner: SpanExporter, failed: (spans: number, error: Error | undefined) => void) {
    this.#inner = inner;
    this.#failed = failed;
  }
  export(spans: ReadableSpan[], done: ExportCallback): void {
    this.#inner.export(spans, (result) => {
      if (result.code === 0) this.exported += spans.length;
      else this.#failed(spans.length, result.error);
      done(result);
    });
  }
  shutdown(): Promise<void> {
    return this.#inner.shutdown();
  }
  forceFlush(): Promise<void> {
    return this.#inner.forceFlush?.() ?? Promise.resolve();
  }
}

/** The tracer, and the pipeline behind it to the collector. */
export class SpanExport {
  readonly #config: TracingConfig;
  readonly #logger: Logger;
  /** The collector's address, without credentials (for the log). */
  readonly endpoint: string;
  readonly #provider: BasicTracerProvider;
  readonly tracer: Tracer;
  readonly #processor: CountingProcessor;
  readonly #exporter: CountingExporter;
  #lastFailureLog = -Infinity;
  #failedSinceLog = 0;

  /** `exporter`: where the spans go instead of the OTLP/HTTP exporter (unit tests). */
  constructor(config: TracingConfig, target: TracingTarget, logger: Logger, version: string, exporter?: SpanExporter) {
    this.#config = config;
    this.#logger = logger;
    this.endpoint = redactUrl(target.endpoint);
    const otlp = exporter ?? new OTLPTraceExporter({ url: target.endpoint, headers: { ...config.headers }, timeoutMillis: EXPORT_TIMEOUT_MS });
    this.#exporter = new CountingExporter(otlp, (spans, error) => this.#exportFailed(spans, error));
    // Queue and batch sizes, and the delay between exports, are the SDK's (OTEL_BSP_* may set them).
    this.#processor = new CountingProcessor(new BatchSpanProcessor(this.#exporter, { exportTimeoutMillis: EXPORT_TIMEOUT_MS }));
    this.#provider = new BasicTracerProvider({
      resource: resourceFromAttributes({
        [ATTR_SERVICE_NAME]: target.serviceName,
        [ATTR_SERVICE_VERSION]: version,
        'service.instance.id': randomUUID(),
        'process.pid': process.pid,
      }),
      sampler: new DrainAlwaysSampler(new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(config.sample_ratio) })),
      spanProcessors: [this.#processor],
      spanLimits: { attributeValueLengthLimit: MAX_TEXT * 4 },
    });
    this.tracer = this.#provider.getTracer('sluice', version);
  }

  #exportFailed(spans: number, error: Error | undefined): void {
    this.#failedSinceLog += spans;
    const now = Date.now();
    if (now - this.#lastFailureLog < FAILURE_LOG_INTERVAL_MS) return;
    this.#lastFailureLog = now;
    const failed = this.#failedSinceLog;
    this.#failedSinceLog = 0;
    const reason = redactUrlsIn(error?.message ?? 'unknown');
    this.#logger.warn(
      { event: 'traces_export_failed', endpoint: this.endpoint, spans: failed, reason },
      `could not export ${failed} spans to ${this.endpoint}: ${reason} (said at most once a minute; requests are not affected)`,
    );
  }

  /**
   * Exports what is left, within `flush_timeout_ms`; the spans that were not exported are counted
   * in one `traces_not_exported` line (`startedAt`: when the exit began, for its `waited_ms`).
   */
  async shutdown(startedAt: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), this.#config.flush_timeout_ms)));
    const outcome = await Promise.race([
      this.#provider.shutdown().then(
        () => 'flushed' as const,
        () => 'failed' as const,
      ),
      bound,
    ]);
    clearTimeout(timer);
    const lost = this.#processor.ended - this.#exporter.exported;
    if (lost <= 0) return;
    const waited = Date.now() - startedAt;
    this.#logger.warn(
      { event: 'traces_not_exported', spans: lost, endpoint: this.endpoint, reason: outcome === 'timeout' ? 'flush_timeout' : 'dropped_or_failed', waited_ms: waited },
      outcome === 'timeout'
        ? `${lost} spans were not exported to ${this.endpoint} within tracing.flush_timeout_ms (${this.#config.flush_timeout_ms} ms); exiting without them`
        : `${lost} spans were dropped (a full queue) or refused by ${this.endpoint}; exiting without them`,
    );
  }
}
