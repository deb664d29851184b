// The Google mock against Google's own clients, as installed and unchanged: the Gen AI SDK
// (`@google/genai`) on the Gemini API with an API key and on Vertex AI with Google Cloud
// credentials, and the auth library (`google-auth-library`) on each token source (a service
// account key, the metadata server, workload identity federation); Claude on Vertex through
// Anthropic's SDK. What the clients send is checked as the mock recorded it (path, query,
// credentials, body), and what the mock answers must parse into the clients' own results and error
// classes, so the mock cannot drift into a dialect the real clients would not speak.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import Anthropic from '@anthropic-ai/sdk';
import { ApiError, BlockedReason, FinishReason, GoogleGenAI, type GenerateContentResponse } from '@google/genai';
import { GoogleAuth } from 'google-auth-library';
import {
  ACCESS_TOKEN_TYPE, CLOUD_PLATFORM_SCOPE, DEFAULT_GOOGLE_MODELS, GOOGLE_TOKEN_AUDIENCE, JWT_BEARER_GRANT, TOKEN_EXCHANGE_GRANT,
  VERTEX_ANTHROPIC_VERSION, startMockGoogle, type GoogleRequest, type MockGoogle,
} from '../support/mock-google.ts';

const FLASH = 'gemini-2.5-flash';
const CLAUDE = 'claude-sonnet-4@20250514';

let mock: MockGoogle;
let scratch: string;

before(async () => {
  mock = await startMockGoogle();
  scratch = mkdtempSync(join(tmpdir(), 'sluice-google-mock-'));
});

after(async () => {
  await mock?.close();
  if (scratch !== undefined) rmSync(scratch, { recursive: true, force: true });
});

/** The only request recorded since the last reset. */
function only(): GoogleRequest {
  assert.equal(mock.requests.length, 1, mock.requests.map((r) => `${r.method} ${r.path}`).join(', '));
  return mock.requests[0]!;
}

/** The recorded requests to the model APIs (token and metadata requests left out). */
function modelRequests(): GoogleRequest[] {
  return mock.requests.filter((r) => r.path !== '/token' && r.path !== '/v1/token' && !r.path.startsWith('/computeMetadata'));
}

/** The SDK's ApiError with this status; its message is Google's error body, parsed. */
async function apiError(promise: Promise<unknown>, status: number): Promise<{ code: number; message: string; status: string; details?: Record<string, unknown>[] }> {
  let caught: unknown;
  await assert.rejects(promise, (error: unknown) => { caught = error; return true; });
  assert.ok(caught instanceof ApiError, `got ${String(caught)}`);
  assert.equal(caught.status, status);
  return (JSON.parse(caught.message) as { error: { code: number; message: string; status: string; details?: Record<string, unknown>[] } }).error;
}

const trigger = (value: string) => ({ httpOptions: { headers: { 'x-mock-google': value } } });
const claims = (jwt: string): Record<string, unknown> => JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString()) as Record<string, unknown>;

/** Runs `fn` with these environment variables (undefined: unset), then restores them. */
async function withEnv(vars: Record<string, string | undefined>, fn: () => Promise<void>): Promise<void> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const apply = (values: Record<string, string | undefined>): void => {
    for (const [k, v] of Object.entries(values)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  apply(vars);
  try {
    await fn();
  } finally {
    apply(saved);
  }
}

describe('the Gemini API with an API key', () => {
  let ai: GoogleGenAI;
  before(() => { ai = new GoogleGenAI({ apiKey: mock.apiKey, httpOptions: { baseUrl: mock.url } }); });

  test('generateContent: the echo, candidate, usage, model version and response id; the key in x-goog-api-key', async () => {
    mock.reset();
    const response = await ai.models.generateContent({ model: FLASH, contents: 'ping' });
    assert.equal(response.text, 'Gemini says: ping');
    const candidate = response.candidates?.[0];
    assert.equal(candidate?.content?.role, 'model');
    assert.equal(candidate?.finishReason, FinishReason.STOP);
    assert.equal(candidate?.index, 0);
    assert.equal(candidate?.safetyRatings?.length, 4);
    assert.equal(response.usageMetadata?.promptTokenCount, 9);
    assert.equal(response.usageMetadata?.candidatesTokenCount, 4);
    assert.equal(response.usageMetadata?.totalTokenCount, 13);
    assert.equal(response.usageMetadata?.cachedContentTokenCount, undefined);
    assert.equal(response.modelVersion, FLASH);
    assert.match(response.responseId ?? '', /^[\w-]{20,}$/);
    const seen = only();
    assert.equal(seen.method, 'POST');
    assert.equal(seen.path, `/v1/models/${FLASH}:generateContent`);
    assert.deepEqual(seen.query, {});
    assert.equal(seen.headers['x-goog-api-key'], mock.apiKey);
    assert.equal(seen.headers.authorization, undefined);
    assert.deepEqual(seen.body, { contents: [{ parts: [{ text: 'ping' }], role: 'user' }] });
  });

  test('generateContent under v1beta; cached and thought tokens in the usage', async () => {
    const other = await startMockGoogle({ usage: { prompt: 20, candidates: 5, cached: 8, thoughts: 3 } });
    try {
      const beta = new GoogleGenAI({ apiKey: other.apiKey, apiVersion: 'v1beta', httpOptions: { baseUrl: other.url } });
      const response = await beta.models.generateContent({ model: 'gemini-2.5-pro', contents: 'think', config: { thinkingConfig: { thinkingBudget: 128 } } });
      assert.equal(response.usageMetadata?.promptTokenCount, 20);
      assert.equal(response.usageMetadata?.cachedContentTokenCount, 8);
      assert.equal(response.usageMetadata?.thoughtsTokenCount, 3);
      assert.equal(response.usageMetadata?.totalTokenCount, 28);
      assert.equal(other.requests[0]!.path, '/v1beta/models/gemini-2.5-pro:generateContent');
      assert.deepEqual((other.requests[0]!.body as { generationConfig: unknown }).generationConfig, { thinkingConfig: { thinkingBudget: 128 } });
    } finally {
      await other.close();
    }
  });

  test('a function call (GEMINI_TOOL): functionCalls, finishReason STOP; the tools sent as declared', async () => {
    mock.reset();
    const response = await ai.models.generateContent({
      model: FLASH, contents: 'the weather? GEMINI_TOOL',
      config: { tools: [{ functionDeclarations: [{ name: 'get_weather', description: 'Weather of a city', parametersJsonSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }] }] },
    });
    assert.deepEqual(response.functionCalls, [{ name: 'get_weather', args: { city: 'Paris' } }]);
    assert.equal(response.candidates?.[0]?.finishReason, FinishReason.STOP);
    assert.equal(response.usageMetadata?.totalTokenCount, 13);
    const tools = (only().body as { tools: { functionDeclarations: { name: string }[] }[] }).tools;
    assert.equal(tools[0]!.functionDeclarations[0]!.name, 'get_weather');
  });

  test('generateContentStream: SSE chunks, usage on every chunk, the last with STOP and the full usage', async () => {
    mock.reset();
    const chunks: GenerateContentResponse[] = [];
    for await (const chunk of await ai.models.generateContentStream({ model: FLASH, contents: 'stream please' })) chunks.push(chunk);
    assert.equal(chunks.length, 3);
    assert.equal(chunks.map((c) => c.text).join(''), 'Gemini says: stream please');
    for (const chunk of chunks) {
      assert.equal(chunk.usageMetadata?.promptTokenCount, 9);
      assert.equal(chunk.responseId, chunks[0]!.responseId);
    }
    assert.equal(chunks[0]!.candidates?.[0]?.finishReason, undefined);
    assert.equal(chunks[0]!.usageMetadata?.candidatesTokenCount, undefined);
    const last = chunks.at(-1)!;
    assert.equal(last.candidates?.[0]?.finishReason, FinishReason.STOP);
    assert.equal(last.usageMetadata?.candidatesTokenCount, 4);
    assert.equal(last.usageMetadata?.totalTokenCount, 13);
    const seen = only();
    assert.equal(seen.path, `/v1/models/${FLASH}:streamGenerateContent`);
    assert.deepEqual(seen.query, { alt: 'sse' });
  });

  test('the stream on the wire: `data:` events ended by CRLF CRLF; without alt=sse, one JSON array', async () => {
    const post = (query: string) => fetch(`${mock.url}/v1beta/models/${FLASH}:streamGenerateContent${query}`, {
      method: 'POST', headers: { 'x-goog-api-key': mock.apiKey, 'content-type': 'application/json' }, body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'wire' }] }] }),
    });
    const sse = await post('?alt=sse');
    assert.equal(sse.headers.get('content-type'), 'text/event-stream');
    const events = (await sse.text()).split('\r\n\r\n');
    assert.equal(events.pop(), '');
    assert.equal(events.length, 3);
    for (const event of events) assert.match(event, /^data: \{"candidates":/);
    const array = await post('');
    assert.match(array.headers.get('content-type') ?? '', /^application\/json/);
    const parsed = JSON.parse(await array.text()) as { candidates: { content: { parts: { text: string }[] } }[] }[];
    assert.equal(parsed.length, 3);
    assert.equal(parsed.map((p) => p.candidates[0]!.content.parts[0]!.text).join(''), 'Gemini says: wire');
  });

  test('countTokens, embedContent (batchEmbedContents, outputDimensionality) and embedContent itself', async () => {
    mock.reset();
    const count = await ai.models.countTokens({ model: FLASH, contents: 'count me' });
    assert.equal(count.totalTokens, 9);
    assert.equal(only().path, `/v1/models/${FLASH}:countTokens`);
    mock.reset();
    const embedded = await ai.models.embedContent({ model: 'gemini-embedding-001', contents: ['one', 'two'], config: { outputDimensionality: 8 } });
    assert.equal(embedded.embeddings?.length, 2);
    assert.equal(embedded.embeddings?.[0]?.values?.length, 8);
    assert.notDeepEqual(embedded.embeddings?.[0]?.values, embedded.embeddings?.[1]?.values);
    const seen = only();
    assert.equal(seen.path, '/v1/models/gemini-embedding-001:batchEmbedContents');
    assert.equal((seen.body as { requests: { model: string }[] }).requests[0]!.model, 'models/gemini-embedding-001');
    const single = await fetch(`${mock.url}/v1beta/models/gemini-embedding-001:embedContent?key=${mock.apiKey}`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ content: { parts: [{ text: 'one' }] } }),
    });
    const vector = ((await single.json()) as { embedding: { values: number[] } }).embedding.values;
    assert.equal(vector.length, 3072);
  });

  test('models.list: paged, with names, display names and supported methods', async () => {
    mock.reset();
    const models: { name?: string; displayName?: string; supportedActions?: string[] }[] = [];
    for await (const model of await ai.models.list({ config: { pageSize: 2 } })) models.push(model);
    assert.deepEqual(models.map((m) => m.name), DEFAULT_GOOGLE_MODELS.map((m) => `models/${m}`));
    assert.equal(models[0]!.displayName, 'Gemini 2.5 Flash');
    assert.ok(models[0]!.supportedActions?.includes('generateContent'));
    assert.ok(models.find((m) => m.name === 'models/gemini-embedding-001')?.supportedActions?.includes('embedContent'));
    assert.equal(mock.requests.length, 3);
    assert.ok(mock.requests.every((r) => r.method === 'GET' && r.path === '/v1/models'));
    assert.deepEqual(mock.requests[0]!.query, { pageSize: '2' });
    assert.ok(mock.requests[1]!.query.pageToken);
  });

  test('errors as ApiError: 429 with RetryInfo, 500, 503, context length, unknown model, an unknown field', async () => {
    mock.reset();
    const limited = await apiError(ai.models.generateContent({ model: FLASH, contents: 'x', config: trigger('rate_limited') }), 429);
    assert.equal(limited.status, 'RESOURCE_EXHAUSTED');
    assert.match(limited.message, /^You exceeded your current quota/);
    assert.deepEqual(limited.details?.find((d) => d['@type'] === 'type.googleapis.com/google.rpc.RetryInfo'), { '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '13s' });
    assert.equal(only().headers['x-mock-google'], 'rate_limited'); // no retries: exactly one attempt
    assert.equal((await apiError(ai.models.generateContent({ model: FLASH, contents: 'x', config: trigger('server_error') }), 500)).status, 'INTERNAL');
    mock.fail('unavailable');
    try {
      const unavailable = await apiError(ai.models.generateContentStream({ model: FLASH, contents: 'x' }), 503);
      assert.equal(unavailable.message, 'The model is overloaded. Please try again later.');
    } finally {
      mock.fail(undefined);
    }
    const tooLong = await apiError(ai.models.generateContent({ model: FLASH, contents: 'x', config: trigger('context_length') }), 400);
    assert.equal(tooLong.status, 'INVALID_ARGUMENT');
    assert.match(tooLong.message, /^The input token count \(\d+\) exceeds the maximum number of tokens allowed \(1048576\)\.$/);
    const unknown = await apiError(ai.models.generateContent({ model: 'gemini-0.1-nope', contents: 'x' }), 404);
    assert.equal(unknown.status, 'NOT_FOUND');
    assert.match(unknown.message, /^models\/gemini-0\.1-nope is not found for API version v1, or is not supported for generateContent\./);
    const extra = await fetch(`${mock.url}/v1beta/models/${FLASH}:generateContent`, {
      method: 'POST', headers: { 'x-goog-api-key': mock.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'x' }] }], messages: [] }),
    });
    assert.equal(extra.status, 400);
    assert.equal(((await extra.json()) as { error: { message: string } }).error.message, 'Invalid JSON payload received. Unknown name "messages": Cannot find field.');
    const role = await fetch(`${mock.url}/v1beta/models/${FLASH}:generateContent`, {
      method: 'POST', headers: { 'x-goog-api-key': mock.apiKey, 'content-type': 'application/json' }, body: JSON.stringify({ contents: [{ role: 'assistant', parts: [{ text: 'x' }] }] }),
    });
    assert.equal(((await role.json()) as { error: { message: string } }).error.message, 'Please use a valid role: user, model.');
  });

  test('a wrong key: 400 INVALID_ARGUMENT with API_KEY_INVALID; no key at all: 403 PERMISSION_DENIED', async () => {
    const wrong = new GoogleGenAI({ apiKey: 'AIzaSy-not-the-key', httpOptions: { baseUrl: mock.url } });
    const invalid = await apiError(wrong.models.generateContent({ model: FLASH, contents: 'x' }), 400);
    assert.equal(invalid.status, 'INVALID_ARGUMENT');
    assert.equal(invalid.message, 'API key not valid. Please pass a valid API key.');
    assert.equal(invalid.details?.[0]?.reason, 'API_KEY_INVALID');
    assert.deepEqual(invalid.details?.[0]?.metadata, { service: 'generativelanguage.googleapis.com' });
    const bare = await fetch(`${mock.url}/v1beta/models/${FLASH}:generateContent`, { method: 'POST', body: JSON.stringify({ contents: [{ parts: [{ text: 'x' }] }] }) });
    assert.equal(bare.status, 403);
    assert.equal(((await bare.json()) as { error: { status: string } }).error.status, 'PERMISSION_DENIED');
  });

  test('safety: a blocked prompt (promptFeedback, no candidates) and a candidate stopped for SAFETY', async () => {
    const blocked = await ai.models.generateContent({ model: FLASH, contents: 'GEMINI_BLOCK' });
    assert.equal(blocked.promptFeedback?.blockReason, BlockedReason.SAFETY);
    assert.equal(blocked.candidates, undefined);
    assert.equal(blocked.text, undefined);
    assert.equal(blocked.usageMetadata?.promptTokenCount, 9);
    const stopped = await ai.models.generateContent({ model: FLASH, contents: 'GEMINI_SAFETY' });
    assert.equal(stopped.candidates?.[0]?.finishReason, FinishReason.SAFETY);
    assert.equal(stopped.candidates?.[0]?.content, undefined);
    assert.equal(stopped.text, undefined);
    assert.ok(stopped.candidates?.[0]?.safetyRatings?.some((r) => r.blocked === true));
    const chunks: GenerateContentResponse[] = [];
    for await (const chunk of await ai.models.generateContentStream({ model: FLASH, contents: 'GEMINI_BLOCK' })) chunks.push(chunk);
    assert.equal(chunks.length, 1);
    assert.equal(chunks[0]!.promptFeedback?.blockReason, BlockedReason.SAFETY);
  });

  test('behaviours: slow_first and slow delay, cut breaks the stream after one chunk, hold streams until the client goes', async () => {
    const post = (behaviour: string, signal?: AbortSignal) => fetch(`${mock.url}/v1beta/models/${FLASH}:streamGenerateContent?alt=sse`, {
      method: 'POST', signal, headers: { 'x-goog-api-key': mock.apiKey, 'x-mock-google': behaviour, 'content-type': 'application/json' },
      body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'behave' }] }] }),
    });
    let started = Date.now();
    const slowFirst = await post('slow_first:150');
    assert.ok(Date.now() - started >= 140, 'slow_first holds the answer back');
    await slowFirst.text();
    started = Date.now();
    assert.equal((await (await post('slow:60')).text()).split('\r\n\r\n').length, 4);
    assert.ok(Date.now() - started >= 110, 'slow spaces the chunks');

    mock.reset();
    const cut = await post('cut');
    const reader = cut.body!.getReader();
    let text = '';
    await assert.rejects(async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        text += Buffer.from(value).toString();
      }
    });
    assert.equal(text.split('\r\n\r\n').length, 2, `one chunk: ${text}`);
    assert.equal(only().aborted, false); // the mock cut it, the client did not leave

    mock.reset();
    const controller = new AbortController();
    const held = await post('hold', controller.signal);
    const heldReader = held.body!.getReader();
    let heldText = '';
    while (heldText.split('\r\n\r\n').length < 4) heldText += Buffer.from((await heldReader.read()).value ?? []).toString();
    assert.doesNotMatch(heldText, /finishReason/);
    controller.abort();
    await delay(50);
    assert.equal(only().aborted, true);
  });
});

describe('Vertex AI with a service account key', () => {
  /** The SDK on Vertex with the mock's key file; the auth library's fetch reaches the mock for Google's hosts. */
  const vertex = (project = mock.project, location = mock.location, credentials: object = mock.serviceAccountKey()) => new GoogleGenAI({
    vertexai: true, project, location, httpOptions: { baseUrl: mock.url },
    googleAuthOptions: { credentials, clientOptions: { transporterOptions: { fetchImplementation: mock.googleFetch } } },
  });
  const modelPath = (model: string, method: string) => `/v1beta1/projects/${mock.project}/locations/${mock.location}/publishers/google/models/${model}:${method}`;

  test('generateContent with a token the auth library fetched from the token endpoint (JWT bearer, RS256)', async () => {
    mock.reset();
    const ai = vertex();
    const response = await ai.models.generateContent({ model: FLASH, contents: 'hello vertex' });
    assert.equal(response.text, 'Gemini says: hello vertex');
    assert.equal(response.usageMetadata?.totalTokenCount, 13);
    assert.ok(response.createTime !== undefined);
    assert.deepEqual(mock.issued, { serviceAccount: 1, externalAccount: 0, metadata: 0 });
    const [tokenRequest, call] = mock.requests;
    assert.equal(tokenRequest!.path, '/token');
    const form = tokenRequest!.body as { grant_type: string; assertion: string };
    assert.equal(form.grant_type, JWT_BEARER_GRANT);
    const assertion = claims(form.assertion);
    assert.equal(assertion.iss, mock.clientEmail);
    assert.equal(assertion.aud, GOOGLE_TOKEN_AUDIENCE);
    assert.equal(assertion.scope, CLOUD_PLATFORM_SCOPE);
    assert.equal(call!.path, modelPath(FLASH, 'generateContent'));
    assert.equal(call!.headers.authorization, `Bearer ${mock.tokens[0]!.token}`);
    assert.equal(call!.headers['x-goog-api-key'], undefined);
    assert.equal(mock.requests.length, 2);

    // The token is cached: the stream, countTokens and embeddings need no other.
    mock.reset();
    const chunks: GenerateContentResponse[] = [];
    for await (const chunk of await ai.models.generateContentStream({ model: FLASH, contents: 'stream on vertex' })) chunks.push(chunk);
    assert.equal(chunks.map((c) => c.text).join(''), 'Gemini says: stream on vertex');
    assert.equal(chunks.at(-1)!.usageMetadata?.candidatesTokenCount, 4);
    assert.equal(only().path, modelPath(FLASH, 'streamGenerateContent'));
    assert.deepEqual(only().query, { alt: 'sse' });
    mock.reset();
    assert.equal((await ai.models.countTokens({ model: FLASH, contents: 'count on vertex' })).totalTokens, 9);
    assert.equal(only().path, modelPath(FLASH, 'countTokens'));
    mock.reset();
    const embedded = await ai.models.embedContent({ model: 'text-embedding-005', contents: ['vertex one', 'vertex two'], config: { taskType: 'RETRIEVAL_DOCUMENT', outputDimensionality: 16 } });
    assert.equal(embedded.embeddings?.length, 2);
    assert.equal(embedded.embeddings?.[0]?.values?.length, 16);
    assert.equal(embedded.embeddings?.[0]?.statistics?.tokenCount, 3);
    assert.equal(embedded.embeddings?.[0]?.statistics?.truncated, false);
    assert.equal(only().path, modelPath('text-embedding-005', 'predict'));
    assert.deepEqual(only().body, {
      instances: [{ content: 'vertex one', task_type: 'RETRIEVAL_DOCUMENT' }, { content: 'vertex two', task_type: 'RETRIEVAL_DOCUMENT' }], parameters: { outputDimensionality: 16 },
    });
    assert.equal(mock.issued.serviceAccount, 0);
  });

  test('an expired token: 401 UNAUTHENTICATED; an API key, none, or an unknown token: 401 as well', async () => {
    const ai = vertex();
    await ai.models.generateContent({ model: FLASH, contents: 'fresh' });
    mock.expireTokens();
    const expired = await apiError(ai.models.generateContent({ model: FLASH, contents: 'stale' }), 401);
    assert.equal(expired.status, 'UNAUTHENTICATED');
    assert.equal(expired.details?.[0]?.reason, 'ACCESS_TOKEN_EXPIRED');
    const url = `${mock.url}${modelPath(FLASH, 'generateContent')}`;
    const body = JSON.stringify({ contents: [{ role: 'user', parts: [{ text: 'x' }] }] });
    const withKey = await fetch(url, { method: 'POST', headers: { 'x-goog-api-key': mock.apiKey }, body });
    assert.equal(withKey.status, 401);
    assert.match(((await withKey.json()) as { error: { message: string } }).error.message, /^API keys are not supported by this API/);
    const unknown = await fetch(url, { method: 'POST', headers: { authorization: 'Bearer ya29.made-up' }, body });
    assert.equal(unknown.status, 401);
    const none = await fetch(url, { method: 'POST', body });
    assert.equal(((await none.json()) as { error: { details: { reason: string }[] } }).error.details[0]!.reason, 'CREDENTIALS_MISSING');
  });

  test('another project: 403 PERMISSION_DENIED; another location: 404; throttled: 429 RESOURCE_EXHAUSTED', async () => {
    const denied = await apiError(vertex('someone-elses-project').models.generateContent({ model: FLASH, contents: 'x' }), 403);
    assert.equal(denied.status, 'PERMISSION_DENIED');
    assert.match(denied.message, /^Permission 'aiplatform\.endpoints\.predict' denied on resource '\/\/aiplatform\.googleapis\.com\/projects\/someone-elses-project\//);
    const elsewhere = await apiError(vertex(mock.project, 'europe-west4').models.generateContent({ model: FLASH, contents: 'x' }), 404);
    assert.equal(elsewhere.status, 'NOT_FOUND');
    const byNumber = await vertex(mock.projectNumber).models.generateContent({ model: FLASH, contents: 'by number' });
    assert.equal(byNumber.text, 'Gemini says: by number');
    const limited = await apiError(vertex().models.generateContent({ model: FLASH, contents: 'x', config: trigger('rate_limited') }), 429);
    assert.equal(limited.status, 'RESOURCE_EXHAUSTED');
    assert.match(limited.message, /^Resource exhausted\. Please try again later\./);
    const tooLong = await apiError(vertex().models.generateContent({ model: FLASH, contents: 'x', config: trigger('context_length') }), 400);
    assert.match(tooLong.message, /^Unable to submit request because the input token count is \d+ but model only supports up to 1048576/);
  });

  test('a key file signed by another key: the token endpoint refuses the assertion (invalid_grant), no token issued', async () => {
    mock.reset();
    const stranger = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const forged = { ...mock.serviceAccountKey(), private_key: stranger };
    await assert.rejects(vertex(mock.project, mock.location, forged).models.generateContent({ model: FLASH, contents: 'x' }), /invalid_grant: Invalid JWT Signature\./);
    assert.equal(mock.issued.serviceAccount, 0);
    assert.equal(modelRequests().length, 0);
  });
});

describe('the metadata server and workload identity federation', () => {
  /** Application default credentials find nothing but what the test points them at. */
  const adcOff = (): Record<string, string | undefined> => ({
    GOOGLE_APPLICATION_CREDENTIALS: undefined, google_application_credentials: undefined, CLOUDSDK_CONFIG: scratch,
    GCLOUD_PROJECT: undefined, GOOGLE_CLOUD_PROJECT: undefined, gcloud_project: undefined, google_cloud_project: undefined,
    GOOGLE_CLOUD_QUOTA_PROJECT: undefined, METADATA_SERVER_DETECTION: undefined, GCE_METADATA_IP: undefined,
  });

  test('GoogleAuth on GCE_METADATA_HOST: the probe, the token, the project; the SDK on application default credentials', async () => {
    await withEnv({ ...adcOff(), GCE_METADATA_HOST: mock.metadataHost }, async () => {
      mock.reset();
      const auth = new GoogleAuth({ scopes: CLOUD_PLATFORM_SCOPE });
      const token = await auth.getAccessToken();
      assert.equal(mock.issued.metadata, 1);
      assert.equal(token, mock.tokens[0]!.token);
      assert.equal(await auth.getProjectId(), mock.project);
      const probe = mock.requests.find((r) => r.path === '/computeMetadata/v1/instance');
      assert.equal(probe?.headers['metadata-flavor'], 'Google');
      const tokenRequest = mock.requests.find((r) => r.path === '/computeMetadata/v1/instance/service-accounts/default/token');
      assert.deepEqual(tokenRequest?.query, { scopes: CLOUD_PLATFORM_SCOPE });

      mock.reset();
      const ai = new GoogleGenAI({ vertexai: true, project: mock.project, location: mock.location, httpOptions: { baseUrl: mock.url } });
      const response = await ai.models.generateContent({ model: FLASH, contents: 'from a VM' });
      assert.equal(response.text, 'Gemini says: from a VM');
      assert.equal(mock.issued.metadata, 1);
      assert.equal(modelRequests()[0]!.headers.authorization, `Bearer ${mock.tokens[0]!.token}`);
    });
    const headerless = await fetch(`${mock.url}/computeMetadata/v1/instance/service-accounts/default/token`);
    assert.equal(headerless.status, 403);
    const proxied = await fetch(`${mock.url}/computeMetadata/v1/project/project-id`, { headers: { 'metadata-flavor': 'Google', 'x-forwarded-for': '10.0.0.1' } });
    assert.equal(proxied.status, 403);
  });

  test('an external account: the STS token exchange with the subject token of a file, then Vertex with that token', async () => {
    const file = join(scratch, 'oidc-token');
    writeFileSync(file, mock.subjectToken);
    mock.reset();
    const auth = new GoogleAuth({ credentials: mock.externalAccountConfig(file), scopes: CLOUD_PLATFORM_SCOPE });
    const token = await auth.getAccessToken();
    assert.equal(mock.issued.externalAccount, 1);
    assert.equal(token, mock.tokens[0]!.token);
    const exchange = only();
    assert.equal(exchange.path, '/v1/token');
    assert.deepEqual({ ...(exchange.body as Record<string, string>) }, {
      grant_type: TOKEN_EXCHANGE_GRANT, audience: mock.audience, scope: CLOUD_PLATFORM_SCOPE, requested_token_type: ACCESS_TOKEN_TYPE,
      subject_token: mock.subjectToken, subject_token_type: 'urn:ietf:params:oauth:token-type:jwt',
    });

    mock.reset();
    const ai = new GoogleGenAI({ vertexai: true, project: mock.project, location: mock.location, httpOptions: { baseUrl: mock.url }, googleAuthOptions: { credentials: mock.externalAccountConfig(file) } });
    assert.equal((await ai.models.generateContent({ model: FLASH, contents: 'federated' })).text, 'Gemini says: federated');
    assert.equal(mock.tokens[0]!.source, 'externalAccount');
    assert.equal(modelRequests()[0]!.headers.authorization, `Bearer ${mock.tokens[0]!.token}`);

    writeFileSync(file, 'not-the-subject-token');
    await assert.rejects(new GoogleAuth({ credentials: mock.externalAccountConfig(file), scopes: CLOUD_PLATFORM_SCOPE }).getAccessToken(), /invalid_grant/);
  });
});

describe("Anthropic's models on Vertex AI", () => {
  let claude: Anthropic;
  let auth: GoogleAuth;
  /** The service account's token, as the auth library holds it. */
  const bearer = async (): Promise<string> => `Bearer ${(await auth.getAccessToken()) ?? ''}`;
  const claudePath = (method: string) => `/v1/projects/${mock.project}/locations/${mock.location}/publishers/anthropic/models/${CLAUDE}:${method}`;

  before(() => {
    auth = new GoogleAuth({ credentials: mock.serviceAccountKey(), scopes: CLOUD_PLATFORM_SCOPE, clientOptions: { transporterOptions: { fetchImplementation: mock.googleFetch } } });
    // Anthropic's SDK with what its Vertex client (@anthropic-ai/vertex-sdk, not installed) does to a
    // Messages request: the path becomes `.../publishers/anthropic/models/{model}:rawPredict`
    // (`streamRawPredict` when streaming, `count-tokens:rawPredict` to count), `model` leaves the
    // body, `anthropic_version` joins it, and a Google access token is the credential.
    claude = new Anthropic({
      baseURL: `${mock.url}/v1`, apiKey: 'unused', maxRetries: 0,
      fetch: async (input: string | URL | Request, init?: RequestInit) => {
        const url = new URL(input instanceof Request ? input.url : String(input));
        const headers = new Headers(init?.headers);
        headers.delete('x-api-key');
        headers.set('authorization', await bearer());
        let body = init?.body;
        const canonical = ['/v1/messages/count_tokens', '/v1/messages'].find((p) => url.pathname.endsWith(p));
        if (canonical !== undefined && typeof body === 'string') {
          const json = JSON.parse(body) as Record<string, unknown>;
          json.anthropic_version ??= VERTEX_ANTHROPIC_VERSION;
          const models = `${url.pathname.slice(0, -canonical.length)}/projects/${mock.project}/locations/${mock.location}/publishers/anthropic/models`;
          if (canonical === '/v1/messages') {
            url.pathname = `${models}/${String(json.model)}:${json.stream === true ? 'streamRawPredict' : 'rawPredict'}`;
            delete json.model;
          } else {
            url.pathname = `${models}/count-tokens:rawPredict`;
          }
          url.searchParams.delete('beta');
          body = JSON.stringify(json);
        }
        return fetch(url, { ...init, headers, body });
      },
    });
  });

  const ask = (content: string) => ({ model: CLAUDE, max_tokens: 256, messages: [{ role: 'user' as const, content }] });

  test('rawPredict: the Messages answer; the body without model, with anthropic_version; a Google token', async () => {
    mock.reset();
    const message = await claude.messages.create(ask('hello claude'));
    assert.match(message.id, /^msg_vrtx_\w{24}$/);
    assert.equal(message.role, 'assistant');
    assert.deepEqual(message.content, [{ type: 'text', text: 'Claude says: hello claude' }]);
    assert.equal(message.stop_reason, 'end_turn');
    assert.equal(message.usage.input_tokens, 9);
    assert.equal(message.usage.output_tokens, 4);
    const call = modelRequests()[0]!;
    assert.equal(call.path, claudePath('rawPredict'));
    assert.deepEqual(call.body, { max_tokens: 256, messages: [{ role: 'user', content: 'hello claude' }], anthropic_version: VERTEX_ANTHROPIC_VERSION });
    assert.equal(call.headers.authorization, await bearer());
    assert.equal(mock.tokens.find((t) => `Bearer ${t.token}` === call.headers.authorization)?.source, 'serviceAccount');
  });

  test("streamRawPredict: Anthropic's event sequence, parsed by the SDK's own stream into the final message", async () => {
    mock.reset();
    const stream = claude.messages.stream(ask('stream claude'));
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    const final = await stream.finalMessage();
    assert.deepEqual(types, [
      'message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop',
    ]);
    assert.equal(final.content.length, 1);
    assert.equal(final.content[0]?.type === 'text' ? final.content[0].text : undefined, 'Claude says: stream claude');
    assert.equal(final.stop_reason, 'end_turn');
    assert.equal(final.usage.output_tokens, 4);
    assert.equal(modelRequests()[0]!.path, claudePath('streamRawPredict'));
    const raw = await fetch(`${mock.url}${claudePath('streamRawPredict')}`, {
      method: 'POST', headers: { authorization: await bearer(), 'content-type': 'application/json' },
      body: JSON.stringify({ anthropic_version: VERTEX_ANTHROPIC_VERSION, max_tokens: 16, stream: true, messages: [{ role: 'user', content: 'raw' }] }),
    });
    const events = (await raw.text()).split('\n\n').filter(Boolean).map((e) => e.split('\n')[0]);
    assert.deepEqual(events.slice(0, 3), ['event: message_start', 'event: content_block_start', 'event: ping']);
    assert.equal(events.at(-1), 'event: message_stop');
  });

  test('a tool call (GEMINI_TOOL) streamed as input_json_delta; count-tokens:rawPredict', async () => {
    const stream = claude.messages.stream({ ...ask('weather? GEMINI_TOOL'), tools: [{ name: 'get_weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }] });
    const final = await stream.finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    const block = final.content[0];
    assert.equal(block?.type, 'tool_use');
    assert.deepEqual(block?.type === 'tool_use' ? block.input : undefined, { city: 'Paris' });
    mock.reset();
    const counted = await claude.messages.countTokens({ model: CLAUDE, messages: [{ role: 'user', content: 'count' }] });
    assert.equal(counted.input_tokens, 9);
    assert.equal(modelRequests()[0]!.path, `/v1/projects/${mock.project}/locations/${mock.location}/publishers/anthropic/models/count-tokens:rawPredict`);
  });

  test("errors: Vertex's 429 quota error, Anthropic's 529 overloaded and 400 for a body Vertex refuses", async () => {
    await assert.rejects(claude.messages.create(ask('x'), { headers: { 'x-mock-google': 'rate_limited' } }), (error: unknown) => {
      assert.ok(error instanceof Anthropic.RateLimitError, `got ${String(error)}`);
      assert.match(error.message, /Quota exceeded for aiplatform\.googleapis\.com\/online_prediction_requests_per_base_model/);
      return true;
    });
    await assert.rejects(claude.messages.create(ask('x'), { headers: { 'x-mock-google': 'unavailable' } }), (error: unknown) => {
      assert.ok(error instanceof Anthropic.APIError && error.status === 529, `got ${String(error)}`);
      return true;
    });
    const post = async (body: unknown) => fetch(`${mock.url}${claudePath('rawPredict')}`, {
      method: 'POST', headers: { authorization: await bearer(), 'content-type': 'application/json' }, body: JSON.stringify(body),
    });
    const withModel = await post({ ...ask('x'), anthropic_version: VERTEX_ANTHROPIC_VERSION });
    assert.equal(withModel.status, 400);
    assert.deepEqual(await withModel.json(), { type: 'error', error: { type: 'invalid_request_error', message: 'model: Extra inputs are not permitted' } });
    const noVersion = await post({ max_tokens: 8, messages: [{ role: 'user', content: 'x' }] });
    assert.equal(((await noVersion.json()) as { error: { message: string } }).error.message, 'anthropic_version: Field required');
  });
});
