// A usage-ledger record as the gateway makes one for a plain chat request (about 640 bytes of
// JSON), with the gateway's own request ids: what bench/ledger-path.ts and bench/ledger-floor.ts
// feed the ledger's parts.
import { randomUUID } from 'node:crypto';
import { join, resolve } from 'node:path';
import type { LedgerRecord } from '../src/ledger/record.ts';

const ROOT = resolve(import.meta.dirname, '..');

/** The gateway's request ids (`v7`, src/server/request-id.ts, from the build), or random ones (`v4`). */
export async function idMaker(ids: 'v7' | 'v4'): Promise<(nowMs: number) => string> {
  if (ids === 'v4') return () => randomUUID();
  const { requestId } = (await import(join(ROOT, 'dist/server/request-id.js'))) as typeof import('../src/server/request-id.ts');
  return requestId;
}

/** The record of a plain chat request that ended at `now`. */
export function sampleRecord(newId: (nowMs: number) => string, now: number): LedgerRecord {
  return {
    id: newId(now),
    kind: 'request',
    started_at: now - 1,
    first_byte_ms: 0,
    ended_at: now,
    key: 'k1',
    team: '',
    user: 'alice',
    metadata: null,
    tags: ['bench'],
    api: 'openai',
    endpoint: 'chat',
    model: 'echo',
    route: 'echo',
    provider: 'echo',
    served_model: 'echo',
    attempts: [{ target: 'echo/echo', outcome: 'success', status: 200, ms: 0 }],
    status: 200,
    error: '',
    prompt_tokens: 12,
    completion_tokens: 9,
    cached_tokens: 0,
    cache_write_tokens: 0,
    usage_estimated: false,
    cost_micros: null,
    bytes_in: 93,
    bytes_out: 400,
    listener: 'proxy',
    worker: 0,
    generation: 0,
  };
}
