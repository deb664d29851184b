// What an OpenAI-compatible server accepts of OpenAI's request parameters (a provider's `preset`):
// a parameter it refuses is dropped and named in `sluice-dropped-params`, one it calls otherwise
// is renamed, and a server that refuses `stream_options` is not asked for a stream's usage (its
// usage is then estimated). A body with none of them passes untouched: no copy.
import type { Endpoint } from './types.ts';

type Json = Record<string, unknown>;

export interface ParameterRules {
  /** Parameters the server refuses: dropped. */
  readonly drop?: readonly string[];
  /** Parameters the server calls otherwise: client name → server name. */
  readonly rename?: Readonly<Record<string, string>>;
  /** Whether the server takes `stream_options: { include_usage: true }` (false: never sent). */
  readonly streamUsage: boolean;
}

/** The endpoints whose bodies the rules are for (OpenAI's chat and completions). */
const RULED: ReadonlySet<Endpoint> = new Set(['chat', 'completions']);

export class ParameterPolicy {
  readonly streamUsage: boolean;
  readonly #drop: readonly string[];
  readonly #rename: readonly (readonly [string, string])[];

  constructor(rules: ParameterRules) {
    this.streamUsage = rules.streamUsage;
    this.#drop = rules.streamUsage ? (rules.drop ?? []) : [...(rules.drop ?? []), 'stream_options'];
    this.#rename = Object.entries(rules.rename ?? {});
  }

  /** `body` as the server takes it, with what was dropped; undefined when nothing had to change. */
  adapt(endpoint: Endpoint, body: Json): { json: Json; dropped: string[] } | undefined {
    if (!RULED.has(endpoint)) return undefined;
    let json: Json | undefined;
    const dropped: string[] = [];
    for (const name of this.#drop) {
      if (!Object.hasOwn(body, name)) continue;
      // One choice is what every server gives: `n: 1` asks nothing it refuses.
      if (name === 'n' && body.n === 1) continue;
      json ??= { ...body };
      delete json[name];
      dropped.push(name);
    }
    for (const [from, to] of this.#rename) {
      if (!Object.hasOwn(body, from)) continue;
      json ??= { ...body };
      // A client that sent both names keeps the server's own.
      if (!Object.hasOwn(body, to)) json[to] = body[from];
      delete json[from];
    }
    return json === undefined ? undefined : { json, dropped };
  }
}
