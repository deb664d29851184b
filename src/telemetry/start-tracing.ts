// The loader of the tracer: the OpenTelemetry SDK side (`otel-tracing.ts`) is imported only when
// tracing is on. Apart from `tracing.ts` (the interfaces), so that the SDK side imports those and
// nothing imports it back.
import type { TracingConfig } from '../config/schema.ts';
import type { Logger } from './logger.ts';
import { tracingTarget, type Tracing } from './tracing.ts';

/**
 * The process's tracer: undefined when tracing is off, and then the SDK is never loaded. Only a
 * process that serves requests traces (one process, or each worker with its own exporter; a
 * supervisor serves none).
 */
export async function startTracing(config: TracingConfig, logger: Logger, version: string): Promise<Tracing | undefined> {
  if (!config.enabled) return undefined;
  const { OtelTracing } = await import('./otel-tracing.ts');
  return new OtelTracing(config, tracingTarget(config, process.env), logger, version);
}
