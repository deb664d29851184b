// The promise itself: a rolling restart of two instances behind a real HAProxy (health check on
// /readyz) under mixed load loses nothing (L2, L3, L5, L7).
//
// The first runs use a balancer that retries (`retries 2`, `option redispatch`) and a short window;
// their control replaces the drain with what a process without one does on SIGTERM (it dies at
// once). The last runs are the stricter form: a balancer that never retries, the default window,
// SSE streams and WebSocket sessions that outlast it, and controls that each break one rule and
// must each lose requests (so the test can fail for each of those rules). Every run prints a table.
import { after, before, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { Agent, request } from 'undici';
import { connect as http2Connect, type ClientHttp2Session } from 'node:http2';
import { startGateway, eventually, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream } from '../support/mock-upstream.ts';
import { requireTool } from '../support/system-tool.ts';
import { startHaproxy, freePort, type HaproxyProcess } from '../support/haproxy.ts';
import { startMixedLoad, formatCounts, totalLost, LOAD_KINDS, type LoadCounts } from '../support/mixed-load.ts';

const haproxy = requireTool('haproxy', 'haproxy');
let mock: MockUpstream;

before(async () => {
  mock = await startMockUpstream({ record: false });
});
after(async () => {
  await mock?.close();
});

type Protocol = 'http1' | 'h2';

async function instance(port: number, protocol: Protocol, workers: number): Promise<GatewayProcess> {
  return startGateway({
    config: {
      workers,
      listeners: [
        // HTTP/1.1 for HAProxy's health checks, h2c (prior knowledge) for its HTTP/2 traffic.
        { name: 'proxy', address: `127.0.0.1:${port}`, role: 'proxy', protocols: ['http1', 'h2'] },
        { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
      ],
      providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }],
      models: [{ name: 'm', provider: 'up' }],
      // The window covers HAProxy's detection (two failed checks, 200 ms apart) with a wide margin:
      // the suite runs tests in parallel on two cores, which slows checks down.
      shutdown: { min_drain_secs: 3 },
      log: { level: 'info', access_log: true },
    },
  });
}

interface LoadResult {
  ok: number;
  failures: string[];
  /** HTTP/2 streams refused with REFUSED_STREAM (not processed, RFC 9113 §8.7) and sent again. */
  refusedAndRetried: number;
}

/** A stream refused with REFUSED_STREAM: it crossed a GOAWAY and was not processed. */
const refusedStream = (error: unknown): boolean =>
  (error as { code?: string }).code === 'ERR_HTTP2_STREAM_ERROR' && String((error as Error).message).includes('NGHTTP2_REFUSED_STREAM');

/** One POST over a shared HTTP/2 session to the balancer (reconnecting when it goes away). */
function http2Client(url: string) {
  let session: ClientHttp2Session | undefined;
  const current = () => {
    if (!session || session.closed || session.destroyed) {
      session = http2Connect(url);
      session.on('error', () => {});
    }
    return session;
  };
  return {
    post(headers: Record<string, string>, body: string): Promise<{ status: number; text: string }> {
      return new Promise((resolve, reject) => {
        const stream = current().request({ ':method': 'POST', ':path': '/v1/chat/completions', ...headers });
        let status = 0;
        let text = '';
        stream.setEncoding('utf8');
        stream.on('response', (h) => (status = Number(h[':status'])));
        stream.on('data', (chunk: string) => (text += chunk));
        stream.on('end', () => resolve({ status, text }));
        stream.on('error', reject);
        stream.end(body);
      });
    },
    close() {
      session?.close();
    },
  };
}

/** Workers sending a mix of JSON (with upstream delays) and SSE streams until stopped. */
function runLoad(url: string, workers: number, protocol: Protocol): { stop(): Promise<LoadResult> } {
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: workers });
  const h2 = protocol === 'h2' ? http2Client(url) : undefined;
  const result: LoadResult = { ok: 0, failures: [], refusedAndRetried: 0 };
  let running = true;
  const post = async (headers: Record<string, string>, body: string) => {
    if (h2) return h2.post(headers, body);
    const res = await request(`${url}/v1/chat/completions`, { method: 'POST', headers, body, dispatcher: agent });
    return { status: res.statusCode, text: await res.body.text() };
  };
  const one = async (i: number) => {
    const stream = i % 3 === 0;
    const headers = {
      'content-type': 'application/json',
      ...mockHeader(stream ? { chunks: 8, sseIntervalMs: 60 } : { headersDelayMs: (i * 37) % 250 }),
    };
    const body = JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content: `req ${i}` }] });
    try {
      let answer;
      try {
        answer = await post(headers, body);
      } catch (error) {
        // A stream that crossed a gateway's GOAWAY (L4: the real last stream id, at once) is
        // refused, and the balancer passes the refusal on: it was not processed, and every HTTP/2
        // client sends it again on a new stream, as this one does, once. Counted apart, and bounded
        // by the test: only streams in flight at a GOAWAY can cross it.
        if (!refusedStream(error)) throw error;
        result.refusedAndRetried++;
        answer = await post(headers, body);
      }
      const { status, text } = answer;
      if (status !== 200) result.failures.push(`status ${status}: ${text.slice(0, 200)}`);
      else if (stream && (!text.includes('data: [DONE]') || text.includes('event: error'))) result.failures.push(`stream incomplete: …${text.slice(-120)}`);
      else result.ok++;
    } catch (error) {
      result.failures.push(`error: ${(error as Error).message}`);
      // A failing client must not spin.
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  let counter = 0;
  const loops = Array.from({ length: workers }, async () => {
    while (running) await one(counter++);
  });
  return {
    async stop() {
      running = false;
      await Promise.all(loops);
      await agent.close();
      h2?.close();
      return result;
    },
  };
}

async function servedSince(gw: GatewayProcess, from: number): Promise<void> {
  await gw.waitForLog((l) => l.event === 'access' && l.path === '/v1/chat/completions' && gw.logs.indexOf(l) >= from, 10_000);
}

async function rollingRestart(kill: 'drain' | 'no-drain', protocol: Protocol = 'http1', workers = 1): Promise<LoadResult> {
  const ports = [await freePort(), await freePort()];
  const gateways = [await instance(ports[0]!, protocol, workers), await instance(ports[1]!, protocol, workers)];
  const lb = await startHaproxy(
    [
      { name: 'a', port: ports[0]! },
      { name: 'b', port: ports[1]! },
    ],
    { http2: protocol === 'h2' },
  );
  const replacements: GatewayProcess[] = [];
  const load = runLoad(lb.url, 8, protocol);
  try {
    for (const gw of gateways) await servedSince(gw, 0);
    for (let i = 0; i < 2; i++) {
      const old = gateways[i]!;
      if (kill === 'drain') old.signal('SIGTERM');
      else old.signal('SIGKILL');
      await old.exited;
      const fresh = await instance(ports[i]!, protocol, workers);
      replacements.push(fresh);
      // The balancer has found the new instance and sends it traffic before the next one goes.
      await servedSince(fresh, 0);
    }
    const result = await load.stop();
    // For whoever has to find out why a request was lost: HAProxy's log of every answer that was
    // not a clean 200 (status and termination flags).
    if (result.failures.length > 0 && kill === 'drain') {
      const unusual = lb.output().split('\n').filter((line) => line.includes(' HTTP/') && !(/ 200 /.test(line) && / ---- /.test(line)));
      console.log(`haproxy lines for non-200 answers:\n${unusual.slice(0, 20).join('\n')}`);
    }
    return result;
  } catch (error) {
    await load.stop();
    throw error;
  } finally {
    await lb.stop();
    for (const gw of [...gateways, ...replacements]) await gw.stop();
  }
}

test('rolling restart of two instances behind HAProxy under mixed load loses no request', { skip: haproxy.skip, timeout: 60_000 }, async () => {
  const result = await rollingRestart('drain');
  assert.deepEqual(result.failures, []);
  assert.ok(result.ok > 50, `only ${result.ok} requests completed`);
});

test('the same rolling restart with HTTP/2 from client to HAProxy and from HAProxy to the gateways loses no request', { skip: haproxy.skip, timeout: 60_000 }, async () => {
  const result = await rollingRestart('drain', 'h2');
  assert.deepEqual(result.failures, []);
  // Two drains; at most the load's 8 concurrent streams can cross each GOAWAY.
  assert.ok(result.refusedAndRetried <= 16, `${result.refusedAndRetried} streams refused: more than could cross the two GOAWAYs`);
  assert.ok(result.ok > 50, `only ${result.ok} requests completed`);
});

test('the same rolling restart with two worker processes per instance loses no request', { skip: haproxy.skip, timeout: 60_000 }, async () => {
  const result = await rollingRestart('drain', 'http1', 2);
  assert.deepEqual(result.failures, []);
  assert.ok(result.ok > 50, `only ${result.ok} requests completed`);
});

test('control: the same restart without a drain (the process dies on SIGTERM) loses requests', { skip: haproxy.skip, timeout: 60_000 }, async () => {
  const result = await rollingRestart('no-drain');
  assert.ok(result.failures.length > 0, `no request lost in ${result.ok} without a drain: the rolling test could not fail`);
});

// ---------------------------------------------------------------------------------------------------
// A balancer that never retries, at the default window.
//
// HAProxy with `retries 0` and no redispatch: a request it sends to an instance that refuses the
// connection, or closes it without answering, is a lost request. Health checks on /readyz at
// HAProxy's defaults (every 2 s, down after 3 failures, up after 2 passes): the balancer goes on
// routing to a draining instance for 4 to 6 s. Traffic comes through two frontends to the same
// instances: HTTP mode (HAProxy picks a server per request) and TCP mode (layer 4, as a Kubernetes
// Service or a network load balancer: a client's connection stays on the instance it was routed to
// until one side closes it; only the gateway's `Connection: close` moves such a client, L3).
//
// A rolling update as an orchestrator does it: the replacement is a new instance on a new address
// that joins while the old one drains. HAProxy has a server slot for each replacement from the
// start; it is down (nothing listens there) until the replacement passes its checks. The platform
// sends SIGTERM, and SIGKILL once its grace period has passed (sized as the lifecycle contract says:
// window + longest session + margin), like Kubernetes' terminationGracePeriodSeconds.

/** The default window (`shutdown.min_drain_secs`); the passing run sets no shutdown key at all. */
const DEFAULT_WINDOW_SECS = 30;
/** Long SSE streams and WebSocket sessions last this long: past the window of the instance they are on. */
const LONG_SECS = 34;
const GRACE_SECS = 75;

type Breakage = 'none' | 'window-0' | 'no-connection-close' | 'listener-closed-at-signal';

/** The one setting each run changes; everything else is the same. */
const BREAKAGES: Record<Breakage, { shutdown?: Record<string, unknown>; admin?: string }> = {
  none: {},
  // Rule L2: the listener closes (as soon as nothing is in flight) while HAProxy still routes to it.
  'window-0': { shutdown: { min_drain_secs: 0 } },
  // Rule L3: responses keep their connections during the window. E1's gradual strategy with a
  // drain time so long that the chance of `Connection: close` stays about 0 through the window (it
  // rises to 1 at half the drain time); the window is still the default 30 s. The same drain time
  // puts E2's proactive drain (which would otherwise tell every connection to go 20 to 25 s into a
  // default drain) out of reach, so no response in the window says `Connection: close`. The clients
  // held on the old instance through the layer-4 frontend then never leave: their requests keep it
  // busy, so its listener never closes (L5 waits for work in flight), and the platform's SIGKILL at
  // the end of the grace period cuts the requests in flight. (With quicker requests the listener
  // does close once, between two requests, and the loss is a race between that close and a
  // client's next request: lost in most rolls, not in all. Hence 100-400 ms requests for them.)
  'no-connection-close': { shutdown: { drain_strategy: 'gradual', drain_time_secs: 1_000_000 } },
  // Rule L2 at the signal: the admin API's non-graceful stop closes the listener at once, then SIGTERM.
  'listener-closed-at-signal': { admin: '/drain_listeners' },
};

async function strictInstance(port: number, breakage: Breakage): Promise<GatewayProcess> {
  const { shutdown } = BREAKAGES[breakage];
  return startGateway({
    config: {
      workers: 1,
      listeners: [
        { name: 'proxy', address: `127.0.0.1:${port}`, role: 'proxy' },
        { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
      ],
      providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }],
      models: [
        { name: 'm', provider: 'up' },
        { name: 'rt', provider: 'up' },
      ],
      // Thousands of requests: the drain's own log lines are enough here.
      log: { level: 'info', access_log: false },
      ...(shutdown ? { shutdown } : {}),
    },
  });
}

interface Roll {
  name: string;
  signalledAt: number;
  /** HAProxy marked the old instance down, seconds after the signal. */
  lbDownSecs?: number;
  /** The replacement passed its checks, seconds after the signal. */
  replacementUpSecs?: number;
  listenersClosedSecs?: number;
  drainSecs?: number;
  exit?: string;
  killedByPlatform: boolean;
}

async function waitForStates(lb: HaproxyProcess, want: Record<string, 'up' | 'down'>, timeoutMs: number): Promise<void> {
  await eventually(
    async () => {
      const states = await lb.serverStates();
      return Object.entries(want).every(([name, state]) => states[name] === state);
    },
    timeoutMs,
    `haproxy server states ${JSON.stringify(want)}`,
  );
}

/** The moment (ms since epoch) HAProxy first reports `name` in `state`, polled every 100 ms. */
async function stateSince(lb: HaproxyProcess, name: string, state: 'up' | 'down', timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if ((await lb.serverStates())[name] === state) return Date.now();
    if (Date.now() > deadline) throw new Error(`haproxy did not report ${name} ${state} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface StrictResult {
  counts: LoadCounts;
  rolls: Roll[];
  old: GatewayProcess[];
}

/**
 * Starts two instances behind the no-retry HAProxy, runs the mixed load, and rolls both: A, then B
 * once HAProxy has taken A out and A's replacement in (B's drain overlaps A's, as in a Kubernetes
 * rolling update), each replaced by a new instance in its slot.
 */
async function strictRollingRestart(t: TestContext, title: string, breakage: Breakage, options: { longSessions: boolean }): Promise<StrictResult> {
  const ports = await Promise.all([freePort(), freePort(), freePort(), freePort()]);
  const names = ['a', 'b', 'a2', 'b2'];
  const old = await Promise.all([strictInstance(ports[0]!, breakage), strictInstance(ports[1]!, breakage)]);
  const replacements: GatewayProcess[] = [];
  const timers: NodeJS.Timeout[] = [];
  const lb = await startHaproxy(
    names.map((name, i) => ({ name, port: ports[i]! })),
    { retries: 0, redispatch: false, checkIntervalMs: 2000, fall: 3, rise: 2, tcpFrontend: true },
  );
  let load: ReturnType<typeof startMixedLoad> | undefined;
  const rolls: Roll[] = [];
  try {
    // The replacement slots must be down before any traffic: HAProxy would send requests there.
    await waitForStates(lb, { a: 'up', b: 'up', a2: 'down', b2: 'down' }, 15_000);
    load = startMixedLoad({ httpUrl: lb.url, tcpUrl: lb.tcpUrl!, model: 'm', realtimeModel: 'rt', longSecs: options.longSessions ? LONG_SECS : 0, longEveryMs: 1000 });
    // Warm: pooled connections on both instances, long sessions open on both.
    await eventually(() => load!.counts.json.ok >= 40 && load!.counts['json-l4'].ok >= 20 && load!.counts.ws.ok >= 2, 20_000, 'the load to be under way');
    if (options.longSessions) await new Promise((r) => setTimeout(r, 3000));
    for (let i = 0; i < 2; i++) {
      const gw = old[i]!;
      const roll: Roll = { name: names[i]!.toUpperCase(), signalledAt: Date.now(), killedByPlatform: false };
      rolls.push(roll);
      const admin = BREAKAGES[breakage].admin;
      if (admin) {
        const res = await request(`${gw.adminUrl}${admin}`, { method: 'POST' });
        await res.body.text();
        assert.equal(res.statusCode, 200);
      }
      gw.signal('SIGTERM');
      // The platform's grace period: SIGKILL if the drain has not ended by then.
      timers.push(
        setTimeout(() => {
          if (gw.child.exitCode === null && gw.child.signalCode === null) {
            roll.killedByPlatform = true;
            gw.signal('SIGKILL');
          }
        }, GRACE_SECS * 1000),
      );
      void gw.waitForLog((l) => l.event === 'listeners_closing', (GRACE_SECS + 5) * 1000).then(
        (l) => (roll.listenersClosedSecs = Number(l.elapsed_secs)),
        () => {},
      );
      void gw.exited.then(({ code, signal }) => {
        roll.exit = signal ?? String(code);
        const exitLine = gw.logs.find((l) => l.event === 'process_exit');
        if (exitLine) roll.drainSecs = Number(exitLine.drain_duration_secs);
      });
      const down = stateSince(lb, names[i]!, 'down', 20_000).then((at) => (roll.lbDownSecs = (at - roll.signalledAt) / 1000));
      replacements.push(await strictInstance(ports[i + 2]!, breakage));
      const up = stateSince(lb, names[i + 2]!, 'up', 20_000).then((at) => (roll.replacementUpSecs = (at - roll.signalledAt) / 1000));
      await Promise.all([down, up]);
    }
    // From here on new long sessions would only land on the replacements, which are not rolled.
    load.stopLong();
    for (const gw of old) await gw.exited;
    const counts = await load.stop(LONG_SECS * 1000 + 15_000);
    load = undefined;
    printTable(t, title, counts, rolls);
    if (totalLost(counts) > 0 && breakage === 'none') {
      // Request lines (httplog and tcplog formats) that did not end cleanly (termination state not ----, or -- for TCP).
      const unusual = lb
        .output()
        .split('\n')
        .filter((line) => (line.includes(' HTTP/') && !/ (200|101) .* ---- /.test(line)) || (line.includes(' fe_tcp ') && !/ -- \d/.test(line)));
      // One diagnostic per line: a reporter may show only the first line of each.
      for (const line of ['haproxy lines for unusual answers:', ...unusual.slice(0, 20)]) t.diagnostic(line);
    }
    return { counts, rolls, old };
  } finally {
    for (const timer of timers) clearTimeout(timer);
    await load?.stop(5000).catch(() => {});
    await lb.stop();
    for (const gw of [...old, ...replacements]) await gw.stop();
  }
}

function printTable(t: TestContext, title: string, counts: LoadCounts, rolls: Roll[]): void {
  const f = (v: number | undefined) => (v === undefined ? '-' : `${v.toFixed(1)}s`);
  const lines = [
    `run: ${title}`,
    ...formatCounts(counts).map((l) => `  ${l}`),
    `  total     lost ${totalLost(counts)}`,
    '  (seconds after the signal)',
    '  instance  haproxy-down  replacement-up  listeners-closed  drain  exit',
    ...rolls.map(
      (r) =>
        `  ${r.name.padEnd(8)}  ${f(r.lbDownSecs).padStart(12)}  ${f(r.replacementUpSecs).padStart(14)}  ${f(r.listenersClosedSecs).padStart(16)}  ${f(r.drainSecs).padStart(5)}  ${r.exit ?? '-'}${r.killedByPlatform ? ` (still draining after the ${GRACE_SECS} s grace period)` : ''}`,
    ),
  ];
  for (const kind of LOAD_KINDS) if (counts[kind].reasons.length > 0) lines.push(`  ${kind} lost, first reasons: ${counts[kind].reasons.slice(0, 3).join(' | ')}`);
  // Diagnostics, so the table is in the test output of every reporter (CI logs included).
  for (const line of lines) t.diagnostic(line);
}

test(
  'L2, L3, L5, L7: a rolling restart behind a balancer that never retries, at the default window, with SSE streams and WebSocket sessions longer than the window, loses nothing',
  { skip: haproxy.skip, timeout: 180_000 },
  async (t) => {
    const { counts, rolls } = await strictRollingRestart(t, 'no retries, default window (pass)', 'none', { longSessions: true });
    for (const kind of LOAD_KINDS) assert.deepEqual(counts[kind].reasons, [], `${kind}: lost ${counts[kind].lost} of ${counts[kind].sent}`);
    for (const kind of LOAD_KINDS) assert.ok(counts[kind].ok > 0, `no ${kind} completed`);
    for (const roll of rolls) {
      assert.equal(roll.exit, '0', `instance ${roll.name} exited with ${roll.exit}`);
      // The path under test was taken: long work in flight kept the listener open past the window.
      assert.ok((roll.listenersClosedSecs ?? 0) > DEFAULT_WINDOW_SECS + 0.5, `instance ${roll.name}: listeners closed at ${roll.listenersClosedSecs} s, no long session outlived the window`);
    }
  },
);

// The controls roll both instances as the passing run does (the second roll overlaps the first's
// drain, so it costs a few seconds). They send the same load without the long sessions: a long
// session in flight keeps the listener open (L5) whatever the window, which would hide a window of 0.
test('control, window 0 (L2): the listener closes while HAProxy still routes to it, and requests are lost', { skip: haproxy.skip, timeout: 120_000 }, async (t) => {
  const { counts } = await strictRollingRestart(t, 'control: min_drain_secs 0', 'window-0', { longSessions: false });
  assert.ok(totalLost(counts) > 0, 'no request lost with a window of 0: the no-retry rolling test could not fail for L2');
});

test('control, no Connection: close in the window (L3): clients held on the old instance lose requests', { skip: haproxy.skip, timeout: 150_000 }, async (t) => {
  const { counts } = await strictRollingRestart(t, 'control: no Connection: close during the window', 'no-connection-close', { longSessions: false });
  assert.ok(totalLost(counts) > 0, 'no request lost without Connection: close: the no-retry rolling test could not fail for L3');
});

test('control, listener closed at the signal (admin non-graceful stop, then SIGTERM): requests are lost', { skip: haproxy.skip, timeout: 120_000 }, async (t) => {
  const { counts } = await strictRollingRestart(t, 'control: listener closed at the signal', 'listener-closed-at-signal', { longSessions: false });
  assert.ok(totalLost(counts) > 0, 'no request lost with the listener closed at the signal: the no-retry rolling test could not fail for L2');
});
