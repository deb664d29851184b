// The provider conformance suite: one set of cases run against every provider kind (openai,
// anthropic, azure_openai, bedrock with Converse and with Anthropic's body, gemini, vertex with
// Gemini and with Anthropic's models), each played by its mock (test/support/provider-kinds.ts
// describes them). Through the built gateway, with the official OpenAI and Anthropic clients:
// JSON and streamed answers with their usage counted and priced, tool calls, each failure class
// falling back to a provider of another type (and a prompt too long not falling back), a client
// that leaves mid-stream, a drain, a forced end, a hot restart, and for the kinds that sign with
// the gateway's own cloud identity, credentials refreshed ahead of expiry and a credential source
// that is down. A case a kind's mock cannot script is skipped for that kind, its name saying why.
//
// Gateways: one serves the JSON, stream, tool, failure and cancel cases of every kind (kinds run
// one after another, so a gauge at 0 means this kind's request left). A drain, a forced end and a
// hot restart end a process: each is run once, on a gateway of its own, with a stream of every
// kind and API in flight. The credential cases have gateways of their own (short-lived
// credentials; a credential source that is down), each kind's scenario its own requests. These
// runs start at once, beside the first kinds' cases, and each kind's case asserts on its own part.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { Agent, request } from 'undici';
import { eventually, scrape, startGateway, stopWithGenerations, type GatewayProcess } from '../support/gateway-process.ts';
import { inFlightTotal, sumMetric } from '../support/reliability.ts';
import {
  CHUNKS, FAILURE_CLASSES, FIRST_TOKEN_TIMEOUT_MS, KINDS, PRICES, TOOL, cloudEnv, deadHost, fallbackOf, openStream, startMocks, summarize,
  type AwsIdentity, type ClientApi, type FailureClass, type GoogleIdentity, type Mocks, type OpenStream, type ProviderKind, type SeenRequest,
} from '../support/provider-kinds.ts';

const CLIENT_KEY = 'sk-conformance-client-7f3a9c21';
const KEY_NAME = 'conformance';
const APIS: readonly ClientApi[] = ['chat', 'messages'];
/** The lifetime of the short-lived credentials of the refresh cases. */
const LIFETIME_SEC = 4;

/** The route entry that sends to `kind` alone. */
const entry = (kind: ProviderKind): string => `c-${kind.id}`;
/** The route entry whose first target is `kind` failing with `failure`, then a provider of another type. */
const fallbackEntry = (kind: ProviderKind, failure: FailureClass): string => `fb-${kind.id}-${failure}`;
const marker = (): string => randomBytes(4).toString('hex');

/** Every kind's provider and route entries, the client key with a budget, the kinds' prices. */
function gatewayConfig(mocks: Mocks, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const routes = KINDS.flatMap((kind) =>
    FAILURE_CLASSES.flatMap((failure) => {
      const headers = kind.failures[failure];
      if (typeof headers === 'string') return [];
      const other = fallbackOf(kind);
      const first: Record<string, unknown> = { provider: kind.provider, model: kind.model, priority: 0, headers };
      if (failure === 'first_token') first.first_token_timeout_ms = FIRST_TOKEN_TIMEOUT_MS;
      return [{ name: fallbackEntry(kind, failure), targets: [first, { provider: other.provider, model: other.model, priority: 1 }] }];
    }),
  );
  return {
    providers: KINDS.map((kind) => kind.providerConfig(mocks)),
    models: [...KINDS.map((kind) => ({ name: entry(kind), provider: kind.provider, upstream_model: kind.model })), ...routes],
    keys: [{ name: KEY_NAME, key: CLIENT_KEY, budget: { usd: 100, period: 'month' } }],
    prices: PRICES,
    // A failure opens no circuit: every case finds its first target where the route puts it.
    routing: { cooldown_failures: 0 },
    // A client that leaves ends its upstream request at once (the answer is not read on for its usage).
    limits: { read_after_disconnect_secs: 0 },
    shutdown: { min_drain_secs: 0 },
    ...extra,
  };
}

/** Everything started, stopped at the end (gateways first). */
const cleanups: (() => Promise<void>)[] = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** Starts a gateway over `mocks` that is stopped at the end. */
async function gateway(mocks: Mocks, identities: [AwsIdentity, GoogleIdentity], extra: Record<string, unknown> = {}): Promise<GatewayProcess> {
  const gw = await startGateway({ config: gatewayConfig(mocks, extra), env: cloudEnv(mocks, ...identities) });
  cleanups.push(() => (extra.hot_restart === undefined ? gw.stop() : stopWithGenerations(gw)));
  return gw;
}

async function mocksFor(settings: Parameters<typeof startMocks>[0] = {}): Promise<Mocks> {
  const mocks = await startMocks(settings);
  cleanups.push(() => mocks.close());
  return mocks;
}

/** Runs `make` once, on first use. */
function once<T>(make: () => Promise<T>): () => Promise<T> {
  let made: Promise<T> | undefined;
  return () => {
    if (made === undefined) {
      made = make();
      // Started ahead of the case that reads it: a failure is that case's.
      made.catch(() => undefined);
    }
    return made;
  };
}

function withDeadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms)));
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** The sum of a counter's samples with exactly these labels (among others). */
function counter(text: string, name: string, labels: Record<string, string>): number {
  return sumMetric(text, name, (l) => Object.entries(labels).every(([k, v]) => l[k] === v));
}

const tokens = (text: string, kind: ProviderKind, type: 'prompt' | 'completion'): number =>
  counter(text, 'sluice_tokens_total', { model: entry(kind), provider: kind.provider, key: KEY_NAME, type });
const spend = (text: string, kind: ProviderKind): number => counter(text, 'sluice_spend_usd_total', { model: entry(kind), key: KEY_NAME });
const attempts = (text: string, kind: ProviderKind, outcome: string): number =>
  counter(text, 'sluice_upstream_attempts_total', { provider: kind.provider, model: kind.model, outcome });
/** The kind's attempts between two scrapes, by outcome (for the messages of failed assertions). */
function attemptsBetween(before: string, now: string, kind: ProviderKind): string {
  const outcomes = new Set([...now.matchAll(/^sluice_upstream_attempts_total\{[^}]*outcome="([^"]*)"/gm)].map((m) => m[1]!));
  const moved = [...outcomes].map((o) => [o, attempts(now, kind, o) - attempts(before, kind, o)] as const).filter(([, n]) => n !== 0);
  return `${kind.label}'s attempts meanwhile: ${moved.map(([o, n]) => `${o} +${n}`).join(', ') || 'none'}`;
}
/** What `requests` answers of `kind` cost, in dollars: each priced in whole micro-dollars (the price is per million tokens). */
const priced = (kind: ProviderKind, requests: number): number => {
  const price = PRICES[kind.model]!;
  return (requests * Math.round(kind.usage.prompt * price.input + kind.usage.completion * price.output)) / 1e6;
};

/** Waits until the kind's token and spend counters have risen by `requests` answers' worth. */
async function assertCounted(gw: GatewayProcess, kind: ProviderKind, before: string, requests: number): Promise<void> {
  const want = { prompt: tokens(before, kind, 'prompt') + requests * kind.usage.prompt, completion: tokens(before, kind, 'completion') + requests * kind.usage.completion };
  const wantSpend = spend(before, kind) + priced(kind, requests);
  let now = '';
  try {
    await eventually(async () => {
      now = await scrape(gw);
      return tokens(now, kind, 'prompt') === want.prompt && tokens(now, kind, 'completion') === want.completion && Math.abs(spend(now, kind) - wantSpend) < 1e-9;
    }, 5000, 'the tokens and the spend counted');
  } catch (error) {
    assert.fail(`${String(error)}: tokens ${tokens(now, kind, 'prompt')}/${tokens(now, kind, 'completion')} (want ${want.prompt}/${want.completion}), spend ${spend(now, kind)} (want ${wantSpend})`);
  }
}

const clients = (gw: GatewayProcess) => ({
  openai: new OpenAI({ baseURL: `${gw.proxyUrl}/v1`, apiKey: CLIENT_KEY, maxRetries: 0 }),
  anthropic: new Anthropic({ baseURL: gw.proxyUrl, apiKey: CLIENT_KEY, maxRetries: 0 }),
});

// ---------------------------------------------------------------------------------------------------
// The gateway of the JSON, stream, tool, failure and cancel cases

let mocks: Mocks;
let gw: GatewayProcess;
let openai: OpenAI;
let anthropic: Anthropic;

/** Starts `run` for `kind` now; its result (or failure) waits in `runs` for the kind's case. */
function background<T>(runs: Map<string, Promise<T>>, kind: ProviderKind, run: () => Promise<T>): Promise<T> {
  const running = run();
  running.catch(() => undefined);
  runs.set(kind.id, running);
  return running;
}

// ---------------------------------------------------------------------------------------------------
// The runs that end a process: a stream of every kind and API in flight at the signal

interface PhaseStream {
  readonly kind: ProviderKind;
  readonly api: ClientApi;
  readonly text: string;
  readonly stream: OpenStream;
  /** The stream was still open when the signal was sent. */
  readonly openAtSignal: boolean;
  readonly body: string;
}

interface PhaseRun {
  readonly mocks: Mocks;
  readonly gw: GatewayProcess;
  readonly streams: readonly PhaseStream[];
  readonly signalledAt: number;
}

/** Opens a stream of every kind and API (its headers from `headers`), waits for each one's first content, then sends `signal`. */
async function streamsAcross(gw: GatewayProcess, phase: string, headers: (kind: ProviderKind) => Record<string, string>, signal: NodeJS.Signals): Promise<{ streams: Omit<PhaseStream, 'body'>[]; signalledAt: number }> {
  const opened = await Promise.all(KINDS.flatMap((kind) => APIS.map(async (api) => {
    const text = `${phase} ${kind.id} ${api} ${marker()}`;
    const stream = await openStream(gw.proxyUrl, api, { key: CLIENT_KEY, model: entry(kind), text, headers: headers(kind) });
    if (stream.status !== 200) assert.fail(`${kind.label} ${api}: ${stream.status} ${await stream.body}`);
    return { kind, api, text, stream };
  })));
  await withDeadline(Promise.all(opened.map((s) => s.stream.firstContent)), 10_000, 'the first content of every stream');
  const open = opened.map((s) => !s.stream.finished());
  const signalledAt = Date.now();
  gw.signal(signal);
  return { streams: opened.map((s, i) => ({ ...s, openAtSignal: open[i]! })), signalledAt };
}

async function finished(streams: Omit<PhaseStream, 'body'>[]): Promise<PhaseStream[]> {
  return Promise.all(streams.map(async (s) => ({ ...s, body: await withDeadline(s.stream.body, 20_000, `the ${s.kind.label} ${s.api} stream to end`) })));
}

/** Drain: SIGTERM while slow streams run. */
const drainRun = once(async (): Promise<PhaseRun & { exit: { code: number | null } }> => {
  const mocks = await mocksFor({ paceMs: 400 });
  const gw = await gateway(mocks, ['keys', 'metadata']);
  const { streams, signalledAt } = await streamsAcross(gw, 'drain', (kind) => kind.slow(mocks), 'SIGTERM');
  const done = await finished(streams);
  return { mocks, gw, streams: done, signalledAt, exit: await withDeadline(gw.exited, 10_000, 'the exit') };
});

/** Forced end: SIGTERM with max_drain_secs 1 while streams that never end (Azure's: slow) run. */
const forcedRun = once(async (): Promise<PhaseRun & { exit: { code: number | null; at: number } }> => {
  const mocks = await mocksFor({ paceMs: 400 });
  const gw = await gateway(mocks, ['keys', 'metadata'], { shutdown: { min_drain_secs: 0, max_drain_secs: 1 } });
  const { streams, signalledAt } = await streamsAcross(gw, 'forced', (kind) => (typeof kind.hold === 'string' ? kind.slow(mocks) : kind.hold), 'SIGTERM');
  const done = await finished(streams);
  return { mocks, gw, streams: done, signalledAt, exit: await withDeadline(gw.exited, 10_000, 'the exit') };
});

/** Hot restart: SIGUSR2 to the keeper while slow streams run; generation 1 drains and exits. */
const hotRun = once(async (): Promise<PhaseRun & { oldExitCode: unknown }> => {
  const mocks = await mocksFor({ paceMs: 400 });
  const gw = await gateway(mocks, ['keys', 'metadata'], { hot_restart: { enabled: true, start_timeout_secs: 20 } });
  const { streams, signalledAt } = await streamsAcross(gw, 'hot', (kind) => kind.slow(mocks), 'SIGUSR2');
  await gw.waitForLog((l) => l.event === 'hot_restart_done' && l.to_generation === 2, 30_000);
  const done = await finished(streams);
  const exited = await gw.waitForLog((l) => l.event === 'generation_exited' && l.exited_generation === 1, 15_000);
  return { mocks, gw, streams: done, signalledAt, oldExitCode: exited.exit_code };
});

/** The credential refresh cases' gateway: AWS keys from the container endpoint and Google tokens from the metadata server, both living LIFETIME_SEC. */
const refreshing = once(async () => {
  const mocks = await mocksFor({ paceMs: 400, awsLifetimeSec: LIFETIME_SEC, googleLifetimeSec: LIFETIME_SEC });
  return { mocks, gw: await gateway(mocks, ['container', 'metadata']) };
});

/** The credential failure cases' gateway: the container endpoint refuses its token, the metadata server is not there. */
const failingCredentials = once(async () => {
  const mocks = await mocksFor();
  const wrongToken = `wrong-container-token-${randomBytes(12).toString('hex')}`;
  return { mocks, wrongToken, gw: await gateway(mocks, [{ containerToken: wrongToken }, { deadMetadataHost: await deadHost() }]) };
});

/** What a kind's refresh scenario saw. */
interface RefreshSeen {
  readonly mocks: Mocks;
  readonly gw: GatewayProcess;
  /** When the mock issued each of the kind's credentials (ms since the epoch). */
  readonly issues: readonly number[];
  /** The requests that did not get their answer. */
  readonly failures: readonly string[];
  /** The slow stream across the renewals: its text, body and span. */
  readonly text: string;
  readonly body: string;
  readonly streamStart: number;
  readonly streamEnd: number;
  /** The kind's model requests meanwhile, as its mock saw them. */
  readonly seen: readonly SeenRequest[];
}

/** Requests of `kind` go on, a slow stream among them, until its credentials were issued three times and the stream ended. */
async function refreshScenario(kind: ProviderKind): Promise<RefreshSeen> {
  const { mocks: cm, gw: cg } = await refreshing();
  const issued = (): number => (kind.identity === 'aws' ? cm.bedrock.issued.container : cm.google.issued.metadata);
  const client = clients(cg).openai;
  // The kind's credentials only: the other kind of its identity is idle (credentials are fetched when used).
  const issues: number[] = [];
  let count = issued();
  const watch = setInterval(() => {
    for (const now = issued(); count < now; count++) issues.push(Date.now());
  }, 5);
  try {
    const from = kind.requests(cm).length;
    const failures: string[] = [];
    const ask = async (text: string): Promise<void> => {
      try {
        const answer = await client.chat.completions.create({ model: entry(kind), messages: [{ role: 'user', content: text }] });
        if (answer.choices[0]!.message.content !== kind.reply(text)) failures.push(`${text}: ${JSON.stringify(answer)}`);
      } catch (error) {
        failures.push(`${text}: ${String(error)}`);
      }
    };
    await ask('first');
    const text = `refresh ${kind.id} ${marker()}`;
    const streamStart = Date.now();
    const stream = await openStream(cg.proxyUrl, 'chat', { key: CLIENT_KEY, model: entry(kind), text, headers: kind.slow(cm) });
    let streamEnd = 0;
    void stream.body.then(() => (streamEnd = Date.now()));
    let n = 0;
    await eventually(async () => {
      await ask(`request ${n++}`);
      return issues.length >= 3 && streamEnd > 0;
    }, 20_000, `three credentials of ${kind.label} issued while requests go on, and its stream ended`);
    return { mocks: cm, gw: cg, issues, failures, text, body: await stream.body, streamStart, streamEnd, seen: kind.requests(cm).slice(from) };
  } finally {
    clearInterval(watch);
  }
}

const refreshRuns = new Map<string, Promise<RefreshSeen>>();

/** Starts every cloud kind's refresh scenario once `ready`: one identity's kinds one after the other (one mock counts their credentials), the identities side by side. */
function startRefreshScenarios(ready: Promise<unknown>): void {
  const chains = new Map<string, Promise<unknown>>();
  for (const kind of KINDS.filter((k) => k.identity !== 'api_key')) {
    const previous = chains.get(kind.identity) ?? ready;
    const run = background(refreshRuns, kind, () => previous.then(() => refreshScenario(kind), () => refreshScenario(kind)));
    chains.set(kind.identity, run.catch(() => undefined));
  }
}

/** What a kind's credential failure scenario saw. */
interface FailingSeen {
  readonly mocks: Mocks;
  readonly gw: GatewayProcess;
  readonly wrongToken: string;
  /** The first answers, to an OpenAI and to an Anthropic client (the errors thrown). */
  readonly openai: unknown;
  readonly anthropic: unknown;
  /** The answers after them, the last one to a request made after the pause that follows a failed fetch (so a second fetch failed). */
  readonly later: readonly unknown[];
  /** The kind's model requests its mock saw. */
  readonly sent: number;
}

/** Requests of `kind` while its credential source is down, until one has waited for a second fetch to fail. */
async function failingScenario(kind: ProviderKind): Promise<FailingSeen> {
  const { mocks: fm, gw: fg, wrongToken } = await failingCredentials();
  const { openai: oc, anthropic: ac } = clients(fg);
  const from = kind.requests(fm).length;
  const first = await oc.chat.completions.create({ model: entry(kind), messages: [{ role: 'user', content: 'hi' }] }).catch((error: unknown) => error);
  const failedAt = Date.now();
  const second = await ac.messages.create({ model: entry(kind), max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }).catch((error: unknown) => error);
  const later: unknown[] = [];
  let id = '';
  // A failed fetch is followed by a pause (1 s) in which requests fail at once; the first request after it fetches again.
  await eventually(async () => {
    const startedAt = Date.now();
    id = `failing-${kind.id}-${later.length}-${marker()}`;
    later.push(await oc.chat.completions.create({ model: entry(kind), messages: [{ role: 'user', content: 'again' }] }, { headers: { 'x-request-id': id } }).catch((error: unknown) => error));
    return startedAt > failedAt + 1200;
  }, 20_000, `a request of ${kind.label} after the pause`);
  // Its access line comes after whatever its fetch logged.
  await fg.waitForLog((l) => l.event === 'access' && l.downstream_request_id === id, 5000);
  return { mocks: fm, gw: fg, wrongToken, openai: first, anthropic: second, later, sent: kind.requests(fm).length - from };
}

const failingRuns = new Map<string, Promise<FailingSeen>>();

// (After every fixture above: a hook of the root runs as soon as it is declared.)
before(async () => {
  // The runs that end a process and the credential scenarios go on beside the first kinds' cases;
  // each kind's case then reads its own part of them.
  const phases = [drainRun(), forcedRun(), hotRun()];
  for (const kind of KINDS.filter((k) => k.identity !== 'api_key')) background(failingRuns, kind, () => failingScenario(kind));
  // The refresh scenarios measure time: they wait until the process-ending runs are over.
  startRefreshScenarios(Promise.allSettled(phases));
  mocks = await mocksFor();
  gw = await gateway(mocks, ['keys', 'metadata']);
  ({ openai, anthropic } = clients(gw));
});

// ---------------------------------------------------------------------------------------------------
// The cases

/** `test`, or the same test skipped with its reason in its name when a kind's mock cannot script it. */
function testIf(name: string, reason: string | undefined, fn: () => Promise<void>): void {
  if (reason === undefined) test(name, fn);
  else test(`${name} (skipped: ${reason})`, { skip: reason }, fn);
}

const messageText = (message: Anthropic.Message): string => message.content.map((b) => (b.type === 'text' ? b.text : '')).join('');

for (const kind of KINDS) {
  const other = fallbackOf(kind);
  const cloud = kind.identity === 'api_key' ? 'an API key in its config: the gateway has no credential of its own to refresh or lose' : undefined;

  describe(kind.label, () => {
    test('JSON: an OpenAI chat completion and an Anthropic message, with their text, stop reason and usage; tokens and spend counted', async () => {
      const before = await scrape(gw);
      const text = `hello ${kind.id} ${marker()}`;
      const { data: answer, response } = await openai.chat.completions.create({ model: entry(kind), max_tokens: 64, messages: [{ role: 'user', content: text }] }).withResponse();
      assert.equal(response.status, 200);
      assert.equal(answer.choices[0]!.message.content, kind.reply(text));
      assert.equal(answer.choices[0]!.finish_reason, 'stop');
      assert.equal(answer.usage?.prompt_tokens, kind.usage.prompt);
      assert.equal(answer.usage?.completion_tokens, kind.usage.completion);
      const message = await anthropic.messages.create({ model: entry(kind), max_tokens: 64, messages: [{ role: 'user', content: text }] });
      assert.equal(messageText(message), kind.reply(text));
      assert.equal(message.stop_reason, 'end_turn');
      assert.equal(message.usage.input_tokens, kind.usage.prompt);
      assert.equal(message.usage.output_tokens, kind.usage.completion);
      await assertCounted(gw, kind, before, 2);
    });

    test(`stream: every delta (${CHUNKS}), the end event and the usage, in both APIs; tokens and spend counted`, async () => {
      const before = await scrape(gw);
      const text = `stream ${kind.id} ${marker()}`;
      const stream = await openai.chat.completions.create({ model: entry(kind), stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: text }] });
      let deltas = 0;
      let streamed = '';
      let finish: string | null | undefined;
      let usage: OpenAI.CompletionUsage | null | undefined;
      for await (const chunk of stream) {
        const content = chunk.choices[0]?.delta.content;
        if (content) {
          deltas++;
          streamed += content;
        }
        finish = chunk.choices[0]?.finish_reason ?? finish;
        if (chunk.usage) usage = chunk.usage;
      }
      assert.equal(streamed, kind.reply(text));
      assert.equal(deltas, CHUNKS);
      assert.equal(finish, 'stop');
      assert.equal(usage?.prompt_tokens, kind.usage.prompt);
      assert.equal(usage?.completion_tokens, kind.usage.completion);

      const events: string[] = [];
      const messages = anthropic.messages.stream({ model: entry(kind), max_tokens: 64, messages: [{ role: 'user', content: text }] });
      for await (const event of messages) events.push(event.type === 'content_block_delta' ? `${event.type}:${event.delta.type}` : event.type);
      const final = await messages.finalMessage();
      assert.equal(events[0], 'message_start');
      assert.equal(events.at(-1), 'message_stop');
      assert.equal(events.filter((e) => e === 'content_block_delta:text_delta').length, CHUNKS);
      assert.equal(messageText(final), kind.reply(text));
      assert.equal(final.stop_reason, 'end_turn');
      assert.equal(final.usage.input_tokens, kind.usage.prompt);
      assert.equal(final.usage.output_tokens, kind.usage.completion);
      await assertCounted(gw, kind, before, 2);
    });

    const tool = kind.tool;
    testIf('tools: a tool call comes back to an OpenAI client (JSON) and to an Anthropic client (streamed)', typeof tool === 'string' ? tool : undefined, async () => {
      if (typeof tool === 'string') return;
      const answer = await openai.chat.completions.create(
        { model: entry(kind), messages: [{ role: 'user', content: tool.text }], tools: [{ type: 'function', function: { name: TOOL.name, parameters: { type: 'object', properties: { city: { type: 'string' } } } } }] },
        { headers: tool.headers(false) },
      );
      assert.equal(answer.choices[0]!.finish_reason, 'tool_calls');
      const call = answer.choices[0]!.message.tool_calls?.[0];
      assert.ok(call?.type === 'function', JSON.stringify(answer));
      assert.equal(call.function.name, TOOL.name);
      assert.deepEqual(JSON.parse(call.function.arguments), TOOL.input);
      const final = await anthropic.messages.stream(
        { model: entry(kind), max_tokens: 100, messages: [{ role: 'user', content: tool.text }], tools: [{ name: TOOL.name, description: 'weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }] },
        { headers: tool.headers(true) },
      ).finalMessage();
      assert.equal(final.stop_reason, 'tool_use');
      const use = final.content.find((b) => b.type === 'tool_use');
      assert.equal(use?.name, TOOL.name);
      assert.deepEqual(use?.input, TOOL.input);
    });

    for (const failure of FAILURE_CLASSES.filter((f) => f !== 'context_length')) {
      const headers = kind.failures[failure];
      const outcome = failure === 'cut' ? kind.cutOutcome : failure === 'first_token' ? 'first_token_timeout' : failure;
      const streamed = failure === 'cut' || failure === 'first_token';
      testIf(`${failure}: a route [${kind.label}, ${other.label}] answers 200 from ${other.label}${streamed ? ' (streamed)' : ''}; the attempt is counted as ${outcome}`, typeof headers === 'string' ? headers : undefined, async () => {
        const before = await scrape(gw);
        const from = kind.requests(mocks).length;
        const text = `${failure} ${kind.id} ${marker()}`;
        const request = { model: fallbackEntry(kind, failure), messages: [{ role: 'user' as const, content: text }] };
        let answer: string;
        if (streamed) {
          const { data: stream, response } = await openai.chat.completions.create({ ...request, stream: true }).withResponse();
          assert.equal(response.status, 200);
          answer = '';
          for await (const chunk of stream) answer += chunk.choices[0]?.delta.content ?? '';
        } else {
          const { data, response } = await openai.chat.completions.create(request).withResponse();
          assert.equal(response.status, 200);
          answer = data.choices[0]!.message.content ?? '';
        }
        assert.equal(answer, other.reply(text), `the answer of ${other.label}`);
        assert.equal(kind.requests(mocks).slice(from).filter((r) => r.raw.includes(text)).length, 1, `${kind.label} was tried once`);
        const now = await scrape(gw);
        assert.equal(attempts(now, kind, outcome) - attempts(before, kind, outcome), 1, `an attempt counted as ${outcome}; ${attemptsBetween(before, now, kind)}`);
        assert.equal(attempts(now, other, 'success') - attempts(before, other, 'success'), 1, `an attempt of ${other.label} counted as success`);
      });
    }

    const tooLong = kind.failures.context_length;
    testIf(`context_length: a 400 in the caller's shape (OpenAI and Anthropic clients), not sent on to ${other.label}`, typeof tooLong === 'string' ? tooLong : undefined, async () => {
      const before = await scrape(gw);
      const text = `too long ${kind.id} ${marker()}`;
      const model = fallbackEntry(kind, 'context_length');
      const fromOther = other.requests(mocks).length;
      await assert.rejects(openai.chat.completions.create({ model, messages: [{ role: 'user', content: text }] }), (error: unknown) => {
        assert.ok(error instanceof OpenAI.BadRequestError, String(error));
        assert.equal(error.status, 400);
        assert.equal(error.type, 'invalid_request_error');
        assert.match(error.message, /too long|context length|exceeds the maximum|input token count/i);
        return true;
      });
      await assert.rejects(anthropic.messages.create({ model, max_tokens: 64, messages: [{ role: 'user', content: text }] }), (error: unknown) => {
        assert.ok(error instanceof Anthropic.BadRequestError, String(error));
        const body = error.error as { type?: string; error?: { type?: string; message?: string } };
        assert.equal(body.type, 'error');
        assert.equal(body.error?.type, 'invalid_request_error');
        assert.match(body.error?.message ?? '', /too long|context length|exceeds the maximum|input token count/i);
        return true;
      });
      assert.deepEqual(other.requests(mocks).slice(fromOther).filter((r) => r.raw.includes(text)), [], `nothing went to ${other.label}`);
      const now = await scrape(gw);
      assert.equal(attempts(now, kind, 'context_length') - attempts(before, kind, 'context_length'), 2, `two attempts counted as context_length; ${attemptsBetween(before, now, kind)}`);
    });

    testIf('cancel: a client that leaves mid-stream ends the upstream request (the mock sees its client gone) and the in-flight gauge returns to 0', typeof kind.hold === 'string' ? kind.hold : undefined, async () => {
      if (typeof kind.hold === 'string') return;
      const text = `cancel ${kind.id} ${marker()}`;
      const stream = await openStream(gw.proxyUrl, 'chat', { key: CLIENT_KEY, model: entry(kind), text, headers: kind.hold });
      const upstream = () => kind.requests(mocks).find((r) => r.raw.includes(text));
      try {
        assert.equal(stream.status, 200);
        await withDeadline(stream.firstContent, 5000, 'the first content');
        assert.equal(inFlightTotal(await scrape(gw)), 1, 'the stream is in flight');
        assert.equal(upstream()?.aborted, false, 'the upstream request is open');
      } finally {
        stream.abort();
      }
      await eventually(() => upstream()?.aborted === true, 5000, 'the mock to see its client gone');
      await eventually(async () => inFlightTotal(await scrape(gw)) === 0, 5000, 'in flight back to 0');
    });

    test('drain: SIGTERM during a slow stream (both APIs): each finishes whole with its end event; the process exits 0', async () => {
      const run = await drainRun();
      for (const s of run.streams.filter((x) => x.kind === kind)) {
        assert.ok(s.openAtSignal, `${s.api}: the stream was in progress at the signal`);
        const read = summarize(s.api, s.body);
        assert.equal(read.error, undefined, `${s.api}: ${s.body.slice(-500)}`);
        assert.ok(read.ended, `${s.api}: its end event`);
        assert.equal(read.text, kind.reply(s.text), `${s.api}: every delta`);
        assert.equal(read.deltas, CHUNKS);
      }
      assert.equal(run.exit.code, 0, run.gw.stdout().slice(-2000));
      assert.ok(!run.gw.logs.some((l) => l.event === 'drain_forced'), 'nothing was forced');
    });

    // Only the mocks with a stream that lasts until the client goes record a client gone.
    const abortSeen = typeof kind.hold !== 'string';
    test(`forced end: max_drain_secs ends a ${abortSeen ? 'never-ending' : 'slow'} stream (both APIs) with an error event in its API's shape${abortSeen ? ', the upstream request is aborted' : ' (the upstream abort is not observable: mock-azure-openai records no client gone)'}, the process exits 1 promptly`, async () => {
      const run = await forcedRun();
      for (const s of run.streams.filter((x) => x.kind === kind)) {
        assert.ok(s.openAtSignal, `${s.api}: the stream was in progress at the signal`);
        const read = summarize(s.api, s.body);
        assert.ok(!read.ended, `${s.api}: no end event on a cut stream: ${s.body.slice(-300)}`);
        assert.ok(read.error !== undefined, `${s.api}: an error event: ${s.body.slice(-300)}`);
        if (s.api === 'chat') {
          assert.match(s.body, /event: error\ndata: \{"error":\{/);
          assert.equal((read.error.error as { code?: string }).code, 'gateway_shutdown');
        } else {
          assert.equal(read.error.type, 'error');
          assert.equal(typeof (read.error.error as { type?: unknown }).type, 'string');
        }
        if (abortSeen) {
          await eventually(() => kind.requests(run.mocks).find((r) => r.raw.includes(s.text))?.aborted === true, 5000, `${s.api}: the mock to see its client gone`);
        }
      }
      assert.equal(run.exit.code, 1);
      const took = run.exit.at - run.signalledAt;
      assert.ok(took >= 900 && took < 3000, `exit ${took} ms after SIGTERM (max_drain_secs 1)`);
    });

    test('hot restart: slow streams (both APIs) in progress across SIGUSR2 finish whole; generation 1 exits 0; a request after it is served by generation 2', async () => {
      const run = await hotRun();
      for (const s of run.streams.filter((x) => x.kind === kind)) {
        assert.ok(s.openAtSignal, `${s.api}: the stream was in progress at the signal`);
        const read = summarize(s.api, s.body);
        assert.equal(read.error, undefined, `${s.api}: ${s.body.slice(-500)}`);
        assert.ok(read.ended, `${s.api}: its end event`);
        assert.equal(read.text, kind.reply(s.text));
      }
      assert.equal(run.oldExitCode, 0);
      // A new connection: one kept alive could still lead to generation 1.
      const agent = new Agent();
      const id = `hot-${kind.id}-${marker()}`;
      try {
        const res = await request(`${run.gw.proxyUrl}/v1/chat/completions`, {
          method: 'POST',
          dispatcher: agent,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_KEY}`, 'x-request-id': id },
          body: JSON.stringify({ model: entry(kind), messages: [{ role: 'user', content: 'after the restart' }] }),
        });
        const body = (await res.body.json()) as OpenAI.ChatCompletion;
        assert.equal(res.statusCode, 200, JSON.stringify(body));
        assert.equal(body.choices[0]!.message.content, kind.reply('after the restart'));
      } finally {
        await agent.close();
      }
      const access = await run.gw.waitForLog((l) => l.event === 'access' && l.downstream_request_id === id, 5000);
      assert.equal(access.generation, 2);
    });

    testIf(`credential refresh: short-lived credentials (${LIFETIME_SEC} s) are renewed at half their lifetime while requests keep succeeding, never expired at the mock, and a stream across a renewal finishes`, cloud, async () => {
      const run = await refreshRuns.get(kind.id)!;
      assert.deepEqual(run.failures, [], 'every request answered');
      assert.ok(run.issues.length >= 3, `credentials issued: ${run.issues.length}`);
      const read = summarize('chat', run.body);
      assert.equal(read.error, undefined, run.body.slice(-500));
      assert.ok(read.ended, 'the stream ended with [DONE]');
      assert.equal(read.text, kind.reply(run.text));
      assert.ok(run.issues.some((t) => t > run.streamStart && t < run.streamEnd), 'a renewal while the stream ran');
      // Renewed at half the lifetime (plus the wait for the next request, and AWS's expiry is given in whole seconds): never near the expiry.
      const gaps = run.issues.slice(1).map((t, i) => t - run.issues[i]!);
      for (const gap of gaps) assert.ok(gap < LIFETIME_SEC * 1000 * 0.7, `renewed ${gap} ms after the credential before (lifetime ${LIFETIME_SEC} s): ${gaps.join(', ')}`);
      assert.ok(run.seen.length >= 5, `${run.seen.length} requests`);
      // The Bedrock mock records each request's signature check; Google's answers an expired token 401, which would be a failure above.
      if (kind.identity === 'aws') assert.deepEqual(run.seen.filter((r) => r.auth !== 'ok').map((r) => r.auth), [], 'every request signed with credentials the mock accepts');
      const out = run.gw.stdout() + run.gw.stderr();
      assert.ok(!out.includes(run.mocks.bedrock.containerToken) && !/ya29\.|IQoJb3JpZ2luX2VjE/.test(out), 'no credential in the log');
    });

    testIf('credentials failing: the credential source down is a 503 upstream_credentials_unavailable in the caller\'s shape, said once in the log (provider_credentials_failed) though fetched again, no secret in it, nothing sent upstream', cloud, async () => {
      const run = await failingRuns.get(kind.id)!;
      const unavailable = (error: unknown): boolean => error instanceof OpenAI.APIError && error.status === 503 && error.code === 'upstream_credentials_unavailable';
      assert.ok(unavailable(run.openai), String(run.openai));
      assert.ok(run.anthropic instanceof Anthropic.APIError, String(run.anthropic));
      assert.equal(run.anthropic.status, 503);
      const body = run.anthropic.error as { type?: string; error?: { type?: string; message?: string } };
      assert.equal(body.type, 'error');
      assert.match(body.error?.message ?? '', /credentials/);
      assert.deepEqual(run.later.filter((e) => !unavailable(e)).map(String), [], 'every request after them a 503 too');
      const said = run.gw.logs.filter((l) => l.event === 'provider_credentials_failed' && l.provider === kind.provider);
      assert.equal(said.length, 1, JSON.stringify(said));
      assert.equal(typeof said[0]!.reason, 'string');
      if (kind.identity === 'aws') assert.ok(run.mocks.bedrock.requests.some((r) => r.operation === 'ContainerCredentials'), 'the container endpoint was asked');
      assert.equal(run.sent, 0, 'no request sent without credentials');
      const out = run.gw.stdout() + run.gw.stderr();
      for (const secret of [run.wrongToken, run.mocks.bedrock.containerToken, run.mocks.bedrock.credentials.secretAccessKey]) assert.ok(!out.includes(secret), 'no secret in the log');
    });
  });
}
