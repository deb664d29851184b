// Builds the provider adapters named in the config.
import type { Config } from '../config/schema.ts';
import type { Provider } from './types.ts';
import { OpenAIProvider } from './openai/adapter.ts';
import { AnthropicProvider } from './anthropic/adapter.ts';
import { EchoProvider } from './echo/adapter.ts';

export function createProviders(config: Config): Map<string, Provider> {
  const providers = new Map<string, Provider>();
  for (const provider of config.providers) {
    switch (provider.type) {
      case 'openai':
        providers.set(provider.name, new OpenAIProvider(provider, config.upstream));
        break;
      case 'anthropic':
        providers.set(provider.name, new AnthropicProvider(provider, config.upstream));
        break;
      case 'echo':
        providers.set(provider.name, new EchoProvider(provider.name));
        break;
    }
  }
  return providers;
}
