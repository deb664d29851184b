// A client that reads a streamed answer (SSE) with fetch: to its end, or until a mark appears in
// what it has read, where it leaves (aborts its request): the client of a metering dodge, or of a
// stream whose rest it does not want.
import { setTimeout as delay } from 'node:timers/promises';

export interface StreamRead {
  status: number;
  headers: Headers;
  /** Everything read (up to the mark, when the client left there). */
  text: string;
  /** The client left at its mark (false: it read to the end). */
  left: boolean;
}

/**
 * POSTs `body` and reads the answer; with `leaveAt`, aborts as soon as what was read matches it
 * (and fails if the answer ends before). Resolves once the body ended or the request was aborted.
 */
export async function readStream(url: string, body: unknown, headers: Record<string, string>, leaveAt?: RegExp): Promise<StreamRead> {
  const controller = new AbortController();
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body), signal: controller.signal });
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  for (;;) {
    let chunk: ReadableStreamReadResult<Uint8Array>;
    try {
      chunk = await reader.read();
    } catch (error) {
      if (leaveAt === undefined) throw error;
      throw new Error(`the answer broke before the client's mark ${String(leaveAt)}: ${String(error)}; read: ${text.slice(-500)}`);
    }
    if (chunk.done) break;
    text += decoder.decode(chunk.value, { stream: true });
    if (leaveAt !== undefined && leaveAt.test(text)) {
      controller.abort();
      // Let the abort reach the socket before the caller goes on.
      await delay(5);
      return { status: res.status, headers: res.headers, text, left: true };
    }
  }
  if (leaveAt !== undefined) throw new Error(`the answer ended before the client's mark ${String(leaveAt)}: ${text.slice(-500)}`);
  return { status: res.status, headers: res.headers, text, left: false };
}
