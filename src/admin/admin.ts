// Routes of an admin listener: metrics now; drain controls and server info later (E4).
import type { RouteTable } from '../server/requests.ts';
import type { RequestContext } from '../server/context.ts';
import type { Metrics } from '../telemetry/metrics.ts';
import type { DrainDecision } from '../lifecycle/lifecycle.ts';
import { sendError } from '../server/respond.ts';
import { errors } from '../gateway/errors.ts';
import { writeHead } from '../server/respond.ts';

export class AdminRoutes implements RouteTable {
  readonly #metrics: Metrics;
  readonly #decision: DrainDecision;

  constructor(metrics: Metrics, decision: DrainDecision) {
    this.#metrics = metrics;
    this.#decision = decision;
  }

  endpointOf(path: string): string | undefined {
    return path === '/metrics' ? 'metrics' : undefined;
  }

  handle(ctx: RequestContext, path: string): void {
    if (path !== '/metrics') return sendError(ctx, this.#decision, errors.notFound(path));
    if (ctx.req.method !== 'GET') return sendError(ctx, this.#decision, errors.methodNotAllowed(ctx.req.method ?? '', path, 'GET'));
    this.#metrics.render().then(
      (text) => {
        if (ctx.res.destroyed) return;
        writeHead(ctx, this.#decision, 200, { 'content-type': this.#metrics.registry.contentType, 'content-length': Buffer.byteLength(text) });
        ctx.res.end(text);
      },
      () => sendError(ctx, this.#decision, errors.internal()),
    );
  }
}
