// Two builds of the gateway side by side, to measure what a change costs on the request path:
//   npm run build && node bench/ab.ts A_CHECKOUT [B_CHECKOUT] [--rounds N] [--seconds S]
// A_CHECKOUT is another checkout with its own `dist/` (a `git worktree` of the commit before the
// change, built, with `node_modules` beside it); B_CHECKOUT defaults to this one. Both gateways run the "production" config of
// bench/run.ts (client key, access log to a pipe, metrics) against one mock upstream, pinned to
// CPU 0, with wrk on CPU 1; rounds alternate A, B, B, A… so that a drift of the machine falls on
// both. Prints gateway CPU per request for each round, the per-round ratio B/A and its median.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { stringify } from 'yaml';
import { cpuTicks, median } from './stats.ts';
import { readyUrl } from './ready.ts';

const ROOT = resolve(import.meta.dirname, '..');
const { values, positionals } = parseArgs({ allowPositionals: true, options: { rounds: { type: 'string', default: '6' }, seconds: { type: 'string', default: '5' } } });
if (positionals.length < 1 || positionals.length > 2) {
  process.stderr.write('usage: node bench/ab.ts A_CHECKOUT [B_CHECKOUT] [--rounds N] [--seconds S]\n');
  process.exit(2);
}
const OTHER = resolve(positionals[0]!);
const THIS = resolve(positionals[1] ?? ROOT);
const ROUNDS = Number(values.rounds);
const SECONDS = Number(values.seconds);
const CLIENT_KEY = 'sk-bench-client-key';
const TICK_US = 1e6 / Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim() || 100);
const TMP = mkdtempSync(join(tmpdir(), 'sluice-ab-'));
const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
  rmSync(TMP, { recursive: true, force: true });
});

async function start(name: string, cwd: string, args: string[], urlFrom: (line: Record<string, unknown>) => string | undefined): Promise<{ pid: number; url: string }> {
  const child = spawn('taskset', ['-c', '0', process.execPath, ...args], { cwd, stdio: ['ignore', 'pipe', 'inherit'] });
  children.add(child);
  return { pid: child.pid!, url: await readyUrl(name, child, urlFrom) };
}

async function gateway(name: string, checkout: string, mockUrl: string): Promise<{ pid: number; url: string }> {
  const file = join(TMP, `${name}.yaml`);
  writeFileSync(
    file,
    stringify({
      workers: 1,
      listeners: [{ name: 'proxy', address: '127.0.0.1:0', role: 'proxy' }, { name: 'admin', address: '127.0.0.1:0', role: 'admin' }],
      providers: [{ name: 'mock', type: 'openai', base_url: `${mockUrl}/v1`, api_key: 'sk-upstream-bench' }],
      models: [{ name: 'bench', provider: 'mock' }],
      keys: [{ name: 'bench', key: CLIENT_KEY }],
      shutdown: { min_drain_secs: 0, max_drain_secs: 5 },
      log: { level: 'info', access_log: true },
    }),
  );
  let url: string | undefined;
  return start(name, checkout, ['dist/main.js', '--config', file], (l) => {
    if (l.event === 'listener_started' && l.listener === 'proxy') url = `http://${String(l.address)}`;
    return l.event === 'ready' ? url : undefined;
  });
}

function wrk(url: string, seconds: number): number {
  const lua = join(TMP, 'post.lua');
  writeFileSync(
    lua,
    `wrk.method = "POST"\nwrk.body = '{"model":"bench","messages":[{"role":"user","content":"hi"}]}'\nwrk.headers["content-type"] = "application/json"\nwrk.headers["authorization"] = "Bearer ${CLIENT_KEY}"\n`,
  );
  const out = spawnSync('taskset', ['-c', '1', 'wrk', '-t1', '-c32', `-d${seconds}s`, '-s', lua, `${url}/v1/chat/completions`], { encoding: 'utf8' });
  const match = /(\d+) requests in/.exec(out.stdout);
  if (!match || /Non-2xx/.test(out.stdout)) throw new Error(`wrk failed:\n${out.stdout}${out.stderr}`);
  return Number(match[1]);
}

const mock = await start('mock', ROOT, ['test/support/mock-upstream.ts', '--port', '0'], (l) => l.mock_upstream as string | undefined);
const targets = { A: await gateway('A', OTHER, mock.url), B: await gateway('B', THIS, mock.url) };
for (const t of Object.values(targets)) wrk(t.url, 1); // warm-up
const perRequest: Record<'A' | 'B', number[]> = { A: [], B: [] };
const ratios: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const order: ('A' | 'B')[] = round % 2 === 0 ? ['A', 'B'] : ['B', 'A'];
  const us: Partial<Record<'A' | 'B', number>> = {};
  for (const name of order) {
    const { pid, url } = targets[name];
    const before = cpuTicks(pid);
    const requests = wrk(url, SECONDS);
    us[name] = ((cpuTicks(pid) - before) * TICK_US) / requests;
    perRequest[name].push(us[name]!);
  }
  ratios.push(us.B! / us.A!);
  console.log(`round ${round + 1}: A ${us.A!.toFixed(1)} µs/req, B ${us.B!.toFixed(1)} µs/req, B/A ${(us.B! / us.A!).toFixed(3)}`);
}
console.log(`A (${OTHER}): median ${median(perRequest.A).toFixed(1)} µs/req`);
console.log(`B (${THIS}): median ${median(perRequest.B).toFixed(1)} µs/req`);
console.log(`B/A per round: median ${median(ratios).toFixed(3)} (min ${Math.min(...ratios).toFixed(3)}, max ${Math.max(...ratios).toFixed(3)})`);
process.exit(0);
