// Token usage read from responses: the JSON `usage` object, or the SSE events that carry it
// (OpenAI: the last chunk when `stream_options.include_usage`; Anthropic: message_start and
// message_delta; Responses API: response.completed). Only lines that mention "usage" are parsed.
import type { Usage } from '../server/context.ts';

type Json = Record<string, unknown>;

const USAGE_MARK = Buffer.from('"usage"');
/** A JSON body larger than this is relayed without looking for usage. */
const MAX_JSON_SCAN = 4 * 1024 * 1024;
/** An SSE line longer than this is skipped. */
const MAX_LINE = 1024 * 1024;

export interface UsageReader {
  push(chunk: Buffer): void;
  /** The usage seen so far, if any. */
  finish(): Usage | undefined;
}

export function readUsageFrom(usage: unknown, into: Usage | undefined): Usage | undefined {
  if (usage === null || typeof usage !== 'object') return into;
  const u = usage as Json;
  // Anthropic counts cache reads and writes apart from input_tokens; they are prompt tokens too.
  const input = num(u.input_tokens);
  const cached = input === undefined ? 0 : (num(u.cache_read_input_tokens) ?? 0) + (num(u.cache_creation_input_tokens) ?? 0);
  const prompt = num(u.prompt_tokens) ?? (input === undefined ? undefined : input + cached);
  const completion = num(u.completion_tokens) ?? num(u.output_tokens);
  if (prompt === undefined && completion === undefined) return into;
  const out = into ?? { prompt: 0, completion: 0 };
  if (prompt !== undefined) out.prompt = prompt;
  if (completion !== undefined) out.completion = completion;
  // Cached prompt tokens: OpenAI's prompt_tokens_details (input_tokens_details in the Responses API), Anthropic's cache fields.
  const details = (u.prompt_tokens_details ?? u.input_tokens_details) as Json | undefined;
  const cachedRead = num(u.cache_read_input_tokens) ?? (details !== null && typeof details === 'object' ? num(details.cached_tokens) : undefined);
  if (cachedRead !== undefined) out.cached = cachedRead;
  const written = num(u.cache_creation_input_tokens);
  if (written !== undefined) out.cacheWrite = written;
  return out;
}

/** The model an answer names (OpenAI's `model`, Anthropic's `message.model`), kept with its usage. */
function withModel(usage: Usage | undefined, model: unknown): Usage | undefined {
  if (usage && typeof model === 'string' && model !== '') usage.model = model.length > 256 ? model.slice(0, 256) : model;
  return usage;
}

/** A token count as a provider may report it: a finite number, never negative. */
function num(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

export class JsonUsageReader implements UsageReader {
  #chunks: Buffer[] = [];
  #size = 0;

  push(chunk: Buffer): void {
    if (this.#size > MAX_JSON_SCAN) return;
    this.#chunks.push(chunk);
    this.#size += chunk.length;
  }

  finish(): Usage | undefined {
    if (this.#size === 0 || this.#size > MAX_JSON_SCAN) return undefined;
    const body = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks, this.#size);
    this.#chunks = [];
    if (body.indexOf(USAGE_MARK) === -1) return undefined;
    try {
      const answer = JSON.parse(body.toString('utf8')) as Json;
      return withModel(readUsageFrom(answer.usage, undefined), answer.model);
    } catch {
      return undefined;
    }
  }
}

export class SseUsageReader implements UsageReader {
  #partial = '';
  #usage: Usage | undefined = undefined;

  push(chunk: Buffer): void {
    // Fast path: a chunk with no newline and no usage mark while no line is pending.
    if (this.#partial === '' && chunk.indexOf(USAGE_MARK) === -1) {
      const lastNewline = chunk.lastIndexOf(10);
      if (lastNewline === chunk.length - 1) return;
      // Keep the unfinished last line: its "usage" may arrive in the next chunk.
      this.#partial = chunk.toString('utf8', lastNewline + 1);
      return;
    }
    const text = this.#partial + chunk.toString('utf8');
    const lines = text.split('\n');
    this.#partial = lines.pop() ?? '';
    if (this.#partial.length > MAX_LINE) this.#partial = '';
    for (const line of lines) this.#line(line);
  }

  #line(line: string): void {
    if (!line.startsWith('data:') || !line.includes('"usage"')) return;
    try {
      const event = JSON.parse(line.slice(5)) as Json;
      const message = event.message as Json | undefined;
      const response = event.response as Json | undefined;
      this.#usage = withModel(readUsageFrom(event.usage ?? message?.usage ?? response?.usage, this.#usage), event.model ?? message?.model ?? response?.model);
    } catch {
      // A malformed event is relayed as it is; it just carries no usage for us.
    }
  }

  finish(): Usage | undefined {
    if (this.#partial) this.#line(this.#partial.trimEnd());
    this.#partial = '';
    return this.#usage;
  }
}
