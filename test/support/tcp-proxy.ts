// A TCP relay between a gateway and a server (etcd, Redis) that a test can cut and restore: a network
// partition on loopback, while the server itself stays up for other clients. With `delayMs`, what
// the client sends reaches the server that much later (a slow network), in order.
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { freePort } from './haproxy.ts';

export interface TcpProxy {
  /** `http://127.0.0.1:PORT`, to give the client instead of the server's URL. */
  readonly url: string;
  /** Closes every relayed connection and refuses new ones. */
  cut(): Promise<void>;
  /** Accepts and relays again, on the same port. */
  restore(): Promise<void>;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }, options: { delayMs?: number } = {}): Promise<TcpProxy> {
  const delayMs = options.delayMs ?? 0;
  const port = await freePort();
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server = createServer((client) => {
        const upstream = createConnection(target);
        for (const s of [client, upstream]) {
          sockets.add(s);
          s.on('error', () => {});
          s.on('close', () => {
            sockets.delete(s);
            client.destroy();
            upstream.destroy();
          });
        }
        if (delayMs > 0) {
          client.on('data', (chunk) => setTimeout(() => upstream.write(chunk), delayMs));
          upstream.pipe(client);
        } else client.pipe(upstream).pipe(client);
      });
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve());
    });
  const stop = async () => {
    const closing = server;
    server = undefined;
    for (const s of sockets) s.destroy();
    if (closing) await new Promise<void>((resolve) => closing.close(() => resolve()));
  };
  await listen();
  return { url: `http://127.0.0.1:${port}`, cut: stop, restore: listen, close: stop };
}
