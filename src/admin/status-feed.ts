// GET /status/events: the status page's and `sluice status`'s server-sent events. One tick builds
// one snapshot for every watcher (none while nobody watches); a watcher that does not read misses
// ticks rather than have them buffered. A watcher is not in flight (requests.ts, `watches`): no
// drain waits for it, and the exit ends it with a last `exited` event.
import type { ServerResponse } from 'node:http';
import type { RequestContext } from '../server/context.ts';
import type { DrainDecision } from '../lifecycle/contracts.ts';
import { sendError, writeHead } from '../server/respond.ts';
import { GatewayError } from '../api/errors.ts';
import { exitBoundMs } from '../lifecycle/exit-steps.ts';

export interface StatusFeedOptions {
  /** The next tick's data (`event: status`). */
  snapshot(): Promise<object>;
  /** The last event's data (`event: exited`): `forced` is the reason of a forced drain (L8). */
  exited(forced: string | undefined): object;
  /** Milliseconds to the next tick (shorter during a drain). */
  intervalMs(): number;
  /** At most this many watchers at once; more get a 429. */
  maxWatchers: number;
  /** A snapshot that failed (a bug): logged, the tick skipped. */
  failed(error: unknown): void;
}

interface Watcher {
  readonly res: ServerResponse;
  /** The last write did not fit in the socket's buffer: ticks are skipped until it drains. */
  behind: boolean;
}

/** How long the exit waits for the `exited` events to be written (its step of lifecycle/exit-steps.ts). */
export const EXIT_FLUSH_MS = exitBoundMs('status_page');

export class StatusFeed {
  readonly #options: StatusFeedOptions;
  readonly #watchers = new Set<Watcher>();
  #timer: NodeJS.Timeout | undefined;
  #ticking = false;
  #closed = false;
  /** Ticks a watcher missed because it did not read (for tests and the curious: /status/events says nothing of it). */
  skipped = 0;

  constructor(options: StatusFeedOptions) {
    this.#options = options;
  }

  get watchers(): number {
    return this.#watchers.size;
  }

  /** Serves one watcher of GET /status/events (its admin token already checked). */
  serve(ctx: RequestContext, decision: DrainDecision): void {
    const res = ctx.res;
    if (!this.#closed && this.#watchers.size >= this.#options.maxWatchers) {
      return sendError(ctx, decision, new GatewayError(429, 'rate_limit_error', 'too_many_watchers', `at most ${this.#options.maxWatchers} status watchers at once; close one and retry`, { 'retry-after': '5' }));
    }
    writeHead(ctx, decision, 200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
      // Proxies in front must not hold the events back.
      'x-accel-buffering': 'no',
    });
    if (this.#closed) {
      res.end(frame('exited', this.#options.exited(undefined)));
      return;
    }
    const watcher: Watcher = { res, behind: false };
    this.#watchers.add(watcher);
    res.on('error', () => res.destroy());
    res.once('close', () => {
      this.#watchers.delete(watcher);
      if (this.#watchers.size === 0) this.#stop();
    });
    // L8: a forced drain ends the stream with its last event before the connection goes.
    ctx.forceEnder = { forceEnd: (reason) => this.#end(watcher, this.#options.exited(reason)) };
    res.write(': sluice status\n\n');
    // The first tick at once, then one every interval while anyone watches.
    if (this.#timer === undefined) void this.#tick();
  }

  /** The exit: every watcher gets `exited` and its stream ends; resolves once written (at most EXIT_FLUSH_MS). */
  async close(forced: string | undefined): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#stop();
    const data = this.#options.exited(forced);
    const ended = [...this.#watchers].map((w) => this.#end(w, data));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(ended), new Promise<void>((resolve) => (timer = setTimeout(resolve, EXIT_FLUSH_MS)))]);
    clearTimeout(timer);
    for (const w of this.#watchers) w.res.destroy();
  }

  /** Writes the last event and ends the stream; resolves once it is written or the client is gone. */
  #end(watcher: Watcher, data: object): Promise<void> {
    const res = watcher.res;
    this.#watchers.delete(watcher);
    if (this.#watchers.size === 0) this.#stop();
    if (res.writableEnded || res.destroyed) return Promise.resolve();
    return new Promise((resolve) => {
      res.once('close', resolve);
      res.end(frame('exited', data), resolve);
    });
  }

  #stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  async #tick(): Promise<void> {
    this.#stop();
    if (this.#ticking || this.#closed || this.#watchers.size === 0) return;
    this.#ticking = true;
    try {
      const text = frame('status', await this.#options.snapshot());
      for (const w of this.#watchers) {
        if (w.behind) {
          this.skipped++;
          continue;
        }
        if (w.res.writableEnded || w.res.destroyed) continue;
        // Full: skip ticks until the socket drains (each tick is whole, so nothing is lost but time).
        if (!w.res.write(text)) {
          w.behind = true;
          w.res.once('drain', () => (w.behind = false));
        }
      }
    } catch (error) {
      this.#options.failed(error);
    } finally {
      this.#ticking = false;
    }
    if (!this.#closed && this.#watchers.size > 0) {
      this.#timer = setTimeout(() => void this.#tick(), this.#options.intervalMs());
      this.#timer.unref();
    }
  }
}

function frame(event: string, data: object): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}
