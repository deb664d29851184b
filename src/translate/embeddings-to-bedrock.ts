// OpenAI embeddings in front, an embedding model on Amazon Bedrock behind: a `POST /v1/embeddings`
// body rewritten as the InvokeModel body of the upstream model's family, and its answer (or error)
// rewritten as OpenAI's. Each family has its own body:
//   - Amazon Titan Text Embeddings v2 (`amazon.titan-embed-text-v2:0`): {inputText, dimensions, normalize};
//   - Titan Text Embeddings v1 (`amazon.titan-embed-text-v1`): {inputText}, 1536 dimensions;
//   - Cohere Embed v3 (`cohere.embed-english-v3`, `cohere.embed-multilingual-v3`): {texts, input_type, embedding_types}, 1024 dimensions;
//   - Cohere Embed v4 (`cohere.embed-v4:0`): the same, and output_dimension.
// Titan embeds one text per call, Cohere up to 96. OpenAI's vectors are normalized, so Titan v2 is
// asked for normalized ones; Cohere's search_document is the input type for texts to be stored and
// compared, which is what an OpenAI client embeds without saying.
//
// The body also carries `model`, which InvokeModel takes in the path: the provider removes it.
import { TranslationError, type Json, type StreamTranslator, type TranslatedRequest, type Translator } from './types.ts';
import { count, given, isObject, describeValue } from './json.ts';
import { openaiTypeFor } from './errors.ts';
import { bedrockModelId } from './messages-to-converse.ts';
import { bedrockMessage } from './converse-to-messages-stream.ts';

type Family = 'titan-v2' | 'titan-v1' | 'cohere-v3' | 'cohere-v4';

/** Cohere's limit of texts per call. */
const COHERE_MAX_TEXTS = 96;

/** The vector sizes fixed by the model, where `dimensions` cannot choose another. */
const FIXED_DIMENSIONS: Partial<Record<Family, number>> = { 'titan-v1': 1536, 'cohere-v3': 1024 };

/** The request's keys OpenAI defines; anything else is refused as unknown. */
const HANDLED = new Set(['model', 'input', 'encoding_format', 'dimensions', 'user']);


function familyOf(model: string): Family {
  const id = bedrockModelId(model);
  if (id.startsWith('amazon.titan-embed-text-v2')) return 'titan-v2';
  // Titan Text Embeddings v1 was first published as amazon.titan-embed-g1-text-02.
  if (id.startsWith('amazon.titan-embed-text-v1') || id.startsWith('amazon.titan-embed-g1-text-02')) return 'titan-v1';
  if (id.startsWith('cohere.embed-english-v3') || id.startsWith('cohere.embed-multilingual-v3')) return 'cohere-v3';
  if (id.startsWith('cohere.embed-v4')) return 'cohere-v4';
  throw new TranslationError('model', `'${model.slice(0, 256)}' is not a Bedrock embedding model Sluice can call (Titan Text Embeddings v1 or v2, Cohere Embed v3 or v4)`);
}

/** `input` as texts: OpenAI's token arrays have no form in any Bedrock embedding body. */
function texts(input: unknown): string[] {
  if (typeof input === 'string') return [input];
  if (!Array.isArray(input)) throw new TranslationError('input', "'input' must be a string or an array of strings");
  if (input.length === 0) throw new TranslationError('input', "'input' must not be empty");
  if (input.every((item) => typeof item === 'string')) return input as string[];
  if (input.every((item) => typeof item === 'number' || Array.isArray(item))) {
    throw new TranslationError('input', 'token arrays cannot be embedded by a Bedrock model: send the text');
  }
  throw new TranslationError('input', "'input' must be a string or an array of strings");
}

function invokeModelBody(body: Json, upstreamModel: string): TranslatedRequest {
  const dropped: string[] = [];
  for (const key of Object.keys(body)) {
    if (given(body[key]) && !HANDLED.has(key)) throw new TranslationError(key, `unknown parameter '${key}'`);
  }
  const family = familyOf(upstreamModel);
  const inputs = texts(body.input);
  if (given(body.encoding_format) && body.encoding_format !== 'float' && body.encoding_format !== 'base64') {
    throw new TranslationError('encoding_format', "encoding_format must be 'float' or 'base64'");
  }
  // Who asked is OpenAI's record for abuse monitoring; InvokeModel has no such field.
  if (given(body.user)) dropped.push('user');
  const dimensions = body.dimensions;
  const fixed = FIXED_DIMENSIONS[family];
  if (given(dimensions) && fixed !== undefined && dimensions !== fixed) {
    // A vector of another size than asked would not fit where the client means to store it.
    throw new TranslationError('dimensions', `this model's vectors have ${fixed} dimensions; it cannot make ${describeValue(dimensions)}`);
  }

  const out: Json = { model: upstreamModel };
  if (family === 'titan-v2' || family === 'titan-v1') {
    if (inputs.length > 1) throw new TranslationError('input', `a Titan embedding model embeds one text per request, not ${inputs.length}`);
    out.inputText = inputs[0];
    if (family === 'titan-v2') {
      if (given(dimensions)) out.dimensions = dimensions;
      out.normalize = true;
    }
  } else {
    if (inputs.length > COHERE_MAX_TEXTS) throw new TranslationError('input', `a Cohere embedding model embeds at most ${COHERE_MAX_TEXTS} texts per request, not ${inputs.length}`);
    out.texts = inputs;
    out.input_type = 'search_document';
    out.embedding_types = ['float'];
    if (family === 'cohere-v4' && given(dimensions)) out.output_dimension = dimensions;
  }
  return { body: out, dropped };
}

/** A vector as OpenAI's base64: the float32 values, little-endian, one after another. */
function base64Vector(vector: number[]): string {
  const bytes = Buffer.alloc(vector.length * 4);
  vector.forEach((value, i) => bytes.writeFloatLE(value, i * 4));
  return bytes.toString('base64');
}

/** The vectors of a Titan answer (`embedding`) or a Cohere one (`embeddings`, by type when types were asked for). */
function vectorsOf(body: Json): unknown[] {
  if (Array.isArray(body.embedding)) return [body.embedding];
  if (isObject(body.embeddingsByType) && Array.isArray(body.embeddingsByType.float)) return [body.embeddingsByType.float];
  if (Array.isArray(body.embeddings)) return body.embeddings;
  if (isObject(body.embeddings) && Array.isArray(body.embeddings.float)) return body.embeddings.float;
  return [];
}

/** Titan counts the input's tokens; Cohere's answer on Bedrock gives no count (0), unless it carries Cohere's billed units. */
function inputTokens(body: Json): number {
  if (given(body.inputTextTokenCount)) return count(body.inputTextTokenCount);
  const meta = isObject(body.meta) ? body.meta : {};
  const billed = isObject(meta.billed_units) ? meta.billed_units : {};
  return count(billed.input_tokens);
}

function embeddingAnswer(body: Json, model: string, base64: boolean): Json {
  const data = vectorsOf(body).map((raw, index) => {
    const vector = Array.isArray(raw) ? raw.map((value: unknown) => (typeof value === 'number' ? value : 0)) : [];
    return { object: 'embedding', index, embedding: base64 ? base64Vector(vector) : vector };
  });
  const tokens = inputTokens(body);
  return { object: 'list', data, model, usage: { prompt_tokens: tokens, total_tokens: tokens } };
}

/** A Bedrock error answer as OpenAI's error body (Bedrock's exception name is in a header the translator does not get). */
function openaiErrorFromBedrock(status: number, body: unknown): Json {
  return { error: { message: bedrockMessage(body, `provider answered HTTP ${status}`), type: openaiTypeFor(status), code: null, param: null } };
}

/** InvokeModel answers embeddings whole: there is no stream to translate (and `stream` is refused as unknown). */
function noStream(): StreamTranslator {
  throw new TranslationError('stream', 'embeddings are not streamed');
}

/**
 * The embeddings → Bedrock translator for one request, made from the client's body: the answer
 * names the client's `model`, and its vectors are base64 when `encoding_format` is.
 */
export function bedrockEmbeddingsTranslation(request: Json): Translator {
  const model = typeof request.model === 'string' ? request.model : '';
  const base64 = request.encoding_format === 'base64';
  return {
    from: 'embeddings',
    to: 'bedrock_embeddings',
    request: invokeModelBody,
    response: (body) => embeddingAnswer(body, model, base64),
    error: openaiErrorFromBedrock,
    stream: noStream,
  };
}

/** The same for a request that asked for floats, whose answer names no model; a request is better served by `bedrockEmbeddingsTranslation`. */
export const embeddingsToBedrock: Translator = bedrockEmbeddingsTranslation({});
