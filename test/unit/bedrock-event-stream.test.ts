// Bedrock's binary event stream as the provider relays it (providers/bedrock/event-stream.ts): the
// same SSE out wherever the reads are cut, and hostile bytes from upstream (garbage, a flipped
// bit, a length prefix of gigabytes) end in an Error the relay turns into an aborted answer,
// never a crash, a hang or a buffer grown without bound. Seeded fast-check properties.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { BedrockAnswer, EventStreamToSse } from '../../src/providers/bedrock/event-stream.ts';
import type { DispatchController, ResponseHandler } from '../../src/providers/types.ts';
import { eventStreamMessage } from '../support/mock-cloud-answers.ts';

const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 0xb3d);

const converse = Buffer.concat([
  eventStreamMessage('messageStart', { role: 'assistant' }),
  eventStreamMessage('contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'Hé, "quoted"\nline' } }),
  eventStreamMessage('messageStop', { stopReason: 'end_turn' }),
  eventStreamMessage('metadata', { usage: { inputTokens: 3, outputTokens: 2 } }),
]);

/** `bytes` pushed in the pieces `cuts` makes; the text out, or the Error thrown. */
function feed(kind: 'converse' | 'anthropic', bytes: Buffer, cuts: number[]): string | Error {
  const decoder = new EventStreamToSse(kind);
  const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  let out = '';
  let from = 0;
  try {
    for (const at of [...points, bytes.length]) {
      out += decoder.push(bytes.subarray(from, at));
      from = at;
    }
  } catch (error) {
    assert.ok(error instanceof Error, `threw a non-Error: ${String(error)}`);
    return error;
  }
  return out;
}

describe('EventStreamToSse', () => {
  test('each message is one SSE event named by its :event-type, its JSON on one data line', () => {
    const out = feed('converse', converse, []);
    assert.equal(typeof out, 'string');
    const events = (out as string).split('\n\n').filter(Boolean);
    assert.deepEqual(events.map((e) => e.split('\n')[0]), ['event: messageStart', 'event: contentBlockDelta', 'event: messageStop', 'event: metadata']);
    assert.deepEqual(JSON.parse(events[1]!.split('\n')[1]!.slice('data: '.length)), { contentBlockIndex: 0, delta: { text: 'Hé, "quoted"\nline' } });
  });

  test('InvokeModel chunks are the Anthropic events their base64 bytes carry', () => {
    const start = { type: 'message_start', message: { id: 'msg_1' } };
    const out = feed('anthropic', eventStreamMessage('chunk', { bytes: Buffer.from(JSON.stringify(start)).toString('base64') }), []);
    assert.equal(out, `event: message_start\ndata: ${JSON.stringify(start)}\n\n`);
  });

  test('the output does not depend on where the reads were cut', () => {
    const whole = feed('converse', converse, []);
    fc.assert(
      fc.property(fc.array(fc.nat(), { maxLength: 12 }), (cuts) => {
        assert.equal(feed('converse', converse, cuts), whole);
      }),
      { seed: SEED, numRuns: 300 },
    );
  });

  test('arbitrary bytes: text or an Error, never anything else', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), fc.array(fc.nat(), { maxLength: 6 }), fc.constantFrom<'converse' | 'anthropic'>('converse', 'anthropic'), (bytes, cuts, kind) => {
        const out = feed(kind, Buffer.from(bytes), cuts);
        assert.ok(typeof out === 'string' || out instanceof Error);
      }),
      { seed: SEED, numRuns: 500 },
    );
  });

  test('a message with any one byte changed is refused (its CRCs), not relayed', () => {
    const message = eventStreamMessage('contentBlockDelta', { contentBlockIndex: 0, delta: { text: 'hello' } });
    fc.assert(
      fc.property(fc.nat({ max: message.length - 1 }), fc.integer({ min: 1, max: 255 }), (at, flip) => {
        const bad = Buffer.from(message);
        bad[at] = bad[at]! ^ flip;
        const out = feed('converse', bad, []);
        // A changed length prefix may only make the decoder wait for bytes that never come.
        assert.ok(out instanceof Error || out === '', `relayed a corrupted message: ${String(out)}`);
      }),
      { seed: SEED, numRuns: 400 },
    );
  });

  test('a length prefix beyond 16 MB is refused at once, before anything is buffered', () => {
    const prelude = Buffer.alloc(12);
    prelude.writeUInt32BE(0xffff_fff0, 0);
    assert.ok(feed('converse', prelude, []) instanceof Error);
    const decoder = new EventStreamToSse('converse');
    assert.equal(decoder.push(prelude.subarray(0, 11)), '', 'fewer than a prelude: waits');
    assert.equal(decoder.incomplete, true);
  });
});

describe('BedrockAnswer', () => {
  class Controller implements DispatchController {
    aborted = false;
    paused = false;
    reason: Error | null = null;
    abort(reason: Error): void {
      this.aborted = true;
      this.reason = reason;
    }
    pause(): void {}
    resume(): void {}
  }

  function relay(kind: 'converse' | 'anthropic' | 'anthropic-count', status: number, headers: Record<string, string>, chunks: Buffer[]) {
    const seen: { status?: number; headers?: Record<string, unknown>; data: string } = { data: '' };
    const inner: ResponseHandler = {
      onResponseStart: (_c, s, h) => {
        seen.status = s;
        seen.headers = h as Record<string, unknown>;
      },
      onResponseData: (_c, chunk) => {
        seen.data += chunk.toString();
      },
      onResponseEnd: () => {},
    };
    const controller = new Controller();
    const answer = new BedrockAnswer(inner, kind);
    answer.onResponseStart(controller, status, headers);
    for (const chunk of chunks) answer.onResponseData(controller, chunk);
    if (!controller.aborted) answer.onResponseEnd(controller, {});
    return { seen, controller };
  }

  test('an event stream is relayed as text/event-stream, without its length', () => {
    const { seen, controller } = relay('converse', 200, { 'content-type': 'application/vnd.amazon.eventstream', 'content-length': String(converse.length) }, [converse]);
    assert.equal(controller.aborted, false);
    assert.equal(seen.headers!['content-type'], 'text/event-stream');
    assert.equal(seen.headers!['content-length'], undefined);
    assert.match(seen.data, /^event: messageStart\n/);
  });

  test('garbage in the stream aborts the answer with an Error; nothing undecoded is relayed', () => {
    const garbage = Buffer.alloc(400, 0x41);
    const { seen, controller } = relay('converse', 200, { 'content-type': 'application/vnd.amazon.eventstream' }, [converse.subarray(0, 10), garbage]);
    assert.equal(controller.aborted, true);
    assert.ok(controller.reason instanceof Error);
    assert.equal(seen.data, '');
  });

  test("CountTokens' {inputTokens} is Anthropic's {input_tokens}; its errors are Anthropic's", () => {
    const { seen } = relay('anthropic-count', 200, { 'content-type': 'application/json', 'content-length': '17' }, [Buffer.from('{"inputTokens"'), Buffer.from(':42}')]);
    assert.deepEqual(JSON.parse(seen.data), { input_tokens: 42 });
    assert.equal(seen.headers!['content-length'], undefined);
    const refused = relay('anthropic-count', 400, { 'x-amzn-errortype': 'ValidationException:x' }, [Buffer.from('{"message":"no"}')]);
    assert.deepEqual(JSON.parse(refused.seen.data), { type: 'error', error: { type: 'invalid_request_error', message: 'no' } });
  });

  test("an error answer to an Anthropic client is in Anthropic's shape, its class from x-amzn-errortype", () => {
    const { seen } = relay('anthropic', 429, { 'content-type': 'application/json', 'x-amzn-errortype': 'ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/' }, [Buffer.from('{"message":"Too many requests"}')]);
    assert.deepEqual(JSON.parse(seen.data), { type: 'error', error: { type: 'rate_limit_error', message: 'Too many requests' } });
    const other = relay('anthropic', 400, { 'content-type': 'application/json' }, [Buffer.from('not json')]);
    assert.deepEqual(JSON.parse(other.seen.data), { type: 'error', error: { type: 'invalid_request_error', message: 'HTTP 400' } });
  });
});
