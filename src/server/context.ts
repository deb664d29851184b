// Per-request facts: our id, the caller's id, the peer and what the request turned out to be.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TrackedConnection } from '../lifecycle/connections.ts';

export interface Usage {
  prompt: number;
  completion: number;
}

export class RequestContext {
  readonly id: string = randomUUID();
  readonly startedAt: bigint = process.hrtime.bigint();
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly listener: string;
  readonly connection: TrackedConnection | undefined;
  readonly protocol: string;
  endpoint = 'other';
  model = '';
  provider = '';
  /** Stable error code when the request failed (access log `error`). */
  errorCode = '';
  usage: Usage | undefined = undefined;
  /** True for /livez and /readyz, which are left out of drain logs (O1). */
  healthProbe = false;

  constructor(req: IncomingMessage, res: ServerResponse, listener: string, connection: TrackedConnection | undefined) {
    this.req = req;
    this.res = res;
    this.listener = listener;
    this.connection = connection;
    this.protocol = req.httpVersionMajor === 2 ? 'h2' : 'http1';
  }

  get downstreamRequestId(): string | undefined {
    const value = this.req.headers['x-request-id'];
    return typeof value === 'string' ? value : undefined;
  }

  get peer(): string {
    const socket = this.req.socket;
    return `${socket.remoteAddress}:${socket.remotePort}`;
  }

  durationSeconds(): number {
    return Number(process.hrtime.bigint() - this.startedAt) / 1e9;
  }
}
