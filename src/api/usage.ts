// What a request used: its tokens, as the provider reported them or as they were estimated. What
// the gateway reads from answers (gateway/), charges and prices (limits/), and carries on a
// request's context (server/), each from here.

export interface Usage {
  /** Every prompt token, cached ones included. */
  prompt: number;
  completion: number;
  /** Prompt tokens read from the provider's cache. */
  cached?: number;
  /** Prompt tokens written to the cache (Anthropic). */
  cacheWrite?: number;
  /** The model the provider says answered, when its answer names one (traces). */
  model?: string;
  /** The provider never reported it whole: estimated (the output counted from its text). */
  estimated?: boolean;
}
