// The Azure OpenAI mock against the official `openai` package, as installed and unchanged: its
// `AzureOpenAI` client (deployments API, api-version, `api-key`, Entra ID tokens) and its `OpenAI`
// client on the v1 API. What the SDK sends is checked as the mock recorded it (path, api-version,
// credentials), and what the mock answers must parse into the SDK's own results and error classes,
// so the mock cannot drift into a dialect the real clients would not speak.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { AzureOpenAI } from 'openai';
import { startMockAzureOpenAI, type AzureRequest, type MockAzureOpenAI } from '../support/mock-azure-openai.ts';

const API_VERSION = '2024-10-21';
const RESPONSES_API_VERSION = '2025-04-01-preview';
const CHAT = 'gpt-4o-mini';
const EMBED = 'text-embedding-3-small';

let mock: MockAzureOpenAI;
let azure: AzureOpenAI;

before(async () => {
  mock = await startMockAzureOpenAI();
  azure = new AzureOpenAI({ endpoint: mock.url, apiKey: mock.apiKey, apiVersion: API_VERSION, deployment: CHAT, maxRetries: 0 });
});

after(async () => {
  await mock?.close();
});

/** The only request recorded since the last reset. */
function only(): AzureRequest {
  assert.equal(mock.requests.length, 1, mock.requests.map((r) => `${r.method} ${r.path}`).join(', '));
  return mock.requests[0]!;
}

/** The request went to `path` with exactly `query`, authenticated by the resource key alone. */
function assertKeyRequest(seen: AzureRequest, path: string, query: Record<string, string>): void {
  assert.equal(seen.method, 'POST');
  assert.equal(seen.path, path);
  assert.deepEqual(seen.query, query);
  assert.equal(seen.headers['api-key'], mock.apiKey);
  assert.equal(seen.headers.authorization, undefined);
}

const ask = (content: string) => ({ model: CHAT, messages: [{ role: 'user' as const, content }] });

describe('AzureOpenAI with an api key', () => {
  test('chat completion: deployment path, api-version, Azure annotations and usage', async () => {
    mock.reset();
    const completion = await azure.chat.completions.create(ask('ping'));
    assert.equal(completion.object, 'chat.completion');
    assert.equal(completion.model, 'gpt-4o-mini-2024-07-18');
    assert.equal(completion.choices[0]!.message.content, 'azure reply to: ping');
    assert.equal(completion.choices[0]!.finish_reason, 'stop');
    assert.equal(completion.usage?.total_tokens, 20);
    assert.equal(completion.usage?.prompt_tokens_details?.cached_tokens, 0);
    const raw = completion as unknown as { prompt_filter_results: { prompt_index: number; content_filter_results: Record<string, unknown> }[] };
    assert.equal(raw.prompt_filter_results[0]!.prompt_index, 0);
    assert.deepEqual(raw.prompt_filter_results[0]!.content_filter_results.hate, { filtered: false, severity: 'safe' });
    const choice = completion.choices[0] as unknown as { content_filter_results: Record<string, unknown> };
    assert.deepEqual(choice.content_filter_results.violence, { filtered: false, severity: 'safe' });
    assertKeyRequest(only(), '/openai/deployments/gpt-4o-mini/chat/completions', { 'api-version': API_VERSION });
  });

  test('chat completion, streamed with include_usage: annotations first, content, finish, usage', async () => {
    mock.reset();
    const stream = await azure.chat.completions.create({ ...ask('stream please'), stream: true, stream_options: { include_usage: true } });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    const first = chunks[0] as unknown as { choices: unknown[]; id: string; prompt_filter_results: unknown[] };
    assert.deepEqual(first.choices, []);
    assert.equal(first.id, '');
    assert.equal(first.prompt_filter_results.length, 1);
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    assert.equal(text, 'azure reply to: stream please');
    const contentChunks = chunks.filter((c) => (c.choices[0]?.delta.content ?? '') !== '');
    assert.equal(contentChunks.length, 3);
    for (const c of contentChunks) assert.ok('content_filter_results' in c.choices[0]!);
    const last = chunks.at(-1)!;
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage?.completion_tokens, 7);
    assert.equal(last.usage?.prompt_tokens_details?.cached_tokens, 0);
    assert.equal(chunks.at(-2)!.choices[0]!.finish_reason, 'stop');
    assertKeyRequest(only(), '/openai/deployments/gpt-4o-mini/chat/completions', { 'api-version': API_VERSION });
    assert.deepEqual((only().body as { stream_options: unknown }).stream_options, { include_usage: true });
  });

  test('embeddings (the SDK asks for base64 and decodes it), deployment taken from the model', async () => {
    mock.reset();
    const noDeployment = new AzureOpenAI({ endpoint: mock.url, apiKey: mock.apiKey, apiVersion: API_VERSION, maxRetries: 0 });
    const result = await noDeployment.embeddings.create({ model: EMBED, input: ['one', 'two'] });
    assert.equal(result.model, 'text-embedding-3-small');
    assert.equal(result.data.length, 2);
    assert.equal(result.data[0]!.embedding.length, 1536);
    assert.ok(result.data[0]!.embedding.every((v) => typeof v === 'number' && Number.isFinite(v)));
    assert.notDeepEqual(result.data[0]!.embedding, result.data[1]!.embedding);
    assert.equal(result.usage.prompt_tokens, 2);
    assertKeyRequest(only(), '/openai/deployments/text-embedding-3-small/embeddings', { 'api-version': API_VERSION });
    assert.equal((only().body as { encoding_format: string }).encoding_format, 'base64');
  });

  test('responses and the model list go to /openai/... with the api-version', async () => {
    mock.reset();
    const preview = new AzureOpenAI({ endpoint: mock.url, apiKey: mock.apiKey, apiVersion: RESPONSES_API_VERSION, maxRetries: 0 });
    const response = await preview.responses.create({ model: CHAT, input: 'hello' });
    assert.equal(response.status, 'completed');
    assert.equal(response.output_text, 'azure reply to: hello');
    assert.equal(response.usage?.input_tokens_details.cached_tokens, 0);
    assertKeyRequest(only(), '/openai/responses', { 'api-version': RESPONSES_API_VERSION });
    mock.reset();
    const ids: string[] = [];
    for await (const model of azure.models.list()) ids.push(model.id);
    assert.deepEqual(ids, ['gpt-4o-mini-2024-07-18', 'text-embedding-3-small']);
    assert.equal(only().method, 'GET');
    assert.equal(only().path, '/openai/models');
    assert.deepEqual(only().query, { 'api-version': API_VERSION });
  });

  test('a prompt the content filter refuses: BadRequestError with code content_filter', async () => {
    mock.reset();
    await assert.rejects(azure.chat.completions.create(ask('FILTER_PROMPT please')), (error: unknown) => {
      assert.ok(error instanceof OpenAI.BadRequestError, `got ${String(error)}`);
      assert.equal(error.status, 400);
      assert.equal(error.code, 'content_filter');
      assert.equal(error.param, 'prompt');
      assert.match(error.message, /content management policy/);
      const inner = (error.error as { innererror: { code: string; content_filter_result: { violence: unknown } } }).innererror;
      assert.equal(inner.code, 'ResponsibleAIPolicyViolation');
      assert.deepEqual(inner.content_filter_result.violence, { filtered: true, severity: 'medium' });
      return true;
    });
    assert.equal(only().path, '/openai/deployments/gpt-4o-mini/chat/completions');
  });

  test('an answer the content filter stops: finish_reason content_filter, JSON and stream', async () => {
    const completion = await azure.chat.completions.create(ask('FILTER_OUTPUT'));
    assert.equal(completion.choices[0]!.finish_reason, 'content_filter');
    assert.equal(completion.choices[0]!.message.content, undefined);
    const stream = await azure.chat.completions.create({ ...ask('FILTER_OUTPUT'), stream: true });
    const reasons: string[] = [];
    for await (const chunk of stream) if (chunk.choices[0]?.finish_reason) reasons.push(chunk.choices[0].finish_reason);
    assert.deepEqual(reasons, ['content_filter']);
  });

  test('throttled: RateLimitError (429) with retry-after and retry-after-ms; 500: InternalServerError', async () => {
    mock.reset();
    await assert.rejects(azure.chat.completions.create(ask('x'), { headers: { 'x-mock-azure': 'rate_limited' } }), (error: unknown) => {
      assert.ok(error instanceof OpenAI.RateLimitError, `got ${String(error)}`);
      assert.equal(error.code, '429');
      assert.match(error.message, /ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 .* Please retry after 6 seconds/);
      assert.equal(error.headers?.get('retry-after'), '6');
      assert.equal(error.headers?.get('retry-after-ms'), '6000');
      return true;
    });
    assert.equal(only().headers['x-mock-azure'], 'rate_limited'); // maxRetries 0: exactly one attempt
    mock.fail('server_error');
    try {
      await assert.rejects(azure.chat.completions.create(ask('x')), OpenAI.InternalServerError);
    } finally {
      mock.fail(undefined);
    }
  });

  test('a wrong key: AuthenticationError (401) with Azure code and message', async () => {
    const wrong = new AzureOpenAI({ endpoint: mock.url, apiKey: 'not-the-key', apiVersion: API_VERSION, deployment: CHAT, maxRetries: 0 });
    await assert.rejects(wrong.chat.completions.create(ask('x')), (error: unknown) => {
      assert.ok(error instanceof OpenAI.AuthenticationError, `got ${String(error)}`);
      assert.equal(error.code, '401');
      assert.match(error.message, /^401 Access denied due to invalid subscription key or wrong API endpoint/);
      return true;
    });
  });

  test('an unknown deployment, a deployment of the wrong kind, an unsupported or missing api-version', async () => {
    const other = new AzureOpenAI({ endpoint: mock.url, apiKey: mock.apiKey, apiVersion: API_VERSION, deployment: 'gpt-5-nope', maxRetries: 0 });
    await assert.rejects(other.chat.completions.create(ask('x')), (error: unknown) => {
      assert.ok(error instanceof OpenAI.NotFoundError, `got ${String(error)}`);
      assert.equal(error.code, 'DeploymentNotFound');
      return true;
    });
    await assert.rejects(azure.embeddings.create({ model: EMBED, input: 'x' }), (error: unknown) => {
      assert.ok(error instanceof OpenAI.BadRequestError, `got ${String(error)}`);
      assert.equal(error.code, 'OperationNotSupported'); // the client's deployment wins over the body's model
      return true;
    });
    const old = new AzureOpenAI({ endpoint: mock.url, apiKey: mock.apiKey, apiVersion: '2019-01-01', deployment: CHAT, maxRetries: 0 });
    await assert.rejects(old.chat.completions.create(ask('x')), (error: unknown) => {
      assert.ok(error instanceof OpenAI.BadRequestError, `got ${String(error)}`);
      assert.equal(error.code, 'BadRequest');
      assert.match(error.message, /API version not supported/);
      return true;
    });
    const bare = await fetch(`${mock.url}/openai/deployments/${CHAT}/chat/completions`, {
      method: 'POST', headers: { 'api-key': mock.apiKey, 'content-type': 'application/json' }, body: JSON.stringify(ask('x')),
    });
    assert.equal(bare.status, 404);
    assert.deepEqual(await bare.json(), { error: { code: '404', message: 'Resource not found' } });
  });
});

describe('AzureOpenAI with Microsoft Entra ID tokens', () => {
  /** Client credentials with a secret, form-encoded, as a service principal asks for a token. */
  async function fetchToken(): Promise<string> {
    const form = new URLSearchParams({ grant_type: 'client_credentials', client_id: mock.clientId, client_secret: mock.clientSecret, scope: mock.scope });
    const answer = await fetch(mock.tokenUrl, { method: 'POST', body: form });
    assert.equal(answer.status, 200);
    const token = (await answer.json()) as { token_type: string; expires_in: number; ext_expires_in: number; access_token: string };
    assert.equal(token.token_type, 'Bearer');
    assert.equal(token.expires_in, 3599);
    assert.equal(token.ext_expires_in, 3599);
    return token.access_token;
  }

  test('azureADTokenProvider: a token per request, sent as Bearer, no api-key', async () => {
    mock.reset();
    const tokens: string[] = [];
    const entra = new AzureOpenAI({
      endpoint: mock.url, apiVersion: API_VERSION, deployment: CHAT, maxRetries: 0,
      azureADTokenProvider: async () => { tokens.push(await fetchToken()); return tokens.at(-1)!; },
    });
    const first = await entra.chat.completions.create(ask('with a token'));
    assert.equal(first.choices[0]!.message.content, 'azure reply to: with a token');
    await entra.chat.completions.create(ask('again'));
    assert.equal(mock.tokenRequests, 2);
    const [tokenRequest, chat] = mock.requests;
    assert.equal(tokenRequest!.path, `/${mock.tenant}/oauth2/v2.0/token`);
    assert.deepEqual(tokenRequest!.body, { grant_type: 'client_credentials', client_id: mock.clientId, client_secret: mock.clientSecret, scope: 'https://cognitiveservices.azure.com/.default' });
    assert.equal(chat!.path, '/openai/deployments/gpt-4o-mini/chat/completions');
    assert.deepEqual(chat!.query, { 'api-version': API_VERSION });
    assert.equal(chat!.headers.authorization, `Bearer ${tokens[0]}`);
    assert.equal(chat!.headers['api-key'], undefined);
  });

  test('an expired token: 401 in the token check shape; a federated assertion is accepted, a wrong one refused', async () => {
    const token = await fetchToken();
    const entra = new AzureOpenAI({ endpoint: mock.url, apiVersion: API_VERSION, deployment: CHAT, maxRetries: 0, azureADTokenProvider: async () => token });
    await entra.chat.completions.create(ask('still valid'));
    mock.expireTokens();
    await assert.rejects(entra.chat.completions.create(ask('expired')), OpenAI.AuthenticationError);
    const raw = await fetch(`${mock.url}/openai/deployments/${CHAT}/chat/completions?api-version=${API_VERSION}`, {
      method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(ask('x')),
    });
    assert.equal(raw.status, 401);
    assert.match(((await raw.json()) as { message: string }).message, /^Unauthorized\. Access token is missing, invalid, audience is incorrect/);

    const federated = (assertion: string) => new URLSearchParams({
      grant_type: 'client_credentials', client_id: mock.clientId, scope: mock.scope,
      client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer', client_assertion: assertion,
    });
    const ok = await fetch(mock.tokenUrl, { method: 'POST', body: federated(mock.clientAssertion) });
    assert.equal(ok.status, 200);
    const refused = await fetch(mock.tokenUrl, { method: 'POST', body: federated('someone-else') });
    assert.equal(refused.status, 400);
    const error = (await refused.json()) as { error: string; error_codes: number[] };
    assert.equal(error.error, 'invalid_client');
    const badSecret = await fetch(mock.tokenUrl, { method: 'POST', body: new URLSearchParams({ grant_type: 'client_credentials', client_id: mock.clientId, client_secret: 'wrong', scope: mock.scope }) });
    assert.equal(badSecret.status, 401);
  });
});

describe('the v1 API with the OpenAI client', () => {
  test('chat, embeddings, responses and models under /openai/v1 with the api-key header, no api-version', async () => {
    mock.reset();
    const v1 = new OpenAI({ baseURL: `${mock.url}/openai/v1`, apiKey: 'unused', defaultHeaders: { 'api-key': mock.apiKey }, maxRetries: 0 });
    const completion = await v1.chat.completions.create(ask('v1 ping'));
    assert.equal(completion.choices[0]!.message.content, 'azure reply to: v1 ping');
    assert.equal(completion.model, 'gpt-4o-mini-2024-07-18');
    const seen = only();
    assert.equal(seen.path, '/openai/v1/chat/completions');
    assert.deepEqual(seen.query, {});
    assert.equal(seen.headers['api-key'], mock.apiKey);
    assert.equal(seen.headers.authorization, 'Bearer unused'); // ignored: the api-key header decides
    const emb = await v1.embeddings.create({ model: EMBED, input: 'v1', encoding_format: 'float' });
    assert.equal(emb.data[0]!.embedding.length, 1536);
    const response = await v1.responses.create({ model: CHAT, input: 'v1 hello' });
    assert.equal(response.output_text, 'azure reply to: v1 hello');
    const ids: string[] = [];
    for await (const model of v1.models.list()) ids.push(model.id);
    assert.ok(ids.includes('gpt-4o-mini-2024-07-18'));
    assert.deepEqual(mock.requests.map((r) => `${r.method} ${r.path}`), [
      'POST /openai/v1/chat/completions', 'POST /openai/v1/embeddings', 'POST /openai/v1/responses', 'GET /openai/v1/models',
    ]);
    await assert.rejects(v1.chat.completions.create({ ...ask('x'), model: 'nope' }), OpenAI.NotFoundError);
    const wrong = new OpenAI({ baseURL: `${mock.url}/openai/v1`, apiKey: 'unused', defaultHeaders: { 'api-key': 'wrong' }, maxRetries: 0 });
    await assert.rejects(wrong.chat.completions.create(ask('x')), OpenAI.AuthenticationError);
  });
});
