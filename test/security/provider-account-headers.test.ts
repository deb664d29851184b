// The provider account is the operator's, not the client's (found in the review of issue #24).
// A client's `OpenAI-Organization` and `OpenAI-Project` headers went upstream with the operator's
// credential: a client chose which of the operator's organizations and projects was billed (and
// one whose SDK reads OPENAI_ORG_ID from its own environment got the provider's 401 for a
// mismatched organization). The provider's answer told every client the operator's organization
// and project (`openai-organization`, `openai-project`, `anthropic-organization-id`). Now neither
// crosses the gateway; a provider's configured `headers` still choose them. At the default
// settings, against the built gateway and the mock, on both provider types, JSON and streams.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';

const KEY = 'sk-team-key-0123456789';
const ACCOUNT_HEADERS = { 'openai-organization': 'org-operator-private', 'openai-project': 'proj_operator', 'anthropic-organization-id': '7c1e0000-operator' };

let mock: MockUpstream;
let gw: GatewayProcess;

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [
        { name: 'oa', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream' },
        { name: 'oa-project', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream', headers: { 'openai-project': 'proj_chosen_by_operator' } },
        { name: 'an', type: 'anthropic', base_url: mock.url, api_key: 'sk-ant-upstream' },
      ],
      models: [
        { name: 'gpt-*', provider: 'oa' },
        { name: 'project-*', provider: 'oa-project' },
        { name: 'claude-*', provider: 'an' },
      ],
      keys: [{ name: 'team', key: KEY }],
    },
  });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

const CASES = [
  ['chat', '/v1/chat/completions', { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }],
  ['chat stream', '/v1/chat/completions', { model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'hi' }] }],
  ['responses', '/v1/responses', { model: 'gpt-4o', input: 'hi' }],
  ['messages', '/v1/messages', { model: 'claude-sonnet-4-5', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }],
  ['messages stream', '/v1/messages', { model: 'claude-sonnet-4-5', max_tokens: 8, stream: true, messages: [{ role: 'user', content: 'hi' }] }],
  ['messages on an OpenAI provider', '/v1/messages', { model: 'gpt-4o', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }],
] as const;

describe('the provider account is the operator\'s', () => {
  for (const [name, path, body] of CASES) {
    test(`${name}: the client's organization and project do not go upstream, the provider's do not come back`, async () => {
      mock.reset();
      const res = await fetch(`${gw.proxyUrl}${path}`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          authorization: `Bearer ${KEY}`,
          'anthropic-version': '2023-06-01',
          'openai-organization': 'org-of-the-client',
          'OpenAI-Project': 'proj_of_the_client',
          ...mockHeader({ headers: ACCOUNT_HEADERS }),
        },
        body: JSON.stringify(body),
      });
      await res.text();
      assert.equal(res.status, 200);
      const upstream = mock.received.at(-1)!;
      assert.equal(upstream.headers['openai-organization'], undefined, 'the client chose the organization billed');
      assert.equal(upstream.headers['openai-project'], undefined, 'the client chose the project billed');
      for (const header of Object.keys(ACCOUNT_HEADERS)) assert.equal(res.headers.get(header), null, `the client was told ${header}`);
    });
  }

  test('a provider\'s configured header still chooses the project', async () => {
    mock.reset();
    const res = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, 'openai-project': 'proj_of_the_client' },
      body: JSON.stringify({ model: 'project-model', messages: [{ role: 'user', content: 'hi' }] }),
    });
    await res.text();
    assert.equal(res.status, 200);
    assert.equal(mock.received.at(-1)!.headers['openai-project'], 'proj_chosen_by_operator');
  });
});
