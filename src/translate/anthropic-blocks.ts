// What the two OpenAI-to-Anthropic translators (Chat Completions and Responses) build alike:
// Anthropic content blocks, and the defaults Anthropic requires.
import type { Json } from './types.ts';
import { isObject } from './json.ts';

export type Block = Json;

/**
 * Anthropic requires `max_tokens`; OpenAI lets the model run to its limit. 4096 is within what
 * every current Claude model can produce, so the default never makes a valid request invalid.
 */
export const DEFAULT_MAX_TOKENS = 4096;

/** The image types Anthropic reads (`Base64ImageSource.media_type`). */
export const IMAGE_TYPES = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp']);

/** OpenAI's explicit prompt-cache breakpoint on a part is Anthropic's cache_control on the block. */
export function withCache(block: Block, part: Json): Block {
  return isObject(part.prompt_cache_breakpoint) ? { ...block, cache_control: { type: 'ephemeral' } } : block;
}

/** Anthropic refuses empty text blocks; an empty text adds nothing, so it is left out. */
export function textBlock(text: string, part: Json = {}): Block[] {
  return text === '' ? [] : [withCache({ type: 'text', text }, part)];
}

/** One text block without options reads as a plain string; anything else stays an array. */
export function compact(blocks: Block[]): string | Block[] {
  const only = blocks[0];
  if (blocks.length === 1 && only !== undefined && only.type === 'text' && Object.keys(only).length === 2) return only.text as string;
  return blocks;
}
