// The embeddings → Gemini translator: an OpenAI embeddings request rewritten as a batchEmbedContents
// request, and Gemini's embeddings (and errors) read back in OpenAI's shape, checked field by field
// and through the official OpenAI SDK (which asks for base64 and decodes it itself).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import type { Content, ContentEmbedding } from '@google/genai';
import { base64Floats, geminiEmbeddingsTranslation } from '../../src/translate/embeddings-to-gemini.ts';
import { TranslationError, type Json } from '../../src/translate/types.ts';

const UPSTREAM = 'gemini-embedding-001';
const floats = geminiEmbeddingsTranslation({ model: 'my-embedder' }, UPSTREAM);

/** batchEmbedContents' REST body (EmbedContentRequest per input), plus the `model` the provider removes. */
interface BatchEmbedRequest {
  model: string;
  requests: { model: string; content: Content; outputDimensionality?: number }[];
}

function refused(body: Json, param: string, message?: RegExp): void {
  assert.throws(
    () => floats.request(body, UPSTREAM),
    (error: unknown) => {
      assert.ok(error instanceof TranslationError, `expected a TranslationError, got ${String(error)}`);
      assert.equal(error.param, param);
      if (message !== undefined) assert.match(error.message, message);
      return true;
    },
  );
}

describe('geminiEmbeddingsTranslation.request', () => {
  test('is the embeddings → embed_content translator', () => {
    assert.equal(floats.from, 'embeddings');
    assert.equal(floats.to, 'embed_content');
  });

  test('one request per input string, each naming models/<model>; dimensions as outputDimensionality; user dropped', () => {
    const out = floats.request({ model: 'my-embedder', input: ['first', 'second'], dimensions: 256, encoding_format: 'float', user: 'u-1' }, UPSTREAM);
    const expected: BatchEmbedRequest = {
      model: UPSTREAM,
      requests: [
        { model: 'models/gemini-embedding-001', content: { parts: [{ text: 'first' }] }, outputDimensionality: 256 },
        { model: 'models/gemini-embedding-001', content: { parts: [{ text: 'second' }] }, outputDimensionality: 256 },
      ],
    };
    assert.deepEqual(out.body, expected);
    assert.deepEqual(out.dropped, ['user']);
  });

  test('a single string is one request; a model already in models/ form is kept; null parameters count as not given', () => {
    const out = floats.request({ model: 'm', input: 'only', dimensions: null, user: null }, 'models/text-embedding-004');
    assert.deepEqual(out.body, { model: 'models/text-embedding-004', requests: [{ model: 'models/text-embedding-004', content: { parts: [{ text: 'only' }] } }] });
    assert.deepEqual(out.dropped, []);
  });

  test('token arrays, empty input, bad encodings and unknown parameters are refused', () => {
    refused({ model: 'm', input: [1, 2, 3] }, 'input', /token arrays/);
    refused({ model: 'm', input: [[1, 2], [3]] }, 'input', /token arrays/);
    refused({ model: 'm', input: [] }, 'input');
    refused({ model: 'm', input: ['a', { text: 'b' }] }, 'input[1]');
    refused({ model: 'm', input: 5 }, 'input');
    refused({ model: 'm', input: 'a', encoding_format: 'int8' }, 'encoding_format');
    refused({ model: 'm', input: 'a', dimensions: 0 }, 'dimensions');
    refused({ model: 'm', input: 'a', task: 'x' }, 'task', /unknown parameter/);
  });
});

const geminiAnswer: { embeddings: ContentEmbedding[] } = { embeddings: [{ values: [0.5, -1.25, 3] }, { values: [0.1, 0.2, 1e-8] }] };

describe('geminiEmbeddingsTranslation.response', () => {
  test("floats in OpenAI's list shape, indexed in input order, the model named; usage zeros (Gemini counts none)", () => {
    assert.deepEqual(floats.response(geminiAnswer as Json), {
      object: 'list',
      data: [
        { object: 'embedding', index: 0, embedding: [0.5, -1.25, 3] },
        { object: 'embedding', index: 1, embedding: [0.1, 0.2, 1e-8] },
      ],
      model: UPSTREAM,
      usage: { prompt_tokens: 0, total_tokens: 0 },
    });
    assert.deepEqual(floats.response({}), { object: 'list', data: [], model: UPSTREAM, usage: { prompt_tokens: 0, total_tokens: 0 } });
  });

  test('encoding_format base64: little-endian float32 in base64, as OpenAI writes it', () => {
    const base64 = geminiEmbeddingsTranslation({ model: 'm', encoding_format: 'base64' }, UPSTREAM);
    const data = base64.response(geminiAnswer as Json).data as Json[];
    // 0.5 = 0x3f000000, -1.25 = 0xbfa00000, 3 = 0x40400000, each little-endian.
    assert.equal(data[0]?.embedding, Buffer.from([0, 0, 0, 0x3f, 0, 0, 0xa0, 0xbf, 0, 0, 0x40, 0x40]).toString('base64'));
    assert.equal(base64Floats([]), '');
  });

  test('the OpenAI SDK (which asks for base64 unless told) decodes the vectors', async () => {
    let sent: Json = {};
    const fetch = async (_url: unknown, init?: RequestInit): Promise<Response> => {
      sent = JSON.parse(String(init?.body)) as Json;
      const translation = geminiEmbeddingsTranslation(sent, UPSTREAM);
      translation.request(sent, UPSTREAM);
      return new Response(JSON.stringify(translation.response(geminiAnswer as Json)), { headers: { 'content-type': 'application/json' } });
    };
    const client = new OpenAI({ apiKey: 'test', baseURL: 'http://sluice.invalid/v1', maxRetries: 0, fetch });
    const answer = await client.embeddings.create({ model: 'my-embedder', input: ['first', 'second'] });
    assert.equal(sent.encoding_format, 'base64');
    assert.deepEqual(Array.from(answer.data[0]?.embedding ?? []), [0.5, -1.25, 3]);
    assert.deepEqual(Array.from(answer.data[1]?.embedding ?? []), Array.from(new Float32Array([0.1, 0.2, 1e-8])));
    const asked = await client.embeddings.create({ model: 'my-embedder', input: 'x', encoding_format: 'float' });
    assert.deepEqual(asked.data[0]?.embedding, [0.5, -1.25, 3]);
  });
});

describe('geminiEmbeddingsTranslation.error', () => {
  test("Google's error in OpenAI's shape: the type by status, Google's code and message kept", async () => {
    const google = { error: { code: 400, message: 'Request contains an invalid argument.', status: 'INVALID_ARGUMENT', details: [] } };
    assert.deepEqual(floats.error(400, google), { error: { message: 'Request contains an invalid argument.', type: 'invalid_request_error', code: 'INVALID_ARGUMENT', param: null } });
    assert.deepEqual(floats.error(429, [{ error: { code: 429, message: 'Quota exceeded', status: 'RESOURCE_EXHAUSTED' } }]), {
      error: { message: 'Quota exceeded', type: 'rate_limit_exceeded', code: 'RESOURCE_EXHAUSTED', param: null },
    });
    assert.deepEqual(floats.error(500, undefined), { error: { message: 'provider answered HTTP 500', type: 'server_error', code: null, param: null } });
    const fetch = async (): Promise<Response> => new Response(JSON.stringify(floats.error(403, { error: { code: 403, message: 'denied', status: 'PERMISSION_DENIED' } })), { status: 403 });
    const client = new OpenAI({ apiKey: 'test', baseURL: 'http://sluice.invalid/v1', maxRetries: 0, fetch });
    await assert.rejects(client.embeddings.create({ model: 'm', input: 'x' }), (error: unknown) => {
      assert.ok(error instanceof OpenAI.PermissionDeniedError);
      assert.equal(error.code, 'PERMISSION_DENIED');
      assert.match(error.message, /denied/);
      return true;
    });
  });

  test('a streamed answer (never asked for) yields nothing and ends cut', () => {
    const stream = floats.stream();
    assert.equal(stream.push(Buffer.from('data: {}\n\n')), '');
    assert.equal(stream.end(), '');
    assert.equal(stream.outcome?.(), 'cut');
  });
});
