// A real HAProxy in front of gateway instances, health-checking /readyz the way a production
// balancer would.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface HaproxyProcess {
  readonly url: string;
  /** With `tcpFrontend`: a layer-4 (TCP mode) frontend to the same servers. */
  readonly tcpUrl: string | undefined;
  /** Each server's state as HAProxy sees it (from its runtime API): up or not. */
  serverStates(): Promise<Record<string, 'up' | 'down'>>;
  /** HAProxy's own output, one log line per request (httplog format). */
  output(): string;
  stop(): Promise<void>;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface HaproxyOptions {
  /** Health-check interval (default 200 ms). */
  checkIntervalMs?: number;
  /** Failed checks before a server is marked down (default 2), passed checks before it is up again (default 1). */
  fall?: number;
  rise?: number;
  http2?: boolean;
  /** Connection retries after a failed connect (default 2); 0 means a refused connection is a failed request. */
  retries?: number;
  /** Retry on another server (default true). */
  redispatch?: boolean;
  /** Also a TCP-mode frontend and backend, whose servers follow the HTTP backend's health checks. */
  tcpFrontend?: boolean;
}

export async function startHaproxy(backends: { name: string; port: number }[], options: HaproxyOptions = {}): Promise<HaproxyProcess> {
  const port = await freePort();
  const tcpPort = options.tcpFrontend ? await freePort() : undefined;
  const statsPort = await freePort();
  const inter = options.checkIntervalMs ?? 200;
  const retries = options.retries ?? 2;
  const config = `global
  maxconn 2000
  log stderr format raw local0 info
  stats socket ipv4@127.0.0.1:${statsPort} level admin

defaults
  mode http
  log global
  option httplog
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
  timeout check 1s
  # WebSocket sessions, once upgraded.
  timeout tunnel 120s
  retries ${retries}
${options.redispatch ?? true ? '  option redispatch' : '  no option redispatch'}

frontend fe
  bind 127.0.0.1:${port}${options.http2 ? ' proto h2' : ''}
  default_backend gateways

backend gateways
  balance roundrobin
  option httpchk GET /readyz
  http-check expect status 200
  default-server inter ${inter}ms fastinter ${inter}ms downinter ${inter}ms fall ${options.fall ?? 2} rise ${options.rise ?? 1}
${backends.map((b) => `  server ${b.name} 127.0.0.1:${b.port} check${options.http2 ? ' proto h2 check-proto h1' : ''}`).join('\n')}
${
  tcpPort === undefined
    ? ''
    : `
# Layer 4, as a Kubernetes Service or a network load balancer: a client's connection stays on the
# server it was routed to until one side closes it.
frontend fe_tcp
  mode tcp
  option tcplog
  bind 127.0.0.1:${tcpPort}
  default_backend gateways_tcp

backend gateways_tcp
  mode tcp
  balance roundrobin
${backends.map((b) => `  server ${b.name} 127.0.0.1:${b.port} track gateways/${b.name}`).join('\n')}
`
}`;
  const dir = mkdtempSync(join(tmpdir(), 'sluice-haproxy-'));
  const file = join(dir, 'haproxy.cfg');
  writeFileSync(file, config);
  const child: ChildProcess = spawn('haproxy', ['-db', '-f', file], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // Wait until the frontend accepts.
  const deadline = Date.now() + 5000;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = createServer();
      socket.once('error', () => resolve(true)); // address in use: haproxy is listening
      socket.listen(port, '127.0.0.1', () => socket.close(() => resolve(false)));
    });
    if (ok) break;
    if (Date.now() > deadline) throw new Error(`haproxy did not start:\n${output}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `http://127.0.0.1:${port}`,
    tcpUrl: tcpPort === undefined ? undefined : `http://127.0.0.1:${tcpPort}`,
    async serverStates() {
      // `show servers state`: srv_op_state 2 is running (up); 0 stopped, 1 starting, 3 stopping.
      const text = await runtimeCommand(statsPort, 'show servers state gateways');
      const states: Record<string, 'up' | 'down'> = {};
      for (const line of text.split('\n')) {
        const fields = line.trim().split(/\s+/);
        if (fields.length > 5 && fields[1] === 'gateways') states[fields[3]!] = fields[5] === '2' ? 'up' : 'down';
      }
      return states;
    },
    output: () => output,
    async stop() {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** One command on HAProxy's runtime API (the stats socket); resolves with its answer. */
function runtimeCommand(port: number, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let answer = '';
    socket.setEncoding('utf8');
    socket.setTimeout(2000, () => socket.destroy(new Error(`haproxy runtime API: no answer to "${command}"`)));
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('end', () => resolve(answer));
    socket.on('error', reject);
    socket.end(`${command}\n`);
  });
}
