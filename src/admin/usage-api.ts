// The usage ledger's admin routes: `GET /usage` (totals by key, team, model, provider or user, by
// hour or day), `GET /requests` (the request log, filtered, newest first, a page at a time),
// `GET /requests/{id}` (one request with its attempts) and `GET /budgets` (each budget, what is spent
// and what is left this period). Reads only: a `read` admin token may use them all.
import type { RequestContext } from '../server/context.ts';
import { queryOf } from '../server/requests.ts';
import { sendError, sendJson } from '../server/respond.ts';
import type { DrainDecision } from '../lifecycle/contracts.ts';
import { errors, GatewayError } from '../api/errors.ts';
import type { LedgerStore } from '../ledger/store.ts';
import { parseRequestsQuery, parseUsageQuery } from '../ledger/query-params.ts';

/** A budget as `GET /budgets` shows it. */
export interface BudgetRow {
  readonly scope: 'key' | 'team';
  readonly name: string;
  readonly period: 'day' | 'month';
  readonly budget_usd: number;
  readonly spent_usd: number;
  readonly left_usd: number;
  readonly resets_at: string;
}

/** What the routes read: the ledger's store (undefined: no ledger) and the budgets. */
export interface UsageSource {
  readonly ledger: LedgerStore | undefined;
  budgets(): Promise<BudgetRow[]>;
}

export const REQUESTS_PREFIX = '/requests/';


const NOT_ENABLED = () => new GatewayError(404, 'not_found_error', 'ledger_not_enabled', 'the usage ledger is not enabled: add a `ledger` section to the config (docs/usage-ledger.md)');
const NO_SUCH_REQUEST = (id: string) => new GatewayError(404, 'not_found_error', 'unknown_request', `no request ${JSON.stringify(id.slice(0, 64))} in the ledger (it may not be shipped yet, or retention removed it)`);
const BAD_QUERY = (message: string) => new GatewayError(400, 'invalid_request_error', 'invalid_query', message);

/** Serves one of the routes above; `path` is the request's path. */
export function serveUsage(source: UsageSource, ctx: RequestContext, decision: DrainDecision, path: string, now: number = Date.now()): void {
  const query = new URLSearchParams(queryOf(ctx.req.url));
  if (path === '/budgets') return answer(ctx, decision, source.budgets().then((budgets) => ({ budgets })), LIMIT_STORE_UNAVAILABLE);
  const ledger = source.ledger;
  if (ledger === undefined) return sendError(ctx, decision, NOT_ENABLED());
  if (path === '/usage') {
    const parsed = parseUsageQuery(query, now);
    if (!parsed.ok) return sendError(ctx, decision, BAD_QUERY(parsed.message));
    const q = parsed.query;
    return answer(
      ctx,
      decision,
      ledger.usage(q).then((rows) => ({ from: new Date(q.from).toISOString(), to: new Date(q.to).toISOString(), group_by: q.groupBy, bucket: q.bucket ?? null, rows, totals: totals(rows) })),
    );
  }
  if (path === '/requests') {
    const parsed = parseRequestsQuery(query, now);
    if (!parsed.ok) return sendError(ctx, decision, BAD_QUERY(parsed.message));
    return answer(ctx, decision, ledger.requests(parsed.query));
  }
  let id: string;
  try {
    id = decodeURIComponent(path.slice(REQUESTS_PREFIX.length));
  } catch {
    return sendError(ctx, decision, BAD_QUERY('the request id is not valid percent-encoding'));
  }
  answer(
    ctx,
    decision,
    ledger.request(id).then((request) => (request === undefined ? NO_SUCH_REQUEST(id) : { request })),
  );
}

/** The rows added up. */
function totals(rows: readonly { requests: number; errors: number; prompt_tokens: number; completion_tokens: number; cached_tokens: number; cost_usd: number }[]) {
  const sum = { requests: 0, errors: 0, prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0, cost_usd: 0 };
  for (const r of rows) {
    sum.requests += r.requests;
    sum.errors += r.errors;
    sum.prompt_tokens += r.prompt_tokens;
    sum.completion_tokens += r.completion_tokens;
    sum.cached_tokens += r.cached_tokens;
    sum.cost_usd += r.cost_usd;
  }
  sum.cost_usd = Math.round(sum.cost_usd * 1e6) / 1e6;
  return sum;
}

const LEDGER_UNAVAILABLE = (): GatewayError => new GatewayError(503, 'server_error', 'ledger_unavailable', 'the ledger store did not answer; try again', { 'retry-after': '1' });
/** `GET /budgets` reads the limit store (Redis, with `limits.store: redis`), not the ledger's. */
const LIMIT_STORE_UNAVAILABLE = (): GatewayError => new GatewayError(503, 'server_error', 'limit_store_unavailable', 'the limit store did not answer; try again', { 'retry-after': '1' });

/** 200 with the JSON of what `work` resolves to; its GatewayError as such; `failed()` (a 503) when the store fails. */
function answer(ctx: RequestContext, decision: DrainDecision, work: Promise<object>, failed: () => GatewayError = LEDGER_UNAVAILABLE): void {
  work.then(
    (body) => {
      if (body instanceof GatewayError) return sendError(ctx, decision, body);
      sendJson(ctx, decision, 200, JSON.stringify(body));
    },
    () => sendError(ctx, decision, failed()),
  );
}
