// Deterministic cost checks: the work the built gateway does per upstream event of a stream, and
// per JSON request, counted rather than timed, so that a regression in the work done per event
// fails here on any machine, loaded or not (the timed figures are bench/'s, never a test's).
//
// The gateway runs at its defaults (`workers: 1`, access log on, metrics) with one client key and
// one model (one target), with test/support/cost-counters-preload.ts loaded by `node --import`: it
// counts the writes to client sockets, JSON.parse and JSON.stringify calls, and the buffers
// allocated, per process, over its IPC channel. The mock upstream writes a stream's events one at
// a time, each once the gateway has read the one before (its pace), so that every upstream event
// is a read of its own, as on a real provider's stream, however loaded the machine.
//
// A stream of E events is measured at E = 50 and E = 200, and each count fitted as a + b·E: b is
// the work per upstream event, a the work per stream. Every stream is measured on its own, twice
// per E, and the two must count alike: a count that depends on time would make this check flaky,
// and is a bug of the harness. Each bound is today's measured value (a count cannot drift by
// noise): a new call per event fails with what grew and the lines its calls come from. A count
// that drops below its bound is printed as such: lower the bound to keep the win.
//
// The figures are printed as `cost:` lines and recorded in BENCHMARKS.md ("Cost counts").
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from 'undici';
import { startCountedGateway, type CountedGateway, type CounterName, type Counts, type Sites } from '../support/cost-counters.ts';
import { startMockUpstream, type MockScenario, type MockUpstream } from '../support/mock-upstream.ts';

const KEY = 'sk-client-cost-counts';
/** Long enough that the mock's default answer ("mock reply to: " and the prompt) gives every one of 200 chunks some text. */
const PROMPT = 'Count the work done per event. '.repeat(10);
const SMALL_E = 50;
const LARGE_E = 200;
/** Streams measured at each E, each on its own; they must count alike. */
const REPEATS = 2;
/** Requests before a measurement: the connections (client and upstream) are open, every module loaded. */
const WARM_UP = 2;

/** What is asserted; the other counters are printed. */
const ASSERTED = ['response writes', 'client socket writes', 'JSON.parse', 'JSON.stringify', 'buffers allocated'] as const satisfies readonly CounterName[];
type Asserted = (typeof ASSERTED)[number];
type Bounds = Record<Asserted, number>;
/** What the log's writer does when a batch of lines is written: batches go every 100 ms or 16 KiB, so this depends on time. Printed only. */
const TIMED: CounterName = 'calls in log writes';
/** Printed with the asserted ones. */
const SHOWN: readonly CounterName[] = [...ASSERTED, 'upstream socket reads', 'upstream socket writes', 'client bytes written', 'buffer bytes allocated', TIMED];

let mock: MockUpstream;
/** OpenAI client, OpenAI-type provider: relayed as it comes. */
let relayed: CountedGateway;
/** OpenAI client, Anthropic-type provider: every event parsed and translated. */
let translated: CountedGateway;

before(async () => {
  mock = await startMockUpstream();
  const gateway = (provider: Record<string, unknown>, model: string) =>
    // One process whatever SLUICE_TEST_WORKERS says: the counts are a process's.
    startCountedGateway({ config: { workers: 1, providers: [provider], models: [{ name: model, provider: provider.name }], keys: [KEY] } });
  [relayed, translated] = await Promise.all([
    gateway({ name: 'openai', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream-openai' }, 'gpt-test'),
    gateway({ name: 'anthropic', type: 'anthropic', base_url: mock.url, api_key: 'sk-upstream-anthropic' }, 'claude-test'),
  ]);
});

after(async () => {
  for (const client of clientFor.values()) await client.close();
  await relayed?.gateway.stop();
  await translated?.gateway.stop();
  await mock?.close();
});

// ---- requests ----------------------------------------------------------------------------------

interface Case {
  readonly name: string;
  readonly gateway: () => CountedGateway;
  readonly model: string;
  readonly stream: boolean;
  /** The client sends `stream_options: { include_usage: true }`. */
  readonly usage: boolean;
  /** The mock's answer (its script) for a stream of `events` content events. */
  readonly script: (events: number) => MockScenario;
}

/** One keep-alive connection per gateway, opened by the first warm-up: a measured request never opens one. */
const clientFor = new Map<CountedGateway, Client>();
function client(gateway: CountedGateway): Client {
  let found = clientFor.get(gateway);
  if (found === undefined) {
    found = new Client(gateway.gateway.proxyUrl);
    clientFor.set(gateway, found);
  }
  return found;
}

/** One chat request, read to its end; a stream must be whole and carry `contentEvents` chunks of text. */
async function chat(c: Case, contentEvents: number): Promise<void> {
  const body = { model: c.model, messages: [{ role: 'user', content: PROMPT }], ...(c.stream ? { stream: true } : {}), ...(c.usage ? { stream_options: { include_usage: true } } : {}) };
  const res = await client(c.gateway()).request({
    path: '/v1/chat/completions',
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.body.text();
  assert.equal(res.statusCode, 200, text);
  if (!c.stream) {
    assert.match(text, /"content":"/);
    return;
  }
  assert.ok(text.endsWith('data: [DONE]\n\n'), `the stream is not whole: …${text.slice(-200)}`);
  const withText = text.split('\n\n').filter((event) => /"delta":\{[^}]*"content":"[^"]/.test(event)).length;
  assert.equal(withText, contentEvents, 'every content event reached the client with its text');
  assert.equal(/"usage":\{/.test(text), c.usage, c.usage ? 'the usage the client asked for reached it' : 'the usage the client did not ask for was taken out');
}

interface Measured {
  readonly counts: Counts;
  readonly sites: Sites;
}

/** Each request counted on its own (a reset before, a read once it has finished); they must count alike. */
async function measure(c: Case, events: number, repeats: number): Promise<Measured> {
  const { counters } = c.gateway();
  mock.script(c.script(events));
  mock.pace(c.stream ? counters.pacer() : undefined);
  try {
    await counters.reset();
    for (let i = 0; i < WARM_UP; i++) await chat(c, events);
    await counters.read(WARM_UP);
    let first: Measured | undefined;
    for (let i = 0; i < repeats; i++) {
      await counters.reset();
      await chat(c, events);
      const measured = await counters.read(1);
      if (first === undefined) first = measured;
      else
        assert.deepEqual(
          { ...measured.counts, [TIMED]: 0 },
          { ...first.counts, [TIMED]: 0 },
          `${c.name}: two identical requests (${events} events) counted differently: the harness counts something that depends on time`,
        );
    }
    return first!;
  } finally {
    mock.pace(undefined);
    mock.script(undefined);
  }
}

// ---- the mock's streams ------------------------------------------------------------------------

/** The mock's default OpenAI stream: `events` content chunks, the finish chunk, the usage chunk (the gateway always asks it), [DONE]. */
const openAiStream = (events: number): MockScenario => ({ chunks: events });

/** An Anthropic stream whose every text delta carries a word, as the mock's default one would not at 200 deltas. */
function anthropicStream(events: number): MockScenario {
  const ev = (type: string, payload: Record<string, unknown> = {}) => ({ event: type, data: JSON.stringify({ type, ...payload }) });
  return {
    sseDone: false,
    sse: [
      ev('message_start', { message: { id: 'msg_cost', type: 'message', role: 'assistant', model: 'claude-test', content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 90, output_tokens: 1 } } }),
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
      ev('ping'),
      ...Array.from({ length: events }, (_, i) => ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: `word${i} ` } })),
      ev('content_block_stop', { index: 0 }),
      ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: events } }),
      ev('message_stop'),
    ],
  };
}

// ---- fitting and reporting ---------------------------------------------------------------------

const fmt = (n: number): string => String(Math.round(n * 1000) / 1000);
const EPSILON = 1e-9;

/** Per event (b) and per stream (a) of counts fitted as a + b·E through two streams. */
function fit(small: Record<string, number>, large: Record<string, number>): { perEvent: Record<string, number>; perStream: Record<string, number> } {
  const perEvent: Record<string, number> = {};
  const perStream: Record<string, number> = {};
  for (const key of new Set([...Object.keys(small), ...Object.keys(large)])) {
    const b = ((large[key] ?? 0) - (small[key] ?? 0)) / (LARGE_E - SMALL_E);
    perEvent[key] = b;
    perStream[key] = (small[key] ?? 0) - b * SMALL_E;
  }
  return { perEvent, perStream };
}

/** The shown counters that are fitted (the log's writes depend on time). */
const FITTED = SHOWN.filter((name) => name !== TIMED);

/** `{a: 1, b: 0}` → `a 1, b 0` for the shown counters. */
const line = (values: Record<string, number>, names: readonly CounterName[] = SHOWN): string => names.map((name) => `${name} ${fmt(values[name] ?? 0)}`).join(', ');

/** Where the calls of `counter` come from, by site, as a list of `+n site` lines (largest first). */
function siteLines(perSite: Record<string, number>): string {
  return Object.entries(perSite)
    .filter(([, n]) => Math.abs(n) > EPSILON)
    .sort((x, y) => y[1] - x[1])
    .map(([where, n]) => `    ${n > 0 ? '+' : ''}${fmt(n)}  ${where}`)
    .join('\n');
}

/** The allocating calls that 'buffers allocated' sums. */
const ALLOCATIONS: readonly CounterName[] = ['Buffer.alloc', 'Buffer.allocUnsafe', 'Buffer.allocUnsafeSlow', 'Buffer.from', 'Buffer.concat', 'Buffer.copyBytesFrom', 'TextEncoder.encode'];

/** The call sites of a counter; those of 'buffers allocated' are its allocating calls', each named. */
function sitesOf(sites: Sites, counter: CounterName): Record<string, number> {
  if (counter !== 'buffers allocated') return sites[counter] ?? {};
  const all: Record<string, number> = {};
  for (const call of ALLOCATIONS) for (const [where, n] of Object.entries(sites[call] ?? {})) all[`${call} at ${where}`] = n;
  return all;
}

/**
 * Fails with every asserted count above its bound, and the call sites of each; notes the counts
 * below their bound (a win to keep: lower the bound).
 */
function check(what: string, unit: string, measured: Record<string, number>, bounds: Bounds, callSites: (counter: CounterName) => Record<string, number>): string[] {
  const grew: string[] = [];
  for (const counter of ASSERTED) {
    const value = measured[counter] ?? 0;
    const bound = bounds[counter];
    if (value > bound + EPSILON) {
      grew.push(`${what}: ${counter} per ${unit} grew to ${fmt(value)} (bound ${bound}); its calls per ${unit} come from:\n${siteLines(callSites(counter))}`);
    } else if (value < bound - EPSILON) {
      console.log(`cost: ${what}: ${counter} per ${unit} is ${fmt(value)}, below its bound ${bound}: lower the bound to keep the win`);
    }
  }
  return grew;
}

// ---- the checks ----------------------------------------------------------------------------------

interface StreamCheck extends Case {
  /** Upstream reads per stream besides one per content event (preamble events, the end, the response's own end). */
  readonly otherReads: number;
  readonly perEvent: Bounds;
  readonly perStream: Bounds;
}

// Today's counts (each bound is exact: a count is the same on every machine and every run).
// Where one is above what the stream needs, the comment says why and what would lower it.
const STREAM_CHECKS: StreamCheck[] = [
  {
    name: 'relayed stream, the client asking for its usage',
    gateway: () => relayed,
    model: 'gpt-test',
    stream: true,
    usage: true,
    script: openAiStream,
    otherReads: 4, // the finish chunk, the usage chunk, [DONE], the chunked body's end
    // Per event: the event's one write, nothing allocated (StreamEndWatch keeps a view of the
    // head of the last read, not a copy; the output text is kept as the reads, scanned only if an
    // estimate is needed).
    perEvent: { 'response writes': 1, 'client socket writes': 1, 'JSON.parse': 0, 'JSON.stringify': 0, 'buffers allocated': 0 },
    // Per stream: the finish chunk, the usage chunk and [DONE], a write each, and the body's end
    // its own socket write; the body's parse, the usage line's; the access log line; the key's digest.
    perStream: { 'response writes': 3, 'client socket writes': 4, 'JSON.parse': 2, 'JSON.stringify': 1, 'buffers allocated': 1 },
  },
  {
    name: 'relayed stream, usage not asked (the gateway asks it and takes it out)',
    gateway: () => relayed,
    model: 'gpt-test',
    stream: true,
    usage: false,
    script: openAiStream,
    otherReads: 4,
    // Per event: its one write; UsageStripper's output, the read without its `,"usage":null`
    // (bytes copied around the cut, nothing decoded).
    perEvent: { 'response writes': 1, 'client socket writes': 1, 'JSON.parse': 0, 'JSON.stringify': 0, 'buffers allocated': 1 },
    // Per stream: the body parsed, and serialized again with stream_options added (and turned into
    // a Buffer); the usage line's parse; the access log line. The usage chunk is taken out: one
    // write fewer.
    perStream: { 'response writes': 2, 'client socket writes': 3, 'JSON.parse': 2, 'JSON.stringify': 2, 'buffers allocated': 4 },
  },
  {
    name: 'translated stream (OpenAI client, Anthropic provider), usage not asked',
    gateway: () => translated,
    model: 'claude-test',
    stream: true,
    usage: false,
    script: anthropicStream,
    otherReads: 7, // message_start, content_block_start, ping, content_block_stop, message_delta, message_stop, the end
    // Per event: parsing every event is the translation's work; its chunk serialized, turned into
    // a Buffer, written.
    perEvent: { 'response writes': 1, 'client socket writes': 1, 'JSON.parse': 1, 'JSON.stringify': 1, 'buffers allocated': 1 },
    // Per stream: the role chunk, the finish chunk and [DONE] (with the body's end, one socket
    // write); the body's parse, the six other events' parses and the two usage lines' (message_start's,
    // message_delta's); the request translated, the role and finish chunks, the access log line;
    // the key's digest, the request's body, three chunks, and two StringDecoders (the translator's
    // and its SseParser's, which is given text and never decodes: one too many).
    perStream: { 'response writes': 3, 'client socket writes': 3, 'JSON.parse': 9, 'JSON.stringify': 4, 'buffers allocated': 7 },
  },
  {
    name: 'translated stream (OpenAI client, Anthropic provider), the client asking for its usage',
    gateway: () => translated,
    model: 'claude-test',
    stream: true,
    usage: true,
    script: anthropicStream,
    otherReads: 7,
    perEvent: { 'response writes': 1, 'client socket writes': 1, 'JSON.parse': 1, 'JSON.stringify': 1, 'buffers allocated': 1 },
    // The same, and the usage chunk the client asked for.
    perStream: { 'response writes': 4, 'client socket writes': 4, 'JSON.parse': 9, 'JSON.stringify': 5, 'buffers allocated': 8 },
  },
];

interface RequestCheck extends Case {
  readonly perRequest: Bounds;
}

const REQUEST_CHECKS: RequestCheck[] = [
  {
    name: 'JSON chat request, relayed',
    gateway: () => relayed,
    model: 'gpt-test',
    stream: false,
    usage: false,
    script: () => ({}),
    // The body's parse and the answer's usage; the access log line; the key's digest; head and body in one write.
    perRequest: { 'response writes': 1, 'client socket writes': 1, 'JSON.parse': 2, 'JSON.stringify': 1, 'buffers allocated': 1 },
  },
  {
    name: 'JSON chat request, translated (OpenAI client, Anthropic provider)',
    gateway: () => translated,
    model: 'claude-test',
    stream: false,
    usage: false,
    script: () => ({}),
    // Translated both ways: the request serialized, the answer parsed and serialized.
    perRequest: { 'response writes': 1, 'client socket writes': 1, 'JSON.parse': 3, 'JSON.stringify': 3, 'buffers allocated': 4 },
  },
];

describe('cost counts: work per upstream event of a stream, and per JSON request, at the defaults', () => {
  test('the counters count nothing of their own: an idle gateway asked for its counts and paced reads counts 0', async () => {
    const { counters } = relayed;
    await counters.reset();
    for (let i = 0; i < 20; i++) await counters.upstreamReadsAbove(-1);
    const { counts } = await counters.read(0);
    // (The log's writer may hand over a batch of the start's lines meanwhile: its count depends on time.)
    const counted = Object.entries(counts).filter(([name, n]) => n !== 0 && name !== TIMED);
    assert.deepEqual(counted, [], 'the harness itself does no counted work');
  });

  for (const c of STREAM_CHECKS) {
    test(`${c.name}: per upstream event at most ${ASSERTED.map((k) => `${c.perEvent[k]} ${k}`).join(', ')}`, async () => {
      const small = await measure(c, SMALL_E, REPEATS);
      const large = await measure(c, LARGE_E, REPEATS);
      const { perEvent, perStream } = fit(small.counts, large.counts);
      console.log(`cost: ${c.name}: E=${SMALL_E}: ${line(small.counts)}`);
      console.log(`cost: ${c.name}: E=${LARGE_E}: ${line(large.counts)}`);
      console.log(`cost: ${c.name}: per event ${line(perEvent, FITTED)}`);
      console.log(`cost: ${c.name}: per stream ${line(perStream, FITTED)}`);
      // The premise: each upstream event was a read of its own (the mock's pace held).
      assert.equal(perEvent['upstream socket reads'], 1, `${c.name}: each upstream event should be one read of the gateway's (the mock's pace): ${line(perEvent, FITTED)}`);
      assert.equal(perStream['upstream socket reads'], c.otherReads, `${c.name}: upstream reads per stream besides the content events`);
      const sitesFit = (counter: CounterName) => fit(sitesOf(small.sites, counter), sitesOf(large.sites, counter));
      const grew = [
        ...check(c.name, 'upstream event', perEvent, c.perEvent, (counter) => sitesFit(counter).perEvent),
        ...check(c.name, 'stream', perStream, c.perStream, (counter) => sitesFit(counter).perStream),
      ];
      if (grew.length > 0) assert.fail(grew.join('\n'));
    });
  }

  for (const c of REQUEST_CHECKS) {
    test(`${c.name}: per request at most ${ASSERTED.map((k) => `${c.perRequest[k]} ${k}`).join(', ')}`, async () => {
      const measured = await measure(c, 0, 3);
      console.log(`cost: ${c.name}: per request ${line(measured.counts)}`);
      const grew = check(c.name, 'request', measured.counts, c.perRequest, (counter) => sitesOf(measured.sites, counter));
      if (grew.length > 0) assert.fail(grew.join('\n'));
    });
  }
});
