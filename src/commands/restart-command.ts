// `sluice restart`: asks the running gateway's admin API for a hot restart (E7), then follows
// /server_info until the new generation serves or the restart has failed, and says which.
import type { Config } from '../config/schema.ts';
import { redactUrl, redactUrlsIn } from '../config/redact-url.ts';
import { adminUrl } from './admin-client.ts';

interface Info {
  hot_restart: { generation: number; last: { result: string; reason: string | null; generation: number } | null } | null;
  pid?: number;
  version?: string;
}

export async function requestRestart(config: Config, options: { admin: string | undefined; token: string | undefined }): Promise<number> {
  const base = adminUrl(config, options.admin);
  const say = (line: string) => process.stdout.write(`${line}\n`);
  const fail = (line: string) => {
    process.stderr.write(`sluice restart: ${line}\n`);
    return 1;
  };
  if (!base) return fail('no admin listener in the config: name one with --admin URL');
  const token = options.token ?? config.admin.token;
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
  const info = async (): Promise<Info> => {
    const res = await fetch(`${base}/server_info`, { headers, signal: AbortSignal.timeout(5000) });
    if (!res.ok) throw new Error(`GET /server_info answered ${res.status}: ${await res.text()}`);
    return (await res.json()) as Info;
  };
  let before: Info;
  try {
    before = await info();
  } catch (error) {
    return fail(`cannot reach the admin API at ${redactUrl(base)}: ${redactUrlsIn((error as Error).message)}`);
  }
  const from = before.hot_restart?.generation;
  if (from === undefined) return fail('hot restart is not enabled in the running gateway (hot_restart.enabled: true, read at start)');
  /** The last attempt known before this one (a failed attempt keeps its generation number). */
  const seen = Math.max(from, before.hot_restart?.last?.generation ?? 0);
  const res = await fetch(`${base}/hot_restart`, { method: 'POST', headers, signal: AbortSignal.timeout(5000) }).catch((error: Error) => error);
  if (res instanceof Error) return fail(`POST /hot_restart failed: ${res.message}`);
  if (res.status !== 202) return fail(`POST /hot_restart answered ${res.status}: ${await res.text()}`);
  say(`hot restart requested: generation ${from} (pid ${before.pid ?? '?'}) serves now`);
  const deadline = Date.now() + (config.hot_restart.start_timeout_secs + 15) * 1000;
  while (Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    const now = await info().catch(() => undefined);
    const hot = now?.hot_restart;
    if (!hot) continue;
    if (hot.generation > from) {
      say(`generation ${hot.generation} (pid ${now.pid ?? '?'}, version ${now.version ?? '?'}) serves; generation ${from} drains`);
      return 0;
    }
    if (hot.last && hot.last.generation > seen && hot.last.result !== 'success') return fail(`generation ${hot.last.generation} did not take over (${hot.last.result}): ${hot.last.reason ?? ''}; generation ${from} keeps serving`);
  }
  return fail(`no new generation served within ${config.hot_restart.start_timeout_secs + 15} s; see the gateway's log`);
}
