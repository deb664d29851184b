// What a new user meets in the first hour (issue 12): the wrong Node.js, worker processes that cannot
// start, Ctrl-C on a terminal, readable logs on a terminal. Every test runs the built program.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { MAIN, ROOT, eventually, metricValue, scrape, startGateway, writeConfig, type GatewayProcess, type LogLine } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream } from '../support/mock-upstream.ts';
import { httpRequest, postJson } from '../support/http.ts';
import { requireTool } from '../support/system-tool.ts';

const gateways: GatewayProcess[] = [];
let mock: MockUpstream | undefined;
after(async () => {
  await Promise.all(gateways.map((g) => g.stop()));
  await mock?.close();
});

async function upstream(): Promise<MockUpstream> {
  mock ??= await startMockUpstream();
  return mock;
}

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
        // Short, but not so short that a first start on a busy machine (CI) misses it.
        SLUICE_WORKER_START_TIMEOUT_SECS: '3',
      },
    });
    const info = (await (await fetch(`${gw.adminUrl}/server_info`)).json()) as { workers: { worker: number; pid: number }[] };
    process.kill(info.workers[0]!.pid, 'SIGKILL');
    const died = await gw.waitForLog((l) => l.event === 'worker_exited' && l.worker === 1 && l.signal === 'SIGKILL');
    assert.equal(died.during_start, undefined, 'it was serving');
    const timeout = await gw.waitForLog((l) => l.event === 'worker_start_timeout' && l.worker === 1, 15_000);
    assert.equal(timeout.level, 'error');
    const again = await gw.waitForLog((l) => l.event === 'worker_exited' && l.worker === 1 && l.during_start === true, 15_000);
    assert.match(String(again.reason), /did not answer within 3 s/);
    assert.ok(Number(again.restart_in_ms) > Number(died.restart_in_ms), `back-off grows: ${String(died.restart_in_ms)} then ${String(again.restart_in_ms)}`);
    assert.equal(gw.child.exitCode, null, 'the supervisor keeps serving with the other worker');
  });
});

// ---------------------------------------------------------------------------------------------------
// A terminal: the gateway runs under `script` (util-linux), so its stdout is a pseudo-terminal and a
// Ctrl-C typed into it reaches the whole foreground process group, as on a developer's machine.

const script = requireTool('script', 'bsdutils');

interface Terminal {
  /** Everything written to the terminal so far, colours removed, CR LF as LF. */
  text(): string;
  /** Types into the terminal (e.g. "\x03" for Ctrl-C). */
  type(keys: string): void;
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  exited: Promise<{ code: number | null; at: number }>;
  /** Ends it: Ctrl-C twice (killing \`script\` alone would leave the gateway running: SIGHUP reloads it), then SIGKILL. */
  kill(): Promise<void>;
}

function inTerminal(args: string[], env: Record<string, string | undefined>): Terminal {
  // `script` runs the command with `$SHELL -c`: `exec` makes the gateway the terminal's foreground
  // process itself. Without it a shell that dies of the Ctrl-C (dash, CI's /bin/sh when SHELL is
  // unset) makes `script` report 130 whatever the gateway's own exit code was.
  const command = `exec ${[process.execPath, MAIN, ...args].map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ')}`;
  const child = spawn('script', ['-qfec', command, '/dev/null'], { cwd: ROOT, env: { ...process.env, SLUICE_CONFIG: '', NO_COLOR: undefined, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
  let raw = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (raw += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (raw += c));
  const exited = new Promise<{ code: number | null; at: number }>((resolve) => child.on('exit', (code) => resolve({ code, at: Date.now() })));
  const killer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  void exited.then(() => clearTimeout(killer));
  const text = () => raw.replace(/\x1b\[[0-9;]*m/g, '').replaceAll('\r\n', '\n');
  return {
    text,
    type: (keys) => child.stdin.write(keys),
    waitFor: (pattern, timeoutMs = 15_000) => eventually(() => text().match(pattern), timeoutMs, `${String(pattern)} on the terminal`) as Promise<RegExpMatchArray>,
    exited,
    kill: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.stdin.write('\x03');
      child.stdin.write('\x03');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 3000))]);
      child.kill('SIGKILL');
    },
  };
}

describe('Ctrl-C on a terminal', { skip: script.skip }, () => {
  const addresses = { SLUICE_PROXY_ADDRESS: '127.0.0.1:0', SLUICE_ADMIN_ADDRESS: '127.0.0.1:0', SLUICE_WORKERS: '2' };

  test('the embedded default stops at once (no window: D3), says so in words, and its lines are for people', async () => {
    const term = inTerminal([], addresses);
    try {
      await term.waitFor(/sluice is ready/);
      const typed = Date.now();
      term.type('\x03');
      const exit = await term.exited;
      assert.equal(exit.code, 0, term.text());
      // It used to keep the listeners open for 30 s with nothing in front of them.
      assert.ok(exit.at - typed < 5000, `exited ${exit.at - typed} ms after Ctrl-C`);
      const text = term.text();
      assert.match(text, /Ctrl-C: stopping gracefully, finishing what is in flight on 2 workers; press Ctrl-C again to stop now/);
      assert.match(text, /drain started: window over; nothing in flight/);
      const lines = text.split('\n').filter((l) => l.trim() !== '' && l.trim() !== '^C');
      for (const line of lines) assert.match(line.replace(/^\^C/, ''), /^\[\d\d:\d\d:\d\d\.\d{3}\] (INFO|WARN|ERROR|FATAL): /, `a readable line, not JSON: ${line}`);
      assert.match(text, /\[\d\d:\d\d:\d\d\.\d{3}\] INFO: \[worker 1\] drain_started: /);
    } finally {
      await term.kill();
    }
  });

  test('with work in flight: the drain says what it waits for, and a second Ctrl-C stops now (exit 1)', async () => {
    const up = await upstream();
    const config = writeConfig({
      workers: 1,
      providers: [{ name: 'up', type: 'openai', base_url: `${up.url}/v1`, api_key: 'sk-up' }],
      models: [{ name: 'm', provider: 'up' }],
      shutdown: { min_drain_secs: 0, progress_log_secs: 0.5 },
    });
    const term = inTerminal(['--config', config], {});
    try {
      const [, proxy] = await term.waitFor(/listening on (127\.0\.0\.1:\d+) \(proxy\)/);
      const [, admin] = await term.waitFor(/listening on (127\.0\.0\.1:\d+) \(admin\)/);
      await term.waitFor(/sluice is ready/);
      const pending = postJson(`http://${proxy}/v1/chat/completions`, { model: 'm', messages: [] }, mockHeader({ neverRespond: true })).catch((e: Error) => e);
      await eventually(async () => (JSON.parse((await httpRequest(`http://${admin}/server_info`)).body) as { in_flight: number }).in_flight === 2, 5000, 'the request in flight (and this one)');
      term.type('\x03');
      await term.waitFor(/Ctrl-C: stopping gracefully, finishing what is in flight; press Ctrl-C again to stop now/);
      await term.waitFor(/still draining: window over; waiting for 1 request, 0 streams, 0 sessions/);
      const typed = Date.now();
      term.type('\x03');
      const exit = await term.exited;
      assert.equal(exit.code, 1, term.text());
      assert.ok(exit.at - typed < 3000, `exited ${exit.at - typed} ms after the second Ctrl-C`);
      const answer = await pending;
      assert.ok(!(answer instanceof Error), String(answer));
      assert.equal(answer.status, 503);
    } finally {
      await term.kill();
    }
  });

  test('log.format: json keeps JSON lines on a terminal', async () => {
    const config = writeConfig({ workers: 1, providers: [{ name: 'echo', type: 'echo' }], models: [{ name: 'echo', provider: 'echo' }], log: { format: 'json' }, shutdown: { min_drain_secs: 0 } });
    const term = inTerminal(['--config', config], {});
    try {
      await term.waitFor(/sluice is ready/);
      term.type('\x03');
      assert.equal((await term.exited).code, 0);
      const lines = term.text().split('\n').map((l) => l.replace(/^\^C/, '')).filter((l) => l.trim() !== '');
      assert.ok(lines.length >= 4);
      for (const line of lines) assert.doesNotThrow(() => JSON.parse(line), line);
    } finally {
      await term.kill();
    }
  });
});

describe('log.format', () => {
  test('pretty through a pipe: readable, uncoloured, whole lines even with workers writing at once; auto through a pipe stays JSON', async () => {
    const gw = await gateway({
      config: { workers: 2, providers: [{ name: 'echo', type: 'echo' }], models: [{ name: 'echo', provider: 'echo' }], log: { format: 'pretty' } },
      waitReady: false,
    });
    await eventually(() => gw.stdout().includes('sluice is ready'), 15_000, 'ready');
    const port = /listening on 127\.0\.0\.1:(\d+) \(proxy\)/.exec(gw.stdout())![1];
    // 200 requests, 8 at a time, spread over both workers: access lines written concurrently.
    let sent = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (sent < 200) {
          sent++;
          const res = await postJson(`http://127.0.0.1:${port}/v1/chat/completions`, { model: 'echo', messages: [{ role: 'user', content: 'x'.repeat(200) }] });
          assert.equal(res.status, 200);
        }
      }),
    );
    await eventually(() => gw.stdout().split('\n').filter((l) => l.includes(' access')).length >= 200, 10_000, '200 access lines');
    const lines = gw.stdout().split('\n').filter((l) => l !== '');
    assert.ok(!gw.stdout().includes('\x1b['), 'no colours through a pipe');
    for (const line of lines) {
      assert.match(line, /^\[\d\d:\d\d:\d\d\.\d{3}\] (INFO|WARN|ERROR|FATAL): (\[worker \d\] )?[a-z_]+(: | |$)/, `a readable line: ${line}`);
      // Whole: the fields that follow the message are one complete JSON object, ending the line.
      const fields = line.indexOf(' {');
      if (fields !== -1) assert.doesNotThrow(() => JSON.parse(line.slice(fields + 1)), `a whole line: ${line}`);
    }
    assert.ok(lines.some((l) => /^\[[\d:.]+\] INFO: \[worker [12]\] access/.test(l)), 'access lines from the workers');

    const json = await gateway({ config: { workers: 1, providers: [{ name: 'echo', type: 'echo' }], models: [{ name: 'echo', provider: 'echo' }] } });
    assert.ok(json.logs.length > 0 && json.logs.every((l) => l.event !== 'unparsed'), 'auto (the default) writes JSON to a pipe');
  });
});

// ---------------------------------------------------------------------------------------------------

describe('drain progress with workers', () => {
  test('O1: the supervisor reports the group: in-flight, waiting_for, draining workers, probes counted, exit lines in order', async () => {
    const up = await upstream();
    const gw = await gateway({
      config: {
        workers: 2,
        providers: [{ name: 'up', type: 'openai', base_url: `${up.url}/v1`, api_key: 'sk-up' }],
        models: [{ name: 'm', provider: 'up' }],
        // A window long enough that the worker without the stream is still there when the probes
        // are counted: the supervisor sums the workers alive at each progress line.
        shutdown: { min_drain_secs: 3, progress_log_secs: 0.5 },
      },
    });
    const before = up.received.length;
    const stream = fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...mockHeader({ chunks: 60, sseIntervalMs: 100 }) },
      body: JSON.stringify({ model: 'm', stream: true, messages: [] }),
    }).then((res) => res.text());
    await eventually(() => up.received.length > before, 5000, 'the stream upstream');
    // (The supervisor counts this /server_info request too.)
    await eventually(async () => (JSON.parse((await httpRequest(`${gw.adminUrl}/server_info`)).body) as { in_flight: number }).in_flight === 2, 5000, 'the stream in flight');
    gw.signal('SIGTERM');
    const supervisor = (event: string) => (l: LogLine) => l.event === event && l.worker === undefined;
    const started = await gw.waitForLog(supervisor('drain_started'));
    assert.equal(started.in_flight, 1, 'the group holds one stream (the supervisor alone holds none)');
    assert.deepEqual(started.waiting_for, { window_secs_left: 3, requests: 0, streams: 1, sessions: 0, workers: 2 });

    const info = JSON.parse((await httpRequest(`${gw.adminUrl}/server_info`)).body) as { state: string; waiting_for: Record<string, number>; workers: { waiting_for: unknown }[] };
    assert.equal(info.state, 'draining');
    assert.equal(info.waiting_for.streams, 1);
    assert.equal(info.waiting_for.workers, 2);
    assert.equal(info.workers.filter((w) => w.waiting_for !== null).length, 2);
    const metrics = await scrape(gw);
    assert.equal(metricValue(metrics, 'sluice_workers', { state: 'draining' }), 2);
    assert.equal(metricValue(metrics, 'sluice_workers', { state: 'ready' }) ?? 0, 0);

    // Probes on fresh connections, as a balancer's health checks: counted, not a line each.
    for (let i = 0; i < 12; i++) assert.equal((await httpRequest(`${gw.adminUrl}/readyz`)).status, 503);
    for (let i = 0; i < 4; i++) assert.equal((await httpRequest(`${gw.proxyUrl}/livez`)).status, 200);
    // A client's connection still gets its line.
    assert.equal((await postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: 'm', messages: [] })).status, 200);

    await gw.waitForLog((l) => supervisor('drain_progress')(l) && Number(l.probe_connections) >= 16, 10_000);
    const progress = await gw.waitForLog((l) => supervisor('drain_progress')(l) && (l.waiting_for as { window_secs_left: number }).window_secs_left === 0, 10_000);
    assert.equal(progress.in_flight, 1);
    assert.equal(progress.msg, 'still draining: window over; waiting for 0 requests, 1 stream, 0 sessions');

    assert.match(await stream, /data: \[DONE\]/);
    assert.equal((await gw.exited).code, 0);
    const accepted = gw.logs.filter((l) => l.event === 'connection_accepted_while_draining');
    // One line per client connection: this test's /server_info and /metrics, and the chat request;
    // none for the 16 probes.
    assert.equal(accepted.filter((l) => l.listener === 'admin').length, 2, JSON.stringify(accepted));
    assert.equal(accepted.filter((l) => l.listener === 'proxy').length, 1, JSON.stringify(accepted));
    // The supervisor's last word comes after its workers'.
    const exitAt = gw.logs.findIndex(supervisor('process_exit'));
    const workerExits = gw.logs.flatMap((l, i) => (l.event === 'worker_exited' ? [i] : []));
    assert.equal(workerExits.length, 2);
    assert.ok(workerExits.every((i) => i < exitAt), `process_exit (line ${exitAt}) after every worker_exited (${workerExits.join(', ')})`);
  });

  test('/server_info has waiting_for during a drain in one process, and null while serving', async () => {
    const up = await upstream();
    const gw = await gateway({
      config: { workers: 1, providers: [{ name: 'up', type: 'openai', base_url: `${up.url}/v1`, api_key: 'sk-up' }], models: [{ name: 'm', provider: 'up' }], shutdown: { min_drain_secs: 30 } },
    });
    const serving = JSON.parse((await httpRequest(`${gw.adminUrl}/server_info`)).body) as { waiting_for: unknown };
    assert.equal(serving.waiting_for, null);
    const pending = postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: 'm', messages: [] }, mockHeader({ neverRespond: true })).catch((e: Error) => e);
    // (The /server_info request is in flight itself: one process serves both listeners.)
    await eventually(async () => (JSON.parse((await httpRequest(`${gw.adminUrl}/server_info`)).body) as { in_flight: number }).in_flight === 2, 5000, 'in flight');
    gw.signal('SIGTERM');
    await gw.waitForLog((l) => l.event === 'drain_started');
    const draining = JSON.parse((await httpRequest(`${gw.adminUrl}/server_info`)).body) as { waiting_for: Record<string, number> };
    assert.equal(draining.waiting_for.requests, 2, 'the pending request and this one');
    assert.equal(draining.waiting_for.streams, 0);
    assert.equal(draining.waiting_for.workers, 0);
    assert.ok(draining.waiting_for.window_secs_left! > 25 && draining.waiting_for.window_secs_left! <= 30, JSON.stringify(draining));
    gw.signal('SIGTERM');
    await pending;
    assert.equal((await gw.exited).code, 1);
  });
});
