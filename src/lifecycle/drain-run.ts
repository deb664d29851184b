// A drain in progress (L1-L6, E1-E4): its plan, its window, its moments, and what it sets going when
// it starts: the drain_started line, an immediate drain's retirements, a drain that stops accepting
// at once, the progress lines, the window's end, the proactive drain and the max_drain_secs force.
// The Lifecycle keeps the state and the counters, and asks this what the drain covers and when its
// window is over.
import type { Clock, Timers } from './clock.ts';
import { closeProbability } from './drain-policy.ts';
import type { DrainMoment, DrainOptions, DrainSettings, LifecycleHooks, LifecycleLog } from './contracts.ts';
import { DrainMoments, round, type DrainPlan, type DrainReports } from './drain-status.ts';
import type { ListenerScopes } from './listener-scopes.ts';
import type { WaitingFor } from './progress.ts';
import type { ConnectionRetirement } from './retirement.ts';

/** The process's numbers, as the drain lines carry them. */
export interface DrainNumbers {
  in_flight: number;
  open_connections: number;
  waiting_for: WaitingFor;
  probe_connections: number;
}

export interface DrainRunNeeds {
  readonly clock: Clock;
  readonly log: LifecycleLog;
  readonly hooks: LifecycleHooks;
  readonly scopes: ListenerScopes;
  readonly retirement: ConnectionRetirement;
  readonly reports: DrainReports;
  /** The settings in force now (a reload replaces them). */
  settings(): DrainSettings;
  /** The process's timers, cancelled when it exits. */
  readonly timers: Timers;
  /** The randomness of the gradual strategy (E1). */
  readonly random: () => number;
  numbers(): DrainNumbers;
  /** The Lifecycle's state, for the progress lines. */
  state(): string;
  /** L8: the drain is forced. */
  force(reason: string): void;
  /** Something the drain waits for may have changed. */
  check(): void;
}

export class DrainRun {
  readonly plan: DrainPlan;
  readonly #needs: DrainRunNeeds;
  /** The window as it was given (the drain lines show it so). */
  readonly #windowSecs: number;
  #windowElapsed = false;
  readonly #moments = new DrainMoments();
  readonly #forceAfter: DrainOptions['forceAfter'];

  constructor(needs: DrainRunNeeds, trigger: string, options: DrainOptions) {
    this.#needs = needs;
    const graceful = options.graceful ?? true;
    this.plan = {
      trigger,
      startedAt: needs.clock.now(),
      graceful,
      inboundOnly: options.inboundOnly ?? false,
      exit: options.exit ?? true,
      includeModifyOnly: options.includeModifyOnly ?? false,
      keepIdleSecs: options.keepIdleSecs ?? 0,
    };
    this.#windowSecs = graceful ? (options.windowSecs ?? needs.settings().minDrainSecs) : 0;
    this.#forceAfter = options.forceAfter;
  }

  /** Sets the drain going (the Lifecycle is in its `draining` state by now). */
  start(): void {
    const needs = this.#needs;
    const plan = this.plan;
    const settings = needs.settings();
    const windowSecs = this.windowSecs();
    this.moment('drain_started');
    // D3: with no window, nothing in flight means we can go at once.
    if (windowSecs === 0) this.#windowOver();
    const numbers = needs.numbers();
    needs.reports.report(
      {
        event: 'drain_started',
        trigger: plan.trigger,
        min_drain_secs: windowSecs,
        max_drain_secs: settings.maxDrainSecs,
        strategy: settings.drainStrategy,
        inbound_only: plan.inboundOnly,
        exit: plan.exit,
        ...numbers,
      },
      'drain started',
    );
    if (settings.drainStrategy === 'immediate') this.#retireNow();
    if (!plan.graceful) needs.hooks.stopAccepting((listener) => this.covers(listener) && !(needs.scopes.get(listener)?.admin && !plan.exit));
    needs.timers.every(settings.progressLogSecs * 1000, () => {
      const n = needs.numbers();
      needs.reports.report(
        { event: 'drain_progress', state: needs.state(), in_flight: n.in_flight, open_connections: n.open_connections, elapsed_secs: round(this.seconds()), waiting_for: n.waiting_for, probe_connections: n.probe_connections },
        'still draining',
      );
    });
    needs.timers.after(windowSecs * 1000, () => {
      this.#windowOver();
      needs.check();
    });
    if (plan.graceful) needs.retirement.scheduleProactiveDrain(plan.startedAt, settings.drainTimeSecs * 1000, (listener) => this.covers(listener));
    if (settings.maxDrainSecs > 0 && plan.exit) needs.timers.after(settings.maxDrainSecs * 1000, () => needs.force('max_drain_secs'));
    if (this.#forceAfter) this.forceAfter(this.#forceAfter);
  }

  /** DrainOptions.forceAfter: a forced end after `secs`, besides max_drain_secs. */
  forceAfter({ secs, reason }: { secs: number; reason: string }): void {
    this.#needs.timers.after(secs * 1000, () => this.#needs.force(reason));
  }

  /** A later drain command can only widen this one (to every listener, or to exiting), never narrow it; its `forceAfter` is added. */
  widen(trigger: string, options: DrainOptions): void {
    if (options.forceAfter) this.forceAfter(options.forceAfter);
    const inboundOnly = options.inboundOnly ?? false;
    const exit = options.exit ?? true;
    const plan = this.plan;
    const wider = (plan.inboundOnly && !inboundOnly) || (!plan.exit && exit);
    if (!wider) return;
    if (!inboundOnly) plan.inboundOnly = false;
    if (exit && !plan.exit) {
      plan.exit = true;
      const { maxDrainSecs } = this.#needs.settings();
      if (maxDrainSecs > 0) this.#needs.timers.after(maxDrainSecs * 1000, () => this.#needs.force('max_drain_secs'));
    }
    this.#needs.log.info({ event: 'drain_widened', trigger, inbound_only: plan.inboundOnly, exit: plan.exit }, 'drain widened');
    if (this.#needs.settings().drainStrategy === 'immediate') this.#retireNow();
    this.#needs.check();
  }

  /**
   * L3/E1: must a response whose headers are written now on `listener` close its connection? Only
   * on a listener the drain covers: always with the `immediate` strategy, with a rising probability
   * with `gradual`.
   */
  retires(listener: string | undefined): boolean {
    if (!this.covers(listener)) return false;
    const settings = this.#needs.settings();
    const probability = closeProbability(settings.drainStrategy, this.#needs.clock.now() - this.plan.startedAt, settings.drainTimeSecs * 1000);
    return probability >= 1 || this.#needs.random() < probability;
  }

  /** Whether the drain covers `listener` (E4, E5). */
  covers(listener: string | undefined): boolean {
    return this.#needs.scopes.inPlan(this.plan, listener);
  }

  get windowElapsed(): boolean {
    return this.#windowElapsed;
  }

  /** Seconds since the drain began. */
  seconds(): number {
    return (this.#needs.clock.now() - this.plan.startedAt) / 1000;
  }

  /** The window in seconds, as given (0 for a drain that stopped accepting at once). */
  windowSecs(): number {
    return this.#windowSecs;
  }

  /** Seconds until the window is over; 0 once it is. */
  windowSecsLeft(): number {
    return this.#windowElapsed ? 0 : Math.max(0, this.plan.startedAt + this.#windowSecs * 1000 - this.#needs.clock.now()) / 1000;
  }

  /** Records a moment of the drain once (the status page's timeline). */
  moment(event: DrainMoment['event']): void {
    this.#moments.record(event, this.seconds());
  }

  moments(): readonly DrainMoment[] {
    return this.#moments.list();
  }

  #windowOver(): void {
    this.#windowElapsed = true;
    this.moment('window_over');
  }

  /** E1 `immediate`: every listener the drain covers retires its connections now. */
  #retireNow(): void {
    this.#needs.scopes.retireNow((listener) => this.covers(listener));
  }
}
