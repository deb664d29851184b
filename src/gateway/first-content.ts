// Watches a streamed answer until its first content event, the point after which a route never
// switches targets: until then nothing is sent downstream, so a stream that fails before its first
// token falls back invisibly. Preambles (OpenAI's role-only first chunk, Anthropic's message_start
// and ping, the Responses API's response.created, Bedrock Converse's messageStart) are not
// content; an error event before content (Bedrock's exceptions, as its provider names them:
// `event: throttlingException`) is a failure; anything not recognised counts as content, so an unknown stream is never held. A
// stream that ends before its first content never sent its final event either: it was cut.
import { SseParser, type SseEvent } from '../translate/sse.ts';

export type Watched = 'waiting' | 'content' | 'error';

const PREAMBLE_EVENTS = new Set(['message_start', 'ping', 'response.created', 'response.in_progress', 'response.queued', 'messageStart']);
const ERROR_TYPES = new Set(['error', 'response.failed']);
const BLANK_LINE = Buffer.from('\n\n');

export class FirstContentWatch {
  readonly #parser = new SseParser();
  /** The error event's data (JSON parsed when it is JSON), once `error` was returned. */
  error: unknown = undefined;

  push(chunk: Buffer): Watched {
    // Event by event (a blank line ends one), so that a read carrying a whole answer is parsed
    // only up to its first content, not to its end.
    let from = 0;
    while (from < chunk.length) {
      const blank = chunk.indexOf(BLANK_LINE, from);
      const to = blank === -1 ? chunk.length : blank + 2;
      for (const event of this.#parser.push(chunk.subarray(from, to))) {
        const seen = this.#classify(event);
        if (seen !== 'waiting') return seen;
      }
      from = to;
    }
    return 'waiting';
  }

  /** The stream ended: an event not closed by a blank line is classified too. */
  finish(): Watched {
    for (const event of this.#parser.finish()) {
      const seen = this.#classify(event);
      if (seen !== 'waiting') return seen;
    }
    return 'waiting';
  }

  #classify(event: SseEvent): Watched {
    if (event.event !== undefined && (ERROR_TYPES.has(event.event) || event.event.endsWith('Exception'))) {
      this.error = parse(event.data) ?? event.data;
      return 'error';
    }
    if (event.event !== undefined && PREAMBLE_EVENTS.has(event.event)) return 'waiting';
    if (event.data === '[DONE]') return 'content';
    const json = parse(event.data);
    if (json === undefined) return event.data === '' ? 'waiting' : 'content';
    if ('error' in json && json.error !== null && json.error !== undefined) {
      this.error = json;
      return 'error';
    }
    const type = typeof json.type === 'string' ? json.type : undefined;
    if (type !== undefined) {
      if (ERROR_TYPES.has(type)) {
        this.error = json;
        return 'error';
      }
      if (PREAMBLE_EVENTS.has(type)) return 'waiting';
    }
    if (Array.isArray(json.choices)) return json.choices.some(hasContent) ? 'content' : json.usage ? 'content' : 'waiting';
    return 'content';
  }
}

function parse(data: string): Record<string, unknown> | undefined {
  if (data === '' || (data.charCodeAt(0) !== 123 /* { */)) return undefined;
  try {
    const value: unknown = JSON.parse(data);
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** An OpenAI chunk choice with something in it: text, a tool call, a refusal, reasoning, or its end. */
function hasContent(choice: unknown): boolean {
  if (choice === null || typeof choice !== 'object') return false;
  const c = choice as { delta?: Record<string, unknown>; finish_reason?: unknown; text?: unknown };
  if (c.finish_reason !== null && c.finish_reason !== undefined) return true;
  if (typeof c.text === 'string' && c.text !== '') return true; // legacy completions
  const d = c.delta;
  if (!d) return false;
  for (const key of ['content', 'refusal', 'reasoning_content', 'reasoning']) {
    const value = d[key];
    if (typeof value === 'string' && value !== '') return true;
  }
  return (Array.isArray(d.tool_calls) && d.tool_calls.length > 0) || (d.function_call !== undefined && d.function_call !== null);
}
