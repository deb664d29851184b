// Which translation serves a client's endpoint on a provider that does not speak it.
import type { Endpoint, ProviderApi } from '../providers/types.ts';
import type { Json, StreamTranslator, Translator } from './types.ts';
import { chatStreamTranslator, chatToMessages } from './chat-to-messages.ts';
import { messagesToChat } from './messages-to-chat.ts';
import { responsesToMessages } from './responses-to-messages.ts';
import { converseTranslation } from './messages-to-converse.ts';
import { geminiTranslation } from './messages-to-gemini.ts';
import { bedrockEmbeddingsTranslation } from './embeddings-to-bedrock.ts';
import { geminiEmbeddingsTranslation } from './embeddings-to-gemini.ts';
import { geminiCountTranslation } from './count-tokens-to-gemini.ts';
import { converseCountTranslation } from './count-tokens-to-converse.ts';
import { chain } from './chain.ts';

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
  if (api === 'anthropic') return toMessages(endpoint, body);
  if (api === 'openai' && endpoint === 'messages') return { translator: messagesToChat, stream: () => messagesToChat.stream() };
  // Bedrock's Converse and Gemini are reached from Anthropic's Messages, the API closest to
  // theirs: a Chat Completions or Responses request goes through Messages first.
  if (api === 'converse' || api === 'gemini') {
    const model = typeof body.model === 'string' ? body.model : '';
    if (endpoint === 'embeddings') return api === 'converse' ? whole(bedrockEmbeddingsTranslation(body)) : whole(geminiEmbeddingsTranslation(body, model));
    if (endpoint === 'count_tokens') return whole(api === 'gemini' ? geminiCountTranslation(model) : converseCountTranslation(model));
    const last = whole(api === 'converse' ? converseTranslation(model) : geminiTranslation(model));
    if (endpoint === 'messages') return last;
    const first = toMessages(endpoint, body);
    return first && chain(first, last);
  }
  return undefined;
}

/** A Chat Completions or Responses request to a provider of Anthropic's Messages API. */
function toMessages(endpoint: Endpoint, body: Json): Translation | undefined {
  if (endpoint === 'chat') {
    const includeUsage = (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
    return { translator: chatToMessages, stream: () => chatStreamTranslator(includeUsage) };
  }
  if (endpoint === 'responses') return { translator: responsesToMessages, stream: () => responsesToMessages.stream() };
  return undefined;
}

function whole(translator: Translator): Translation {
  return { translator, stream: () => translator.stream() };
}
