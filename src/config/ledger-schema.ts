// The usage ledger (`ledger`: one record per request, spooled on local disk and shipped to SQLite or
// PostgreSQL, docs/usage-ledger.md) and the budget alerts (`budget_alerts`: a webhook when a key's or
// a team's budget crosses a threshold).
import { z } from 'zod';
import { fromEnv, positiveMilliseconds } from './value-schemas.ts';

const postgres = z.strictObject({
  /** postgres://user:password@host:port/database (the password from a ${VAR}). Never logged whole. */
  url: z.string().regex(/^postgres(ql)?:\/\/[^\s]+$/, 'expected a PostgreSQL URL such as postgres://sluice@127.0.0.1:5432/sluice'),
  /** Connections to the database, per process. */
  pool_size: fromEnv(z.number().int().min(1).max(64)).default(4),
});

/** Flags a `redact` pattern may carry (`g` is always added; `y` and `d` would change what a replacement does). */
const PATTERN_FLAGS = /^[imsuv]*$/;

/** A `redact` pattern: JavaScript regular expression source, alone or with its flags (`{ pattern, flags: "i" }`). */
const redactPattern = z.union([
  z.string().min(1),
  z.strictObject({
    pattern: z.string().min(1),
    flags: z.string().regex(PATTERN_FLAGS, 'expected flags among i, m, s, u and v').default(''),
  }),
]);
export type RedactPattern = z.infer<typeof redactPattern>;

/**
 * Why `source` with `flags` is not a JavaScript regular expression; undefined when it is. The
 * pattern itself is not quoted (it may come from a `${VAR}`): only the engine's reason.
 */
export function patternProblem(source: string, flags: string): string | undefined {
  // (?i) and the like are PCRE's, not JavaScript's (which has the scoped group (?i:...) only).
  if (/^\(\?[a-z]+\)/.test(source)) return 'a leading inline flag such as (?i) is not JavaScript: write { pattern: "...", flags: "i" }, or the group (?i:...)';
  try {
    new RegExp(source, `${flags}g`);
    return undefined;
  } catch (error) {
    const message = (error as Error).message;
    // V8's message quotes the pattern before its last ': ' ("Invalid regular expression: /(/g: Unterminated group").
    const colon = message.lastIndexOf(': ');
    return `not a JavaScript regular expression (${colon === -1 ? message : message.slice(colon + 2)})`;
  }
}

/** `ledger.bodies`: request and response bodies kept beside their records, cut and redacted (docs/usage-ledger.md, Bodies). */
const bodies = z.strictObject({
  /** false (the default): no body is read into memory for the ledger, or written. */
  enabled: fromEnv(z.boolean()).default(false),
  /** Each body is cut to this many bytes (and marked truncated). */
  max_bytes: fromEnv(z.number().int().min(1).max(1024 * 1024)).default(32_768),
  /** Bodies are deleted after this many days, sooner than their records; 0: kept as long as the records. */
  retention_days: fromEnv(z.number().int().nonnegative()).default(7),
  /** More to redact, after the built-in rules (secrets, e-mail addresses, card and phone numbers): each match becomes `[redacted]`. */
  redact: z
    .array(redactPattern)
    .superRefine((patterns, ctx) => {
      patterns.forEach((pattern, index) => {
        // Flags that are not allowed are reported by their own field.
        if (typeof pattern !== 'string' && !PATTERN_FLAGS.test(pattern.flags)) return;
        const problem = typeof pattern === 'string' ? patternProblem(pattern, '') : patternProblem(pattern.pattern, pattern.flags);
        // The path names the pattern's index: `ledger.bodies.redact[2]`.
        if (problem !== undefined) ctx.addIssue({ code: 'custom', path: [index], message: problem });
      });
    })
    .default([]),
});
export type LedgerBodiesConfig = z.infer<typeof bodies>;

export const ledgerSchema = z.strictObject({
  /** false: the section is kept and nothing is recorded. */
  enabled: fromEnv(z.boolean()).default(true),
  /** `sqlite`: a file on this host (one instance); `postgres`: one database for the fleet. Read at start. */
  store: z.enum(['sqlite', 'postgres']).default('sqlite'),
  /** The SQLite file. Default: beside the config file, named after it (`sluice.yaml` → `sluice.ledger.sqlite`). */
  sqlite_path: z.string().min(1).optional(),
  postgres: postgres.optional(),
  /** The spool's directory (append-only segments). Default: beside the config file (`sluice.ledger-spool/`). */
  spool_dir: z.string().min(1).optional(),
  /** The spool's size at most; beyond it, `on_full` decides. */
  spool_max_mb: fromEnv(z.number().int().positive()).default(1024),
  /** `batch`: the spool is fsynced at most every 50 ms (a crash loses at most that); `always`: as soon as a write is done. */
  fsync: z.enum(['batch', 'always']).default('batch'),
  /** A full spool (the store away for long): `drop` the new records (counted and logged), or `refuse` new requests (503). */
  on_full: z.enum(['drop', 'refuse']).default('drop'),
  /** Records older than this many days are deleted (in small batches); 0: kept forever. */
  retention_days: fromEnv(z.number().int().nonnegative()).default(90),
  /** Request and response bodies beside the records: off unless `enabled`. */
  bodies: bodies.default(bodies.parse({})),
});
export type LedgerConfig = z.infer<typeof ledgerSchema>;

export const budgetAlertsSchema = z.strictObject({
  /** The webhook: a JSON POST for each crossing. Never logged whole. */
  url: z
    .string()
    .regex(/^https?:\/\/[^\s]+$/, 'expected an http:// or https:// URL')
    .refine((url) => URL.canParse(url), 'expected a URL that parses (its host, port and path)'),
  /** Percents of a budget, each sent once per budget period when crossed. */
  thresholds: z.array(fromEnv(z.number().positive().max(1000))).min(1).default([50, 80, 100]),
  /** Sent with each POST (an Authorization header, say). */
  headers: z.record(z.string().regex(/^[A-Za-z0-9-]+$/, 'expected a header name'), z.string()).optional(),
  /** When set, each POST carries x-sluice-signature: sha256=<HMAC-SHA256 of the body with this secret>. */
  secret: z.string().min(1).optional(),
  timeout_ms: positiveMilliseconds.default(5000),
  /** Attempts of one alert (back-off from 1 s, doubling, at most 60 s apart) before it is given up and logged. */
  max_attempts: fromEnv(z.number().int().min(1).max(50)).default(10),
});
export type BudgetAlertsConfig = z.infer<typeof budgetAlertsSchema>;
