// TLS and HTTP/2 listeners (issue: listeners drained correctly): ALPN, h2c, mutual TLS, handshake
// timeout, certificate reload, every endpoint over HTTP/2, and the two-step GOAWAY drain (L4).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { connect as http2Connect, type ClientHttp2Session, type IncomingHttpHeaders } from 'node:http2';
import { copyFileSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { Agent, fetch as undiciFetch } from 'undici';
import { startGateway, eventually, metricValue, scrape, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, mockHeader, type MockUpstream } from '../support/mock-upstream.ts';
import { makePki, type TestPki } from '../support/certs.ts';
import { closedAt, openSocket, isRefused } from '../support/http.ts';
import { requireTool } from '../support/system-tool.ts';

const openssl = requireTool('openssl', 'openssl');
const curl = requireTool('curl', 'curl');
const run = promisify(execFile);

let mock: MockUpstream;
let pki: TestPki;

before(async () => {
  mock = await startMockUpstream();
  if (!openssl.skip) pki = makePki();
});
after(async () => {
  await mock?.close();
});

function gatewayConfig(listener: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return {
    listeners: [
      { name: 'proxy', address: '127.0.0.1:0', role: 'proxy', ...listener },
      { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
    ],
    providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1` }],
    models: [{ name: 'm', provider: 'up' }],
    ...extra,
  };
}

const tlsFiles = () => ({ cert_file: pki.server.cert, key_file: pki.server.key });
const chat = (extra: Record<string, unknown> = {}) => ({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra });

function h2Session(url: string, options: Record<string, unknown> = {}): Promise<ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2Connect(url, options);
    session.once('connect', () => resolve(session));
    session.once('error', reject);
  });
}

interface H2Response {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

function h2Request(session: ClientHttp2Session, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<H2Response> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': body === undefined ? 'GET' : 'POST', ':path': path, 'content-type': 'application/json', ...headers });
    let responseHeaders: IncomingHttpHeaders = {};
    let text = '';
    stream.setEncoding('utf8');
    stream.on('response', (h) => (responseHeaders = h));
    stream.on('data', (chunk: string) => (text += chunk));
    stream.on('end', () => resolve({ status: Number(responseHeaders[':status']), headers: responseHeaders, body: text }));
    stream.on('error', reject);
    stream.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

function peerSerial(url: string, options: Record<string, unknown> = {}): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket: TLSSocket = tlsConnect({ host: hostname, port: Number(port), ca: pki.caPem, servername: 'localhost', ...options }, () => {
      const serial = socket.getPeerCertificate().serialNumber;
      socket.destroy();
      resolve(serial);
    });
    socket.once('error', reject);
  });
}

describe('TLS listener', { skip: openssl.skip }, () => {
  let gw: GatewayProcess;
  before(async () => {
    gw = await startGateway({ config: gatewayConfig({ tls: tlsFiles() }) });
  });
  after(async () => gw?.stop());

  const httpsUrl = () => gw.proxyUrl.replace('http:', 'https:');

  test('the openai SDK works over TLS with the test CA, streaming included', async () => {
    const dispatcher = new Agent({ connect: { ca: pki.caPem } });
    const client = new OpenAI({
      baseURL: `${httpsUrl()}/v1`,
      apiKey: 'unused',
      fetch: ((url: string, init: Record<string, unknown>) => undiciFetch(url, { ...init, dispatcher })) as unknown as typeof fetch,
    });
    const reply = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'over tls' }] });
    assert.equal(reply.choices[0]!.message.content, 'mock reply to: over tls');
    let text = '';
    const stream = await client.chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: 'streamed' }] });
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(text, 'mock reply to: streamed');
    await dispatcher.close();
  });

  test('ALPN picks h2 or http/1.1 on the same port', async () => {
    const { hostname, port } = new URL(gw.proxyUrl);
    const alpn = (protocols: string[]) =>
      new Promise<string | false>((resolve, reject) => {
        const socket = tlsConnect({ host: hostname, port: Number(port), ca: pki.caPem, servername: 'localhost', ALPNProtocols: protocols }, () => {
          resolve(socket.alpnProtocol ?? false);
          socket.destroy();
        });
        socket.once('error', reject);
      });
    assert.equal(await alpn(['h2', 'http/1.1']), 'h2');
    assert.equal(await alpn(['http/1.1']), 'http/1.1');
    const session = await h2Session(httpsUrl(), { ca: pki.caPem });
    const res = await h2Request(session, '/v1/chat/completions', chat());
    assert.equal(res.status, 200);
    session.close();
  });

  test('every endpoint over HTTP/2, SSE included, with the h2 protocol label', async () => {
    const session = await h2Session(httpsUrl(), { ca: pki.caPem });
    try {
      for (const [path, body] of [
        ['/v1/chat/completions', chat()],
        ['/v1/completions', { model: 'm', prompt: 'p' }],
        ['/v1/embeddings', { model: 'm', input: 'x' }],
        ['/v1/responses', { model: 'm', input: 'x' }],
      ] as const) {
        const res = await h2Request(session, path, body);
        assert.equal(res.status, 200, `${path}: ${res.body}`);
        assert.ok(res.headers['x-request-id']);
      }
      const models = await h2Request(session, '/v1/models');
      assert.equal(models.status, 200);
      const stream = await h2Request(session, '/v1/chat/completions', chat({ stream: true }), mockHeader({ chunks: 6 }));
      assert.equal(stream.status, 200);
      assert.ok(stream.body.trimEnd().endsWith('data: [DONE]'));
      const line = await gw.waitForLog((l) => l.event === 'access' && l.protocol === 'h2' && l.path === '/v1/embeddings');
      assert.equal(line.status, 200);
      const metrics = await scrape(gw);
      assert.ok((metricValue(metrics, 'sluice_requests_total', { endpoint: 'embeddings' }) ?? 0) >= 1);
      assert.equal(metricValue(metrics, 'sluice_in_flight_requests', { endpoint: 'chat_completions', protocol: 'h2' }), 0);
    } finally {
      session.close();
    }
  });

  test('curl --http2 reaches the gateway over TLS', { skip: curl.skip }, async () => {
    const { stdout } = await run('curl', ['-s', '--http2', '--cacert', pki.caCert, '-o', '-', '-w', '\\n%{http_version}', '-H', 'content-type: application/json', '-d', JSON.stringify(chat()), `${httpsUrl()}/v1/chat/completions`]);
    const lines = stdout.trim().split('\n');
    assert.equal(lines.at(-1), '2');
    assert.equal(JSON.parse(lines[0]!).object, 'chat.completion');
  });

  test('a TLS handshake that never completes is closed by the handshake timeout', async () => {
    const short = await startGateway({ config: gatewayConfig({ tls: { ...tlsFiles(), handshake_timeout_secs: 0.5 } }) });
    try {
      const socket = await openSocket(short.proxyUrl);
      const opened = Date.now();
      const at = await closedAt(socket);
      assert.ok(at - opened >= 300 && at - opened < 3000, `closed after ${at - opened} ms`);
      await eventually(async () => (metricValue(await scrape(short), 'sluice_connections_closed_total', { reason: 'tls_handshake_timeout' }) ?? 0) >= 1, 3000, 'closed-by-reason metric');
    } finally {
      await short.stop();
    }
  });
});

describe('h2-only TLS listener', { skip: openssl.skip }, () => {
  test('a client that negotiates no ALPN protocol is refused, and the gateway stays up', async () => {
    const gw = await startGateway({ config: gatewayConfig({ tls: tlsFiles(), protocols: ['h2'] }) });
    try {
      const { hostname, port } = new URL(gw.proxyUrl);
      const outcome = await new Promise<string>((resolve) => {
        const socket = tlsConnect({ host: hostname, port: Number(port), ca: pki.caPem, servername: 'localhost' }, () => {
          socket.write('GET /livez HTTP/1.1\r\nhost: x\r\n\r\n');
        });
        let data = '';
        socket.on('data', (d) => (data += d.toString()));
        socket.on('close', () => resolve(data === '' ? 'closed' : data));
        socket.on('error', () => {});
      });
      assert.equal(outcome, 'closed');
      const session = await h2Session(gw.proxyUrl.replace('http:', 'https:'), { ca: pki.caPem });
      assert.equal((await h2Request(session, '/livez')).status, 200, 'still serving');
      session.close();
    } finally {
      await gw.stop();
    }
  });
});

describe('mutual TLS', { skip: openssl.skip }, () => {
  test('a client without a certificate from the configured CA is rejected; one with it is served', async () => {
    const gw = await startGateway({ config: gatewayConfig({ tls: { ...tlsFiles(), client_ca_file: pki.caCert }, protocols: ['h2'] }) });
    try {
      const url = gw.proxyUrl.replace('http:', 'https:');
      const attempt = async (options: Record<string, unknown>) => {
        try {
          const session = await h2Session(url, { ca: pki.caPem, ...options });
          const res = await h2Request(session, '/v1/chat/completions', chat());
          session.close();
          return res.status;
        } catch (error) {
          return (error as NodeJS.ErrnoException).code ?? 'error';
        }
      };
      assert.equal(await attempt({ cert: pki.client.cert, key: pki.client.key }), 200);
      assert.notEqual(await attempt({}), 200);
      assert.notEqual(await attempt({ cert: pki.strangerClient.cert, key: pki.strangerClient.key }), 200);
    } finally {
      await gw.stop();
    }
  });
});

describe('certificate reload', { skip: openssl.skip }, () => {
  test('SIGHUP and file changes swap the certificate for new connections; existing ones keep working; a bad one is refused', async () => {
    const dir = pki.dir;
    const cert = `${dir}/live.crt`;
    const key = `${dir}/live.key`;
    copyFileSync(pki.server.cert, cert);
    copyFileSync(pki.server.key, key);
    const gw = await startGateway({ config: gatewayConfig({ tls: { cert_file: cert, key_file: key } }) });
    try {
      const url = gw.proxyUrl.replace('http:', 'https:');
      const first = await peerSerial(url);
      const session = await h2Session(url, { ca: pki.caPem });
      assert.equal((await h2Request(session, '/v1/chat/completions', chat())).status, 200);
      copyFileSync(pki.server2.cert, cert);
      copyFileSync(pki.server2.key, key);
      gw.signal('SIGHUP');
      await gw.waitForLog((l) => l.event === 'tls_reloaded');
      const second = await peerSerial(url);
      assert.notEqual(second, first);
      // The connection opened before the reload is untouched.
      assert.equal((await h2Request(session, '/v1/chat/completions', chat())).status, 200);
      session.close();
      // A key that does not match the certificate: the reload is refused whole (E6a), the current
      // certificate kept.
      copyFileSync(pki.server.key, key);
      gw.signal('SIGHUP');
      const failed = await gw.waitForLog((l) => l.event === 'config_reload_failed');
      assert.match(String(failed.reason), /rejected|key/i);
      assert.equal(await peerSerial(url), second);
      // Put a good pair back without a signal: the file watcher picks it up.
      const reloads = gw.logs.filter((l) => l.event === 'tls_reloaded').length;
      copyFileSync(pki.server.cert, cert);
      copyFileSync(pki.server.key, key);
      await eventually(() => gw.logs.filter((l) => l.event === 'tls_reloaded').length > reloads, 8000, 'file-change reload');
      await eventually(async () => (await peerSerial(url)) === first, 5000, 'original certificate back');
    } finally {
      await gw.stop();
    }
  });
});

describe('cleartext HTTP/2 (h2c, prior knowledge)', () => {
  test('one cleartext port serves HTTP/1.1 and h2c by the connection preface', async () => {
    const gw = await startGateway({ config: gatewayConfig({ protocols: ['http1', 'h2'] }) });
    try {
      const session = await h2Session(gw.proxyUrl);
      const viaH2 = await h2Request(session, '/v1/chat/completions', chat());
      assert.equal(viaH2.status, 200);
      session.close();
      const viaH1 = await fetch(`${gw.proxyUrl}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(chat()) });
      assert.equal(viaH1.status, 200);
      if (!curl.skip) {
        const { stdout } = await run('curl', ['-s', '--http2-prior-knowledge', '-o', '/dev/null', '-w', '%{http_version} %{http_code}', `${gw.proxyUrl}/readyz`]);
        assert.equal(stdout, '2 200');
      }
    } finally {
      await gw.stop();
    }
  });
});

describe('L4: HTTP/2 drain', () => {
  test('an SSE stream over HTTP/2 spanning the drain completes; the session gets one GOAWAY with the real last stream id at once; new streams go to a new connection', async () => {
    const gw = await startGateway({
      config: gatewayConfig({ protocols: ['h2'] }, { shutdown: { min_drain_secs: 0.5 }, downstream: { drain_timeout_secs: 0.5 } }),
    });
    try {
      const session = await h2Session(gw.proxyUrl);
      const goaways: number[] = [];
      session.on('goaway', (_code: number, lastStreamId: number) => goaways.push(lastStreamId));
      session.on('error', () => {});
      const streaming = h2Request(session, '/v1/chat/completions', chat({ stream: true }), mockHeader({ chunks: 20, sseIntervalMs: 100 }));
      await mock.waitFor((r) => r.some((x) => x.headers['x-mock']?.includes('"chunks":20')));
      gw.signal('SIGTERM');
      await eventually(() => goaways.length >= 1, 3000, 'GOAWAY');
      // Not a notice with the largest id: Node's HTTP/2 ignores every stream after any GOAWAY (see
      // src/server/http2.ts), so the real last stream id goes out at once.
      assert.equal(goaways[0], 1, 'the GOAWAY carries the real last stream id');
      // No new stream on the retired session...
      const refused = await new Promise<string>((resolve) => {
        const stream = session.request({ ':path': '/readyz' });
        stream.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
        stream.on('response', () => resolve('served'));
      });
      assert.equal(refused, 'ERR_HTTP2_GOAWAY_SESSION');
      // ...but a new connection is accepted and served while the stream runs.
      const fresh = await h2Session(gw.proxyUrl);
      fresh.on('error', () => {});
      const res = await h2Request(fresh, '/v1/chat/completions', chat());
      assert.equal(res.status, 200);
      assert.ok(goaways.every((id) => id === 1), `GOAWAYs: ${JSON.stringify(goaways)}`);
      const done = await streaming;
      assert.equal(done.status, 200);
      assert.ok(done.body.trimEnd().endsWith('data: [DONE]'), 'stream cut during the drain');
      assert.ok(!done.body.includes('event: error'));
      assert.equal((await gw.exited).code, 0);
      assert.ok(await isRefused(gw.proxyUrl));
    } finally {
      await gw.stop();
    }
  });
});
