// Builds the provider adapters named in the config.
import { isDeepStrictEqual } from 'node:util';
import type { Config } from '../config/schema.ts';
import type { Provider, ProviderEnvironment } from './types.ts';
import { OpenAIProvider } from './openai/adapter.ts';
import { AnthropicProvider } from './anthropic/adapter.ts';
import { AzureOpenAIProvider } from './azure-openai/adapter.ts';
import { EchoProvider } from './echo/adapter.ts';
import { BedrockProvider } from './bedrock/adapter.ts';
import { GeminiProvider } from './google/gemini-adapter.ts';
import { VertexProvider } from './google/vertex-adapter.ts';

/**
 * Builds the providers of `config`. With `previous` (a reload), a provider whose settings did not
 * change is reused, with its pool and the connections in it.
 */
export function createProviders(config: Config, env: ProviderEnvironment, previous?: { config: Config; providers: ReadonlyMap<string, Provider> }): Map<string, Provider> {
  const providers = new Map<string, Provider>();
  for (const provider of config.providers) {
    const before = previous?.config.providers.find((p) => p.name === provider.name);
    const reusable = previous?.providers.get(provider.name);
    if (before && reusable && isDeepStrictEqual(before, provider) && isDeepStrictEqual(previous!.config.upstream, config.upstream)) {
      providers.set(provider.name, reusable);
      continue;
    }
    switch (provider.type) {
      case 'openai':
        providers.set(provider.name, new OpenAIProvider(provider, config.upstream));
        break;
      case 'anthropic':
        providers.set(provider.name, new AnthropicProvider(provider, config.upstream));
        break;
      case 'azure_openai':
        providers.set(provider.name, new AzureOpenAIProvider(provider, config.upstream, env));
        break;
      case 'bedrock':
        providers.set(provider.name, new BedrockProvider(provider, config.upstream, env));
        break;
      case 'gemini':
        providers.set(provider.name, new GeminiProvider(provider, config.upstream));
        break;
      case 'vertex':
        providers.set(provider.name, new VertexProvider(provider, config.upstream, env));
        break;
      case 'echo':
        providers.set(provider.name, new EchoProvider(provider.name));
        break;
    }
  }
  return providers;
}
