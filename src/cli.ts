// The `sluice` command: parse arguments, load the config, start the gateway, wire the signals.
// Loaded by main.ts once the Node.js version is known to be right.
import cluster from 'node:cluster';
import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';
import { createRequire } from 'node:module';
import { ConfigError, loadConfigFile, loadDefaultConfig } from './config/load.ts';
import { workerCount, type Config } from './config/schema.ts';
import { createLoggers, flushLogger } from './telemetry/logger.ts';
import { startGateway, type RunningGateway } from './app.ts';
import { WorkerGroup } from './cluster/worker-group.ts';
import { GroupSupervision, oneProcess, type Supervision } from './cluster/supervision.ts';
import { runWorker } from './worker.ts';

const { version } = createRequire(import.meta.url)('../package.json') as { version: string };

const HELP = `sluice ${version}: an OpenAI-compatible AI gateway that drains without losing requests

Usage:
  sluice [serve] [--config FILE]     run the gateway (default: the embedded config)
  sluice validate [--config FILE]    check a config file; prints every problem and exits 1 if any
  sluice --version | --help

The config file may also be named by SLUICE_CONFIG. Without one, Sluice runs its embedded default:
proxy on 127.0.0.1:8080, admin on 127.0.0.1:9901, and a local "echo" model that needs no key.
Signals: SIGTERM/SIGINT start a graceful drain; a second one ends it at once; SIGHUP reloads
the config. With workers > 1, signal the supervisor (the process started); workers follow it.
Docs: docs/configuration.md
`;

function loadConfig(file: string | undefined): Config {
  return file ? loadConfigFile(file) : loadDefaultConfig();
}

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: { config: { type: 'string', short: 'c' }, version: { type: 'boolean', short: 'v' }, help: { type: 'boolean', short: 'h' } },
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
  if (positionals.length > 1 || (command !== 'serve' && command !== 'validate')) {
    process.stderr.write(`sluice: unknown command "${positionals.join(' ')}"\n\n${HELP}`);
    return 2;
  }
  const file = values.config ?? (process.env.SLUICE_CONFIG || undefined);
  let config: Config;
  try {
    config = loadConfig(file);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`sluice: ${error.message}\n`);
    return 1;
  }
  if (command === 'validate') {
    process.stdout.write(
      `config OK (${file ?? 'embedded default'}): ${config.listeners.length} listeners, ${config.providers.length} providers, ${config.models.length} models, ${config.keys.length} keys, ${workerCount(config, availableParallelism())} workers\n`,
    );
    return 0;
  }
  return serve(config, file);
}

async function serve(config: Config, file: string | undefined): Promise<number> {
  const loggers = createLoggers({ level: config.log.level, format: config.log.format });
  const logger = loggers.events;
  const count = workerCount(config, availableParallelism());
  let gateway: RunningGateway;
  let supervision: Supervision = oneProcess;
  try {
    if (count > 1) {
      supervision = new GroupSupervision(new WorkerGroup({ count, log: logger }), logger);
    }
    gateway = await startGateway(config, loggers, version, { supervision });
  } catch (error) {
    // A failure with a code (a port in use, a certificate that cannot be read) is the machine's,
    // not a bug: one line that says why, without a stack trace.
    const code = (error as NodeJS.ErrnoException | null)?.code;
    logger.fatal(typeof code === 'string' ? { event: 'start_failed', code } : { event: 'start_failed', err: error }, `could not start: ${(error as Error).message}`);
    flushLogger(logger);
    return 1;
  }
  const started = gateway;
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
          const waiting = started.lifecycle.waitingFor();
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
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    // E6: SIGHUP reloads the whole config; a bad one is refused and the last good one keeps serving.
    process.on('SIGHUP', () => {
      if (started.lifecycle.draining) {
        logger.warn({ event: 'config_reload_ignored', reason: 'draining' }, 'SIGHUP ignored: the process is draining');
        return;
      }
      let next: Config;
      try {
        next = loadConfig(file);
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error;
        started.reloadRejected();
        logger.error({ event: 'config_reload_failed', source: error.source, problems: error.problems }, 'new configuration rejected; the last good one keeps serving');
        return;
      }
      // E6a: all or nothing; a reload that cannot be applied is logged and counted by reload() and
      // changes nothing.
      started.reload(next, 'SIGHUP').catch((error: unknown) => {
        // A bug, not a refused config: reload() reports its own failures.
        logger.error({ event: 'handler_error', err: error }, 'the reload failed unexpectedly');
      });
    });
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
