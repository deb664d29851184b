// A real etcd (Debian's etcd-server, 3.4) for the tests of the etcd source: one member on free
// loopback ports with a fresh data directory, which a test can stop, kill and start again on the
// same ports and data (what a gateway sees when etcd goes away and comes back), and compact (what a
// watch that fell behind sees). Keys are written and read with etcdctl, not with the gateway's own
// client, so a bug in that client cannot hide itself.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Agent, request } from 'undici';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './haproxy.ts';
import { requireTool, type ToolCheck } from './system-tool.ts';

export interface EtcdServer {
  /** The client URL, `http://127.0.0.1:PORT`. */
  readonly endpoint: string;
  readonly dataDir: string;
  /** Whether the process is up (started and not yet exited). */
  readonly running: boolean;
  /** etcd's own output (errors only) since the first start. */
  stderr(): string;
  /** Starts it again, on the same ports and data directory: what was written survives. */
  start(): Promise<void>;
  /** SIGTERM, and waits for the exit. */
  stop(): Promise<void>;
  /** SIGKILL, and waits for the exit (a crash: nothing is flushed or closed cleanly). */
  kill(): Promise<void>;
  /** SIGSTOP: its connections stay open and nothing answers (a frozen member, or a silent partition). */
  freeze(): void;
  /** SIGCONT after `freeze()`. */
  thaw(): void;
  /** Stops it and removes the data directory. */
  close(): Promise<void>;
  /** The current revision of the key space. */
  revision(): Promise<number>;
  /** Compacts the history up to the current revision, which it returns. */
  compact(): Promise<number>;
  /** Writes a key; resolves with the revision of the write. */
  put(key: string, value: string): Promise<number>;
  /** A key's value, or undefined. */
  get(key: string): Promise<string | undefined>;
  /** Deletes a key; resolves with the number of keys deleted (0 or 1). */
  del(key: string): Promise<number>;
  /** Runs etcdctl (API v3) against this server; resolves with its stdout. */
  etcdctl(...args: string[]): Promise<string>;
}

const READY_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 10_000;

let check: ToolCheck | undefined;

/**
 * Whether etcd and etcdctl are installed: `{ skip: false }`, or the reason to skip a test (under
 * SLUICE_REQUIRE_SYSTEM_TOOLS=1 a missing one throws instead). Use as `{ skip: etcdCheck().skip }`.
 */
export function etcdCheck(): ToolCheck {
  if (!check) {
    const server = requireTool('etcd', 'etcd-server');
    check = server.skip ? server : requireTool('etcdctl', 'etcd-client');
  }
  return check;
}

export function etcdAvailable(): boolean {
  return etcdCheck().skip === false;
}

// Whatever way the test process ends, no etcd is left behind listening, nor its data on disk.
const running = new Set<ChildProcess>();
const dataDirs = new Set<string>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
});

/** PEM files for an etcd that serves its clients over TLS and asks each for a certificate of `ca` (mutual TLS). */
export interface EtcdTls {
  cert: string;
  key: string;
  ca: string;
  /** The client certificate the harness's own etcdctl and health checks present. */
  clientCert: string;
  clientKey: string;
}

/**
 * etcd's authentication: a `root` user with this password, and `auth enable`, done once at the first
 * start (it lives in the data directory, so every later start has it too). The harness's own
 * etcdctl then signs in as root.
 */
export interface EtcdAuth {
  password: string;
}

export async function startEtcd(options: { tls?: EtcdTls; auth?: EtcdAuth } = {}): Promise<EtcdServer> {
  const { tls, auth } = options;
  const missing = etcdCheck().skip;
  if (missing) throw new Error(`startEtcd: ${missing}`);
  const root = mkdtempSync(join(tmpdir(), 'sluice-etcd-'));
  dataDirs.add(root);
  const dataDir = join(root, 'data');
  let clientPort = 0;
  let peerPort = 0;
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let output = '';

  const endpoint = () => `${tls ? 'https' : 'http'}://127.0.0.1:${clientPort}`;
  const healthAgent = tls ? new Agent({ connect: { ca: readFileSync(tls.ca), cert: readFileSync(tls.clientCert), key: readFileSync(tls.clientKey) } }) : undefined;
  const tlsFlags = tls ? [`--cacert=${tls.ca}`, `--cert=${tls.clientCert}`, `--key=${tls.clientKey}`] : [];

  /** One attempt: spawns etcd and waits until /health says true; rejects if it exits first or the deadline passes. */
  const launch = async (): Promise<void> => {
    const client = endpoint();
    const peer = `http://127.0.0.1:${peerPort}`;
    const args = [
      '--name=sluice-test',
      `--data-dir=${dataDir}`,
      `--listen-client-urls=${client}`,
      `--advertise-client-urls=${client}`,
      `--listen-peer-urls=${peer}`,
      `--initial-advertise-peer-urls=${peer}`,
      `--initial-cluster=sluice-test=${peer}`,
      '--logger=zap',
      '--log-outputs=stderr',
      '--log-level=error',
      // One member, no peers to wait for: a short election timeout only makes it its own leader
      // sooner (a start takes ~0.2 s instead of 1–2 s).
      '--heartbeat-interval=10',
      '--election-timeout=100',
      ...(tls ? [`--cert-file=${tls.cert}`, `--key-file=${tls.key}`, `--trusted-ca-file=${tls.ca}`, '--client-cert-auth'] : []),
    ];
    // etcd reads ETCD_* variables as flags: none of the caller's may change this member.
    const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('ETCD')));
    const proc = spawn('etcd', args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
    child = proc;
    running.add(proc);
    proc.stderr!.setEncoding('utf8');
    proc.stderr!.on('data', (chunk: string) => (output += chunk));
    let gone = false;
    exited = new Promise((resolve) => {
      proc.once('exit', () => {
        gone = true;
        running.delete(proc);
        resolve();
      });
    });
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      if (gone) throw new Error(`etcd exited before it was ready (${client}):\n${output}`);
      if (await healthy(client, healthAgent)) return;
      if (Date.now() > deadline) {
        proc.kill('SIGKILL');
        await exited;
        throw new Error(`etcd was not healthy within ${READY_TIMEOUT_MS} ms (${client}):\n${output}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };

  const start = async (): Promise<void> => {
    if (child && running.has(child)) throw new Error('etcd is already running');
    await launch();
  };

  const signal = async (name: NodeJS.Signals): Promise<void> => {
    if (!child || !running.has(child)) return;
    child.kill(name);
    const proc = child;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), STOP_TIMEOUT_MS)));
    try {
      if (await Promise.race([exited.then(() => false), late])) {
        proc.kill('SIGKILL');
        await exited;
        throw new Error(`etcd did not exit within ${STOP_TIMEOUT_MS} ms of ${name}:\n${output}`);
      }
    } finally {
      clearTimeout(timer);
    }
  };

  let signedIn: string[] = [];
  const etcdctl = (...args: string[]): Promise<string> =>
    new Promise((resolve, reject) => {
      execFile(
        'etcdctl',
        [`--endpoints=${endpoint()}`, '--dial-timeout=2s', '--command-timeout=5s', ...tlsFlags, ...signedIn, ...args],
        { env: { ...process.env, ETCDCTL_API: '3' }, timeout: 10_000, maxBuffer: 64 * 1024 * 1024 },
        (error, stdout, stderr) => {
          if (error) reject(new Error(`etcdctl ${args.join(' ')} failed: ${error.message}\n${stderr}`));
          else resolve(stdout);
        },
      );
    });

  const revision = async (): Promise<number> => {
    const status = JSON.parse(await etcdctl('endpoint', 'status', '-w', 'json')) as { Status: { header: { revision: number } } }[];
    const found = status[0]?.Status.header.revision;
    if (typeof found !== 'number') throw new Error(`etcdctl endpoint status: no revision in its answer`);
    return found;
  };

  // The ports are free when asked for, but another test's server may take one before etcd binds it:
  // then the first start tries again on other ports (a later start must keep its ports).
  for (let attempt = 1; ; attempt++) {
    clientPort = await freePort();
    peerPort = await freePort();
    try {
      await launch();
      break;
    } catch (error) {
      if (attempt >= 3 || !/address already in use/.test(output)) {
        await rm(root, { recursive: true, force: true });
        dataDirs.delete(root);
        throw error;
      }
      output = '';
      await rm(dataDir, { recursive: true, force: true });
    }
  }
  if (auth) {
    await etcdctl('user', 'add', 'root', `--new-user-password=${auth.password}`);
    await etcdctl('auth', 'enable');
    signedIn = [`--user=root:${auth.password}`];
  }

  return {
    get endpoint() {
      return endpoint();
    },
    dataDir,
    get running() {
      return child !== undefined && running.has(child);
    },
    stderr: () => output,
    start,
    stop: () => signal('SIGTERM'),
    kill: () => signal('SIGKILL'),
    freeze: () => void child?.kill('SIGSTOP'),
    thaw: () => void child?.kill('SIGCONT'),
    async close() {
      await signal('SIGTERM');
      await healthAgent?.close();
      await rm(root, { recursive: true, force: true });
      dataDirs.delete(root);
    },
    revision,
    async compact() {
      const at = await revision();
      try {
        await etcdctl('compaction', String(at));
      } catch (error) {
        // Nothing written since the last compaction: the history is already compacted to here.
        if (!/required revision has been compacted/.test((error as Error).message)) throw error;
      }
      return at;
    },
    async put(key, value) {
      // `--` ends the options: a key or value may start with "-".
      const answer = JSON.parse(await etcdctl('put', '-w', 'json', '--', key, value)) as { header: { revision: number } };
      return answer.header.revision;
    },
    async get(key) {
      const answer = JSON.parse(await etcdctl('get', '-w', 'json', '--', key)) as { kvs?: { value: string }[] };
      const value = answer.kvs?.[0]?.value;
      // etcdctl's JSON holds keys and values in base64.
      return value === undefined ? undefined : Buffer.from(value, 'base64').toString('utf8');
    },
    async del(key) {
      const answer = JSON.parse(await etcdctl('del', '-w', 'json', '--', key)) as { deleted?: number | string };
      return Number(answer.deleted ?? 0);
    },
    etcdctl,
  };
}

/** Whether `GET /health` answers `{"health":"true"}`. */
async function healthy(endpoint: string, dispatcher: Agent | undefined): Promise<boolean> {
  try {
    const response = await request(`${endpoint}/health`, { signal: AbortSignal.timeout(1000), ...(dispatcher ? { dispatcher } : {}) });
    const body = (await response.body.json()) as { health?: unknown };
    return body.health === 'true';
  } catch {
    return false;
  }
}
