// Prometheus metrics. Gauges that describe state (connections, draining) are read at scrape time
// from their owners, so the hot path pays nothing for them.
import { AggregatorRegistry, Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type MetricObjectWithValues, type MetricValue } from 'prom-client';

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
}

export class Metrics {
  readonly registry = new Registry();
  readonly requests: Counter<'endpoint' | 'status' | 'model'>;
  readonly requestDuration: Histogram<'endpoint'>;
  readonly inFlight: Gauge<'endpoint' | 'protocol'>;
  readonly upstreamErrors: Counter<'provider' | 'kind'>;
  readonly tokens: Counter<'model' | 'provider' | 'type'>;
  readonly connectionsClosed: Counter<'listener' | 'reason'>;
  readonly connectionsAccepted: Counter<'listener'>;
  readonly connectionsRejected: Counter<'listener'>;
  readonly configReloads: Counter<'result'>;
  readonly configLastReloadSuccessful: Gauge;

  constructor(sources: StateSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.requests = new Counter({
      name: 'sluice_requests_total',
      help: 'Finished requests by endpoint, status and model.',
      labelNames: ['endpoint', 'status', 'model'],
      registers,
    });
    this.requestDuration = new Histogram({
      name: 'sluice_request_duration_seconds',
      help: 'Time from request headers to the end of the response.',
      labelNames: ['endpoint'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
      registers,
    });
    this.inFlight = new Gauge({
      name: 'sluice_in_flight_requests',
      help: 'Requests (and WebSocket sessions) in flight, by endpoint and protocol.',
      labelNames: ['endpoint', 'protocol'],
      registers,
    });
    this.upstreamErrors = new Counter({
      name: 'sluice_upstream_errors_total',
      help: 'Upstream failures by provider and kind (connect, timeout, reset, status).',
      labelNames: ['provider', 'kind'],
      registers,
    });
    this.tokens = new Counter({
      name: 'sluice_tokens_total',
      help: 'Tokens reported by providers in responses, by model, provider and type (prompt, completion).',
      labelNames: ['model', 'provider', 'type'],
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
    if (sources.workers) {
      const workers = sources.workers;
      new Gauge({
        name: 'sluice_workers',
        help: 'Worker processes by state (starting, ready, restarting, exited).',
        labelNames: ['state'],
        registers,
        collect() {
          this.reset();
          for (const w of workers()) this.set({ state: w.state }, w.count);
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
