// The mixed client load of the rolling-restart tests, sent through a balancer: short JSON requests
// and short SSE streams arriving at a steady rate on keep-alive connections (HTTP mode), clients
// that keep a few pooled connections busy through a layer-4 balancer (TCP mode, where a connection
// stays on the instance it was routed to until one side closes it), short WebSocket sessions, and
// optionally SSE streams and WebSocket sessions that last longer than the drain window. Every
// request and session is counted by kind as sent, ok or lost, with the first reasons kept.
import { Agent, request } from 'undici';
import { WebSocket } from 'ws';
import { mockHeader } from './mock-upstream.ts';

export type LoadKind = 'json' | 'json-l4' | 'sse' | 'sse-long' | 'ws' | 'ws-long';
export const LOAD_KINDS: readonly LoadKind[] = ['json', 'json-l4', 'sse', 'sse-long', 'ws', 'ws-long'];

export interface KindCount {
  sent: number;
  ok: number;
  lost: number;
  /** The first few reasons for losses. */
  reasons: string[];
}

export type LoadCounts = Record<LoadKind, KindCount>;

export interface MixedLoadOptions {
  /** HTTP-mode frontend, e.g. http://127.0.0.1:1234. */
  httpUrl: string;
  /** TCP-mode (layer 4) frontend to the same instances. */
  tcpUrl: string;
  /** Model names served by the gateways: a chat model and a realtime one. */
  model: string;
  realtimeModel: string;
  /** Arrivals per second of short requests on the HTTP frontend (every fifth is a short SSE stream). */
  httpRate?: number;
  /** Clients that each send back-to-back requests on their own pooled connection through the TCP frontend. */
  pinnedClients?: number;
  /** A short WebSocket session (two exchanges) is opened this often. */
  wsEveryMs?: number;
  /** With `longSecs`, a long SSE stream and a long WebSocket session are opened this often (until stopLong()). */
  longEveryMs?: number;
  /** How long the long streams and sessions last (0: none). */
  longSecs?: number;
}

export interface MixedLoad {
  readonly counts: LoadCounts;
  /** No new long streams or sessions from now on; those open carry on. */
  stopLong(): void;
  /** Stops sending, waits for everything in flight (long sessions included) and returns the counts. */
  stop(deadlineMs?: number): Promise<LoadCounts>;
}

const MAX_REASONS = 8;
/** A hard bound on requests of any one kind, whatever the timing. */
const MAX_PER_KIND = 50_000;

export function startMixedLoad(options: MixedLoadOptions): MixedLoad {
  const httpRate = options.httpRate ?? 40;
  const pinnedClients = options.pinnedClients ?? 8;
  const wsEveryMs = options.wsEveryMs ?? 500;
  const longEveryMs = options.longEveryMs ?? 1500;
  const longSecs = options.longSecs ?? 0;
  const counts = Object.fromEntries(LOAD_KINDS.map((k) => [k, { sent: 0, ok: 0, lost: 0, reasons: [] }])) as unknown as LoadCounts;
  const lose = (kind: LoadKind, reason: string) => {
    counts[kind].lost++;
    // One line, without markup: HAProxy's own error pages are HTML.
    const line = reason.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim();
    if (counts[kind].reasons.length < MAX_REASONS) counts[kind].reasons.push(line);
  };
  const pending = new Set<Promise<void>>();
  const track = (p: Promise<void>) => {
    pending.add(p);
    void p.finally(() => pending.delete(p));
  };
  // Keep-alive pools: idle connections are kept for a minute, so they are reused across the roll.
  const httpAgent = new Agent({ keepAliveTimeout: 60_000, keepAliveMaxTimeout: 60_000, connections: 64 });
  const tcpAgent = new Agent({ keepAliveTimeout: 60_000, keepAliveMaxTimeout: 60_000, connections: pinnedClients });
  let running = true;
  let long = longSecs > 0;
  let counter = 0;

  const chat = async (kind: LoadKind, agent: Agent, url: string, stream: boolean, scenario: Parameters<typeof mockHeader>[0]) => {
    if (counts[kind].sent >= MAX_PER_KIND) return;
    counts[kind].sent++;
    const n = counter++;
    const body = JSON.stringify({ model: options.model, stream, messages: [{ role: 'user', content: `req ${n}` }] });
    try {
      const res = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...mockHeader(scenario) },
        body,
        dispatcher: agent,
        // Long streams outlast undici's default body timeout only if their chunks keep coming.
        bodyTimeout: 20_000,
        headersTimeout: 20_000,
      });
      const text = await res.body.text();
      if (res.statusCode !== 200) lose(kind, `status ${res.statusCode}: ${text.slice(0, 160)}`);
      else if (stream && (!text.includes('data: [DONE]') || text.includes('event: error'))) lose(kind, `stream incomplete: …${text.slice(-120)}`);
      else counts[kind].ok++;
    } catch (error) {
      lose(kind, `error: ${(error as Error).message}`);
    }
  };

  // Short requests at a steady rate (an open loop: arrivals do not wait for answers, as with
  // independent users), so the number in flight on an instance rises and falls to zero.
  const httpTimer = setInterval(() => {
    if (!running) return;
    const n = counter;
    const stream = n % 5 === 0;
    const kind: LoadKind = stream ? 'sse' : 'json';
    track(chat(kind, httpAgent, options.httpUrl, stream, stream ? { chunks: 5, sseIntervalMs: 40 } : { headersDelayMs: 5 + ((n * 37) % 80) }));
  }, 1000 / httpRate);

  // Clients that keep their pooled connections busy (a closed loop per connection) through the
  // layer-4 frontend: only the server can move them, by closing the connection. Their requests take
  // 100-400 ms (a short completion), so an instance holding a few of them is never without one in
  // flight: the gaps between two requests of one client (the client's own turnaround) are short
  // beside them.
  const pinned = Array.from({ length: pinnedClients }, async (_, i) => {
    let n = i;
    while (running && counts['json-l4'].sent < MAX_PER_KIND) {
      const before = counts['json-l4'].lost;
      await chat('json-l4', tcpAgent, options.tcpUrl, false, { headersDelayMs: 100 + ((n++ * 53) % 300) });
      // A failing client must not spin.
      if (counts['json-l4'].lost > before) await sleep(20);
    }
  });

  const wsUrl = `${options.httpUrl.replace('http:', 'ws:')}/v1/realtime?model=${encodeURIComponent(options.realtimeModel)}`;
  const wsTimer = setInterval(() => {
    if (running) track(session('ws', 2, 200));
  }, wsEveryMs);
  const longTimer = setInterval(() => {
    if (!running || !long) return;
    // One update a second: the stream never looks stalled to anyone's idle timeout.
    track(chat('sse-long', httpAgent, options.httpUrl, true, { chunks: longSecs, sseIntervalMs: 1000 }));
    track(session('ws-long', longSecs, 1000));
  }, longEveryMs);

  /** A session that sends `exchanges` requests `gapMs` apart, expects each answered, then closes with 1000. */
  async function session(kind: LoadKind, exchanges: number, gapMs: number): Promise<void> {
    if (counts[kind].sent >= MAX_PER_KIND) return;
    counts[kind].sent++;
    const ws = new WebSocket(wsUrl);
    let done = 0;
    let failure: string | undefined;
    const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    ws.on('error', (error) => (failure ??= `error: ${error.message}`));
    ws.on('unexpected-response', (_req, res) => {
      failure ??= `handshake status ${res.statusCode}`;
      res.resume();
      ws.terminate();
    });
    ws.on('message', (data) => {
      try {
        if ((JSON.parse(data.toString()) as { type?: string }).type === 'response.done') done++;
      } catch {
        failure ??= 'unparsable message';
      }
    });
    const opened = await Promise.race([new Promise<boolean>((resolve) => ws.once('open', () => resolve(true))), closed.then(() => false)]);
    if (!opened) {
      const { code } = await closed;
      return lose(kind, failure ?? `closed before open (${code})`);
    }
    let closedEarly: { code: number } | undefined;
    void closed.then((c) => (closedEarly = c));
    for (let i = 0; i < exchanges && !closedEarly; i++) {
      ws.send(JSON.stringify({ type: 'response.create' }));
      await sleep(gapMs);
    }
    // Every request answered before the client closes.
    const answeredBy = Date.now() + 5000;
    while (done < exchanges && !closedEarly && Date.now() < answeredBy) await sleep(20);
    if (closedEarly) return lose(kind, `closed by the server side with ${closedEarly.code} after ${done}/${exchanges} answers${failure ? ` (${failure})` : ''}`);
    ws.close(1000, 'client done');
    const end = await within(closed, 5000);
    if (!end) {
      ws.terminate();
      return lose(kind, 'no close frame within 5 s of the client closing');
    }
    // The server echoes the client's close frame: 1000. A reset shows as 1006.
    if (end.code !== 1000) return lose(kind, `close code ${end.code} after the client closed, ${done}/${exchanges} answers`);
    if (done < exchanges) return lose(kind, `${done}/${exchanges} answers`);
    counts[kind].ok++;
  }

  return {
    counts,
    stopLong() {
      long = false;
    },
    async stop(deadlineMs = 60_000) {
      running = false;
      long = false;
      clearInterval(httpTimer);
      clearInterval(wsTimer);
      clearInterval(longTimer);
      const finished = await within(Promise.all([...pinned, ...pending]).then(() => true), deadlineMs);
      if (!finished) throw new Error(`the load did not finish within ${deadlineMs} ms of being stopped`);
      await Promise.all([httpAgent.close(), tcpAgent.close()]);
      return counts;
    },
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves with `promise`'s value, or with undefined after `ms`; the timer never outlives it. */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let wake = () => {};
  const timer = setTimeout(() => wake(), ms);
  try {
    return await Promise.race([promise, new Promise<undefined>((resolve) => (wake = () => resolve(undefined)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** One line per kind: sent / ok / lost, for the run's table. */
export function formatCounts(counts: LoadCounts): string[] {
  return LOAD_KINDS.filter((k) => counts[k].sent > 0).map((k) => `${k.padEnd(9)} sent ${String(counts[k].sent).padStart(6)}  ok ${String(counts[k].ok).padStart(6)}  lost ${String(counts[k].lost).padStart(5)}`);
}

export function totalLost(counts: LoadCounts): number {
  return LOAD_KINDS.reduce((sum, k) => sum + counts[k].lost, 0);
}
