// The cloud credential sources a gateway finds in its environment, each through the built gateway
// against the mocks' own credential endpoints: AWS web identity (a token file and a role, as EKS
// sets them; STS at AWS_ENDPOINT_URL_STS), a named profile of the shared files (`aws_profile`), the
// instance metadata service; Google's workload identity federation (an external account file in
// GOOGLE_APPLICATION_CREDENTIALS). Each request reaches the mock signed or carrying a token that
// source issued. The environment keys, the container endpoint and the metadata server are covered
// by cloud-providers.test.ts and provider-conformance.test.ts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockBedrock, type MockBedrock } from '../support/mock-bedrock.ts';
import { startMockGoogle, type MockGoogle } from '../support/mock-google.ts';

const CLIENT_KEY = 'sk-client-cloud-credentials';
const LLAMA = 'meta.llama3-1-8b-instruct-v1:0';

let bedrock: MockBedrock;
let google: MockGoogle;
let dir: string;
const started: GatewayProcess[] = [];

before(async () => {
  bedrock = await startMockBedrock();
  google = await startMockGoogle();
  dir = mkdtempSync(join(tmpdir(), 'sluice-cloud-credentials-'));
  writeFileSync(join(dir, 'empty'), '');
});

after(async () => {
  for (const gw of started) await gw.stop();
  await bedrock?.close();
  await google?.close();
});

/** No AWS or Google source of the machine's own: only what a test gives. */
const NONE = {
  AWS_ACCESS_KEY_ID: undefined,
  AWS_SECRET_ACCESS_KEY: undefined,
  AWS_SESSION_TOKEN: undefined,
  AWS_PROFILE: undefined,
  AWS_WEB_IDENTITY_TOKEN_FILE: undefined,
  AWS_ROLE_ARN: undefined,
  AWS_CONTAINER_CREDENTIALS_FULL_URI: undefined,
  AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: undefined,
  AWS_EC2_METADATA_DISABLED: 'true',
  GOOGLE_APPLICATION_CREDENTIALS: undefined,
  GCE_METADATA_HOST: '127.0.0.1:9',
};

async function gateway(provider: Record<string, unknown>, model: string, env: Record<string, string | undefined>): Promise<OpenAI> {
  const gw = await startGateway({
    config: { providers: [provider], models: [{ name: 'm', provider: provider.name, upstream_model: model }], keys: [CLIENT_KEY] },
    env: { AWS_CONFIG_FILE: join(dir, 'empty'), AWS_SHARED_CREDENTIALS_FILE: join(dir, 'empty'), ...NONE, ...env },
  });
  started.push(gw);
  return new OpenAI({ baseURL: `${gw.proxyUrl}/v1`, apiKey: CLIENT_KEY, maxRetries: 0 });
}

const ask = { model: 'm', messages: [{ role: 'user' as const, content: 'hello' }] };
const bedrockProvider = () => ({ name: 'aws', type: 'bedrock', region: bedrock.region, base_url: bedrock.url });

/** The model requests Bedrock's mock recorded since `from`. */
const bedrockCalls = (from: number) => bedrock.requests.slice(from).filter((r) => r.path.startsWith('/model/'));

describe('AWS credential sources', () => {
  test('web identity: a token file and a role, exchanged with STS (AssumeRoleWithWebIdentity) for the keys that sign', async () => {
    const tokenFile = join(dir, 'web-identity-token');
    writeFileSync(tokenFile, bedrock.webIdentityToken);
    const issued = bedrock.issued.sts;
    const from = bedrock.requests.length;
    const openai = await gateway(bedrockProvider(), LLAMA, { AWS_WEB_IDENTITY_TOKEN_FILE: tokenFile, AWS_ROLE_ARN: bedrock.roleArn, AWS_ROLE_SESSION_NAME: 'sluice', AWS_ENDPOINT_URL_STS: bedrock.stsUrl, AWS_REGION: bedrock.region });
    const answer = await openai.chat.completions.create(ask);
    assert.match(answer.choices[0]!.message.content ?? '', /hello/);
    assert.equal(bedrock.issued.sts, issued + 1);
    const [call] = bedrockCalls(from);
    assert.equal(call!.auth, 'ok');
    assert.match(call!.accessKeyId ?? '', /^ASIA/, 'temporary keys, with their session token');
    assert.ok(call!.headers['x-amz-security-token']);
  });

  test('aws_profile: a named profile of the shared credentials file', async () => {
    const credentials = join(dir, 'credentials');
    writeFileSync(credentials, `[default]\naws_access_key_id = AKIAWRONGDEFAULT\naws_secret_access_key = wrong\n\n[bedrock-team]\naws_access_key_id = ${bedrock.credentials.accessKeyId}\naws_secret_access_key = ${bedrock.credentials.secretAccessKey}\n`);
    const from = bedrock.requests.length;
    const openai = await gateway({ ...bedrockProvider(), aws_profile: 'bedrock-team' }, LLAMA, { AWS_SHARED_CREDENTIALS_FILE: credentials });
    await openai.chat.completions.create(ask);
    const [call] = bedrockCalls(from);
    assert.equal(call!.auth, 'ok');
    assert.equal(call!.accessKeyId, bedrock.credentials.accessKeyId, "the profile's keys, not the default's");
  });

  test('the instance metadata service (IMDSv2: a session token, then the role\'s credentials)', async () => {
    const issued = bedrock.issued.imds;
    const from = bedrock.requests.length;
    const openai = await gateway(bedrockProvider(), LLAMA, { AWS_EC2_METADATA_DISABLED: 'false', AWS_EC2_METADATA_SERVICE_ENDPOINT: bedrock.imdsUrl });
    await openai.chat.completions.create(ask);
    assert.ok(bedrock.issued.imds > issued);
    const [call] = bedrockCalls(from);
    assert.equal(call!.auth, 'ok');
    assert.ok(bedrock.requests.slice(from).some((r) => r.operation === 'ImdsToken'), 'IMDSv2: a session token first');
  });
});

describe('Google credential sources', () => {
  test('workload identity federation: an external account file, its subject token exchanged at STS for an access token', async () => {
    const subject = join(dir, 'subject-token');
    writeFileSync(subject, google.subjectToken);
    const file = join(dir, 'external-account.json');
    writeFileSync(file, JSON.stringify(google.externalAccountConfig(subject)));
    const issued = google.issued.externalAccount;
    const from = google.requests.length;
    const openai = await gateway({ name: 'gcp', type: 'vertex', project: google.project, location: google.location, base_url: google.url }, 'gemini-2.0-flash', { GOOGLE_APPLICATION_CREDENTIALS: file });
    const answer = await openai.chat.completions.create(ask);
    assert.match(answer.choices[0]!.message.content ?? '', /hello/);
    assert.equal(google.issued.externalAccount, issued + 1);
    const call = google.requests.slice(from).find((r) => r.path.includes(':generateContent'));
    const token = google.tokens.filter((t) => t.source === 'externalAccount').at(-1)!.token;
    assert.equal(call!.headers.authorization, `Bearer ${token}`);
  });
});
