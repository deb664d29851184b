// What the two OpenAI-to-Anthropic translators (Chat Completions and Responses) build alike:
// Anthropic content blocks, and the defaults Anthropic requires.
import { TranslationError, type Json } from './types.ts';
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

/**
 * Anthropic's 0 to 1 is not OpenAI's 0 to 2 scaled: a value above 1 has no faithful equivalent.
 * API version 2023-06-01 takes temperature and top_p (some newer models refuse them, or both
 * together); 2026-10-21 refuses them outright. Either refusal comes back as the provider's 400.
 */
export function anthropicTemperature(value: unknown): number {
  if (typeof value !== 'number' || value < 0 || value > 1) {
    throw new TranslationError('temperature', 'temperature: Anthropic accepts 0 to 1 (OpenAI 0 to 2); send a value from 0 to 1');
  }
  return value;
}

/**
 * The tool_choice to send with the translated `tools`: Anthropic refuses tool_choice without tools
 * (an empty list included), where 'auto' and 'none' mean what no tools mean and requiring a call
 * that cannot be made is refused, as OpenAI does; `parallel_tool_calls: false` becomes
 * `disable_parallel_tool_use` (without tools there is nothing to run in parallel).
 */
export function anthropicToolChoice(tools: readonly Json[], choice: Json | undefined, parallelToolCalls: unknown): Json | undefined {
  let toolChoice = choice;
  if (tools.length === 0 && toolChoice !== undefined) {
    if (toolChoice.type !== 'auto' && toolChoice.type !== 'none') throw new TranslationError('tool_choice', 'tool_choice requires a call but no tools were given');
    toolChoice = undefined;
  }
  if (parallelToolCalls === false && tools.length > 0 && toolChoice?.type !== 'none') {
    toolChoice = { ...(toolChoice ?? { type: 'auto' }), disable_parallel_tool_use: true };
  }
  return toolChoice;
}

/** An OpenAI function (its name already checked) as an Anthropic tool. */
export function anthropicTool(fn: Json & { name: string }): Json {
  const out: Json = { name: fn.name };
  if (typeof fn.description === 'string') out.description = fn.description;
  // Anthropic requires a schema; OpenAI's "no parameters" is the empty object.
  out.input_schema = isObject(fn.parameters) ? fn.parameters : { type: 'object', properties: {} };
  return out;
}

/** OpenAI's tool_choice as Anthropic's: `named` is the function a choice object names, in the shape of the caller's API. */
export function anthropicChoice(choice: unknown, named: string | undefined): Json {
  if (choice === 'auto') return { type: 'auto' };
  if (choice === 'required') return { type: 'any' };
  if (choice === 'none') return { type: 'none' };
  if (named !== undefined) return { type: 'tool', name: named };
  throw new TranslationError('tool_choice', "tool_choice: only 'auto', 'required', 'none' or a named function are supported when routed to an Anthropic model");
}
