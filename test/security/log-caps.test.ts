// Issue 24, defect 9 (second half): a 5 MB model name was written whole into the access log line.
// Every client-supplied string in a log line (model, path, method, the client's x-request-id) is
// cut to 256 characters, with the original length beside it (`model_length`, …), at the default
// settings: through a routed request, a refused one, a realtime handshake and the drain's
// `request_while_draining` line.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { httpRequest, postJson, websocketHandshake } from '../support/http.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';

const CAP = 256;
const HUGE = 5 * 1024 * 1024;

let mock: MockUpstream;
before(async () => {
  mock = await startMockUpstream();
});
after(async () => {
  await mock?.close();
});

/** The access line of the request the client tagged `rid`, and its size in bytes. */
async function accessLine(gw: GatewayProcess, rid: string): Promise<{ line: Record<string, unknown>; bytes: number }> {
  const line = await gw.waitForLog((l) => l.event === 'access' && l.downstream_request_id === rid);
  return { line, bytes: Buffer.byteLength(JSON.stringify(line)) };
}

function assertCapped(line: Record<string, unknown>, field: string, length: number): void {
  const value = line[field] as string;
  assert.equal(typeof value, 'string', `${field} is logged`);
  assert.ok(value.length <= CAP + 1, `${field}: ${value.length} characters logged`);
  assert.ok(value.endsWith('…'), `${field} says it was cut`);
  assert.equal(line[`${field}_length`], length, `${field}_length`);
}

test('a 5 MB model name: the access line stays small and says the name\'s length (unknown model, and routed by a "*" pattern)', async () => {
  const gw = await startGateway({ config: { providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }], models: [{ name: 'known', provider: 'up' }] } });
  const routed = await startGateway({ config: { providers: [{ name: 'echo', type: 'echo' }], models: [{ name: '*', provider: 'echo' }] } });
  try {
    const model = 'm'.repeat(HUGE);
    const unknown = await postJson(`${gw.proxyUrl}/v1/chat/completions`, { model, messages: [{ role: 'user', content: 'hi' }] }, { 'x-request-id': 'huge-unknown' });
    assert.equal(unknown.status, 404);
    const a = await accessLine(gw, 'huge-unknown');
    assertCapped(a.line, 'model', HUGE);
    assert.ok(a.bytes < 2048, `the line is ${a.bytes} bytes`);

    const served = await postJson(`${routed.proxyUrl}/v1/chat/completions`, { model, messages: [{ role: 'user', content: 'hi' }] }, { 'x-request-id': 'huge-routed' });
    assert.equal(served.status, 200);
    const b = await accessLine(routed, 'huge-routed');
    assertCapped(b.line, 'model', HUGE);
    assert.ok(b.bytes < 2048, `the line is ${b.bytes} bytes`);

    // A short name is logged as it is, with no length beside it.
    await postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: 'known', messages: [{ role: 'user', content: 'hi' }] }, { 'x-request-id': 'short' });
    const c = await accessLine(gw, 'short');
    assert.equal(c.line.model, 'known');
    assert.equal(c.line.model_length, undefined);
  } finally {
    await Promise.all([gw.stop(), routed.stop()]);
  }
});

test('a long path, a long x-request-id and a long realtime model are cut the same way; a character outside the BMP is never split', async () => {
  const gw = await startGateway({ config: { providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }], models: [{ name: 'known', provider: 'up' }] } });
  try {
    const path = `/v1/${'p'.repeat(5000)}`;
    const rid = `r${'i'.repeat(5000)}`;
    const res = await httpRequest(`${gw.proxyUrl}${path}`, { headers: { 'x-request-id': rid } });
    assert.equal(res.status, 404);
    const line = await gw.waitForLog((l) => l.event === 'access' && typeof l.path === 'string' && l.path.startsWith('/v1/ppp'));
    assertCapped(line, 'path', path.length);
    assertCapped(line, 'downstream_request_id', rid.length);

    // The cut falls inside the first emoji (a surrogate pair): it is made before it, never inside.
    const emoji = `${'x'.repeat(CAP - 1)}${'😀'.repeat(100)}`;
    await postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: emoji, messages: [{ role: 'user', content: 'hi' }] }, { 'x-request-id': 'emoji' });
    const cut = await accessLine(gw, 'emoji');
    assertCapped(cut.line, 'model', emoji.length);
    assert.equal((cut.line.model as string).isWellFormed(), true, 'no lone surrogate');

    const model = 'q'.repeat(6000);
    const answer = await websocketHandshake(gw.proxyUrl, `/v1/realtime?model=${model}`, { 'x-request-id': 'rt-long' });
    assert.equal(answer.status, 404);
    const rt = await gw.waitForLog((l) => l.event === 'access' && l.downstream_request_id === 'rt-long');
    assertCapped(rt, 'model', model.length);
  } finally {
    await gw.stop();
  }
});

test('request_while_draining, the drain\'s line for each request, cuts the path and x-request-id too', async () => {
  // The default window (30 s): the drain is under way for the whole test.
  const gw = await startGateway({ config: {} });
  try {
    gw.signal('SIGTERM');
    await gw.waitForLog((l) => l.event === 'drain_started');
    const path = `/v1/${'d'.repeat(5000)}`;
    const rid = 'i'.repeat(5000);
    await httpRequest(`${gw.proxyUrl}${path}`, { headers: { 'x-request-id': rid } });
    const line = await gw.waitForLog((l) => l.event === 'request_while_draining');
    assertCapped(line, 'path', path.length);
    assertCapped(line, 'downstream_request_id', rid.length);
  } finally {
    await gw.stop();
  }
});
