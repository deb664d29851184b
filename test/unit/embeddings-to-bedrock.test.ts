// The embeddings → Bedrock translator: an OpenAI embeddings request rewritten as the InvokeModel body
// of the upstream model's family (Titan v1 and v2, Cohere Embed v3 and v4), and the answers and
// errors read back as OpenAI's, checked field by field and through the official OpenAI SDK (which
// asks for base64 vectors and decodes them).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { bedrockEmbeddingsTranslation, embeddingsToBedrock } from '../../src/translate/embeddings-to-bedrock.ts';
import { TranslationError, type Json } from '../../src/translate/types.ts';

const TITAN_V2 = 'amazon.titan-embed-text-v2:0';
const TITAN_V1 = 'amazon.titan-embed-text-v1';
const COHERE_V3 = 'cohere.embed-english-v3';
const COHERE_V4 = 'cohere.embed-v4:0';

function translate(body: Json, upstream: string): { body: Json; dropped: readonly string[] } {
  return embeddingsToBedrock.request({ model: 'embed-client', ...body }, upstream);
}

function refused(body: Json, upstream: string, param: string, message?: RegExp): void {
  assert.throws(
    () => translate(body, upstream),
    (error: unknown) => {
      assert.ok(error instanceof TranslationError, `expected a TranslationError, got ${String(error)}`);
      assert.equal(error.param, param);
      if (message !== undefined) assert.match(error.message, message);
      return true;
    },
  );
}

describe('embeddingsToBedrock.request', () => {
  test('is the embeddings → bedrock_embeddings translator', () => {
    assert.equal(embeddingsToBedrock.from, 'embeddings');
    assert.equal(embeddingsToBedrock.to, 'bedrock_embeddings');
  });

  test('Titan v2: one text, its dimensions, normalized; the model for the provider', () => {
    assert.deepEqual(translate({ input: 'hello', dimensions: 512 }, TITAN_V2), { body: { model: TITAN_V2, inputText: 'hello', dimensions: 512, normalize: true }, dropped: [] });
    assert.deepEqual(translate({ input: ['only one'] }, TITAN_V2).body, { model: TITAN_V2, inputText: 'only one', normalize: true });
    refused({ input: ['one', 'two'] }, TITAN_V2, 'input', /one text per request, not 2/);
  });

  test('Titan v1: the text alone; its 1536 dimensions may be asked for, no other size', () => {
    assert.deepEqual(translate({ input: 'hello' }, TITAN_V1).body, { model: TITAN_V1, inputText: 'hello' });
    assert.deepEqual(translate({ input: 'hello', dimensions: 1536 }, TITAN_V1), { body: { model: TITAN_V1, inputText: 'hello' }, dropped: [] });
    refused({ input: 'hello', dimensions: 256 }, TITAN_V1, 'dimensions', /1536/);
    refused({ input: ['a', 'b'] }, 'amazon.titan-embed-g1-text-02', 'input');
  });

  test('Cohere v3: the texts, stored-document input type, float vectors; up to 96 texts; 1024 dimensions', () => {
    assert.deepEqual(translate({ input: ['a', 'b'] }, COHERE_V3).body, { model: COHERE_V3, texts: ['a', 'b'], input_type: 'search_document', embedding_types: ['float'] });
    assert.deepEqual(translate({ input: 'a', dimensions: 1024 }, 'cohere.embed-multilingual-v3').body.texts, ['a']);
    assert.equal(translate({ input: Array.from({ length: 96 }, () => 'x') }, COHERE_V3).body.texts instanceof Array, true);
    refused({ input: Array.from({ length: 97 }, () => 'x') }, COHERE_V3, 'input', /at most 96 texts/);
    refused({ input: 'a', dimensions: 512 }, COHERE_V3, 'dimensions');
  });

  test('Cohere v4: output_dimension from dimensions', () => {
    assert.deepEqual(translate({ input: ['a'], dimensions: 256 }, COHERE_V4).body, { model: COHERE_V4, texts: ['a'], input_type: 'search_document', embedding_types: ['float'], output_dimension: 256 });
    assert.equal(translate({ input: ['a'] }, COHERE_V4).body.output_dimension, undefined);
  });

  test('cross-region prefixes and ARNs name the same families; another model is refused', () => {
    assert.equal(translate({ input: 'a' }, `us.${COHERE_V4}`).body.output_dimension, undefined);
    assert.deepEqual(translate({ input: ['a'] }, `global.${COHERE_V4}`).body.texts, ['a']);
    assert.equal(translate({ input: 'a' }, `arn:aws:bedrock:us-east-1::foundation-model/${TITAN_V2}`).body.normalize, true);
    refused({ input: 'a' }, 'amazon.titan-embed-image-v1', 'model', /Titan Text Embeddings/);
    refused({ input: 'a' }, 'anthropic.claude-3-haiku-20240307-v1:0', 'model');
  });

  test('token arrays have no form in a Bedrock body; input must be text', () => {
    refused({ input: [1, 2, 3] }, TITAN_V2, 'input', /token arrays/);
    refused({ input: [[1, 2], [3]] }, COHERE_V3, 'input', /token arrays/);
    refused({ input: [] }, COHERE_V3, 'input', /empty/);
    refused({ input: ['a', 1] }, COHERE_V3, 'input');
    refused({ input: { text: 'a' } }, COHERE_V3, 'input');
  });

  test('user is dropped and named; encoding_format is checked; anything else is refused as unknown', () => {
    assert.deepEqual(translate({ input: 'a', user: 'u-1', encoding_format: 'base64' }, TITAN_V2).dropped, ['user']);
    refused({ input: 'a', encoding_format: 'int8' }, TITAN_V2, 'encoding_format');
    refused({ input: 'a', input_type: 'search_query' }, COHERE_V3, 'input_type', /unknown parameter/);
    refused({ input: 'a', stream: true }, COHERE_V3, 'stream');
    assert.deepEqual(translate({ input: 'a', user: null, dimensions: null }, TITAN_V1), { body: { model: TITAN_V1, inputText: 'a' }, dropped: [] });
  });
});

const titanAnswer = { embedding: [0.125, -0.5, 0.1], inputTextTokenCount: 7 };
const cohereByType = { id: 'emb-1', response_type: 'embeddings_by_type', texts: ['a', 'b'], embeddings: { float: [[0.25, 0.5], [-1, 2]] } };

describe('embeddingsToBedrock.response', () => {
  test("Titan's vector and token count", () => {
    const translator = bedrockEmbeddingsTranslation({ model: 'embed-client', input: 'a' });
    assert.deepEqual(translator.response(titanAnswer), {
      object: 'list',
      data: [{ object: 'embedding', index: 0, embedding: [0.125, -0.5, 0.1] }],
      model: 'embed-client',
      usage: { prompt_tokens: 7, total_tokens: 7 },
    });
  });

  test("Cohere's vectors by type, or as a plain list; no count in the body is 0", () => {
    const translator = bedrockEmbeddingsTranslation({ model: 'embed-client' });
    const expected = {
      object: 'list',
      data: [
        { object: 'embedding', index: 0, embedding: [0.25, 0.5] },
        { object: 'embedding', index: 1, embedding: [-1, 2] },
      ],
      model: 'embed-client',
      usage: { prompt_tokens: 0, total_tokens: 0 },
    };
    assert.deepEqual(translator.response(cohereByType), expected);
    assert.deepEqual(translator.response({ id: 'emb-2', response_type: 'embeddings_floats', embeddings: [[0.25, 0.5], [-1, 2]] }), expected);
    assert.deepEqual(translator.response({ ...cohereByType, meta: { billed_units: { input_tokens: 4 } } }).usage, { prompt_tokens: 4, total_tokens: 4 });
    assert.deepEqual(translator.response({}).data, []);
    assert.equal(embeddingsToBedrock.response(titanAnswer).model, '');
  });

  test('encoding_format base64: little-endian float32, as OpenAI sends it', () => {
    const answer = bedrockEmbeddingsTranslation({ model: 'm', encoding_format: 'base64' }).response(cohereByType);
    const first = (answer.data as Json[])[0]!;
    const bytes = Buffer.from(String(first.embedding), 'base64');
    assert.equal(bytes.length, 8);
    assert.deepEqual([bytes.readFloatLE(0), bytes.readFloatLE(4)], [0.25, 0.5]);
  });

  test('the OpenAI SDK (which asks for base64 and decodes it) reads the vectors and the usage', async () => {
    let sent: Json = {};
    const fetch: typeof globalThis.fetch = async (_url, init) => {
      sent = JSON.parse(String(init?.body)) as Json;
      const translator = bedrockEmbeddingsTranslation(sent);
      translator.request(sent, TITAN_V2);
      return new Response(JSON.stringify(translator.response(titanAnswer)), { status: 200, headers: { 'content-type': 'application/json' } });
    };
    const client = new OpenAI({ apiKey: 'test', baseURL: 'http://sluice.invalid/v1', maxRetries: 0, fetch });
    const out = await client.embeddings.create({ model: 'embed-client', input: 'hello' });
    assert.equal(sent.encoding_format, 'base64');
    assert.deepEqual(out.data[0]?.embedding, [0.125, -0.5, Math.fround(0.1)]);
    assert.deepEqual(out.usage, { prompt_tokens: 7, total_tokens: 7 });
  });
});

describe('embeddingsToBedrock.error and stream', () => {
  test("Bedrock's errors in OpenAI's shape, by status, keeping Bedrock's message", () => {
    const cases: [number, string][] = [
      [400, 'invalid_request_error'],
      [401, 'authentication_error'],
      [403, 'permission_error'],
      [404, 'not_found_error'],
      [429, 'rate_limit_exceeded'],
      [500, 'server_error'],
      [503, 'server_error'],
    ];
    for (const [status, type] of cases) {
      assert.deepEqual(embeddingsToBedrock.error(status, { message: 'Malformed input request: expected maxLength: 50000' }), {
        error: { message: 'Malformed input request: expected maxLength: 50000', type, code: null, param: null },
      });
    }
    assert.equal((embeddingsToBedrock.error(502, 'not json').error as Json).message, 'provider answered HTTP 502');
  });

  test('the OpenAI SDK raises the class of the status', async () => {
    const body = JSON.stringify(embeddingsToBedrock.error(429, { message: 'Too many requests' }));
    const client = new OpenAI({ apiKey: 'test', baseURL: 'http://sluice.invalid/v1', maxRetries: 0, fetch: async () => new Response(body, { status: 429, headers: { 'content-type': 'application/json' } }) });
    await assert.rejects(client.embeddings.create({ model: 'm', input: 'a' }), (error: unknown) => {
      assert.ok(error instanceof OpenAI.RateLimitError);
      assert.match(error.message, /Too many requests/);
      return true;
    });
  });

  test('embeddings are not streamed', () => {
    assert.throws(() => embeddingsToBedrock.stream(), TranslationError);
  });
});
