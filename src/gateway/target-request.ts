// A route's target made ready for one request: the client's body with the target's model (an
// OpenAI stream's usage asked for), or translated to the API the target speaks; else the reason
// the target cannot take the request (no translation, a parameter it cannot express).
import { errors, type GatewayError } from '../api/errors.ts';
import { TranslationError } from '../translate/types.ts';
import { translationFor } from '../translate/registry.ts';
import type { Prepared } from './attempt.ts';
import { withStreamUsage } from './stream-usage.ts';
import type { RoutedRequest } from './routed-request.ts';

/** The request for the route's target at `index`, or why that target cannot take it; made once per request, kept in `made`. */
export function prepareTarget(request: RoutedRequest, index: number, made: Map<number, Prepared | GatewayError>): Prepared | GatewayError {
  let prepared = made.get(index);
  if (prepared) return prepared;
  const { route, providers, json, bytes, ctx, endpoint, headers, path } = request;
  const target = route.targets[index]!;
  const provider = providers.get(target.provider)!;
  const upstreamModel = target.model ?? (json.model as string);
  const label = target.model ?? route.entry;
  const state = route.states[index]!;
  const targetHeaders = Object.keys(target.headers).length === 0 ? headers : { ...headers, ...target.headers };
  const base = { requestId: ctx.id, headers: targetHeaders };
  if (provider.supports(endpoint)) {
    let body = bytes;
    let parsed = json;
    const rules = provider.parameters;
    // Usage of every OpenAI chat and completions stream is asked for (limits, spend) and hidden
    // again if the client did not ask; not of a server that refuses the question (then estimated).
    const asked = (endpoint === 'chat' || endpoint === 'completions') && provider.api !== 'anthropic' && rules?.streamUsage !== false ? withStreamUsage(json) : undefined;
    const adapted = rules?.adapt(endpoint, asked ?? json);
    if (upstreamModel !== json.model || asked || adapted) {
      parsed = { ...(adapted?.json ?? asked ?? json), model: upstreamModel };
      try {
        body = Buffer.from(JSON.stringify(parsed));
      } catch {
        return errors.tooDeep();
      }
    }
    prepared = { target, index, provider, state, label, request: { ...base, endpoint, body, json: parsed }, translation: undefined, dropped: adapted?.dropped ?? [], stripUsage: asked !== undefined };
  } else {
    const translation = translationFor(endpoint, provider.api, json);
    if (!translation || !provider.supports(translation.translator.to)) {
      prepared = errors.unsupportedEndpoint(json.model as string, provider.name, provider.type, path);
    } else {
      try {
        const out = translation.translator.request(json, upstreamModel);
        const adapted = provider.parameters?.adapt(translation.translator.to, out.body);
        const upstream = adapted?.json ?? out.body;
        const body = Buffer.from(JSON.stringify(upstream));
        // The client's own API headers (anthropic-version, anthropic-beta; openai-beta) mean nothing to the other API.
        const foreign = provider.api === 'anthropic' ? 'openai-' : 'anthropic-';
        const translatedHeaders = Object.fromEntries(Object.entries(base.headers).filter(([name]) => !name.startsWith(foreign)));
        prepared = {
          target,
          index,
          provider,
          state,
          label,
          request: { requestId: base.requestId, headers: translatedHeaders, endpoint: translation.translator.to, body, json: upstream },
          translation,
          // The translation's own stream_options (it asks for usage) is not the client's to hear of.
          dropped: adapted ? [...out.dropped, ...adapted.dropped.filter((name) => name !== 'stream_options')] : out.dropped,
          stripUsage: false,
        };
      } catch (error) {
        if (error instanceof TranslationError) prepared = errors.untranslatable(error.param, error.message, provider.name, provider.type);
        else if (error instanceof RangeError) prepared = errors.tooDeep();
        else throw error;
      }
    }
  }
  made.set(index, prepared);
  return prepared;
}
