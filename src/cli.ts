// The `sluice` command: parse arguments, load the config, start the gateway, wire the signals.
// Loaded by main.ts once the Node.js version is known to be right.
import cluster from 'node:cluster';
import { parseArgs } from 'node:util';
import { createRequire } from 'node:module';
import { ConfigError, loadDefaultConfig } from './config/load.ts';
import { ReloadTriggers } from './reload/triggers.ts';
import { embeddedSource, fileSource, type ConfigSource } from './config/source.ts';
import type { EtcdSource } from './config/etcd-source.ts';
import { SnapshotCache } from './config/snapshot.ts';
import { workerCount, type Config } from './config/schema.ts';
import { machineShape } from './cluster/machine.ts';
import { createLoggers, flushLogger } from './telemetry/logger.ts';
import { startGateway, type RunningGateway } from './app.ts';
import { WorkerGroup } from './cluster/worker-group.ts';
import { GroupSupervision, oneProcess, type Supervision } from './cluster/supervision.ts';
import { runWorker } from './worker.ts';
import { Keeper } from './hot-restart/keeper.ts';
import { GenerationLink, generationNumber } from './hot-restart/generation.ts';
import { requestRestart } from './commands/restart-command.ts';
import { applyResources, getResources } from './commands/resources-command.ts';
import { planCommand } from './commands/plan-command.ts';
import { usageCommand } from './commands/usage-command.ts';
import { followStatus } from './commands/status-command.ts';
import { reportValid } from './commands/validate-command.ts';

const { version } = createRequire(import.meta.url)('../package.json') as { version: string };

const HELP = `sluice ${version}: an OpenAI-compatible AI gateway that drains without losing requests

Usage:
  sluice [serve] [--config FILE]     run the gateway (default: the embedded config)
  sluice validate [--config FILE]    check a config file; prints every problem and exits 1 if any
  sluice restart [--config FILE] [--admin URL] [--token TOKEN]
                                     hot restart (hot_restart.enabled): a new generation takes the
                                     sockets, then the old one drains; waits and says how it went
  sluice apply -f FILE [--admin URL] [--token TOKEN] [--config FILE]
                                     creates or updates, through the admin API (etcd mode), the
                                     providers, models, teams and keys a YAML file lists (providers:,
                                     models:, teams:, keys:, as in a config file); never deletes what the
                                     file does not list. Says for each: created, configured, unchanged
  sluice get providers|models|teams|keys [NAME] [-o json|yaml] [--admin URL] [--token TOKEN] [--config FILE]
                                     lists them as a table (secrets left out); -o yaml prints a
                                     file that apply -f takes
  sluice status [--admin URL] [--token TOKEN] [--config FILE]
                                     follows the gateway live (its status page, in a terminal):
                                     a progress bar during a drain; exits when the gateway exits
  sluice usage [--admin URL] [--token TOKEN] [--config FILE] [--from T] [--to T] [--by GROUPS]
               [--bucket day|hour] [-o table|json|csv]
                                     the usage ledger's requests, errors, tokens and cost by key,
                                     team, model, provider or user (GROUPS: comma-separated);
                                     T: an ISO date or time, epoch ms, or 30m, 24h, 7d ago (default: 7 days)
  sluice plan [--config FILE] [--longest-stream S] [--prestop S] [--health-check-interval S]
              [--health-check-failures N] [--margin S] [--grace S] [--platform P] [-o text|json|values] [--strict]
                                     sizes the platform around the drain (D1-D3): grace period,
                                     TimeoutStopSec, probes, each with its reason; warns where the
                                     config and the platform disagree (docs/deployment.md)
  sluice --version | --help

The config file may also be named by SLUICE_CONFIG. Without one, Sluice runs its embedded default:
proxy on 127.0.0.1:8080, admin on 127.0.0.1:9901, and a local "echo" model that needs no key.
restart, apply, get, status and usage ask the admin listener of the config (or --admin URL) with --token, else
SLUICE_ADMIN_TOKEN, else the config's admin token.
Signals: SIGTERM/SIGINT start a graceful drain; a second one ends it at once; SIGHUP reloads
the config; SIGUSR2 hot restarts (hot_restart.enabled). With workers > 1 or hot restart, signal
the process started; the others follow it.
Docs: docs/configuration.md
`;

async function main(argv: string[]): Promise<number> {
  // `sluice plan` has flags of its own (docs/deployment.md).
  if (argv[0] === 'plan' && !argv.includes('--help') && !argv.includes('-h')) return planCommand(argv.slice(1));
  // `sluice usage` has flags of its own (docs/usage-ledger.md).
  if (argv[0] === 'usage' && !argv.includes('--help') && !argv.includes('-h')) return usageCommand(argv.slice(1));
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        config: { type: 'string', short: 'c' },
        version: { type: 'boolean', short: 'v' },
        help: { type: 'boolean', short: 'h' },
        admin: { type: 'string' },
        token: { type: 'string' },
        file: { type: 'string', short: 'f' },
        output: { type: 'string', short: 'o' },
      },
    });
  } catch (error) {
    process.stderr.write(`sluice: ${(error as Error).message}\n\n${HELP}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.version) {
    process.stdout.write(`${version}\n`);
    return 0;
  }
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const command = positionals[0] ?? 'serve';
  if (positionals.length > (command === 'get' ? 3 : 1) || !['serve', 'validate', 'restart', 'apply', 'get', 'status'].includes(command)) {
    process.stderr.write(`sluice: unknown command "${positionals.join(' ')}"\n\n${HELP}`);
    return 2;
  }
  const file = values.config ?? (process.env.SLUICE_CONFIG || undefined);
  const source = file ? fileSource(file) : embeddedSource();
  let config: Config;
  try {
    config = source.load();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    // `sluice restart|apply|get --admin URL` need nothing of a config (its `${VAR}`s may not be set here).
    if ((command === 'restart' || command === 'apply' || command === 'get' || command === 'status') && values.admin) config = loadDefaultConfig();
    else {
      process.stderr.write(`sluice: ${error.message}\n`);
      return 1;
    }
  }
  if (command === 'restart') return requestRestart(config, { admin: values.admin, token: values.token ?? process.env.SLUICE_ADMIN_TOKEN });
  if (command === 'apply') return applyResources(config, { file: values.file, admin: values.admin, token: values.token });
  if (command === 'status') return followStatus(config, { admin: values.admin, token: values.token });
  if (command === 'get') return getResources(config, { kind: positionals[1], name: positionals[2], output: values.output, admin: values.admin, token: values.token });
  if (command === 'validate') return reportValid(config, file ?? 'embedded default');
  const generation = generationNumber();
  if (config.hot_restart.enabled && generation === 0) return keep(config, argv);
  return serve(config, source, generation, file);
}

/** The snapshot cache's file: `snapshot.path`, else beside the config file (`<file>.snapshot.json`). */
function snapshotPath(config: Config, file: string | undefined): string {
  return config.snapshot.path ?? `${file ?? 'sluice'}.snapshot.json`;
}

/** E7: this process stays and runs the gateway as generations (see hot-restart/keeper.ts). */
function keep(config: Config, argv: string[]): Promise<number> {
  const loggers = createLoggers({ level: config.log.level, format: config.log.format, generation: 0 });
  const keeper = new Keeper({ args: argv, log: loggers.events, startTimeoutSecs: config.hot_restart.start_timeout_secs });
  loggers.events.info({ event: 'keeper_started', start_timeout_secs: config.hot_restart.start_timeout_secs }, 'hot restart enabled: this process keeps the gateway\'s generations (send SIGUSR2 or run `sluice restart` to replace the one serving)');
  return keeper.run().then((code) => {
    loggers.events.info({ event: 'keeper_exit', exit_code: code }, 'keeper exiting');
    flushLogger(loggers.events);
    return code;
  });
}

async function serve(bootstrapConfig: Config, bootstrap: ConfigSource, generation: number, file: string | undefined): Promise<number> {
  const loggers = createLoggers({ level: bootstrapConfig.log.level, format: bootstrapConfig.log.format, ...(generation > 0 ? { generation } : {}) });
  const logger = loggers.events;
  // With `etcd`, the resources come from etcd (or, until it answers, the snapshot cache) and the
  // file keeps the host's part; one source either way, read by one reload procedure.
  let config = bootstrapConfig;
  let source = bootstrap;
  let etcd: EtcdSource | undefined;
  if (config.etcd) {
    const snapshot = new SnapshotCache({
      path: snapshotPath(config, file),
      prefix: config.etcd.prefix,
      log: logger,
      // Test seam: a slow disk (L9's allowance at the exit is tested with it).
      delayMs: Number(process.env.SLUICE_TEST_SNAPSHOT_DELAY_MS) || 0,
    });
    // Loaded only in etcd mode: its client (gRPC, protobuf) is most of a process's memory otherwise.
    const { EtcdSource } = await import('./config/etcd-source.ts');
    etcd = new EtcdSource({ bootstrap, settings: config.etcd, snapshot, log: logger, watchFile: config.reload.watch });
    source = etcd;
    try {
      await etcd.start();
      config = etcd.load();
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      logger.fatal({ event: 'start_failed', source: error.source, problems: error.problems }, `could not start: ${error.message}`);
      flushLogger(logger);
      return 1;
    }
  }
  const { cpus, memory } = machineShape();
  const count = workerCount(config, cpus, memory);
  let gateway: RunningGateway;
  let supervision: Supervision = oneProcess;
  // E7: a generation takes its signals from its keeper only (a service manager may signal every
  // process of the service: each would otherwise count twice). Under a keeper: the previous
  // generation's sockets and state first.
  if (generation > 0) for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR2'] as const) process.on(signal, () => {});
  const link = generation > 0 ? await GenerationLink.connect() : undefined;
  if (generation > 0 && !link) return 1;
  if (link && (!config.hot_restart.enabled || config.hot_restart.start_timeout_secs !== link.keeper.start_timeout_secs)) {
    logger.warn(
      { event: 'config_reload_partial', setting: 'hot_restart', reason: 'the keeper keeps the hot_restart settings it started with' },
      'hot_restart is read by the keeper at its start: this change applies when the service is restarted',
    );
  }
  let current = config;
  try {
    if (count > 1) {
      supervision = new GroupSupervision(new WorkerGroup({ count, log: logger }), logger);
    }
    gateway = await startGateway(config, loggers, version, {
      supervision,
      ...(file ? { configFile: file } : {}),
      ...(etcd ? { configSource: { store: etcd, state: () => etcd.state, close: (flushMs: number) => etcd.close(flushMs) } } : {}),
      ...(link
        ? {
            sockets: link.sockets,
            healthCheckFailed: link.state.healthCheckFailed,
            // E7: the previous generation's memory counters, when this config keeps the memory store.
            ...(link.limits && config.limits.store === 'memory' ? { limitStore: link.limits } : {}),
            hotRestart: { info: () => link.info(), request: (trigger: string) => link.requestRestart(trigger) },
          }
        : {}),
    });
  } catch (error) {
    // A failure with a code (a port in use, a certificate that cannot be read) is the machine's,
    // not a bug: one line that says why, without a stack trace.
    const code = (error as NodeJS.ErrnoException | null)?.code;
    logger.fatal(typeof code === 'string' ? { event: 'start_failed', code } : { event: 'start_failed', err: error }, `could not start: ${(error as Error).message}`);
    flushLogger(logger);
    // E7: what this generation accepted meanwhile goes back to the one serving.
    if (link) await link.giveUp('its start failed');
    return 1;
  }
  const started = gateway;
  etcd?.serving(config);
  // E7: SIGUSR2 is the keeper's (a hot restart); without one it is only a warning here (its default
  // action would end the process). A generation ignores it, as every signal sent to it directly.
  if (!link) {
    process.on('SIGUSR2', () => {
      logger.warn({ event: 'hot_restart_unavailable', signal: 'SIGUSR2' }, 'SIGUSR2 ignored: hot restart is not enabled (hot_restart.enabled: true, read at start)');
    });
  }
  return new Promise<number>((resolve) => {
    // A drain that exits may come from a signal or from the admin API. A group exits 0 only if
    // every worker did.
    started.lifecycle.done.then((code) => resolve(code || supervision.exitCode), () => resolve(1));
    let signalled = false;
    // Someone at a terminal (Ctrl-C) is told in words what the drain waits for and how to stop it.
    const terminal = process.stdout.isTTY === true;
    const onSignal = (signal: NodeJS.Signals) => {
      if (signalled) started.force(`second ${signal}`);
      else {
        void started.drain(signal);
        // (Nothing to say when the drain is already over.)
        if (terminal && started.lifecycle.draining) {
          const waiting = started.lifecycle.status.waitingFor();
          const what =
            waiting.window_secs_left > 0
              ? `keeping the listeners open ${waiting.window_secs_left} s (shutdown.min_drain_secs), then finishing what is in flight`
              : 'finishing what is in flight';
          logger.info(
            { event: 'drain_hint', signal },
            `${signal === 'SIGINT' ? 'Ctrl-C' : signal}: stopping gracefully, ${what}${supervision.workers ? ` on ${supervision.workers} workers` : ''}; press Ctrl-C again to stop now`,
          );
        }
      }
      signalled = true;
    };
    // E6: one reload procedure for every trigger (SIGHUP, a change of the file, of etcd).
    const reloads = new ReloadTriggers({
      load: (trigger) => source.load(trigger),
      apply: (next, trigger) => started.reload(next, trigger),
      rejected: (trigger, reason) => started.reloadRejected(trigger, reason),
      applied: (next) => {
        current = next;
        etcd?.serving(next);
      },
      draining: () => started.lifecycle.draining,
      log: logger,
    });
    const reloadFrom = (trigger: string) => reloads.request(trigger);
    const onHangUp = () => reloadFrom('SIGHUP');
    // E6: the file is watched (reload.watch, read at start), and etcd always; the watch ends with the drain.
    if (config.reload.watch || etcd) {
      const unwatch = source.watch(reloadFrom);
      void started.lifecycle.done.finally(unwatch);
    }
    if (link) {
      link.onSignal = (signal) => (signal === 'SIGHUP' ? onHangUp() : onSignal(signal));
      link.serving(started, version, started.metrics, logger, () => ({
        parentShutdownSecs: current.shutdown.parent_shutdown_secs,
        keepIdleSecs: current.downstream.drain_timeout_secs,
      }));
    } else {
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
      process.on('SIGHUP', onHangUp);
    }
  });
}

// A rejected promise nobody handled is a bug in one request's path, not a corrupt process: say so
// loudly and keep serving the others.
process.on('unhandledRejection', (reason) => {
  process.stderr.write(`sluice: unhandled rejection: ${(reason as Error)?.stack ?? String(reason)}\n`);
});

process.on('uncaughtException', (error) => {
  process.stderr.write(`sluice: uncaught exception: ${error.stack ?? error}\n`);
  process.exit(70);
});

(cluster.isWorker ? runWorker(version) : main(process.argv.slice(2))).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`sluice: ${(error as Error).stack ?? String(error)}\n`);
    process.exit(70);
  },
);
