// Client API keys, held only as SHA-256 digests. A presented key is hashed and looked up; the
// match is confirmed with a constant-time comparison of the digests.
import { hash, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { Config } from '../config/schema.ts';

export type AuthResult = { ok: true; keyName: string } | { ok: false; reason: 'missing' | 'invalid' };

const OPEN: AuthResult = { ok: true, keyName: '' };

export class ClientKeys {
  readonly #digests = new Map<string, { digest: Buffer; name: string }>();

  constructor(keys: Config['keys']) {
    keys.forEach((entry, index) => {
      const name = typeof entry === 'string' ? `key-${index}` : entry.name;
      // A key given only as its digest (as the admin API stores them) is looked up the same way.
      const digest = typeof entry === 'string' ? sha256(entry) : 'key_sha256' in entry ? entry.key_sha256 : sha256(entry.key);
      this.#digests.set(digest, { digest: Buffer.from(digest, 'base64'), name });
    });
  }

  get enabled(): boolean {
    return this.#digests.size > 0;
  }

  check(headers: IncomingHttpHeaders): AuthResult {
    if (this.#digests.size === 0) return OPEN;
    const presented = presentedKey(headers);
    if (presented === undefined) return { ok: false, reason: 'missing' };
    const digest = sha256(presented);
    const found = this.#digests.get(digest);
    if (!found || !timingSafeEqual(found.digest, Buffer.from(digest, 'base64'))) return { ok: false, reason: 'invalid' };
    return { ok: true, keyName: found.name };
  }
}

/** `Authorization: Bearer <key>` or `x-api-key: <key>` (the Anthropic SDK's header). */
export function presentedKey(headers: IncomingHttpHeaders): string | undefined {
  const authorization = headers.authorization;
  if (authorization !== undefined) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    return match ? match[1] : '';
  }
  const apiKey = headers['x-api-key'];
  return typeof apiKey === 'string' ? apiKey : undefined;
}

/** The SHA-256 digest of `text`'s UTF-8 bytes, in base64 (one-shot: no Hash object per request): a key's `key_sha256`. */
export function sha256(text: string): string {
  return hash('sha256', text, 'base64');
}
