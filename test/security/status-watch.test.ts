// Issue 24, defect 11: `sluice status` quit after 10 s ("lost the connection … no answer within
// 10 s") on an idle gateway and during a drain, because its connect timeout also limited the event
// stream. Here it follows the built program at the default settings (a 30 s drain window) for about
// a minute: idle first, then a whole drain, and exits 0 with the gateway.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { setTimeout as delay } from 'node:timers/promises';
import { MAIN, ROOT, startGateway } from '../support/gateway-process.ts';

const TOKEN = 'status-watch-token-0123456789abcdef';
/** Longer than the 10 s the stream used to last. */
const IDLE_WATCH_MS = 25_000;

test('sluice status (plain lines, through a pipe) follows an idle gateway for 25 s, then its whole drain at the default 30 s window, and exits 0 with it', async () => {
  const gw = await startGateway({ config: { providers: [{ name: 'echo', type: 'echo' }], models: [{ name: 'm', provider: 'echo' }], admin: { token: TOKEN } } });
  const child = spawn(process.execPath, [MAIN, 'status', '--admin', gw.adminUrl, '--token', TOKEN], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (err += c));
  const startedAt = Date.now();
  const exited = new Promise<{ code: number | null; at: number }>((resolve) => child.on('exit', (code) => resolve({ code, at: Date.now() })));
  try {
    // Watching an idle gateway: nothing to wait for but the time itself.
    const watched = new AbortController();
    const early = await Promise.race([exited, delay(IDLE_WATCH_MS, undefined, { signal: watched.signal })]);
    watched.abort();
    assert.equal(early, undefined, `sluice status exited after ${early ? early.at - startedAt : 0} ms of an idle gateway:\n${out}${err}`);
    assert.match(out, /serving, ready/);
    gw.signal('SIGTERM');
    const gateway = await gw.exited;
    assert.equal(gateway.code, 0);
    const exit = await exited;
    assert.equal(exit.code, 0, `${out}${err}`);
    assert.ok(exit.at - gateway.at < 2000, `sluice status exited ${exit.at - gateway.at} ms after the gateway`);
    assert.ok(exit.at - startedAt >= 55_000, `watched for ${exit.at - startedAt} ms`);
    assert.equal(err, '');
    assert.match(out, /drain started at \+0\.0 s \(SIGTERM\)/);
    // The drain's progress, all along the window (at most every 2 s, so at least a dozen lines).
    const progress = out.match(/draining: window \d+\.\d s of 30\.0 s/g) ?? [];
    assert.ok(progress.length >= 12, `${progress.length} progress lines:\n${out}`);
    assert.match(out, /window over at \+30\.\d s/);
    assert.match(out, /listeners closed at \+/);
    assert.match(out.trim().split('\n').at(-1)!, /exited: code 0 after a drain of 3\d\.\d s$/);
  } finally {
    child.kill('SIGKILL');
    await gw.stop();
  }
});
