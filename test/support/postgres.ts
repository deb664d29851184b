// A real PostgreSQL (Debian's postgresql) for the tests of the ledger's PostgreSQL store: a cluster
// made by initdb in a temporary directory, one server on a free loopback port (its unix socket in
// that directory too), which a test can stop at once (an immediate shutdown: what a gateway sees
// when its database goes away) and start again on the same port and data. As root, initdb and the
// server run as the `postgres` user (PostgreSQL refuses to run as root). Values are read with psql,
// not with the gateway's own client, so a bug in that client cannot hide itself.
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './haproxy.ts';
import { requireTool, type ToolCheck } from './system-tool.ts';

export interface PostgresServer {
  /** `postgres://postgres@127.0.0.1:PORT/postgres`. */
  readonly url: string;
  readonly port: number;
  readonly running: boolean;
  /** Starts the stopped server again, on the same port and data. */
  start(): Promise<void>;
  /** An immediate shutdown (SIGQUIT to the postmaster: connections cut, no checkpoint), and waits for the exit. */
  stop(): Promise<void>;
  /** Stops the server and removes its data. */
  close(): Promise<void>;
  /** Runs psql against the server (database `postgres` unless named); resolves with its unaligned, tuples-only output, trimmed. */
  psql(sql: string, database?: string): Promise<string>;
  /** Creates a database; resolves with its URL. */
  createDatabase(name: string): Promise<string>;
}

const PACKAGE = 'postgresql';
const PROGRAMS = ['initdb', 'postgres', 'psql'] as const;
type Program = (typeof PROGRAMS)[number];

/** Debian's layout (/usr/lib/postgresql/VERSION/bin, the newest first), else the programs on PATH. */
function findPrograms(): Record<Program, string> | undefined {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a)) : [];
  for (const version of versions) {
    const bin = join(root, version, 'bin');
    if (PROGRAMS.every((p) => existsSync(join(bin, p)))) return { initdb: join(bin, 'initdb'), postgres: join(bin, 'postgres'), psql: join(bin, 'psql') };
  }
  return undefined;
}

let programs: Record<Program, string> | undefined;
let check: ToolCheck | undefined;

/** `{ skip: false }`, or why a PostgreSQL test is skipped (under SLUICE_REQUIRE_SYSTEM_TOOLS=1 a missing one throws). */
export function postgresCheck(): ToolCheck {
  if (check) return check;
  programs = findPrograms();
  if (programs) return (check = { skip: false });
  for (const program of PROGRAMS) {
    const tool = requireTool(program, PACKAGE);
    if (tool.skip) return (check = tool);
  }
  programs = { initdb: 'initdb', postgres: 'postgres', psql: 'psql' };
  return (check = { skip: false });
}

const asRoot = process.getuid?.() === 0;

/** PostgreSQL's user, when this process is root: its programs run as it. */
function postgresUser(): { uid: number; gid: number } {
  const id = (flag: string) => spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' });
  const uid = id('-u');
  const gid = id('-g');
  if (uid.status !== 0 || gid.status !== 0) throw new Error('startPostgres: running as root, and there is no "postgres" user to run PostgreSQL as');
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** `command args` as PostgreSQL's user when root (runuser), else as is. */
function asPostgres(command: string, args: string[]): [string, string[]] {
  return asRoot ? ['runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args];
}

const postmasters = new Set<number>();
process.once('exit', () => {
  for (const pid of postmasters) {
    try {
      process.kill(pid, 'SIGQUIT');
    } catch {
      // gone already
    }
  }
});

export async function startPostgres(): Promise<PostgresServer> {
  const missing = postgresCheck().skip;
  if (missing) throw new Error(`startPostgres: ${missing}`);
  const bin = programs!;
  const dir = mkdtempSync(join(tmpdir(), 'sluice-pg-'));
  const data = join(dir, 'data');
  if (asRoot) {
    const { uid, gid } = postgresUser();
    chownSync(dir, uid, gid);
  }
  const [initdb, initArgs] = asPostgres(bin.initdb, ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync']);
  const init = spawnSync(initdb, initArgs, { encoding: 'utf8' });
  if (init.status !== 0) throw new Error(`initdb failed: ${init.stderr || init.stdout}`);

  const port = await freePort();
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let log = '';

  const psql = (sql: string, database = 'postgres') =>
    new Promise<string>((resolve, reject) => {
      execFile(
        bin.psql,
        ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-d', database, '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-c', sql],
        { timeout: 10_000, env: { ...process.env, PGCONNECT_TIMEOUT: '2' } },
        (error, stdout, stderr) => (error ? reject(new Error(`psql: ${stderr.trim() || error.message}`)) : resolve(stdout.trim())),
      );
    });

  /** The postmaster's pid, from the first line of postmaster.pid (runuser stands between it and us). */
  const postmasterPid = (): number | undefined => {
    try {
      const pid = Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
      return Number.isInteger(pid) && pid > 0 ? pid : undefined;
    } catch {
      return undefined;
    }
  };

  const start = async (): Promise<void> => {
    const settings = ['listen_addresses=127.0.0.1', `port=${port}`, `unix_socket_directories=${dir}`, 'fsync=off', 'full_page_writes=off', 'max_connections=50', 'log_min_messages=warning'];
    const [command, args] = asPostgres(bin.postgres, ['-D', data, ...settings.flatMap((s) => ['-c', s])]);
    const proc = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    proc.stderr!.on('data', (chunk: Buffer) => (log = (log + chunk.toString()).slice(-4000)));
    child = proc;
    exited = new Promise((resolve) => proc.once('exit', () => resolve()));
    const deadline = Date.now() + 20_000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`postgres exited at start: ${log}`);
      try {
        if ((await psql('SELECT 1')) === '1') break;
      } catch {
        // not accepting connections yet
      }
      if (Date.now() > deadline) throw new Error(`postgres did not answer within 20 s: ${log}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const pid = postmasterPid();
    if (pid) postmasters.add(pid);
  };

  const stop = async (): Promise<void> => {
    const pid = postmasterPid();
    if (pid !== undefined && child?.exitCode === null) {
      try {
        process.kill(pid, 'SIGQUIT');
      } catch {
        // gone already
      }
      postmasters.delete(pid);
    }
    await exited;
  };

  await start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    get running() {
      return child !== undefined && child.exitCode === null && child.signalCode === null;
    },
    start,
    stop,
    async close() {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
    psql,
    async createDatabase(name) {
      await psql(`CREATE DATABASE "${name.replaceAll('"', '""')}"`);
      return `postgres://postgres@127.0.0.1:${port}/${encodeURIComponent(name)}`;
    },
  };
}
