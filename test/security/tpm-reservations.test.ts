// Token reservations, found in the review of issue #24, at the default settings (the memory store)
// against the built gateway and the mock, which reports the usage each answer really had:
//   - A request for several choices reserves them all. The reservation was its prompt plus one
//     `max_tokens`, whatever `n` (chat, completions) or `best_of` (completions) asked for: a
//     request for 8 choices of 1,000 tokens reserved 1,000, so a key with a TPM of 10,000 was let
//     through with 9 such requests at once and used 72,000 tokens before the first settled. Now
//     a burst gets no more through than the TPM holds (one past it, when the bucket is full).
//   - A request reserves no more than the smallest bucket it is counted in. One key's request with
//     `max_tokens: 10000000` took ten million tokens from the model's shared bucket while it ran:
//     every other key was refused with a Retry-After of about 100 minutes (the time to refill ten
//     million), although the bucket was whole again a few seconds later.
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
/** A model entry's TPM, shared by every key. */
const SHARED_TPM = 100_000;

let mock: MockUpstream;
let gw: GatewayProcess;

before(async () => {
  mock = await startMockUpstream();
  gw = await startGateway({
    config: {
      providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream' }],
      models: [
        { name: 'gpt-*', provider: 'up' },
        { name: 'shared-*', provider: 'up' },
      ],
      keys: [
        { name: 'chat-n', key: 'sk-tpm-chat-choices', limits: { tpm: TPM } },
        { name: 'completions-best-of', key: 'sk-tpm-completions-best-of', limits: { tpm: TPM } },
        { name: 'greedy', key: 'sk-tpm-greedy-max-tokens' },
        { name: 'neighbour', key: 'sk-tpm-the-other-tenant' },
      ],
      limits: { models: { 'shared-*': { tpm: SHARED_TPM } } },
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

  test('a request with max_tokens 10,000,000 takes at most the shared bucket; another key waits seconds, not hours', async () => {
    const auth = (key: string) => ({ 'content-type': 'application/json', authorization: `Bearer ${key}` });
    // The greedy request runs 3 s upstream and uses 20 tokens.
    const greedy = fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...auth('sk-tpm-greedy-max-tokens'), ...mockHeader({ usage: { prompt: 20, completion: 0 }, headersDelayMs: 3000 }) },
      body: JSON.stringify({ model: 'shared-model', max_tokens: 10_000_000, messages: [{ role: 'user', content: 'hi' }] }),
    }).then(async (res) => (await res.text(), res.status));
    await mock.waitFor((received) => received.some((r) => r.headers.authorization === 'Bearer sk-upstream' && String(r.body).includes('10000000')));
    const other = await fetch(`${gw.proxyUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: auth('sk-tpm-the-other-tenant'),
      body: JSON.stringify({ model: 'shared-model', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }),
    });
    const text = await other.text();
    console.log(`another key while the greedy request runs: ${other.status}, Retry-After ${other.headers.get('retry-after')} s`);
    if (other.status === 429) {
      // Refused while the shared bucket is taken, it is told to come back once that request's reservation refills, not ten million tokens later.
      assert.ok(Number(other.headers.get('retry-after')) <= 60, `Retry-After ${other.headers.get('retry-after')} s: ${text}`);
    } else assert.equal(other.status, 200, text);
    assert.equal(await greedy, 200);
  });

  test('afterwards nothing is in flight', async () => {
    await assertSettled(gw, 'after the bursts');
  });
});
