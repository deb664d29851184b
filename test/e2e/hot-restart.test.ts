// Hot restart (E7) at its edges, against the built program: a new generation that never becomes
// ready, one whose config is invalid, an old generation still draining at parent_shutdown_secs,
// state carried over, and the process a platform watches staying the same. The zero-loss run under
// load is test/serial/hot-restart.test.ts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { execFileSync, spawn } from 'node:child_process';
import { Agent, request } from 'undici';
import { stringify } from 'yaml';
import { MAIN, ROOT, eventually, metricValue, scrape, signalOwn, startGateway, writeConfig, type GatewayProcess, type LogLine } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream } from '../support/mock-upstream.ts';
import { requireTool } from '../support/system-tool.ts';

let mock: MockUpstream;
const gateways: GatewayProcess[] = [];
before(async () => {
  mock = await startMockUpstream({ record: false });
});
after(async () => {
  for (const gw of gateways) await stopAll(gw);
  await mock?.close();
});

function config(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    workers: 1,
    hot_restart: { enabled: true, start_timeout_secs: 20 },
    listeners: [
      { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
      { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
    ],
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }],
    models: [{ name: 'm', provider: 'up' }],
    shutdown: { min_drain_secs: 0 },
    ...extra,
  };
}

async function keeper(extra: Record<string, unknown> = {}, env: Record<string, string> = {}): Promise<GatewayProcess> {
  const gw = await startGateway({ config: config(extra), env });
  gateways.push(gw);
  return gw;
}

/** The keeper is SIGKILLed by `stop()`; its generations (their own process groups) are ended here. */
async function stopAll(gw: GatewayProcess): Promise<void> {
  for (const line of gw.logs) {
    const pid = line.event === 'hot_restart_started' ? Number(line.new_pid) : line.event === 'ready' && line.generation === 1 ? Number(line.pid) : 0;
    if (pid) signalOwn(pid, 'SIGKILL', gw.configFile);
  }
  await gw.stop();
}

interface Info {
  pid: number;
  version: string;
  healthcheck_failed: boolean;
  hot_restart: { generation: number; keeper_pid: number; last: { result: string; reason: string | null; generation: number } | null } | null;
}

/** /server_info on a new connection: a kept-alive one may still lead to the generation before. */
async function info(gw: GatewayProcess): Promise<Info> {
  const agent = new Agent();
  try {
    const res = await request(`${gw.adminUrl}/server_info`, { dispatcher: agent });
    return (await res.body.json()) as Info;
  } finally {
    await agent.close();
  }
}

async function chat(url: string, scenario: Parameters<typeof mockHeader>[0] = {}, stream = false): Promise<{ status: number; text: string }> {
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...mockHeader(scenario) },
    body: JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content: 'hi' }] }),
  });
  return { status: res.statusCode, text: await res.body.text() };
}

const done = (gw: GatewayProcess, generation: number) => gw.waitForLog((l) => l.event === 'hot_restart_done' && l.to_generation === generation, 30_000);
const failed = (gw: GatewayProcess, generation: number) => gw.waitForLog((l) => l.event === 'hot_restart_failed' && l.to_generation === generation, 30_000);

describe('hot restart (E7)', () => {
  test('SIGUSR2 to the keeper: a new generation serves on the same addresses, the old one drains and exits 0; the keeper stays', async () => {
    const gw = await keeper();
    const before = await info(gw);
    assert.equal(before.hot_restart?.generation, 1);
    assert.equal(before.hot_restart?.keeper_pid, gw.child.pid, 'the process started is the keeper');
    assert.notEqual(before.pid, gw.child.pid, 'the gateway runs in a generation beside it');
    gw.signal('SIGUSR2');
    const line = await done(gw, 2);
    assert.equal(line.from_generation, 1);
    const now = (await eventually(async () => {
      const i = await info(gw);
      return i.hot_restart?.generation === 2 ? i : undefined;
    }, 5000, 'generation 2 answering on the admin address'))!;
    assert.notEqual(now.pid, before.pid);
    assert.equal(now.hot_restart?.last?.result, 'success');
    assert.equal((await chat(gw.proxyUrl)).status, 200);
    const exited = await gw.waitForLog((l) => l.event === 'generation_exited' && l.exited_generation === 1, 15_000);
    assert.equal(exited.exit_code, 0);
    assert.equal(gw.child.exitCode, null, 'the keeper (the PID a platform watches) is still running');
    const metrics = await scrape(gw);
    assert.equal(metricValue(metrics, 'sluice_hot_restarts_total', { result: 'success' }), 1);
    assert.equal(metricValue(metrics, 'sluice_generation'), 2);
    // SIGTERM to the keeper drains the generation serving; the keeper exits with its code.
    gw.signal('SIGTERM');
    const exit = await gw.exited;
    assert.equal(exit.code, 0, gw.stdout().slice(-2000));
  });

  test('a new generation that never becomes ready is stopped after hot_restart.start_timeout_secs; the old one serves unchanged', async () => {
    // The preload hangs generation 2 before any of its code runs (alive, silent).
    const dir = mkdtempSync(join(tmpdir(), 'sluice-preload-'));
    const file = join(dir, 'hang.mjs');
    writeFileSync(file, `if (process.env.SLUICE_GENERATION === '2') { setInterval(() => {}, 1000); await new Promise(() => {}); }\n`);
    const gw = await keeper({ hot_restart: { enabled: true, start_timeout_secs: 2 } }, { NODE_OPTIONS: `--import=${pathToFileURL(file).href}` });
    const before = await info(gw);
    const started = Date.now();
    gw.signal('SIGUSR2');
    const line = await failed(gw, 2);
    assert.equal(line.result, 'timeout');
    assert.match(String(line.reason), /not ready within 2 s/);
    assert.ok(Date.now() - started < 10_000);
    await gw.waitForLog((l) => l.event === 'generation_exited' && l.exited_generation === 2, 10_000);
    const now = await info(gw);
    assert.equal(now.pid, before.pid, 'generation 1 still serves');
    assert.equal(now.hot_restart?.last?.result, 'timeout');
    assert.equal((await chat(gw.proxyUrl)).status, 200);
    assert.equal(metricValue(await scrape(gw), 'sluice_hot_restarts_total', { result: 'timeout' }), 1);
    // Idempotent while in progress, and possible again afterwards: a third generation takes over.
    gw.signal('SIGUSR2');
    await done(gw, 3);
  });

  test('a new generation with an invalid config exits; the old one keeps serving; `sluice restart` says why and exits 1', async () => {
    const gw = await keeper();
    const before = await info(gw);
    // The file on disk is now invalid (a key that does not exist).
    writeFileSync(gw.configFile, stringify({ ...config(), listeners: [{ name: 'proxy', address: '127.0.0.1:0', role: 'proxy' }, { name: 'admin', address: new URL(gw.adminUrl).host, role: 'admin' }], bogus: 1 }));
    const cli = await runCli(['restart', '--admin', gw.adminUrl]);
    const line = await failed(gw, 2);
    assert.equal(line.result, 'failed');
    assert.match(String(line.reason), /exited with code 1 before it was ready/);
    assert.equal(cli.code, 1, cli.stderr);
    assert.match(cli.stderr, /did not take over \(failed\).*generation 1 keeps serving/);
    const now = await info(gw);
    assert.equal(now.pid, before.pid);
    assert.equal((await chat(gw.proxyUrl)).status, 200);
    assert.ok(gw.stderr().includes('bogus'), 'the new generation said what is wrong with the config');
  });

  test('a new generation that took the sockets and then gives up hands the connections it accepted back: none is lost', async () => {
    // Generation 2's workers hang before their code runs: its supervisor has the sockets (and
    // accepts on them) but nobody to serve, until the start timeout ends it.
    const dir = mkdtempSync(join(tmpdir(), 'sluice-preload-'));
    const file = join(dir, 'hang-workers.mjs');
    writeFileSync(file, `if (process.env.SLUICE_GENERATION === '2' && process.env.SLUICE_WORKER) { setInterval(() => {}, 1000); await new Promise(() => {}); }\n`);
    // The start timeout leaves room for generation 2's supervisor to start and adopt the sockets on
    // a loaded machine (it accepts from then on): 3 s was not always enough in CI.
    const gw = await keeper({ workers: 2, hot_restart: { enabled: true, start_timeout_secs: 8 } }, { NODE_OPTIONS: `--import=${pathToFileURL(file).href}`, SLUICE_WORKER_START_TIMEOUT_SECS: '30' });
    // Clients that open a new connection for every request (nothing pooled to hide behind).
    let running = true;
    const results = { ok: 0, failed: [] as string[] };
    const clients = Array.from({ length: 4 }, async () => {
      while (running) {
        const agent = new Agent({ pipelining: 0 });
        try {
          const res = await request(`${gw.proxyUrl}/v1/chat/completions`, {
            method: 'POST',
            dispatcher: agent,
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
          });
          await res.body.text();
          if (res.statusCode === 200) results.ok++;
          else results.failed.push(`status ${res.statusCode}`);
        } catch (error) {
          results.failed.push((error as Error).message);
        } finally {
          await agent.close();
        }
      }
    });
    await eventually(() => results.ok >= 20, 10_000, 'the clients to be under way');
    gw.signal('SIGUSR2');
    const line = await failed(gw, 2);
    assert.equal(line.result, 'timeout');
    await gw.waitForLog((l) => l.event === 'generation_exited' && l.exited_generation === 2, 10_000);
    const okAtFailure = results.ok;
    await eventually(() => results.ok >= okAtFailure + 20, 10_000, 'more requests after the failed restart');
    running = false;
    await Promise.all(clients);
    assert.deepEqual(results.failed, []);
    const handedBack = /generation 2 gives up \(told by the keeper\); (\d+) connection\(s\) handed back/.exec(gw.stderr());
    assert.ok(handedBack, gw.stderr());
    assert.ok(Number(handedBack[1]) > 0, 'generation 2 had accepted connections (else this test shows nothing)');
  });

  test('parent_shutdown_secs ends an old generation still draining: its stream gets the L8 error event, it exits 1', async () => {
    const gw = await keeper({ shutdown: { min_drain_secs: 0, parent_shutdown_secs: 2 } });
    // A stream that would last 20 s.
    const stream = chat(gw.proxyUrl, { chunks: 20, sseIntervalMs: 1000 }, true);
    await eventually(async () => (await info(gw)) && gw.logs.some((l) => l.event === 'ready'), 2000);
    await new Promise((r) => setTimeout(r, 300));
    gw.signal('SIGUSR2');
    await done(gw, 2);
    const exited = await gw.waitForLog((l) => l.event === 'generation_exited' && l.exited_generation === 1, 15_000);
    assert.equal(exited.exit_code, 1, 'a forced end exits 1');
    const forced = gw.logs.find((l) => l.event === 'drain_forced' && l.generation === 1);
    assert.ok(forced, gw.stdout().slice(-3000));
    assert.equal(forced.reason, 'shutdown.parent_shutdown_secs');
    const { status, text } = await stream;
    assert.equal(status, 200);
    assert.match(text, /event: error/);
    assert.match(text, /"code":"gateway_shutdown"/);
    assert.equal((await chat(gw.proxyUrl)).status, 200, 'generation 2 serves');
  });

  test('a new generation whose config changes hot_restart says the keeper keeps its own settings', async () => {
    const gw = await keeper();
    writeFileSync(gw.configFile, stringify({ ...config({ hot_restart: { enabled: true, start_timeout_secs: 7 } }), listeners: [{ name: 'proxy', address: new URL(gw.proxyUrl).host, role: 'proxy' }, { name: 'admin', address: new URL(gw.adminUrl).host, role: 'admin' }] }));
    gw.signal('SIGUSR2');
    await done(gw, 2);
    const line = await gw.waitForLog((l) => l.event === 'config_reload_partial' && l.generation === 2, 5000);
    // (Not `key`: the logger redacts fields of that name, which may hold credentials.)
    assert.equal(line.setting, 'hot_restart');
  });

  test('state carries over: a failed health check stays failed in the next generation (readiness 503)', async () => {
    const gw = await keeper();
    const res = await request(`${gw.adminUrl}/healthcheck/fail`, { method: 'POST' });
    await res.body.text();
    gw.signal('SIGUSR2');
    await done(gw, 2);
    const now = (await eventually(async () => {
      const i = await info(gw);
      return i.hot_restart?.generation === 2 ? i : undefined;
    }, 5000, 'generation 2'))!;
    assert.equal(now.healthcheck_failed, true);
    const ready = await request(`${gw.adminUrl}/readyz`);
    await ready.body.text();
    assert.equal(ready.statusCode, 503);
  });

  test('with workers, the whole group is replaced: every new worker serves before the old group drains', async () => {
    const gw = await keeper({ workers: 2 });
    gw.signal('SIGUSR2');
    await done(gw, 2);
    // Lines of different processes reach the pipe in batches: their own times tell the order.
    const at = (l: LogLine) => Date.parse(String(l.time));
    const retiring = await gw.waitForLog((l) => l.event === 'generation_retiring' && l.generation === 1);
    const ready = await Promise.all([1, 2].map((w) => gw.waitForLog((l) => l.event === 'worker_ready' && l.generation === 2 && l.worker === w)));
    for (const line of ready) assert.ok(at(line) <= at(retiring), `worker ${String(line.worker)} of generation 2 was ready (${String(line.time)}) before generation 1 began to drain (${String(retiring.time)})`);
    for (let i = 0; i < 10; i++) assert.equal((await chat(gw.proxyUrl)).status, 200);
    const exited = await gw.waitForLog((l) => l.event === 'generation_exited' && l.exited_generation === 1, 15_000);
    assert.equal(exited.exit_code, 0);
  });

  test('without hot_restart: SIGUSR2 is ignored with a warning (not the default action, which ends the process); POST /hot_restart is a 409', async () => {
    const gw = await startGateway({ config: { ...config(), hot_restart: { enabled: false } } });
    gateways.push(gw);
    gw.signal('SIGUSR2');
    await gw.waitForLog((l: LogLine) => l.event === 'hot_restart_unavailable');
    const res = await request(`${gw.adminUrl}/hot_restart`, { method: 'POST' });
    const body = (await res.body.json()) as { error: { code: string } };
    assert.equal(res.statusCode, 409);
    assert.equal(body.error.code, 'hot_restart_disabled');
    assert.equal(gw.child.exitCode, null);
  });
});

function runCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [MAIN, ...args], { cwd: ROOT, env: { ...process.env, SLUICE_CONFIG: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('worker recycling (workers_recycle, the same machinery)', () => {
  test('a worker past max_requests is replaced: its replacement serves first, then it drains; nothing is lost, a stream across it completes', async () => {
    const gw = await startGateway({ config: { ...config(), hot_restart: { enabled: false }, workers: 2, workers_recycle: { max_requests: 40 } } });
    gateways.push(gw);
    const pool = new Agent({ keepAliveTimeout: 30_000, connections: 4 });
    let running = true;
    const results = { ok: 0, failed: [] as string[] };
    const clients = Array.from({ length: 4 }, async (_, c) => {
      for (let i = 0; running; i++) {
        try {
          const res = await request(`${gw.proxyUrl}/v1/chat/completions`, {
            method: 'POST',
            dispatcher: pool,
            headers: { 'content-type': 'application/json', ...mockHeader({ headersDelayMs: 10 + ((i * 7 + c) % 40) }) },
            body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }] }),
          });
          const text = await res.body.text();
          if (res.statusCode === 200) results.ok++;
          else results.failed.push(`status ${res.statusCode}: ${text.slice(0, 100)}`);
        } catch (error) {
          results.failed.push((error as Error).message);
        }
      }
    });
    // A stream that lasts across the recycling (4 s).
    const stream = chat(gw.proxyUrl, { chunks: 8, sseIntervalMs: 500 }, true);
    const recycling = await gw.waitForLog((l) => l.event === 'worker_recycling', 20_000);
    assert.match(String(recycling.reason), /workers_recycle\.max_requests: 40/);
    const recycled = await gw.waitForLog((l) => l.event === 'worker_recycled' && l.worker === recycling.worker, 20_000);
    const replacementReady = gw.logs.find((l) => l.event === 'worker_ready' && l.worker === recycling.worker && l.worker_pid !== recycling.worker_pid);
    assert.ok(replacementReady, 'the replacement was ready before the old worker was told to drain');
    assert.ok(Date.parse(String(replacementReady.time)) <= Date.parse(String(recycled.time)));
    const exited = await gw.waitForLog((l) => l.event === 'worker_exited' && l.worker_pid === recycling.worker_pid, 20_000);
    assert.equal(exited.exit_code, 0);
    assert.equal(exited.recycled, true);
    running = false;
    await Promise.all(clients);
    await pool.close();
    assert.deepEqual(results.failed, []);
    const { status, text } = await stream;
    assert.equal(status, 200);
    assert.match(text, /data: \[DONE\]/);
    assert.doesNotMatch(text, /event: error/);
    assert.ok((metricValue(await scrape(gw), 'sluice_worker_recycles_total') ?? 0) >= 1);
  });
});

describe('hot restart under the platforms that watch one process (E7, D2)', () => {
  test('systemd-style (KillMode=control-group): SIGTERM to every process of the service at once drains once, exit 0', async () => {
    const gw = await keeper({ workers: 2 });
    gw.signal('SIGUSR2');
    await done(gw, 2);
    // A stream in flight, so that a forced drain (a second signal) would show.
    const stream = chat(gw.proxyUrl, { chunks: 6, sseIntervalMs: 300 }, true);
    await new Promise((r) => setTimeout(r, 300));
    // Every process of the service: the keeper, the generations, their workers (as systemd's cgroup kill does).
    const pids = new Set<number>([gw.child.pid!]);
    for (const l of gw.logs) for (const key of ['pid', 'worker_pid', 'new_pid']) if (typeof l[key] === 'number') pids.add(l[key]);
    // (Only those still running: generation 1 may have exited, and its PID gone to another process.)
    for (const pid of pids) signalOwn(pid, 'SIGTERM', gw.configFile);
    const exit = await gw.exited;
    assert.equal(exit.code, 0, gw.stdout().slice(-3000));
    assert.ok(!gw.logs.some((l) => l.event === 'drain_forced'), 'one signal, not two: nothing was forced');
    const { status, text } = await stream;
    assert.equal(status, 200);
    assert.match(text, /data: \[DONE\]/);
  });

  test('container-style: the keeper as PID 1 of its own PID namespace hot restarts, and drains on SIGTERM with exit 0', { skip: unshareSkip() }, async () => {
    // Started under `unshare --pid --fork` (the keeper is PID 1 there, as in a container).
    const file = writeConfig(config());
    const child = spawn('unshare', ['--pid', '--fork', '--kill-child', process.execPath, MAIN, '--config', file], { cwd: ROOT, env: { ...process.env, SLUICE_CONFIG: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
    const lines = () => out.split('\n').filter(Boolean).map((l) => JSON.parse(l) as LogLine);
    try {
      const ready = await eventually(() => lines().find((l) => l.event === 'ready'), 10_000, 'ready');
      const keeperLine = lines().find((l) => l.event === 'keeper_started')!;
      assert.equal(keeperLine.pid, 1, 'the keeper is PID 1');
      const proxy = `http://${String(lines().find((l) => l.event === 'listener_started' && l.listener === 'proxy')!.address)}`;
      assert.ok(ready);
      // SIGUSR2 to PID 1 from outside the namespace: to `unshare`'s child, the keeper.
      const keeperHostPid = Number(execFileSync('pgrep', ['-P', String(child.pid)], { encoding: 'utf8' }).trim().split('\n')[0]);
      process.kill(keeperHostPid, 'SIGUSR2');
      await eventually(() => lines().some((l) => l.event === 'hot_restart_done' && l.to_generation === 2), 15_000, 'hot restart done');
      assert.equal((await chat(proxy)).status, 200);
      process.kill(keeperHostPid, 'SIGTERM');
      const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
      assert.equal(code, 0, out.slice(-3000));
      assert.ok(lines().some((l) => l.event === 'keeper_exit' && l.exit_code === 0));
    } finally {
      child.kill('SIGKILL');
    }
  });
});

/**
 * `unshare` is util-linux's (on every Debian machine; required like any system tool in CI). A new
 * PID namespace also needs the privilege to make one: where the sandbox denies it, the test says
 * so and is skipped (a container runtime would need the same privilege).
 */
function unshareSkip(): string | false {
  const tool = requireTool('unshare', 'util-linux');
  if (tool.skip) return tool.skip;
  try {
    execFileSync('unshare', ['--pid', '--fork', 'true'], { stdio: 'ignore' });
    return false;
  } catch {
    return 'this machine does not allow a new PID namespace (unshare --pid: CAP_SYS_ADMIN)';
  }
}
