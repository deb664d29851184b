// Token usage read from upstream responses: JSON bodies and SSE streams of each API.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { JsonUsageReader, SseUsageReader, readUsageFrom, type UsageReader } from '../../src/gateway/usage.ts';

function feed(reader: UsageReader, ...chunks: (string | Buffer)[]) {
  for (const chunk of chunks) reader.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
  return reader.finish();
}

const sse = (data: unknown, event?: string) => `${event ? `event: ${event}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;

/** An OpenAI chat stream with include_usage: usage is null on every chunk but the last. */
const OPENAI_STREAM = [
  sse({ id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { role: 'assistant', content: '' } }], usage: null }),
  sse({ id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'Grüße, "usage" is a word 🎉' } }], usage: null }),
  sse({ id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: null }),
  sse({ id: 'c1', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } }),
  sse('[DONE]'),
].join('');

const ANTHROPIC_STREAM = [
  sse({ type: 'message_start', message: { id: 'm1', type: 'message', role: 'assistant', content: [], usage: { input_tokens: 25, output_tokens: 1 } } }, 'message_start'),
  sse({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }, 'content_block_start'),
  sse({ type: 'ping' }, 'ping'),
  sse({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hello' } }, 'content_block_delta'),
  sse({ type: 'content_block_stop', index: 0 }, 'content_block_stop'),
  sse({ type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 15 } }, 'message_delta'),
  sse({ type: 'message_stop' }, 'message_stop'),
].join('');

const RESPONSES_STREAM = [
  sse({ type: 'response.created', sequence_number: 0, response: { id: 'r1', status: 'in_progress', output: [], usage: null } }, 'response.created'),
  sse({ type: 'response.output_text.delta', sequence_number: 1, delta: 'Hi' }, 'response.output_text.delta'),
  sse(
    { type: 'response.completed', sequence_number: 2, response: { id: 'r1', status: 'completed', usage: { input_tokens: 9, output_tokens: 3, total_tokens: 12 } } },
    'response.completed',
  ),
].join('');

describe('JSON bodies', () => {
  test('OpenAI names: prompt_tokens / completion_tokens', () => {
    const body = JSON.stringify({ id: 'x', choices: [], usage: { prompt_tokens: 12, completion_tokens: 34, total_tokens: 46 } });
    assert.deepEqual(feed(new JsonUsageReader(), body), { prompt: 12, completion: 34 });
  });

  test('Anthropic / Responses names: input_tokens / output_tokens', () => {
    const body = JSON.stringify({ id: 'm', type: 'message', usage: { input_tokens: 5, output_tokens: 8 } });
    assert.deepEqual(feed(new JsonUsageReader(), body), { prompt: 5, completion: 8 });
  });

  test('embeddings: prompt_tokens only', () => {
    assert.deepEqual(feed(new JsonUsageReader(), '{"object":"list","usage":{"prompt_tokens":4,"total_tokens":4}}'), { prompt: 4, completion: 0 });
  });

  test('a body split across many chunks', () => {
    const body = JSON.stringify({ usage: { prompt_tokens: 1, completion_tokens: 2 }, pad: 'x'.repeat(1000) });
    const reader = new JsonUsageReader();
    for (let i = 0; i < body.length; i += 7) reader.push(Buffer.from(body.slice(i, i + 7)));
    assert.deepEqual(reader.finish(), { prompt: 1, completion: 2 });
  });

  test('no usage, usage null, invalid JSON, or an empty body → undefined', () => {
    assert.equal(feed(new JsonUsageReader(), '{"id":"x"}'), undefined);
    assert.equal(feed(new JsonUsageReader(), '{"usage":null}'), undefined);
    assert.equal(feed(new JsonUsageReader(), '{"usage":{"total_tokens":3}}'), undefined);
    assert.equal(feed(new JsonUsageReader(), '{"usage":{"prompt_tokens":1'), undefined);
    assert.equal(feed(new JsonUsageReader(), '"usage"'), undefined);
    assert.equal(feed(new JsonUsageReader()), undefined);
  });

  test('a body over 4 MiB is not scanned', () => {
    const body = JSON.stringify({ pad: 'x'.repeat(4 * 1024 * 1024), usage: { prompt_tokens: 1, completion_tokens: 1 } });
    assert.equal(feed(new JsonUsageReader(), body), undefined);
  });
});

describe('readUsageFrom', () => {
  test('merges into an existing usage, ignoring non-numbers', () => {
    const into = { prompt: 3, completion: 1 };
    assert.equal(readUsageFrom({ output_tokens: 9 }, into), into);
    assert.deepEqual(into, { prompt: 3, completion: 9 });
    assert.deepEqual(readUsageFrom({ prompt_tokens: '5', completion_tokens: Number.NaN }, undefined), undefined);
    assert.equal(readUsageFrom(null, into), into);
    assert.equal(readUsageFrom('usage', undefined), undefined);
  });

  test('cached prompt tokens under each API\'s name: chat, Responses, Realtime (input_token_details, singular), Anthropic', () => {
    assert.deepEqual(readUsageFrom({ prompt_tokens: 10, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 4 } }, undefined), { prompt: 10, completion: 2, cached: 4 });
    assert.deepEqual(readUsageFrom({ input_tokens: 10, output_tokens: 2, input_tokens_details: { cached_tokens: 5 } }, undefined), { prompt: 10, completion: 2, cached: 5 });
    assert.deepEqual(readUsageFrom({ input_tokens: 10, output_tokens: 2, total_tokens: 12, input_token_details: { cached_tokens: 6, text_tokens: 4, audio_tokens: 6 } }, undefined), { prompt: 10, completion: 2, cached: 6 });
    assert.deepEqual(readUsageFrom({ input_tokens: 3, output_tokens: 2, cache_read_input_tokens: 7 }, undefined), { prompt: 10, completion: 2, cached: 7 });
  });
});

describe('SSE streams', () => {
  test('OpenAI: usage from the last chunk (usage: null on the others)', () => {
    assert.deepEqual(feed(new SseUsageReader(), OPENAI_STREAM), { prompt: 11, completion: 7 });
  });

  test('Anthropic: message_start input + message_delta output combined', () => {
    assert.deepEqual(feed(new SseUsageReader(), ANTHROPIC_STREAM), { prompt: 25, completion: 15 });
  });

  test('Responses API: usage from response.completed (response.created has usage: null)', () => {
    assert.deepEqual(feed(new SseUsageReader(), RESPONSES_STREAM), { prompt: 9, completion: 3 });
  });

  test('CRLF line endings and "data:" with no space', () => {
    const stream = 'data:{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3}}\r\n\r\ndata: [DONE]\r\n\r\n';
    assert.deepEqual(feed(new SseUsageReader(), stream), { prompt: 2, completion: 3 });
  });

  test('a last event with no trailing newline is read at finish()', () => {
    assert.deepEqual(feed(new SseUsageReader(), 'data: {"usage":{"prompt_tokens":1,"completion_tokens":2}}'), { prompt: 1, completion: 2 });
  });

  test('malformed lines are ignored; later good ones still count', () => {
    const stream = [
      'data: {"usage": {"prompt_tokens": 1,\n\n',
      'data: not json "usage"\n\n',
      ': comment "usage" {"usage":{"prompt_tokens":99}}\n\n',
      'event: x "usage"\n\n',
      'data: {"usage": "lots"}\n\n',
      'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":6}}\n\n',
      'data: {"usage":{"prompt_tokens":\n\n',
    ].join('');
    assert.deepEqual(feed(new SseUsageReader(), stream), { prompt: 4, completion: 6 });
  });

  test('no usage anywhere → undefined', () => {
    const stream = sse({ choices: [{ delta: { content: 'hi' } }] }) + sse('[DONE]');
    assert.equal(feed(new SseUsageReader(), stream), undefined);
    assert.equal(feed(new SseUsageReader()), undefined);
    assert.equal(feed(new SseUsageReader(), 'data: {"usage":null}\n\n'), undefined);
  });

  const streams = { openai: [OPENAI_STREAM, { prompt: 11, completion: 7 }], anthropic: [ANTHROPIC_STREAM, { prompt: 25, completion: 15 }], responses: [RESPONSES_STREAM, { prompt: 9, completion: 3 }] } as const;

  for (const [name, [stream, expected]] of Object.entries(streams)) {
    test(`${name}: the same usage whatever byte position the stream is split at`, () => {
      const bytes = Buffer.from(stream);
      for (let at = 0; at <= bytes.length; at++) {
        const usage = feed(new SseUsageReader(), bytes.subarray(0, at), bytes.subarray(at));
        assert.deepEqual(usage, expected, `split at byte ${at}`);
      }
    });

    test(`${name}: the same usage whatever two byte positions the stream is split at`, () => {
      const bytes = Buffer.from(stream);
      for (let a = 0; a <= bytes.length; a += 3) {
        for (let b = a; b <= bytes.length; b += 5) {
          const usage = feed(new SseUsageReader(), bytes.subarray(0, a), bytes.subarray(a, b), bytes.subarray(b));
          assert.deepEqual(usage, expected, `split at bytes ${a} and ${b}`);
        }
      }
    });

    test(`${name}: the same usage when fed one byte at a time`, () => {
      const bytes = Buffer.from(stream);
      const reader = new SseUsageReader();
      for (let i = 0; i < bytes.length; i++) reader.push(bytes.subarray(i, i + 1));
      assert.deepEqual(reader.finish(), expected);
    });
  }
});

describe('OpenAI-compatible servers', () => {
  test("Groq: a stream's usage in its last chunk's x_groq is read, and final", () => {
    const reader = new SseUsageReader();
    const usage = feed(
      reader,
      sse({ id: 'g1', object: 'chat.completion.chunk', model: 'llama-3.3-70b', choices: [{ index: 0, delta: { content: 'hi' } }], x_groq: { id: 'req_1' } }),
      sse({ id: 'g1', object: 'chat.completion.chunk', model: 'llama-3.3-70b', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], x_groq: { id: 'req_1', usage: { prompt_tokens: 21, completion_tokens: 4, total_tokens: 25 } } }),
      sse('[DONE]'),
    );
    assert.deepEqual(usage, { prompt: 21, completion: 4, model: 'llama-3.3-70b' });
    assert.equal(reader.final, true);
  });

  test("DeepSeek: prompt_cache_hit_tokens are the cached prompt tokens", () => {
    assert.deepEqual(readUsageFrom({ prompt_tokens: 100, completion_tokens: 5, prompt_cache_hit_tokens: 64, prompt_cache_miss_tokens: 36 }, undefined), { prompt: 100, completion: 5, cached: 64 });
    assert.deepEqual(readUsageFrom({ prompt_tokens: 10, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 3 }, prompt_cache_hit_tokens: 9 }, undefined)?.cached, 3, "OpenAI's field wins where both are");
  });
});
