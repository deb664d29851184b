// The spans of the proxy's requests (SERVER) and of their upstream attempts (CLIENT), with the GenAI
// semantic conventions' attributes; and the list of request spans still open, which the drain's
// events go to and which a forced exit ends.
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags, trace, type Attributes, type Span, type Tracer } from '@opentelemetry/api';
import { ATTR_ERROR_TYPE, ATTR_HTTP_RESPONSE_STATUS_CODE, ATTR_SERVER_ADDRESS, ATTR_SERVER_PORT } from '@opentelemetry/semantic-conventions';
import type { FinishedRequest } from './access-log.ts';
import type { AttemptStart, AttemptTrace, RequestTrace } from './tracing.ts';
import { formatTraceparent } from './trace-context.ts';

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

/** What a client sends (a path, a model name) is cut to this length in span names and attributes. */
export const MAX_TEXT = 256;
export const short = (text: string): string => (text.length > MAX_TEXT ? text.slice(0, MAX_TEXT) : text);

/** A number the client sent, if it is one. */
function numberIn(body: Record<string, unknown>, ...names: string[]): number | undefined {
  for (const name of names) {
    const value = body[name];
    if (typeof value === 'number' && Number.isFinite(value)) return value;
  }
  return undefined;
}

/**
 * The request spans still open (recording ones), and the tracer their attempts' spans come from. A
 * list threaded through the traces themselves, not a Set: an entry added and deleted per request
 * made a Set keep young garbage alive in every scavenge (see TrackedList in lifecycle.ts).
 */
export class OpenRequestSpans {
  readonly tracer: Tracer;
  #head: OtelRequestTrace | undefined;
  #count = 0;

  constructor(tracer: Tracer) {
    this.tracer = tracer;
  }

  /** How many are open. */
  get count(): number {
    return this.#count;
  }

  add(request: OtelRequestTrace): void {
    request.next = this.#head;
    if (this.#head) this.#head.prev = request;
    this.#head = request;
    request.linked = true;
    this.#count++;
  }

  /** A request span ended. */
  closed(request: OtelRequestTrace): void {
    if (!request.linked) return;
    request.linked = false;
    if (request.prev) request.prev.next = request.next;
    else this.#head = request.next;
    if (request.next) request.next.prev = request.prev;
    request.prev = request.next = undefined;
    this.#count--;
  }

  /** The request spans still open, a copy (ending one while iterating is safe). */
  list(): OtelRequestTrace[] {
    const open: OtelRequestTrace[] = [];
    for (let r = this.#head; r; r = r.next) open.push(r);
    return open;
  }
}

export class OtelRequestTrace implements RequestTrace {
  /** Its place in the list of open request spans. */
  prev: OtelRequestTrace | undefined;
  next: OtelRequestTrace | undefined;
  linked = false;
  readonly #open: OpenRequestSpans;
  readonly span: Span;
  readonly #operation: string | undefined;
  readonly #keepsTracestate: boolean;
  /** The API type of the last attempt's provider (`gen_ai.provider.name`). */
  #providerType: string | undefined;
  #ended = false;

  constructor(open: OpenRequestSpans, span: Span, operation: string | undefined, keepsTracestate: boolean) {
    this.#open = open;
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
    const span = this.#open.tracer.startSpan(`${operation} ${short(attempt.model)}`, { kind: SpanKind.CLIENT, attributes }, trace.setSpan(ROOT_CONTEXT, this.span));
    return new OtelAttemptTrace(span, this.#keepsTracestate);
  }

  end(f: FinishedRequest): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#open.closed(this);
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
    this.#open.closed(this);
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
