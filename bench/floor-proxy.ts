// The floor of a Node gateway, for bench/run.ts: the least a Node proxy does per request (node:http
// in, an undici Pool out, the request body read whole and parsed as JSON, the answer relayed chunk
// by chunk). No auth, routing, limits, log or metrics. What the gateway costs above it is the
// gateway's own work; what it costs above HAProxy's, Node's.
//   node bench/floor-proxy.ts UPSTREAM_URL     prints {"floor":"http://127.0.0.1:PORT"} once listening
import http from 'node:http';
import { Pool } from 'undici';

const upstream = new Pool(process.argv[2]!, { connections: 64 });
const server = http.createServer((req, res) => {
  void (async () => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    JSON.parse(body.toString('utf8'));
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    const mock = req.headers['x-mock'];
    if (typeof mock === 'string') headers['x-mock'] = mock;
    const answer = await upstream.request({ path: req.url!, method: 'POST', headers, body });
    res.writeHead(answer.statusCode, { 'content-type': String(answer.headers['content-type']) });
    for await (const chunk of answer.body) res.write(chunk);
    res.end();
  })().catch(() => res.destroy());
});
server.listen(0, '127.0.0.1', () => {
  const address = server.address() as { port: number };
  process.stdout.write(`${JSON.stringify({ floor: `http://127.0.0.1:${address.port}` })}\n`);
});
