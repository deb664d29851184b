// What a drain is waiting for, in numbers and in plain words (O1): the `waiting_for` field of the
// drain lines and of GET /server_info, and the message a person reads. Pure.

export interface WaitingFor {
  /** Seconds until the window (`min_drain_secs`) is over; 0 once it is. */
  window_secs_left: number;
  /** In flight and not a stream or a session: plain requests (and health probes being answered). */
  requests: number;
  /** Streamed (SSE) responses in flight. */
  streams: number;
  /** WebSocket sessions (and upgrade handshakes) in flight. */
  sessions: number;
  /** Worker processes still running (a supervisor's drain waits for them). */
  workers: number;
}

function count(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** Sums the processes' numbers; the window is the supervisor's own. */
export function sumWaitingFor(own: WaitingFor, others: readonly WaitingFor[]): WaitingFor {
  const sum = { ...own };
  for (const w of others) {
    sum.requests += w.requests;
    sum.streams += w.streams;
    sum.sessions += w.sessions;
  }
  return sum;
}

/** E.g. "window over; waiting for 0 requests, 1 stream, 0 sessions". */
export function describeWaiting(w: WaitingFor): string {
  const work = `${count(w.requests, 'request', 'requests')}, ${count(w.streams, 'stream', 'streams')}, ${count(w.sessions, 'session', 'sessions')}`;
  const busy = w.requests + w.streams + w.sessions > 0;
  if (w.window_secs_left > 0) {
    return `window open ${w.window_secs_left} s more (still accepting, for the load balancer); in flight: ${work}`;
  }
  if (busy) return `window over; waiting for ${work}`;
  if (w.workers > 0) return `window over; nothing in flight; waiting for ${count(w.workers, 'worker', 'workers')} to exit`;
  return 'window over; nothing in flight';
}
