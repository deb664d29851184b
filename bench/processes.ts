// The benchmarks' child processes: spawned (pinned to a CPU when taskset can), tracked so that an
// exit or a signal kills them all, started until they report their URL, stopped, or run to the end.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { readyUrl } from './ready.ts';

const ROOT = resolve(import.meta.dirname, '..');

export const onPath = (cmd: string): boolean => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;
/** Servers on CPU 0, the load generator on CPU 1, when there are two CPUs and taskset. */
export const PIN = availableParallelism() >= 2 && onPath('taskset');

export interface Server { name: string; child: ChildProcess; pid: number; url: string }

const children = new Set<ChildProcess>();
/** Directories removed at exit. */
export const cleanUp: string[] = [];

export function killAll(): void {
  children.forEach((c) => c.kill('SIGKILL'));
}

process.once('exit', () => {
  killAll();
  for (const dir of cleanUp) rmSync(dir, { recursive: true, force: true });
});
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(sig, () => {
    process.stderr.write(`\nbench: ${sig}, stopping the child processes\n`);
    killAll();
    process.exit(130);
  });
}

/** Spawns `cmd`, pinned to `cpu` when pinning is possible, and tracks it for clean-up. */
export function launch(cpu: string, cmd: string, args: string[], env?: Record<string, string>): ChildProcess {
  const [file, argv]: [string, string[]] = PIN ? ['taskset', ['-c', cpu, cmd, ...args]] : [cmd, args];
  const child = spawn(file, argv, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

/** Starts a server and resolves once `urlFrom` finds its URL in a stdout JSON line; stdout is drained after. */
export async function startServer(name: string, args: string[], urlFrom: (line: Record<string, unknown>) => string | undefined, cpu = '0', env?: Record<string, string>): Promise<Server> {
  const child = launch(cpu, process.execPath, args, env);
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  const url = await readyUrl(name, child, urlFrom, () => stderr);
  return { name, child, pid: child.pid!, url };
}

/** The mock upstream, standalone. */
export function startMock(): Promise<Server> {
  return startServer('mock', ['test/support/mock-upstream.ts', '--port', '0'], (l) => l.mock_upstream as string | undefined);
}

/** SIGTERM, then SIGKILL after 10 s; resolves once it exited. */
export async function stop(server: Server): Promise<void> {
  if (server.child.exitCode !== null || server.child.signalCode !== null) return;
  const exited = new Promise((r) => server.child.once('exit', r));
  server.child.kill('SIGTERM');
  const timer = setTimeout(() => server.child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

/** Its stdout once it exits 0 (killed after `timeoutMs`); a rejection with its output otherwise. */
export function runToEnd(child: ChildProcess, timeoutMs: number, what = 'load generator'): Promise<string> {
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  return new Promise((done, fail) => {
    child.once('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) done(out);
      else fail(new Error(`${what} failed (code ${code}): ${err || out}`));
    });
  });
}
