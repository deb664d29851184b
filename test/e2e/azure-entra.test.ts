// An `azure_openai` provider with `auth: entra_id`, through the built gateway, against the Azure
// OpenAI mock and its Microsoft Entra ID endpoint (served over TLS: MSAL takes only an https
// authority; the gateway trusts the test CA through NODE_EXTRA_CA_CERTS). The gateway's own
// identity comes from the AZURE_* environment: a client secret, or workload identity's federated
// token file. Requests carry a bearer token the mock issued and no `api-key`; the token is
// refreshed before it expires while a stream goes on; a token endpoint that refuses is a 503
// `upstream_credentials_unavailable` in the caller's shape, said once in the log, and recovers; the
// secret is in no output, metric or admin answer.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { WebSocket } from 'ws';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import OpenAI from 'openai';
import { startGateway, scrape, eventually, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockAzureOpenAI, ASSERTION_TYPE, AZURE_SCOPE, type AzureRequest, type MockAzureOpenAI, type MockAzureOpenAIOptions } from '../support/mock-azure-openai.ts';
import { makePki } from '../support/certs.ts';

const CLIENT_KEY = 'sk-client-entra-test-1';
const ADMIN_TOKEN = 'admin-token-entra-test';
const API_VERSION = '2024-10-21';
/** A secret no other text holds by chance. */
const SECRET = `entra-secret-${randomBytes(12).toString('hex')}`;
const pki = makePki();

const started: { gw?: GatewayProcess; azure: MockAzureOpenAI }[] = [];
after(async () => {
  for (const { gw, azure } of started) {
    await gw?.stop();
    await azure.close();
  }
});

/**
 * A mock with its TLS authority, and a gateway whose identity is `env` over the mock's tenant and
 * client; `prepare` runs on the mock before the gateway starts.
 */
async function start(options: MockAzureOpenAIOptions, env: Record<string, string>, prepare?: (azure: MockAzureOpenAI) => void): Promise<{ gw: GatewayProcess; azure: MockAzureOpenAI }> {
  const azure = await startMockAzureOpenAI({ clientSecret: SECRET, ...options, tls: pki.server });
  const pair: { gw?: GatewayProcess; azure: MockAzureOpenAI } = { azure };
  started.push(pair);
  prepare?.(azure);
  pair.gw = await startGateway({
    config: {
      providers: [{ name: 'azure', type: 'azure_openai', base_url: azure.url, api_version: API_VERSION, auth: 'entra_id' }],
      models: [{ name: 'gpt-4o-mini', provider: 'azure' }],
      keys: [CLIENT_KEY],
      admin: { token: ADMIN_TOKEN },
    },
    env: {
      NODE_EXTRA_CA_CERTS: pki.caCert,
      AZURE_AUTHORITY_HOST: azure.authorityHost!,
      AZURE_TENANT_ID: azure.tenant,
      AZURE_CLIENT_ID: azure.clientId,
      // Whatever the machine has, only what a test gives.
      AZURE_CLIENT_SECRET: '',
      AZURE_FEDERATED_TOKEN_FILE: '',
      AZURE_CLIENT_CERTIFICATE_PATH: '',
      AZURE_USERNAME: '',
      AZURE_PASSWORD: '',
      AZURE_TOKEN_CREDENTIALS: '',
      ...env,
    },
  });
  return { gw: pair.gw, azure };
}

const openaiFor = (gw: GatewayProcess) => new OpenAI({ baseURL: `${gw.proxyUrl}/v1`, apiKey: CLIENT_KEY, maxRetries: 0 });
const ask = (content: string) => ({ model: 'gpt-4o-mini', messages: [{ role: 'user' as const, content }] });
/** The data-plane requests the mock received (no token or discovery requests). */
const modelRequests = (azure: MockAzureOpenAI): AzureRequest[] => azure.requests.filter((r) => r.path.startsWith('/openai/'));
const tokenRequests = (azure: MockAzureOpenAI): AzureRequest[] => azure.requests.filter((r) => r.path.endsWith('/oauth2/v2.0/token'));
const bearerOf = (request: AzureRequest): string | undefined => /^Bearer (.+)$/.exec(request.headers.authorization ?? '')?.[1];

/** An error answer: OpenAI's shape (`error.code`) or Anthropic's (`type: "error"`). */
interface ErrorAnswer {
  type?: string;
  error: { code?: string; type: string; message: string };
}

/** Posts `body` to the proxy with the client key; the status and the parsed answer. */
async function post(gw: GatewayProcess, path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; text: string; json: ErrorAnswer }> {
  const res = await fetch(`${gw.proxyUrl}${path}`, { method: 'POST', headers: { authorization: `Bearer ${CLIENT_KEY}`, 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, text, json: JSON.parse(text) as ErrorAnswer };
}

/** Reads a stream to its end: its text and finish reason. */
async function readStream(stream: AsyncIterable<OpenAI.ChatCompletionChunk>): Promise<{ text: string; finish: string | null | undefined }> {
  let text = '';
  let finish: string | null | undefined;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}

/** The secret is in none of the gateway's output, its metrics or the admin API's view of the provider. */
async function assertSecretNowhere(gw: GatewayProcess): Promise<void> {
  assert.ok(!gw.stdout().includes(SECRET), 'not in stdout');
  assert.ok(!gw.stderr().includes(SECRET), 'not in stderr');
  const metrics = await scrape(gw);
  assert.ok(metrics.includes('sluice_'), 'the metrics were read');
  assert.ok(!metrics.includes(SECRET), 'not in /metrics');
  for (const path of ['/config/providers/azure', '/config/providers', '/server_info']) {
    const res = await fetch(`${gw.adminUrl}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    const text = await res.text();
    assert.equal(res.status, 200, `${path}: ${text}`);
    assert.ok(!text.includes(SECRET), `not in ${path}`);
    if (path === '/config/providers/azure') assert.match(text, /entra_id/, 'the provider was read');
  }
}

describe('entra_id with a client secret (AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET)', () => {
  let gw: GatewayProcess;
  let azure: MockAzureOpenAI;
  before(async () => {
    ({ gw, azure } = await start({ chunks: 4 }, { AZURE_CLIENT_SECRET: SECRET }));
  });

  test('a chat completion and a stream go with a bearer token the mock issued, and no api-key', async () => {
    const openai = openaiFor(gw);
    const answer = await openai.chat.completions.create(ask('hello'), { headers: { 'api-key': 'a-client-api-key' } });
    assert.equal(answer.choices[0]!.message.content, 'azure reply to: hello');
    const streamed = await readStream(await openai.chat.completions.create({ ...ask('stream'), stream: true }));
    assert.equal(streamed.finish, 'stop');
    assert.equal(streamed.text, 'azure reply to: stream');

    const sent = modelRequests(azure);
    assert.equal(sent.length, 2);
    const issued = azure.issued.map((t) => t.token);
    for (const request of sent) {
      assert.equal(request.path, '/openai/deployments/gpt-4o-mini/chat/completions');
      assert.equal(request.headers['api-key'], undefined, 'no api-key header, neither the client\'s nor a key');
      assert.ok(issued.includes(bearerOf(request)!), `a token the mock issued: ${request.headers.authorization}`);
    }
    // The grant: client credentials with the secret, for Azure OpenAI's scope, at the TLS authority
    // found through the tenant's discovery document.
    const [grant] = tokenRequests(azure);
    const form = grant!.body as Record<string, string>;
    assert.equal(form.grant_type, 'client_credentials');
    assert.equal(form.client_id, azure.clientId);
    assert.equal(form.client_secret, SECRET);
    assert.equal(form.scope, AZURE_SCOPE);
    assert.ok(azure.requests.some((r) => r.method === 'GET' && r.path === `/${azure.tenant}/v2.0/.well-known/openid-configuration`), 'the discovery document was asked for');
    assert.equal(tokenRequests(azure).length, 1, 'one token, shared by the requests');
  });

  test('the secret is in no output, no metric and no admin answer', async () => {
    await assertSecretNowhere(gw);
  });
});

describe('entra_id with workload identity (AZURE_FEDERATED_TOKEN_FILE)', () => {
  test('the federated token file is sent as the client assertion', async () => {
    // The service account token the kubelet projects (a JWT the federation trusts).
    const assertion = `eyJhbGciOiJSUzI1NiJ9.${randomBytes(24).toString('base64url')}.sig`;
    const file = join(mkdtempSync(join(tmpdir(), 'sluice-entra-')), 'azure-identity-token');
    writeFileSync(file, `${assertion}\n`);
    const { gw, azure: mock } = await start({ clientAssertion: assertion }, { AZURE_FEDERATED_TOKEN_FILE: file });
    const answer = await openaiFor(gw).chat.completions.create(ask('from a pod'));
    assert.equal(answer.choices[0]!.message.content, 'azure reply to: from a pod');
    const [grant, ...more] = tokenRequests(mock);
    assert.equal(more.length, 0);
    const form = grant!.body as Record<string, string>;
    assert.equal(form.client_assertion, assertion);
    assert.equal(form.client_assertion_type, ASSERTION_TYPE);
    assert.equal(form.client_secret, undefined);
    assert.equal(bearerOf(modelRequests(mock)[0]!), mock.issued[0]!.token);
  });
});

describe('entra_id token refresh', () => {
  test('a second token is fetched before the first expires; a stream in progress across the refresh finishes', async () => {
    // Tokens of 6 s: the refresh starts at half the lifetime. The stream paces its 12 events 600 ms
    // apart: it outlasts the refresh and the first token.
    const { gw, azure } = await start({ tokenLifetimeSec: 6, chunks: 8, chunkDelayMs: 600 }, { AZURE_CLIENT_SECRET: SECRET });
    const openai = openaiFor(gw);
    // The first request waits for the first token (none is fetched before a request needs one).
    const streaming = openai.chat.completions.create({ ...ask('a long answer'), stream: true }).then(readStream);
    await eventually(() => modelRequests(azure).length === 1, 5000, 'the stream sent');
    assert.equal(azure.issued.length, 1);
    const first = azure.issued[0]!;
    assert.equal(bearerOf(modelRequests(azure)[0]!), first.token);

    // Near half the lifetime (the library gives expiry in whole seconds), requests until one has
    // started the refresh: each still goes with a valid token.
    await new Promise((r) => setTimeout(r, first.issuedAt + 2500 - Date.now()));
    await eventually(async () => {
      await openai.chat.completions.create(ask('around the refresh point'));
      return azure.issued.length === 2;
    }, 4000, 'a second token');
    const second = azure.issued[1]!;
    assert.ok(second.issuedAt < first.expiresAt, `refreshed ${first.expiresAt - second.issuedAt} ms before the first token expired`);
    assert.notEqual(second.token, first.token);
    await openai.chat.completions.create(ask('with the new token'));
    assert.equal(bearerOf(modelRequests(azure).at(-1)!), second.token);

    const streamed = await streaming;
    assert.ok(Date.now() > second.issuedAt, 'the stream ended after the refresh');
    assert.equal(streamed.finish, 'stop');
    assert.equal(streamed.text, 'azure reply to: a long answer');
    assert.ok(modelRequests(azure).every((r) => r.headers['api-key'] === undefined));
  });
});

describe('entra_id realtime', () => {
  test('a realtime session as the first request waits for the token and opens with it; the client key never leaves', async () => {
    const { gw, azure } = await start({}, { AZURE_CLIENT_SECRET: SECRET });
    assert.equal(azure.issued.length, 0, 'no token before a request needs one');
    const ws = new WebSocket(`${gw.proxyUrl.replace('http', 'ws')}/v1/realtime?model=gpt-4o-mini`, { headers: { authorization: `Bearer ${CLIENT_KEY}` } });
    const created = await new Promise<Record<string, unknown>>((resolve, reject) => {
      ws.once('message', (data) => resolve(JSON.parse(String(data)) as Record<string, unknown>));
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => reject(new Error(`handshake refused: ${res.statusCode}`)));
    });
    ws.close();
    assert.equal(created.type, 'session.created');
    const [handshake] = azure.realtime;
    assert.equal(handshake!.headers.authorization, `Bearer ${azure.issued[0]!.token}`);
    assert.equal(handshake!.headers['api-key'], undefined);
    assert.match(handshake!.path, /^\/openai\/realtime\?api-version=[^&]+&deployment=gpt-4o-mini$/);
  });
});

describe('entra_id with a token endpoint that refuses', () => {
  test("503 upstream_credentials_unavailable in the caller's shape, said once, no secret; then it recovers", async () => {
    const { gw, azure } = await start({}, { AZURE_CLIENT_SECRET: SECRET }, (a) => a.failTokens(true));
    const answers: string[] = [];
    // Requests over more than the 1 s pause after a failure: the token is asked for again, and refused again.
    for (let i = 0; i < 4; i++) {
      const chat = await post(gw, '/v1/chat/completions', ask('hi'));
      answers.push(chat.text);
      assert.equal(chat.status, 503, chat.text);
      assert.equal(chat.json.error.code, 'upstream_credentials_unavailable');
      assert.equal(chat.json.error.type, 'upstream_error');
      const messages = await post(gw, '/v1/messages', { model: 'gpt-4o-mini', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }, { 'anthropic-version': '2023-06-01' });
      answers.push(messages.text);
      assert.equal(messages.status, 503, messages.text);
      assert.equal(messages.json.type, 'error');
      assert.equal(messages.json.error.type, 'api_error');
      assert.match(messages.json.error.message, /no usable credentials/);
      await new Promise((r) => setTimeout(r, 400));
    }
    assert.ok(tokenRequests(azure).length >= 2, `the token was asked for again (${tokenRequests(azure).length})`);
    assert.equal(modelRequests(azure).length, 0, 'nothing was sent without a token');
    const failed = gw.logs.filter((l) => l.event === 'provider_credentials_failed');
    assert.equal(failed.length, 1, JSON.stringify(failed));
    assert.equal(failed[0]!.provider, 'azure');
    assert.match(String(failed[0]!.reason), /AADSTS7000222/, 'the reason is Entra ID\'s');
    for (const text of answers) assert.ok(!text.includes(SECRET));
    await assertSecretNowhere(gw);

    azure.failTokens(false);
    await eventually(async () => (await post(gw, '/v1/chat/completions', ask('again'))).status === 200, 5000, 'a request served again');
    await gw.waitForLog((l) => l.event === 'provider_credentials_recovered' && l.provider === 'azure', 5000);
    assert.equal(bearerOf(modelRequests(azure).at(-1)!), azure.issued.at(-1)!.token);
    assert.equal(gw.logs.filter((l) => l.event === 'provider_credentials_failed').length, 1);
  });
});
