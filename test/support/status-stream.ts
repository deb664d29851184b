// A watcher of GET /status/events for tests: collects the events as they come, and tells when the
// stream ended.
import { request, type IncomingMessage } from 'node:http';
import { eventually } from './gateway-process.ts';

export interface StatusEvent {
  name: string;
  data: Record<string, any>;
}

export interface StatusWatcher {
  readonly status: number;
  readonly headers: IncomingMessage['headers'];
  /** The answer's body when it was not a stream (an error). */
  readonly body: () => string;
  readonly events: StatusEvent[];
  /** Resolves with the first event (from now on or already received) that `predicate` accepts. */
  waitFor(predicate: (e: StatusEvent) => boolean, timeoutMs?: number, what?: string): Promise<StatusEvent>;
  /** Resolves when the server ended the stream (or the connection closed). */
  readonly ended: Promise<number>;
  close(): void;
}

export function watchStatus(adminUrl: string, headers: Record<string, string> = {}, path = '/status/events'): Promise<StatusWatcher> {
  return new Promise((resolve, reject) => {
    const req = request(`${adminUrl}${path}`, { headers });
    req.once('error', reject);
    req.once('response', (res: IncomingMessage) => {
      const events: StatusEvent[] = [];
      let buffer = '';
      let raw = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        raw += chunk;
        buffer += chunk;
        let end;
        while ((end = buffer.indexOf('\n\n')) !== -1) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let name = 'message';
          const data: string[] = [];
          for (const line of block.split('\n')) {
            if (line.startsWith('event: ')) name = line.slice(7);
            else if (line.startsWith('data: ')) data.push(line.slice(6));
          }
          if (data.length) events.push({ name, data: JSON.parse(data.join('\n')) });
        }
      });
      res.on('error', () => {});
      const ended = new Promise<number>((done) => res.once('close', () => done(Date.now())));
      resolve({
        status: res.statusCode ?? 0,
        headers: res.headers,
        body: () => raw,
        events,
        waitFor: (predicate, timeoutMs = 10_000, what = 'a status event') => eventually(() => events.find(predicate), timeoutMs, what) as Promise<StatusEvent>,
        ended,
        close: () => req.destroy(),
      });
    });
    req.end();
  });
}
