// A request for several choices reserves them all (found in the review of issue #24). A request's
// token reservation was its prompt plus one `max_tokens`, whatever `n` (chat, completions) or
// `best_of` (completions) asked for: a request for 8 choices of 1,000 tokens reserved 1,000, so
// a key with a TPM of 10,000 was let through with 9 such requests at once and used 72,000 tokens
// before the first settled. Now the output is reserved once per choice, and a burst of such
// requests gets no more through than its TPM holds (one past it, when the bucket is full).
// At the default settings (the memory store), against the built gateway and the mock, which
// reports the usage each answer really had.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { mockHeader, startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { assertSettled } from '../support/reliability.ts';

const TPM = 10_000;
const MAX_TOKENS = 1_000;
const CHOICES = 8;
/** What each answer really used: every choice ran to max_tokens. */
const USED = { prompt: 20, completion: CHOICES * MAX_TOKENS };
const BURST = 10;

let mock: MockUpstream;
let gw: GatewayProcess;

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream' }],
      models: [{ name: 'gpt-*', provider: 'up' }],
      keys: [
        { name: 'chat-n', key: 'sk-tpm-chat-choices', limits: { tpm: TPM } },
        { name: 'completions-best-of', key: 'sk-tpm-completions-best-of', limits: { tpm: TPM } },
      ],
    },
  });
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

/** A burst of requests at once, each held 600 ms upstream (none settles before all were admitted): how many were let through. */
async function burst(path: string, key: string, body: Record<string, unknown>): Promise<{ admitted: number; refused: number }> {
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...mockHeader({ usage: USED, headersDelayMs: 600 }) };
  const statuses = await Promise.all(
    Array.from({ length: BURST }, async () => {
      const res = await fetch(`${gw.proxyUrl}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
      await res.text();
      return res.status;
    }),
  );
  const admitted = statuses.filter((s) => s === 200).length;
  const refused = statuses.filter((s) => s === 429).length;
  assert.equal(admitted + refused, BURST, `statuses ${JSON.stringify(statuses)}`);
  console.log(`${path}: ${admitted} of ${BURST} let through at once, ${refused} refused`);
  return { admitted, refused };
}

/** The tokens the admitted requests used may pass the TPM by at most one request's worth (a full bucket lets one larger request through). */
function assertWithinTpm(what: string, admitted: number): void {
  const used = admitted * (USED.prompt + USED.completion);
  assert.ok(used <= TPM + USED.prompt + USED.completion, `${what}: ${admitted} of ${BURST} requests let through at once used ${used} tokens against a TPM of ${TPM}`);
}

describe('a request for several choices reserves its tokens for each', () => {
  test(`chat with n: ${CHOICES}`, async () => {
    const result = await burst('/v1/chat/completions', 'sk-tpm-chat-choices', { model: 'gpt-4o', n: CHOICES, max_tokens: MAX_TOKENS, messages: [{ role: 'user', content: 'hi' }] });
    assertWithinTpm('chat n', result.admitted);
  });

  test(`completions with best_of: ${CHOICES} (and n: 2)`, async () => {
    const result = await burst('/v1/completions', 'sk-tpm-completions-best-of', { model: 'gpt-3.5-turbo-instruct', best_of: CHOICES, n: 2, max_tokens: MAX_TOKENS, prompt: 'hi' });
    assertWithinTpm('completions best_of', result.admitted);
  });

  test('afterwards nothing is in flight', async () => {
    await assertSettled(gw, 'after the bursts');
  });
});
