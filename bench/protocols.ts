// TLS and HTTP/2 targets for bench/run.ts. One more gateway ("protocols", configured like "bare")
// gets four proxy listeners, so the four protocols are compared inside one process and one run:
//
//   http1       HTTP/1.1 cleartext                      wrk   http://
//   http1+tls   HTTP/1.1 over TLS (protocols: [http1])  wrk   https://  (no ALPN, no certificate check)
//   h2c         HTTP/2 with prior knowledge ([h2])      h2load http://
//   h2+tls      HTTP/2 over TLS, ALPN h2 ([h2])         h2load https://
//
// This file has what is specific to them: the listener configs, a sanity-check request in each
// protocol, running h2load and parsing its output, and the method lines and table comparing each
// protocol with cleartext HTTP/1.1.
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect as connectH2 } from 'node:http2';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import type { Sample } from './run.ts';
import { median, fixed as n } from './stats.ts';

export type Protocol = 'http1' | 'h2';

export interface ProtocolTarget {
  name: 'http1' | 'http1+tls' | 'h2c' | 'h2+tls';
  listener: string;
  protocol: Protocol;
  tls: boolean;
  label: string;
}

/** The HTTP/1.1 cleartext target every other protocol target is compared with. */
export const BASELINE = 'http1';

export const PROTOCOL_TARGETS: readonly ProtocolTarget[] = [
  { name: 'http1', listener: 'proxy', protocol: 'http1', tls: false, label: 'HTTP/1.1 cleartext' },
  { name: 'http1+tls', listener: 'proxy-tls', protocol: 'http1', tls: true, label: 'HTTP/1.1 + TLS' },
  { name: 'h2c', listener: 'proxy-h2c', protocol: 'h2', tls: false, label: 'h2c (prior knowledge)' },
  { name: 'h2+tls', listener: 'proxy-h2-tls', protocol: 'h2', tls: true, label: 'h2 + TLS' },
];

/** The listeners the "protocols" gateway has besides its cleartext `proxy` and its `admin`. */
export function protocolListeners(targets: readonly ProtocolTarget[], pki: { cert: string; key: string } | undefined): { name: string; tls?: object }[] {
  return targets
    .filter((t) => t.listener !== 'proxy')
    .map((t) => ({
      name: t.listener,
      address: '127.0.0.1:0',
      role: 'proxy',
      protocols: [t.protocol],
      ...(t.tls ? { tls: { cert_file: pki!.cert, key_file: pki!.key } } : {}),
    }));
}

// --- sanity check -------------------------------------------------------------------------------

/**
 * POSTs `body` to `${url}${path}` in `protocol` (HTTP/2: prior knowledge on http://, ALPN h2 on
 * https://), verifying the certificate against `ca`. For the targets fetch() can't reach.
 */
export function post(url: string, path: string, protocol: Protocol, headers: Record<string, string>, body: string, ca: Buffer | undefined): Promise<{ status: number; text: string }> {
  return new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`no answer from ${url} (${protocol}) within 10 s`)), 10_000);
    const finish = (status: number, text: string, close?: () => void) => {
      clearTimeout(timer);
      close?.();
      done({ status, text });
    };
    const failed = (error: Error) => {
      clearTimeout(timer);
      fail(new Error(`${protocol} request to ${url} failed: ${error.message}`));
    };
    if (protocol === 'h2') {
      const session = connectH2(url, ca ? { ca } : {});
      session.once('error', failed);
      const req = session.request({ ':method': 'POST', ':path': path, ...headers });
      let status = 0;
      let text = '';
      req.setEncoding('utf8');
      req.on('response', (h) => (status = Number(h[':status'])));
      req.on('data', (d: string) => (text += d));
      req.on('end', () => finish(status, text, () => session.close()));
      req.on('error', failed);
      req.end(body);
      return;
    }
    const req = httpsRequest(`${url}${path}`, { method: 'POST', headers, ca, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => finish(res.statusCode ?? 0, text));
    });
    req.on('error', failed);
    req.end(body);
  });
}

// --- h2load -------------------------------------------------------------------------------------

export const H2LOAD = { clients: 8, streams: 4, threads: 1 };

export interface H2Result {
  requests: number; // done
  seconds: number; // "finished in"
  errors: number; // errored (stream or connection errors, timeouts included)
  non2xx: number; // failed minus errored: an HTTP status h2load does not count as a success
  p50Ms: number;
  p99Ms: number;
  meanMs: number; // h2load's own "time for request" mean
  protocol: string; // "Application protocol:"
  tls: string; // "TLSv1.3 TLS_AES_256_GCM_SHA384" on TLS, else ''
}

/** A duration as h2load prints it (`513us`, `10.61ms`, `2.01s`), in milliseconds. */
function durationMs(text: string): number {
  const m = /^([\d.]+)(us|ms|s)$/.exec(text.trim());
  if (!m) return NaN;
  const scale = { us: 1e-3, ms: 1, s: 1e3 }[m[2] as 'us' | 'ms' | 's'];
  return Number(m[1]) * scale;
}

/**
 * Reads h2load's summary: "finished in 2.01s, 2984.50 req/s, 1.01MB/s", "requests: 5969 total,
 * 6001 started, 5969 done, 5969 succeeded, 0 failed, 0 errored, 0 timeout", "time for request:
 * min max mean sd +/-sd". p50/p99 come from `log`, its --log-file (start µs, status, µs to the end
 * of the response, tab-separated), when given.
 */
export function parseH2load(out: string, log?: string): H2Result {
  const fail = (what: string): never => {
    throw new Error(`h2load output has no ${what}:\n${out.slice(-2000)}`);
  };
  const finished = /finished in\s+(\S+?),/.exec(out) ?? fail('"finished in" line');
  const seconds = durationMs(finished[1]!) / 1e3;
  const requestsLine = /^requests:(.*)$/m.exec(out) ?? fail('"requests:" line');
  const counts: Record<string, number> = {};
  for (const m of requestsLine[1]!.matchAll(/(\d+)\s+([a-z]+)/g)) counts[m[2]!] = Number(m[1]);
  if (counts.done === undefined) fail('"N done" count');
  const timing = /^time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)/m.exec(out);
  const errored = counts.errored ?? 0;
  let p50Ms = NaN;
  let p99Ms = NaN;
  if (log) {
    const us = log
      .split('\n')
      .map((line) => Number(line.split('\t')[2]))
      .filter((x) => Number.isFinite(x))
      .sort((a, b) => a - b);
    const pct = (p: number) => (us.length > 0 ? us[Math.min(us.length - 1, Math.ceil((p / 100) * us.length) - 1)]! / 1e3 : NaN);
    p50Ms = pct(50);
    p99Ms = pct(99);
  }
  return {
    requests: counts.done!,
    seconds: Number.isFinite(seconds) && seconds > 0 ? seconds : fail('parsable duration in "finished in"'),
    errors: errored,
    non2xx: Math.max(0, (counts.failed ?? 0) - errored),
    p50Ms,
    p99Ms,
    meanMs: timing ? durationMs(timing[3]!) : NaN,
    protocol: /^Application protocol:\s*(\S+)/m.exec(out)?.[1] ?? 'none',
    tls: [/^TLS Protocol:\s*(\S+)/m, /^Cipher:\s*(\S+)/m].map((re) => re.exec(out)?.[1] ?? '').join(' ').trim(),
  };
}

const bodyFiles = new Map<string, string>(); // request body → the file h2load posts it from
let tlsSeen = ''; // as h2load last reported it, for the method section

export interface H2Run { url: string; tls: boolean; seconds: number; body: string; headers: Record<string, string>; dir: string }

/**
 * One timed h2load run of `seconds`: POSTs of `body` with `headers` over HTTP/2 (prior knowledge on
 * http://, ALPN h2 on https://). `exec` runs h2load with the given arguments (pinned) and resolves to
 * its stdout.
 */
export async function runH2load(exec: (args: string[]) => Promise<string>, r: H2Run): Promise<H2Result> {
  let bodyFile = bodyFiles.get(r.body);
  if (!bodyFile) {
    bodyFile = join(r.dir, `body-${bodyFiles.size}.json`);
    writeFileSync(bodyFile, r.body);
    bodyFiles.set(r.body, bodyFile);
  }
  const logFile = join(r.dir, 'h2load.log');
  writeFileSync(logFile, '');
  const headers = Object.entries(r.headers).flatMap(([k, v]) => ['-H', `${k}: ${v}`]);
  const args = [`-t${H2LOAD.threads}`, `-c${H2LOAD.clients}`, `-m${H2LOAD.streams}`, '-D', String(r.seconds), '-d', bodyFile, ...headers, `--log-file=${logFile}`, r.url];
  const out = await exec(args);
  const result = parseH2load(out, readFileSync(logFile, 'utf8'));
  if (result.protocol !== (r.tls ? 'h2' : 'h2c')) throw new Error(`h2load to ${r.url} negotiated "${result.protocol}", not HTTP/2:\n${out.slice(-2000)}`);
  if (result.tls) tlsSeen = result.tls;
  return result;
}

// --- reporting ----------------------------------------------------------------------------------

/** The method lines for the protocol targets that ran. */
export function protocolMethods(targets: readonly ProtocolTarget[]): string[] {
  if (targets.length === 0) return [];
  const lines = [
    `- Gateway "protocols": as "bare", with one proxy listener per protocol: ${targets.map((t) => t.label).join(', ')}. ` +
      'TLS: ECDSA P-256 test certificate (test/support/certs.ts); HTTP/1.1 over TLS from wrk (no ALPN; listener `protocols: [http1]`); ' +
      `h2 over TLS by ALPN (listener \`protocols: [h2]\`)${tlsSeen ? `, negotiated ${tlsSeen}` : ''}; h2c by prior knowledge (cleartext \`protocols: [h2]\`). ` +
      'Connections are kept alive: TLS handshakes happen once per connection at the start of each run, not per request',
  ];
  if (targets.some((t) => t.protocol === 'h2')) {
    const version = spawnSync('h2load', ['--version'], { encoding: 'utf8' }).stdout.trim().replace(/^h2load /, '');
    lines.push(
      `- HTTP/2 load generator: h2load (${version}) \`-t ${H2LOAD.threads} -c ${H2LOAD.clients} -m ${H2LOAD.streams} -D <secs> -d <body file> -H <header>...\`: ` +
        `${H2LOAD.clients} connections × ${H2LOAD.streams} concurrent streams = ${H2LOAD.clients * H2LOAD.streams} requests in flight, as wrk's ${H2LOAD.clients * H2LOAD.streams} connections; pinned like wrk`,
      '- Latency: HTTP/1.1 rows from wrk (p50/p99/mean over all requests); HTTP/2 rows from h2load, p50/p99 from its `--log-file` ' +
        '(per request, from its start to the end of the response) and the mean from its own "time for request" summary line',
    );
  }
  return lines;
}

const signed = (x: number) => `${x >= 0 ? '+' : ''}${n(x)}`;

/** One row per protocol target and case, with per-round ratios/differences against cleartext HTTP/1.1. */
export function protocolTable(results: Map<string, Map<string, Sample[]>>, targets: readonly ProtocolTarget[]): string {
  const rows = [
    '| case | protocol | req/s | p50 ms | p99 ms | mean ms | gateway CPU µs/req | mock CPU µs/req | req/s vs HTTP/1.1 | p50 vs HTTP/1.1 | gateway CPU vs HTTP/1.1 |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const [caseName, byTarget] of results) {
    const base = byTarget.get(BASELINE)!;
    for (const t of targets) {
      const samples = byTarget.get(t.name)!;
      const m = (f: (s: Sample) => number) => median(samples.map(f));
      // Per-round ratios and differences, then the median: slow drift of the machine cancels out.
      const ratio = (f: (s: Sample) => number) => (t.name === BASELINE ? '1' : `${n(median(samples.map((s, i) => f(s) / f(base[i]!))), 2)}×`);
      const delta = t.name === BASELINE ? '–' : `${signed(median(samples.map((s, i) => s.gwCpu - base[i]!.gwCpu)))} µs`;
      rows.push(
        `| ${caseName} | ${t.label} | ${n(m((s) => s.rps))} | ${n(m((s) => s.p50), 2)} | ${n(m((s) => s.p99), 2)} | ${n(m((s) => s.mean), 2)} | ` +
          `${n(m((s) => s.gwCpu))} | ${n(m((s) => s.mockCpu))} | ${ratio((s) => s.rps)} | ${ratio((s) => s.p50)} | ${delta} |`,
      );
    }
  }
  return rows.join('\n');
}

/** "TLS adds N µs per request" lines for the first case. */
export function protocolSummary(byTarget: Map<string, Sample[]>, targets: readonly ProtocolTarget[]): string {
  const base = byTarget.get(BASELINE)!;
  const cpu = median(base.map((s) => s.gwCpu));
  return targets
    .filter((t) => t.name !== BASELINE)
    .map((t) => {
      const samples = byTarget.get(t.name)!;
      const d = median(samples.map((s, i) => s.gwCpu - base[i]!.gwCpu));
      return `- Gateway CPU per non-streaming request, ${t.label}: **${n(median(samples.map((s) => s.gwCpu)))} µs**, ${signed(d)} µs against HTTP/1.1 cleartext (${n(cpu)} µs)`;
    })
    .join('\n');
}
