// Self-test of the mock provider that the end-to-end tests and benchmarks stand on.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { mockHeader, startMockUpstream } from '../support/mock-upstream.ts';
import type { MockRequest, MockUpstream } from '../support/mock-upstream.ts';

let mock: MockUpstream;

before(async () => {
  mock = await startMockUpstream({ port: 0 });
});

after(async () => {
  await mock.close();
});

function post(path: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
  const init: RequestInit = {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  };
  if (signal !== undefined) init.signal = signal;
  return fetch(mock.url + path, init);
}

/** The `data:` payloads of an SSE body, in order. */
function sseData(text: string): string[] {
  return text
    .split('\n\n')
    .filter((block) => block.trim() !== '')
    .map((block) =>
      block
        .split('\n')
        .filter((line) => line.startsWith('data: '))
        .map((line) => line.slice(6))
        .join('\n'),
    );
}

const byMarker =
  (marker: string) =>
  (r: MockRequest[]): MockRequest | undefined =>
    r.find((x) => (x.json as { marker?: string } | undefined)?.marker === marker);

describe('mock upstream: default answers', () => {
  test('chat completion JSON, recorded with headers and parsed body', async () => {
    const res = await post(
      '/v1/chat/completions',
      { model: 'gpt-test', marker: 'chat-json', messages: [{ role: 'system', content: 's' }, { role: 'user', content: 'hello' }] },
      { authorization: 'Bearer k' },
    );
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /application\/json/);
    const body = (await res.json()) as any;
    assert.match(body.id, /^chatcmpl-mock-\d+$/);
    assert.equal(body.object, 'chat.completion');
    assert.equal(typeof body.created, 'number');
    assert.equal(body.model, 'gpt-test');
    assert.deepEqual(body.choices, [
      { index: 0, message: { role: 'assistant', content: 'mock reply to: hello' }, logprobs: null, finish_reason: 'stop' },
    ]);
    assert.deepEqual(body.usage, { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 });

    await mock.waitFor((r) => byMarker('chat-json')(r)?.completed === true);
    const rec = byMarker('chat-json')(mock.received)!;
    assert.equal(rec.method, 'POST');
    assert.equal(rec.path, '/v1/chat/completions');
    assert.equal(rec.headers.authorization, 'Bearer k');
    assert.equal(JSON.parse(rec.body).model, 'gpt-test');
    assert.equal(rec.aborted, false);
  });

  test('ids differ between requests and the /v1 prefix is optional', async () => {
    const a = (await (await post('/chat/completions', { model: 'm', messages: [] })).json()) as any;
    const b = (await (await post('/v1/chat/completions/', { model: 'm', messages: [] })).json()) as any;
    assert.notEqual(a.id, b.id);
    assert.equal(a.choices[0].message.content, 'mock reply to: ');
  });

  test('streaming chat with include_usage ends with the usage chunk, then [DONE]', async () => {
    const res = await post('/v1/chat/completions', {
      model: 'gpt-test',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: [{ type: 'text', text: 'stream me' }] }],
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
    const data = sseData(await res.text());
    assert.equal(data.at(-1), '[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    assert.equal(chunks.length, 5 + 1 + 1); // content, finish, usage
    for (const c of chunks) {
      assert.equal(c.object, 'chat.completion.chunk');
      assert.equal(c.model, 'gpt-test');
      assert.equal(c.id, chunks[0].id);
    }
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const content = chunks
      .slice(0, 5)
      .map((c) => c.choices[0].delta.content)
      .join('');
    assert.equal(content, 'mock reply to: stream me');
    assert.equal(chunks[5].choices[0].finish_reason, 'stop');
    assert.deepEqual(chunks[6].choices, []);
    assert.deepEqual(chunks[6].usage, { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 });
  });

  test('chunks sets the number of content chunks', async () => {
    const res = await post('/v1/chat/completions', { model: 'm', stream: true, messages: [] }, mockHeader({ chunks: 12 }));
    const data = sseData(await res.text());
    assert.equal(data.length, 12 + 1 + 1); // content, finish, [DONE]: no usage chunk without include_usage
    assert.equal(data.at(-1), '[DONE]');
  });

  test('text completions, embeddings, responses, models, 404', async () => {
    const cmpl = (await (await post('/v1/completions', { model: 'c', prompt: 'p' })).json()) as any;
    assert.equal(cmpl.object, 'text_completion');
    assert.equal(cmpl.choices[0].text, 'mock reply to: p');
    assert.equal(cmpl.choices[0].finish_reason, 'stop');

    const cmplStream = sseData(await (await post('/v1/completions', { model: 'c', prompt: 'p', stream: true })).text());
    assert.equal(cmplStream.at(-1), '[DONE]');
    assert.equal(JSON.parse(cmplStream[0]!).object, 'text_completion');

    const emb = (await (await post('/v1/embeddings', { model: 'e', input: ['a', 'b', 'c'] })).json()) as any;
    assert.equal(emb.object, 'list');
    assert.equal(emb.model, 'e');
    assert.deepEqual(
      emb.data.map((d: any) => [d.object, d.index, d.embedding.length]),
      [
        ['embedding', 0, 8],
        ['embedding', 1, 8],
        ['embedding', 2, 8],
      ],
    );
    const one = (await (await post('/embeddings', { model: 'e', input: 'a' })).json()) as any;
    assert.equal(one.data.length, 1);
    assert.deepEqual(one.data[0].embedding, emb.data[0].embedding); // deterministic per input

    const resp = (await (await post('/v1/responses', { model: 'r', input: 'hi' })).json()) as any;
    assert.equal(resp.id, 'resp_mock');
    assert.equal(resp.object, 'response');
    assert.equal(resp.status, 'completed');
    assert.equal(resp.model, 'r');
    assert.equal(resp.output[0].content[0].text, 'mock');
    assert.deepEqual(resp.usage, { input_tokens: 5, output_tokens: 3, total_tokens: 8 });

    const models = (await (await fetch(mock.url + '/v1/models')).json()) as any;
    assert.equal(models.object, 'list');
    assert.ok(models.data.length >= 2);

    const missing = await fetch(mock.url + '/v1/nothing-here');
    assert.equal(missing.status, 404);
    assert.equal(typeof ((await missing.json()) as any).error.message, 'string');

    const bad = await fetch(mock.url + '/v1/chat/completions', { method: 'POST', body: '{not json' });
    assert.equal(bad.status, 400);
    await bad.arrayBuffer();
  });
});

describe('mock upstream: x-mock scripts', () => {
  test('status 429 with body and extra headers', async () => {
    const res = await post(
      '/v1/chat/completions',
      { model: 'm', messages: [] },
      mockHeader({ status: 429, body: { error: { message: 'slow down', type: 'rate_limit_error' } }, headers: { 'Retry-After': 2 } }),
    );
    assert.equal(res.status, 429);
    assert.equal(res.headers.get('retry-after'), '2');
    assert.deepEqual(await res.json(), { error: { message: 'slow down', type: 'rate_limit_error' } });
  });

  test('a bare error status gets a provider-shaped error body', async () => {
    const openai = await post('/v1/chat/completions', { model: 'm' }, mockHeader({ status: 500 }));
    assert.equal(openai.status, 500);
    assert.equal(typeof ((await openai.json()) as any).error.message, 'string');
    const anthropic = await post('/v1/messages', { model: 'm' }, mockHeader({ status: 529 }));
    assert.equal(anthropic.status, 529);
    assert.deepEqual(((await anthropic.json()) as any).error.type, 'overloaded_error');
  });

  test('headersDelayMs holds back the status line', async () => {
    const started = performance.now();
    const res = await post('/v1/chat/completions', { model: 'm', messages: [] }, mockHeader({ headersDelayMs: 200 }));
    const elapsed = performance.now() - started;
    assert.equal(res.status, 200);
    assert.ok(elapsed >= 190, `headers arrived after ${elapsed.toFixed(0)} ms`);
    await res.arrayBuffer();
  });

  test('scripted sse events with event names, interval and [DONE]', async () => {
    const started = performance.now();
    const res = await post(
      '/v1/chat/completions',
      { model: 'm' },
      mockHeader({ sse: ['{"a":1}', { event: 'custom', data: '{"b":2}' }, { c: 3 }], sseIntervalMs: 50 }),
    );
    const text = await res.text();
    assert.ok(performance.now() - started >= 140);
    assert.equal(text, 'data: {"a":1}\n\nevent: custom\ndata: {"b":2}\n\ndata: {"c":3}\n\ndata: [DONE]\n\n');

    const noDone = await post('/v1/chat/completions', { model: 'm' }, mockHeader({ sse: ['x'], sseDone: false }));
    assert.equal(await noDone.text(), 'data: x\n\n');
  });

  test('rawBody is sent as-is', async () => {
    const res = await post('/v1/chat/completions', { model: 'm' }, mockHeader({ rawBody: '{"broken":', status: 200 }));
    assert.equal(res.status, 200);
    assert.equal(await res.text(), '{"broken":');
  });

  test('disconnectAfterEvents truncates the stream: the client sees an error', async () => {
    const res = await post(
      '/v1/chat/completions',
      { model: 'm', stream: true, marker: 'disconnect', messages: [{ role: 'user', content: 'x' }] },
      mockHeader({ disconnectAfterEvents: 2, chunks: 10 }),
    );
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let seen = '';
    await assert.rejects(async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return; // a clean end would fail assert.rejects
        seen += decoder.decode(value, { stream: true });
      }
    });
    const events = sseData(seen);
    assert.ok(events.length <= 2, `saw ${events.length} events`);
    assert.ok(!events.includes('[DONE]'));
    await mock.waitFor((r) => byMarker('disconnect')(r) !== undefined);
    const rec = byMarker('disconnect')(mock.received)!;
    assert.equal(rec.completed, false);
    assert.equal(rec.aborted, false); // the mock hung up, not the client
  });

  test('destroyBeforeHeaders: the request fails without a response', async () => {
    await assert.rejects(post('/v1/chat/completions', { model: 'm' }, mockHeader({ destroyBeforeHeaders: true })));
  });

  test('a client abort during neverRespond is recorded as aborted', async () => {
    const controller = new AbortController();
    const pending = post(
      '/v1/chat/completions',
      { model: 'm', marker: 'abort-me', messages: [] },
      mockHeader({ neverRespond: true }),
      controller.signal,
    );
    await mock.waitFor((r) => byMarker('abort-me')(r) !== undefined);
    assert.equal(byMarker('abort-me')(mock.received)!.aborted, false);
    controller.abort();
    await assert.rejects(pending, { name: 'AbortError' });
    await mock.waitFor((r) => byMarker('abort-me')(r)!.aborted);
    assert.equal(byMarker('abort-me')(mock.received)!.completed, false);
  });

  test('a client abort mid-stream is recorded as aborted', async () => {
    const controller = new AbortController();
    const res = await post(
      '/v1/chat/completions',
      { model: 'm', stream: true, marker: 'abort-stream', messages: [] },
      mockHeader({ chunks: 1000, sseIntervalMs: 20 }),
      controller.signal,
    );
    const reader = res.body!.getReader();
    await reader.read();
    controller.abort();
    await mock.waitFor((r) => byMarker('abort-stream')(r)!.aborted);
  });

  test('an invalid x-mock header is a 400', async () => {
    const res = await post('/v1/chat/completions', { model: 'm' }, { 'x-mock': '{nope' });
    assert.equal(res.status, 400);
    assert.match(((await res.json()) as any).error.message, /x-mock/);
  });

  test('pace: a stream writes each event, then its end, only once the pace for it has resolved', async () => {
    const asked: number[] = [];
    const gates: (() => void)[] = [];
    mock.pace((index) => new Promise<void>((resolve) => {
      asked.push(index);
      gates.push(resolve);
    }));
    try {
      const pending = post('/v1/chat/completions', { model: 'm', stream: true, messages: [{ role: 'user', content: 'paced' }] }, mockHeader({ chunks: 2 }));
      const waitAsked = async (n: number) => {
        const deadline = Date.now() + 10_000;
        while (asked.length < n) {
          if (Date.now() > deadline) assert.fail(`the mock asked its pace ${JSON.stringify(asked)}, not up to index ${n - 1}`);
          await new Promise((r) => setTimeout(r, 5));
        }
      };
      await waitAsked(1);
      gates[0]!();
      const res = await pending;
      const reader = res.body!.getReader();
      const decoder = new TextDecoder();
      // Two content chunks, the finish chunk, [DONE]: each read while the mock waits on the next pace is exactly one event.
      const seen: string[] = [];
      for (let i = 0; i < 4; i++) {
        let text = '';
        while (!text.endsWith('\n\n')) text += decoder.decode((await reader.read()).value, { stream: true });
        seen.push(text);
        await waitAsked(i + 2);
        assert.deepEqual(asked, Array.from({ length: i + 2 }, (_, k) => k), 'the next write waits on its own pace');
        assert.equal(text.split('\n\n').length, 2, `one event per pace: ${JSON.stringify(text)}`);
        gates[i + 1]!();
      }
      assert.equal((await reader.read()).done, true, 'the end comes after the last pace (index: the number of events)');
      assert.equal(asked.length, 5);
      assert.equal(seen[3], 'data: [DONE]\n\n');
      assert.match(seen[0]!, /"role":"assistant"/);
    } finally {
      mock.pace(undefined);
    }
  });

  test('waitFor rejects with a helpful message; reset empties received', async () => {
    await assert.rejects(mock.waitFor(() => false, 50), /timed out after 50 ms/);
    const held = mock.received;
    mock.reset();
    assert.equal(mock.received.length, 0);
    assert.equal(held, mock.received);
  });
});

describe('mock upstream: official SDK clients', () => {
  test('@anthropic-ai/sdk reads a JSON and a streamed message', async () => {
    const client = new Anthropic({ baseURL: mock.url, apiKey: 'x', maxRetries: 0 });
    const params = { model: 'claude-mock', max_tokens: 64, messages: [{ role: 'user' as const, content: 'hi' }] };

    const message = await client.messages.create(params);
    assert.match(message.id, /^msg_mock_\d+$/);
    assert.equal(message.role, 'assistant');
    assert.equal(message.model, 'claude-mock');
    assert.deepEqual(message.content, [{ type: 'text', text: 'mock reply' }]);
    assert.equal(message.stop_reason, 'end_turn');
    assert.deepEqual(message.usage, { input_tokens: 10, output_tokens: 6 });

    const stream = client.messages.stream(params);
    let streamedText = '';
    stream.on('text', (delta) => {
      streamedText += delta;
    });
    const final = await stream.finalMessage();
    assert.equal(streamedText, 'mock reply');
    assert.equal(final.content[0]?.type, 'text');
    assert.equal((final.content[0] as { text: string }).text, 'mock reply');
    assert.equal(final.stop_reason, 'end_turn');
    assert.equal(final.usage.input_tokens, 10);
    assert.equal(final.usage.output_tokens, 6);
  });

  test('openai SDK: chat (plain and streamed) and embeddings', async () => {
    const client = new OpenAI({ baseURL: mock.url + '/v1', apiKey: 'x', maxRetries: 0 });

    const completion = await client.chat.completions.create({
      model: 'gpt-mock',
      messages: [{ role: 'user', content: 'ping' }],
    });
    assert.equal(completion.choices[0]?.message.content, 'mock reply to: ping');
    assert.equal(completion.usage?.total_tokens, 18);

    const stream = await client.chat.completions.create({
      model: 'gpt-mock',
      messages: [{ role: 'user', content: 'ping' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: unknown;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, 'mock reply to: ping');
    assert.deepEqual(usage, { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 });

    // The SDK asks for base64 unless told otherwise, and decodes it back to floats.
    const emb = await client.embeddings.create({ model: 'emb-mock', input: ['one', 'two'] });
    assert.equal(emb.data.length, 2);
    assert.equal(emb.data[0]?.embedding.length, 8);
    const floats = await client.embeddings.create({ model: 'emb-mock', input: 'one', encoding_format: 'float' });
    assert.deepEqual(floats.data[0]?.embedding, emb.data[0]?.embedding);
  });
});

describe('mock upstream: standalone process', () => {
  test('prints its URL, serves, and exits cleanly on SIGTERM', async () => {
    const file = fileURLToPath(new URL('../support/mock-upstream.ts', import.meta.url));
    const child = spawn(process.execPath, [file, '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const line = await new Promise<string>((resolve, reject) => {
        let out = '';
        const timer = setTimeout(() => reject(new Error(`no URL line within 10 s: ${out}`)), 10_000);
        child.stdout.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          const nl = out.indexOf('\n');
          if (nl !== -1) {
            clearTimeout(timer);
            resolve(out.slice(0, nl));
          }
        });
        child.once('exit', () => reject(new Error(`exited before printing its URL: ${out}`)));
      });
      const url = (JSON.parse(line) as { mock_upstream: string }).mock_upstream;
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
      const res = await fetch(url + '/v1/chat/completions', {
        method: 'POST',
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'bench' }] }),
      });
      assert.equal(((await res.json()) as any).choices[0].message.content, 'mock reply to: bench');
    } finally {
      child.kill('SIGTERM');
    }
    assert.equal(await exited, 0);
  });
});
