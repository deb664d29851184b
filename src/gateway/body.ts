// Reads a request body up to the configured limit.
import type { IncomingMessage } from 'node:http';
import { errors, type GatewayError } from './errors.ts';

export type BodyResult = { ok: true; body: Buffer } | { ok: false; error: GatewayError | undefined };

/**
 * Resolves with the whole body, or with an error: 413 past the limit (the rest is not read), or
 * `undefined` when the client went away first.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<BodyResult> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) return Promise.resolve({ ok: false, error: errors.bodyTooLarge(limit) });
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        req.pause();
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
