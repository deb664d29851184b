// A key's budget: its period, what a request holds against it while it runs (what it may cost), and
// the 429 that says why a request does not fit. The store checks spent + held + this hold against
// the budget in the same step as every other limit, and the settlement replaces the hold by the
// real cost.
import type { BudgetConfig } from '../config/schema.ts';
import { errors, quoted, type GatewayError } from '../api/errors.ts';
import { outputTokens, promptEstimate } from './estimates.ts';
import type { AdmitRequest, LimitedKey } from './limit-policy.ts';
import type { Ask, Verdict } from './store.ts';

/** Whose a budget is: a key's, a team's, or a user's (of a key or of a team). */
export interface BudgetOwner {
  readonly scope: 'key' | 'team' | 'user';
  /** The key's or the team's name; a user's budget: the user, as the client named it. */
  readonly name: string;
  /** The store's id of its counter, without the period: a key's name (as before teams), `@team:t`, `@user:k:u`, `@team-user:t:u`. */
  readonly id: string;
  /** As a refusal words it: `API key "k"`, `team "t"`, `user "u" of API key "k"`. */
  readonly whose: string;
  readonly budget: BudgetConfig;
}

/** A team's budget counter, without its period. */
export function teamBudgetId(team: string): string {
  return `@team:${team}`;
}

/** The budgets a request of `key` (naming `user`) falls under: its key's, its team's, and each one's per-user budget. */
export function budgetOwners(key: LimitedKey, user: string): BudgetOwner[] {
  const owners: BudgetOwner[] = [];
  if (key.budget) owners.push({ scope: 'key', name: key.name, id: key.name, whose: `API key "${key.name}"`, budget: key.budget });
  const team = key.team;
  if (team?.budget) owners.push({ scope: 'team', name: team.name, id: teamBudgetId(team.name), whose: `team "${team.name}"`, budget: team.budget });
  if (user !== '') {
    if (key.userBudget) owners.push({ scope: 'user', name: user, id: `@user:${key.name}:${user}`, whose: `user "${quoted(user)}" of API key "${key.name}"`, budget: key.userBudget });
    if (team?.user_budget) owners.push({ scope: 'user', name: user, id: `@team-user:${team.name}:${user}`, whose: `user "${quoted(user)}" of team "${team.name}"`, budget: team.user_budget });
  }
  return owners;
}

/** A budget's counter for the period `now` is in (UTC calendar day or month); `key`: its owner's id. */
export function budgetPeriod(key: string, budget: BudgetConfig, now: number): { id: string; maxMicros: number; resetAt: number } {
  const d = new Date(now);
  const y = d.getUTCFullYear();
  const m = d.getUTCMonth();
  const month = `${y}-${String(m + 1).padStart(2, '0')}`;
  if (budget.period === 'day') {
    const day = `${month}-${String(d.getUTCDate()).padStart(2, '0')}`;
    return { id: `${key}:${day}`, maxMicros: Math.round(budget.usd * 1e6), resetAt: Date.UTC(y, m, d.getUTCDate() + 1) };
  }
  return { id: `${key}:${month}`, maxMicros: Math.round(budget.usd * 1e6), resetAt: Date.UTC(y, m + 1, 1) };
}

/**
 * What a request may cost, in micro-dollars: its prompt (estimated as for the reservation) and its
 * most output tokens (`defaultOutput` for each choice when it sets no max_tokens), at the price of
 * the dearest model its route may send it to (a fallback may reach any), each priced as its
 * settlement will be (the target's model, else the name the client sent). 0 when none has a price:
 * such a request costs nothing, and holds nothing.
 */
export function holdMicros(request: Pick<AdmitRequest, 'policy' | 'json' | 'bodyBytes' | 'generates' | 'billed' | 'targets' | 'requested'>, defaultOutput: number): number {
  if (!request.billed) return 0;
  const usage = { prompt: promptEstimate(request.bodyBytes), completion: outputTokens(request, defaultOutput) };
  let most = 0;
  for (const target of request.targets) {
    const cost = request.policy.prices.costMicros(usage, [target.model ?? request.requested, request.requested]);
    if (cost !== undefined && cost > most) most = cost;
  }
  // A whole number written without an exponent: Redis keeps a hold as the text "lease|micro-dollars".
  return Math.min(Math.ceil(most), Number.MAX_SAFE_INTEGER);
}

/**
 * A budget's 429. Spent, or too little left for what this request may cost: no retry before the
 * period ends (x-should-retry: false). Enough left but held by the key's requests in progress: it
 * may pass once they have finished (and cost less than they held), so a retry in a second is fine.
 */
export function budgetRefusal(whose: string, budget: BudgetConfig, ask: Ask, verdict: Extract<Verdict, { ok: false }>, headers: Readonly<Record<string, string>>): GatewayError {
  const max = ask.budgets[verdict.index]?.maxMicros ?? Math.round(budget.usd * 1e6);
  const spent = verdict.spent ?? max;
  const held = verdict.held ?? 0;
  const untilReset = { ...headers, 'retry-after': String(Math.max(1, Math.ceil(verdict.retryAfterMs / 1000))), 'x-should-retry': 'false' };
  if (spent >= max) return errors.budgetExceeded(whose, budget.usd, budget.period, untilReset);
  const may = `this request may cost up to ${dollars(ask.hold)} (its prompt, and its max_tokens or limits.budget_hold_output_tokens when it sets none, at its model's price)`;
  const amount = dollars(max - spent);
  if (spent + ask.hold > max) return errors.budgetExceeded(whose, budget.usd, budget.period, untilReset, { amount, why: `and ${may}` });
  const whenFinished = { ...headers, 'retry-after': '1', 'retry-after-ms': '1000' };
  return errors.budgetExceeded(whose, budget.usd, budget.period, whenFinished, { amount, why: `${dollars(held)} of it held by its requests in progress, and ${may}: try again once they have finished` });
}

/** Micro-dollars as dollars, to the micro-dollar and no further: "$0.41", "$1", "$0.000018". */
function dollars(micros: number): string {
  return `$${(micros / 1e6).toFixed(6).replace(/\.?0+$/, '')}`;
}
