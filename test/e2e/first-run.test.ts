// What a new user meets in the first hour (issue 12): the wrong Node.js, worker processes that cannot
// start, Ctrl-C on a terminal, readable logs on a terminal. Every test runs the built program.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { MAIN, ROOT, startGateway, type GatewayProcess } from '../support/gateway-process.ts';

const gateways: GatewayProcess[] = [];
after(async () => {
  await Promise.all(gateways.map((g) => g.stop()));
});

async function gateway(options: Parameters<typeof startGateway>[0]): Promise<GatewayProcess> {
  const gw = await startGateway(options);
  gateways.push(gw);
  return gw;
}

/** A module preloaded (`--import`) into every process; `body` runs only in worker processes. */
function workerPreload(body: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-preload-'));
  const file = join(dir, 'preload.mjs');
  writeFileSync(file, `if (process.env.SLUICE_WORKER) {\n${body}\n}\n`);
  return `--import=${pathToFileURL(file).href}`;
}

/** The first Node.js on this machine older than 24, if any (the system one often is). */
function oldNode(): string | undefined {
  for (const candidate of ['/usr/bin/node', '/usr/local/bin/node']) {
    if (!existsSync(candidate)) continue;
    const result = spawnSync(candidate, ['-p', 'process.versions.node'], { encoding: 'utf8' });
    const version = result.stdout?.trim();
    if (version && Number(version.split('.')[0]) < 24) return candidate;
  }
  return undefined;
}

describe('the Node.js version', () => {
  const node = oldNode();
  test('an older Node.js gets one clear line and exit 1, before anything is loaded', { skip: node ? false : 'no Node.js older than 24 on this machine' }, async () => {
    // With workers: before the check, the admin listener came up and the workers waited for ever, silently.
    const config = join(mkdtempSync(join(tmpdir(), 'sluice-test-')), 'sluice.yaml');
    writeFileSync(config, 'workers: 2\nlisteners:\n  - { name: proxy, address: "127.0.0.1:0", role: proxy }\n  - { name: admin, address: "127.0.0.1:0", role: admin }\n');
    for (const args of [['--config', config], ['--version'], []]) {
      const started = Date.now();
      const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        const child = spawn(node!, [MAIN, ...args], { cwd: ROOT, env: { ...process.env, SLUICE_CONFIG: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
        let stdout = '';
        let stderr = '';
        child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
        child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        child.on('close', (code) => {
          clearTimeout(timer);
          resolve({ code, stdout, stderr });
        });
      });
      assert.equal(result.code, 1, `exit code for ${args.join(' ')}; stderr: ${result.stderr}`);
      assert.equal(result.stdout, '', 'nothing starts: no listener line');
      assert.match(result.stderr, /^Sluice needs Node\.js 24 or later .*; this is \d+\.\d+\.\d+\n$/);
      assert.ok(Date.now() - started < 10_000);
    }
  });
});

describe('worker processes that do not start', () => {
  test('a worker that never answers is killed after the start timeout; the start fails with a reason, exit 1', async () => {
    // The preload never lets the worker's own code run: it is alive but silent, as a worker on a
    // wrong Node.js was.
    const gw = await gateway({
      config: { workers: 2 },
      env: { NODE_OPTIONS: workerPreload('setInterval(() => {}, 1000); await new Promise(() => {});'), SLUICE_WORKER_START_TIMEOUT_SECS: '2' },
      waitReady: false,
    });
    const exit = await Promise.race([gw.exited, new Promise<undefined>((r) => setTimeout(r, 20_000))]);
    assert.ok(exit, `the supervisor must not wait for ever; stdout:\n${gw.stdout()}`);
    assert.equal(exit.code, 1);
    const timeout = gw.logs.find((l) => l.event === 'worker_start_timeout');
    assert.ok(timeout, gw.stdout());
    assert.equal(timeout.level, 'error');
    assert.equal(timeout.answered, false);
    assert.match(String(timeout.msg), /did not answer within 2 s/);
    const failed = gw.logs.find((l) => l.event === 'start_failed');
    assert.ok(failed, gw.stdout());
    assert.match(String(failed.msg), /worker \d could not start: it did not answer within 2 s/);
    assert.ok(!gw.logs.some((l) => l.event === 'ready'));
  });

  test('a worker that exits during its start: the start fails with its exit code, exit 1', async () => {
    const gw = await gateway({
      config: { workers: 2 },
      env: { NODE_OPTIONS: workerPreload('process.stderr.write("preload: refusing to start\\n"); process.exit(3);') },
      waitReady: false,
    });
    const exit = await Promise.race([gw.exited, new Promise<undefined>((r) => setTimeout(r, 20_000))]);
    assert.ok(exit, `the supervisor must not wait for ever; stdout:\n${gw.stdout()}`);
    assert.equal(exit.code, 1);
    const failed = gw.logs.find((l) => l.event === 'start_failed');
    assert.ok(failed, gw.stdout());
    assert.match(String(failed.msg), /worker \d exited during start \(code 3, signal null\)/);
    assert.match(gw.stderr(), /preload: refusing to start/);
  });

  test('a restarted worker that hangs is killed and restarted with back-off, each step logged', async () => {
    // The first start of each slot succeeds; later ones (restarts) hang before the worker's code runs.
    const dir = mkdtempSync(join(tmpdir(), 'sluice-marks-'));
    const gw = await gateway({
      config: { workers: 2 },
      env: {
        NODE_OPTIONS: workerPreload(`
          const { existsSync, writeFileSync } = await import('node:fs');
          const mark = ${JSON.stringify(dir)} + '/slot-' + process.env.SLUICE_WORKER;
          if (existsSync(mark)) { setInterval(() => {}, 1000); await new Promise(() => {}); }
          writeFileSync(mark, '');`),
        SLUICE_WORKER_START_TIMEOUT_SECS: '1',
      },
    });
    const info = (await (await fetch(`${gw.adminUrl}/server_info`)).json()) as { workers: { worker: number; pid: number }[] };
    process.kill(info.workers[0]!.pid, 'SIGKILL');
    const died = await gw.waitForLog((l) => l.event === 'worker_exited' && l.worker === 1 && l.signal === 'SIGKILL');
    assert.equal(died.during_start, undefined, 'it was serving');
    const timeout = await gw.waitForLog((l) => l.event === 'worker_start_timeout' && l.worker === 1, 15_000);
    assert.equal(timeout.level, 'error');
    const again = await gw.waitForLog((l) => l.event === 'worker_exited' && l.worker === 1 && l.during_start === true, 15_000);
    assert.match(String(again.reason), /did not answer within 1 s/);
    assert.ok(Number(again.restart_in_ms) > Number(died.restart_in_ms), `back-off grows: ${String(died.restart_in_ms)} then ${String(again.restart_in_ms)}`);
    assert.equal(gw.child.exitCode, null, 'the supervisor keeps serving with the other worker');
  });
});
