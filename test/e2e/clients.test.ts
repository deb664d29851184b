// docs/clients.md, client by client: each test uses the client exactly as that page says (the same
// package, constructor, base URL and call) against the built gateway. The parts of the `openai` and
// `@anthropic-ai/sdk` sections that test/e2e/sdk.test.ts already covers (chat, streaming,
// embeddings, responses, models, messages, errors) are not repeated here; this file adds what the
// page says beyond them: the realtime client on a plain and a TLS listener, the base-URL pitfalls,
// the Vercel AI SDK, LangChain and curl.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect, type TcpNetConnectOpts } from 'node:net';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import Anthropic from '@anthropic-ai/sdk';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { APICallError, embed, generateText, streamText } from 'ai';
import { ChatOpenAI, OpenAIEmbeddings } from '@langchain/openai';
import { ChatAnthropic } from '@langchain/anthropic';
import { ROOT, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { makePki, type TestPki } from '../support/certs.ts';
import { requireTool } from '../support/system-tool.ts';
import type { RealtimeSessionRecord } from '../support/mock-realtime.ts';

const openssl = requireTool('openssl', 'openssl');
const curl = requireTool('curl', 'curl');
const run = promisify(execFile);

// The key the page's snippets use, so that they run here as written.
const CLIENT_KEY = 'a-sluice-client-key';
const OPENAI_PROVIDER_KEY = 'sk-provider-openai-clients-secret';
const ANTHROPIC_PROVIDER_KEY = 'sk-ant-provider-clients-secret';

let mock: MockUpstream;
let gw: GatewayProcess;
let pki: TestPki | undefined;
/** http://127.0.0.1:PORT of the plain proxy listener (the page's http://127.0.0.1:8080). */
let base: string;
/** https://127.0.0.1:PORT of the TLS proxy listener, when openssl is there to make certificates. */
let tlsBase: string | undefined;

before(async () => {
  mock = await startMockUpstream();
  if (!openssl.skip) pki = makePki();
  const listeners: Record<string, unknown>[] = [
    // The page's curl section: `protocols: [http1, h2]` serves HTTP/2 with prior knowledge too.
    { name: 'proxy', address: '127.0.0.1:0', role: 'proxy', protocols: ['http1', 'h2'] },
    { name: 'admin', address: '127.0.0.1:0', role: 'admin' },
  ];
  if (pki) listeners.push({ name: 'proxy-tls', address: '127.0.0.1:0', role: 'proxy', tls: { cert_file: pki.server.cert, key_file: pki.server.key } });
  gw = await startGateway({
    config: {
      listeners,
      providers: [
        { name: 'openai', type: 'openai', base_url: `${mock.url}/v1`, api_key: OPENAI_PROVIDER_KEY },
        { name: 'anthropic', type: 'anthropic', base_url: mock.url, api_key: ANTHROPIC_PROVIDER_KEY },
        { name: 'local', type: 'echo' },
      ],
      models: [
        { name: 'gpt-test', provider: 'openai' },
        { name: 'embed-test', provider: 'openai' },
        { name: 'realtime-test', provider: 'openai' },
        { name: 'gpt-realtime', provider: 'openai' },
        { name: 'claude-test', provider: 'anthropic' },
        { name: 'echo', provider: 'local' },
      ],
      keys: [CLIENT_KEY],
    },
  });
  base = gw.urls.proxy!;
  if (pki) tlsBase = gw.urls['proxy-tls']!.replace('http:', 'https:');
});

after(async () => {
  await gw?.stop();
  await mock?.close();
});

/** The recorded upstream requests' paths (realtime sessions without their query). */
const upstreamPaths = (): string[] => mock.received.map((r) => r.path.split('?')[0]!);

/** Every upstream request carried the provider's key, never the client's. */
function assertProviderKeys(): void {
  for (const seen of mock.received) {
    const all = JSON.stringify(seen.headers) + seen.body;
    assert.ok(!all.includes(CLIENT_KEY), `the client key reached the upstream on ${seen.path}`);
    if (seen.path.startsWith('/v1/messages')) assert.equal(seen.headers['x-api-key'], ANTHROPIC_PROVIDER_KEY);
    else assert.equal(seen.headers.authorization, `Bearer ${OPENAI_PROVIDER_KEY}`);
  }
}

// ---------------------------------------------------------------------------------------------
describe('openai SDK: realtime', () => {
  interface RealtimeRun {
    events: string[];
    text: string;
  }

  /** Opens a session, asks for one response, collects the events until response.done, closes. */
  function converse(rt: OpenAIRealtimeWS): Promise<RealtimeRun> {
    return new Promise((resolve, reject) => {
      const events: string[] = [];
      let text = '';
      const timer = setTimeout(() => reject(new Error(`no response.done; events: ${events.join(', ')}`)), 10_000);
      rt.on('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      rt.on('event', (event) => events.push(event.type));
      rt.on('session.created', () => rt.send({ type: 'response.create' }));
      rt.on('response.output_text.delta', (event) => (text += event.delta));
      rt.on('response.done', () => {
        clearTimeout(timer);
        rt.close();
        resolve({ events, text });
      });
    });
  }

  test('as the SDK ships, it dials wss:// and a plain listener cannot answer it (why the page has a workaround)', async () => {
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: CLIENT_KEY });
    const rt = new OpenAIRealtimeWS({ model: 'realtime-test' }, client);
    assert.equal(rt.url.protocol, 'wss:');
    const error = await new Promise<Error>((resolve) => rt.on('error', resolve));
    assert.match(String(error.message), /wrong version number/);
  });

  test('on a plain listener: the page\'s createConnection option', async () => {
    mock.reset();
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: CLIENT_KEY });
    const rt = new OpenAIRealtimeWS(
      {
        model: 'realtime-test',
        // The SDK always dials wss://; this listener has no TLS: connect over plain TCP instead.
        options: { createConnection: ((o: TcpNetConnectOpts) => connect({ host: o.host, port: o.port })) as typeof connect },
      },
      client,
    );
    const result = await converse(rt);
    assert.deepEqual(result.events, ['session.created', 'response.output_text.delta', 'response.done']);
    assert.equal(result.text, 'mock');
    await mock.waitFor((r) => (r[0] as RealtimeSessionRecord | undefined)?.closed === true);
    assert.deepEqual(upstreamPaths(), ['/v1/realtime']);
    assert.match(mock.received[0]!.path, /[?&]model=realtime-test(&|$)/);
    assertProviderKeys();
  });

  test('on a TLS listener: as shipped, with the CA for a private certificate', { skip: openssl.skip }, async () => {
    mock.reset();
    const client = new OpenAI({ baseURL: `${tlsBase!}/v1`, apiKey: CLIENT_KEY });
    const rt = new OpenAIRealtimeWS({ model: 'realtime-test', options: { ca: pki!.caPem } }, client);
    const result = await converse(rt);
    assert.equal(result.text, 'mock');
    assertProviderKeys();
  });
});

// ---------------------------------------------------------------------------------------------
describe('@anthropic-ai/sdk: the base URL has no /v1', () => {
  test('with /v1 the SDK asks for /v1/v1/messages: a 404 that names the path', async () => {
    mock.reset();
    const wrong = new Anthropic({ baseURL: `${base}/v1`, apiKey: CLIENT_KEY, maxRetries: 0 });
    await assert.rejects(wrong.messages.create({ model: 'claude-test', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }), (error: unknown) => {
      assert.ok(error instanceof Anthropic.NotFoundError, `got ${String(error)}`);
      assert.match(String(error.message), /\/v1\/v1\/messages/);
      return true;
    });
    assert.equal(mock.received.length, 0);
  });

  test('errors are SDK error classes whose apiMessage is the plain message', async () => {
    const anthropic = new Anthropic({ baseURL: base, apiKey: CLIENT_KEY, maxRetries: 0 });
    await assert.rejects(anthropic.messages.create({ model: 'no-such-model', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }), (error: unknown) => {
      assert.ok(error instanceof Anthropic.NotFoundError, `got ${String(error)}`);
      assert.equal(error.status, 404);
      assert.equal(typeof error.apiMessage, 'string');
      assert.match(error.apiMessage!, /no-such-model/);
      assert.ok(!error.apiMessage!.startsWith('{'), `raw JSON as the message: ${error.apiMessage}`);
      return true;
    });
  });
});

// ---------------------------------------------------------------------------------------------
describe('Vercel AI SDK', () => {
  const openai = () => createOpenAI({ baseURL: `${base}/v1`, apiKey: CLIENT_KEY });
  const anthropic = () => createAnthropic({ baseURL: `${base}/v1`, apiKey: CLIENT_KEY });

  test('openai.chat(...): generateText and streamText over /v1/chat/completions', async () => {
    mock.reset();
    const { text, usage } = await generateText({ model: openai().chat('gpt-test'), prompt: 'ping' });
    assert.equal(text, 'mock reply to: ping');
    assert.equal(usage.outputTokens, 7);
    const result = streamText({ model: openai().chat('gpt-test'), prompt: 'stream please' });
    let streamed = '';
    for await (const delta of result.textStream) streamed += delta;
    assert.equal(streamed, 'mock reply to: stream please');
    assert.deepEqual(upstreamPaths(), ['/v1/chat/completions', '/v1/chat/completions']);
    assertProviderKeys();
  });

  test('openai(...) is the Responses API: /v1/responses, plain and streamed', async () => {
    mock.reset();
    const { text } = await generateText({ model: openai()('gpt-test'), prompt: 'hello' });
    assert.equal(text, 'mock');
    const result = streamText({ model: openai()('gpt-test'), prompt: 'hello' });
    let streamed = '';
    for await (const delta of result.textStream) streamed += delta;
    assert.equal(streamed, 'mock');
    assert.deepEqual(upstreamPaths(), ['/v1/responses', '/v1/responses']);
    assertProviderKeys();
  });

  test('openai.embedding(...): embed over /v1/embeddings', async () => {
    mock.reset();
    const { embedding } = await embed({ model: openai().embedding('embed-test'), value: 'one' });
    assert.equal(embedding.length, 8);
    assert.deepEqual(upstreamPaths(), ['/v1/embeddings']);
  });

  test('openai(...) or openai.chat(...) on an Anthropic-type model: translated to /v1/messages and back', async () => {
    for (const model of [openai()('claude-test'), openai().chat('claude-test')]) {
      mock.reset();
      const { text } = await generateText({ model, prompt: 'hi', maxRetries: 0 });
      assert.ok(text.length > 0, 'the answer has text');
      assert.deepEqual(upstreamPaths(), ['/v1/messages']);
    }
  });

  test('streamText does not throw: a gateway error reaches onError, and the text stream is empty', async () => {
    const errors: unknown[] = [];
    const result = streamText({ model: openai()('no-such-model'), prompt: 'hi', maxRetries: 0, onError: ({ error }) => void errors.push(error) });
    let streamed = '';
    for await (const delta of result.textStream) streamed += delta;
    assert.equal(streamed, '');
    assert.equal(errors.length, 1);
    assert.ok(APICallError.isInstance(errors[0]));
    assert.equal((errors[0] as APICallError).statusCode, 404);
    assert.match((errors[0] as APICallError).message, /no-such-model/);
  });

  test('@ai-sdk/anthropic wants the base URL with /v1: generateText and streamText over /v1/messages', async () => {
    mock.reset();
    const { text } = await generateText({ model: anthropic()('claude-test'), prompt: 'hi', maxOutputTokens: 1024 });
    assert.equal(text, 'mock reply');
    assert.equal((mock.received[0]!.json as { max_tokens: number }).max_tokens, 1024);
    const result = streamText({ model: anthropic()('claude-test'), prompt: 'hi', maxOutputTokens: 1024 });
    let streamed = '';
    for await (const delta of result.textStream) streamed += delta;
    assert.equal(streamed, 'mock reply');
    assert.deepEqual(upstreamPaths(), ['/v1/messages', '/v1/messages']);
    assertProviderKeys();
  });

  test('@ai-sdk/anthropic: a gateway error on /v1/messages surfaces with its message', async () => {
    await assert.rejects(generateText({ model: anthropic()('no-such-model'), prompt: 'hi', maxOutputTokens: 64, maxRetries: 0 }), (error: unknown) => {
      assert.ok(APICallError.isInstance(error), `got ${String(error)}`);
      assert.equal(error.statusCode, 404);
      assert.equal(error.message, 'model "no-such-model" is not configured on this gateway');
      return true;
    });
  });

  test('against the echo model: both providers', async () => {
    mock.reset();
    assert.equal((await generateText({ model: openai().chat('echo'), prompt: 'hello echo' })).text, 'echo: hello echo');
    assert.equal((await generateText({ model: openai()('echo'), prompt: 'hello echo' })).text, 'echo: hello echo');
    assert.equal((await generateText({ model: anthropic()('echo'), prompt: 'hello echo', maxOutputTokens: 1024 })).text, 'echo: hello echo');
    assert.equal((await embed({ model: openai().embedding('echo'), value: 'hi' })).embedding.length, 16);
    assert.equal(mock.received.length, 0);
  });
});

// ---------------------------------------------------------------------------------------------
describe('LangChain JS', () => {
  test('ChatOpenAI with configuration.baseURL: invoke and stream', async () => {
    mock.reset();
    const model = new ChatOpenAI({ model: 'gpt-test', apiKey: CLIENT_KEY, configuration: { baseURL: `${base}/v1` } });
    const reply = await model.invoke('ping');
    assert.equal(reply.content, 'mock reply to: ping');
    let streamed = '';
    for await (const chunk of await model.stream('stream please')) streamed += String(chunk.content);
    assert.equal(streamed, 'mock reply to: stream please');
    assert.deepEqual(upstreamPaths(), ['/v1/chat/completions', '/v1/chat/completions']);
    assertProviderKeys();
  });

  test('OpenAIEmbeddings with configuration.baseURL', async () => {
    mock.reset();
    const embeddings = new OpenAIEmbeddings({ model: 'embed-test', apiKey: CLIENT_KEY, configuration: { baseURL: `${base}/v1` } });
    const vectors = await embeddings.embedDocuments(['one', 'two']);
    assert.equal(vectors.length, 2);
    assert.equal(vectors[0]!.length, 8);
    assert.deepEqual(upstreamPaths(), ['/v1/embeddings']);
  });

  test('ChatAnthropic with anthropicApiUrl (no /v1): invoke and stream', async () => {
    mock.reset();
    const model = new ChatAnthropic({ model: 'claude-test', apiKey: CLIENT_KEY, anthropicApiUrl: base });
    const reply = await model.invoke('hi');
    assert.equal(reply.content, 'mock reply');
    let streamed = '';
    for await (const chunk of await model.stream('hi')) streamed += typeof chunk.content === 'string' ? chunk.content : '';
    assert.equal(streamed, 'mock reply');
    assert.deepEqual(upstreamPaths(), ['/v1/messages', '/v1/messages']);
    assertProviderKeys();
  });

  test('against the echo model, as on the page', async () => {
    mock.reset();
    const chat = new ChatOpenAI({ model: 'echo', apiKey: CLIENT_KEY, configuration: { baseURL: `${base}/v1` } });
    assert.equal((await chat.invoke('hi')).content, 'echo: hi');
    const embeddings = new OpenAIEmbeddings({ model: 'echo', apiKey: CLIENT_KEY, configuration: { baseURL: `${base}/v1` } });
    assert.equal((await embeddings.embedDocuments(['one', 'two'])).length, 2);
    const claude = new ChatAnthropic({ model: 'echo', apiKey: CLIENT_KEY, anthropicApiUrl: base });
    assert.equal((await claude.invoke('hi')).content, 'echo: hi');
    assert.equal(mock.received.length, 0);
  });

  test('a gateway error surfaces with its status and message', async () => {
    const chat = new ChatOpenAI({ model: 'no-such-model', apiKey: CLIENT_KEY, maxRetries: 0, configuration: { baseURL: `${base}/v1` } });
    await assert.rejects(chat.invoke('hi'), (error: unknown) => {
      assert.ok(error instanceof OpenAI.NotFoundError || (error as { status?: number }).status === 404, `got ${String(error)}`);
      assert.match(String((error as Error).message), /model "no-such-model" is not configured/);
      return true;
    });
  });
});

// ---------------------------------------------------------------------------------------------
describe('environment variables', () => {
  /** Runs `body` with the variables set (the SDKs read some when created, some per request), then
   *  puts the environment back. The tests of one file run one at a time. */
  async function withEnv(vars: Record<string, string>, body: () => Promise<void>): Promise<void> {
    const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
    Object.assign(process.env, vars);
    try {
      await body();
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  }

  test('OPENAI_BASE_URL with /v1 serves the openai SDK and @ai-sdk/openai alike', () =>
    withEnv({ OPENAI_BASE_URL: `${base}/v1`, OPENAI_API_KEY: CLIENT_KEY }, async () => {
      const completion = await new OpenAI().chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'a' }] });
      assert.equal(completion.choices[0]!.message.content, 'echo: a');
      assert.equal((await generateText({ model: createOpenAI().chat('echo'), prompt: 'b' })).text, 'echo: b');
    }));

  test('ANTHROPIC_BASE_URL: without /v1 for the Anthropic SDK, with /v1 for @ai-sdk/anthropic', async () => {
    await withEnv({ ANTHROPIC_BASE_URL: base, ANTHROPIC_API_KEY: CLIENT_KEY }, async () => {
      const message = await new Anthropic().messages.create({ model: 'echo', max_tokens: 64, messages: [{ role: 'user', content: 'a' }] });
      assert.deepEqual(message.content, [{ type: 'text', text: 'echo: a' }]);
      // The same value sends @ai-sdk/anthropic to /messages, which is no route.
      await assert.rejects(generateText({ model: createAnthropic()('echo'), prompt: 'c', maxOutputTokens: 64, maxRetries: 0 }), (error: unknown) => {
        assert.ok(APICallError.isInstance(error), `got ${String(error)}`);
        assert.equal(error.statusCode, 404);
        assert.match(error.responseBody ?? '', /no route for \/messages/);
        return true;
      });
    });
    await withEnv({ ANTHROPIC_BASE_URL: `${base}/v1`, ANTHROPIC_API_KEY: CLIENT_KEY }, async () => {
      assert.equal((await generateText({ model: createAnthropic()('echo'), prompt: 'b', maxOutputTokens: 64 })).text, 'echo: b');
    });
  });
});

// ---------------------------------------------------------------------------------------------
describe('curl', { skip: curl.skip }, () => {
  const chat = (extra: Record<string, unknown> = {}) => JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hello' }], ...extra });
  const auth = () => `authorization: Bearer ${CLIENT_KEY}`;

  test('JSON', async () => {
    const { stdout } = await run('curl', ['-s', `${base}/v1/chat/completions`, '-H', auth(), '-H', 'content-type: application/json', '-d', chat()]);
    const body = JSON.parse(stdout) as { choices: { message: { content: string } }[] };
    assert.equal(body.choices[0]!.message.content, 'echo: hello');
  });

  test('SSE with -N: events arrive as data lines and end with [DONE]', async () => {
    const { stdout } = await run('curl', ['-sN', `${base}/v1/chat/completions`, '-H', auth(), '-H', 'content-type: application/json', '-d', chat({ stream: true })]);
    const data = stdout.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6));
    assert.equal(data.at(-1), '[DONE]');
    const text = data.slice(0, -1).map((d) => (JSON.parse(d) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? '').join('');
    assert.equal(text, 'echo: hello');
  });

  test('Anthropic Messages with x-api-key', async () => {
    const body = JSON.stringify({ model: 'echo', max_tokens: 64, messages: [{ role: 'user', content: 'hello' }] });
    const { stdout } = await run('curl', ['-s', `${base}/v1/messages`, '-H', `x-api-key: ${CLIENT_KEY}`, '-H', 'anthropic-version: 2023-06-01', '-H', 'content-type: application/json', '-d', body]);
    assert.deepEqual((JSON.parse(stdout) as { content: unknown }).content, [{ type: 'text', text: 'echo: hello' }]);
  });

  test('--http2 on an http:// URL: the h2c upgrade is declined, the answer comes over HTTP/1.1', async () => {
    const { stdout } = await run('curl', ['-s', '--http2', '-w', '\\n%{http_version} %{http_code}', `${base}/v1/chat/completions`, '-H', auth(), '-H', 'content-type: application/json', '-d', chat()]);
    const [body, version] = stdout.split('\n');
    assert.equal(version, '1.1 200');
    assert.equal((JSON.parse(body!) as { choices: { message: { content: string } }[] }).choices[0]!.message.content, 'echo: hello');
  });

  test('HTTP/2 with prior knowledge on a listener with protocols [http1, h2]', async () => {
    const { stdout } = await run('curl', ['-s', '--http2-prior-knowledge', '-w', '\\n%{http_version}', `${base}/v1/chat/completions`, '-H', auth(), '-H', 'content-type: application/json', '-d', chat()]);
    const [body, version] = stdout.split('\n');
    assert.equal(version, '2');
    assert.equal((JSON.parse(body!) as { choices: { message: { content: string } }[] }).choices[0]!.message.content, 'echo: hello');
  });

  test('HTTP/2 over TLS: --http2 negotiates h2 by ALPN', { skip: openssl.skip }, async () => {
    const { stdout } = await run('curl', ['-s', '--http2', '--cacert', pki!.caCert, '-w', '\\n%{http_version}', `${tlsBase!}/v1/chat/completions`, '-H', auth(), '-H', 'content-type: application/json', '-d', chat()]);
    const [body, version] = stdout.split('\n');
    assert.equal(version, '2');
    assert.equal((JSON.parse(body!) as { choices: { message: { content: string } }[] }).choices[0]!.message.content, 'echo: hello');
  });
});

// ---------------------------------------------------------------------------------------------
// The page's code blocks themselves, run as written: only the address (127.0.0.1:8080, or
// 127.0.0.1:8443 for TLS) and the CA file's name are replaced by this gateway's.
describe('docs/clients.md, its code blocks run as written', () => {
  const page = readFileSync(join(ROOT, 'docs', 'clients.md'), 'utf8');
  const blocks = (lang: string): string[] => [...page.matchAll(new RegExp('^```' + lang + '\\n([\\s\\S]*?)^```$', 'gm'))].map((m) => m[1]!);
  const localize = (code: string): string => {
    let out = code.replaceAll('http://127.0.0.1:8080', base);
    if (tlsBase) out = out.replaceAll('https://127.0.0.1:8443', tlsBase);
    if (pki) out = out.replaceAll("readFileSync('ca.crt')", `readFileSync(${JSON.stringify(pki.caCert)})`);
    return out;
  };

  /** Runs a TypeScript snippet as a module file inside the repository (so it finds node_modules). */
  function runSnippet(code: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const dir = mkdtempSync(join(ROOT, 'test', '.snippet-'));
    const file = join(dir, 'snippet.ts');
    writeFileSync(file, localize(code));
    return new Promise((resolve, reject) => {
      const env = { ...process.env };
      for (const name of ['OPENAI_BASE_URL', 'OPENAI_API_KEY', 'ANTHROPIC_BASE_URL', 'ANTHROPIC_API_KEY', 'ANTHROPIC_API_URL']) delete env[name];
      const child = spawn(process.execPath, [file], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
      child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      child.on('error', reject);
      child.on('close', (exitCode) => {
        clearTimeout(timer);
        rmSync(dir, { recursive: true, force: true });
        resolve({ code: exitCode, stdout, stderr });
      });
    });
  }

  const ts = blocks('ts');
  const snippet = (marker: string): string => {
    const found = ts.filter((b) => b.includes(marker));
    assert.equal(found.length, 1, `one ts block with ${marker} on the page`);
    return found[0]!;
  };

  test('every ts block is one of the runs below', () => {
    assert.equal(ts.length, 6);
  });

  test('openai', async () => {
    const result = await runSnippet(snippet("openai.responses.create"));
    assert.equal(result.code, 0, result.stderr);
    // The streamed text, then the model ids, one a line.
    assert.ok(result.stdout.startsWith('echo: hi'), result.stdout);
    assert.deepEqual(result.stdout.slice('echo: hi'.length).trimEnd().split('\n').sort(), ['claude-test', 'echo', 'embed-test', 'gpt-realtime', 'gpt-test', 'realtime-test']);
  });

  for (const [name, marker] of [['realtime, TLS listener', "readFileSync('ca.crt')"], ['realtime, plain listener', 'createConnection']] as const) {
    test(name, { skip: marker.includes('ca.crt') ? openssl.skip : false }, async () => {
      mock.reset();
      const result = await runSnippet(snippet(marker));
      assert.equal(result.code, 0, result.stderr);
      await mock.waitFor((r) => (r[0] as RealtimeSessionRecord | undefined)?.closed === true);
      const session = mock.received[0] as RealtimeSessionRecord;
      assert.equal(session.path, '/v1/realtime?model=gpt-realtime');
      assert.deepEqual(session.messages.map((m) => (JSON.parse(m) as { type: string }).type), ['response.create']);
    });
  }

  test('@anthropic-ai/sdk', async () => {
    const result = await runSnippet(snippet('new Anthropic('));
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, 'echo: hi');
  });

  test('Vercel AI SDK', async () => {
    const result = await runSnippet(snippet('createOpenAI('));
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, 'echo: hi');
  });

  test('LangChain JS', async () => {
    const result = await runSnippet(snippet('new ChatOpenAI('));
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, 'echo: hi');
  });

  test('curl', { skip: curl.skip }, async () => {
    const sh = blocks('sh');
    assert.equal(sh.length, 1);
    const { stdout } = await run('sh', ['-ec', localize(sh[0]!)]);
    // curl adds no newline: the three answers follow each other.
    const sse = stdout.indexOf('data: ');
    const done = stdout.indexOf('data: [DONE]\n\n');
    assert.ok(sse > 0 && done > sse, stdout);
    const chat = JSON.parse(stdout.slice(0, sse)) as { choices: { message: { content: string } }[] };
    assert.equal(chat.choices[0]!.message.content, 'echo: hello');
    const deltas = stdout.slice(sse, done).split('\n').filter((l) => l.startsWith('data: '));
    assert.equal(deltas.map((l) => (JSON.parse(l.slice(6)) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? '').join(''), 'echo: hello');
    const message = JSON.parse(stdout.slice(done + 'data: [DONE]\n\n'.length)) as { content: unknown };
    assert.deepEqual(message.content, [{ type: 'text', text: 'echo: hello' }]);
  });
});
