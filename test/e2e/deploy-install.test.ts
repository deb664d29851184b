// D2: the systemd install steps of docs/deployment.md, run as they are written (a documented step
// that fails is a bug here), then the unit's ExecStart= line as written. Both run in a mount
// namespace where /etc and /opt are overlays on a temporary directory (nothing of this machine
// changes) and /usr/bin/node is the Node.js 24 that runs this test, as the unit requires.
// The source is a copy of this checkout's tracked files, since `npm prune` changes node_modules.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { stringify } from 'yaml';
import { ROOT, eventually } from '../support/gateway-process.ts';
import { requireTool } from '../support/system-tool.ts';

const unshare = requireTool('unshare', 'util-linux');

/** The fenced shell block of the "## systemd" section of docs/deployment.md. */
function installSteps(): string {
  const page = readFileSync(join(ROOT, 'docs', 'deployment.md'), 'utf8');
  const start = page.indexOf('\n## systemd\n');
  assert.ok(start !== -1, 'docs/deployment.md has a "## systemd" section');
  const section = page.slice(start, page.indexOf('\n## ', start + 5));
  const block = /^ *```sh\n([\s\S]*?)^ *```$/m.exec(section);
  assert.ok(block, 'the systemd section has a sh block');
  return block[1]!.replace(/^ {3}/gm, '');
}

/** The unit's ExecStart= command line, as written. */
function execStart(): string {
  const unit = readFileSync(join(ROOT, 'deploy', 'systemd', 'sluice.service'), 'utf8');
  const line = /^ExecStart=(.+)$/m.exec(unit);
  assert.ok(line, 'the unit has an ExecStart= line');
  return line[1]!;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.once('error', reject);
  });
}

test('D2: the documented systemd install steps build /opt/sluice, and the unit ExecStart runs it and drains on SIGTERM', { skip: unshare.skip, timeout: 600_000 }, async () => {
  const work = mkdtempSync(join(tmpdir(), 'sluice-install-'));
  const source = join(work, 'source');
  for (const file of execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8' }).split('\0').filter(Boolean)) {
    mkdirSync(dirname(join(source, file)), { recursive: true });
    cpSync(join(ROOT, file), join(source, file));
  }
  for (const dir of ['etc-upper', 'etc-work', 'opt-upper', 'opt-work']) mkdirSync(join(work, dir));
  const [proxyPort, adminPort] = [await freePort(), await freePort()];
  const config = stringify({
    workers: 1,
    listeners: [
      { name: 'proxy', address: `127.0.0.1:${proxyPort}`, role: 'proxy' },
      { name: 'admin', address: `127.0.0.1:${adminPort}`, role: 'admin' },
    ],
    providers: [{ name: 'echo', type: 'echo' }],
    models: [{ name: 'echo', provider: 'echo' }],
    shutdown: { min_drain_secs: 0 },
    log: { format: 'json' },
  });
  const script = [
    'set -eu',
    `mount -t overlay overlay -o lowerdir=/etc,upperdir=${work}/etc-upper,workdir=${work}/etc-work /etc`,
    `mount -t overlay overlay -o lowerdir=/opt,upperdir=${work}/opt-upper,workdir=${work}/opt-work /opt`,
    `mount --bind ${process.execPath} /usr/bin/node`,
    `cd ${source}`,
    '# the documented steps, as written',
    installSteps(),
    'test -f /etc/systemd/system/sluice.service',
    'test ! -e /opt/sluice/node_modules/typescript',
    `cat > /etc/sluice/sluice.yaml <<'CONFIG'\n${config}CONFIG`,
    'cd /opt/sluice',
    `echo $$ > ${work}/pid`,
    `exec ${execStart()}`,
  ].join('\n');
  // npm, as an operator's shell has it: the machine's own, on a PATH without this test's Node.js 24.
  const path = (process.env.PATH ?? '').split(':').filter((dir) => !dir.includes('node_modules')).join(':');
  const child = spawn('unshare', ['--mount', '--fork', 'sh', '-c', script], { env: { ...process.env, PATH: path }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  let ended: number | null | undefined;
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve((ended = code))));
  try {
    const ready = await eventually(async () => ended !== undefined || (await fetch(`http://127.0.0.1:${adminPort}/readyz`)).status === 200, 540_000, 'the installed service ready');
    assert.ok(ready && ended === undefined, `the install or the service ended with ${ended}:\n${output.slice(-4000)}`);
    const answer = await fetch(`http://127.0.0.1:${proxyPort}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'installed' }] }),
    });
    assert.equal(answer.status, 200);
    assert.match(await answer.text(), /echo: installed/);
    process.kill(Number(readFileSync(join(work, 'pid'), 'utf8')), 'SIGTERM');
    assert.equal(await exited, 0, output.slice(-4000));
    assert.match(output, /"event":"process_exit"/);
    // npm runs on the machine's Node.js, older than what most packages here want: the project's .npmrc keeps it to its errors.
    assert.doesNotMatch(output, /EBADENGINE|npm warn/);
  } finally {
    child.kill('SIGKILL');
  }
});
