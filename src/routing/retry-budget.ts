// Envoy's retry budget: retries (and fallbacks) in progress may not exceed a percentage of the
// requests in progress, or a floor, so that retries cannot multiply the load during an outage.

export class RetryBudget {
  #requests = 0;
  #retries = 0;
  percent: number;
  minConcurrency: number;

  constructor(percent: number, minConcurrency: number) {
    this.percent = percent;
    this.minConcurrency = minConcurrency;
  }

  requestStarted(): void {
    this.#requests++;
  }

  requestFinished(): void {
    this.#requests--;
  }

  /** Takes a retry from the budget; false when the budget is spent (the caller returns its last failure). */
  tryRetry(): boolean {
    const allowed = Math.max(this.minConcurrency, Math.floor((this.#requests * this.percent) / 100));
    if (this.#retries >= allowed) return false;
    this.#retries++;
    return true;
  }

  retryFinished(): void {
    this.#retries--;
  }

  get retries(): number {
    return this.#retries;
  }

  get requests(): number {
    return this.#requests;
  }
}
