// The event that ends a stream with an error, in the client's API: OpenAI's chat and completions
// (`{"error":{…}}`), Anthropic's (`{"type":"error","error":{…}}`), the Responses API's `error`
// event (`type`, `code`, `message`, `param`, `sequence_number`, which its SDK rejects a stream
// with). Never a `[DONE]`, a `message_stop` or a `response.completed`: a cut answer must not look whole.
import type { GatewayError } from '../api/errors.ts';
import type { Endpoint } from '../providers/types.ts';

/** `sequence`: the `sequence_number` the next event of a Responses stream takes. */
export function streamErrorEvent(error: GatewayError, api: Endpoint, sequence: number): string {
  switch (api) {
    case 'messages':
      return `event: error\ndata: ${error.body('anthropic')}\n\n`;
    case 'responses':
      return `event: error\ndata: ${JSON.stringify({ type: 'error', code: error.code, message: error.message, param: null, sequence_number: sequence })}\n\n`;
    default:
      return `event: error\ndata: ${error.body('openai')}\n\n`;
  }
}
