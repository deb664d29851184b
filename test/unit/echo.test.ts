// The echo provider, driven with a recording handler in place of the relay.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingHttpHeaders } from 'node:http';
import { EchoProvider } from '../../src/providers/echo/adapter.ts';
import type { DispatchController, Endpoint, ProviderRequest, ResponseHandler } from '../../src/providers/types.ts';
import { SseUsageReader } from '../../src/gateway/usage.ts';

type Json = Record<string, any>;

type Call =
  | { kind: 'requestStart' }
  | { kind: 'responseStart'; status: number; headers: IncomingHttpHeaders }
  | { kind: 'data'; chunk: Buffer }
  | { kind: 'end' }
  | { kind: 'error'; error: Error };

class Recorder implements ResponseHandler {
  readonly calls: Call[] = [];
  controller: DispatchController | undefined;
  readonly hooks: { onStart?: (c: DispatchController) => void; onData?: (c: DispatchController, n: number) => void };
  constructor(hooks: Recorder['hooks'] = {}) {
    this.hooks = hooks;
  }
  onRequestStart(controller: DispatchController): void {
    this.controller = controller;
    this.calls.push({ kind: 'requestStart' });
    this.hooks.onStart?.(controller);
  }
  onResponseStart(_c: DispatchController, status: number, headers: IncomingHttpHeaders): void {
    this.calls.push({ kind: 'responseStart', status, headers });
  }
  onResponseData(controller: DispatchController, chunk: Buffer): void {
    this.calls.push({ kind: 'data', chunk });
    this.hooks.onData?.(controller, this.calls.filter((c) => c.kind === 'data').length);
  }
  onResponseEnd(): void {
    this.calls.push({ kind: 'end' });
  }
  onResponseError(_c: DispatchController, error: Error): void {
    this.calls.push({ kind: 'error', error });
  }
  get kinds(): string[] {
    return this.calls.map((c) => c.kind);
  }
  get status(): number | undefined {
    const start = this.calls.find((c) => c.kind === 'responseStart');
    return start?.kind === 'responseStart' ? start.status : undefined;
  }
  get headers(): IncomingHttpHeaders {
    const start = this.calls.find((c) => c.kind === 'responseStart');
    return start?.kind === 'responseStart' ? start.headers : {};
  }
  get body(): string {
    return Buffer.concat(this.calls.flatMap((c) => (c.kind === 'data' ? [c.chunk] : []))).toString('utf8');
  }
  get json(): Json {
    return JSON.parse(this.body) as Json;
  }
  /** SSE events as { event, data } in order. */
  get events(): { event: string | undefined; data: string }[] {
    return this.body
      .split('\n\n')
      .filter((block) => block !== '')
      .map((block) => {
        const lines = block.split('\n');
        const event = lines.find((l) => l.startsWith('event: '))?.slice(7);
        const data = lines.filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
        return { event, data };
      });
  }
}

function run(endpoint: Endpoint, json: Json, recorder = new Recorder()): Recorder {
  const request: ProviderRequest = { endpoint, json, body: Buffer.from(JSON.stringify(json)), headers: {}, requestId: 'req-test' };
  new EchoProvider('echo').dispatch(request, recorder);
  return recorder;
}

function assertCompleteResponse(recorder: Recorder): void {
  const kinds = recorder.kinds;
  assert.equal(kinds[0], 'requestStart');
  assert.equal(kinds[1], 'responseStart');
  assert.equal(kinds.at(-1), 'end');
  assert.ok(kinds.slice(2, -1).every((k) => k === 'data'), kinds.join(','));
  assert.equal(recorder.status, 200);
}

const chatBody = (extra: Json = {}) => ({ model: 'echo-1', messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hello there world' }], ...extra });

describe('provider', () => {
  test('name, type, supports every HTTP endpoint but not realtime', async () => {
    const echo = new EchoProvider('local');
    assert.equal(echo.name, 'local');
    assert.equal(echo.type, 'echo');
    for (const endpoint of ['chat', 'completions', 'embeddings', 'responses', 'messages'] as const) assert.equal(echo.supports(endpoint), true, endpoint);
    assert.equal(echo.supports('realtime'), false);
    await echo.close();
  });
});

describe('chat', () => {
  test('JSON: a chat.completion echoing the last user message, with usage', () => {
    const r = run('chat', chatBody());
    assertCompleteResponse(r);
    assert.equal(r.headers['content-type'], 'application/json');
    const body = r.json;
    assert.equal(body.object, 'chat.completion');
    assert.equal(body.model, 'echo-1');
    assert.match(body.id, /^chatcmpl-echo/);
    assert.equal(body.choices.length, 1);
    assert.deepEqual(body.choices[0].message, { role: 'assistant', content: 'echo: hello there world', refusal: null });
    assert.equal(body.choices[0].finish_reason, 'stop');
    assert.deepEqual(body.usage, { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 });
  });

  test('JSON: content given as parts, and the last user message is the one echoed', () => {
    const r = run('chat', {
      model: 'echo',
      messages: [
        { role: 'user', content: 'first' },
        { role: 'assistant', content: 'ok' },
        { role: 'user', content: [{ type: 'text', text: 'second' }, { type: 'text', text: 'part' }] },
      ],
    });
    assert.equal(r.json.choices[0].message.content, 'echo: second part');
  });

  test('JSON: no user message still answers', () => {
    assert.equal(run('chat', { model: 'echo', messages: [] }).json.choices[0].message.content, 'echo: (empty message)');
  });

  test('stream: SSE chunks that rebuild the reply, a stop chunk, and [DONE] last; no usage chunk unless asked', () => {
    const r = run('chat', chatBody({ stream: true }));
    assertCompleteResponse(r);
    assert.match(String(r.headers['content-type']), /^text\/event-stream/);
    const events = r.events;
    assert.equal(events.at(-1)!.data, '[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data) as Json);
    assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk' && c.model === 'echo-1'));
    assert.equal(new Set(chunks.map((c) => c.id)).size, 1);
    assert.equal(chunks[0]!.choices[0].delta.role, 'assistant');
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    assert.equal(text, 'echo: hello there world');
    assert.equal(chunks.at(-1)!.choices[0].finish_reason, 'stop');
    assert.ok(chunks.every((c) => c.usage === undefined));
  });

  test('stream with stream_options.include_usage: a usage chunk with empty choices just before [DONE]', () => {
    const r = run('chat', chatBody({ stream: true, stream_options: { include_usage: true } }));
    const events = r.events;
    assert.equal(events.at(-1)!.data, '[DONE]');
    const usageChunk = JSON.parse(events.at(-2)!.data) as Json;
    assert.deepEqual(usageChunk.choices, []);
    assert.deepEqual(usageChunk.usage, { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 });
    const reader = new SseUsageReader();
    for (const call of r.calls) if (call.kind === 'data') reader.push(call.chunk);
    // The model the answer names comes with its usage (for traces).
    assert.deepEqual(reader.finish(), { prompt: 3, completion: 4, model: 'echo-1' });
  });
});

describe('completions', () => {
  test('JSON: a text_completion echoing the prompt', () => {
    const r = run('completions', { model: 'echo', prompt: 'say this' });
    assertCompleteResponse(r);
    const body = r.json;
    assert.equal(body.object, 'text_completion');
    assert.equal(body.choices[0].text, 'echo: say this');
    assert.deepEqual(body.usage, { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 });
  });

  test('stream: text pieces, stop, optional usage, [DONE]', () => {
    const r = run('completions', { model: 'echo', prompt: 'say this', stream: true, stream_options: { include_usage: true } });
    assertCompleteResponse(r);
    const events = r.events;
    assert.equal(events.at(-1)!.data, '[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data) as Json);
    assert.equal(chunks.map((c) => c.choices[0]?.text ?? '').join(''), 'echo: say this');
    assert.equal(chunks.at(-2)!.choices[0].finish_reason, 'stop');
    assert.deepEqual(chunks.at(-1)!.usage, { prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 });
  });
});

describe('embeddings', () => {
  const norm = (v: number[]) => Math.hypot(...v);

  test('one vector per input, default 16 dimensions, unit length', () => {
    const r = run('embeddings', { model: 'emb', input: ['alpha', 'beta gamma'] });
    assertCompleteResponse(r);
    assert.equal(r.headers['content-type'], 'application/json');
    const body = r.json;
    assert.equal(body.object, 'list');
    assert.equal(body.model, 'emb');
    assert.deepEqual(body.data.map((d: Json) => [d.object, d.index]), [['embedding', 0], ['embedding', 1]]);
    for (const d of body.data) {
      assert.equal(d.embedding.length, 16);
      assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5, String(norm(d.embedding)));
    }
    assert.deepEqual(body.usage, { prompt_tokens: 3, total_tokens: 3 });
  });

  test('dimensions is honoured (including more than one hash block)', () => {
    for (const dimensions of [1, 8, 33, 256, 1536]) {
      const [d] = run('embeddings', { model: 'emb', input: 'x', dimensions }).json.data;
      assert.equal(d.embedding.length, dimensions);
      assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-4, `${dimensions}: ${norm(d.embedding)}`);
    }
  });

  test('deterministic: the same text gives the same vector, another text a different one', () => {
    const a = run('embeddings', { model: 'emb', input: 'same text', dimensions: 64 }).json.data[0].embedding;
    const b = run('embeddings', { model: 'emb', input: ['same text'], dimensions: 64 }).json.data[0].embedding;
    const c = run('embeddings', { model: 'emb', input: 'other text', dimensions: 64 }).json.data[0].embedding;
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, c);
  });

  test('stream: true still answers JSON', () => {
    const r = run('embeddings', { model: 'emb', input: 'x', stream: true });
    assert.equal(r.headers['content-type'], 'application/json');
    assert.equal(r.json.object, 'list');
  });
});

describe('responses', () => {
  test('JSON: a completed response with output_text and usage', () => {
    const r = run('responses', { model: 'echo', input: 'ping pong' });
    assertCompleteResponse(r);
    const body = r.json;
    assert.equal(body.object, 'response');
    assert.equal(body.status, 'completed');
    assert.equal(body.output[0].type, 'message');
    assert.equal(body.output[0].content[0].type, 'output_text');
    assert.equal(body.output[0].content[0].text, 'echo: ping pong');
    assert.deepEqual(body.usage, { input_tokens: 2, output_tokens: 3, total_tokens: 5 });
  });

  test('JSON: input given as a list of string-content messages (role only user)', () => {
    const r = run('responses', { model: 'echo', input: [{ role: 'user', content: 'ping pong' }] });
    assert.equal(r.json.output[0].content[0].text, 'echo: ping pong');
  });

  test(
    'JSON: with a message list as input, only the last user message is echoed',
    () => {
      const r = run('responses', {
        model: 'echo',
        input: [
          { role: 'system', content: 'sys' },
          { role: 'user', content: 'first' },
          { role: 'assistant', content: [{ type: 'output_text', text: 'ok' }] },
          { role: 'user', content: [{ type: 'input_text', text: 'second' }] },
        ],
      });
      assert.equal(r.json.output[0].content[0].text, 'echo: second');
    },
  );

  test('stream: created, text deltas, text done, completed; sequence numbers in order; event names match types', () => {
    const r = run('responses', { model: 'echo', input: 'ping pong', stream: true });
    assertCompleteResponse(r);
    const events = r.events;
    const payloads = events.map((e) => JSON.parse(e.data) as Json);
    events.forEach((e, i) => assert.equal(e.event, payloads[i]!.type));
    const types = payloads.map((p) => p.type);
    assert.equal(types[0], 'response.created');
    assert.equal(types.at(-2), 'response.output_text.done');
    assert.equal(types.at(-1), 'response.completed');
    assert.ok(types.slice(1, -2).every((t) => t === 'response.output_text.delta'));
    assert.deepEqual(payloads.map((p) => p.sequence_number), payloads.map((_, i) => i));
    assert.equal(payloads.filter((p) => p.type === 'response.output_text.delta').map((p) => p.delta).join(''), 'echo: ping pong');
    assert.equal(payloads.at(-1)!.response.status, 'completed');
    const reader = new SseUsageReader();
    for (const call of r.calls) if (call.kind === 'data') reader.push(call.chunk);
    assert.deepEqual(reader.finish(), { prompt: 2, completion: 3, model: 'echo' });
  });
});

describe('messages', () => {
  const body = (extra: Json = {}) => ({ model: 'claude-echo', max_tokens: 10, messages: [{ role: 'user', content: 'hi claude' }], ...extra });

  test('JSON: an Anthropic message with text content and usage', () => {
    const r = run('messages', body());
    assertCompleteResponse(r);
    const message = r.json;
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.equal(message.model, 'claude-echo');
    assert.deepEqual(message.content, [{ type: 'text', text: 'echo: hi claude' }]);
    assert.equal(message.stop_reason, 'end_turn');
    assert.deepEqual(message.usage, { input_tokens: 2, output_tokens: 3 });
  });

  test('stream: Anthropic event order, deltas rebuild the text', () => {
    const r = run('messages', body({ stream: true }));
    assertCompleteResponse(r);
    const events = r.events;
    const payloads = events.map((e) => JSON.parse(e.data) as Json);
    events.forEach((e, i) => assert.equal(e.event, payloads[i]!.type));
    const order = events.map((e) => e.event);
    const deltas = order.filter((e) => e === 'content_block_delta').length;
    assert.ok(deltas >= 1);
    assert.deepEqual(order, [
      'message_start',
      'content_block_start',
      ...Array<string>(deltas).fill('content_block_delta'),
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    assert.equal(payloads.filter((p) => p.type === 'content_block_delta').map((p) => p.delta.text).join(''), 'echo: hi claude');
    assert.equal(payloads.find((p) => p.type === 'message_delta')!.delta.stop_reason, 'end_turn');
    const reader = new SseUsageReader();
    for (const call of r.calls) if (call.kind === 'data') reader.push(call.chunk);
    assert.deepEqual(reader.finish(), { prompt: 2, completion: 3, model: 'claude-echo' });
  });
});

describe('abort', () => {
  test('abort during onRequestStart: no response start, no data, no end', () => {
    for (const endpoint of ['chat', 'completions', 'embeddings', 'responses', 'messages'] as const) {
      const r = run(endpoint, { ...chatBody({ stream: true }), input: 'x' }, new Recorder({ onStart: (c) => c.abort(new Error('client gone')) }));
      assert.deepEqual(r.kinds, ['requestStart'], endpoint);
    }
  });

  test('abort during a stream: no more data and no end', () => {
    const r = run('chat', chatBody({ stream: true }), new Recorder({ onData: (c, n) => n === 2 && c.abort(new Error('client gone')) }));
    assert.deepEqual(r.kinds, ['requestStart', 'responseStart', 'data', 'data']);
  });
});
