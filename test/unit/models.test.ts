// The model catalog with fake providers and a fake clock: the cache's lifetime, the retry after a
// failure, one log line per outage, concurrent askers sharing one fetch, and what patterns list.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LIST_TTL_MS, ModelCatalog, RETRY_MS } from '../../src/gateway/models.ts';
import { ModelRouter } from '../../src/routing/router.ts';
import { modelSchema } from '../../src/config/schema.ts';
import type { Provider, UpstreamModel } from '../../src/providers/types.ts';

function fakeProvider(name: string, answer: () => Promise<UpstreamModel[]>): Provider & { calls: number } {
  const provider = {
    name,
    type: 'openai' as const,
    api: 'openai' as const,
    calls: 0,
    supports: () => true,
    dispatch: () => {},
    listModels: () => {
      provider.calls++;
      return answer();
    },
    close: async () => {},
    destroy: async () => {},
  };
  return provider;
}

const model = (id: string): UpstreamModel => ({ id, created: 1, displayName: undefined });

function setup(answer: () => Promise<UpstreamModel[]>) {
  let now = 1_000_000;
  const events: string[] = [];
  const provider = fakeProvider('up', answer);
  const router = new ModelRouter(
    [
      { name: 'exact-one', provider: 'up' },
      { name: 'gpt-*', provider: 'up' },
      { name: 'gpt-4o-mini*', provider: 'other' },
    ].map((m) => modelSchema.parse(m)),
  );
  const other = fakeProvider('other', async () => [model('gpt-4o-mini')]);
  const catalog = new ModelCatalog(router, new Map<string, Provider>([['up', provider], ['other', other]]), {
    failed: (name, reason) => events.push(`failed ${name} ${reason}`),
    recovered: (name) => events.push(`recovered ${name}`),
  }, () => now);
  return { catalog, provider, events, advance: (ms: number) => (now += ms) };
}

test('a pattern lists only what its provider lists and the router sends to it; exact names come first', async () => {
  const { catalog } = setup(async () => [model('gpt-4o'), model('gpt-4o-mini'), model('exact-one'), model('other-thing')]);
  assert.deepEqual((await catalog.list()).map((m) => `${m.id}@${m.ownedBy}`), ['exact-one@up', 'gpt-4o@up', 'gpt-4o-mini@other']);
});

test('the list is kept for LIST_TTL_MS, and concurrent askers share one fetch', async () => {
  const { catalog, provider, advance } = setup(async () => [model('gpt-4o')]);
  await Promise.all([catalog.list(), catalog.list(), catalog.find('gpt-4o')]);
  assert.equal(provider.calls, 1);
  advance(LIST_TTL_MS - 1);
  await catalog.list();
  assert.equal(provider.calls, 1);
  advance(1);
  await catalog.list();
  assert.equal(provider.calls, 2);
});

test('a failing provider is logged once per outage, asked again after RETRY_MS, and its last list is kept', async () => {
  let fail = false;
  const { catalog, provider, events, advance } = setup(async () => {
    if (fail) throw Object.assign(new Error('refused'), { code: 'ECONNREFUSED' });
    return [model('gpt-4o')];
  });
  assert.deepEqual((await catalog.list()).map((m) => m.id), ['exact-one', 'gpt-4o', 'gpt-4o-mini']);
  fail = true;
  advance(LIST_TTL_MS);
  // The stale list is better than none.
  assert.deepEqual((await catalog.list()).map((m) => m.id), ['exact-one', 'gpt-4o', 'gpt-4o-mini']);
  await catalog.list();
  assert.equal(provider.calls, 2, 'asked again before RETRY_MS');
  for (let i = 0; i < 3; i++) {
    advance(RETRY_MS);
    await catalog.list();
  }
  assert.equal(provider.calls, 5);
  assert.deepEqual(events, ['failed up ECONNREFUSED']);
  fail = false;
  advance(RETRY_MS);
  await catalog.list();
  assert.deepEqual(events, ['failed up ECONNREFUSED', 'recovered up']);
});

test('with no list at all, patterns list nothing and find() lets the route decide', async () => {
  const { catalog } = setup(async () => {
    throw new Error('HTTP 500');
  });
  assert.deepEqual((await catalog.list()).map((m) => m.id), ['exact-one', 'gpt-4o-mini']);
  assert.ok('model' in (await catalog.find('gpt-anything')));
  assert.deepEqual(await catalog.find('nothing'), { missing: 'unrouted' });
});

test('find(): a listed name is found with its facts; a name the provider does not list is missing', async () => {
  const { catalog } = setup(async () => [{ id: 'gpt-4o', created: 42, displayName: 'GPT-4o' }]);
  assert.deepEqual(await catalog.find('gpt-4o'), { model: { id: 'gpt-4o', created: 42, displayName: 'GPT-4o', ownedBy: 'up' } });
  assert.deepEqual(await catalog.find('gpt-5-nope'), { missing: 'unlisted', provider: 'up' });
  assert.deepEqual(await catalog.find('exact-one'), { model: { id: 'exact-one', created: 0, displayName: 'exact-one', ownedBy: 'up' } });
});
