// Client API keys, held only as SHA-256 digests. A presented key is hashed and looked up; the
// match is confirmed with a constant-time comparison of the digests.
import { hash, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { BudgetConfig, Config, RateLimits, TeamConfig } from '../config/schema.ts';

/** A key's team, as the limiter and the ledger see it. */
export interface KeyTeam {
  readonly name: string;
  readonly limits?: RateLimits | undefined;
  readonly budget?: BudgetConfig | undefined;
  readonly user_budget?: BudgetConfig | undefined;
}

/** A key that was presented and found, with what it may do. */
export class ClientKey {
  readonly name: string;
  readonly enabled: boolean;
  /** Epoch ms from which the key is refused; undefined: never. */
  readonly expiresAt: number | undefined;
  /** Its rate limits (its own, and per model): the limiter reads them. */
  readonly limits: (RateLimits & { models?: Record<string, RateLimits> | undefined }) | undefined;
  readonly budget: BudgetConfig | undefined;
  /** Each user's budget (the `user` a client names). */
  readonly userBudget: BudgetConfig | undefined;
  /** The team it belongs to; undefined: none. */
  readonly team: KeyTeam | undefined;
  /** Its free labels (the ledger records them). */
  readonly metadata: Readonly<Record<string, string>> | undefined;
  readonly #exact: ReadonlySet<string> | undefined;
  readonly #prefixes: readonly string[];

  constructor(
    name: string,
    policy: {
      models?: readonly string[] | undefined;
      expires_at?: string | undefined;
      enabled?: boolean | undefined;
      limits?: (RateLimits & { models?: Record<string, RateLimits> | undefined }) | undefined;
      budget?: BudgetConfig | undefined;
      user_budget?: BudgetConfig | undefined;
      metadata?: Record<string, string> | undefined;
    } = {},
    team?: KeyTeam,
  ) {
    this.name = name;
    this.limits = policy.limits;
    this.budget = policy.budget;
    this.userBudget = policy.user_budget;
    this.team = team;
    this.metadata = policy.metadata;
    this.enabled = policy.enabled !== false;
    this.expiresAt = policy.expires_at === undefined ? undefined : Date.parse(policy.expires_at);
    const models = policy.models;
    this.#exact = models === undefined || models.includes('*') ? undefined : new Set(models.filter((m) => !m.endsWith('*')));
    this.#prefixes = models === undefined ? [] : models.filter((m) => m.endsWith('*')).map((m) => m.slice(0, -1));
  }

  /** Whether this key may call `model` (the name the client asked for). */
  allows(model: string): boolean {
    if (this.#exact === undefined || this.#exact.has(model)) return true;
    for (const prefix of this.#prefixes) if (model.startsWith(prefix)) return true;
    return false;
  }

  /** Whether the key may call every model (no `models` list). */
  get unrestricted(): boolean {
    return this.#exact === undefined;
  }
}

/** Every request is let in when no key is configured (and none is required): the open gateway's "key". */
const OPEN_KEY = new ClientKey('');

/** Why a request was refused: `no_keys` when a key is required (`auth.require_key`) and none exists. */
export type AuthFailure = 'missing' | 'invalid' | 'expired' | 'disabled' | 'no_keys';

export type AuthResult = { ok: true; key: ClientKey } | { ok: false; reason: AuthFailure; keyName?: string };

const OPEN: AuthResult = { ok: true, key: OPEN_KEY };
const NO_KEYS: AuthResult = { ok: false, reason: 'no_keys' };

export class ClientKeys {
  readonly #digests = new Map<string, { digest: Buffer; key: ClientKey }>();
  /** With no key at all, every request is refused rather than let in (`auth.require_key`). */
  readonly required: boolean;

  constructor(keys: Config['keys'], options: { required?: boolean; teams?: readonly TeamConfig[] } = {}) {
    this.required = options.required === true;
    const teams = new Map((options.teams ?? []).map((team) => [team.name, team]));
    keys.forEach((entry, index) => {
      const name = typeof entry === 'string' ? `key-${index}` : entry.name;
      // A key given only as its digest (as the admin API stores them) is looked up the same way.
      const digest = typeof entry === 'string' ? sha256(entry) : 'key_sha256' in entry ? entry.key_sha256 : sha256(entry.key);
      this.#digests.set(digest, { digest: Buffer.from(digest, 'base64'), key: new ClientKey(name, typeof entry === 'string' ? {} : entry, typeof entry === 'string' || entry.team === undefined ? undefined : teams.get(entry.team)) });
    });
  }

  get enabled(): boolean {
    return this.#digests.size > 0;
  }

  /** A key is required and none exists: every request is refused (the `client_keys` readiness check fails). */
  get closed(): boolean {
    return this.required && this.#digests.size === 0;
  }

  check(headers: IncomingHttpHeaders, now: number = Date.now()): AuthResult {
    if (this.#digests.size === 0) return this.required ? NO_KEYS : OPEN;
    const presented = presentedKey(headers);
    if (presented === undefined) return { ok: false, reason: 'missing' };
    const digest = sha256(presented);
    const found = this.#digests.get(digest);
    if (!found || !timingSafeEqual(found.digest, Buffer.from(digest, 'base64'))) return { ok: false, reason: 'invalid' };
    const { key } = found;
    if (!key.enabled) return { ok: false, reason: 'disabled', keyName: key.name };
    if (key.expiresAt !== undefined && now >= key.expiresAt) return { ok: false, reason: 'expired', keyName: key.name };
    return { ok: true, key };
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
