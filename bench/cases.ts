// The per-case gateway set-up shared by bench/ab.ts (two builds compared) and bench/profile.ts (one
// build profiled): the production config (client keys, access log to a pipe, metrics) with an
// OpenAI-type and an Anthropic-type provider on the mock, and a key whose limits and budget are
// counted but never refuse at a bench's rate.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { startServer, type Server } from './processes.ts';
import { wrkPostScript } from './wrk.ts';

export const KEYS = { plain: 'sk-bench-client-key', limited: 'sk-bench-limited-key' };

export interface Case { name: string; id: string; body: object; key: keyof typeof KEYS; mock?: object }

const ASK = [{ role: 'user', content: 'Say hello' }];
export const ALL_CASES: Case[] = [
  { id: 'chat', name: 'chat', body: { model: 'bench', messages: ASK, max_tokens: 16 }, key: 'plain' },
  { id: 'stream', name: 'chat stream (50 chunks)', body: { model: 'bench', messages: ASK, stream: true }, key: 'plain', mock: { chunks: 50 } },
  { id: 'stream-usage', name: 'chat stream (50 chunks), usage asked', body: { model: 'bench', messages: ASK, stream: true, stream_options: { include_usage: true } }, key: 'plain', mock: { chunks: 50 } },
  { id: 'translated', name: 'chat stream (50 chunks), translated to Anthropic', body: { model: 'claude-bench', messages: ASK, stream: true, max_tokens: 64 }, key: 'plain', mock: { chunks: 50 } },
  { id: 'limits', name: 'chat, key with limits and budget (memory)', body: { model: 'bench', messages: ASK, max_tokens: 16 }, key: 'limited' },
  { id: 'limits-stream', name: 'chat stream (50 chunks), key with limits and budget', body: { model: 'bench', messages: ASK, stream: true }, key: 'limited', mock: { chunks: 50 } },
];

/** The cases named in `list` (comma-separated ids), or all; exits 2 on a name that is none. */
export function pickCases(list: string | undefined): Case[] {
  const wanted = list?.split(',');
  const cases = wanted ? ALL_CASES.filter((c) => wanted.includes(c.id)) : ALL_CASES;
  if (cases.length === 0 || (wanted && cases.length !== wanted.length)) {
    process.stderr.write(`no such case; the cases: ${ALL_CASES.map((c) => c.id).join(', ')}\n`);
    process.exit(2);
  }
  return cases;
}

/**
 * The cloud providers on the same mock (its Converse and generateContent answers), for the
 * translations' bench only: a build from before they existed would refuse the config. A Bedrock
 * provider signs every request, with keys from the environment (CLOUD_ENV).
 */
const cloudProviders = (mockUrl: string) => [
  { name: 'mock-bedrock', type: 'bedrock', region: 'us-east-1', base_url: mockUrl },
  { name: 'mock-gemini', type: 'gemini', base_url: mockUrl, api_key: 'bench-gemini-key' },
];
const CLOUD_MODELS = [
  { name: 'converse-bench', provider: 'mock-bedrock', upstream_model: 'meta.llama3-1-8b-instruct-v1:0' },
  { name: 'gemini-bench', provider: 'mock-gemini', upstream_model: 'gemini-2.0-flash' },
];
export const CLOUD_ENV = { AWS_ACCESS_KEY_ID: 'AKIDBENCHEXAMPLE', AWS_SECRET_ACCESS_KEY: 'bench-secret-access-key', AWS_CONFIG_FILE: '/dev/null', AWS_SHARED_CREDENTIALS_FILE: '/dev/null', AWS_EC2_METADATA_DISABLED: 'true' };

/** The gateway of `checkout` (its built `dist/main.js`) with the production config; `node` flags first (e.g. --cpu-prof); `cloud`: with the Bedrock and Gemini providers. */
export function startCaseGateway(name: string, checkout: string, mockUrl: string, dir: string, nodeFlags: string[] = [], cloud = false): Promise<Server> {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(
    file,
    stringify({
      workers: 1,
      listeners: [{ name: 'proxy', address: '127.0.0.1:0', role: 'proxy' }, { name: 'admin', address: '127.0.0.1:0', role: 'admin' }],
      providers: [
        { name: 'mock', type: 'openai', base_url: `${mockUrl}/v1`, api_key: 'sk-upstream-bench' },
        { name: 'mock-anthropic', type: 'anthropic', base_url: mockUrl, api_key: 'sk-upstream-bench' },
        ...(cloud ? cloudProviders(mockUrl) : []),
      ],
      models: [{ name: 'bench', provider: 'mock' }, { name: 'claude-bench', provider: 'mock-anthropic' }, ...(cloud ? CLOUD_MODELS : [])],
      keys: [
        { name: 'bench', key: KEYS.plain },
        // Limits that never refuse at the bench's rate: the work of counting them is what is measured.
        { name: 'limited', key: KEYS.limited, limits: { rpm: 100_000_000, tpm: 10_000_000_000, concurrent: 10_000 }, budget: { usd: 1_000_000_000 } },
      ],
      limits: { store: 'memory' },
      shutdown: { min_drain_secs: 0, max_drain_secs: 5 },
      log: { level: 'info', access_log: true },
    }),
  );
  let url: string | undefined;
  return startServer(
    name,
    [...nodeFlags, join(checkout, 'dist', 'main.js'), '--config', file],
    (l) => {
      if (l.event === 'listener_started' && l.listener === 'proxy') url = `http://${String(l.address)}`;
      return l.event === 'ready' ? url : undefined;
    },
    '0',
    cloud ? CLOUD_ENV : undefined,
  );
}

/** wrk's script for a case: its body and headers. */
export function caseScript(c: Case): string {
  return wrkPostScript(JSON.stringify(c.body), { 'content-type': 'application/json', authorization: `Bearer ${KEYS[c.key]}`, ...(c.mock ? { 'x-mock': JSON.stringify(c.mock) } : {}) });
}
