// The proxy's request handling: auth, body, model routing, then the provider. Everything a request
// needs comes from one Routing snapshot read when it starts, so a config swap never splits a
// request between two configs.
import { requiresClientKey, type Config } from '../config/schema.ts';
import type { Provider, Endpoint } from '../providers/types.ts';
import { createProviders } from '../providers/registry.ts';
import type { CredentialEvents } from '../providers/refreshing-credential.ts';
import { ModelRouter } from '../routing/router.ts';
import { TargetStates, type CooldownSettings } from '../routing/targets.ts';
import { systemClock } from '../lifecycle/clock.ts';
import { ClientKeys, type ClientKey } from '../auth/keys.ts';
import type { Limiter } from '../limits/limiter.ts';
import { LimitPolicy } from '../limits/limit-policy.ts';
import { UNLIMITED } from '../limits/admission.ts';
import { promptEstimate } from '../limits/estimates.ts';
import { KeptBodies, type RequestContext } from '../server/context.ts';
import type { LedgerBodiesConfig } from '../config/ledger-schema.ts';
import { sendError, sendJson } from '../server/respond.ts';
import { discardRest, readBody } from '../server/body.ts';
import { authError, errors, GatewayError, type ErrorDialect } from '../api/errors.ts';
import { upstreamHeaders } from './headers.ts';
import { ResponseRelay, type RelayEnvironment } from './relay.ts';
import { RoutedExchange } from './routed-exchange.ts';
import type { ExchangeEnvironment } from './routed-request.ts';
import type { Tracing } from '../telemetry/tracing.ts';
import { anthropicListBody, anthropicPage, ModelCatalog, modelBody, openaiListBody, type ModelListEvents } from './models.ts';
import { OpenProxyGuard } from './open-proxy-guard.ts';
import { pathOf } from '../server/requests.ts';

export interface Routing {
  readonly router: ModelRouter;
  readonly providers: ReadonlyMap<string, Provider>;
  readonly keys: ClientKeys;
  readonly bodyLimit: number;
  readonly models: ModelCatalog;
  /** Why the resources are not loaded yet (etcd not answering, no snapshot): every request gets a 503 saying so. */
  readonly pending: string | undefined;
  /** Every target's health, in-flight count and latency; kept across a reload for unchanged providers. */
  readonly targets: TargetStates;
  readonly cooldown: CooldownSettings;
  readonly retryBudget: { readonly percent: number; readonly minConcurrency: number };
  /** Limits, budgets and prices of this config. */
  readonly limits: LimitPolicy;
  /** While the proxy needs no client key: what keeps web pages from using it. Undefined (nothing to check) with keys. */
  readonly openGuard: OpenProxyGuard | undefined;
  /** `ledger.bodies` when the ledger and its bodies are on: an admitted request's bodies are kept. Undefined: none is. */
  readonly ledgerBodies?: LedgerBodiesConfig | undefined;
}

/** What a routing's parts report: model lists and cloud credentials that cannot be had. */
export type RoutingEvents = ModelListEvents & CredentialEvents;

export function createRouting(config: Config, events: RoutingEvents, previous?: { config: Config; routing: Routing }): Routing {
  const providers = createProviders(config, { events, clock: systemClock }, previous && { config: previous.config, providers: previous.routing.providers });
  const targets = previous ? previous.routing.targets.carry((name) => providers.get(name) !== undefined && providers.get(name) === previous.routing.providers.get(name)) : new TargetStates(systemClock);
  const router = new ModelRouter(config.models, targets);
  targets.settle();
  const r = config.routing;
  const keys = new ClientKeys(config.keys, { required: requiresClientKey(config), teams: config.teams });
  return {
    router,
    providers,
    targets,
    cooldown: { failures: r.cooldown_failures, secs: r.cooldown_secs, maxSecs: r.cooldown_max_secs },
    retryBudget: { percent: r.retry_budget_percent, minConcurrency: r.min_retry_concurrency },
    keys,
    bodyLimit: config.downstream.request_body_limit_bytes,
    models: new ModelCatalog(router, providers, events),
    pending: config.resources_pending,
    limits: new LimitPolicy(config),
    openGuard: keys.enabled || keys.required ? undefined : new OpenProxyGuard(config.auth.allowed_hosts),
    ledgerBodies: config.ledger?.enabled === true && config.ledger.bodies.enabled ? config.ledger.bodies : undefined,
  };
}

interface EndpointSpec {
  readonly endpoint: Endpoint;
  readonly metricName: string;
}

const MODELS_PATH = '/v1/models';

const MODEL_ENDPOINTS: ReadonlyMap<string, EndpointSpec> = new Map([
  ['/v1/chat/completions', { endpoint: 'chat', metricName: 'chat_completions' }],
  ['/v1/completions', { endpoint: 'completions', metricName: 'completions' }],
  ['/v1/embeddings', { endpoint: 'embeddings', metricName: 'embeddings' }],
  ['/v1/responses', { endpoint: 'responses', metricName: 'responses' }],
  ['/v1/messages', { endpoint: 'messages', metricName: 'messages' }],
  ['/v1/messages/count_tokens', { endpoint: 'count_tokens', metricName: 'count_tokens' }],
]);

/**
 * Anthropic's routes answer in Anthropic's shape; OpenAI's in OpenAI's. Elsewhere (`/v1/models`,
 * an unknown path) the `anthropic-version` header, which Anthropic's SDKs always send, tells.
 */
function dialectOf(ctx: RequestContext, spec: EndpointSpec | undefined): ErrorDialect {
  if (spec) return spec.endpoint === 'messages' || spec.endpoint === 'count_tokens' ? 'anthropic' : 'openai';
  return ctx.req.headers['anthropic-version'] === undefined ? 'openai' : 'anthropic';
}

export type GatewayEnvironment = RelayEnvironment &
  ExchangeEnvironment & {
    readonly limiter: Limiter;
    /** Traces (`tracing.enabled`); undefined when off: then a request costs this one check. */
    readonly tracing?: Tracing | undefined;
    /** The usage ledger's spool is full and `ledger.on_full` is `refuse`; absent without a ledger. */
    readonly ledgerRefuses?: (() => boolean) | undefined;
  };

export class Gateway {
  #routing: Routing;
  readonly #env: GatewayEnvironment;

  constructor(routing: Routing, env: GatewayEnvironment) {
    this.#routing = routing;
    this.#env = env;
    this.#applyBudget(routing);
  }

  #applyBudget(routing: Routing): void {
    this.#env.budget.percent = routing.retryBudget.percent;
    this.#env.budget.minConcurrency = routing.retryBudget.minConcurrency;
  }

  get routing(): Routing {
    return this.#routing;
  }

  /** E6: later requests use `routing`; requests already routed finish on what they started with. */
  setRouting(routing: Routing): void {
    this.#routing = routing;
    this.#applyBudget(routing);
  }

  /** The endpoint label for a path, or undefined when the proxy does not serve it. */
  endpointOf(path: string): string | undefined {
    if (path === MODELS_PATH || path.startsWith(`${MODELS_PATH}/`)) return 'models';
    return MODEL_ENDPOINTS.get(path)?.metricName;
  }

  /** Before any route (the probes included): while no client key is needed, a web page's request is refused (open-proxy-guard.ts). */
  admit(ctx: RequestContext): GatewayError | undefined {
    const refused = this.#routing.openGuard?.refuse(ctx.req);
    if (refused) ctx.dialect = dialectOf(ctx, MODEL_ENDPOINTS.get(pathOf(ctx.req.url)));
    return refused;
  }

  handle(ctx: RequestContext, path: string): void {
    const routing = this.#routing;
    const { req } = ctx;
    const spec = MODEL_ENDPOINTS.get(path);
    const tracing = this.#env.tracing;
    if (tracing) {
      const headers = req.headers;
      ctx.trace = tracing.startRequest({ method: req.method ?? '', path, endpoint: ctx.endpoint, requestId: ctx.id, traceparent: headers.traceparent, tracestate: headers.tracestate });
    }
    ctx.dialect = dialectOf(ctx, spec);
    if (routing.pending !== undefined && (spec || path === MODELS_PATH || path.startsWith(`${MODELS_PATH}/`))) {
      return sendError(ctx, this.#env.decision, errors.configNotLoaded(routing.pending));
    }
    if (path === MODELS_PATH || path.startsWith(`${MODELS_PATH}/`)) {
      if (req.method !== 'GET') return sendError(ctx, this.#env.decision, errors.methodNotAllowed(req.method ?? '', path, 'GET'));
      if (!this.#authorize(ctx, routing)) return;
      return this.#settle(ctx, this.#models(ctx, routing, path));
    }
    if (!spec) return sendError(ctx, this.#env.decision, errors.notFound(path));
    if (req.method !== 'POST') return sendError(ctx, this.#env.decision, errors.methodNotAllowed(req.method ?? '', path, 'POST'));
    const key = this.#authorize(ctx, routing);
    if (!key) return;
    this.#settle(ctx, this.#forward(ctx, spec, routing, path, key));
  }

  #settle(ctx: RequestContext, work: Promise<void>): void {
    work.catch((error: unknown) => {
      // A bug, not a client mistake: answered as one, and the process carries on.
      this.#env.reportBug(error, ctx.id);
      if (!ctx.res.headersSent) sendError(ctx, this.#env.decision, errors.internal());
      else ctx.res.destroy();
    });
  }

  /** `GET /v1/models` and `GET /v1/models/{id}` (the id may contain `/`), in the caller's shape. */
  async #models(ctx: RequestContext, routing: Routing, path: string): Promise<void> {
    const decision = this.#env.decision;
    if (path === MODELS_PATH) {
      // A key limited to some models sees only those.
      const models = (await routing.models.list()).filter((model) => ctx.key.allows(model.id));
      if (ctx.dialect === 'openai') return sendJson(ctx, decision, 200, openaiListBody(models));
      const url = ctx.req.url ?? '';
      const q = url.indexOf('?');
      const page = anthropicPage(new URLSearchParams(q === -1 ? '' : url.slice(q + 1)));
      if ('parameter' in page) return sendError(ctx, decision, errors.invalidParameter(page.parameter, page.problem));
      return sendJson(ctx, decision, 200, anthropicListBody(models, page));
    }
    let id: string;
    try {
      id = decodeURIComponent(path.slice(MODELS_PATH.length + 1));
    } catch {
      return sendError(ctx, decision, errors.unknownModel(path.slice(MODELS_PATH.length + 1)));
    }
    ctx.model = id;
    if (!ctx.key.allows(id)) return sendError(ctx, decision, errors.unknownModel(id));
    const found = await routing.models.find(id);
    if ('model' in found) return sendJson(ctx, decision, 200, modelBody(found.model, ctx.dialect));
    sendError(ctx, decision, found.missing === 'unrouted' ? errors.unknownModel(id) : errors.modelNotOffered(id, found.provider));
  }

  #authorize(ctx: RequestContext, routing: Routing): ClientKey | undefined {
    const auth = routing.keys.check(ctx.req.headers);
    if (auth.ok) {
      ctx.key = auth.key;
      return auth.key;
    }
    if (auth.keyName !== undefined) ctx.keyName = auth.keyName;
    sendError(ctx, this.#env.decision, authError(auth.reason, auth.keyName));
    discardRest(ctx.req);
    return undefined;
  }

  async #forward(ctx: RequestContext, spec: EndpointSpec, routing: Routing, path: string, key: ClientKey): Promise<void> {
    const decision = this.#env.decision;
    const policy = routing.limits;
    // A key with a `concurrent` limit takes its place now, before the body: a request whose body is
    // slow to come is in progress too. Given back if the request ends before its admission.
    const entering = this.#env.limiter.enter(policy, key, ctx.id);
    if (entering instanceof GatewayError) return refuseBeforeBody(ctx, decision, entering);
    // Read while the store answers (workers, Redis): the body does not wait for it.
    const reading = readBody(ctx.req, routing.bodyLimit);
    const entry = entering instanceof Promise ? await entering : entering;
    if (entry instanceof GatewayError) return refuseBeforeBody(ctx, decision, entry);
    // Settled when the response closes (replaced by the admission's settlement once admitted).
    if (entry !== undefined) {
      const leave = () => entry.leave();
      ctx.whenFinished(leave);
      ctx.beforeEnd = leave;
    }
    const read = await reading;
    // The request ended while its body was read (its place is given back): nothing more to do.
    if (entry?.left) return;
    if (!read.ok) {
      if (read.error) sendError(ctx, decision, read.error);
      return;
    }
    let json: unknown;
    try {
      json = JSON.parse(read.body.toString('utf8'));
    } catch (error) {
      return sendError(ctx, decision, errors.invalidJson((error as Error).message));
    }
    if (json === null || typeof json !== 'object' || Array.isArray(json)) return sendError(ctx, decision, errors.notAnObject());
    const body = json as Record<string, unknown>;
    const model = body.model;
    if (typeof model !== 'string' || model === '') return sendError(ctx, decision, errors.missingModel());
    ctx.model = model;
    ctx.trace?.requested(body);
    if (!ctx.key.allows(model)) return sendError(ctx, decision, errors.modelNotAllowed(model, ctx.key.name));
    const route = routing.router.resolve(model);
    if (!route) return sendError(ctx, decision, errors.unknownModel(model));
    ctx.modelEntry = route.entry;
    ctx.provider = route.provider;
    if (this.#env.ledgerRefuses?.()) return sendError(ctx, decision, errors.ledgerFull());
    ctx.ledgered = true;
    ctx.bytesIn = read.body.length;
    if (routing.ledgerBodies !== undefined) ctx.bodies = new KeptBodies(routing.ledgerBodies, read.body);
    const user = userOf(body);
    ctx.user = user;
    const admitting = this.#env.limiter.admit({
      policy,
      key,
      model: route.entry,
      requested: model,
      user,
      targets: route.targets,
      generates: spec.endpoint !== 'embeddings' && spec.endpoint !== 'count_tokens',
      billed: spec.endpoint !== 'count_tokens',
      json: body,
      bodyBytes: read.body.length,
      id: ctx.id,
      entry,
    });
    const admission = admitting instanceof Promise ? await admitting : admitting;
    if (admission instanceof GatewayError) return sendError(ctx, decision, admission);
    if (admission !== UNLIMITED) {
      ctx.responseHeaders = admission.headers;
      ctx.beforeEnd = admission.release;
    }
    // Settled when the response closes (or now, if the client left while the limits were checked).
    ctx.whenFinished((status) => {
      const usage = ctx.usage;
      const cost = usage === undefined ? undefined : policy.prices.costMicros(usage, [ctx.upstreamModel, ctx.model]);
      ctx.costMicros = cost;
      admission.finish(usage, cost, ctx.res.headersSent && status < 400);
    });
    if (ctx.res.destroyed) return;
    const relay = new ResponseRelay(ctx, this.#env, spec.endpoint);
    const exchange = new RoutedExchange(
      {
        ctx,
        route,
        providers: routing.providers,
        cooldown: routing.cooldown,
        endpoint: spec.endpoint,
        json: body,
        bytes: read.body,
        headers: upstreamHeaders(ctx.req.headers),
        path,
        readAfterDisconnectMs: policy.settings.read_after_disconnect_secs * 1000,
        promptTokens: promptEstimate(read.body.length),
      },
      this.#env,
      relay,
    );
    exchange.start();
  }
}

/** The most of a client's `user` kept (in its budget's id and the ledger). */
const USER_MAX = 256;

/** The `user` a request names: OpenAI's `user`, or Anthropic's `metadata.user_id`; '' when none. */
function userOf(body: Record<string, unknown>): string {
  let user = body.user;
  if (user === undefined) {
    const metadata = body.metadata;
    if (metadata !== null && typeof metadata === 'object') user = (metadata as Record<string, unknown>).user_id;
  }
  return typeof user === 'string' ? (user.length > USER_MAX ? user.slice(0, USER_MAX) : user) : '';
}

/** A refusal before the body was read (the key's place in its `concurrent` limit): the rest of the body is read and dropped. */
function refuseBeforeBody(ctx: RequestContext, decision: GatewayEnvironment['decision'], error: GatewayError): void {
  sendError(ctx, decision, error);
  discardRest(ctx.req);
}
