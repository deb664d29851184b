// A real HAProxy in front of gateway instances, health-checking /readyz the way a production
// balancer would.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface HaproxyProcess {
  readonly url: string;
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

export async function startHaproxy(
  backends: { name: string; port: number }[],
  options: { checkIntervalMs?: number; http2?: boolean } = {},
): Promise<HaproxyProcess> {
  const port = await freePort();
  const inter = options.checkIntervalMs ?? 200;
  const config = `global
  maxconn 2000
  log stderr format raw local0 info

defaults
  mode http
  log global
  option httplog
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
  timeout check 1s
  retries 2
  option redispatch

frontend fe
  bind 127.0.0.1:${port}${options.http2 ? ' proto h2' : ''}
  default_backend gateways

backend gateways
  balance roundrobin
  option httpchk GET /readyz
  http-check expect status 200
  default-server inter ${inter}ms fastinter ${inter}ms downinter ${inter}ms fall 2 rise 1
${backends.map((b) => `  server ${b.name} 127.0.0.1:${b.port} check${options.http2 ? ' proto h2 check-proto h1' : ''}`).join('\n')}
`;
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
    output: () => output,
    async stop() {
      child.kill('SIGKILL');
      await exited;
    },
  };
}
