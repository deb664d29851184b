// Bounded load on 127.0.0.1 against the built gateway and the mock upstream: many concurrent
// keep-alive connections, many concurrent SSE streams, and a burst of requests at a fixed
// concurrency. Every answer is checked, the gateway's resident memory is sampled, and afterwards it
// must be back at its baseline: nothing in flight, no connection, memory within a bound of where it
// started. V8 does not collect garbage while a process is idle, so RSS alone stays near its peak
// for a long time; the gateway runs with its inspector on a loopback port and the test asks it for
// a full GC (HeapProfiler.collectGarbage) before each memory reading that is asserted. The figures
// are printed (`load:` lines) and recorded in docs/reliability.md.
//
// SLUICE_LOAD_SCALE=N multiplies every count (connections, streams, burst size and concurrency)
// for a soak by hand; the default, 1, keeps the file well under a minute. The connection count is
// lowered, with a message, when `ulimit -n` is too small for it.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { once } from 'node:events';
import { Client, Pool } from 'undici';
import WebSocket from 'ws';
import { metricValue, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { assertSettled, inFlightTotal, openConnections, rssKiB, sseBlocks } from '../support/reliability.ts';

const SCALE = Math.max(0.01, Number(process.env.SLUICE_LOAD_SCALE ?? 1) || 1);
const WANTED_CONNECTIONS = Math.round(2000 * SCALE);
const REQUESTS_PER_CONNECTION = 3;
const STREAMS = Math.round(300 * SCALE);
/** Streams last chunks × interval (2 s at scale 1, longer at high scales so that all can be open at once). */
const STREAM_CHUNKS = Math.round(20 * Math.max(1, SCALE / 2));
const STREAM_INTERVAL_MS = 100;
const BURST = Math.round(10_000 * SCALE);
const BURST_CONCURRENCY = Math.round(200 * Math.min(SCALE, 10));
/** Per-test time limits grow with the scale. */
const LIMIT_MS = (base: number) => Math.round(base * Math.max(1, SCALE));
/** After the load and a full GC, RSS must be within this factor of the baseline (or this slack)… */
const RSS_FACTOR = 2;
const RSS_SLACK_KIB = 64 * 1024;
/** …and the V8 heap in use within this factor (or this slack): a leak per request or connection
 *  of even a few hundred bytes would pass 16 MiB over the ~17,000 exchanges. */
const HEAP_FACTOR = 2;
const HEAP_SLACK_BYTES = 16 * 1024 * 1024;
/** What each descriptor the gateway still holds may add: its idle keep-alive connections to the
 *  mock (one per concurrent request with max_connections 0, closed after 30 s idle) are live
 *  memory, not a leak (measured: about 3 KiB of heap each). */
const PER_FD_HEAP_BYTES = 8 * 1024;
const PER_FD_RSS_KIB = 32;

/** File descriptors this process may open (the gateway child inherits the same limit). */
function fdLimit(): number {
  const text = execFileSync('sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).trim();
  return text === 'unlimited' ? Number.POSITIVE_INFINITY : Number(text);
}
// Each client connection costs this process two descriptors (the client socket, and the mock's end
// of the gateway's upstream connection) and the gateway two; keep 500 spare.
const FD_LIMIT = fdLimit();
const CONNECTIONS = Math.max(10, Math.min(WANTED_CONNECTIONS, Math.floor((FD_LIMIT - 500) / 2)));

let mock: MockUpstream;
let gw: GatewayProcess;
let baselineRss = 0;
let baselineHeap = 0;
let baselineFds = 0;
let peakRss = 0;
let sampler: NodeJS.Timeout | undefined;
const figures: Record<string, string | number> = {};

function record(name: string, value: string | number): void {
  figures[name] = value;
  console.log(`load: ${name} = ${value}`);
}

/** CPU seconds (user + system) the gateway has used so far, from /proc/<pid>/stat. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
}

/** A full garbage collection in the gateway, through its inspector (a loopback port). */
async function collectGarbage(target: GatewayProcess): Promise<void> {
  const url = /ws:\/\/127\.0\.0\.1:\d+\/[\w-]+/.exec(target.stderr())?.[0];
  assert.ok(url, `no inspector address on the gateway's stderr: ${target.stderr()}`);
  const ws = new WebSocket(url);
  await once(ws, 'open');
  try {
    let id = 0;
    const call = (method: string) =>
      new Promise<void>((resolve, reject) => {
        const mine = ++id;
        const onMessage = (data: Buffer) => {
          const message = JSON.parse(data.toString('utf8')) as { id?: number; error?: { message: string } };
          if (message.id !== mine) return;
          ws.off('message', onMessage);
          if (message.error) reject(new Error(`${method}: ${message.error.message}`));
          else resolve();
        };
        ws.on('message', onMessage);
        ws.send(JSON.stringify({ id: mine, method }));
      });
    await call('HeapProfiler.enable');
    await call('HeapProfiler.collectGarbage');
    await call('HeapProfiler.disable');
  } finally {
    ws.close();
    await once(ws, 'close');
  }
}

/** Open file descriptors of a process (sockets included). */
const fdCount = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;

async function heapUsed(target: GatewayProcess): Promise<number> {
  const value = metricValue(await scrape(target), 'nodejs_heap_size_used_bytes');
  assert.ok(value !== undefined, 'no nodejs_heap_size_used_bytes metric');
  return value;
}

/** The gateway's stderr without the inspector's own messages. */
const ownStderr = (target: GatewayProcess) =>
  target
    .stderr()
    .split('\n')
    .filter((line) => line !== '' && !/^(Debugger listening on|For help, see|Debugger attached|Debugger ending|Waiting for the debugger)/.test(line))
    .join('\n');

const chatBody = (content: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: 'mock-gpt', messages: [{ role: 'user', content }], ...extra });
const HEADERS = { 'content-type': 'application/json' };

/** The text of a chat completion stream: its deltas' content, concatenated. */
function streamText(body: string): string {
  let text = '';
  for (const block of sseBlocks(body)) {
    if (!block.startsWith('data: {')) continue;
    const event = JSON.parse(block.slice(6)) as { choices: { delta?: { content?: string } }[] };
    text += event.choices[0]?.delta?.content ?? '';
  }
  return text;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

before(async () => {
  if (CONNECTIONS < WANTED_CONNECTIONS) {
    console.log(`load: ulimit -n is ${FD_LIMIT}: ${CONNECTIONS} connections instead of ${WANTED_CONNECTIONS} (raise it with \`ulimit -n\` in the shell that runs the tests)`);
  }
  console.log(`load: scale ${SCALE} (SLUICE_LOAD_SCALE), ulimit -n ${FD_LIMIT}, load average ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')}`);
  mock = await startMockUpstream({ record: false });
  gw = await startGateway({
    env: { NODE_OPTIONS: '--inspect=127.0.0.1:0' },
    config: {
      providers: [
        { name: 'up', type: 'openai', base_url: `${mock.url}/v1` },
        { name: 'local', type: 'echo' },
      ],
      models: [
        { name: 'mock-gpt', provider: 'up' },
        { name: 'echo', provider: 'local' },
      ],
    },
  });
  // Warm up (JIT, pools, buffers), then take the baseline.
  const warm = new Pool(gw.proxyUrl, { connections: 16 });
  await Promise.all(
    Array.from({ length: 400 }, async (_, i) => {
      const res = await warm.request({ path: '/v1/chat/completions', method: 'POST', headers: HEADERS, body: chatBody(`warm ${i}`) });
      await res.body.text();
    }),
  );
  await warm.close();
  await assertSettled(gw, 'after warm-up');
  await collectGarbage(gw);
  baselineRss = rssKiB(gw.child.pid!);
  baselineHeap = await heapUsed(gw);
  baselineFds = fdCount(gw.child.pid!);
  peakRss = baselineRss;
  sampler = setInterval(() => {
    try {
      peakRss = Math.max(peakRss, rssKiB(gw.child.pid!));
    } catch {
      // the process is gone; the tests will say so
    }
  }, 100);
  record('rss_baseline_mib', (baselineRss / 1024).toFixed(1));
  record('heap_baseline_mib', (baselineHeap / 1048576).toFixed(1));
});

after(async () => {
  if (sampler) clearInterval(sampler);
  console.log(`load: figures ${JSON.stringify(figures)}`);
  await gw?.stop();
  await mock?.close();
});

describe('load', () => {
  test(`${CONNECTIONS} concurrent keep-alive connections, ${REQUESTS_PER_CONNECTION} requests each`, { timeout: LIMIT_MS(120_000) }, async () => {
    const metricsBefore = await scrape(gw);
    const acceptedBefore = metricValue(metricsBefore, 'sluice_connections_accepted_total', { listener: 'proxy' }) ?? 0;
    const cpuBefore = cpuSeconds(gw.child.pid!);
    const started = Date.now();
    // One undici Client per connection (pipelining 1): exactly one socket each.
    const clients = Array.from({ length: CONNECTIONS }, () => new Client(gw.proxyUrl, { pipelining: 1, keepAliveTimeout: 120_000, keepAliveMaxTimeout: 120_000 }));
    let failures = 0;
    const problems: string[] = [];
    const one = async (client: Client, c: number, r: number) => {
      const content = `conn ${c} req ${r}`;
      try {
        const res = await client.request({ path: '/v1/chat/completions', method: 'POST', headers: HEADERS, body: chatBody(content) });
        const text = await res.body.text();
        if (res.statusCode !== 200 || !text.includes(`mock reply to: ${content}"`)) {
          failures++;
          if (problems.length < 5) problems.push(`${res.statusCode}: ${text.slice(0, 200)}`);
        }
      } catch (error) {
        failures++;
        if (problems.length < 5) problems.push(String(error));
      }
    };
    try {
      // Round one all at once: every connection is open at the same time. Then the others.
      await Promise.all(clients.map((client, c) => one(client, c, 0)));
      const open = openConnections(await scrape(gw));
      for (let r = 1; r < REQUESTS_PER_CONNECTION; r++) await Promise.all(clients.map((client, c) => one(client, c, r)));
      const elapsed = (Date.now() - started) / 1000;
      const metrics = await scrape(gw);
      const accepted = (metricValue(metrics, 'sluice_connections_accepted_total', { listener: 'proxy' }) ?? 0) - acceptedBefore;
      const total = CONNECTIONS * REQUESTS_PER_CONNECTION;
      const cpu = cpuSeconds(gw.child.pid!) - cpuBefore;
      record('connections', CONNECTIONS);
      record('connections_open_after_round_one', open);
      record('connections_accepted', accepted);
      record('connections_requests', total);
      record('connections_seconds', elapsed.toFixed(2));
      record('connections_gateway_cpu_us_per_request', Math.round((cpu / total) * 1e6));
      assert.equal(failures, 0, `${failures} failed requests, e.g. ${problems.join(' | ')}`);
      assert.equal(open, CONNECTIONS, 'every connection open at once after round one');
      assert.equal(accepted, CONNECTIONS, 'keep-alive: no connection was replaced');
      assert.equal(openConnections(metrics), CONNECTIONS, 'all connections still open (idle) before the clients close them');
      assert.equal(inFlightTotal(metrics), 0);
    } finally {
      await Promise.all(clients.map((client) => client.close().catch(() => client.destroy())));
    }
    await assertSettled(gw, 'after the connections test', 0, LIMIT_MS(20_000));
  });

  test(`${STREAMS} concurrent SSE streams (${STREAM_CHUNKS} chunks, ${STREAM_INTERVAL_MS} ms apart) all complete with [DONE]`, { timeout: LIMIT_MS(120_000) }, async () => {
    const pool = new Pool(gw.proxyUrl, { connections: STREAMS, pipelining: 1 });
    let peakInFlight = 0;
    let streaming = true;
    const poll = (async () => {
      while (streaming) {
        peakInFlight = Math.max(peakInFlight, inFlightTotal(await scrape(gw)));
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    const started = Date.now();
    const firstByte: number[] = [];
    const durations: number[] = [];
    let failures = 0;
    const problems: string[] = [];
    try {
      await Promise.all(
        Array.from({ length: STREAMS }, async (_, i) => {
          const content = `stream ${i}`;
          const t0 = Date.now();
          try {
            const res = await pool.request({
              path: '/v1/chat/completions',
              method: 'POST',
              headers: { ...HEADERS, ...mockHeader({ chunks: STREAM_CHUNKS, sseIntervalMs: STREAM_INTERVAL_MS }) },
              body: chatBody(content, { stream: true }),
            });
            let text = '';
            let first = true;
            for await (const chunk of res.body) {
              if (first) firstByte.push(Date.now() - t0);
              first = false;
              text += (chunk as Buffer).toString('utf8');
            }
            durations.push(Date.now() - t0);
            const blocks = sseBlocks(text);
            if (res.statusCode !== 200 || blocks.at(-1) !== 'data: [DONE]' || streamText(text) !== `mock reply to: ${content}` || blocks.length !== STREAM_CHUNKS + 2) {
              failures++;
              if (problems.length < 5) problems.push(`${res.statusCode}: ${text.slice(-200)}`);
            }
          } catch (error) {
            failures++;
            if (problems.length < 5) problems.push(String(error));
          }
        }),
      );
    } finally {
      streaming = false;
      await poll;
      await pool.close();
    }
    const elapsed = (Date.now() - started) / 1000;
    firstByte.sort((a, b) => a - b);
    durations.sort((a, b) => a - b);
    record('streams', STREAMS);
    record('streams_peak_in_flight', peakInFlight);
    record('streams_seconds', elapsed.toFixed(2));
    record('streams_first_byte_ms_p50_p99', `${percentile(firstByte, 50)} / ${percentile(firstByte, 99)}`);
    record('streams_duration_ms_p50_p99', `${percentile(durations, 50)} / ${percentile(durations, 99)}`);
    assert.equal(failures, 0, `${failures} failed streams, e.g. ${problems.join(' | ')}`);
    assert.equal(peakInFlight, STREAMS, 'every stream was in flight at the same time');
    await assertSettled(gw, 'after the streams test', 0, LIMIT_MS(20_000));
  });

  test(`a burst of ${BURST} requests at concurrency ${BURST_CONCURRENCY}: zero unexpected errors`, { timeout: LIMIT_MS(180_000) }, async () => {
    const pool = new Pool(gw.proxyUrl, { connections: BURST_CONCURRENCY, pipelining: 1 });
    const cpuBefore = cpuSeconds(gw.child.pid!);
    const latencies: number[] = [];
    const byKind = { json: 0, echo: 0, stream: 0 };
    let next = 0;
    let failures = 0;
    const problems: string[] = [];
    const started = Date.now();
    const worker = async () => {
      for (let i = next++; i < BURST; i = next++) {
        // 80% JSON through the mock, 10% echo (local), 10% short streams through the mock.
        const kind = i % 10 === 0 ? 'echo' : i % 10 === 5 ? 'stream' : 'json';
        const content = `burst ${i}`;
        const t0 = performance.now();
        try {
          const res = await pool.request({
            path: '/v1/chat/completions',
            method: 'POST',
            headers: HEADERS,
            body: kind === 'echo' ? JSON.stringify({ model: 'echo', messages: [{ role: 'user', content }] }) : chatBody(content, kind === 'stream' ? { stream: true } : {}),
          });
          const text = await res.body.text();
          latencies.push(performance.now() - t0);
          const ok =
            res.statusCode === 200 &&
            (kind === 'json'
              ? text.includes(`"content":"mock reply to: ${content}"`)
              : kind === 'echo'
                ? text.includes(`"content":"echo: ${content}"`)
                : text.endsWith('data: [DONE]\n\n') && streamText(text) === `mock reply to: ${content}`);
          if (ok) byKind[kind]++;
          else {
            failures++;
            if (problems.length < 5) problems.push(`${kind} ${res.statusCode}: ${text.slice(0, 200)}`);
          }
        } catch (error) {
          failures++;
          if (problems.length < 5) problems.push(`${kind}: ${String(error)}`);
        }
      }
    };
    try {
      await Promise.all(Array.from({ length: BURST_CONCURRENCY }, worker));
    } finally {
      await pool.close();
    }
    const elapsed = (Date.now() - started) / 1000;
    const cpu = cpuSeconds(gw.child.pid!) - cpuBefore;
    latencies.sort((a, b) => a - b);
    record('burst_requests', BURST);
    record('burst_concurrency', BURST_CONCURRENCY);
    record('burst_seconds', elapsed.toFixed(2));
    record('burst_requests_per_second', Math.round(BURST / elapsed));
    record('burst_latency_ms_p50_p99_max', `${percentile(latencies, 50).toFixed(1)} / ${percentile(latencies, 99).toFixed(1)} / ${(latencies.at(-1) ?? 0).toFixed(1)}`);
    record('burst_gateway_cpu_us_per_request', Math.round((cpu / BURST) * 1e6));
    record('burst_ok_by_kind', JSON.stringify(byKind));
    assert.equal(failures, 0, `${failures} failed requests, e.g. ${problems.join(' | ')}`);
    assert.equal(byKind.json + byKind.echo + byKind.stream, BURST);
    await assertSettled(gw, 'after the burst', 0, LIMIT_MS(20_000));
  });

  test('the gateway\'s memory returns within a bound of its baseline after the load', { timeout: 60_000 }, async () => {
    // A short settle first, without help: what an operator's RSS graph would show.
    const settleStarted = Date.now();
    const before = rssKiB(gw.child.pid!);
    let rss = before;
    while (rss > before * 0.8 && Date.now() - settleStarted < 3000) {
      await new Promise((r) => setTimeout(r, 250));
      rss = rssKiB(gw.child.pid!);
    }
    record('rss_peak_mib', (peakRss / 1024).toFixed(1));
    record('rss_after_settle_no_gc_mib', (rss / 1024).toFixed(1));
    // Then what is really retained: after a full GC.
    await collectGarbage(gw);
    const rssAfterGc = rssKiB(gw.child.pid!);
    const heapAfterGc = await heapUsed(gw);
    record('rss_after_gc_mib', (rssAfterGc / 1024).toFixed(1));
    record('rss_after_gc_over_baseline', (rssAfterGc / baselineRss).toFixed(2));
    record('heap_after_gc_mib', (heapAfterGc / 1048576).toFixed(1));
    const extraFds = Math.max(0, fdCount(gw.child.pid!) - baselineFds);
    record('gateway_fds_baseline_after', `${baselineFds} / ${baselineFds + extraFds}`);
    const rssBound = Math.max(baselineRss * RSS_FACTOR, baselineRss + RSS_SLACK_KIB) + extraFds * PER_FD_RSS_KIB;
    const heapBound = Math.max(baselineHeap * HEAP_FACTOR, baselineHeap + HEAP_SLACK_BYTES) + extraFds * PER_FD_HEAP_BYTES;
    assert.ok(rssAfterGc <= rssBound, `RSS ${(rssAfterGc / 1024).toFixed(1)} MiB after the load and a GC, baseline ${(baselineRss / 1024).toFixed(1)} MiB, bound ${(rssBound / 1024).toFixed(1)} MiB`);
    assert.ok(heapAfterGc <= heapBound, `heap ${(heapAfterGc / 1048576).toFixed(1)} MiB after the load and a GC, baseline ${(baselineHeap / 1048576).toFixed(1)} MiB, bound ${(heapBound / 1048576).toFixed(1)} MiB`);
    await assertSettled(gw, 'at the end');
    assert.equal(ownStderr(gw), '');
    assert.ok(!gw.logs.some((l) => l.event === 'handler_error'), 'a request handler threw');
  });
});
