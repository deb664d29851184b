// Reads a request body up to the configured limit.
import type { IncomingMessage } from 'node:http';
import { errors, type GatewayError } from '../api/errors.ts';
import { systemClock, type Clock } from '../lifecycle/clock.ts';

/** How much of an unwanted body is read and thrown away before the connection is cut. */
const DISCARD_LIMIT_BYTES = 64 * 1024 * 1024;
const DISCARD_TIMEOUT_MS = 10_000;

/**
 * Reads and drops the rest of a body we answered early (413, 401), like nginx's lingering close:
 * closing at once would reset a client still uploading, and it would never see our answer.
 * Bounded in bytes and time (on `clock`); past either, the connection is cut.
 */
export function discardRest(req: IncomingMessage, clock: Clock = systemClock): void {
  if (req.complete || req.destroyed) return;
  let discarded = 0;
  const timer = clock.after(DISCARD_TIMEOUT_MS, () => req.socket?.destroy());
  req.on('data', (chunk: Buffer) => {
    discarded += chunk.length;
    if (discarded > DISCARD_LIMIT_BYTES) req.socket?.destroy();
  });
  req.once('end', () => timer.cancel());
  req.once('close', () => timer.cancel());
  req.resume();
}

export type BodyResult = { ok: true; body: Buffer } | { ok: false; error: GatewayError | undefined };

/**
 * Resolves with the whole body, or with an error: 413 past the limit (the rest is not read), or
 * `undefined` when the client went away first. `clock`: the time the rest of a body too large is
 * discarded within.
 */
export function readBody(req: IncomingMessage, limit: number, clock: Clock = systemClock): Promise<BodyResult> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) {
    discardRest(req, clock);
    return Promise.resolve({ ok: false, error: errors.bodyTooLarge(limit) });
  }
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        discardRest(req, clock);
        resolve({ ok: false, error: errors.bodyTooLarge(limit) });
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve({ ok: true, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) });
    };
    const onGone = () => {
      cleanup();
      resolve({ ok: false, error: undefined });
    };
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onGone);
      req.off('close', onClose);
    };
    const onClose = () => {
      if (!req.complete) onGone();
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onGone);
    req.on('close', onClose);
  });
}
