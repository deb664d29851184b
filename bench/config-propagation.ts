// Config propagation from etcd (issue 14) measured: three gateways on one etcd (started here on
// loopback ports), a client load on each; through the admin API of one of them, in turn, a model
// is added and a client key rotated, again and again. For each change and each gateway: the time
// from sending the write to that gateway serving it (the new model answering, the new key
// accepted and the old one refused), probed every 2 ms. Reports p50, p99 and max, and the load's
// failed requests (expected: none).
//   npm run build && node bench/config-propagation.ts [--changes N] [--workers W] [--clients C]
// Loopback only, bounded in count (at most 200 changes).
import { parseArgs } from 'node:util';
import { hash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { startEtcd } from '../test/support/etcd.ts';
import { startGateway, type GatewayProcess } from '../test/support/gateway-process.ts';
import { median } from './stats.ts';

const { values } = parseArgs({ options: { changes: { type: 'string', default: '60' }, workers: { type: 'string', default: '1' }, clients: { type: 'string', default: '4' } } });
const CHANGES = Math.min(200, Number(values.changes));
const WORKERS = Number(values.workers);
const TOKEN = 'bench-admin-token-0123456789';
const LOAD_KEY = 'sk-bench-load-0123456789';
const PREFIX = '/bench/';
/** Concurrent clients per gateway, on keep-alive connections. */
const CLIENTS = Math.min(16, Number(values.clients));

const agent = new Agent({ keepAliveTimeout: 30_000, connections: 64 });

async function chat(gw: GatewayProcess, model: string, key: string): Promise<number> {
  const res = await request(`${gw.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    dispatcher: agent,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
  });
  await res.body.text();
  return res.statusCode;
}

async function admin(gw: GatewayProcess, method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
  const res = await request(`${gw.adminUrl}${path}`, {
    method: method as 'PUT',
    dispatcher: agent,
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.body.text();
  if (res.statusCode >= 300) throw new Error(`${method} ${path}: ${res.statusCode} ${text}`);
  return JSON.parse(text) as Record<string, unknown>;
}

/** Milliseconds from `since` until `probe` holds, probing every 2 ms (30 s at most). */
async function until(since: number, probe: () => Promise<boolean>): Promise<number> {
  const deadline = since + 30_000;
  while (!(await probe())) {
    if (performance.now() > deadline) throw new Error('not served within 30 s');
    await sleep(2);
  }
  return performance.now() - since;
}

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

const etcd = await startEtcd();
await etcd.put(`${PREFIX}providers/echo`, JSON.stringify({ type: 'echo' }));
await etcd.put(`${PREFIX}models/base`, JSON.stringify({ provider: 'echo' }));
await etcd.put(`${PREFIX}keys/load`, JSON.stringify({ key_sha256: hash('sha256', LOAD_KEY, 'base64') }));
const config = {
  workers: WORKERS,
  log: { access_log: false },
  admin: { token: TOKEN },
  etcd: { endpoints: [etcd.endpoint], prefix: PREFIX },
  shutdown: { min_drain_secs: 0 },
};
const gateways = await Promise.all([0, 1, 2].map(() => startGateway({ config })));
let loading = true;
const loadResult = { requests: 0, failed: 0 };
const load = gateways.flatMap((gw) =>
  Array.from({ length: CLIENTS }, async () => {
    while (loading) {
      loadResult.requests++;
      const status = await chat(gw, 'base', LOAD_KEY).catch(() => 0);
      if (status !== 200) loadResult.failed++;
    }
  }),
);

const modelTimes: number[] = [];
const keyTimes: number[] = [];
try {
  let key = String((await admin(gateways[0]!, 'POST', '/config/keys', { name: 'team' })).key);
  for (let i = 0; i < CHANGES; i++) {
    const writer = gateways[i % 3]!;
    const since = performance.now();
    if (i % 2 === 0) {
      const name = `added-${i}`;
      await admin(writer, 'PUT', `/config/models/${name}`, { provider: 'echo' });
      modelTimes.push(...(await Promise.all(gateways.map((gw) => until(since, async () => (await chat(gw, name, LOAD_KEY)) === 200)))));
    } else {
      const old = key;
      key = String((await admin(writer, 'POST', '/config/keys/team/rotate')).key);
      const fresh = key;
      keyTimes.push(...(await Promise.all(gateways.map((gw) => until(since, async () => (await chat(gw, 'base', fresh)) === 200 && (await chat(gw, 'base', old)) === 401)))));
    }
  }
} finally {
  loading = false;
  await Promise.all(load);
  await Promise.all(gateways.map((gw) => gw.stop()));
  await etcd.close();
  await agent.close();
}

const row = (what: string, xs: number[]) =>
  `| ${what} | ${xs.length} | ${median(xs).toFixed(1)} | ${percentile(xs, 99).toFixed(1)} | ${Math.max(...xs).toFixed(1)} |`;
const all = [...modelTimes, ...keyTimes];
console.log(`config propagation: 3 gateways (workers: ${WORKERS}) on one etcd, ${CHANGES} changes through the admin API in turn, ${CLIENTS} clients per gateway`);
console.log('| change | samples (change × gateway) | p50 ms | p99 ms | max ms |');
console.log('|---|---:|---:|---:|---:|');
console.log(row('model added', modelTimes));
console.log(row('key rotated (new served, old refused)', keyTimes));
console.log(row('all', all));
console.log(`load meanwhile: ${loadResult.requests} requests, ${loadResult.failed} failed`);
process.exit(loadResult.failed === 0 ? 0 : 1);
