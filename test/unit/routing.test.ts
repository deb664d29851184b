// Model name → provider routing: exact names, "prefix-*" patterns (longest first), "*" catch-all.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ModelRouter } from '../../src/routing/router.ts';
import { modelSchema, type ModelConfig } from '../../src/config/schema.ts';
import { ManualClock } from '../support/manual-clock.ts';

const m = (name: string, provider: string, upstream_model?: string): ModelConfig =>
  modelSchema.parse(upstream_model === undefined ? { name, provider } : { name, provider, upstream_model });

test('an exact name beats a matching prefix and the catch-all', () => {
  const router = new ModelRouter([m('*', 'any'), m('gpt-*', 'prefix'), m('gpt-4o', 'exact')]);
  assert.equal(router.resolve('gpt-4o')?.provider, 'exact');
  assert.equal(router.resolve('gpt-4o')?.entry, 'gpt-4o');
});

test('a prefix beats the catch-all', () => {
  const router = new ModelRouter([m('*', 'any'), m('claude-*', 'anthropic')]);
  const route = router.resolve('claude-3-haiku');
  assert.deepEqual({ entry: route?.entry, provider: route?.provider, upstreamModel: route?.upstreamModel }, { entry: 'claude-*', provider: 'anthropic', upstreamModel: undefined });
});

test('the catch-all takes what nothing else matches', () => {
  const router = new ModelRouter([m('gpt-*', 'openai'), m('*', 'fallback')]);
  assert.equal(router.resolve('mistral-large')?.provider, 'fallback');
  assert.equal(router.resolve('mistral-large')?.entry, '*');
  assert.equal(router.resolve('')?.provider, 'fallback');
});

test('the longest matching prefix wins, whatever the configured order', () => {
  const models = [m('gpt-*', 'short'), m('gpt-4o-*', 'long'), m('gpt-4*', 'middle')];
  for (const order of [models, [...models].reverse(), [models[1]!, models[0]!, models[2]!]]) {
    const router = new ModelRouter(order);
    assert.equal(router.resolve('gpt-4o-mini')?.provider, 'long');
    assert.equal(router.resolve('gpt-4-turbo')?.provider, 'middle');
    assert.equal(router.resolve('gpt-3.5')?.provider, 'short');
  }
});

test('a prefix matches the bare prefix itself ("gpt-*" matches "gpt-")', () => {
  const router = new ModelRouter([m('gpt-*', 'openai')]);
  assert.equal(router.resolve('gpt-')?.provider, 'openai');
  assert.equal(router.resolve('gpt')?.provider, undefined);
});

test('no match and no catch-all → undefined', () => {
  const router = new ModelRouter([m('gpt-*', 'openai'), m('echo', 'echo')]);
  assert.equal(router.resolve('claude-3'), undefined);
  assert.equal(router.resolve('ech'), undefined);
  assert.equal(router.resolve('echo-1'), undefined);
  assert.equal(new ModelRouter([]).resolve('anything'), undefined);
});

test('matching is case-sensitive', () => {
  const router = new ModelRouter([m('GPT-*', 'upper'), m('Echo', 'exact')]);
  assert.equal(router.resolve('gpt-4'), undefined);
  assert.equal(router.resolve('echo'), undefined);
  assert.equal(router.resolve('GPT-4')?.provider, 'upper');
});

test('upstream_model is carried on exact, prefix and catch-all routes', () => {
  const router = new ModelRouter([m('fast', 'openai', 'gpt-4o-mini'), m('smart-*', 'anthropic', 'claude-opus'), m('*', 'echo', 'echo-1')]);
  const seen = (name: string) => {
    const route = router.resolve(name);
    return { entry: route?.entry, provider: route?.provider, upstreamModel: route?.upstreamModel };
  };
  assert.deepEqual(seen('fast'), { entry: 'fast', provider: 'openai', upstreamModel: 'gpt-4o-mini' });
  assert.deepEqual(seen('smart-v2'), { entry: 'smart-*', provider: 'anthropic', upstreamModel: 'claude-opus' });
  assert.deepEqual(seen('other'), { entry: '*', provider: 'echo', upstreamModel: 'echo-1' });
});

test('without upstream_model the route keeps the requested name (upstreamModel undefined)', () => {
  const router = new ModelRouter([m('gpt-4o', 'openai')]);
  assert.equal(router.resolve('gpt-4o')?.upstreamModel, undefined);
});

test('the configured models are exposed in order', () => {
  const models = [m('b', 'p'), m('a-*', 'p')];
  assert.deepEqual(new ModelRouter(models).models, models);
});

test('a router given no states keeps its targets\' on the clock it is given: a cooldown ends when that clock says so, and a reload carries it', () => {
  const clock = new ManualClock();
  clock.advance(1_000_000);
  const router = new ModelRouter([m('gpt-*', 'openai'), m('fast', 'openai', 'gpt-4o-mini')], undefined, clock);
  const state = router.resolve('gpt-4o')!.states[0]!;
  const now = () => router.states.clock.now();
  assert.equal(state.failed('timeout', now(), { failures: 1, secs: 30, maxSecs: 60 }, undefined), true, 'the circuit opened');
  clock.advance(29_999);
  assert.equal(state.usable(now()), false, 'cooling down');
  clock.advance(1);
  assert.equal(state.usable(now()), true, 'the cooldown is over on the manual clock');
  assert.equal(router.states.carry(() => true).clock, clock);
  assert.notEqual(router.resolve('fast')!.states[0], state, 'another target, another state');
});

test('a router given states uses those', () => {
  const states = new ModelRouter([]).states;
  const router = new ModelRouter([m('gpt-4o', 'openai')], states);
  assert.equal(router.states, states);
  assert.equal(router.resolve('gpt-4o')!.states[0], states.get('openai', 'gpt-4o'));
});
