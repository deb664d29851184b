// `sluice status` against the built program: plain lines when its output is not a terminal, a
// redrawn screen with a progress bar on one (under `script`, a pseudo-terminal), exit 0 when the
// gateway exits after its drain, exit 1 with a message when it cannot follow it (refused, or a
// gateway gone silent: the read-idle timeout; its whole run across a drain at the default window
// is in test/security/status-watch.test.ts).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createServer, type AddressInfo } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { MAIN, ROOT, eventually, runSluice, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { requireTool } from '../support/system-tool.ts';

const TOKEN = 'status-cli-token-0123456789abcdef';
const script = requireTool('script', 'bsdutils');
let mock: MockUpstream;

before(async () => {
  mock = await startMockUpstream();
});
after(async () => {
  await mock?.close();
});

function config(extra: Record<string, unknown> = {}) {
  return {
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' }],
    models: [{ name: 'm', provider: 'up' }],
    admin: { token: TOKEN },
    shutdown: { min_drain_secs: 1.5 },
    ...extra,
  };
}

interface Running {
  output(): string;
  exited: Promise<{ code: number | null; at: number }>;
  kill(): void;
}

/** `sluice status` with its output on a pipe, or on a pseudo-terminal (`script`). */
function status(gw: GatewayProcess, terminal: boolean): Running {
  const args = [MAIN, 'status', '--admin', gw.adminUrl, '--token', TOKEN];
  const child = terminal
    ? spawn('script', ['-qfec', `exec ${[process.execPath, ...args].map((a) => `'${a}'`).join(' ')}`, '/dev/null'], { cwd: ROOT, env: { ...process.env, COLUMNS: '120', LINES: '40' }, stdio: ['pipe', 'pipe', 'pipe'] })
    : spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (out += c));
  const exited = new Promise<{ code: number | null; at: number }>((resolve) => child.on('exit', (code) => resolve({ code, at: Date.now() })));
  return { output: () => out, exited, kill: () => child.kill('SIGKILL') };
}

/** A stream of about 3.6 s through the gateway, past its 1.5 s window. */
async function longStream(gw: GatewayProcess): Promise<{ done: Promise<string> }> {
  const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...mockHeader({ chunks: 24, sseIntervalMs: 150 }) },
    body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  });
  assert.equal(res.status, 200);
  const done = res.text();
  done.catch(() => {});
  // In an object: an async function returning the promise itself would wait for it.
  return { done };
}

describe('sluice status follows a drain', () => {
  test('not a terminal: plain lines, one per change (the drain, its moments, its progress, the stream), no escape codes; exits 0 when the gateway exits', async () => {
    const gw = await startGateway({ config: config() });
    const watching = status(gw, false);
    try {
      await eventually(() => /serving, ready/.test(watching.output()), 10_000, 'the first line');
      const stream = await longStream(gw);
      gw.signal('SIGTERM');
      await stream.done;
      const gateway = await gw.exited;
      const exit = await watching.exited;
      assert.equal(exit.code, 0, watching.output());
      assert.equal(gateway.code, 0);
      assert.ok(exit.at - gateway.at < 2000, `sluice status exited ${exit.at - gateway.at} ms after the gateway`);
      const out = watching.output();
      assert.ok(!out.includes('\x1b'), 'no escape codes on a pipe');
      const lines = out.trim().split('\n');
      for (const line of lines) assert.match(line, /^\d\d:\d\d:\d\d /, line);
      assert.match(out, /draining, not ready/);
      assert.match(out, /drain started at \+0\.0 s \(SIGTERM\)/);
      assert.match(out, /draining: window \d\.\d s of 1\.5 s \(\d+%\).*1 stream.*; open: stream chat_completions \d+ s/);
      assert.match(out, /window over at \+1\.[45]/);
      assert.match(out, /listeners closed at \+/);
      assert.match(lines.at(-1)!, /exited: code 0 after a drain of \d+\.\d s$/);
      // One line per change, not per tick: the drain's progress at most every 2 s.
      assert.ok(lines.length < 12, `${lines.length} lines:\n${out}`);
      // docs/status.md shows such a run: each of its lines is one this run printed, numbers aside.
      const sample = /```\n *(\d\d:\d\d:\d\d serving[\s\S]*?)```/.exec(readFileSync(join(ROOT, 'docs', 'status.md'), 'utf8'))![1]!;
      const shape = (line: string) => line.trim().replace(/\d+(\.\d+)?/g, 'N');
      const printed = new Set(lines.map(shape));
      for (const line of sample.split('\n').filter((l) => l.trim() !== '')) assert.ok(printed.has(shape(line)), `docs/status.md: not printed: ${line}\nprinted:\n${out}`);
    } finally {
      watching.kill();
      await gw.stop();
    }
  });

  test('on a terminal: a redrawn screen with the drain window as a progress bar; exits 0 when the gateway exits', { skip: script.skip }, async () => {
    const gw = await startGateway({ config: config() });
    const watching = status(gw, true);
    try {
      await eventually(() => /serving/.test(watching.output()), 10_000, 'the first screen');
      const stream = await longStream(gw);
      gw.signal('SIGTERM');
      // The bar: a filled part (green background) and the rest (grey), then the percentage.
      await eventually(() => /\x1b\[42m *\x1b\[100m *\x1b\[0m \d+%  window \d\.\d s of 1\.5 s/.test(watching.output()), 5000, 'the progress bar');
      await stream.done;
      const exit = await watching.exited;
      assert.equal(exit.code, 0, watching.output());
      const out = watching.output();
      assert.ok(out.includes('\x1b[H'), 'the screen is redrawn in place');
      assert.match(out, /waiting for: window over; waiting for 0 requests, 1 stream, 0 sessions/);
      assert.match(out, /stream chat_completions m \(http1(, worker \d)?\)/);
      assert.match(out, /exited: code 0 after a drain of/);
      assert.ok(out.includes('\x1b[?25h'), 'the cursor is shown again');
      assert.equal((await gw.exited).code, 0);
    } finally {
      watching.kill();
      await gw.stop();
    }
  });
});

describe('sluice status cannot follow', () => {
  let gw: GatewayProcess;
  before(async () => {
    gw = await startGateway({ config: config() });
  });
  after(async () => gw?.stop());

  test('a refused token: exit 1, and says so', async () => {
    const result = await runSluice(['status', '--admin', gw.adminUrl, '--token', 'wrong-token-000000000000'], { env: { SLUICE_ADMIN_TOKEN: undefined } });
    assert.equal(result.code, 1);
    assert.match(result.stderr, /the admin token was refused \(401 invalid_admin_token\)/);
    assert.equal(result.stdout, '');
    assert.ok(!result.stderr.includes('wrong-token'), 'the token is not echoed');
  });

  test('no token at all: exit 1; nothing listening: exit 1 with the reason', async () => {
    const none = await runSluice(['status', '--admin', gw.adminUrl], { env: { SLUICE_ADMIN_TOKEN: undefined } });
    assert.equal(none.code, 1);
    assert.match(none.stderr, /refused/);
    // A port that was free a moment ago.
    const server = createServer().listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as AddressInfo).port;
    server.close();
    const closed = await runSluice(['status', '--admin', `http://127.0.0.1:${port}`, '--token', TOKEN]);
    assert.equal(closed.code, 1);
    assert.match(closed.stderr, new RegExp(`cannot reach the admin API at http://127\\.0\\.0\\.1:${port}: .*ECONNREFUSED`));
  });
});

test('a gateway that goes silent after its first update: exit 1 after the read-idle timeout (10 s), saying so; one that never answers: exit 1 after the connect timeout (10 s)', async () => {
  const snapshot = { at: new Date().toISOString(), version: '0.0.0', pid: 1, uptime_secs: 1, state: 'serving', ready: true, healthcheck_failed: false, config: { source: 'file', last_reload: null }, requests_per_sec: 0, in_flight: 0, in_flight_by: [], open_connections: 1, connections: [], listeners: [], targets: [], workers: [], drain: null, open_work: { total: 0, oldest: [] } };
  let firstUpdateAt = 0;
  const silent = createHttpServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`event: status\ndata: ${JSON.stringify(snapshot)}\n\n`);
    firstUpdateAt = Date.now();
    // Then nothing, with the connection kept open: a frozen gateway, or a path that drops packets.
  });
  const mute = createServer(() => {});
  for (const server of [silent, mute]) {
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
  }
  const url = (server: { address(): unknown }) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const [quiet, never] = await Promise.all([
      runSluice(['status', '--admin', url(silent), '--token', TOKEN], { timeoutMs: 30_000 }).then((r) => ({ ...r, at: Date.now() })),
      runSluice(['status', '--admin', url(mute), '--token', TOKEN], { timeoutMs: 30_000 }),
    ]);
    assert.equal(quiet.code, 1);
    assert.match(quiet.stdout, /serving, ready/);
    assert.match(quiet.stderr, new RegExp(`lost the connection to ${url(silent).replace(/\./g, '\\.')}: no update within 10 s`));
    assert.ok(quiet.at - firstUpdateAt >= 9500, `gave up ${quiet.at - firstUpdateAt} ms after the last update`);
    assert.equal(never.code, 1);
    assert.match(never.stderr, /cannot reach the admin API at .*: no answer within 10 s/);
  } finally {
    silent.closeAllConnections();
    silent.close();
    mute.close();
  }
});

test('admin.status_page: false: sluice status exits 1 and says the status stream is off', async () => {
  const gw = await startGateway({ config: config({ admin: { token: TOKEN, status_page: false } }) });
  try {
    const result = await runSluice(['status', '--admin', gw.adminUrl, '--token', TOKEN]);
    assert.equal(result.code, 1);
    assert.match(result.stderr, /admin\.status_page is off/);
  } finally {
    await gw.stop();
  }
});
