// The seam between the gateway and the providers: a request in, undici's handler shape out. A
// provider never sees sockets, `res`, or the lifecycle.
import type { Dispatcher } from 'undici';
import type { ParameterPolicy } from './parameter-policy.ts';
import type { CredentialEvents } from './refreshing-credential.ts';
import type { Clock } from '../lifecycle/clock.ts';

/** What the providers that fetch their own credentials (the clouds') report to, and their time. */
export interface ProviderEnvironment {
  readonly events: CredentialEvents;
  readonly clock: Clock;
}

/** The endpoints clients call. */
export type ClientEndpoint = 'chat' | 'completions' | 'embeddings' | 'responses' | 'messages' | 'count_tokens' | 'realtime';

/**
 * The endpoints only a translation reaches, of APIs no client calls here: Bedrock's Converse
 * (`converse`, `converse-stream`) and an embedding model's InvokeModel (`bedrock_embeddings`),
 * Gemini's `generateContent` / `streamGenerateContent` (`generate_content`) and
 * `batchEmbedContents` (`embed_content`) and `countTokens` (`gemini_count_tokens`).
 */
export type ProviderEndpoint = 'converse' | 'converse_count_tokens' | 'bedrock_embeddings' | 'generate_content' | 'embed_content' | 'gemini_count_tokens';

export type Endpoint = ClientEndpoint | ProviderEndpoint;

export type ProviderType = 'openai' | 'anthropic' | 'azure_openai' | 'bedrock' | 'gemini' | 'vertex' | 'echo';

/**
 * The API a provider speaks, which decides the translations its requests need (`local`: it answers
 * every API itself; `converse`: Bedrock's Converse API; `gemini`: Google's generateContent).
 */
export type ProviderApi = 'openai' | 'anthropic' | 'converse' | 'gemini' | 'local';

export interface ProviderRequest {
  readonly endpoint: Endpoint;
  /** The body bytes to send (the client's own bytes when the model name was not rewritten). */
  readonly body: Buffer;
  /** The parsed body, with the upstream model name applied. */
  readonly json: Record<string, unknown>;
  /** Client headers fit to forward (no hop-by-hop, host, credentials or length). */
  readonly headers: Record<string, string | string[]>;
  /** Our request id, sent upstream as `x-request-id`. */
  readonly requestId: string;
}

export type ResponseHandler = Dispatcher.DispatchHandler;
export type DispatchController = Dispatcher.DispatchController;

export interface Provider {
  readonly name: string;
  readonly type: ProviderType;
  readonly api: ProviderApi;
  /** Where it sends requests (scheme://host:port), for traces; none when it answers locally. */
  readonly origin?: string | undefined;
  supports(endpoint: Endpoint): boolean;
  /** What the server accepts of OpenAI's parameters (an OpenAI-compatible server's `preset`); none: everything. */
  readonly parameters?: ParameterPolicy | undefined;
  /** Sends the request; the outcome arrives on `handler` (start, data, end, or error). */
  dispatch(request: ProviderRequest, handler: ResponseHandler): void;
  /**
   * Where a realtime (WebSocket) session goes, for providers that serve one; a promise when its
   * credentials must be fetched first (rejected with the gateway's 503 when they cannot be).
   */
  realtimeTarget?(query: URLSearchParams): RealtimeTarget | Promise<RealtimeTarget>;
  /**
   * The provider's own model list (`GET /models`), for routes by pattern. Rejects when the
   * provider cannot be asked or does not answer with a list; `signal` bounds the wait.
   */
  listModels?(signal: AbortSignal): Promise<UpstreamModel[]>;
  /** Waits for requests in progress, then closes pooled connections. */
  close(): Promise<void>;
  /** A forced end (L8): aborts requests in progress and closes pooled connections now. */
  destroy(): Promise<void>;
}

/** A realtime session's upstream: its URL and handshake headers. */
export interface RealtimeTarget {
  readonly url: string;
  readonly headers: Record<string, string>;
}

/** One entry of a provider's model list. */
export interface UpstreamModel {
  readonly id: string;
  /** Unix seconds; 0 when the provider does not say. */
  readonly created: number;
  /** Anthropic's `display_name`; undefined when the provider gives none. */
  readonly displayName: string | undefined;
}
