// The embedded default: works with no key and no network (the echo provider answers locally), and
// routes the common OpenAI / Anthropic model names when OPENAI_API_KEY / ANTHROPIC_API_KEY are set.

const BASE = `# Sluice embedded default configuration
workers: "\${SLUICE_WORKERS:-auto}"
listeners:
  - { name: proxy, address: "\${SLUICE_PROXY_ADDRESS:-127.0.0.1:8080}", role: proxy }
  - { name: admin, address: "\${SLUICE_ADMIN_ADDRESS:-127.0.0.1:9901}", role: admin }
# A lone instance with nothing in front needs no window (D3): Ctrl-C waits only for work in flight.
# A deployment behind a load balancer sets its own (a config file, or SLUICE_MIN_DRAIN_SECS).
shutdown: { min_drain_secs: "\${SLUICE_MIN_DRAIN_SECS:-0}" }
providers:
  - { name: echo, type: echo }
models:
  - { name: echo, provider: echo }
  - { name: "echo-*", provider: echo }
`;

const OPENAI = {
  provider: '  - { name: openai, type: openai, base_url: "${OPENAI_BASE_URL:-https://api.openai.com/v1}", api_key: "${OPENAI_API_KEY}" }\n',
  models: ['gpt-*', 'chatgpt-*', 'o1*', 'o3*', 'o4*', 'text-embedding-*', 'gpt-realtime*'],
};

const ANTHROPIC = {
  provider: '  - { name: anthropic, type: anthropic, base_url: "${ANTHROPIC_BASE_URL:-https://api.anthropic.com}", api_key: "${ANTHROPIC_API_KEY}" }\n',
  models: ['claude-*'],
};

export function defaultConfigText(env: NodeJS.ProcessEnv): string {
  let providers = '';
  let models = '';
  for (const [variable, extra, provider] of [
    ['OPENAI_API_KEY', OPENAI, 'openai'],
    ['ANTHROPIC_API_KEY', ANTHROPIC, 'anthropic'],
  ] as const) {
    if (!env[variable]) continue;
    providers += extra.provider;
    for (const pattern of extra.models) models += `  - { name: "${pattern}", provider: ${provider} }\n`;
  }
  return BASE.replace('models:\n', `${providers}models:\n`) + models;
}
