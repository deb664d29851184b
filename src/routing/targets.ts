// Per-target state, shared by every route that sends to the same provider and model: requests in
// progress, an EWMA of the time to first token, and the circuit (closed → open for a cooldown →
// half-open with one probe → closed). It outlives a reload for targets whose provider did not change.
import type { Clock } from '../lifecycle/clock.ts';

export type CircuitState = 'closed' | 'open' | 'half_open';

/** Gauge values of `sluice_target_state`. */
export const STATE_VALUE: Readonly<Record<CircuitState, number>> = { closed: 0, half_open: 1, open: 2 };

export interface CooldownSettings {
  /** Failures in a row that open the circuit; 0: never. */
  readonly failures: number;
  readonly secs: number;
  readonly maxSecs: number;
}

/** Weight of the newest sample in the latency average. */
const EWMA_ALPHA = 0.3;

export class TargetState {
  readonly provider: string;
  readonly model: string;
  inFlight = 0;
  /** Time to first token (or to the headers of a JSON answer), ms; undefined until measured. */
  ewmaMs: number | undefined = undefined;
  consecutiveFailures = 0;
  state: CircuitState = 'closed';
  /** While open: when the cooldown ends (clock ms). */
  openUntil = 0;
  /** Half-open: the one probe is out. */
  probing = false;
  attempts = 0;
  failures = 0;
  lastFailure: string | undefined = undefined;

  constructor(provider: string, model: string) {
    this.provider = provider;
    this.model = model;
  }

  /**
   * Whether a new attempt may go here now. An open circuit whose cooldown has ended lets one probe
   * through (half-open); until that probe ends, nothing else goes.
   */
  usable(now: number): boolean {
    if (this.state === 'closed') return true;
    if (this.state === 'open') return now >= this.openUntil;
    return !this.probing;
  }

  /** An attempt starts here (after `usable` said yes). */
  begin(now: number): void {
    this.inFlight++;
    this.attempts++;
    if (this.state === 'open' && now >= this.openUntil) this.state = 'half_open';
    if (this.state === 'half_open') this.probing = true;
  }

  /** The attempt ended (success or failure already reported, or abandoned). */
  end(): void {
    this.inFlight--;
  }

  succeeded(latencyMs: number | undefined): void {
    if (latencyMs !== undefined) this.ewmaMs = this.ewmaMs === undefined ? latencyMs : this.ewmaMs + EWMA_ALPHA * (latencyMs - this.ewmaMs);
    this.consecutiveFailures = 0;
    this.state = 'closed';
    this.probing = false;
  }

  /**
   * A failure that says the target is unwell (never the client's own mistake). Opens the circuit
   * after `failures` in a row, at once when half-open, or at once with a `Retry-After`.
   * Returns true when this failure opened it.
   */
  failed(kind: string, now: number, settings: CooldownSettings, retryAfterMs: number | undefined): boolean {
    this.failures++;
    this.lastFailure = kind;
    this.consecutiveFailures++;
    const wasProbe = this.state === 'half_open';
    this.probing = false;
    if (settings.failures === 0 && retryAfterMs === undefined) return false;
    const trips = wasProbe || retryAfterMs !== undefined || (settings.failures > 0 && this.consecutiveFailures >= settings.failures);
    if (!trips) return false;
    // The target's own Retry-After is its word on when to come back; else the configured cooldown.
    const ms = retryAfterMs !== undefined ? Math.min(retryAfterMs, settings.maxSecs * 1000) : settings.secs * 1000;
    const wasOpen = this.state === 'open';
    this.state = 'open';
    this.openUntil = Math.max(wasOpen ? this.openUntil : 0, now + ms);
    return !wasOpen;
  }

  /** The attempt ended without telling anything about the target (the client left). */
  abandoned(): void {
    if (this.state === 'half_open') this.probing = false;
  }

  /** What `/server_info` shows. */
  info(now: number): Record<string, unknown> {
    return {
      provider: this.provider,
      model: this.model,
      state: this.state === 'open' && now >= this.openUntil ? 'half_open' : this.state,
      in_flight: this.inFlight,
      ewma_first_token_ms: this.ewmaMs === undefined ? null : Math.round(this.ewmaMs),
      consecutive_failures: this.consecutiveFailures,
      cooldown_remaining_ms: this.state === 'open' ? Math.max(0, Math.round(this.openUntil - now)) : 0,
      attempts: this.attempts,
      failures: this.failures,
      last_failure: this.lastFailure ?? null,
    };
  }
}

/** Every target's state, by provider and model. */
export class TargetStates {
  readonly #states = new Map<string, TargetState>();
  readonly clock: Clock;

  constructor(clock: Clock) {
    this.clock = clock;
  }

  /** A reload's predecessor: the states it may take over, and which providers it may take them for. */
  #previous: { states: TargetStates; kept: (provider: string) => boolean } | undefined;

  get(provider: string, model: string): TargetState {
    const key = `${provider}\u0000${model}`;
    let state = this.#states.get(key);
    if (!state) {
      const previous = this.#previous;
      state = previous && previous.kept(provider) ? previous.states.#states.get(key) : undefined;
      state ??= new TargetState(provider, model);
      this.#states.set(key, state);
    }
    return state;
  }

  /**
   * The states of a reloaded config: a target whose provider `kept` says is unchanged keeps its
   * state when the new config still routes to it (call `settle()` once every route is built); a
   * changed provider (a new URL, a new key) starts afresh; a target no longer routed is forgotten.
   */
  carry(kept: (provider: string) => boolean): TargetStates {
    const next = new TargetStates(this.clock);
    next.#previous = { states: this, kept };
    return next;
  }

  /** The routes are built: nothing more is taken over from the predecessor (which can be collected). */
  settle(): void {
    this.#previous = undefined;
  }

  all(): IterableIterator<TargetState> {
    return this.#states.values();
  }
}
