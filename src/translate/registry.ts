// Which translation serves a client's endpoint on a provider that does not speak it.
import type { Endpoint, ProviderApi } from '../providers/types.ts';
import type { Json, StreamTranslator, Translator } from './types.ts';
import { chatStreamTranslator, chatToMessages } from './chat-to-messages.ts';
import { messagesToChat } from './messages-to-chat.ts';
import { responsesToMessages } from './responses-to-messages.ts';

export interface Translation {
  readonly translator: Translator;
  /** A translator for one streamed answer to this request. */
  stream(): StreamTranslator;
}

/**
 * The translation from `endpoint` to what a provider speaking `api` serves, or undefined when there
 * is none (an embeddings request to an Anthropic provider).
 */
export function translationFor(endpoint: Endpoint, api: ProviderApi, body: Json): Translation | undefined {
  if (api === 'anthropic') {
    if (endpoint === 'chat') {
      const includeUsage = (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
      return { translator: chatToMessages, stream: () => chatStreamTranslator(includeUsage) };
    }
    if (endpoint === 'responses') return { translator: responsesToMessages, stream: () => responsesToMessages.stream() };
  }
  if (api === 'openai' && endpoint === 'messages') return { translator: messagesToChat, stream: () => messagesToChat.stream() };
  return undefined;
}
