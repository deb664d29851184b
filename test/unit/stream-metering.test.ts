// The byte-level pieces of stream metering: how a relayed stream ended (StreamEndWatch), the output
// text cut out of an answer (OutputText), the usage read by byte search (SseUsageReader) and the
// usage asked for whatever the client sent (withStreamUsage). Each fed in one piece, byte by byte
// and split everywhere: a read boundary must never change the answer.
import { test } from 'node:test';
import fc from 'fast-check';
import assert from 'node:assert/strict';
import { StreamEndWatch, type StreamOutcome } from '../../src/gateway/stream-end.ts';
import { OutputText } from '../../src/gateway/output-text.ts';
import { SseUsageReader } from '../../src/gateway/usage.ts';
import { withStreamUsage } from '../../src/gateway/stream-usage.ts';
import { UsageMeter } from '../../src/gateway/usage-meter.ts';
import type { Endpoint } from '../../src/providers/types.ts';

/** Every way to cut `text` in reads: whole, byte by byte, and in two at every offset. */
function splits(text: string): Buffer[][] {
  const bytes = Buffer.from(text);
  const out: Buffer[][] = [[bytes], [...bytes].map((b) => Buffer.from([b]))];
  for (let i = 1; i < bytes.length; i++) out.push([bytes.subarray(0, i), bytes.subarray(i)]);
  return out;
}

function outcomeOf(api: Endpoint, text: string): StreamOutcome {
  const seen = new Set<StreamOutcome>();
  for (const reads of splits(text)) {
    const watch = new StreamEndWatch(api);
    for (const read of reads) watch.push(read);
    seen.add(watch.outcome());
  }
  assert.equal(seen.size, 1, `the same outcome whatever the reads (${[...seen].join(', ')}) for ${JSON.stringify(text)}`);
  return [...seen][0]!;
}

const chunk = (content: string) => `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"finish_reason":null}]}\n\n`;
const ev = (type: string, fields = '') => `event: ${type}\ndata: {"type":"${type}"${fields}}\n\n`;

test('OpenAI streams: complete only with [DONE] last; an error chunk; anything else cut', () => {
  assert.equal(outcomeOf('chat', chunk('Hi') + 'data: [DONE]\n\n'), 'complete');
  assert.equal(outcomeOf('chat', chunk('Hi') + 'data: [DONE]'), 'complete', 'the last event need not be closed by a blank line');
  assert.equal(outcomeOf('chat', (chunk('Hi') + 'data: [DONE]\n\n').replaceAll('\n', '\r\n')), 'complete', 'CRLF');
  assert.equal(outcomeOf('chat', chunk('Hi') + 'data: [DONE]\n\n: a comment after it\n\n'), 'complete', 'a comment is no event');
  assert.equal(outcomeOf('completions', 'data: {"choices":[{"text":"x"}]}\n\ndata: [DONE]\n\n'), 'complete');
  assert.equal(outcomeOf('chat', chunk('Hi')), 'cut');
  assert.equal(outcomeOf('chat', chunk('Hi') + 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'), 'cut', 'a finish reason is not [DONE]');
  assert.equal(outcomeOf('chat', ''), 'cut');
  assert.equal(outcomeOf('chat', chunk('[DONE]')), 'cut', '"[DONE]" as text is content');
  assert.equal(outcomeOf('chat', chunk('Hi') + 'data: {"error":{"message":"boom","type":"server_error"}}\n\n'), 'error');
  assert.equal(outcomeOf('chat', chunk('Hi') + 'event: error\ndata: {"message":"boom"}\n\n'), 'error');
  // An event longer than the head kept, and many events in one read.
  assert.equal(outcomeOf('chat', chunk('x'.repeat(5000)) + chunk('y') + 'data: [DONE]\n\n'), 'complete');
  assert.equal(outcomeOf('chat', 'data: [DONE]\n\n' + chunk('after')), 'cut', 'only the last event counts');
});

test('Anthropic streams: complete with message_stop; an error event; anything else cut', () => {
  const start = ev('message_start', ',"message":{"usage":{"input_tokens":3,"output_tokens":1}}');
  const delta = ev('content_block_delta', ',"index":0,"delta":{"type":"text_delta","text":"message_stop"}');
  assert.equal(outcomeOf('messages', start + delta + ev('message_delta') + ev('message_stop')), 'complete');
  assert.equal(outcomeOf('messages', start + delta + 'data: {"type":"message_stop"}\n\n'), 'complete', 'no event line: the data type tells');
  assert.equal(outcomeOf('messages', start + delta), 'cut', '"message_stop" as text is content');
  assert.equal(outcomeOf('messages', start + delta + ev('message_delta')), 'cut');
  assert.equal(outcomeOf('messages', start + ev('error', ',"error":{"type":"overloaded_error","message":"Overloaded"}')), 'error');
  assert.equal(outcomeOf('messages', start + ev('ping')), 'cut');
});

test('Responses streams: complete with response.completed or .incomplete; response.failed and error are errors; the next sequence number', () => {
  const seq = (type: string, n: number, extra = '') => `event: ${type}\ndata: {"type":"${type}","sequence_number":${n}${extra}}\n\n`;
  const body = seq('response.created', 0) + seq('response.output_text.delta', 1, ',"delta":"Hi"');
  assert.equal(outcomeOf('responses', body + seq('response.completed', 2, `,"response":{"output":"${'x'.repeat(3000)}"}`)), 'complete');
  assert.equal(outcomeOf('responses', body + seq('response.incomplete', 2)), 'complete');
  assert.equal(outcomeOf('responses', body + seq('response.failed', 2)), 'error');
  assert.equal(outcomeOf('responses', body + seq('error', 2)), 'error');
  assert.equal(outcomeOf('responses', body), 'cut');
  const watch = new StreamEndWatch('responses');
  watch.push(Buffer.from(body));
  assert.equal(watch.nextSequence(), 2);
  assert.equal(new StreamEndWatch('responses').nextSequence(), 0);
});

test('OutputText: the output values of each API, escapes decoded, whatever the reads', () => {
  const cases: [Endpoint, boolean, string, string][] = [
    ['chat', true, chunk('Hel') + chunk('lo "wörld"\n') + 'data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\\"a\\":1}"}}]}}]}\n\n' + 'data: [DONE]\n\n', 'Hello "wörld"\n{"a":1}'],
    ['completions', true, 'data: {"choices":[{"text":"one "}]}\n\ndata: {"choices":[{"text":"two\\\\"}]}\n\n', 'one two\\'],
    ['responses', true, 'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"Hi"}\n\nevent: response.output_text.done\ndata: {"type":"response.output_text.done","text":"Hi"}\n\n', 'Hi'],
    ['messages', true, ev('content_block_start', ',"index":0,"content_block":{"type":"text","text":""}') + ev('content_block_delta', ',"index":0,"delta":{"type":"text_delta","text":"a \\u00e9"}'), 'a é'],
    ['chat', false, '{"choices":[{"message":{"role":"assistant","content" : "spaced"}}],"usage":null}', 'spaced'],
  ];
  for (const [api, stream, text, expected] of cases) {
    let missed = 0;
    const twoReads = splits(text).filter((reads) => reads.length === 2);
    for (const reads of [[Buffer.from(text)], ...twoReads]) {
      const output = new OutputText(api, stream);
      for (const read of reads) output.push(read);
      const got = output.text().text;
      // A key (with its colon and opening quote) cut between two reads is missed: an estimate.
      // A value cut anywhere is not.
      if (reads.length === 2 && got !== expected) {
        missed++;
        assert.ok(got.length <= expected.length + 2, `${api}: a miss only loses text (or splits a character): ${JSON.stringify(got)}`);
        continue;
      }
      assert.equal(got, expected, `${api}: ${reads.length} reads`);
    }
    assert.ok(missed <= 16 * 3, `${api}: only cuts inside a key miss (${missed} of ${twoReads.length})`);
  }
});

test('SseUsageReader: usage found whatever the reads; "usage":null lines are never parsed; final only for the last word', () => {
  const text = chunk('a').replace('}]}', '}],"usage":null}') + 'data: {"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7}}\n\ndata: [DONE]\n\n';
  for (const reads of splits(text)) {
    const reader = new SseUsageReader();
    for (const read of reads) reader.push(read);
    assert.deepEqual(reader.finish(), { prompt: 11, completion: 7 });
    assert.equal(reader.final, true);
  }
  const parse = JSON.parse;
  let parsed = 0;
  JSON.parse = ((...args: Parameters<typeof JSON.parse>) => {
    parsed++;
    return parse(...args);
  }) as typeof JSON.parse;
  try {
    const reader = new SseUsageReader();
    for (let i = 0; i < 50; i++) reader.push(Buffer.from(chunk('x').replace('}]}', '}],"usage":null}')));
    assert.equal(reader.finish(), undefined);
    assert.equal(parsed, 0, 'no event with "usage":null is parsed');
  } finally {
    JSON.parse = parse;
  }
  const anthropic = new SseUsageReader();
  anthropic.push(Buffer.from(ev('message_start', ',"message":{"usage":{"input_tokens":9,"output_tokens":1}}')));
  assert.deepEqual(anthropic.finish(), { prompt: 9, completion: 1 });
  assert.equal(anthropic.final, false, 'message_start alone is where the answer began');
  anthropic.push(Buffer.from(ev('message_delta', ',"usage":{"output_tokens":30}')));
  assert.deepEqual(anthropic.finish(), { prompt: 9, completion: 30 });
  assert.equal(anthropic.final, true);
});

test("SseUsageReader: Bedrock Converse's metadata event, and Gemini's usageMetadata of the last chunk only (one parse), whatever the reads", () => {
  const converse = 'event: contentBlockDelta\ndata: {"contentBlockIndex":0,"delta":{"text":"hi"}}\n\nevent: messageStop\ndata: {"stopReason":"end_turn"}\n\n'
    + 'event: metadata\ndata: {"usage":{"inputTokens":11,"outputTokens":5,"cacheReadInputTokens":2,"cacheWriteInputTokens":1},"metrics":{"latencyMs":3}}\n\n';
  for (const reads of splits(converse)) {
    const reader = new SseUsageReader();
    for (const read of reads) reader.push(read);
    assert.deepEqual(reader.finish(), { prompt: 14, completion: 5, cached: 2, cacheWrite: 1 }, 'the prompt counts the cache reads and writes, as Anthropic’s does');
    assert.equal(reader.final, true);
  }
  const gemini = (text: string, prompt: number, candidates: number, last: boolean) =>
    `data: {"candidates":[{"content":{"role":"model","parts":[{"text":${JSON.stringify(text)}}]}${last ? ',"finishReason":"STOP"' : ''}}],"usageMetadata":{"promptTokenCount":${prompt},"candidatesTokenCount":${candidates},"thoughtsTokenCount":${last ? 3 : 0},"cachedContentTokenCount":4},"modelVersion":"gemini-2.5-flash"}\r\n\r\n`;
  const text = gemini('a', 9, 0, false) + gemini('b', 9, 0, false) + gemini('c', 9, 6, true);
  for (const reads of splits(text)) {
    const reader = new SseUsageReader();
    for (const read of reads) reader.push(read);
    assert.deepEqual(reader.finish(), { prompt: 9, completion: 9, cached: 4, model: 'gemini-2.5-flash' }, 'thoughts are output');
    assert.equal(reader.final, true);
  }
  const parse = JSON.parse;
  let parsed = 0;
  JSON.parse = ((...args: Parameters<typeof JSON.parse>) => {
    parsed++;
    return parse(...args);
  }) as typeof JSON.parse;
  try {
    const reader = new SseUsageReader();
    for (let i = 0; i < 50; i++) reader.push(Buffer.from(gemini('x', 9, i, i === 49)));
    assert.equal(reader.finish()?.completion, 49 + 3);
    assert.equal(parsed, 1, 'only the last chunk’s usageMetadata is parsed');
  } finally {
    JSON.parse = parse;
  }
});

test('withStreamUsage: usage asked for whatever stream_options the client sent; its own ask kept', () => {
  const base = { model: 'm', stream: true };
  for (const options of [undefined, null, {}, { include_usage: false }, { include_obfuscation: false }]) {
    const body = options === undefined ? base : { ...base, stream_options: options };
    const asked = withStreamUsage(body);
    assert.ok(asked, `stream_options ${JSON.stringify(options)}`);
    assert.equal((asked.stream_options as { include_usage: boolean }).include_usage, true);
  }
  assert.equal(withStreamUsage({ ...base, stream_options: { include_usage: true } }), undefined, 'asked by the client: sent as it is');
  assert.equal(withStreamUsage({ model: 'm' }), undefined, 'not a stream');
  assert.equal(withStreamUsage({ ...base, stream_options: 'x' }), undefined, 'not an object: the provider refuses it');
});

test('UsageMeter: the provider\'s final usage as it is; otherwise an estimate from the prompt estimate and the output text, marked', async () => {
  const full = new UsageMeter({ api: 'chat', sse: true, watchEnd: true, estimates: true });
  full.push(Buffer.from(chunk('Hello') + 'data: {"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7}}\n\ndata: [DONE]\n\n'));
  assert.deepEqual(full.usage(100), { prompt: 11, completion: 7 });
  assert.equal(full.outcome(), 'complete');
  const cut = new UsageMeter({ api: 'chat', sse: true, watchEnd: true, estimates: true });
  cut.push(Buffer.from(chunk('Hello world, how are you today?')));
  assert.equal(cut.outcome(), 'cut');
  const estimate = await cut.usage(40);
  assert.equal(estimate?.estimated, true);
  assert.equal(estimate?.prompt, 40);
  assert.equal(estimate?.completion, 8, 'o200k_base counts 8 tokens in "Hello world, how are you today?"');
  const anthropic = new UsageMeter({ api: 'messages', sse: true, watchEnd: true, estimates: true });
  anthropic.push(Buffer.from(ev('message_start', ',"message":{"usage":{"input_tokens":9,"output_tokens":1}}') + ev('content_block_delta', ',"index":0,"delta":{"type":"text_delta","text":"one two three"}')));
  assert.deepEqual(await anthropic.usage(40), { prompt: 9, completion: 3, estimated: true }, 'the prompt as Anthropic reported it');
  const tokens = new UsageMeter({ api: 'count_tokens', sse: false, watchEnd: false, estimates: false });
  tokens.push(Buffer.from('{"input_tokens":12}'));
  assert.equal(tokens.usage(40), undefined, 'a token count is never billed');
});

/** Fixed, so a failure reproduces; SLUICE_FUZZ_SEED=<n> explores other inputs. */
const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 0x5ee7);

test('hostile upstream bytes in any reads: nothing throws, the end is the same whatever the reads, the usage never negative', async () => {
  const piece = fc.oneof(
    fc.string({ maxLength: 24 }),
    fc.constantFrom('data: ', 'event: ', '\n', '\r\n', '\r', '\n\n', ':', '{', '"usage":', 'null', '"usage":{"prompt_tokens":5,"completion_tokens":-3}', '"content":"', '\\"', '\\\\', '[DONE]', 'message_stop', '"type":"error"', '"sequence_number":9'),
  );
  const stream = fc.array(piece, { maxLength: 40 }).map((parts) => Buffer.from(parts.join('')));
  const cuts = fc.array(fc.nat(), { maxLength: 6 });
  const apis: Endpoint[] = ['chat', 'completions', 'responses', 'messages'];
  const outcomes: Promise<void>[] = [];
  fc.assert(
    fc.property(stream, cuts, fc.constantFrom(...apis), (bytes, at, api) => {
      const points = [...new Set(at.map((n) => n % (bytes.length + 1)))].sort((a, b) => a - b);
      const reads: Buffer[] = [];
      let from = 0;
      for (const point of [...points, bytes.length]) {
        reads.push(bytes.subarray(from, point));
        from = point;
      }
      const whole = new StreamEndWatch(api);
      whole.push(bytes);
      const split = new StreamEndWatch(api);
      const meter = new UsageMeter({ api, sse: true, watchEnd: true, estimates: true });
      for (const read of reads) {
        split.push(read);
        meter.push(read);
      }
      assert.equal(split.outcome(), whole.outcome());
      assert.ok(Number.isInteger(split.nextSequence()) && split.nextSequence() >= 0);
      const usage = meter.usage(7);
      outcomes.push(
        Promise.resolve(usage).then((u) => {
          assert.ok(u === undefined || (u.prompt >= 0 && u.completion >= 0 && Number.isFinite(u.prompt + u.completion)), JSON.stringify(u));
        }),
      );
    }),
    { seed: SEED, numRuns: 400 },
  );
  await Promise.all(outcomes);
});
