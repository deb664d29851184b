// One JSON line per finished request, plus the request counters and duration histogram.
import type { Logger } from 'pino';
import { writeInfo } from './logger.ts';
import type { Metrics } from './metrics.ts';
import { capClientFields, needsCare } from './log-cap.ts';

/** The fields of an access line that a client chose: each cut to a bounded length, its raw control characters escaped (log-cap.ts). */
const CLIENT_FIELDS = ['method', 'path', 'model', 'downstream_request_id'] as const;

/** One upstream attempt, as the access line lists it when a request made more than one. */
export interface AttemptRecord {
  /** `provider/model`: the target, as `sluice_upstream_attempts_total` labels it. */
  readonly target: string;
  /** `success` (the answer committed to the client), a failure class, or `cancelled` (the client left, the drain was forced). */
  readonly outcome: string;
  /** The upstream's HTTP status, when it answered with one. */
  readonly status?: number | undefined;
  /** From the attempt's start to its failure, or to its commit (a stream's first content). */
  readonly ms: number;
}

export interface FinishedRequest {
  id: string;
  downstreamRequestId: string | undefined;
  peer: string;
  method: string;
  path: string;
  status: number;
  durationSeconds: number;
  endpoint: string;
  model: string;
  /** The configured entry the model matched ('' when it matched none): the metrics label. */
  modelEntry: string;
  provider: string;
  /** The target's configured model that served (a metrics label beside the route's `modelEntry`); '' when none. */
  servedModel?: string;
  listener: string;
  protocol: string;
  errorCode: string;
  /** Tokens, and the model the provider says answered (for traces). */
  usage: { prompt: number; completion: number; cached?: number; model?: string; estimated?: boolean } | undefined;
  /** Upstream attempts (retries and fallbacks included). */
  attempts?: number;
  /** Each of them, when more than one was made: the access line's `attempts`. */
  attemptLog?: readonly AttemptRecord[] | undefined;
  /** The client key's name ('' when no key was presented or none is configured): never the key. */
  keyName?: string;
  /** What the request cost (usage × price), micro-dollars; undefined when its model has no price. */
  costMicros?: number | undefined;
}

export class AccessLog {
  #logger: Logger | undefined;
  readonly #metrics: Metrics;

  constructor(logger: Logger | undefined, metrics: Metrics) {
    this.#logger = logger;
    this.#metrics = metrics;
  }

  /** A reload may switch the access log on or off. */
  setLogger(logger: Logger | undefined): void {
    this.#logger = logger;
  }

  record(r: FinishedRequest): void {
    const m = this.#metrics;
    // The label is the configured entry a model matched ("gpt-4o", or the pattern "gpt-*"), never
    // the name a client sent: made-up names would otherwise add a time series each, without bound.
    m.requests.add(1, r.endpoint, statusLabel(r.status), r.modelEntry, r.keyName ?? '');
    m.requestDuration.observe({ endpoint: r.endpoint }, r.durationSeconds);
    if (r.usage) {
      m.tokens.add(r.usage.prompt, r.modelEntry, r.servedModel ?? '', r.provider, 'prompt', r.keyName ?? '');
      m.tokens.add(r.usage.completion, r.modelEntry, r.servedModel ?? '', r.provider, 'completion', r.keyName ?? '');
    }
    if (r.costMicros !== undefined && r.costMicros > 0) m.spend.add(r.costMicros, r.modelEntry, r.servedModel ?? '', r.keyName ?? '');
    if (!this.#logger) return;
    const line = {
      event: 'access',
      request_id: r.id,
      downstream_request_id: r.downstreamRequestId,
      peer: r.peer,
      listener: r.listener,
      protocol: r.protocol,
      method: r.method,
      path: r.path,
      status: r.status,
      duration_ms: Math.round(r.durationSeconds * 1e6) / 1e3,
      model: r.model || undefined,
      provider: r.provider || undefined,
      key_name: r.keyName || undefined,
      error: r.errorCode || undefined,
      attempts: r.attemptLog !== undefined && r.attemptLog.length > 1 ? r.attemptLog : undefined,
      prompt_tokens: r.usage?.prompt,
      completion_tokens: r.usage?.completion,
      cached_tokens: r.usage?.cached || undefined,
      usage_estimated: r.usage?.estimated || undefined,
      cost_usd: r.costMicros === undefined ? undefined : r.costMicros / 1e6,
    };
    // The usual line has nothing to cut or escape: a test of each value, and the generic pass only when one needs it.
    const careful = needsCare(r.model) || needsCare(r.path) || needsCare(r.method) || (r.downstreamRequestId !== undefined && needsCare(r.downstreamRequestId));
    writeInfo(this.#logger, careful ? capClientFields(line, CLIENT_FIELDS) : line);
  }
}

const STATUS_LABELS = new Map<number, string>();
function statusLabel(status: number): string {
  let label = STATUS_LABELS.get(status);
  if (label === undefined) {
    label = String(status);
    STATUS_LABELS.set(status, label);
  }
  return label;
}
