// The /v1/realtime query string: model (required) and intent, each once; anything else refused by
// name; what goes upstream is built from the checked values only.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkRealtimeQuery, upstreamRealtimeQuery } from '../../src/gateway/realtime-query.ts';

const refusal = (url: string) => {
  const checked = checkRealtimeQuery(url);
  assert.equal(checked.ok, false, url);
  const { error } = checked as { ok: false; error: { status: number; code: string; param: string | undefined; message: string } };
  return { status: error.status, code: error.code, param: error.param, message: error.message };
};

test('model, and intent when valid, are taken', () => {
  assert.deepEqual(checkRealtimeQuery('/v1/realtime?model=gpt-realtime'), { ok: true, model: 'gpt-realtime', intent: undefined });
  assert.deepEqual(checkRealtimeQuery('/v1/realtime?intent=transcription&model=m'), { ok: true, model: 'm', intent: 'transcription' });
  assert.deepEqual(checkRealtimeQuery('/v1/realtime?mod%65l=a%2Fb'), { ok: true, model: 'a/b', intent: undefined }, 'names and values are decoded');
});

test('a repeated parameter is refused, also when it repeats only once decoded', () => {
  for (const url of ['/v1/realtime?model=a&model=b', '/v1/realtime?model=a&model=a', '/v1/realtime?model=a&%6Dodel=b', '/v1/realtime?intent=realtime&model=a&intent=realtime']) {
    const r = refusal(url);
    assert.equal(r.status, 400, url);
    assert.equal(r.code, 'invalid_parameter', url);
    assert.match(r.message, /is repeated/, url);
  }
});

test('call_id, an unknown name and an intent of another value are refused by name; no model is model_required', () => {
  assert.equal(refusal('/v1/realtime?model=a&call_id=rtc_1').param, 'call_id');
  assert.equal(refusal('/v1/realtime?model=a&api-version=1').param, 'api-version');
  assert.equal(refusal('/v1/realtime?model=a&intent=x').param, 'intent');
  assert.equal(refusal('/v1/realtime?model=a&=x').param, '');
  assert.equal(refusal(`/v1/realtime?model=a&${'n'.repeat(10_000)}=1`).param, `${'n'.repeat(256)}… (10000 characters)`, 'a long name is shown cut, with its length');
  assert.equal(refusal('/v1/realtime').code, 'model_required');
  assert.equal(refusal('/v1/realtime?model=').code, 'model_required');
});

test('the upstream query holds the checked model and intent only', () => {
  assert.equal(upstreamRealtimeQuery('gpt-realtime', undefined).toString(), 'model=gpt-realtime');
  assert.equal(upstreamRealtimeQuery('a&model=b', 'transcription').toString(), 'model=a%26model%3Db&intent=transcription');
});
