// The store `limits.store` names: this process's memory, or Redis.
import type { LimitsConfig } from '../config/schema.ts';
import { MemoryStore } from './memory-store.ts';
import { RedisStore } from './redis-store.ts';
import type { LimitStore } from './store.ts';

export function openStore(settings: LimitsConfig, onRedisError: (error: Error) => void): LimitStore {
  if (settings.store === 'redis') return new RedisStore(settings.redis!, onRedisError);
  return new MemoryStore();
}
