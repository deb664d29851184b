// `GET /budgets`: every budget of a key or a team in the config serving, with what its period has
// spent so far (the limit store's counter) and what is left.
import type { BudgetRow } from '../admin/usage-api.ts';
import type { BudgetConfig, Config } from '../config/schema.ts';
import { budgetPeriod, teamBudgetId } from '../limits/budgets.ts';
import type { LimitStore } from '../limits/store.ts';

/** The budgets of `config` as they stand at `now`. */
export async function budgetRows(config: Config, store: LimitStore, now: number = Date.now()): Promise<BudgetRow[]> {
  const owned: { scope: 'key' | 'team'; name: string; id: string; budget: BudgetConfig }[] = [];
  for (const key of config.keys) if (typeof key !== 'string' && key.budget) owned.push({ scope: 'key', name: key.name, id: key.name, budget: key.budget });
  for (const team of config.teams) if (team.budget) owned.push({ scope: 'team', name: team.name, id: teamBudgetId(team.name), budget: team.budget });
  if (owned.length === 0) return [];
  const periods = owned.map((o) => budgetPeriod(o.id, o.budget, now));
  const spent = await store.spent(periods.map((p) => p.id));
  return owned.map((o, i) => {
    const spentMicros = spent[i] ?? 0;
    return {
      scope: o.scope,
      name: o.name,
      period: o.budget.period,
      budget_usd: o.budget.usd,
      spent_usd: spentMicros / 1e6,
      left_usd: Math.max(0, periods[i]!.maxMicros - spentMicros) / 1e6,
      resets_at: new Date(periods[i]!.resetAt).toISOString(),
    };
  });
}
