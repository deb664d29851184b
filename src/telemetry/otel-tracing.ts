// The OpenTelemetry side of `tracing.ts`, loaded only when `tracing.enabled` is true: an SDK tracer
// provider, a batch span processor (its queue is bounded: spans beyond it are dropped, never
// waited for) and the OTLP/HTTP (JSON) exporter. A SERVER span per proxy request, a CLIENT span per
// upstream attempt (GenAI semantic conventions), a span per drain, the drain's lines as events.
// Nothing here may fail a request or the exit: export failures are logged at most once a minute,
// and the exit waits for the export at most `flush_timeout_ms`.
import { randomUUID } from 'node:crypto';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags, createTraceState, trace, type Attributes, type Context, type Link, type Span, type Tracer } from '@opentelemetry/api';
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
import {
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_SERVICE_NAME,
  ATTR_SERVICE_VERSION,
  ATTR_URL_PATH,
} from '@opentelemetry/semantic-conventions';
import type { TracingConfig } from '../config/schema.ts';
import type { LifecycleLog } from '../lifecycle/contracts.ts';
import type { Logger } from './logger.ts';
import type { FinishedRequest } from './access-log.ts';
import type { AttemptStart, AttemptTrace, RequestStart, RequestTrace, Tracing, TracingTarget } from './tracing.ts';
import { redactUrl, redactUrlsIn } from '../config/redact-url.ts';
import { MAX_TRACESTATE, formatTraceparent, parseTraceparent } from './trace-context.ts';

/** GenAI semantic conventions (development status, so not in the stable entry point of the package). */
const GEN_AI = {
  operation: 'gen_ai.operation.name',
  provider: 'gen_ai.provider.name',
  /** The name before `gen_ai.provider.name`; many backends still read it. */
  system: 'gen_ai.system',
  requestModel: 'gen_ai.request.model',
  responseModel: 'gen_ai.response.model',
  maxTokens: 'gen_ai.request.max_tokens',
  temperature: 'gen_ai.request.temperature',
  topP: 'gen_ai.request.top_p',
  inputTokens: 'gen_ai.usage.input_tokens',
  outputTokens: 'gen_ai.usage.output_tokens',
} as const;

/** The drain's own span: always recorded, whatever the sample ratio. */
const DRAIN_SPAN = 'sluice.drain';
/** Export failures are logged at most this often (always counted). */
const FAILURE_LOG_INTERVAL_MS = 60_000;
/** An export request not answered by then fails (and is retried by the exporter within it). */
const EXPORT_TIMEOUT_MS = 10_000;
/** What a client sends (a path, a model name) is cut to this length in span names and attributes. */
const MAX_TEXT = 256;
const short = (text: string): string => (text.length > MAX_TEXT ? text.slice(0, MAX_TEXT) : text);

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

/** A number the client sent, if it is one. */
function numberIn(body: Record<string, unknown>, ...names: string[]): number | undefined {
  for (const name of names) {
    const value = body[name];
    if (typeof value === 'number' && Number.isFinite(value)) return value;
  }
  return undefined;
}

export class OtelTracing implements Tracing {
  readonly #config: TracingConfig;
  readonly #logger: Logger;
  readonly #endpoint: string;
  readonly #provider: BasicTracerProvider;
  readonly #tracer: Tracer;
  readonly #processor: CountingProcessor;
  readonly #exporter: CountingExporter;
  /**
   * Request spans still open (recording ones): each gets the drain's events. A list threaded
   * through the traces themselves, not a Set: an entry added and deleted per request made a Set
   * keep young garbage alive in every scavenge (see TrackedList in lifecycle.ts).
   */
  #openHead: OtelRequestTrace | undefined;
  #openCount = 0;
  #drain: Span | undefined;
  /** A force that came before the drain it forces (a second signal first): its event, for the drain span once it starts. */
  #forcedFirst: Attributes | undefined;
  #windowTimer: NodeJS.Timeout | undefined;
  #lastFailureLog = -Infinity;
  #failedSinceLog = 0;

  /** `exporter`: where the spans go instead of the OTLP/HTTP exporter (unit tests). */
  constructor(config: TracingConfig, target: TracingTarget, logger: Logger, version: string, exporter?: SpanExporter) {
    this.#config = config;
    this.#logger = logger;
    this.#endpoint = redactUrl(target.endpoint);
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
    this.#tracer = this.#provider.getTracer('sluice', version);
    logger.info(
      { event: 'tracing_started', endpoint: this.#endpoint, sample_ratio: config.sample_ratio, service_name: target.serviceName, flush_timeout_ms: config.flush_timeout_ms },
      `exporting traces to ${this.#endpoint}`,
    );
  }

  get tracer(): Tracer {
    return this.#tracer;
  }

  startRequest(start: RequestStart): RequestTrace {
    const parent = parseTraceparent(start.traceparent);
    let context = ROOT_CONTEXT;
    if (parent) {
      const state = typeof start.tracestate === 'string' && start.tracestate.length <= MAX_TRACESTATE ? createTraceState(start.tracestate) : undefined;
      context = trace.setSpanContext(ROOT_CONTEXT, { traceId: parent.traceId, spanId: parent.spanId, traceFlags: parent.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE, isRemote: true, ...(state ? { traceState: state } : {}) });
    }
    const route = ROUTES.get(start.endpoint) ?? (start.endpoint === 'models' ? '/v1/models' : undefined);
    const span = this.#tracer.startSpan(
      route ? `${start.method} ${route}` : start.method,
      {
        kind: SpanKind.SERVER,
        attributes: {
          [ATTR_HTTP_REQUEST_METHOD]: start.method,
          [ATTR_URL_PATH]: short(start.path),
          ...(route ? { [ATTR_HTTP_ROUTE]: route } : {}),
          'sluice.request_id': start.requestId,
          ...(this.#drain ? { 'sluice.arrived_while_draining': true } : {}),
        },
      },
      context,
    );
    const request = new OtelRequestTrace(this, span, OPERATIONS.get(start.endpoint), parent !== undefined);
    if (span.isRecording()) this.#link(request);
    return request;
  }

  #link(request: OtelRequestTrace): void {
    request.next = this.#openHead;
    if (this.#openHead) this.#openHead.prev = request;
    this.#openHead = request;
    request.linked = true;
    this.#openCount++;
  }

  /** A request span ended. */
  closed(request: OtelRequestTrace): void {
    if (!request.linked) return;
    request.linked = false;
    if (request.prev) request.prev.next = request.next;
    else this.#openHead = request.next;
    if (request.next) request.next.prev = request.prev;
    request.prev = request.next = undefined;
    this.#openCount--;
  }

  /** The request spans still open, a copy (ending one while iterating is safe). */
  #open(): OtelRequestTrace[] {
    const open: OtelRequestTrace[] = [];
    for (let r = this.#openHead; r; r = r.next) open.push(r);
    return open;
  }

  lifecycleLog(log: LifecycleLog): LifecycleLog {
    return {
      info: (fields, message) => {
        log.info(fields, message);
        this.#lifecycleLine(fields as Record<string, unknown>);
      },
      warn: (fields, message) => {
        log.warn(fields, message);
        this.#lifecycleLine(fields as Record<string, unknown>);
      },
    };
  }

  #lifecycleLine(fields: Record<string, unknown>): void {
    try {
      this.#drainEvent(fields);
    } catch (error) {
      // Telemetry never stops a drain.
      this.#logger.error({ event: 'telemetry_error', err: error }, 'recording a drain event in the traces failed');
    }
  }

  #drainEvent(fields: Record<string, unknown>): void {
    const num = (name: string) => (typeof fields[name] === 'number' ? (fields[name] as number) : 0);
    switch (fields.event) {
      case 'drain_started': {
        if (this.#drain) return;
        const window = num('min_drain_secs');
        const started = { 'sluice.drain.trigger': String(fields.trigger), 'sluice.drain.min_drain_secs': window, 'sluice.in_flight': num('in_flight') };
        this.#drain = this.#tracer.startSpan(DRAIN_SPAN, {
          kind: SpanKind.INTERNAL,
          attributes: {
            ...started,
            'sluice.drain.max_drain_secs': num('max_drain_secs'),
            'sluice.drain.strategy': String(fields.strategy),
            'sluice.drain.exit': fields.exit !== false,
            'sluice.open_connections': num('open_connections'),
          },
        });
        this.#drain.addEvent('sluice.drain.started', started);
        if (this.#forcedFirst) this.#drain.addEvent('sluice.drain.forced', this.#forcedFirst);
        const drainTrace = this.#drain.spanContext().traceId;
        for (const request of this.#open()) request.span.addEvent('sluice.drain.started', { ...started, 'sluice.drain.trace_id': drainTrace });
        const windowOver = () => {
          this.#windowTimer = undefined;
          this.#drain?.addEvent('sluice.drain.window_over', { 'sluice.in_flight': this.#openCount });
          for (const request of this.#open()) request.span.addEvent('sluice.drain.window_over');
        };
        if (window > 0) this.#windowTimer = setTimeout(windowOver, window * 1000).unref();
        else windowOver();
        return;
      }
      case 'drain_progress':
        this.#drain?.addEvent('sluice.drain.progress', { 'sluice.in_flight': num('in_flight'), 'sluice.open_connections': num('open_connections'), 'sluice.drain.elapsed_secs': num('elapsed_secs') });
        return;
      case 'drain_widened':
        this.#drain?.addEvent('sluice.drain.widened', { 'sluice.drain.trigger': String(fields.trigger), 'sluice.drain.exit': fields.exit === true });
        return;
      case 'drain_forced': {
        const forced = { 'sluice.drain.reason': String(fields.reason), 'sluice.in_flight': num('in_flight') };
        if (this.#drain) this.#drain.addEvent('sluice.drain.forced', forced);
        else this.#forcedFirst = forced;
        for (const request of this.#open()) request.span.addEvent('sluice.drain.forced', forced);
        return;
      }
      case 'listeners_closing':
        this.#drain?.addEvent('sluice.drain.listeners_closed', { 'sluice.in_flight': num('in_flight'), 'sluice.open_connections': num('open_connections') });
        return;
      case 'process_exit': {
        const drain = this.#drain;
        if (this.#windowTimer) clearTimeout(this.#windowTimer);
        if (!drain) return;
        const code = num('exit_code');
        drain.addEvent('sluice.process.exit', { 'sluice.exit_code': code, 'sluice.drain.duration_secs': num('drain_duration_secs') });
        drain.setAttribute('sluice.exit_code', code);
        if (code !== 0) drain.setStatus({ code: SpanStatusCode.ERROR, message: `forced: ${String(fields.forced)}` });
        drain.end();
        return;
      }
      default:
    }
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
      { event: 'traces_export_failed', endpoint: this.#endpoint, spans: failed, reason },
      `could not export ${failed} spans to ${this.#endpoint}: ${reason} (said at most once a minute; requests are not affected)`,
    );
  }

  async shutdown(): Promise<void> {
    const startedAt = Date.now();
    // A forced exit may leave requests open: their spans end now, with what they know.
    for (const request of this.#open()) request.abandon();
    if (this.#drain?.isRecording()) this.#drain.end();
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
      { event: 'traces_not_exported', spans: lost, endpoint: this.#endpoint, reason: outcome === 'timeout' ? 'flush_timeout' : 'dropped_or_failed', waited_ms: waited },
      outcome === 'timeout'
        ? `${lost} spans were not exported to ${this.#endpoint} within tracing.flush_timeout_ms (${this.#config.flush_timeout_ms} ms); exiting without them`
        : `${lost} spans were dropped (a full queue) or refused by ${this.#endpoint}; exiting without them`,
    );
  }
}

class OtelRequestTrace implements RequestTrace {
  /** Its place in the tracer's list of open request spans. */
  prev: OtelRequestTrace | undefined;
  next: OtelRequestTrace | undefined;
  linked = false;
  readonly #tracing: OtelTracing;
  readonly span: Span;
  readonly #operation: string | undefined;
  readonly #keepsTracestate: boolean;
  /** The API type of the last attempt's provider (`gen_ai.provider.name`). */
  #providerType: string | undefined;
  #ended = false;

  constructor(tracing: OtelTracing, span: Span, operation: string | undefined, keepsTracestate: boolean) {
    this.#tracing = tracing;
    this.span = span;
    this.#operation = operation;
    this.#keepsTracestate = keepsTracestate;
  }

  requested(body: Record<string, unknown>): void {
    const span = this.span;
    if (!span.isRecording()) return;
    const model = typeof body.model === 'string' ? short(body.model) : '';
    if (this.#operation) {
      span.updateName(model ? `${this.#operation} ${model}` : this.#operation);
      span.setAttribute(GEN_AI.operation, this.#operation);
    }
    if (model) span.setAttribute(GEN_AI.requestModel, model);
    const maxTokens = numberIn(body, 'max_tokens', 'max_completion_tokens', 'max_output_tokens');
    if (maxTokens !== undefined) span.setAttribute(GEN_AI.maxTokens, maxTokens);
    const temperature = numberIn(body, 'temperature');
    if (temperature !== undefined) span.setAttribute(GEN_AI.temperature, temperature);
    const topP = numberIn(body, 'top_p');
    if (topP !== undefined) span.setAttribute(GEN_AI.topP, topP);
    if (body.stream === true) span.setAttribute('sluice.stream', true);
  }

  startAttempt(attempt: AttemptStart): AttemptTrace {
    this.#providerType = attempt.providerType;
    const operation = this.#operation ?? 'chat';
    const attributes: Attributes = {
      [GEN_AI.operation]: operation,
      [GEN_AI.provider]: attempt.providerType,
      [GEN_AI.system]: attempt.providerType,
      [GEN_AI.requestModel]: short(attempt.model),
      'sluice.provider': attempt.provider,
      'sluice.attempt': attempt.number,
    };
    if (attempt.origin) {
      const url = originParts(attempt.origin);
      if (url) {
        attributes[ATTR_SERVER_ADDRESS] = url.host;
        attributes[ATTR_SERVER_PORT] = url.port;
      }
    }
    if (attempt.translatedTo) attributes['sluice.translated_to'] = attempt.translatedTo;
    const span = this.#tracing.tracer.startSpan(`${operation} ${short(attempt.model)}`, { kind: SpanKind.CLIENT, attributes }, trace.setSpan(ROOT_CONTEXT, this.span));
    return new OtelAttemptTrace(span, this.#keepsTracestate);
  }

  end(f: FinishedRequest): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#tracing.closed(this);
    const span = this.span;
    if (span.isRecording()) {
      span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, f.status);
      if (f.provider) span.setAttribute('sluice.provider', f.provider);
      if (this.#providerType) {
        span.setAttribute(GEN_AI.provider, this.#providerType);
        span.setAttribute(GEN_AI.system, this.#providerType);
      }
      if (f.usage) {
        span.setAttribute(GEN_AI.inputTokens, f.usage.prompt);
        span.setAttribute(GEN_AI.outputTokens, f.usage.completion);
        if (f.usage.model) span.setAttribute(GEN_AI.responseModel, f.usage.model);
        if (f.usage.estimated) span.setAttribute('sluice.usage_estimated', true);
      }
      if (f.keyName) span.setAttribute('sluice.key_name', f.keyName);
      if (f.downstreamRequestId) span.setAttribute('sluice.downstream_request_id', f.downstreamRequestId);
      if (f.attempts !== undefined && f.attempts > 0) span.setAttribute('sluice.attempts', f.attempts);
      if (f.costMicros !== undefined) span.setAttribute('sluice.cost_usd', f.costMicros / 1e6);
      span.setAttribute('sluice.listener', f.listener);
      const errorType = f.errorCode || (f.status >= 500 ? String(f.status) : '');
      if (errorType) span.setAttribute(ATTR_ERROR_TYPE, errorType);
      if (f.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
    }
    span.end();
  }

  /** The process exits with this request still open (a forced drain). */
  abandon(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#tracing.closed(this);
    this.span.addEvent('sluice.process.exit');
    this.span.setAttribute(ATTR_ERROR_TYPE, 'drain_forced');
    this.span.setStatus({ code: SpanStatusCode.ERROR, message: 'drain_forced' });
    this.span.end();
  }
}

class OtelAttemptTrace implements AttemptTrace {
  readonly #span: Span;
  readonly traceparent: string;
  readonly keepsTracestate: boolean;
  #ended = false;

  constructor(span: Span, keepsTracestate: boolean) {
    this.#span = span;
    const context = span.spanContext();
    this.traceparent = formatTraceparent(context.traceId, context.spanId, (context.traceFlags & TraceFlags.SAMPLED) !== 0);
    this.keepsTracestate = keepsTracestate;
  }

  committed(status: number): void {
    if (this.#ended) return;
    this.#span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, status);
  }

  failed(kind: string, status: number | undefined): void {
    if (this.#ended) return;
    this.#ended = true;
    if (status !== undefined) this.#span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, status);
    this.#span.setAttribute(ATTR_ERROR_TYPE, kind);
    this.#span.setStatus({ code: SpanStatusCode.ERROR, message: kind });
    this.#span.end();
  }

  end(usage: FinishedRequest['usage'], errorType?: string): void {
    if (this.#ended) return;
    this.#ended = true;
    const span = this.#span;
    if (usage && span.isRecording()) {
      span.setAttribute(GEN_AI.inputTokens, usage.prompt);
      span.setAttribute(GEN_AI.outputTokens, usage.completion);
      if (usage.model) span.setAttribute(GEN_AI.responseModel, usage.model);
      if (usage.estimated) span.setAttribute('sluice.usage_estimated', true);
    }
    if (errorType) {
      span.setAttribute(ATTR_ERROR_TYPE, errorType);
      span.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
    }
    span.end();
  }
}

/** Host and port of an origin (the scheme's port when none is written). */
const originCache = new Map<string, { host: string; port: number } | undefined>();
function originParts(origin: string): { host: string; port: number } | undefined {
  if (originCache.has(origin)) return originCache.get(origin);
  let parts: { host: string; port: number } | undefined;
  try {
    const url = new URL(origin);
    parts = { host: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port) || (url.protocol === 'https:' ? 443 : 80) };
  } catch {
    parts = undefined;
  }
  if (originCache.size < 1000) originCache.set(origin, parts);
  return parts;
}
