// /livez and /readyz. Liveness stays 200 while draining (L1): a restart would kill the work the
// drain is finishing. Readiness is 503 from the first moment of the drain.

export interface HealthCheck {
  name: string;
  ok: boolean;
  /** Why it fails, in words, when the name alone does not say (shown only while it fails). */
  detail?: string | undefined;
}

export interface HealthAnswer {
  status: number;
  body: string;
}

const LIVE: HealthAnswer = { status: 200, body: '{"status":"live"}' };
const READY: HealthAnswer = { status: 200, body: '{"status":"ready"}' };

export function liveness(): HealthAnswer {
  return LIVE;
}

export function readiness(checks: HealthCheck[], verbose: boolean): HealthAnswer {
  const ok = checks.every((c) => c.ok);
  if (!verbose) {
    if (ok) return READY;
    const failing = checks.find((c) => !c.ok)!;
    return { status: 503, body: JSON.stringify({ status: 'not_ready', reason: failing.name, detail: failing.detail }) };
  }
  return {
    status: ok ? 200 : 503,
    body: JSON.stringify({ status: ok ? 'ready' : 'not_ready', checks: checks.map((c) => ({ name: c.name, status: c.ok ? 'pass' : 'fail', detail: c.ok ? undefined : c.detail })) }),
  };
}
