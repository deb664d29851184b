// Where WebSocket upgrade requests enter: the session is in flight from the upgrade request until
// its socket closes and its usage is recorded (L7, L10), exactly like an HTTP request.
import { STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { UpgradeContext } from './context.ts';
import { createExchangeRecorder, logIfDraining, pathOf, type RequestServices } from './requests.ts';
import type { Listener } from './listener.ts';
import { errors, type GatewayError } from '../api/errors.ts';
import { SocketProtocol } from '../lifecycle/connections.ts';

/**
 * A connection upgraded to a WebSocket session. It cannot be told to go away (E3): retiring it
 * sends nothing, and the proactive drain leaves it to finish unless
 * `reset_upgraded_on_proactive_drain` has it destroyed. Closing it gracefully is its socket's FIN
 * after pending writes (a forced end has written the session's 1001 close frame first, L8).
 */
export class WebSocketProtocol extends SocketProtocol {
  readonly name = 'websocket';
}

export interface UpgradeRoute {
  /** Takes over the socket; calls `finished(status)` exactly once when the exchange is over. */
  handle(ctx: UpgradeContext, finished: (status: number) => void): void;
}

export function rejectUpgrade(socket: Duplex, status: number, reason: string, body: string, headers: Readonly<Record<string, string>> = {}): void {
  if (socket.destroyed) return;
  let extra = '';
  for (const [name, value] of Object.entries(headers)) extra += `${name}: ${value}\r\n`;
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}connection: close\r\n\r\n${body}`,
    () => socket.destroy(),
  );
}

/** Refuses a handshake with `error` and ends the exchange once its socket has closed (L10). */
export function refuseUpgrade(ctx: UpgradeContext, error: GatewayError, finished: (status: number) => void): void {
  ctx.errorCode ||= error.code;
  ctx.status = error.status;
  rejectUpgrade(ctx.socket, error.status, STATUS_CODES[error.status] ?? 'Error', error.body(), error.headers);
  whenClosed(ctx.socket, () => finished(error.status));
}

/** Runs `fn` once the socket has closed (at once if it already has). */
export function whenClosed(socket: Duplex, fn: () => void): void {
  if (socket.closed) fn();
  else socket.once('close', fn);
}

export function createUpgradeHandler(services: RequestServices, routes: ReadonlyMap<string, UpgradeRoute>) {
  const { lifecycle, metrics } = services;
  const recordFinished = createExchangeRecorder(services);
  return function onUpgrade(listener: Listener, req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const connection = listener.connectionOf(req);
    lifecycle.requestStarted(connection);
    const ctx = new UpgradeContext(req, socket, head, listener.name, connection);
    ctx.protocol = 'websocket';
    const path = pathOf(req.url);
    const route = listener.role === 'proxy' ? routes.get(path) : undefined;
    ctx.endpoint = route ? path.slice(path.lastIndexOf('/') + 1) : 'other';
    metrics.inFlight.add(1, ctx.endpoint, ctx.protocol);
    logIfDraining(services, ctx, path);
    let done = false;
    // L8: a handshake still waiting (for the upstream's answer) when the drain is forced is refused
    // with a 503; an accepted session is closed by its own force-end (1001).
    const untrack = lifecycle.trackForceEndable({
      kind: () => 'session',
      exchange: ctx,
      forceEnd: () => {
        if (ctx.status !== 0) return;
        const error = errors.drainForced();
        ctx.errorCode = error.code;
        ctx.status = error.status;
        rejectUpgrade(socket, error.status, STATUS_CODES[error.status]!, error.body());
      },
    });
    const finished = (status: number) => {
      if (done) return;
      done = true;
      untrack();
      recordFinished(ctx, status);
    };
    socket.on('error', () => socket.destroy());
    if (!route) return refuseUpgrade(ctx, errors.noWebSocketRoute(path), finished);
    if (connection) connection.upgraded(new WebSocketProtocol(connection));
    try {
      route.handle(ctx, finished);
    } catch (error) {
      // Nothing a client sends may take the process down (R1): a throw here is a bug, answered as
      // one, and the exchange still ends exactly once (L10).
      services.logger.error({ event: 'handler_error', request_id: ctx.id, err: error }, 'upgrade handler failed');
      refuseUpgrade(ctx, errors.internal(), finished);
    }
  };
}
