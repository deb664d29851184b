// The drain as traces: the lifecycle's log lines (`drain_started`, `drain_forced`, `process_exit`...)
// passed on unchanged, and also recorded as events on the drain's own span and on every request
// span still open. Telemetry never stops a drain: a failure here is logged, not thrown.
import { SpanKind, SpanStatusCode, type Attributes, type Span, type Tracer } from '@opentelemetry/api';
import type { LifecycleLog } from '../lifecycle/contracts.ts';
import type { Logger } from './logger.ts';
import type { OpenRequestSpans } from './otel-request-spans.ts';
import { DRAIN_SPAN } from './otel-export.ts';

export class DrainSpans {
  readonly #tracer: Tracer;
  readonly #open: OpenRequestSpans;
  readonly #logger: Logger;
  #drain: Span | undefined;
  /** A force that came before the drain it forces (a second signal first): its event, for the drain span once it starts. */
  #forcedFirst: Attributes | undefined;
  #windowTimer: NodeJS.Timeout | undefined;

  constructor(tracer: Tracer, open: OpenRequestSpans, logger: Logger) {
    this.#tracer = tracer;
    this.#open = open;
    this.#logger = logger;
  }

  /** A drain has started (a request arriving now is marked so). */
  get draining(): boolean {
    return this.#drain !== undefined;
  }

  /** `log`, whose drain lines also become span events. */
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

  /** The exit: the drain's span ends, if it has not. */
  end(): void {
    if (this.#drain?.isRecording()) this.#drain.end();
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
        for (const request of this.#open.list()) request.span.addEvent('sluice.drain.started', { ...started, 'sluice.drain.trace_id': drainTrace });
        const windowOver = () => {
          this.#windowTimer = undefined;
          this.#drain?.addEvent('sluice.drain.window_over', { 'sluice.in_flight': this.#open.count });
          for (const request of this.#open.list()) request.span.addEvent('sluice.drain.window_over');
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
        for (const request of this.#open.list()) request.span.addEvent('sluice.drain.forced', forced);
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
}
