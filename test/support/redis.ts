// A real Redis (Debian's redis-server) for the tests of the Redis limit store: one server on a free
// loopback port, no persistence, which a test can stop and start again on the same port (what a
// gateway sees when Redis goes away and comes back). Values are read with redis-cli, not with the
// gateway's own client, so a bug in that client cannot hide itself.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { freePort } from './haproxy.ts';
import { requireTool, type ToolCheck } from './system-tool.ts';

export interface RedisServer {
  /** `redis://127.0.0.1:PORT`. */
  readonly url: string;
  readonly port: number;
  readonly running: boolean;
  start(): Promise<void>;
  /** SIGKILL, and waits for the exit: the data (in memory only) is gone. */
  stop(): Promise<void>;
  close(): Promise<void>;
  /** Runs redis-cli against this server; resolves with its stdout, trimmed. */
  cli(...args: string[]): Promise<string>;
}

let check: ToolCheck | undefined;

/** `{ skip: false }`, or why a Redis test is skipped (under SLUICE_REQUIRE_SYSTEM_TOOLS=1 a missing one throws). */
export function redisCheck(): ToolCheck {
  if (!check) {
    const server = requireTool('redis-server', 'redis-server');
    check = server.skip ? server : requireTool('redis-cli', 'redis-tools');
  }
  return check;
}

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export async function startRedis(): Promise<RedisServer> {
  const missing = redisCheck().skip;
  if (missing) throw new Error(`startRedis: ${missing}`);
  const port = await freePort();
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();

  const cli = (...args: string[]) =>
    new Promise<string>((resolve, reject) => {
      execFile('redis-cli', ['-h', '127.0.0.1', '-p', String(port), '--no-raw', ...args], { timeout: 5000 }, (error, stdout) => (error ? reject(error) : resolve(stdout.trim())));
    });

  const start = async (): Promise<void> => {
    const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--protected-mode', 'no', '--loglevel', 'warning'], { stdio: ['ignore', 'ignore', 'pipe'] });
    child = proc;
    running.add(proc);
    exited = new Promise((resolve) =>
      proc.once('exit', () => {
        running.delete(proc);
        resolve();
      }),
    );
    const deadline = Date.now() + 10_000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error('redis-server exited at start');
      try {
        if ((await cli('PING')) === 'PONG') return;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error('redis-server did not answer PING within 10 s');
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  };

  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    get running() {
      return child !== undefined && child.exitCode === null && child.signalCode === null;
    },
    start,
    async stop() {
      child?.kill('SIGKILL');
      await exited;
    },
    async close() {
      child?.kill('SIGKILL');
      await exited;
    },
    cli,
  };
}
