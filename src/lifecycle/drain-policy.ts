// The arithmetic of Envoy-style drains (E1, E2), kept pure so tests can pin it with a fake clock
// and a fixed random source.

export type DrainStrategy = 'immediate' | 'gradual';

/**
 * E1: the chance that a response written `elapsedMs` into a drain closes its connection.
 * Immediate: always. Gradual: rises linearly from 0 at the start to 1 at half the drain time.
 */
export function closeProbability(strategy: DrainStrategy, elapsedMs: number, drainTimeMs: number): number {
  if (strategy === 'immediate' || drainTimeMs <= 0) return 1;
  return Math.min(1, Math.max(0, elapsedMs / (drainTimeMs / 2)));
}

/**
 * E2: when (ms after the drain began) a connection that is not draining yet is drained
 * proactively: a random moment in the last third, early enough for its own drain timeout to
 * elapse before the drain ends. Undefined when it is skipped: the drain time leaves no room, or
 * the connection was accepted after the last third began.
 */
export function proactiveDrainAt(
  drainTimeMs: number,
  connectionDrainTimeoutMs: number,
  acceptedAfterStartMs: number,
  random: () => number,
): number | undefined {
  const lastThird = (drainTimeMs * 2) / 3;
  const latest = drainTimeMs - connectionDrainTimeoutMs;
  if (latest <= lastThird || acceptedAfterStartMs >= lastThird) return undefined;
  return lastThird + random() * (latest - lastThird);
}
