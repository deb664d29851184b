// GET /v1/models: the configured model names in OpenAI's list shape (patterns are not listed).
import type { Config } from '../config/schema.ts';

export function listModels(config: Config): string {
  const data = config.models
    .filter((model) => !model.name.includes('*'))
    .map((model) => ({ id: model.name, object: 'model', created: 0, owned_by: model.provider }));
  return JSON.stringify({ object: 'list', data });
}
