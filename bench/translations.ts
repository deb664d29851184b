// The cost of each translation direction beside the plain relay, in the same run (issue #27):
// one build (this checkout's dist/), one mock answering every provider's API, and per case the
// gateway's CPU µs per request under wrk, rounds interleaved. The streams are 50 chunks; the
// relays are the baselines (an OpenAI client to an OpenAI provider, an Anthropic client to an
// Anthropic provider). Converse's cases include signing each request (SigV4) and decoding AWS's
// binary event stream; Gemini's, its SSE. Results: BENCHMARKS.md, "Translations".
//
//   npm run build && node bench/translations.ts [--rounds N] [--seconds S]
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { spawnSync } from 'node:child_process';
import { cleanUp, startMock, type Server } from './processes.ts';
import { KEYS, startCaseGateway } from './cases.ts';
import { interleavedRounds, runWrk, wrkPostScript } from './wrk.ts';
import { cpuTicks, fixed, median } from './stats.ts';

const ROOT = resolve(import.meta.dirname, '..');
const { values } = parseArgs({ options: { rounds: { type: 'string', default: '5' }, seconds: { type: 'string', default: '3' } } });
const ROUNDS = Number(values.rounds);
const SECONDS = Number(values.seconds);
const TICK_US = 1e6 / Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim() || 100);
const TMP = mkdtempSync(join(tmpdir(), 'sluice-translations-'));
cleanUp.push(TMP);

interface Direction { name: string; path: string; body: object; baseline?: string }
const ASK = [{ role: 'user', content: 'Say hello' }];
const chat = (model: string, stream: boolean) => ({ model, messages: ASK, stream, max_tokens: 64 });
const messages = (model: string, stream: boolean) => ({ model, messages: ASK, stream, max_tokens: 64 });
const responses = (model: string) => ({ model, input: 'Say hello', stream: true, max_output_tokens: 64 });
const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';
const DIRECTIONS: Direction[] = [
  { name: 'relay: chat → OpenAI', path: CHAT, body: chat('bench', true) },
  { name: 'relay: messages → Anthropic', path: MESSAGES, body: messages('claude-bench', true) },
  { name: 'chat → Anthropic Messages', path: CHAT, body: chat('claude-bench', true), baseline: 'relay: chat → OpenAI' },
  { name: 'responses → Anthropic Messages', path: '/v1/responses', body: responses('claude-bench'), baseline: 'relay: chat → OpenAI' },
  { name: 'messages → OpenAI chat', path: MESSAGES, body: messages('bench', true), baseline: 'relay: messages → Anthropic' },
  { name: 'chat → Bedrock Converse', path: CHAT, body: chat('converse-bench', true), baseline: 'relay: chat → OpenAI' },
  { name: 'messages → Bedrock Converse', path: MESSAGES, body: messages('converse-bench', true), baseline: 'relay: messages → Anthropic' },
  { name: 'chat → Gemini', path: CHAT, body: chat('gemini-bench', true), baseline: 'relay: chat → OpenAI' },
  { name: 'messages → Gemini', path: MESSAGES, body: messages('gemini-bench', true), baseline: 'relay: messages → Anthropic' },
  { name: 'relay: chat → OpenAI, JSON', path: CHAT, body: chat('bench', false) },
  { name: 'chat → Bedrock Converse, JSON', path: CHAT, body: chat('converse-bench', false), baseline: 'relay: chat → OpenAI, JSON' },
  { name: 'chat → Gemini, JSON', path: CHAT, body: chat('gemini-bench', false), baseline: 'relay: chat → OpenAI, JSON' },
];

const mock = await startMock();
const gateway = await startCaseGateway('translations', ROOT, mock.url, TMP, [], true);
const headers = { 'content-type': 'application/json', authorization: `Bearer ${KEYS.plain}`, 'anthropic-version': '2023-06-01', 'x-mock': JSON.stringify({ chunks: 50 }) };
const script = (_t: Server, d: Direction): string => wrkPostScript(JSON.stringify(d.body), headers);
const run = (t: Server, d: Direction, lua: string, seconds: number) => runWrk(`${t.url}${d.path}`, lua, seconds, { threads: 1, connections: 32 });
// Warm-up: one short round of every case, not counted.
await interleavedRounds([gateway], DIRECTIONS, 1, TMP, script, (t, d, lua) => run(t, d, lua, 1), () => {});
const results = await interleavedRounds([gateway], DIRECTIONS, ROUNDS, TMP, script, async (t, d, lua) => {
  const before = cpuTicks(t.pid);
  const load = await run(t, d, lua, SECONDS);
  if (load.errors > 0 || load.non2xx > 0 || load.requests === 0) throw new Error(`${d.name}: ${load.errors} errors, ${load.non2xx} non-2xx of ${load.requests}`);
  return ((cpuTicks(t.pid) - before) * TICK_US) / load.requests;
}, (round, d, _t, us) => process.stderr.write(`round ${round + 1} ${d.name}: ${fixed(us, 1)} µs/req\n`));

const usOf = (name: string) => median(results.get(name)!.get(gateway.name)!);
const rows = DIRECTIONS.map((d) => {
  const us = usOf(d.name);
  const ratio = d.baseline === undefined ? '—' : `${fixed(us / usOf(d.baseline), 2)}× (+${fixed(us - usOf(d.baseline))} µs)`;
  return `| ${d.name} | ${fixed(us)} | ${d.baseline ?? 'baseline'} | ${ratio} |`;
});
process.stdout.write(
  [
    `${ROUNDS} rounds × ${SECONDS} s per case, order rotated each round; gateway CPU µs per request, medians; streams of 50 chunks`,
    '',
    '| direction | CPU µs/req | compared with | cost |',
    '|---|--:|---|--:|',
    ...rows,
    '',
  ].join('\n'),
);
process.exit(0);
