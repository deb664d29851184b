// D2: the image's exact ENTRYPOINT and CMD (parsed from deploy/Dockerfile, /app mapped to this
// checkout) run as PID 1 of a fresh PID namespace (unshare --pid --fork), as in a container; the
// Dockerfile's STOPSIGNAL is sent to it the way `docker stop -t` does (then SIGKILL at the
// timeout). The exec form drains: the stream in flight ends with [DONE], the exit code is 0. The
// control runs the same command in shell form (/bin/sh -c "…" as PID 1, what a shell-form
// ENTRYPOINT gives): the shell ignores the signal, nothing drains, and the timeout's SIGKILL ends it.
// No container runtime runs here (docs/deployment.md): this is what the image's PID 1 does.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { ROOT, eventually, writeConfig, type LogLine } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream } from '../support/mock-upstream.ts';
import { httpRequest } from '../support/http.ts';
import { requireTool } from '../support/system-tool.ts';

const unshare = requireTool('unshare', 'util-linux');
const DOCKERFILE = readFileSync(join(ROOT, 'deploy', 'Dockerfile'), 'utf8');

/** The last instruction `name` of the Dockerfile (continuation lines joined). */
function instruction(name: string): string | undefined {
  const lines = DOCKERFILE.replace(/\\\n/g, ' ').split('\n');
  return lines.filter((l) => new RegExp(`^${name}\\s`, 'i').test(l)).at(-1)?.replace(new RegExp(`^${name}\\s+`, 'i'), '').trim();
}

/** What Docker runs as PID 1: exec form (JSON arrays) as is; a shell-form ENTRYPOINT as /bin/sh -c, CMD ignored. */
export function imageCommand(): { argv: string[]; execForm: boolean } {
  const entrypoint = instruction('ENTRYPOINT');
  const cmd = instruction('CMD');
  assert.ok(entrypoint, 'deploy/Dockerfile has no ENTRYPOINT');
  const json = (text: string | undefined) => (text?.startsWith('[') ? (JSON.parse(text) as string[]) : undefined);
  const entry = json(entrypoint);
  if (!entry) return { argv: ['/bin/sh', '-c', entrypoint], execForm: false };
  const args = json(cmd) ?? (cmd ? ['/bin/sh', '-c', cmd] : []);
  return { argv: [...entry, ...args], execForm: true };
}

/** The image's paths mapped to this checkout (/app is the repository's root). */
const mapped = (arg: string) => arg.replaceAll('/app/', `${ROOT}/`);

interface Outcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  readyzAfterSignal: number;
  stream: string;
  exitedBeforeTimeout: boolean;
}

let mock: MockUpstream;
before(async () => {
  mock = await startMockUpstream();
});
after(async () => {
  await mock?.close();
});

/**
 * Runs `argv` as PID 1 of a new PID namespace, opens a stream (4 s), sends the Dockerfile's
 * STOPSIGNAL to PID 1 as `docker stop -t` does, and SIGKILLs it if it has not exited by the timeout.
 */
async function runAsPid1(argv: string[], stopTimeoutMs: number): Promise<Outcome> {
  const config = writeConfig({
    workers: 1,
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' }],
    models: [{ name: 'm', provider: 'up' }],
    shutdown: { min_drain_secs: 1 },
    log: { format: 'json' },
  });
  const root = process.getuid?.() === 0 ? [] : ['--map-root-user'];
  const child: ChildProcess = spawn('unshare', [...root, '--pid', '--fork', '--mount-proc', '--kill-child', ...argv.map(mapped)], {
    cwd: ROOT,
    // `node` in the image is Node.js 24: the one running this test. SLUICE_CONFIG stands for the mounted config.
    env: { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH}`, SLUICE_CONFIG: config },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: LogLine[] = [];
  let err = '';
  let out = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    const from = out.lastIndexOf('\n') + 1;
    out += chunk;
    const complete = out.slice(from, out.lastIndexOf('\n') + 1);
    for (const line of complete.split('\n')) if (line.startsWith('{')) logs.push(JSON.parse(line) as LogLine);
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (err += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  try {
    // The namespace's PID 1, by its PID here: the unshare process's only child.
    const pid1 = await eventually(() => Number(readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(' ')[0]) || 0, 5000, 'the PID 1 of the namespace');
    assert.match(readFileSync(`/proc/${pid1}/status`, 'utf8'), /^NSpid:\s+\d+\s+1$/m, 'it is PID 1 in its namespace');
    await eventually(() => logs.some((l) => l.event === 'ready'), 15_000, `the gateway ready\nstdout: ${out}\nstderr: ${err}`);
    const proxy = `http://${String(logs.find((l) => l.event === 'listener_started' && l.listener === 'proxy')!.address)}`;
    const res = await fetch(`${proxy}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...mockHeader({ chunks: 40, sseIntervalMs: 100 }) },
      body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(res.status, 200);
    const stream = (async () => {
      let text = '';
      const decoder = new TextDecoder();
      try {
        for await (const chunk of res.body!) text += decoder.decode(chunk, { stream: true });
      } catch (error) {
        text += `\n<cut: ${(error as Error).message}>`;
      }
      return text;
    })();
    const stopSignal = (instruction('STOPSIGNAL') ?? 'SIGTERM') as NodeJS.Signals;
    process.kill(pid1, stopSignal);
    // L1: readiness fails at once on a drain. Give the signal a moment to arrive either way.
    let readyzAfterSignal = 0;
    await eventually(async () => (readyzAfterSignal = (await httpRequest(`${proxy}/readyz`)).status) === 503, 1500, 'readyz 503').catch(() => {});
    const timeout = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), stopTimeoutMs).unref());
    const first = await Promise.race([exited, timeout]);
    if (first === 'timeout') process.kill(pid1, 'SIGKILL');
    const { code, signal } = await exited;
    return { code, signal, readyzAfterSignal, stream: await stream, exitedBeforeTimeout: first !== 'timeout' };
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  }
}

test('the image: Node 24 slim base, a non-root user, a health check on /livez', () => {
  const bases = [...DOCKERFILE.matchAll(/^FROM\s+(\S+)/gm)].map((m) => m[1]);
  assert.deepEqual(bases, ['node:24-slim', 'node:24-slim']);
  assert.ok(!['', 'root', '0'].includes(instruction('USER') ?? ''), 'runs as a non-root user');
  assert.match(instruction('HEALTHCHECK') ?? '', /CMD \[.*\/livez/);
});

describe('D2: the image entrypoint as PID 1', { skip: unshare.skip }, () => {
  test('the Dockerfile ENTRYPOINT/CMD, as PID 1 of a new PID namespace, drains on STOPSIGNAL: the stream ends with [DONE], exit 0', async () => {
    const { argv, execForm } = imageCommand();
    assert.ok(execForm, `the ENTRYPOINT is in shell form: ${argv.join(' ')}`);
    assert.equal(instruction('STOPSIGNAL'), 'SIGTERM');
    const outcome = await runAsPid1(argv, 10_000);
    assert.equal(outcome.readyzAfterSignal, 503, 'L1: the drain started');
    assert.ok(outcome.exitedBeforeTimeout, 'it exited by itself, before docker stop -t would kill it');
    assert.deepEqual([outcome.code, outcome.signal], [0, null]);
    const events = outcome.stream.split('\n').filter((l) => l.startsWith('data: '));
    assert.equal(events.at(-1), 'data: [DONE]', outcome.stream.slice(-500));
    assert.ok(events.filter((e) => e.includes('"content"')).length >= 40);
  });

  test('control: the same command in shell form (/bin/sh -c as PID 1) ignores the signal: no drain, SIGKILL at the timeout', async () => {
    const { argv } = imageCommand();
    const shellForm = ['/bin/sh', '-c', argv.map((a) => (/\s/.test(a) ? `'${a}'` : a)).join(' ')];
    const outcome = await runAsPid1(shellForm, 6000);
    assert.equal(outcome.readyzAfterSignal, 200, 'the signal never reached the gateway');
    assert.equal(outcome.exitedBeforeTimeout, false);
    assert.notDeepEqual([outcome.code, outcome.signal], [0, null]);
  });
});
