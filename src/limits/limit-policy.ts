// What the limiter is given and what it reports, as types: a reload's `LimitPolicy` (its limits and
// prices), the key and the request it limits, and the events it tells the metrics and the log.
import type { BudgetConfig, Config, LimitsConfig, RateLimits } from '../config/schema.ts';
import type { LimitKind } from './store.ts';
import type { Entry } from './key-entry.ts';
import { Prices } from './prices.ts';

export type Scope = 'global' | 'model' | 'team' | 'key' | 'key_model';

/** The limits of one reload: what `limits`, `prices` and each key's `limits`/`budget` say. */
export class LimitPolicy {
  readonly settings: LimitsConfig;
  readonly prices: Prices;

  constructor(config: Pick<Config, 'limits' | 'prices'>) {
    this.settings = config.limits;
    this.prices = new Prices(config.prices);
  }
}

/** The key a request presented, as the limiter sees it. */
export interface LimitedKey {
  readonly name: string;
  readonly limits?: (RateLimits & { models?: Record<string, RateLimits> | undefined }) | undefined;
  readonly budget?: BudgetConfig | undefined;
  /** Each user's budget, for the `user` a request names. */
  readonly userBudget?: BudgetConfig | undefined;
  /** The key's team: its limits and budgets count every key of the team. */
  readonly team?: { readonly name: string; readonly limits?: RateLimits | undefined; readonly budget?: BudgetConfig | undefined; readonly user_budget?: BudgetConfig | undefined } | undefined;
}

export interface AdmitRequest {
  readonly policy: LimitPolicy;
  readonly key: LimitedKey;
  /** The configured model entry the request matched. */
  readonly model: string;
  /** The model name the client asked for. */
  readonly requested: string;
  /** The `user` the client named ('' none): per-user budgets. */
  readonly user?: string;
  /** The route's targets: the model each would be asked for (undefined: the client's name), priced for a budget's hold. */
  readonly targets: readonly { readonly model: string | undefined }[];
  /** Embeddings and token counts produce no completion tokens. */
  readonly generates: boolean;
  /** Token counts cost nothing: no hold on a budget. */
  readonly billed: boolean;
  readonly json: Record<string, unknown>;
  readonly bodyBytes: number;
  /** Unique per request: the lease id. */
  readonly id: string;
  /** The key's place taken when its key was checked (`enter`), handed to the admission. */
  readonly entry?: Entry | undefined;
}

export interface LimitEvents {
  refused(key: string, scope: Scope, limit: LimitKind): void;
  storeError(operation: 'acquire' | 'settle' | 'renew', outcome: 'allowed' | 'refused' | 'retried' | 'lost', error: Error): void;
  /** A settlement the store never took (it was away until the exit): its usage, for the record. */
  notCommitted(key: string, tokens: number, micros: number): void;
}
