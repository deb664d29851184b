// The one source of truth for the configuration: validation, defaults and the TypeScript types. Here
// the whole config, its checks across sections and its helpers; each section's schema is in the
// *-schema.ts file named for it. The rest of the code imports all of it from here.
import { z } from 'zod';
import { adminSchema, authSchema } from './access-schema.ts';
import { etcdSchema, snapshotSchema } from './etcd-schema.ts';
import { clientKeySchema, limitsSchema, priceSchema, teamSchema } from './keys-and-limits-schema.ts';
import { budgetAlertsSchema, ledgerSchema } from './ledger-schema.ts';
import { downstreamSchema, isLoopback, listenerSchema, parseAddress } from './listener-schema.ts';
import { hotRestartSchema, logSchema, reloadSchema, shutdownSchema, tracingSchema, workersRecycleSchema, workersSchema } from './process-schema.ts';
import { modelSchema, PRESETS_NEEDING_A_KEY, providerSchema, routingSchema, upstreamSchema, type OpenAIPreset } from './routing-schema.ts';

export { namedKeySchema, rateLimitsSchema, teamSchema, type BudgetConfig, type LimitsConfig, type PriceConfig, type RateLimits, type TeamConfig } from './keys-and-limits-schema.ts';
export type { BudgetAlertsConfig, LedgerConfig } from './ledger-schema.ts';
export { isLoopback, parseAddress, type SocketAddress } from './listener-schema.ts';
export type { TracingConfig } from './process-schema.ts';
export { DEFAULT_ROUTE_RETRY, FAILURE_CLASSES, OPENAI_PRESETS, modelSchema, modelTargets, providerSchema, targetSchema, type FailureClass, type OpenAIPreset, type RouteRetryConfig, type TargetConfig } from './routing-schema.ts';
export { MAX_DURATION_MS, MAX_DURATION_SECS } from './value-schemas.ts';

export const configSchema = z
  .strictObject({
    workers: workersSchema,
    listeners: z.array(listenerSchema).min(1, 'expected at least one listener'),
    providers: z.array(providerSchema).default([]),
    models: z.array(modelSchema).default([]),
    keys: z.array(clientKeySchema).default([]),
    /** Teams of keys, with limits and budgets of their own. */
    teams: z.array(teamSchema).default([]),
    auth: authSchema.default(authSchema.parse({})),
    shutdown: shutdownSchema.default(shutdownSchema.parse({})),
    downstream: downstreamSchema.default(downstreamSchema.parse({})),
    upstream: upstreamSchema.default(upstreamSchema.parse({})),
    routing: routingSchema.default(routingSchema.parse({})),
    limits: limitsSchema.default(limitsSchema.parse({})),
    /** Prices per model (the upstream model's name, or a prefix of it): these replace the shipped table's. */
    prices: z.record(z.string().min(1), priceSchema).default({}),
    log: logSchema.default(logSchema.parse({})),
    admin: adminSchema.default(adminSchema.parse({})),
    hot_restart: hotRestartSchema.default(hotRestartSchema.parse({})),
    workers_recycle: workersRecycleSchema.default(workersRecycleSchema.parse({})),
    reload: reloadSchema.default(reloadSchema.parse({})),
    /** Providers, models and keys live in etcd (one key each); this file keeps what belongs to the host. */
    etcd: etcdSchema.optional(),
    snapshot: snapshotSchema.default(snapshotSchema.parse({})),
    tracing: tracingSchema.default(tracingSchema.parse({})),
    /** The usage ledger: a record of every request, kept through restarts (docs/usage-ledger.md). Absent: none is kept. */
    ledger: ledgerSchema.optional(),
    /** A webhook told when a key's or a team's budget crosses 50 %, 80 %, 100 %. */
    budget_alerts: budgetAlertsSchema.optional(),
  })
  .superRefine(crossChecks, {
    // Run even when some values have the wrong type, so one run reports every problem.
    when: (payload) => payload.value !== null && typeof payload.value === 'object',
  })
  // Settled here, in the bootstrap file's parse: etcd mode's resources are composed into a config
  // without its `etcd` section, which must keep what the bootstrap decided.
  .overwrite((config) => (config.auth.require_key === undefined ? { ...config, auth: { ...config.auth, require_key: config.etcd !== undefined } } : config));

type Named = { name?: unknown };

/**
 * A cross-check's problem that would quote values: `message` says it without them, `quoted` with
 * them. The loader shows `quoted` only where each value it quotes (at the paths `of`, by default
 * the problem's own) may be quoted: a literal of the operator's file, never a credential, a value
 * from a `${VAR}`, or anything of a resource (load.ts, `Telling`).
 */
function quoting(ctx: z.RefinementCtx, path: PropertyKey[], message: string, quoted: string, of: PropertyKey[][] | ((path: PropertyKey[]) => PropertyKey[][]) = [path]): void {
  ctx.addIssue({ code: 'custom', path, message, params: { quoted, of: typeof of === 'function' ? of(path) : of } });
}

/** Checks across entries. Defensive: with type errors elsewhere, any field may be malformed. */
function crossChecks(value: unknown, ctx: z.RefinementCtx): void {
  const config = value as Record<string, unknown>;
  const list = (key: string) => (Array.isArray(config[key]) ? (config[key] as Record<string, unknown>[]) : []);
  const listeners = list('listeners');
  const providers = list('providers');
  const models = list('models');
  const unique = (items: Named[], ...at: string[]) => {
    const seen = new Set<unknown>();
    items.forEach((item, index) => {
      if (typeof item?.name !== 'string') return;
      if (seen.has(item.name)) quoting(ctx, [...at, index, 'name'], 'duplicate name', `duplicate name "${item.name}"`);
      seen.add(item.name);
    });
  };
  unique(listeners, 'listeners');
  unique(providers, 'providers');
  unique(models, 'models');
  const teams = list('teams');
  unique(teams, 'teams');
  const teamNames = new Set(teams.map((t) => t?.name).filter((n) => typeof n === 'string'));
  list('keys').forEach((k, index) => {
    if (k !== null && typeof k === 'object' && typeof k.team === 'string' && !teamNames.has(k.team)) {
      quoting(ctx, ['keys', index, 'team'], 'no team of that name', `unknown team "${k.team}" (known: ${[...teamNames].map((t) => `"${String(t)}"`).join(', ') || 'none configured'})`, (at) => [at, ...teams.map((_, i) => ['teams', i, 'name'])]);
    }
  });
  const ledger = config.ledger as Record<string, unknown> | undefined;
  if (ledger?.store === 'postgres' && ledger.postgres === undefined) {
    ctx.addIssue({ code: 'custom', path: ['ledger', 'postgres'], message: 'ledger.store "postgres" needs ledger.postgres.url' });
  }
  const adminSection = config.admin as Record<string, unknown> | undefined;
  if (adminSection && Array.isArray(adminSection.tokens)) unique(adminSection.tokens as Named[], 'admin', 'tokens');
  if (config.etcd !== undefined) {
    // In etcd mode the resources live in etcd only: two sources of one list would disagree.
    for (const kind of ['providers', 'models', 'keys', 'teams'] as const) {
      if (Array.isArray(config[kind]) && (config[kind] as unknown[]).length > 0) {
        ctx.addIssue({ code: 'custom', path: [kind], message: `with etcd configured, ${kind} live in etcd: write them with the admin API or \`sluice apply\`, not in this file` });
      }
    }
  }
  if (Array.isArray(config.listeners) && listeners.length > 0 && !listeners.some((l) => l?.role === 'proxy')) {
    ctx.addIssue({ code: 'custom', path: ['listeners'], message: 'expected at least one listener with role "proxy"' });
  }
  const limitSettings = config.limits as Record<string, unknown> | undefined;
  if (limitSettings?.store === 'redis' && limitSettings.redis === undefined) {
    ctx.addIssue({ code: 'custom', path: ['limits', 'redis'], message: 'limits.store "redis" needs limits.redis.url' });
  }
  const adminSettings = config.admin as Record<string, unknown> | undefined;
  if (adminSettings?.allow_non_loopback !== true) {
    listeners.forEach((l, index) => {
      const parsed = typeof l?.address === 'string' ? parseAddress(l.address) : undefined;
      if (l?.role === 'admin' && parsed && !isLoopback(parsed.host)) {
        const message = 'an admin listener binds to loopback unless admin.allow_non_loopback is true';
        quoting(ctx, ['listeners', index, 'address'], message, `${message} (got ${String(l.address)})`);
      }
    });
  }
  const addresses = new Map<string, number>();
  listeners.forEach((l, index) => {
    const parsed = typeof l?.address === 'string' ? parseAddress(l.address) : undefined;
    if (!parsed || parsed.port === 0) return;
    const key = `${parsed.host}:${parsed.port}`;
    if (addresses.has(key)) {
      const other = addresses.get(key)!;
      quoting(ctx, ['listeners', index, 'address'], `the same address as listeners[${other}]`, `address ${String(l.address)} is already used by listeners[${other}]`);
    }
    addresses.set(key, index);
  });
  const providerNames = new Set(providers.map((p) => p?.name).filter((n) => typeof n === 'string'));
  const providerNamePaths = (at: PropertyKey[]) => [at, ...providers.map((_, index) => ['providers', index, 'name'])];
  const known = () => [...providerNames].map((p) => `"${String(p)}"`).join(', ') || 'none configured';
  models.forEach((m, index) => {
    if (typeof m?.provider === 'string' && !providerNames.has(m.provider)) {
      quoting(ctx, ['models', index, 'provider'], 'no provider of that name', `unknown provider "${m.provider}" (known: ${known()})`, providerNamePaths);
    }
    if (Array.isArray(m?.targets)) {
      (m.targets as Record<string, unknown>[]).forEach((t, at) => {
        if (typeof t?.provider === 'string' && !providerNames.has(t.provider)) {
          quoting(ctx, ['models', index, 'targets', at, 'provider'], 'no provider of that name', `unknown provider "${t.provider}" (known: ${known()})`, providerNamePaths);
        }
      });
    }
    const name = typeof m?.name === 'string' ? m.name : '';
    const star = name.indexOf('*');
    if (star !== -1 && star !== name.length - 1) {
      ctx.addIssue({ code: 'custom', path: ['models', index, 'name'], message: 'a "*" may only end a model name pattern ("*" or "prefix-*")' });
    }
  });
  providers.forEach((p, index) => {
    if (p?.type === 'echo' && p.base_url !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['providers', index, 'base_url'], message: 'an echo provider answers locally and takes no base_url' });
    }
    if (p?.type === 'azure_openai' && p.base_url === undefined) {
      ctx.addIssue({ code: 'custom', path: ['providers', index, 'base_url'], message: "required for azure_openai: the resource's endpoint, such as https://NAME.openai.azure.com" });
    }
    if (p?.type !== 'openai' && p?.preset !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['providers', index, 'preset'], message: 'preset is for openai providers only (an OpenAI-compatible server)' });
    }
    const hasKey = typeof p?.api_key === 'string' || Object.keys((p?.headers as object | undefined) ?? {}).some((h) => h.toLowerCase() === 'authorization');
    if (p?.type === 'openai' && typeof p.preset === 'string' && PRESETS_NEEDING_A_KEY.has(p.preset as OpenAIPreset) && !hasKey) {
      ctx.addIssue({ code: 'custom', path: ['providers', index, 'api_key'], message: `required: the ${p.preset} API refuses a request without a key` });
    }
    if (p?.type !== 'azure_openai' && p?.api_version !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['providers', index, 'api_version'], message: 'api_version is for azure_openai providers only' });
    }
    cloudProviderIssues(p, index, ctx);
  });
  const downstream = config.downstream as Record<string, unknown> | undefined;
  const headers = downstream?.headers_timeout_secs;
  const request = downstream?.request_timeout_secs;
  if (typeof headers === 'number' && typeof request === 'number' && request > 0 && headers > request) {
    quoting(ctx, ['downstream', 'headers_timeout_secs'], 'must not exceed downstream.request_timeout_secs', `must not exceed downstream.request_timeout_secs (${request})`, [['downstream', 'headers_timeout_secs'], ['downstream', 'request_timeout_secs']]);
  }
}

/** Where each of the cloud providers' own settings may be given, and what each needs. */
const CLOUD_FIELDS: Readonly<Record<string, readonly string[]>> = {
  auth: ['azure_openai'],
  api: ['bedrock', 'vertex'],
  region: ['bedrock'],
  aws_profile: ['bedrock'],
  project: ['vertex'],
  location: ['vertex'],
};

function cloudProviderIssues(p: Record<string, unknown> | null | undefined, index: number, ctx: z.RefinementCtx): void {
  if (p === null || typeof p !== 'object') return;
  const type = p.type;
  for (const [field, types] of Object.entries(CLOUD_FIELDS)) {
    if (p[field] !== undefined && typeof type === 'string' && !types.includes(type)) {
      ctx.addIssue({ code: 'custom', path: ['providers', index, field], message: `${field} is for ${types.join(' and ')} providers only` });
    }
  }
  const issue = (field: string, message: string) => ctx.addIssue({ code: 'custom', path: ['providers', index, field], message });
  if (type === 'bedrock' && p.region === undefined) issue('region', 'required for bedrock: the AWS region, such as us-east-1');
  if (type === 'bedrock' && p.api === 'gemini') issue('api', 'a bedrock provider speaks converse or anthropic');
  if (type === 'vertex' && p.project === undefined) issue('project', 'required for vertex: the Google Cloud project id');
  if (type === 'vertex' && p.api === 'converse') issue('api', 'a vertex provider speaks gemini or anthropic');
  if ((type === 'bedrock' || type === 'vertex') && p.api_key !== undefined) {
    issue('api_key', `a ${type} provider is authenticated by the gateway's own cloud identity (${type === 'bedrock' ? "the AWS default credential chain" : "Google's application default credentials"}), not a key`);
  }
  if (type === 'gemini' && p.api_key === undefined) issue('api_key', 'required for gemini: a Gemini API key (use vertex for a service account)');
  if (type === 'azure_openai' && p.auth === 'entra_id' && p.api_key !== undefined) issue('api_key', 'auth entra_id uses a Microsoft Entra ID token: leave api_key out');
}

export type Config = z.infer<typeof configSchema> & {
  /**
   * Set (never by the user: the schema refuses the key) while the resources are not loaded yet (etcd
   * mode, etcd not answering and no snapshot): readiness fails `config_loaded` and proxy requests
   * get a 503 saying why.
   */
  readonly resources_pending?: string;
};

/** The config with only the listeners of `role`: a supervisor serves the admin ones, its workers the proxy ones. */
export function withListenersOf(config: Config, role: ListenerConfig['role']): Config {
  return { ...config, listeners: config.listeners.filter((l) => l.role === role) };
}

/** Whether every proxy request needs a client key: `auth.require_key`, by default on in etcd mode (resources written at run time) and off otherwise. */
export function requiresClientKey(config: Pick<Config, 'auth' | 'etcd'>): boolean {
  return config.auth.require_key ?? config.etcd !== undefined;
}

/** `workers: auto` starts at most this many workers: each is a process of its own (about 100 MB idle), and a gateway of LLM requests is bound by its providers long before 8 cores. */
export const AUTO_WORKERS_MAX = 8;
/** What `workers: auto` allows each process of memory (idle, a busy one grows to about 300 MB); the group takes at most half of what the machine or its cgroup offers. */
export const AUTO_BYTES_PER_WORKER = 256 * 1024 * 1024;

/**
 * How many worker processes `workers` asks for on a machine offering `cpus` CPUs and `memory`
 * bytes (the cgroup's limit when there is one): `auto` is one per CPU, at most AUTO_WORKERS_MAX,
 * and no more than half the memory holds at AUTO_BYTES_PER_WORKER each; at least 1.
 */
export function workerCount(config: Pick<Config, 'workers'>, cpus: number, memory: number): number {
  if (config.workers !== 'auto') return config.workers;
  return Math.max(1, Math.min(cpus, AUTO_WORKERS_MAX, Math.floor(memory / 2 / AUTO_BYTES_PER_WORKER)));
}
export type ListenerConfig = Config['listeners'][number];
export type TlsConfig = NonNullable<ListenerConfig['tls']>;
export type Protocol = 'http1' | 'h2';

/** The protocols a listener serves: as configured, else both with TLS and HTTP/1.1 without. */
export function listenerProtocols(listener: ListenerConfig): readonly Protocol[] {
  return listener.protocols ?? (listener.tls ? ['http1', 'h2'] : ['http1']);
}
export type ProviderConfig = Config['providers'][number];
export type ModelConfig = Config['models'][number];
export type RoutingConfig = Config['routing'];
export type ShutdownConfig = Config['shutdown'];
export type DownstreamConfig = Config['downstream'];
export type UpstreamConfig = Config['upstream'];
