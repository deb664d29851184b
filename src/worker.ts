// A worker process of `workers: N`: serves the proxy listeners (whose sockets the supervisor holds:
// it passes each worker its share of the connections) and follows the supervisor's commands. It ignores signals: a terminal or
// a service manager signals the whole process group, and the supervisor speaks for it.
import { createLoggers, flushLogger } from './telemetry/logger.ts';
import { startGateway, type PreparedGatewayReload, type RunningGateway } from './app.ts';
import { RemoteSettlements } from './reload/remote-settlement.ts';
import { WORKER_SLOT_ENV, type FromWorker, type ReloadPrepared, type ToWorker } from './cluster/messages.ts';
import { DispatchedSockets } from './cluster/dispatched-sockets.ts';
import { SupervisorStore } from './cluster/supervisor-store.ts';
import { workerShare } from './cluster/supervision.ts';
import { GENERATION_ENV } from './hot-restart/messages.ts';
import { ProcessChannel } from './process-channel/channel.ts';
import { parentTransport } from './process-channel/transport.ts';

export async function runWorker(version: string): Promise<number> {
  const slot = Number(process.env[WORKER_SLOT_ENV]) || 0;
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR2'] as const) process.on(signal, () => {});
  const early: ToWorker[] = [];
  /** E6a: reloads prepared and awaiting the supervisor's commit or abort (each reports how it went). */
  const reloads = new RemoteSettlements<PreparedGatewayReload>((prepared, settlement) => (settlement === 'commit' ? prepared.commit() : void prepared.abort()));
  let gateway: RunningGateway | undefined;
  let onStart: ((message: Extract<ToWorker, { type: 'start' }>) => void) | undefined;
  // The supervisor's `limit_reply` answers a request of the limit store.
  const channel = new ProcessChannel<FromWorker, ToWorker>(parentTransport(), { replies: ['limit_reply'] });
  // What could not be sent is lost with the supervisor: the channel's gone drains this worker.
  const send = (message: FromWorker) => void channel.send(message);
  const sockets = new DispatchedSockets(channel);
  const limits = new SupervisorStore(channel);
  channel.onAny((message, passed) => {
    if (message.type === 'connection') sockets.connection(message.lease, message.handoff, passed);
    else if (message.type === 'limit_reply') return;
    else if (message.type === 'socket_acquired') sockets.acquired(message.lease, message.bound !== undefined ? { bound: message.bound } : { error: message.error ?? 'no socket', code: message.code });
    else if (message.type === 'start') onStart?.(message);
    else if (gateway) handle(gateway, message);
    else early.push(message);
  });
  // The supervisor sends nothing before this (see `hello` in messages.ts).
  send({ type: 'hello' });
  const start = await new Promise<Extract<ToWorker, { type: 'start' }> | undefined>((resolve) => {
    onStart = resolve;
    channel.onGone(() => resolve(undefined));
  });
  if (!start) return 1;
  // A worker of a generation under hot restart says which (the supervisor's environment is its own).
  const generation = Number(process.env[GENERATION_ENV]) || undefined;
  const loggers = createLoggers({ level: start.config.log.level, format: start.config.log.format, worker: slot, generation });
  const logger = loggers.events;
  try {
    // limits.store memory: the counters are the supervisor's, shared by the group.
    const limitStore = start.config.limits.store === 'memory' ? limits : undefined;
    gateway = await startGateway(start.config, loggers, version, { supervision: workerShare, announceReady: false, sockets, limitStore });
  } catch (error) {
    logger.fatal({ event: 'start_failed', err: error }, `worker ${slot} could not start: ${(error as Error).message}`);
    flushLogger(logger);
    send({ type: 'start_failed', message: (error as Error).message });
    return 1;
  }
  const running = gateway;
  if (start.healthCheckFailed) running.lifecycle.health.fail();
  for (const message of early.splice(0)) handle(running, message);
  // Without its supervisor no new connections come: finish what is in flight and go (also if it
  // went while this worker was starting).
  const orphaned = () => void running.lifecycle.drain('supervisor_gone', { graceful: false });
  if (channel.connected) channel.onGone(orphaned);
  else orphaned();
  send({ type: 'ready', listeners: running.boundListeners() });
  return running.lifecycle.done;

  function handle(gw: RunningGateway, message: ToWorker): void {
    switch (message.type) {
      case 'command': {
        const command = message.command;
        if (command.kind === 'drain') void gw.lifecycle.drain(command.trigger, command.options);
        else if (command.kind === 'force') gw.force(command.reason);
        else if (command.failed) gw.lifecycle.health.fail();
        else gw.lifecycle.health.restore();
        return;
      }
      case 'reload':
        // Failures are logged and counted by reload() itself.
        void gw.reload(message.config, message.trigger);
        return;
      // E6a: prepare, answer, then switch or drop when the supervisor says (it waits for every worker).
      case 'reload_prepare': {
        const { id } = message;
        // A prepare that fails is reported by the gateway.
        gw.prepareReload(message.config, message.trigger).then(
          (prepared) => {
            reloads.prepared(id, prepared);
            send({ type: 'reply', id, value: { ok: true } satisfies ReloadPrepared });
          },
          (error: unknown) => {
            reloads.failed(id);
            send({ type: 'reply', id, value: { ok: false, reason: (error as Error).message } satisfies ReloadPrepared });
          },
        );
        return;
      }
      case 'reload_commit':
      case 'reload_abort':
        // The supervisor may give up waiting before this worker has prepared: then it is settled once it has.
        reloads.settled(message.id, message.type === 'reload_commit' ? 'commit' : 'abort');
        return;
      case 'query': {
        const answer = message.kind === 'info' ? Promise.resolve(gw.info()) : message.kind === 'status' ? Promise.resolve(gw.status()) : gw.metricsJson();
        answer.then(
          (value) => send({ type: 'reply', id: message.id, value }),
          () => send({ type: 'reply', id: message.id, value: undefined }),
        );
        return;
      }
      case 'start':
      case 'connection':
      case 'socket_acquired':
      case 'limit_reply':
        return;
    }
  }
}
