// Issue 24, defect 9 (second half): a 5 MB model name was written whole into the access log line.
// Every client-supplied string in a log line (model, path, method, the client's x-request-id) is
// cut to 256 characters, with the original length beside it (`model_length`, …), at the default
// settings: through a routed request, a refused one, a realtime handshake and the drain's
// `request_while_draining` line.
// Found in the review of #24: a bidirectional override (U+202E: what follows shows reversed) and
// the other control characters JSON leaves raw (C1, DEL, the line separators, the bidi marks and
// isolates) went raw into the JSON lines and pino-pretty's: a model name could make a log line
// read otherwise on the operator's terminal. They are written as the text `\u202e`.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { httpRequest, postJson, websocketHandshake } from '../support/http.ts';
import { eventually } from '../support/gateway-process.ts';
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

/** What must never reach a log raw: the control characters JSON.stringify does not escape. */
const RAW_CONTROL = /[\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/;
/** A model name that reads `gpt-4o` then, reversed, `lanigiro` ("original"), isolates and a C1 CSI. */
const SNEAKY_MODEL = 'gpt-4o\u202elanigiro\u2066x\u2069\u009b2J\u2028';
const SNEAKY_ESCAPED = 'gpt-4o\\u202elanigiro\\u2066x\\u2069\\u009b2J\\u2028';

/** The raw bytes of a UTF-8 U+202E and a C1 CSI, as an HTTP/1.1 header value (read by Node as latin1). */
const SNEAKY_ID = `rid-${Buffer.from('\u202e', 'utf8').toString('latin1')}\u009b-x`;

for (const format of ['json', 'pretty'] as const) {
  test(`bidirectional overrides and other raw controls in a model, a realtime model and an x-request-id are escaped in ${format} log lines`, async () => {
    const gw = await startGateway({
      config: { providers: [{ name: 'echo', type: 'echo' }], models: [{ name: '*', provider: 'echo' }], ...(format === 'pretty' ? { log: { format } } : {}) },
      waitReady: format === 'json',
    });
    try {
      if (format === 'pretty') await eventually(() => gw.stdout().includes('sluice is ready'), 30_000, 'ready');
      const proxy = format === 'json' ? gw.proxyUrl : `http://127.0.0.1:${/listening on 127\.0\.0\.1:(\d+) \(proxy\)/.exec(gw.stdout())![1]}`;
      const served = await postJson(`${proxy}/v1/chat/completions`, { model: SNEAKY_MODEL, messages: [{ role: 'user', content: 'hi' }] }, { 'x-request-id': 'sneaky-model' });
      assert.equal(served.status, 200, served.body);
      const rt = await websocketHandshake(proxy, `/v1/realtime?model=${encodeURIComponent(SNEAKY_MODEL)}`, { 'x-request-id': 'sneaky-realtime' });
      assert.notEqual(rt.status, 0);
      const id = await httpRequest(`${proxy}/v1/models`, { headers: { 'x-request-id': SNEAKY_ID } });
      assert.equal(id.status, 200);
      await eventually(() => gw.stdout().includes('sneaky-realtime') && gw.stdout().includes('rid-'), 10_000, 'the three access lines');
      const out = gw.stdout();
      const raw = RAW_CONTROL.exec(out);
      assert.equal(raw, null, raw ? `a raw U+${raw[0].charCodeAt(0).toString(16).padStart(4, '0')} in the output: ${JSON.stringify(out.slice(Math.max(0, raw.index - 200), raw.index + 50))}` : '');
      if (format === 'json') {
        const model = gw.logs.find((l) => l.event === 'access' && l.downstream_request_id === 'sneaky-model');
        assert.equal(model?.model, SNEAKY_ESCAPED, JSON.stringify(model));
        const realtime = gw.logs.find((l) => l.event === 'access' && l.downstream_request_id === 'sneaky-realtime');
        assert.equal(realtime?.model, SNEAKY_ESCAPED, JSON.stringify(realtime));
        const ids = gw.logs.filter((l) => l.event === 'access' && String(l.downstream_request_id).startsWith('rid-')).map((l) => l.downstream_request_id);
        assert.deepEqual(ids, ['rid-\u00e2\\u0080\u00ae\\u009b-x'], 'the x-request-id, its C1 controls escaped');
      } else {
        // pino-pretty shows the escapes' text as it is.
        assert.ok(out.includes(SNEAKY_ESCAPED), `the pretty lines show the escapes: ${JSON.stringify(out.split('\n').filter((l) => l.includes('sneaky')))}`);
      }
    } finally {
      await gw.stop();
    }
  });
}
