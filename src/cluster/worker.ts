// A worker process of `workers: N`: serves the proxy listeners (shared with the other workers
// through the supervisor) and follows the supervisor's commands. It ignores signals: a terminal or
// a service manager signals the whole process group, and the supervisor speaks for it.
import { withListenersOf } from '../config/schema.ts';
import { createLoggers, flushLogger } from '../telemetry/logger.ts';
import { startGateway, type RunningGateway } from '../app.ts';
import { WORKER_SLOT_ENV, isMessage, type ToWorker } from './messages.ts';

function send(message: unknown): void {
  try {
    process.send?.(message);
  } catch {
    // The supervisor is gone: the disconnect handler drains this worker.
  }
}

export async function runWorker(version: string): Promise<number> {
  const slot = Number(process.env[WORKER_SLOT_ENV]) || 0;
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, () => {});
  const early: ToWorker[] = [];
  let gateway: RunningGateway | undefined;
  let onStart: ((message: Extract<ToWorker, { type: 'start' }>) => void) | undefined;
  process.on('message', (message: unknown) => {
    if (!isMessage<ToWorker>(message)) return;
    if (message.type === 'start') onStart?.(message);
    else if (gateway) handle(gateway, message);
    else early.push(message);
  });
  const start = await new Promise<Extract<ToWorker, { type: 'start' }> | undefined>((resolve) => {
    onStart = resolve;
    process.once('disconnect', () => resolve(undefined));
  });
  if (!start) return 1;
  const loggers = createLoggers({ level: start.config.log.level, worker: slot });
  const logger = loggers.events;
  try {
    gateway = await startGateway(withListenersOf(start.config, 'proxy'), loggers, version, { announceReady: false });
  } catch (error) {
    logger.fatal({ event: 'start_failed', err: error }, `worker ${slot} could not start: ${(error as Error).message}`);
    flushLogger(logger);
    send({ type: 'start_failed', message: (error as Error).message });
    return 1;
  }
  const running = gateway;
  if (start.healthCheckFailed) running.lifecycle.failHealthCheck();
  for (const message of early.splice(0)) handle(running, message);
  // Without its supervisor no new connections come: finish what is in flight and go (also if it
  // went while this worker was starting).
  const orphaned = () => void running.lifecycle.drain('supervisor_gone', { graceful: false });
  if (process.connected) process.once('disconnect', orphaned);
  else orphaned();
  send({ type: 'ready', listeners: running.boundListeners() });
  return running.lifecycle.done;

  function handle(gw: RunningGateway, message: ToWorker): void {
    switch (message.type) {
      case 'command': {
        const command = message.command;
        if (command.kind === 'drain') void gw.lifecycle.drain(command.trigger, command.options);
        else if (command.kind === 'force') gw.force(command.reason);
        else if (command.failed) gw.lifecycle.failHealthCheck();
        else gw.lifecycle.restoreHealthCheck();
        return;
      }
      case 'reload':
        gw.reload(withListenersOf(message.config, 'proxy'), message.trigger).catch((error: unknown) => {
          gw.reloadRejected();
          logger.error({ event: 'config_reload_failed', reason: (error as Error).message }, 'applying the new configuration failed');
        });
        return;
      case 'query': {
        const answer = message.kind === 'info' ? Promise.resolve(gw.info()) : gw.metricsJson();
        answer.then(
          (value) => send({ type: 'reply', id: message.id, value }),
          () => send({ type: 'reply', id: message.id, value: undefined }),
        );
        return;
      }
      case 'start':
        return;
    }
  }
}
