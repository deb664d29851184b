// What a client can call, for `GET /v1/models` and `GET /v1/models/{id}`: every exact model name,
// and for each pattern (`gpt-*`, `*`) the names its provider's own model list offers that the
// router sends to that pattern. A provider's list is fetched when first asked for, kept for
// LIST_TTL_MS, and shared by every routing snapshot that keeps the same provider (a reload that
// leaves a provider unchanged keeps its list). A provider that cannot be asked is left out (its
// exact names are still listed), logged once until it answers again, and asked again after
// RETRY_MS.
import type { Provider, UpstreamModel } from '../providers/types.ts';
import type { ModelRouter } from '../routing/router.ts';
import { modelTargets } from '../config/schema.ts';

/** How long a provider's model list is kept. */
export const LIST_TTL_MS = 5 * 60_000;
/** After a failed fetch, how long before the provider is asked again. */
export const RETRY_MS = 30_000;
/** The longest wait for a provider's model list. */
export const FETCH_TIMEOUT_MS = 5_000;

export interface ModelInfo {
  readonly id: string;
  /** Unix seconds (0 when unknown). */
  readonly created: number;
  readonly displayName: string;
  /** The provider's name (OpenAI's `owned_by`). */
  readonly ownedBy: string;
}

export interface ModelListEvents {
  /** A provider's list could not be fetched; called once until a fetch succeeds again. */
  failed(provider: string, reason: string): void;
  /** A provider whose list had failed answered again. */
  recovered(provider: string): void;
}

interface CachedList {
  models: UpstreamModel[] | undefined;
  /** When this entry is stale (ms, the injected clock). */
  expiresAt: number;
  pending: Promise<UpstreamModel[] | undefined> | undefined;
  failing: boolean;
}

/** One cache per provider object, so snapshots that share a provider share its list. */
const lists = new WeakMap<Provider, CachedList>();

export class ModelCatalog {
  readonly #router: ModelRouter;
  readonly #providers: ReadonlyMap<string, Provider>;
  readonly #events: ModelListEvents;
  readonly #now: () => number;
  /** The exact names, in config order. */
  readonly #exact: ModelInfo[];
  /** Providers that serve a pattern route and can list their models. */
  readonly #listed: Provider[];

  constructor(router: ModelRouter, providers: ReadonlyMap<string, Provider>, events: ModelListEvents, now: () => number = Date.now) {
    this.#router = router;
    this.#providers = providers;
    this.#events = events;
    this.#now = now;
    this.#exact = router.models
      .filter((model) => !model.name.includes('*'))
      .map((model) => ({ id: model.name, created: 0, displayName: model.name, ownedBy: modelTargets(model)[0]!.provider }));
    const listed = new Set<Provider>();
    for (const model of router.models) {
      if (!model.name.includes('*')) continue;
      for (const target of modelTargets(model)) {
        const provider = providers.get(target.provider);
        if (provider?.listModels) listed.add(provider);
      }
    }
    this.#listed = [...listed];
  }

  /** Every model a client can call: the exact names first, then what patterns reach. */
  async list(): Promise<ModelInfo[]> {
    const out = [...this.#exact];
    const seen = new Set(out.map((model) => model.id));
    const fetched = await Promise.all(this.#listed.map((provider) => this.#fetch(provider)));
    this.#listed.forEach((provider, index) => {
      for (const model of fetched[index] ?? []) {
        if (seen.has(model.id)) continue;
        const route = this.#router.resolve(model.id);
        // Listed only when a request for it would reach this provider through a pattern.
        if (!route || !route.entry.includes('*') || !route.targets.some((t) => this.#providers.get(t.provider) === provider)) continue;
        seen.add(model.id);
        out.push({ id: model.id, created: model.created, displayName: model.displayName ?? model.id, ownedBy: provider.name });
      }
    });
    return out;
  }

  /**
   * The model `id` if a client can call it. A name a pattern routes is found when its provider
   * lists it, or when the provider keeps no list (echo) or cannot be asked now: the route decides.
   */
  async find(id: string): Promise<{ model: ModelInfo } | { missing: 'unrouted' } | { missing: 'unlisted'; provider: string }> {
    const route = this.#router.resolve(id);
    if (!route) return { missing: 'unrouted' };
    const provider = this.#providers.get(route.provider);
    const plain = { id, created: 0, displayName: id, ownedBy: route.provider };
    if (!route.entry.includes('*') || !provider?.listModels) return { model: plain };
    const models = await this.#fetch(provider);
    if (models === undefined) return { model: plain };
    const found = models.find((model) => model.id === id);
    if (!found) return { missing: 'unlisted', provider: route.provider };
    return { model: { id, created: found.created, displayName: found.displayName ?? id, ownedBy: route.provider } };
  }

  /** The provider's list, from the cache or fetched; undefined when it cannot be had. */
  #fetch(provider: Provider): Promise<UpstreamModel[] | undefined> {
    let cached = lists.get(provider);
    if (!cached) {
      cached = { models: undefined, expiresAt: 0, pending: undefined, failing: false };
      lists.set(provider, cached);
    }
    if (cached.pending) return cached.pending;
    if (this.#now() < cached.expiresAt) return Promise.resolve(cached.models);
    const entry = cached;
    const events = this.#events;
    const now = this.#now;
    entry.pending = provider.listModels!(AbortSignal.timeout(FETCH_TIMEOUT_MS)).then(
      (models) => {
        entry.models = models;
        entry.expiresAt = now() + LIST_TTL_MS;
        entry.pending = undefined;
        if (entry.failing) events.recovered(provider.name);
        entry.failing = false;
        return models;
      },
      (error: unknown) => {
        // A stale list is better than none; without one, the exact names are all there is.
        entry.expiresAt = now() + RETRY_MS;
        entry.pending = undefined;
        if (!entry.failing) events.failed(provider.name, describe(error));
        entry.failing = true;
        return entry.models;
      },
    );
    return entry.pending;
  }
}

/** A failure in words, without anything from the request (no credentials). */
function describe(error: unknown): string {
  const e = error as { code?: unknown; name?: unknown; message?: unknown } | null;
  if (e?.name === 'TimeoutError') return `no answer within ${FETCH_TIMEOUT_MS} ms`;
  if (typeof e?.code === 'string' && e.code !== '') return e.code;
  return typeof e?.message === 'string' ? e.message : String(error);
}

const RFC3339_EPOCH = '1970-01-01T00:00:00Z';

function anthropicModel(model: ModelInfo): object {
  const createdAt = model.created > 0 ? new Date(model.created * 1000).toISOString().replace('.000Z', 'Z') : RFC3339_EPOCH;
  return { type: 'model', id: model.id, display_name: model.displayName, created_at: createdAt };
}

function openaiModel(model: ModelInfo): object {
  return { id: model.id, object: 'model', created: model.created, owned_by: model.ownedBy };
}

export function modelBody(model: ModelInfo, dialect: 'openai' | 'anthropic'): string {
  return JSON.stringify(dialect === 'anthropic' ? anthropicModel(model) : openaiModel(model));
}

/** OpenAI's list: everything in one answer. */
export function openaiListBody(models: readonly ModelInfo[]): string {
  return JSON.stringify({ object: 'list', data: models.map(openaiModel) });
}

export interface AnthropicPage {
  limit: number;
  afterId: string | undefined;
  beforeId: string | undefined;
}

/**
 * Anthropic's query parameters (`limit` 1 to 1000, default 20; `after_id`; `before_id`), or the
 * name of the parameter that is wrong and why.
 */
export function anthropicPage(query: URLSearchParams): AnthropicPage | { parameter: string; problem: string } {
  const rawLimit = query.get('limit');
  let limit = 20;
  if (rawLimit !== null) {
    limit = /^\d{1,4}$/.test(rawLimit) ? Number(rawLimit) : Number.NaN;
    if (!(limit >= 1 && limit <= 1000)) return { parameter: 'limit', problem: 'must be a whole number from 1 to 1000' };
  }
  const afterId = query.get('after_id') ?? undefined;
  const beforeId = query.get('before_id') ?? undefined;
  if (afterId !== undefined && beforeId !== undefined) return { parameter: 'before_id', problem: 'cannot be combined with after_id' };
  return { limit, afterId, beforeId };
}

/** Anthropic's list: one page, with `has_more`, `first_id` and `last_id`. */
export function anthropicListBody(models: readonly ModelInfo[], page: AnthropicPage): string {
  let start = 0;
  let end = models.length;
  if (page.beforeId !== undefined) {
    const index = models.findIndex((model) => model.id === page.beforeId);
    end = index === -1 ? 0 : index;
    start = Math.max(0, end - page.limit);
  } else {
    if (page.afterId !== undefined) {
      const index = models.findIndex((model) => model.id === page.afterId);
      start = index === -1 ? models.length : index + 1;
    }
    end = Math.min(models.length, start + page.limit);
  }
  const data = models.slice(start, end);
  const hasMore = page.beforeId !== undefined ? start > 0 : end < models.length;
  return JSON.stringify({ data: data.map(anthropicModel), has_more: hasMore, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null });
}
