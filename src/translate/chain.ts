// Two translations one after the other, through a pivot API: a Chat Completions request reaches
// Bedrock's Converse as chat → Messages → Converse, and the answer comes back the same way. Each
// translation keeps its own rules (what it translates, drops or refuses); the chain adds none.
import type { Json, StreamOutcome, StreamTranslator, TranslatedRequest, Translator } from './types.ts';
import type { Translation } from './registry.ts';

/** `first` (the client's API → the pivot), then `second` (the pivot → the provider's API). */
export function chain(first: Translation, second: Translation): Translation {
  const a = first.translator;
  const b = second.translator;
  const translator: Translator = {
    from: a.from,
    to: b.to,
    request(body: Json, upstreamModel: string): TranslatedRequest {
      const pivot = a.request(body, upstreamModel);
      const out = b.request(pivot.body, upstreamModel);
      return { body: out.body, dropped: [...pivot.dropped, ...out.dropped] };
    },
    response: (body: Json) => a.response(b.response(body)),
    error: (status: number, body: unknown) => a.error(status, b.error(status, body)),
    stream: () => chainedStream(first.stream(), second.stream()),
  };
  return { translator, stream: translator.stream };
}

/** The provider's stream through `inner` (to the pivot), then `outer` (to the client's API). */
function chainedStream(outer: StreamTranslator, inner: StreamTranslator): StreamTranslator {
  const through = (text: string): string => (text === '' ? '' : outer.push(Buffer.from(text)));
  const stream: StreamTranslator = {
    push: (chunk: Buffer) => through(inner.push(chunk)),
    end: () => through(inner.end()) + outer.end(),
    // The inner translator knows how the provider's stream ended; the outer one only what it was told.
    outcome(): StreamOutcome {
      const ended = inner.outcome?.() ?? 'complete';
      return ended === 'complete' ? (outer.outcome?.() ?? 'complete') : ended;
    },
  };
  if (outer.nextSequence) stream.nextSequence = () => outer.nextSequence!();
  return stream;
}
