// A finished exchange as the usage ledger records it: read from its context once it is over, off
// the request's path (the spool's append is the only work, and it waits for nothing). Its bodies,
// when `ledger.bodies` kept them, are redacted and cut here, before the record goes anywhere.
import { storableCount, storableText, type LedgerAttempt, type LedgerBodies, type LedgerRecord } from '../ledger/record.ts';
import { ledgerBodies, Redaction } from '../ledger/redact.ts';
import { RequestContext, type ExchangeContext, type KeptBodies } from '../server/context.ts';
import type { LedgerBodiesConfig } from '../config/ledger-schema.ts';

/** At most this many tags of `x-sluice-tags`, each cut to this many characters. */
const MAX_TAGS = 16;
const TAG_MAX = 64;

/** Where this process stands in its group: the worker slot (0: one process) and the hot-restart generation (0: none). */
export interface ProcessPlace {
  readonly worker: number;
  readonly generation: number;
}

/** The exchange's record. `nowMs`: the wall clock at its end; `sinceStartNs`: its duration on hrtime. */
export function ledgerRecord(ctx: ExchangeContext, status: number, place: ProcessPlace, nowMs: number): LedgerRecord {
  const durationMs = Number(process.hrtime.bigint() - ctx.startedAt) / 1e6;
  const request = ctx instanceof RequestContext ? ctx : undefined;
  const usage = ctx.usage;
  const key = ctx.key;
  const provider = ctx.provider;
  const firstByteMs = request !== undefined && request.headAt !== 0n ? Number(request.headAt - ctx.startedAt) / 1e6 : null;
  return {
    id: ctx.id,
    kind: request === undefined ? 'realtime' : 'request',
    started_at: Math.round(nowMs - durationMs),
    // Whole milliseconds, as the stores keep it (a fraction also costs its digits in every record's JSON).
    first_byte_ms: firstByteMs === null ? null : Math.round(firstByteMs),
    ended_at: nowMs,
    key: ctx.keyName,
    team: key.team?.name ?? '',
    user: clean(ctx.user),
    metadata: key.metadata === undefined ? null : metadataOf(key.metadata),
    tags: tagsOf(ctx.req.headers['x-sluice-tags']),
    api: request?.dialect ?? 'openai',
    endpoint: ctx.endpoint,
    model: capped(ctx.model),
    route: ctx.modelEntry,
    // A request refused before any attempt (a limit, a budget) was served by no provider.
    provider: ctx.attempts === 0 ? '' : provider,
    served_model: capped(ctx.upstreamModel),
    attempts: attemptsOf(ctx, status, firstByteMs),
    status,
    error: ctx.errorCode,
    // Whole, as both stores keep them: a provider's fraction or huge count would make PostgreSQL's
    // server refuse the batch's fast read, and the gateway parse the batch itself.
    prompt_tokens: storableCount(usage?.prompt ?? 0),
    completion_tokens: storableCount(usage?.completion ?? 0),
    cached_tokens: storableCount(usage?.cached ?? 0),
    cache_write_tokens: storableCount(usage?.cacheWrite ?? 0),
    usage_estimated: usage?.estimated === true,
    cost_micros: ctx.costMicros === undefined ? null : Math.round(ctx.costMicros),
    bytes_in: ctx.bytesIn,
    bytes_out: ctx.bytesOut,
    listener: ctx.listener,
    worker: place.worker,
    generation: place.generation,
    ...(request?.bodies !== undefined ? { bodies: bodiesOf(request.bodies) } : {}),
  };
}

/** The redaction of each `ledger.bodies` seen (a config, frozen: one per load), its patterns compiled once. */
const redactions = new WeakMap<LedgerBodiesConfig, Redaction>();

/** The bodies kept, redacted and cut to `max_bytes`. */
function bodiesOf(kept: KeptBodies): LedgerBodies {
  const settings = kept.settings;
  let redaction = redactions.get(settings);
  if (redaction === undefined) {
    redaction = new Redaction(settings.redact.map((p) => (typeof p === 'string' ? { pattern: p } : p)));
    redactions.set(settings, redaction);
  }
  return ledgerBodies(kept.request, kept.response, redaction, settings.max_bytes);
}

/** Every attempt; a request that needed one has no attempt log (it costs nothing then): its one attempt is said from the rest. */
function attemptsOf(ctx: ExchangeContext, status: number, firstByteMs: number | null): LedgerAttempt[] {
  if (ctx.attemptLog !== undefined) return ctx.attemptLog.map((a) => ({ ...a, target: capped(a.target) }));
  if (ctx.attempts === 0 || ctx.provider === '') return [];
  const ok = status < 400 || status === 101;
  return [{ target: capped(`${ctx.provider}/${ctx.servedModel || ctx.upstreamModel}`), outcome: ok ? 'success' : ctx.errorCode || 'error', status, ms: Math.round(firstByteMs ?? 0) }];
}

/** A client's model name is kept to this many characters (as its usage's labels are). */
const MODEL_MAX = 256;

/** Text any store holds as JSON (PostgreSQL's jsonb refuses a NUL or a lone surrogate, and the batch with it). */
const clean = storableText;

/** A client's model name, cut and cleaned. */
function capped(value: string): string {
  return clean(value.length > MODEL_MAX ? value.slice(0, MODEL_MAX) : value);
}

function metadataOf(metadata: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(metadata)) out[clean(k)] = clean(v);
  return out;
}

/** `x-sluice-tags: a, b,c`: the tags, trimmed, empty ones left out, bounded. */
export function tagsOf(header: string | string[] | undefined): string[] {
  if (header === undefined) return [];
  // The usual header: one tag, nothing to trim or cut.
  if (typeof header === 'string' && header.length <= TAG_MAX && header !== '' && !header.includes(',') && header.trim() === header) return [clean(header)];
  const text = Array.isArray(header) ? header.join(',') : header;
  const tags: string[] = [];
  for (const part of text.split(',')) {
    const tag = part.trim();
    if (tag === '') continue;
    tags.push(clean(tag.length > TAG_MAX ? tag.slice(0, TAG_MAX) : tag));
    if (tags.length === MAX_TAGS) break;
  }
  return tags;
}
