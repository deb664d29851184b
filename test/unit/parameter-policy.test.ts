// What an OpenAI-compatible server accepts of OpenAI's parameters (a provider's preset): dropped,
// renamed, stream_options never sent to a server that refuses it; a body with none of them is
// passed untouched, and so is every endpoint the rules are not for.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ParameterPolicy } from '../../src/providers/parameter-policy.ts';

test('refused parameters are dropped and named; renamed ones take the server name; the client body is not changed', () => {
  const policy = new ParameterPolicy({ drop: ['logit_bias', 'n'], rename: { seed: 'random_seed' }, streamUsage: true });
  const body = { model: 'm', messages: [], logit_bias: { 1: 2 }, seed: 7, temperature: 0.5 };
  const out = policy.adapt('chat', body);
  assert.deepEqual(out, { json: { model: 'm', messages: [], random_seed: 7, temperature: 0.5 }, dropped: ['logit_bias'] });
  assert.deepEqual(body, { model: 'm', messages: [], logit_bias: { 1: 2 }, seed: 7, temperature: 0.5 }, 'a copy is adapted');
});

test('a body with none of the parameters is not copied; other endpoints are not touched', () => {
  const policy = new ParameterPolicy({ drop: ['logit_bias'], rename: { seed: 'random_seed' }, streamUsage: true });
  assert.equal(policy.adapt('chat', { model: 'm', messages: [] }), undefined);
  assert.equal(policy.adapt('embeddings', { model: 'm', input: 'x', logit_bias: {} }), undefined);
  assert.deepEqual(policy.adapt('completions', { model: 'm', prompt: 'x', logit_bias: {} })?.dropped, ['logit_bias']);
});

test('a client that sent both names keeps the server name; an inherited name is not a parameter', () => {
  const policy = new ParameterPolicy({ rename: { seed: 'random_seed' }, streamUsage: true });
  assert.deepEqual(policy.adapt('chat', { seed: 1, random_seed: 2 })?.json, { random_seed: 2 });
  const inherited = Object.create({ logit_bias: 1 }) as Record<string, unknown>;
  inherited.model = 'm';
  assert.equal(new ParameterPolicy({ drop: ['logit_bias'], streamUsage: true }).adapt('chat', inherited), undefined);
});

test('a server that refuses stream_options: it is dropped (and named), and the gateway must not ask for usage', () => {
  const policy = new ParameterPolicy({ streamUsage: false });
  assert.equal(policy.streamUsage, false);
  assert.deepEqual(policy.adapt('chat', { stream: true, stream_options: { include_usage: true } }), { json: { stream: true }, dropped: ['stream_options'] });
  assert.equal(new ParameterPolicy({ streamUsage: true }).adapt('chat', { stream: true, stream_options: { include_usage: true } }), undefined);
});

test('n is refused only when it asks for more than one choice', () => {
  const policy = new ParameterPolicy({ drop: ['n'], streamUsage: true });
  assert.equal(policy.adapt('chat', { n: 1 }), undefined);
  assert.deepEqual(policy.adapt('chat', { n: 2 }), { json: {}, dropped: ['n'] });
});

test("a preset's base URL is the provider's default; a configured one wins", async () => {
  const { OpenAIProvider } = await import('../../src/providers/openai/adapter.ts');
  const upstream = { connect_timeout_ms: 1000, timeout_ms: 1000, max_connections: 0 };
  const groq = new OpenAIProvider({ name: 'g', type: 'openai', preset: 'groq', anthropic_version: '2023-06-01', headers: {}, api_key: 'k' }, upstream);
  assert.equal(groq.origin, 'https://api.groq.com');
  assert.equal(groq.pool.basePath, '/openai/v1');
  assert.equal(groq.parameters?.streamUsage, false);
  const own = new OpenAIProvider({ name: 'o', type: 'openai', preset: 'ollama', base_url: 'http://10.0.0.5:11434/v1', anthropic_version: '2023-06-01', headers: {} }, upstream);
  assert.equal(own.origin, 'http://10.0.0.5:11434');
  const plain = new OpenAIProvider({ name: 'p', type: 'openai', anthropic_version: '2023-06-01', headers: {} }, upstream);
  assert.equal(plain.parameters, undefined, 'no preset: no policy, nothing to pay per request');
  await Promise.all([groq.close(), own.close(), plain.close()]);
});
