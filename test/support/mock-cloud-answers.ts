// The answers of Bedrock's Converse and Gemini's generateContent in their plainest form, for the
// benchmarks' mock (mock-upstream.ts): a text answer, JSON or streamed (Converse in AWS's binary
// event stream, Gemini in SSE), with its usage. No signature or key is checked and nothing is
// scripted: the faithful mocks, checked by the official SDKs, are mock-bedrock.ts and
// mock-google.ts; these only let the benchmarks measure the gateway's translation to each.
//
// Only node: built-ins and erasable TypeScript: Node runs this file by type stripping.
import { crc32 } from 'node:zlib';

/** What a request asked for: Converse or Gemini, streamed or not; undefined for another path. */
export type CloudRoute = 'converse' | 'converse-stream' | 'generate' | 'generate-stream';

export function cloudRoute(path: string): CloudRoute | undefined {
  if (/^\/model\/[^/]+\/converse$/.test(path)) return 'converse';
  if (/^\/model\/[^/]+\/converse-stream$/.test(path)) return 'converse-stream';
  if (/^\/v1(beta)?\/models\/[^/:]+:generateContent$/.test(path)) return 'generate';
  if (/^\/v1(beta)?\/models\/[^/:]+:streamGenerateContent$/.test(path)) return 'generate-stream';
  return undefined;
}

export interface CloudAnswer {
  readonly contentType: string;
  /** The body, whole (JSON) or as the events of a stream, each written as it comes. */
  readonly parts: readonly Buffer[];
}

/** The answer of `route` with `text` in `chunks` pieces, and its usage. */
export function cloudAnswer(route: CloudRoute, pieces: readonly string[], usage: { prompt: number; completion: number }): CloudAnswer {
  const text = pieces.join('');
  switch (route) {
    case 'converse':
      return json({
        output: { message: { role: 'assistant', content: [{ text }] } },
        stopReason: 'end_turn',
        usage: { inputTokens: usage.prompt, outputTokens: usage.completion, totalTokens: usage.prompt + usage.completion },
        metrics: { latencyMs: 1 },
      });
    case 'converse-stream':
      return {
        contentType: 'application/vnd.amazon.eventstream',
        parts: [
          eventStreamMessage('messageStart', { role: 'assistant' }),
          ...pieces.map((piece) => eventStreamMessage('contentBlockDelta', { contentBlockIndex: 0, delta: { text: piece } })),
          eventStreamMessage('contentBlockStop', { contentBlockIndex: 0 }),
          eventStreamMessage('messageStop', { stopReason: 'end_turn' }),
          eventStreamMessage('metadata', { usage: { inputTokens: usage.prompt, outputTokens: usage.completion, totalTokens: usage.prompt + usage.completion }, metrics: { latencyMs: 1 } }),
        ],
      };
    case 'generate':
      return json({ candidates: [candidate(text, 'STOP')], usageMetadata: geminiUsage(usage), modelVersion: 'gemini-2.0-flash', responseId: 'mock' });
    case 'generate-stream':
      return {
        contentType: 'text/event-stream',
        parts: pieces.map((piece, i) => {
          const last = i === pieces.length - 1;
          const chunk = { candidates: [candidate(piece, last ? 'STOP' : undefined)], usageMetadata: geminiUsage(last ? usage : { prompt: usage.prompt, completion: 0 }), modelVersion: 'gemini-2.0-flash', responseId: 'mock' };
          return Buffer.from(`data: ${JSON.stringify(chunk)}\r\n\r\n`);
        }),
      };
  }
}

function json(body: object): CloudAnswer {
  return { contentType: 'application/json', parts: [Buffer.from(JSON.stringify(body))] };
}

function candidate(text: string, finishReason: string | undefined): object {
  return { content: { role: 'model', parts: [{ text }] }, index: 0, ...(finishReason ? { finishReason } : {}) };
}

function geminiUsage(usage: { prompt: number; completion: number }): object {
  return { promptTokenCount: usage.prompt, candidatesTokenCount: usage.completion, totalTokenCount: usage.prompt + usage.completion };
}

/**
 * One message of AWS's event stream encoding: a prelude (total length, headers length, its CRC32),
 * string headers (name length, name, type 7, value length, value), the payload, the message's CRC32.
 */
export function eventStreamMessage(type: string, payload: object): Buffer {
  const headers = Buffer.concat([header(':event-type', type), header(':content-type', 'application/json'), header(':message-type', 'event')]);
  const body = Buffer.from(JSON.stringify(payload));
  const total = 12 + headers.length + body.length + 4;
  const prelude = Buffer.alloc(12);
  prelude.writeUInt32BE(total, 0);
  prelude.writeUInt32BE(headers.length, 4);
  prelude.writeUInt32BE(crc32(prelude.subarray(0, 8)), 8);
  const message = Buffer.concat([prelude, headers, body, Buffer.alloc(4)]);
  message.writeUInt32BE(crc32(message.subarray(0, total - 4)), total - 4);
  return message;
}

function header(name: string, value: string): Buffer {
  const n = Buffer.from(name);
  const v = Buffer.from(value);
  const out = Buffer.alloc(1 + n.length + 1 + 2 + v.length);
  out.writeUInt8(n.length, 0);
  n.copy(out, 1);
  out.writeUInt8(7, 1 + n.length);
  out.writeUInt16BE(v.length, 2 + n.length);
  v.copy(out, 4 + n.length);
  return out;
}
