// Chooses a route's next target: the lowest priority tier that has a usable target not yet tried,
// then the route's strategy within that tier. Pure but for the round-robin counters it keeps.
import type { TargetState } from './targets.ts';

export type Strategy = 'round_robin' | 'least_in_flight' | 'lowest_latency' | 'consistent_hash';

export interface BalancedTarget {
  readonly weight: number;
  readonly priority: number;
  /** Stable identity, hashed by consistent_hash. */
  readonly id: string;
}

export class Balancer {
  readonly #targets: readonly BalancedTarget[];
  readonly #strategy: Strategy;
  /** Smooth weighted round robin (nginx's): each target's current weight. */
  readonly #current: number[];
  readonly #tiers: readonly number[];

  constructor(targets: readonly BalancedTarget[], strategy: Strategy) {
    this.#targets = targets;
    this.#strategy = strategy;
    this.#current = targets.map(() => 0);
    this.#tiers = [...new Set(targets.map((t) => t.priority))].sort((a, b) => a - b);
  }

  /**
   * The index of the next target to try, or undefined when none is left. `tried` are excluded;
   * a target whose state is not usable (cooling down, or half-open with its probe out) is skipped,
   * unless `panic` and no target at all is usable: then the first tier with an untried target is
   * used as if all were well (better a likely failure than a certain one).
   */
  pick(tried: ReadonlySet<number>, states: readonly TargetState[], now: number, hashKey: string | undefined, panic: boolean): number | undefined {
    if (this.#targets.length === 1) return !tried.has(0) && (panic || states[0]!.usable(now)) ? 0 : undefined;
    for (const tier of this.#tiers) {
      const usable: number[] = [];
      this.#targets.forEach((t, i) => {
        if (t.priority === tier && !tried.has(i) && states[i]!.usable(now)) usable.push(i);
      });
      if (usable.length > 0) return this.#choose(usable, states, hashKey);
    }
    if (!panic) return undefined;
    for (const tier of this.#tiers) {
      const untried: number[] = [];
      this.#targets.forEach((t, i) => {
        if (t.priority === tier && !tried.has(i)) untried.push(i);
      });
      if (untried.length > 0) return this.#choose(untried, states, hashKey);
    }
    return undefined;
  }

  #choose(candidates: number[], states: readonly TargetState[], hashKey: string | undefined): number {
    if (candidates.length === 1) return candidates[0]!;
    switch (this.#strategy) {
      case 'least_in_flight': {
        const score = (i: number) => (states[i]!.inFlight + 1) / this.#targets[i]!.weight;
        const best = Math.min(...candidates.map(score));
        return this.#roundRobin(candidates.filter((i) => score(i) === best));
      }
      case 'lowest_latency': {
        // A target never measured goes first: that is how it gets measured.
        const unmeasured = candidates.filter((i) => states[i]!.ewmaMs === undefined);
        if (unmeasured.length > 0) return this.#roundRobin(unmeasured);
        const best = Math.min(...candidates.map((i) => states[i]!.ewmaMs!));
        return this.#roundRobin(candidates.filter((i) => states[i]!.ewmaMs === best));
      }
      case 'consistent_hash':
        if (hashKey === undefined) return this.#roundRobin(candidates);
        return this.#rendezvous(candidates, hashKey);
      default:
        return this.#roundRobin(candidates);
    }
  }

  /** Smooth weighted round robin over `candidates`: spreads a 5:1:1 split as a,a,b,a,c,a,a. */
  #roundRobin(candidates: number[]): number {
    if (candidates.length === 1) return candidates[0]!;
    let total = 0;
    let best = candidates[0]!;
    for (const i of candidates) {
      const weight = this.#targets[i]!.weight;
      this.#current[i]! += weight;
      total += weight;
      if (this.#current[i]! > this.#current[best]!) best = i;
    }
    this.#current[best]! -= total;
    return best;
  }

  /**
   * Weighted rendezvous hashing: each key ranks the targets the same way every time, and a target
   * that leaves moves only its own keys (the next choice is the next in that key's ranking).
   */
  #rendezvous(candidates: number[], key: string): number {
    let best = candidates[0]!;
    let bestScore = -Infinity;
    for (const i of candidates) {
      const target = this.#targets[i]!;
      const unit = (fnv1a(`${key}\u0000${target.id}`) + 1) / 4294967297; // (0, 1)
      const score = -target.weight / Math.log(unit);
      if (score > bestScore) {
        bestScore = score;
        best = i;
      }
    }
    return best;
  }
}

/** 32-bit FNV-1a with a final avalanche (murmur3's fmix32), so that similar keys spread. */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
