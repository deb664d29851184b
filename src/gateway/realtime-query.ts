// The query string of a `/v1/realtime` handshake, checked before anything is done for it. The
// OpenAI Realtime API takes `model`, `intent` (`realtime` or `transcription`) and `call_id` (to join
// an existing call). The gateway routes and checks the key's allow-list on `model`, so what goes
// upstream is built from the checked values alone: a repeated parameter (compared once decoded, so
// `model=a&mod%65l=b` repeats), a `call_id` (a call's model cannot be checked against the key) or
// any other name is refused with a 400 naming it, never passed on.
import { errors, quoted, type GatewayError } from '../api/errors.ts';

export type RealtimeQuery = { ok: true; model: string; intent: string | undefined } | { ok: false; error: GatewayError };

const INTENTS: ReadonlySet<string> = new Set(['realtime', 'transcription']);

function refused(name: string, detail: string): RealtimeQuery {
  const error = errors.invalidParameter(name, detail);
  error.param = quoted(name);
  return { ok: false, error };
}

/** The query string of `url` (the request target), checked; `model` is required. */
export function checkRealtimeQuery(url: string): RealtimeQuery {
  const q = url.indexOf('?');
  const params = new URLSearchParams(q === -1 ? '' : url.slice(q + 1));
  const seen = new Set<string>();
  let model: string | undefined;
  let intent: string | undefined;
  for (const [name, value] of params) {
    if (seen.has(name)) return refused(name, 'is repeated: give each parameter once');
    seen.add(name);
    if (name === 'model') model = value;
    else if (name === 'intent') {
      if (!INTENTS.has(value)) return refused(name, 'must be "realtime" or "transcription"');
      intent = value;
    } else if (name === 'call_id') return refused(name, 'is not supported through this gateway: a session is opened for a model (joining a call is not)');
    else return refused(name, 'is not accepted on /v1/realtime (accepted: model, intent)');
  }
  if (!model) return { ok: false, error: errors.missingModel() };
  return { ok: true, model, intent };
}

/** What the upstream is sent: the checked model (the route's upstream name) and intent, nothing else. */
export function upstreamRealtimeQuery(model: string, intent: string | undefined): URLSearchParams {
  const query = new URLSearchParams({ model });
  if (intent !== undefined) query.set('intent', intent);
  return query;
}
