// A provider that answers locally, so a gateway with no key and no network gives real answers.
// It drives the same handler callbacks an upstream response would, so the relay is one code path.
import type { ClientEndpoint, DispatchController, Endpoint, Provider, ProviderRequest, ResponseHandler } from '../types.ts';

import { countTokens, embedding, newId, pieces, replyText, lastUserText } from './replies.ts';

type Json = Record<string, unknown>;

const JSON_HEADERS = { 'content-type': 'application/json' };
const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' };

class LocalController implements DispatchController {
  aborted = false;
  paused = false;
  reason: Error | null = null;
  abort(reason: Error): void {
    this.aborted = true;
    this.reason = reason;
  }
  pause(): void {
    this.paused = true;
  }
  resume(): void {
    this.paused = false;
  }
}

export class EchoProvider implements Provider {
  readonly type = 'echo';
  readonly api = 'local';
  readonly name: string;

  constructor(name: string) {
    this.name = name;
  }

  supports(endpoint: Endpoint): boolean {
    return Object.hasOwn(EVENTS, endpoint);
  }

  dispatch(request: ProviderRequest, handler: ResponseHandler): void {
    const controller = new LocalController();
    handler.onRequestStart?.(controller, {});
    if (controller.aborted) return;
    const { json } = request;
    const model = String(json.model);
    const stream = json.stream === true;
    const events = EVENTS[request.endpoint as Exclude<ClientEndpoint, 'realtime'>](json, model, stream);
    const streams = stream && request.endpoint !== 'embeddings' && request.endpoint !== 'count_tokens';
    handler.onResponseStart?.(controller, 200, streams ? SSE_HEADERS : JSON_HEADERS, 'OK');
    for (const event of events) {
      if (controller.aborted) return;
      handler.onResponseData?.(controller, Buffer.from(event));
    }
    if (!controller.aborted) handler.onResponseEnd?.(controller, {});
  }

  async close(): Promise<void> {}

  async destroy(): Promise<void> {}
}

const sse = (data: unknown, event?: string): string =>
  `${event ? `event: ${event}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;

const EVENTS: Record<Exclude<ClientEndpoint, 'realtime'>, (body: Json, model: string, stream: boolean) => string[]> = {
  chat(body, model, stream) {
    const text = replyText(body);
    const usage = { prompt_tokens: countTokens(lastUserText(body)), completion_tokens: countTokens(text), total_tokens: 0 };
    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
    const id = newId('chatcmpl-echo');
    const created = Math.floor(Date.now() / 1000);
    if (!stream) {
      return [
        JSON.stringify({
          id,
          object: 'chat.completion',
          created,
          model,
          choices: [{ index: 0, message: { role: 'assistant', content: text, refusal: null }, logprobs: null, finish_reason: 'stop' }],
          usage,
        }),
      ];
    }
    const chunk = (delta: Json, finish: string | null) =>
      sse({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] });
    const out = [chunk({ role: 'assistant', content: '' }, null), ...pieces(text).map((p) => chunk({ content: p }, null)), chunk({}, 'stop')];
    if ((body.stream_options as Json | undefined)?.include_usage === true) {
      out.push(sse({ id, object: 'chat.completion.chunk', created, model, choices: [], usage }));
    }
    out.push(sse('[DONE]'));
    return out;
  },

  completions(body, model, stream) {
    const text = replyText(body);
    const usage = { prompt_tokens: countTokens(lastUserText(body)), completion_tokens: countTokens(text), total_tokens: 0 };
    usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
    const id = newId('cmpl-echo');
    const created = Math.floor(Date.now() / 1000);
    if (!stream) {
      return [JSON.stringify({ id, object: 'text_completion', created, model, choices: [{ index: 0, text, logprobs: null, finish_reason: 'stop' }], usage })];
    }
    const chunk = (piece: string, finish: string | null) =>
      sse({ id, object: 'text_completion', created, model, choices: [{ index: 0, text: piece, logprobs: null, finish_reason: finish }] });
    const out = [...pieces(text).map((p) => chunk(p, null)), chunk('', 'stop')];
    if ((body.stream_options as Json | undefined)?.include_usage === true) {
      out.push(sse({ id, object: 'text_completion', created, model, choices: [], usage }));
    }
    out.push(sse('[DONE]'));
    return out;
  },

  embeddings(body, model) {
    const inputs = Array.isArray(body.input) ? body.input : [body.input ?? ''];
    const dimensions = typeof body.dimensions === 'number' && body.dimensions > 0 && body.dimensions <= 4096 ? body.dimensions : 16;
    let tokens = 0;
    const data = inputs.map((input, index) => {
      const text = typeof input === 'string' ? input : JSON.stringify(input);
      tokens += countTokens(text);
      return { object: 'embedding', index, embedding: embedding(text, dimensions) };
    });
    return [JSON.stringify({ object: 'list', data, model, usage: { prompt_tokens: tokens, total_tokens: tokens } })];
  },

  responses(body, model, stream) {
    const text = replyText(body);
    const id = newId('resp_echo');
    const created_at = Math.floor(Date.now() / 1000);
    const usage = { input_tokens: countTokens(lastUserText(body)), output_tokens: countTokens(text), total_tokens: 0 };
    usage.total_tokens = usage.input_tokens + usage.output_tokens;
    const message = { id: newId('msg_echo'), type: 'message', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text, annotations: [] }] };
    const response = { id, object: 'response', created_at, status: 'completed', model, output: [message], usage };
    if (!stream) return [JSON.stringify(response)];
    let sequence = 0;
    const event = (type: string, fields: Json) => sse({ type, sequence_number: sequence++, ...fields }, type);
    return [
      event('response.created', { response: { ...response, status: 'in_progress', output: [], usage: null } }),
      ...pieces(text).map((delta) => event('response.output_text.delta', { item_id: message.id, output_index: 0, content_index: 0, delta })),
      event('response.output_text.done', { item_id: message.id, output_index: 0, content_index: 0, text }),
      event('response.completed', { response }),
    ];
  },

  count_tokens(body) {
    return [JSON.stringify({ input_tokens: countTokens(lastUserText(body)) })];
  },

  messages(body, model, stream) {
    const text = replyText(body);
    const id = newId('msg_echo');
    const input_tokens = countTokens(lastUserText(body));
    const output_tokens = countTokens(text);
    if (!stream) {
      return [
        JSON.stringify({
          id,
          type: 'message',
          role: 'assistant',
          model,
          content: [{ type: 'text', text }],
          stop_reason: 'end_turn',
          stop_sequence: null,
          usage: { input_tokens, output_tokens },
        }),
      ];
    }
    return [
      sse({ type: 'message_start', message: { id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens, output_tokens: 0 } } }, 'message_start'),
      sse({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }, 'content_block_start'),
      ...pieces(text).map((p) => sse({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: p } }, 'content_block_delta')),
      sse({ type: 'content_block_stop', index: 0 }, 'content_block_stop'),
      sse({ type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens } }, 'message_delta'),
      sse({ type: 'message_stop' }, 'message_stop'),
    ];
  },
};
