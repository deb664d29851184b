// Runs the built gateway (dist/main.js) as a child process with a generated config, the way an
// operator would, and reads its JSON log lines from stdout.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { stringify } from 'yaml';

export const ROOT = resolve(import.meta.dirname, '..', '..');
export const MAIN = join(ROOT, 'dist', 'main.js');

export type LogLine = Record<string, unknown> & { event?: string; msg?: string; level?: string };

export interface GatewayProcess {
  readonly child: ChildProcess;
  /** Base URL of each listener by name, e.g. { proxy: 'http://127.0.0.1:41234', admin: ... }. */
  readonly urls: Record<string, string>;
  readonly proxyUrl: string;
  readonly adminUrl: string;
  readonly logs: LogLine[];
  readonly stdout: () => string;
  readonly stderr: () => string;
  readonly configFile: string;
  waitForLog(predicate: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
  signal(signal: NodeJS.Signals): void;
  /** Resolves when the process has exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
  /** Kills the process if still running and waits for it. */
  stop(): Promise<void>;
}

export interface GatewayOptions {
  /** A config object (YAML-serialised) or raw YAML text. Listeners default to proxy + admin on port 0. */
  config?: Record<string, unknown> | string;
  /** Runs the embedded default config (no --config). */
  useDefault?: boolean;
  env?: Record<string, string | undefined>;
  args?: string[];
  /** Waits for the "ready" log line (default true). */
  waitReady?: boolean;
  /** The program to run (default: this checkout's dist/main.js). */
  main?: string;
  /** Arguments for Node.js itself, before the program (e.g. `--import` of a module loaded first). */
  nodeArgs?: string[];
  /** Spawns the process with an IPC channel (`child.send`, its `process.send`). */
  ipc?: boolean;
}

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export function defaultListeners(): Record<string, unknown>[] {
  return [
    { name: 'proxy', address: '127.0.0.1:0', role: 'proxy' },
    { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
  ];
}

export function writeConfig(config: Record<string, unknown> | string): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-test-'));
  const file = join(dir, 'sluice.yaml');
  // One process unless a test asks for workers (or SLUICE_TEST_WORKERS runs every test against a group).
  const text = typeof config === 'string' ? config : stringify({ workers: Number(process.env.SLUICE_TEST_WORKERS) || 1, listeners: defaultListeners(), ...config });
  writeFileSync(file, text);
  return file;
}

export async function startGateway(options: GatewayOptions = {}): Promise<GatewayProcess> {
  const configFile = options.useDefault ? '' : writeConfig(options.config ?? {});
  const args = [...(options.nodeArgs ?? []), options.main ?? MAIN, ...(options.args ?? (options.useDefault ? [] : ['--config', configFile]))];
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    // The embedded default runs one worker per CPU: two, whatever the machine, keeps tests alike.
    env: { ...process.env, SLUICE_CONFIG: '', SLUICE_WORKERS: '2', ...options.env },
    stdio: options.ipc ? ['ignore', 'pipe', 'pipe', 'ipc'] : ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  const logs: LogLine[] = [];
  let out = '';
  let err = '';
  const waiters = new Set<() => void>();
  let pending = '';
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (chunk: string) => {
    out += chunk;
    pending += chunk;
    let newline;
    while ((newline = pending.indexOf('\n')) !== -1) {
      const line = pending.slice(0, newline);
      pending = pending.slice(newline + 1);
      try {
        logs.push(JSON.parse(line) as LogLine);
      } catch {
        logs.push({ msg: line, event: 'unparsed' });
      }
    }
    for (const wake of waiters) wake();
  });
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => (err += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolvePromise) => {
    child.once('exit', (code, signal) => {
      running.delete(child);
      resolvePromise({ code, signal, at: Date.now() });
      for (const wake of waiters) wake();
    });
  });
  let hasExited = false;
  void exited.then(() => (hasExited = true));
  // Its output ends after its exit (the last lines may follow the 'exit' event): a waitForLog still
  // waiting then gives up at once, rather than at its deadline with its timer holding the test.
  let outputEnded = false;
  child.once('close', () => {
    outputEnded = true;
    for (const wake of waiters) wake();
  });

  const waitForLog = (predicate: (line: LogLine) => boolean, timeoutMs = 10_000): Promise<LogLine> =>
    new Promise((resolvePromise, reject) => {
      let seen = 0;
      const check = () => {
        for (; seen < logs.length; seen++) {
          if (predicate(logs[seen]!)) {
            cleanup();
            resolvePromise(logs[seen]!);
            return;
          }
        }
        if (hasExited || outputEnded) {
          cleanup();
          reject(new Error(`gateway exited before the expected log line.\nstdout:\n${out}\nstderr:\n${err}`));
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for a log line.\nstdout:\n${out.slice(-4000)}\nstderr:\n${err}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });

  const urls: Record<string, string> = {};
  if (options.waitReady !== false) {
    // Ready takes a second or two; a group of workers on a loaded 2-core machine has taken over 10.
    await waitForLog((l) => l.event === 'ready', 30_000).catch(async (error: unknown) => {
      // A start that fails leaves nothing running (its pipes would keep the test process alive).
      if (!hasExited) child.kill('SIGKILL');
      await exited;
      throw error;
    });
    for (const line of logs) {
      if (line.event === 'listener_started') urls[String(line.listener)] = `http://${String(line.address)}`;
    }
  }
  return {
    child,
    urls,
    get proxyUrl() {
      return urls.proxy ?? Object.values(urls)[0]!;
    },
    get adminUrl() {
      return urls.admin ?? urls.proxy!;
    },
    logs,
    stdout: () => out,
    stderr: () => err,
    configFile,
    waitForLog,
    signal: (signal) => {
      child.kill(signal);
    },
    exited,
    async stop() {
      if (!hasExited) child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Polls `probe` until it returns a truthy value or the deadline passes. */
export async function eventually<T>(probe: () => Promise<T> | T, timeoutMs = 5000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value;
      last = value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${String(last)})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Reads one sample from a Prometheus text exposition. */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== '{' && rest[0] !== ' ') continue;
    const labelText = rest[0] === '{' ? rest.slice(1, rest.indexOf('}')) : '';
    const ok = Object.entries(labels).every(([k, v]) => labelText.includes(`${k}="${v}"`));
    if (ok) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return undefined;
}

export async function scrape(gateway: GatewayProcess): Promise<string> {
  const res = await fetch(`${gateway.adminUrl}/metrics`);
  return res.text();
}

/**
 * Signals `pid` only if it is still one of this gateway's processes (its command line names the
 * gateway's own config file): a process that has exited may have left its PID to an unrelated one.
 */
export function signalOwn(pid: number, signal: NodeJS.Signals, configFile: string): boolean {
  try {
    if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes(configFile)) return false;
    process.kill(pid, signal);
    return true;
  } catch {
    return false;
  }
}

/**
 * Stops a gateway run with `hot_restart.enabled`: SIGKILLs each generation it started (their own
 * process groups, which killing the keeper leaves running), then the keeper.
 */
export async function stopWithGenerations(gw: GatewayProcess): Promise<void> {
  for (const line of gw.logs) {
    const pid = line.event === 'hot_restart_started' ? Number(line.new_pid) : line.event === 'ready' && line.generation === 1 ? Number(line.pid) : 0;
    if (pid) signalOwn(pid, 'SIGKILL', gw.configFile);
  }
  await gw.stop();
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `sluice <args>` (the built program) to completion, in `cwd` (default the repository), with
 * `env` over this process's environment (a value `undefined` removes a variable). Rejects if it
 * does not exit within `timeoutMs`.
 */
export function runSluice(args: string[], options: { env?: NodeJS.ProcessEnv | Record<string, string | undefined>; cwd?: string; timeoutMs?: number } = {}): Promise<RunResult> {
  const { cwd = ROOT, timeoutMs = 15_000 } = options;
  const env: Record<string, string | undefined> = { ...process.env, ...options.env };
  for (const [name, value] of Object.entries(env)) if (value === undefined) delete env[name];
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [MAIN, ...args], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`sluice ${args.join(' ')} did not exit within ${timeoutMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolvePromise({ code, stdout, stderr });
    });
  });
}
