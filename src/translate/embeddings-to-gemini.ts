// OpenAI embeddings in front, Google's Gemini behind: a `POST /v1/embeddings` body rewritten as a
// `batchEmbedContents` request (one request per input string), and Gemini's embeddings (or error)
// rewritten in OpenAI's shape. The body also carries `model`, which the provider reads (Gemini
// takes the model in the path) and removes before sending.
import { TranslationError, type Json, type TranslatedRequest, type Translator } from './types.ts';
import { given, isObject } from './json.ts';
import { openaiTypeFor } from './errors.ts';
import { googleError } from './gemini-to-messages-stream.ts';

/** The keys translated below; anything else is refused as unknown. */
const HANDLED = new Set(['model', 'input', 'dimensions', 'encoding_format']);

/** `models/<name>`, the form batchEmbedContents wants in each request (a name already in that form is kept). */
function modelPath(model: string): string {
  return model.startsWith('models/') ? model : `models/${model}`;
}

/** The input as strings: Gemini embeds text only, so token arrays (numbers) cannot be sent. */
function inputTexts(input: unknown): string[] {
  if (typeof input === 'string') return [input];
  if (!Array.isArray(input)) throw new TranslationError('input', "'input' must be a string or an array of strings");
  if (input.length === 0) throw new TranslationError('input', "'input' must not be empty");
  return input.map((item, i) => {
    if (typeof item === 'string') return item;
    if (typeof item === 'number' || Array.isArray(item)) throw new TranslationError('input', 'token arrays are not supported when routed to a Gemini model; send the text');
    throw new TranslationError(`input[${i}]`, 'each input must be a string');
  });
}

function embedRequest(body: Json, upstreamModel: string): TranslatedRequest {
  const dropped: string[] = [];
  for (const key of Object.keys(body)) {
    if (!given(body[key])) continue;
    // Gemini has no end-user field: the id only helped OpenAI watch for abuse.
    if (key === 'user') dropped.push('user');
    else if (!HANDLED.has(key)) throw new TranslationError(key, `unknown parameter '${key}'`);
  }
  if (given(body.encoding_format) && body.encoding_format !== 'float' && body.encoding_format !== 'base64') {
    throw new TranslationError('encoding_format', "encoding_format must be 'float' or 'base64'");
  }
  if (given(body.dimensions) && (typeof body.dimensions !== 'number' || !Number.isInteger(body.dimensions) || body.dimensions < 1)) {
    throw new TranslationError('dimensions', 'dimensions must be a positive integer');
  }
  const model = modelPath(upstreamModel);
  const requests = inputTexts(body.input).map((text) => {
    const request: Json = { model, content: { parts: [{ text }] } };
    if (given(body.dimensions)) request.outputDimensionality = body.dimensions;
    return request;
  });
  return { body: { model: upstreamModel, requests }, dropped };
}

/** A vector as OpenAI's base64 encoding: its float32 values, little-endian, in base64. */
export function base64Floats(values: readonly number[]): string {
  const bytes = Buffer.alloc(values.length * 4);
  values.forEach((value, i) => bytes.writeFloatLE(value, i * 4));
  return bytes.toString('base64');
}

/**
 * batchEmbedContents' `{embeddings: [{values}]}`, or Vertex's `:predict` answer (which its
 * provider asks for instead): `{predictions: [{embeddings: {values, statistics: {token_count}}}]}`.
 */
function embeddingsAnswer(body: Json, model: string, base64: boolean): Json {
  const predictions = Array.isArray(body.predictions) ? body.predictions : undefined;
  const embeddings = predictions?.map((p) => (isObject(p) ? p.embeddings : undefined)) ?? (Array.isArray(body.embeddings) ? body.embeddings : []);
  let tokens = 0;
  const data = embeddings.map((embedding, index) => {
    const raw = isObject(embedding) && Array.isArray(embedding.values) ? embedding.values : [];
    const values = raw.map((value) => (typeof value === 'number' ? value : 0));
    const count = isObject(embedding) && isObject(embedding.statistics) ? embedding.statistics.token_count : undefined;
    if (typeof count === 'number' && Number.isFinite(count) && count >= 0) tokens += count;
    return { object: 'embedding', index, embedding: base64 ? base64Floats(values) : values };
  });
  // batchEmbedContents reports no token counts (OpenAI's usage is required, so it is zeros); Vertex's do.
  return { object: 'list', data, model, usage: { prompt_tokens: tokens, total_tokens: tokens } };
}

/** A Google error answer as OpenAI's error body; Google's canonical code (`INVALID_ARGUMENT`…) is the `code`. */
function openaiErrorFromGoogle(status: number, body: unknown): Json {
  const { message, status: code } = googleError(status, body);
  return { error: { message, type: openaiTypeFor(status), code: code ?? null, param: null } };
}

/**
 * The embeddings → Gemini translator for one request. `client` is the client's request body: its
 * `encoding_format` decides how the answer's vectors are written. `model` names the answer
 * (Gemini's names none); the registry passes the upstream model.
 */
export function geminiEmbeddingsTranslation(client: Json, model: string): Translator {
  const base64 = client.encoding_format === 'base64';
  return {
    from: 'embeddings',
    to: 'embed_content',
    request: embedRequest,
    response: (body) => embeddingsAnswer(body, model, base64),
    error: (status, body) => openaiErrorFromGoogle(status, body),
    // Embeddings are never streamed; should an answer come as a stream all the same, nothing of it
    // is an embedding, and the caller ends it as cut.
    stream: () => ({ push: () => '', end: () => '', outcome: () => 'cut' }),
  };
}
