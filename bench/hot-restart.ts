// Hot restart (E7) measured: a lone instance under a steady client load is hot restarted N times,
// one process and then two workers per generation; beside it, the same load through a stop and a
// start of the instance (SIGTERM, wait for the exit, start again), as a service manager restarts a
// process without hot restart. Reports, per restart, the time from the trigger to the new
// generation serving (the keeper's `took_ms`, from its start to its `ready`) and to the admin
// address answering from it, and the requests and connections that saw any error.
//   npm run build && node bench/hot-restart.ts [--restarts N]
// Loopback only, bounded in time and count.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { stringify } from 'yaml';
import { startMockUpstream, mockHeader } from '../test/support/mock-upstream.ts';
import { freePort } from '../test/support/haproxy.ts';
import { median } from './stats.ts';

const ROOT = resolve(import.meta.dirname, '..');
const MAIN = join(ROOT, 'dist', 'main.js');
const { values } = parseArgs({ options: { restarts: { type: 'string', default: '5' } } });
const RESTARTS = Math.min(20, Number(values.restarts));
/** Clients on pooled keep-alive connections, and clients that open a connection per request. */
const POOLED = 8;
const FRESH = 4;

interface Gateway {
  child: ChildProcess;
  lines: Record<string, unknown>[];
  waitFor(pred: (l: Record<string, unknown>) => boolean, ms?: number): Promise<Record<string, unknown>>;
}

function start(config: object): Gateway {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-bench-hr-'));
  const file = join(dir, 'sluice.yaml');
  writeFileSync(file, stringify(config));
  const child = spawn(process.execPath, [MAIN, '--config', file], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, SLUICE_CONFIG: '' } });
  const lines: Record<string, unknown>[] = [];
  const waiters = new Set<() => void>();
  let pending = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    pending += chunk;
    let nl;
    while ((nl = pending.indexOf('\n')) !== -1) {
      try {
        lines.push(JSON.parse(pending.slice(0, nl)) as Record<string, unknown>);
      } catch {
        // not a log line
      }
      pending = pending.slice(nl + 1);
    }
    for (const wake of waiters) wake();
  });
  const waitFor = (pred: (l: Record<string, unknown>) => boolean, ms = 30_000) =>
    new Promise<Record<string, unknown>>((resolvePromise, reject) => {
      let seen = 0;
      const check = () => {
        for (; seen < lines.length; seen++) if (pred(lines[seen]!)) return done(lines[seen]!);
      };
      const timer = setTimeout(() => {
        waiters.delete(check);
        reject(new Error('timed out waiting for a log line'));
      }, ms);
      const done = (line: Record<string, unknown>) => {
        clearTimeout(timer);
        waiters.delete(check);
        resolvePromise(line);
      };
      waiters.add(check);
      check();
    });
  return { child, lines, waitFor };
}

interface LoadResult {
  requests: number;
  failed: number;
  /** Connections that saw an error (a pooled client's failure counts its connection; a fresh client's request is one). */
  connectionsWithErrors: number;
  reasons: Map<string, number>;
}

function load(url: string) {
  const result: LoadResult = { requests: 0, failed: 0, connectionsWithErrors: 0, reasons: new Map() };
  let running = true;
  const fail = (error: string) => {
    result.failed++;
    result.connectionsWithErrors++;
    const key = error.replace(/\d+/g, 'N').slice(0, 80);
    result.reasons.set(key, (result.reasons.get(key) ?? 0) + 1);
  };
  const one = async (dispatcher: Agent, i: number) => {
    result.requests++;
    try {
      const res = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        dispatcher,
        headers: { 'content-type': 'application/json', ...mockHeader({ headersDelayMs: 5 + (i % 20) }) },
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
      });
      await res.body.text();
      if (res.statusCode !== 200) fail(`status ${res.statusCode}`);
    } catch (error) {
      fail((error as Error).message);
      await sleep(10);
    }
  };
  const pooled = Array.from({ length: POOLED }, async (_, c) => {
    const agent = new Agent({ keepAliveTimeout: 60_000, connections: 1 });
    for (let i = c; running; i++) await one(agent, i);
    await agent.close();
  });
  const fresh = Array.from({ length: FRESH }, async (_, c) => {
    for (let i = c; running; i++) {
      const agent = new Agent({ connections: 1 });
      await one(agent, i);
      await agent.close();
    }
  });
  return {
    result,
    async stop() {
      running = false;
      await Promise.all([...pooled, ...fresh]);
      return result;
    },
  };
}

/** Polls /server_info on new connections until `pred` holds; ms from `since`. */
async function until(adminUrl: string, pred: (info: { hot_restart?: { generation: number } | null }) => boolean, since: number): Promise<number> {
  for (;;) {
    const agent = new Agent({ connections: 1 });
    try {
      const res = await request(`${adminUrl}/server_info`, { dispatcher: agent });
      const info = (await res.body.json()) as { hot_restart?: { generation: number } | null };
      if (pred(info)) return Date.now() - since;
    } catch {
      // refused while nothing listens
    } finally {
      await agent.close();
    }
    if (Date.now() - since > 60_000) throw new Error('no answer within 60 s');
    await sleep(5);
  }
}

function config(mockUrl: string, ports: { proxy: number; admin: number }, workers: number, hotRestart: boolean): object {
  return {
    workers,
    ...(hotRestart ? { hot_restart: { enabled: true } } : {}),
    listeners: [
      { name: 'proxy', address: `127.0.0.1:${ports.proxy}`, role: 'proxy' },
      { name: 'admin', address: `127.0.0.1:${ports.admin}`, role: 'admin' },
    ],
    providers: [{ name: 'up', type: 'openai', base_url: `${mockUrl}/v1` }],
    models: [{ name: 'm', provider: 'up' }],
    shutdown: { min_drain_secs: 0 },
    log: { level: 'info', access_log: false },
  };
}

const ms = (xs: number[]) => (xs.length ? `${Math.round(median(xs))} (${Math.round(Math.min(...xs))}-${Math.round(Math.max(...xs))})` : '-');

async function hotRestarts(mockUrl: string, workers: number): Promise<string> {
  const ports = { proxy: await freePort(), admin: await freePort() };
  const gw = start(config(mockUrl, ports, workers, true));
  await gw.waitFor((l) => l.event === 'ready');
  const adminUrl = `http://127.0.0.1:${ports.admin}`;
  const traffic = load(`http://127.0.0.1:${ports.proxy}`);
  await sleep(1500);
  const took: number[] = [];
  const serving: number[] = [];
  for (let n = 2; n < 2 + RESTARTS; n++) {
    const at = Date.now();
    gw.child.kill('SIGUSR2');
    const done = await gw.waitFor((l) => l.event === 'hot_restart_done' && l.to_generation === n, 60_000);
    took.push(Number(done.took_ms));
    serving.push(await until(adminUrl, (i) => i.hot_restart?.generation === n, at));
    await sleep(1500);
  }
  const r = await traffic.stop();
  gw.child.kill('SIGTERM');
  await new Promise((r2) => gw.child.once('exit', r2));
  return `| hot restart, ${workers === 1 ? 'one process' : `${workers} workers`} | ${RESTARTS} | ${ms(took)} | ${ms(serving)} | ${r.requests} | ${r.failed} | ${r.connectionsWithErrors} | ${[...r.reasons].map(([k, v]) => `${v}× ${k}`).join('; ') || '-'} |`;
}

async function stopAndStart(mockUrl: string): Promise<string> {
  const ports = { proxy: await freePort(), admin: await freePort() };
  let gw = start(config(mockUrl, ports, 1, false));
  await gw.waitFor((l) => l.event === 'ready');
  const adminUrl = `http://127.0.0.1:${ports.admin}`;
  const traffic = load(`http://127.0.0.1:${ports.proxy}`);
  await sleep(1500);
  const serving: number[] = [];
  for (let n = 0; n < RESTARTS; n++) {
    const at = Date.now();
    gw.child.kill('SIGTERM');
    // A service manager's stop timeout: under a steady load the window-less drain keeps serving (L5).
    const exited = await Promise.race([new Promise((r) => gw.child.once('exit', () => r(true))), sleep(5000).then(() => false)]);
    if (!exited) {
      gw.child.kill('SIGKILL');
      await new Promise((r) => gw.child.once('exit', r));
    }
    gw = start(config(mockUrl, ports, 1, false));
    serving.push(await until(adminUrl, () => true, at));
    await gw.waitFor((l) => l.event === 'ready');
    await sleep(1500);
  }
  const r = await traffic.stop();
  gw.child.kill('SIGKILL');
  return `| stop, then start (no hot restart) | ${RESTARTS} | - | ${ms(serving)} | ${r.requests} | ${r.failed} | ${r.connectionsWithErrors} | ${[...r.reasons].map(([k, v]) => `${v}× ${k}`).join('; ') || '-'} |`;
}

const mock = await startMockUpstream({ record: false });
const rows: string[] = [];
try {
  rows.push(await hotRestarts(mock.url, 1));
  rows.push(await hotRestarts(mock.url, 2));
  rows.push(await stopAndStart(mock.url));
} finally {
  await mock.close();
}
process.stdout.write(
  [
    `Hot restart under load: ${POOLED} clients on pooled keep-alive connections and ${FRESH} opening a connection per request, closed loops, 5-25 ms upstream latency; ${RESTARTS} restarts 1.5 s apart.`,
    '',
    '| how | restarts | trigger → new generation ready, ms: median (min-max) | trigger → admin answers from it, ms | requests | failed | connections with an error | reasons |',
    '|---|---|---|---|---|---|---|---|',
    ...rows,
    '',
  ].join('\n'),
);
