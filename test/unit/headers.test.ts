// Which headers cross the gateway, in each direction.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingHttpHeaders } from 'node:http';
import { downstreamHeaders, upstreamHeaders } from '../../src/gateway/headers.ts';

const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade'];

test('upstream: hop-by-hop headers are removed', () => {
  const headers: IncomingHttpHeaders = { 'x-keep': '1' };
  for (const name of HOP_BY_HOP) headers[name] = 'x';
  headers['proxy-authorization'] = 'Basic abc';
  assert.deepEqual(upstreamHeaders(headers), { 'x-keep': '1' });
});

test("upstream: host, authorization, x-api-key, Azure's api-key, Google's key, an AWS session token and content-length are removed", () => {
  const out = upstreamHeaders({
    host: 'gateway.local:8080',
    authorization: 'Bearer client-key',
    'x-api-key': 'client-key',
    'api-key': 'client-key',
    'x-goog-api-key': 'client-key',
    'x-amz-security-token': 'client-token',
    'content-length': '42',
    'openai-beta': 'assistants=v2',
    'anthropic-beta': 'tools-2024',
    'user-agent': 'sdk/1.0',
  });
  assert.deepEqual(out, { 'openai-beta': 'assistants=v2', 'anthropic-beta': 'tools-2024', 'user-agent': 'sdk/1.0' });
});

test('upstream: headers named in Connection are removed', () => {
  const out = upstreamHeaders({ connection: 'keep-alive, X-Trace-Hop , x-other', 'x-trace-hop': 'a', 'x-other': 'b', 'x-kept': 'c' });
  assert.deepEqual(out, { 'x-kept': 'c' });
});

test('upstream: Connection: close / keep-alive removes nothing else', () => {
  assert.deepEqual(upstreamHeaders({ connection: 'close', 'x-a': '1' }), { 'x-a': '1' });
  assert.deepEqual(upstreamHeaders({ connection: 'keep-alive', 'x-a': '1' }), { 'x-a': '1' });
});

test('upstream: HTTP/2 pseudo-headers are removed, array values kept', () => {
  const out = upstreamHeaders({ ':authority': 'x', ':path': '/v1/chat/completions', 'x-multi': ['a', 'b'] } as IncomingHttpHeaders);
  assert.deepEqual(out, { 'x-multi': ['a', 'b'] });
});

test('upstream: the input is not modified', () => {
  const headers: IncomingHttpHeaders = { host: 'h', 'x-a': '1' };
  upstreamHeaders(headers);
  assert.deepEqual(headers, { host: 'h', 'x-a': '1' });
});

test('downstream: hop-by-hop headers are dropped, the rest returned', () => {
  const headers: IncomingHttpHeaders = { 'content-type': 'application/json', 'x-ratelimit-remaining-requests': '99', 'openai-processing-ms': '12' };
  for (const name of HOP_BY_HOP) headers[name] = 'x';
  assert.deepEqual(downstreamHeaders(headers), {
    'content-type': 'application/json',
    'x-ratelimit-remaining-requests': '99',
    'openai-processing-ms': '12',
  });
});

test('downstream: headers named in the upstream Connection are dropped', () => {
  assert.deepEqual(downstreamHeaders({ connection: 'x-internal', 'x-internal': 'secret', 'x-public': 'ok' }), { 'x-public': 'ok' });
});

test('downstream: values containing CR or LF are dropped', () => {
  const out = downstreamHeaders({
    'x-split': 'a\r\nset-cookie: evil=1',
    'x-lf': 'a\nb',
    'x-cr': 'a\rb',
    'x-list': ['fine', 'bad\r\nx: y'],
    'x-ok': 'fine',
    'x-ok-list': ['a', 'b'],
  } as IncomingHttpHeaders);
  assert.deepEqual(out, { 'x-ok': 'fine', 'x-ok-list': ['a', 'b'] });
});

test('the provider account is the operator\'s: a client\'s organization and project stay here, the provider\'s account headers do not come back', () => {
  assert.deepEqual(upstreamHeaders({ 'openai-organization': 'org-client', 'openai-project': 'proj_client', 'openai-beta': 'realtime=v1' }), { 'openai-beta': 'realtime=v1' });
  assert.deepEqual(
    downstreamHeaders({ 'openai-organization': 'org-operator', 'openai-project': 'proj_operator', 'anthropic-organization-id': 'uuid', 'openai-processing-ms': '12', 'x-ratelimit-remaining-tokens': '5' }),
    { 'openai-processing-ms': '12', 'x-ratelimit-remaining-tokens': '5' },
  );
});
