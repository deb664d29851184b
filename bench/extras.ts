// More measurements for bench/run.ts, each independent of the load rounds' machinery:
//
//   HAProxy     the reference C proxy as one more target of the interleaved rounds (its config, start-up)
//   TTFB        single-stream time to first byte: one keep-alive connection, sequential streaming requests
//   memory      RSS of the bare gateway idle, with 10,000 idle keep-alive connections, and with 1,000
//               slow SSE streams in flight on top
import type { ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import { freePort } from '../test/support/haproxy.ts';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

// --- HAProxy ------------------------------------------------------------------------------------

/** Resolves once something accepts TCP connections on 127.0.0.1:`port`. */
async function waitForPort(port: number, child: ChildProcess, stderr: () => string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (child.exitCode !== null) throw new Error(`haproxy exited (code ${child.exitCode}) before it was ready\n${stderr()}`);
    const ok = await new Promise<boolean>((done) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => (s.destroy(), done(true)));
      s.once('error', () => done(false));
    });
    if (ok) return;
    await sleep(50);
  }
  throw new Error(`haproxy did not listen on ${port} within 10 s\n${stderr()}`);
}

/** HAProxy config: one thread, HTTP mode, keep-alive both sides, one backend server (the mock), no checks. */
export function haproxyConfig(port: number, mockUrl: string): string {
  const mock = new URL(mockUrl);
  return [
    'global',
    '  nbthread 1',
    '  maxconn 4096', // 2 fds per connection must fit the open-files limit
    'defaults',
    '  mode http',
    '  option http-keep-alive',
    '  timeout connect 10s',
    '  timeout client 120s',
    '  timeout server 120s',
    '  timeout http-keep-alive 120s',
    '  timeout http-request 120s',
    'frontend fe',
    `  bind 127.0.0.1:${port}`,
    '  default_backend mock',
    'backend mock',
    '  http-reuse safe',
    `  server mock ${mock.hostname}:${mock.port}`,
    '',
  ].join('\n');
}

/**
 * Starts `haproxy -db -f <cfg>` through `launch` (which pins it to CPU 0), resolves with its pid and URL
 * once it accepts connections.
 */
export async function startHaproxy(
  launch: (cpu: string, cmd: string, args: string[]) => ChildProcess, mockUrl: string, dir: string,
): Promise<{ child: ChildProcess; pid: number; url: string }> {
  const port = await freePort();
  const cfg = join(dir, 'haproxy.cfg');
  writeFileSync(cfg, haproxyConfig(port, mockUrl));
  const child = launch('0', 'haproxy', ['-db', '-f', cfg]);
  let stderr = '';
  child.stdout!.on('data', () => {});
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  await waitForPort(port, child, () => stderr);
  return { child, pid: child.pid!, url: `http://127.0.0.1:${port}` };
}

// --- single-stream time to first byte -----------------------------------------------------------

export interface TtfbTarget { name: string; url: string; headers: Record<string, string> }

/** Time (ms) from handing a POST of `body` to node:http (req.end) to its first body chunk. */
function firstByte(t: TtfbTarget, agent: Agent, body: string): Promise<number> {
  const headers = { ...t.headers, 'content-length': String(Buffer.byteLength(body)) };
  return new Promise<number>((done, fail) => {
    let first = NaN;
    const req = httpRequest(new URL('/v1/chat/completions', t.url), { method: 'POST', agent, headers }, (res) => {
      res.on('data', () => {
        if (Number.isNaN(first)) first = Number(process.hrtime.bigint() - t0) / 1e6;
      });
      res.once('end', () => (res.statusCode === 200 ? done(first) : fail(new Error(`${t.name}: HTTP ${res.statusCode}`))));
    });
    req.once('error', fail);
    const t0 = process.hrtime.bigint();
    req.end(body);
  });
}

/**
 * `n` sequential POSTs of `body` per target (after `warmup` unmeasured ones), one keep-alive connection
 * per target, the targets interleaved request by request so that machine noise hits them alike.
 */
export async function ttfb(targets: TtfbTarget[], body: string, n: number, warmup = 30): Promise<Map<string, number[]>> {
  const agents = targets.map(() => new Agent({ keepAlive: true, maxSockets: 1 }));
  const out = new Map(targets.map((t) => [t.name, [] as number[]]));
  try {
    for (let i = 0; i < warmup + n; i++) {
      for (const [j, t] of targets.entries()) {
        const ms = await firstByte(t, agents[j]!, body);
        if (i >= warmup) out.get(t.name)!.push(ms);
      }
    }
  } finally {
    agents.forEach((a) => a.destroy());
  }
  return out;
}

export const percentile = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
};

/** Markdown table: p50/p95 per target, and added over the target named `direct`. */
export function ttfbTable(results: Map<string, number[]>, n: number): string {
  const direct = results.get('direct')!;
  const rows = [
    `| target | requests | p50 ms | p95 ms | added over direct p50 ms | added over direct p95 ms |`,
    '|---|--:|--:|--:|--:|--:|',
  ];
  for (const [name, xs] of results) {
    const add = (p: number) => (name === 'direct' ? '–' : (percentile(xs, p) - percentile(direct, p)).toFixed(3));
    rows.push(`| ${name} | ${n} | ${percentile(xs, 50).toFixed(3)} | ${percentile(xs, 95).toFixed(3)} | ${add(50)} | ${add(95)} |`);
  }
  return rows.join('\n');
}

// --- memory -------------------------------------------------------------------------------------

/** VmRSS of a process, in MB (MiB). */
export function rssMb(pid: number): number {
  const kb = Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
  return kb / 1024;
}

/** Opens a connection, sends one request, resolves with the socket (kept open) once the response is complete. */
function idleConnection(url: URL, rawRequest: string): Promise<Socket> {
  return new Promise((done, fail) => {
    const s = connect(Number(url.port), url.hostname);
    let buf = '';
    s.setEncoding('latin1');
    s.once('error', fail);
    s.on('data', (d: string) => {
      buf += d;
      const end = buf.indexOf('\r\n\r\n');
      if (end === -1) return;
      const len = /^content-length:\s*(\d+)/im.exec(buf.slice(0, end))?.[1];
      const complete = len !== undefined ? buf.length >= end + 4 + Number(len) : buf.endsWith('0\r\n\r\n');
      if (!complete) return;
      if (!buf.startsWith('HTTP/1.1 200')) return fail(new Error(`idle connection: ${buf.slice(0, 200)}`));
      s.removeAllListeners('data');
      s.removeAllListeners('error');
      s.on('error', () => {});
      done(s);
    });
    s.write(rawRequest);
  });
}

/** Starts a streaming request on its own connection; resolves with it once the first body byte arrived. */
function openStream(url: URL, headers: Record<string, string>, body: string): Promise<{ destroy: () => void }> {
  return new Promise((done, fail) => {
    const req = httpRequest(new URL('/v1/chat/completions', url), { method: 'POST', agent: false, headers }, (res) => {
      if (res.statusCode !== 200) return fail(new Error(`stream: HTTP ${res.statusCode}`));
      res.once('data', () => done({ destroy: () => req.destroy() }));
      res.on('data', () => {});
    });
    req.on('error', (e) => fail(e));
    req.end(body);
  });
}

/** RSS (MB) of `pid` 2 s after `n` sequential requests to `t` (a warm-up, before any load). */
export async function warmIdleRss(pid: number, t: TtfbTarget, body: string, n = 500): Promise<number> {
  await ttfb([t], body, 0, n);
  await sleep(2000);
  return rssMb(pid);
}

export interface MemoryResult { warm?: number; idle: number; withConns: number; withStreams: number; afterClose: number; conns: number; streams: number; fdLimit: number }

/**
 * RSS of the gateway `pid` at `url`: idle; with `nConns` idle keep-alive connections (one non-streaming
 * request each); with `nStreams` slow SSE streams in flight on top; and after everything is closed.
 */
export async function memory(
  pid: number, url: string, chatBody: string, streamHeaders: Record<string, string>, streamBody: string, nConns: number, nStreams: number,
): Promise<MemoryResult> {
  const u = new URL(url);
  const fdLimit = Number(readFileSync('/proc/self/limits', 'utf8').match(/^Max open files\s+(\d+)/m)?.[1] ?? 1024);
  const conns = Math.max(0, Math.min(nConns, fdLimit - nStreams - 500)); // our own sockets count against our limit
  await sleep(2000);
  const idle = rssMb(pid);
  const raw = `POST /v1/chat/completions HTTP/1.1\r\nHost: ${u.host}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(chatBody)}\r\n\r\n${chatBody}`;
  const sockets: Socket[] = [];
  const streams: { destroy: () => void }[] = [];
  try {
    for (let i = 0; i < conns; i += 250) {
      sockets.push(...(await Promise.all(Array.from({ length: Math.min(250, conns - i) }, () => idleConnection(u, raw)))));
    }
    await sleep(2000);
    const open = sockets.filter((s) => !s.destroyed && s.readyState === 'open').length;
    const withConns = rssMb(pid);
    const headers = { ...streamHeaders, 'content-length': String(Buffer.byteLength(streamBody)) };
    for (let i = 0; i < nStreams; i += 100) {
      streams.push(...(await Promise.all(Array.from({ length: Math.min(100, nStreams - i) }, () => openStream(u, headers, streamBody)))));
    }
    await sleep(1000); // every stream is past its first chunk and mid-way (100 chunks × 100 ms = 10 s each)
    const withStreams = rssMb(pid);
    streams.forEach((s) => s.destroy());
    sockets.forEach((s) => s.destroy());
    await sleep(2000);
    return { idle, withConns, withStreams, afterClose: rssMb(pid), conns: open, streams: streams.length, fdLimit };
  } finally {
    streams.forEach((s) => s.destroy());
    sockets.forEach((s) => s.destroy());
  }
}

export function memoryLines(m: MemoryResult, nConns: number): string {
  const f = (x: number) => `**${x.toFixed(1)} MB**`;
  const limited = m.conns < nConns ? ` (fewer than ${nConns}: our open-files limit is ${m.fdLimit})` : '';
  const warm = m.warm === undefined ? [] : [`- Idle after start-up and a 500-request warm-up (before the load rounds): ${f(m.warm)} (target ≤ 80 MB: ${m.warm <= 80 ? 'meets' : 'misses'})`];
  return [
    ...warm,
    `- Idle after the load rounds (minutes at full load): ${f(m.idle)} (target ≤ 80 MB: ${m.idle <= 80 ? 'meets' : 'misses'})`,
    `- With ${m.conns} idle keep-alive connections${limited}: ${f(m.withConns)}`,
    `- With those plus ${m.streams} slow SSE streams in flight (100 chunks, 100 ms apart): ${f(m.withStreams)} ` +
      `(target ≤ 400 MB: ${m.withStreams <= 400 ? 'meets' : 'misses'})`,
    `- 2 s after closing them all: ${m.afterClose.toFixed(1)} MB`,
  ].join('\n');
}
