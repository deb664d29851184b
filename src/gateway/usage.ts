// Token usage read from responses: the JSON `usage` object, or the SSE events that carry it
// (OpenAI: the last chunk when `stream_options.include_usage`; Groq: its last chunk's `x_groq`;
// Anthropic: message_start and message_delta; Responses API: response.completed; Bedrock's
// Converse: `metadata`; Gemini: `usageMetadata`, on every chunk, the last one's counting). Only
// lines that mention "usage" or "usageMetadata" (and not as null) are parsed.
import type { Usage } from '../api/usage.ts';

type Json = Record<string, unknown>;

/** `"usage"`, and the start of Gemini's `"usageMetadata"`: one search finds both. */
const USAGE_MARK = Buffer.from('"usage');
const METADATA_REST = Buffer.from('Metadata"');
const LF = 10;
/** A JSON body larger than this is relayed without looking for usage. */
const MAX_JSON_SCAN = 4 * 1024 * 1024;
/** An SSE line longer than this is skipped. */
const MAX_LINE = 1024 * 1024;

export interface UsageReader {
  push(chunk: Buffer): void;
  /** The usage seen so far, if any. */
  finish(): Usage | undefined;
  /**
   * The usage read is the provider's last word on it: a JSON answer's, an OpenAI stream's usage
   * chunk, Anthropic's message_delta, the Responses API's final response. Anthropic's message_start
   * alone is not (its output count is where the answer began).
   */
  readonly final: boolean;
}

export function readUsageFrom(usage: unknown, into: Usage | undefined): Usage | undefined {
  if (usage === null || typeof usage !== 'object') return into;
  const u = usage as Json;
  if (u.inputTokens !== undefined || u.outputTokens !== undefined) return readConverseUsage(u, into);
  // Anthropic counts cache reads and writes apart from input_tokens; they are prompt tokens too.
  const input = num(u.input_tokens);
  const cached = input === undefined ? 0 : (num(u.cache_read_input_tokens) ?? 0) + (num(u.cache_creation_input_tokens) ?? 0);
  const prompt = num(u.prompt_tokens) ?? (input === undefined ? undefined : input + cached);
  const completion = num(u.completion_tokens) ?? num(u.output_tokens);
  if (prompt === undefined && completion === undefined) return into;
  const out = into ?? { prompt: 0, completion: 0 };
  if (prompt !== undefined) out.prompt = prompt;
  if (completion !== undefined) out.completion = completion;
  // Cached prompt tokens: OpenAI's prompt_tokens_details (input_tokens_details in the Responses API,
  // input_token_details, "token" singular, in a Realtime response.done), Anthropic's cache fields.
  const details = (u.prompt_tokens_details ?? u.input_tokens_details ?? u.input_token_details) as Json | undefined;
  // DeepSeek says prompt_cache_hit_tokens.
  const cachedRead = num(u.cache_read_input_tokens) ?? (details !== null && typeof details === 'object' ? num(details.cached_tokens) : undefined) ?? num(u.prompt_cache_hit_tokens);
  if (cachedRead !== undefined) out.cached = cachedRead;
  const written = num(u.cache_creation_input_tokens);
  if (written !== undefined) out.cacheWrite = written;
  return out;
}

/** Bedrock's Converse usage: inputTokens excludes the cache reads and writes, as Anthropic's input_tokens does. */
function readConverseUsage(u: Json, into: Usage | undefined): Usage | undefined {
  const input = num(u.inputTokens);
  const completion = num(u.outputTokens);
  if (input === undefined && completion === undefined) return into;
  const read = num(u.cacheReadInputTokens);
  const written = num(u.cacheWriteInputTokens);
  const out = into ?? { prompt: 0, completion: 0 };
  if (input !== undefined) out.prompt = input + (read ?? 0) + (written ?? 0);
  if (completion !== undefined) out.completion = completion;
  if (read !== undefined) out.cached = read;
  if (written !== undefined) out.cacheWrite = written;
  return out;
}

/** Gemini's usageMetadata: thoughts are output tokens too; cachedContentTokenCount is part of promptTokenCount. */
export function readGeminiUsage(usage: unknown, into: Usage | undefined): Usage | undefined {
  if (usage === null || typeof usage !== 'object') return into;
  const u = usage as Json;
  const prompt = num(u.promptTokenCount);
  const candidates = num(u.candidatesTokenCount);
  const thoughts = num(u.thoughtsTokenCount);
  if (prompt === undefined && candidates === undefined && thoughts === undefined) return into;
  const out = into ?? { prompt: 0, completion: 0 };
  if (prompt !== undefined) out.prompt = prompt + (num(u.toolUsePromptTokenCount) ?? 0);
  if (candidates !== undefined || thoughts !== undefined) out.completion = (candidates ?? 0) + (thoughts ?? 0);
  const cached = num(u.cachedContentTokenCount);
  if (cached !== undefined) out.cached = cached;
  return out;
}

/** The usage of an answer's JSON: its `usage`, or Gemini's `usageMetadata`. */
function answerUsage(answer: Json, into: Usage | undefined): Usage | undefined {
  return answer.usage !== undefined ? readUsageFrom(answer.usage, into) : readGeminiUsage(answer.usageMetadata, into);
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
  #body: Buffer | undefined;
  final = false;

  push(chunk: Buffer): void {
    if (this.#size > MAX_JSON_SCAN) return;
    this.#chunks.push(chunk);
    this.#size += chunk.length;
  }

  /** The body read (up to MAX_JSON_SCAN), once `finish` has run: where an estimate finds the output. */
  get body(): Buffer | undefined {
    return this.#body;
  }

  finish(): Usage | undefined {
    if (this.#size === 0 || this.#size > MAX_JSON_SCAN) return undefined;
    const body = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks, this.#size);
    this.#chunks = [];
    this.#body = body;
    if (body.indexOf(USAGE_MARK) === -1) return undefined;
    try {
      const answer = JSON.parse(body.toString('utf8')) as Json;
      const usage = withModel(answerUsage(answer, undefined), answer.model ?? answer.modelVersion);
      this.final = usage !== undefined;
      return usage;
    } catch {
      return undefined;
    }
  }
}

/**
 * Usage in SSE events, by byte search: only a line whose `"usage"` is not `null` is parsed (with
 * `include_usage` every OpenAI chunk carries `"usage":null`, and only the last one counts).
 */
export class SseUsageReader implements UsageReader {
  /** The unfinished last line of the last read: its "usage" may be split between two reads. */
  #partial: Buffer | undefined = undefined;
  #usage: Usage | undefined = undefined;
  /** Gemini's last line with `usageMetadata`: every chunk carries one, only the last counts, so it is parsed at the end. */
  #lastMetadata: string | undefined = undefined;
  final = false;

  push(chunk: Buffer): void {
    let data = chunk;
    if (this.#partial !== undefined) {
      data = Buffer.concat([this.#partial, chunk]);
      this.#partial = undefined;
    }
    const lastNewline = data.lastIndexOf(LF);
    if (lastNewline !== data.length - 1) {
      const rest = data.length - lastNewline - 1;
      // A longer line is not usage any provider sends: it is skipped.
      if (rest <= MAX_LINE) this.#partial = Buffer.from(data.subarray(lastNewline + 1));
    }
    for (let at = data.indexOf(USAGE_MARK); at !== -1 && at < lastNewline; at = data.indexOf(USAGE_MARK, at + 1)) {
      const after = keyEnd(data, at + USAGE_MARK.length);
      if (after === -1 || isNull(data, after)) continue;
      const end = data.indexOf(LF, at);
      const line = data.toString('utf8', data.lastIndexOf(LF, at) + 1, end).trimEnd();
      if (data[at + USAGE_MARK.length] === 34 /* " */) this.#line(line);
      else this.#lastMetadata = line;
      at = end;
    }
  }

  #line(line: string): void {
    if (!line.startsWith('data:')) return;
    try {
      const event = JSON.parse(line.slice(5)) as Json;
      const message = event.message as Json | undefined;
      const response = event.response as Json | undefined;
      if (event.usageMetadata !== undefined) {
        // Gemini: every chunk carries the counts so far; the last chunk's are final.
        this.#usage = withModel(readGeminiUsage(event.usageMetadata, this.#usage), event.modelVersion);
        if (this.#usage !== undefined) this.final = true;
        return;
      }
      // Groq's streams carry their usage in `x_groq.usage` (they refuse stream_options).
      const final = event.usage ?? response?.usage ?? (event.x_groq as Json | undefined)?.usage;
      this.#usage = withModel(readUsageFrom(final ?? message?.usage, this.#usage), event.model ?? message?.model ?? response?.model);
      if (final !== null && typeof final === 'object' && this.#usage !== undefined) this.final = true;
    } catch {
      // A malformed event is relayed as it is; it just carries no usage for us.
    }
  }

  finish(): Usage | undefined {
    const rest = this.#partial;
    this.#partial = undefined;
    if (rest !== undefined) {
      const at = rest.indexOf(USAGE_MARK);
      const after = at === -1 ? -1 : keyEnd(rest, at + USAGE_MARK.length);
      if (after !== -1 && !isNull(rest, after)) {
        if (rest[at + USAGE_MARK.length] === 34 /* " */) this.#line(rest.toString('utf8').trimEnd());
        else this.#lastMetadata = rest.toString('utf8').trimEnd();
      }
    }
    const metadata = this.#lastMetadata;
    this.#lastMetadata = undefined;
    if (metadata !== undefined) this.#line(metadata);
    return this.#usage;
  }
}

/** Where the key that `"usage` began ends: after `"` (usage) or `Metadata"` (usageMetadata); -1 for another key. */
function keyEnd(data: Buffer, i: number): number {
  if (data[i] === 34 /* " */) return i + 1;
  return data.subarray(i, i + METADATA_REST.length).equals(METADATA_REST) ? i + METADATA_REST.length : -1;
}

/** `"usage"` at `i` is followed by `: null`. */
function isNull(data: Buffer, i: number): boolean {
  while (data[i] === 32 || data[i] === 9) i++;
  if (data[i] !== 58 /* : */) return false;
  i++;
  while (data[i] === 32 || data[i] === 9) i++;
  return data[i] === 110 /* n */ && data[i + 1] === 117 && data[i + 2] === 108 && data[i + 3] === 108;
}
