// The store `limits.store` names: this process's memory, or Redis (its client loaded only then: a
// gateway without Redis does not carry it).
import type { LimitsConfig } from '../config/schema.ts';
import { MemoryStore } from './memory-store.ts';
import type { LimitStore } from './store.ts';

export async function openStore(settings: LimitsConfig, onRedisError: (error: Error) => void): Promise<LimitStore> {
  if (settings.store !== 'redis') return new MemoryStore();
  const { RedisStore } = await import('./redis-store.ts');
  return new RedisStore(settings.redis!, onRedisError);
}
