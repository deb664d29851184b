// Prometheus metrics. Gauges that describe state (connections, draining) are read at scrape time
// from their owners, so the hot path pays nothing for them.
import { AggregatorRegistry, Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type MetricObjectWithValues, type MetricValue } from 'prom-client';

/** What `observeLedger` reads at each scrape. */
export interface LedgerReadings {
  readonly spooled: number;
  readonly dropped: number;
  readonly refused: number;
  readonly shipped: number;
  readonly corrupt: number;
  readonly storeErrors: number;
  readonly lagRecords: number;
  readonly lagSeconds: number;
  readonly spoolBytes: number;
}

/** One process's metrics as JSON (what a worker sends its supervisor). */
export type MetricsJson = MetricObjectWithValues<MetricValue<string>>[];

export interface ConnectionCounts {
  listener: string;
  state: 'fresh' | 'idle' | 'active' | 'upgraded';
  count: number;
}

export interface StateSources {
  connections(): ConnectionCounts[];
  draining(): boolean;
  drainDurationSeconds(): number;
  /** The supervisor of `workers: N`: its workers by state. */
  workers?(): { state: string; count: number }[];
  workerRestarts?(): number;
  /** Workers replaced by `workers_recycle`. */
  workerRecycles?(): number;
  /** Every routing target's state: provider, model, circuit (0 closed, 1 half-open, 2 open), in flight. */
  targets?(): { provider: string; model: string; state: number; inFlight: number }[];
  /** The etcd config source, in etcd mode. */
  configSource?(): { revision: number; connected: boolean; loaded: boolean; rejected: ReadonlyMap<string, number>; fullReads: number };
}

/**
 * The values of a counter or gauge that every request updates, by label values, kept in a map and
 * handed to prom-client when scraped: an update then costs a map lookup, not prom-client's label
 * object, validation and label hash.
 */
export class HotValues {
  readonly #labelNames: readonly string[];
  readonly #cells = new Map<string, { labels: Record<string, string>; value: number }>();

  constructor(labelNames: readonly string[]) {
    this.#labelNames = labelNames;
  }

  /** Adds `delta` to the value of these label values, given in the order of the label names. */
  add(delta: number, ...values: string[]): void {
    const key = values.join('\u0000');
    const cell = this.#cells.get(key);
    if (cell) {
      cell.value += delta;
      return;
    }
    if (values.length !== this.#labelNames.length) throw new Error(`expected ${this.#labelNames.length} label values, got ${values.length}`);
    const labels: Record<string, string> = {};
    this.#labelNames.forEach((name, i) => (labels[name] = values[i]!));
    this.#cells.set(key, { labels, value: delta });
  }

  /** Every label combination seen so far, with its value. */
  cells(): IterableIterator<{ labels: Record<string, string>; value: number }> {
    return this.#cells.values();
  }
}

export class Metrics {
  readonly registry = new Registry();
  /** Counter sluice_requests_total: endpoint, status, model, key (the client key's name). */
  readonly requests = new HotValues(['endpoint', 'status', 'model', 'key']);
  readonly requestDuration: Histogram<'endpoint'>;
  /** Gauge sluice_in_flight_requests: endpoint, protocol. */
  readonly inFlight = new HotValues(['endpoint', 'protocol']);
  readonly upstreamErrors: Counter<'provider' | 'kind'>;
  /** Counter sluice_upstream_attempts_total: provider, model (the target's), outcome. */
  readonly attempts = new HotValues(['provider', 'model', 'outcome']);
  /** Counter sluice_route_retries_total: model (the route entry), kind (retry, fallback, budget_exhausted). */
  readonly retries = new HotValues(['model', 'kind']);
  /** Counter sluice_tokens_total: model (the route entry), served_model (the target's configured model), provider, type, key. */
  readonly tokens = new HotValues(['model', 'served_model', 'provider', 'type', 'key']);
  /** Counter sluice_spend_usd_total: model, served_model, key (micro-dollars added; exposed in dollars). */
  readonly spend = new HotValues(['model', 'served_model', 'key']);
  /** Counter sluice_rate_limited_total: key, scope (global, model, key, key_model), limit (requests, tokens, concurrent, budget). */
  readonly rateLimited = new HotValues(['key', 'scope', 'limit']);
  /** Counter sluice_limit_store_errors_total: operation (acquire, settle, renew), outcome. */
  readonly limitStoreErrors: Counter<'operation' | 'outcome'>;
  readonly connectionsClosed: Counter<'listener' | 'reason'>;
  readonly connectionsAccepted: Counter<'listener'>;
  readonly connectionsRejected: Counter<'listener'>;
  readonly configReloads: Counter<'result'>;
  readonly configLastReloadSuccessful: Gauge;
  /** E7: hot restarts by result, carried from generation to generation by the keeper. */
  readonly hotRestarts: Counter<'result'>;
  /** E7: this generation's number under the keeper (0 without hot restart). */
  readonly generation: Gauge;

  constructor(sources: StateSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    const { requests, inFlight, tokens, attempts, retries } = this;
    new Counter({
      name: 'sluice_upstream_attempts_total',
      help: 'Upstream attempts by target (provider, model) and outcome: success, or the failure class (connect, reset, timeout, first_token_timeout, rate_limited, server_error, stream_error, context_length, content_filter, client_error).',
      labelNames: ['provider', 'model', 'outcome'],
      registers,
      collect() {
        this.reset();
        for (const c of attempts.cells()) this.inc(c.labels, c.value);
      },
    });
    new Counter({
      name: 'sluice_route_retries_total',
      help: 'Further attempts by route (model entry) and kind: retry (same target), fallback (next target), budget_exhausted (refused by the retry budget).',
      labelNames: ['model', 'kind'],
      registers,
      collect() {
        this.reset();
        for (const c of retries.cells()) this.inc(c.labels, c.value);
      },
    });
    if (sources.targets) {
      const targets = sources.targets;
      new Gauge({
        name: 'sluice_target_state',
        help: 'Each routing target\'s circuit: 0 closed (in use), 1 half-open (one probe allowed), 2 open (cooling down).',
        labelNames: ['provider', 'model'],
        registers,
        aggregator: 'max',
        collect() {
          this.reset();
          for (const t of targets()) this.set({ provider: t.provider, model: t.model }, t.state);
        },
      });
      new Gauge({
        name: 'sluice_target_in_flight',
        help: 'Upstream attempts in progress by target.',
        labelNames: ['provider', 'model'],
        registers,
        collect() {
          this.reset();
          for (const t of targets()) this.set({ provider: t.provider, model: t.model }, t.inFlight);
        },
      });
    }
    new Counter({
      name: 'sluice_requests_total',
      help: 'Finished requests by endpoint, status, model and client key name ("" when none).',
      labelNames: ['endpoint', 'status', 'model', 'key'],
      registers,
      collect() {
        this.reset();
        for (const c of requests.cells()) this.inc(c.labels, c.value);
      },
    });
    this.requestDuration = new Histogram({
      name: 'sluice_request_duration_seconds',
      help: 'Time from request headers to the end of the response.',
      labelNames: ['endpoint'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
      registers,
    });
    new Gauge({
      name: 'sluice_in_flight_requests',
      help: 'Requests (and WebSocket sessions) in flight, by endpoint and protocol.',
      labelNames: ['endpoint', 'protocol'],
      registers,
      collect() {
        for (const c of inFlight.cells()) this.set(c.labels, c.value);
      },
    });
    this.upstreamErrors = new Counter({
      name: 'sluice_upstream_errors_total',
      help: 'Upstream failures by provider and kind (connect, timeout, reset, status).',
      labelNames: ['provider', 'kind'],
      registers,
    });
    new Counter({
      name: 'sluice_tokens_total',
      help: 'Tokens reported by providers in responses, by model (the route entry), served_model (the target\'s configured model that answered), provider, type (prompt, completion) and client key name.',
      labelNames: ['model', 'served_model', 'provider', 'type', 'key'],
      registers,
      collect() {
        this.reset();
        for (const c of tokens.cells()) this.inc(c.labels, c.value);
      },
    });
    const { spend, rateLimited } = this;
    new Counter({
      name: 'sluice_spend_usd_total',
      help: 'What requests cost in US dollars (usage × the price table), by model (the route entry), served_model (the target\'s configured model that answered) and client key name.',
      labelNames: ['model', 'served_model', 'key'],
      registers,
      collect() {
        this.reset();
        for (const c of spend.cells()) this.inc(c.labels, c.value / 1e6);
      },
    });
    new Counter({
      name: 'sluice_rate_limited_total',
      help: 'Requests refused by a limit, by client key name, scope (global, model, team, key, key_model) and limit (requests, tokens, concurrent, budget).',
      labelNames: ['key', 'scope', 'limit'],
      registers,
      collect() {
        this.reset();
        for (const c of rateLimited.cells()) this.inc(c.labels, c.value);
      },
    });
    this.limitStoreErrors = new Counter({
      name: 'sluice_limit_store_errors_total',
      help: 'Operations the limit store could not do, by operation (acquire, settle, renew) and outcome (allowed, refused, retried, lost).',
      labelNames: ['operation', 'outcome'],
      registers,
    });
    this.connectionsClosed = new Counter({
      name: 'sluice_connections_closed_total',
      help: 'Downstream connections closed, by listener and reason.',
      labelNames: ['listener', 'reason'],
      registers,
    });
    this.connectionsAccepted = new Counter({
      name: 'sluice_connections_accepted_total',
      help: 'Downstream connections accepted, by listener.',
      labelNames: ['listener'],
      registers,
    });
    this.connectionsRejected = new Counter({
      name: 'sluice_connections_rejected_total',
      help: 'Downstream connections closed at once because downstream.max_connections was reached.',
      labelNames: ['listener'],
      registers,
    });
    this.configReloads = new Counter({
      name: 'sluice_config_reloads_total',
      help: 'Configuration reloads by result (success, failure).',
      labelNames: ['result'],
      registers,
      // Every process of a group counts the same reloads.
      aggregator: 'max',
    });
    this.configLastReloadSuccessful = new Gauge({
      name: 'sluice_config_last_reload_successful',
      help: '1 when the last configuration reload succeeded (or none was tried), 0 when it was rejected.',
      registers,
      aggregator: 'min',
    });
    this.configLastReloadSuccessful.set(1);
    this.hotRestarts = new Counter({
      name: 'sluice_hot_restarts_total',
      help: 'Hot restarts by result (success, failed, timeout), since the keeper process started.',
      labelNames: ['result'],
      registers,
      aggregator: 'max',
    });
    this.generation = new Gauge({
      name: 'sluice_generation',
      help: 'The generation serving (1 for the first under hot_restart, 0 without it).',
      registers,
      aggregator: 'max',
    });
    new Gauge({
      name: 'sluice_open_connections',
      help: 'Open downstream connections by listener and state (fresh, idle, active, upgraded).',
      labelNames: ['listener', 'state'],
      registers,
      collect() {
        this.reset();
        for (const c of sources.connections()) this.set({ listener: c.listener, state: c.state }, c.count);
      },
    });
    new Gauge({
      name: 'sluice_draining',
      help: '1 while the process (or any process of the group) is draining, else 0.',
      registers,
      aggregator: 'max',
      collect() {
        this.set(sources.draining() ? 1 : 0);
      },
    });
    new Gauge({
      name: 'sluice_drain_duration_seconds',
      help: 'Seconds since the drain began (0 when not draining).',
      registers,
      aggregator: 'max',
      collect() {
        this.set(sources.drainDurationSeconds());
      },
    });
    if (sources.configSource) {
      const source = sources.configSource;
      new Gauge({
        name: 'sluice_config_revision',
        help: 'The etcd revision of the resources serving (providers, models, keys).',
        registers,
        aggregator: 'max',
        collect() {
          this.set(source().revision);
        },
      });
      new Gauge({
        name: 'sluice_etcd_connected',
        help: '1 while the gateway follows etcd (its watch is open: a change arrives), 0 while it serves what it has without it.',
        registers,
        aggregator: 'min',
        collect() {
          this.set(source().connected ? 1 : 0);
        },
      });
      new Gauge({
        name: 'sluice_config_loaded',
        help: '1 once resources are applied (from etcd or the snapshot cache); 0 while readiness waits for them.',
        registers,
        aggregator: 'min',
        collect() {
          this.set(source().loaded ? 1 : 0);
        },
      });
      new Counter({
        name: 'sluice_etcd_full_reads_total',
        help: 'Full reads of every resource in etcd: the first, and one after each compaction that cancelled the watch.',
        registers,
        aggregator: 'max',
        collect() {
          this.reset();
          this.inc(source().fullReads);
        },
      });
      new Counter({
        name: 'sluice_config_resources_rejected_total',
        help: 'Resources from etcd rejected (invalid, or not fitting the others), by kind; every other change applied.',
        labelNames: ['kind'],
        registers,
        aggregator: 'max',
        collect() {
          this.reset();
          for (const [kind, count] of source().rejected) this.inc({ kind }, count);
        },
      });
    }
    if (sources.workers) {
      const workers = sources.workers;
      new Gauge({
        name: 'sluice_workers',
        help: 'Worker processes by state (starting, ready, draining, restarting, exited).',
        labelNames: ['state'],
        registers,
        collect() {
          this.reset();
          for (const w of workers()) this.set({ state: w.state }, w.count);
        },
      });
    }
    if (sources.workerRecycles) {
      const recycles = sources.workerRecycles;
      new Counter({
        name: 'sluice_worker_recycles_total',
        help: 'Worker processes replaced because they passed workers_recycle.max_rss_mb or max_requests.',
        registers,
        collect() {
          this.reset();
          this.inc(recycles());
        },
      });
    }
    if (sources.workerRestarts) {
      const restarts = sources.workerRestarts;
      new Gauge({
        name: 'sluice_worker_restarts',
        help: 'Worker processes restarted after dying while serving, since the start.',
        registers,
        collect() {
          this.set(restarts());
        },
      });
    }
  }

  /** The usage ledger's readings, taken at each scrape (the request path pays nothing for them). */
  observeLedger(read: () => LedgerReadings): void {
    const registers = [this.registry];
    const counter = (name: string, help: string, value: (r: LedgerReadings) => number) =>
      new Counter({
        name,
        help,
        registers,
        collect() {
          this.reset();
          this.inc(value(read()));
        },
      });
    const gauge = (name: string, help: string, value: (r: LedgerReadings) => number) =>
      new Gauge({
        name,
        help,
        registers,
        collect() {
          this.set(value(read()));
        },
      });
    counter('sluice_ledger_records_total', 'Records written to the ledger\'s spool.', (r) => r.spooled);
    counter('sluice_ledger_dropped_total', 'Records dropped because the spool was full (ledger.spool_max_mb, ledger.on_full: drop).', (r) => r.dropped);
    counter('sluice_ledger_refused_total', 'Requests refused because the spool was full (ledger.on_full: refuse).', (r) => r.refused);
    counter('sluice_ledger_shipped_total', 'Records the ledger\'s store took (a record shipped again after a crash counts once more; the store keeps it once).', (r) => r.shipped);
    counter('sluice_ledger_corrupt_total', 'Spool lines skipped at a replay: a bad checksum or a torn last line.', (r) => r.corrupt);
    counter('sluice_ledger_store_errors_total', 'Batches the ledger\'s store refused or did not answer (retried).', (r) => r.storeErrors);
    gauge('sluice_ledger_lag_records', 'Records spooled and not yet in the store.', (r) => r.lagRecords);
    gauge('sluice_ledger_lag_seconds', 'Age of the oldest record not yet in the store (0: none).', (r) => r.lagSeconds);
    gauge('sluice_ledger_spool_bytes', 'Bytes of the spool\'s segments on disk.', (r) => r.spoolBytes);
  }

  /** The text exposition; with `others` (workers' metrics), counters and gauges are summed across the group. */
  async render(others: MetricsJson[] = []): Promise<string> {
    if (others.length === 0) return this.registry.metrics();
    const own = (await this.registry.getMetricsAsJSON()) as MetricsJson;
    return AggregatorRegistry.aggregate([own, ...others]).metrics();
  }

  json(): Promise<MetricsJson> {
    return this.registry.getMetricsAsJSON() as Promise<MetricsJson>;
  }
}
