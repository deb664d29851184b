// Worker deaths under fresh connections, at the default settings (#24, defect 7). With `workers: 2`
// the supervisor accepts every proxy connection and hands it to a worker; a worker SIGKILLed while
// connections are being handed to it must leave none of them hanging: a connection the worker had
// not confirmed goes to the other worker, and the supervisor keeps no descriptor and no count.
//
// The bound: a connection may end without an answer (closed) only if the killed worker had already
// taken it (confirmed the handoff, after which it reads the request): that request dies with the
// worker. Those are among the connections opened before the kill (the round robin gives it every
// other one: at most 11 of the first 21); every connection opened after the kill is answered 200.
// Every connection, answered or closed, ends within a second of the kill.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { eventually, metricValue, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { httpRequest, rawExchange, type RawOutcome } from '../support/http.ts';
import { sumMetric } from '../support/reliability.ts';

const CONNECTIONS = 40;
/** The worker is killed right after this many connections have been opened. */
const KILL_AFTER = 21;
const SPACING_MS = 2;
const ROUNDS = Number(process.env.SLUICE_HANDOFF_ROUNDS) || 4;
/** Every connection ends within this long after the kill. */
const ANSWER_WITHIN_MS = 1000;

let mock: MockUpstream;

before(async () => {
  mock = await startMockUpstream();
});
after(async () => {
  await mock?.close();
});

interface WorkerInfo {
  worker: number;
  pid: number;
  ready: boolean;
  in_flight: number;
  open_connections: number;
}

interface GroupInfo {
  workers: WorkerInfo[];
}

async function groupInfo(gw: GatewayProcess): Promise<GroupInfo> {
  return JSON.parse((await httpRequest(`${gw.adminUrl}/server_info`)).body) as GroupInfo;
}

function openDescriptors(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
const request = `POST /v1/chat/completions HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;

/** Both workers serve and hold nothing: no request in flight, no connection open (the supervisor's own are this query's). */
async function settled(gw: GatewayProcess): Promise<GroupInfo> {
  return (await eventually(async () => {
    const info = await groupInfo(gw);
    return info.workers.length === 2 && info.workers.every((w) => w.ready && w.in_flight === 0 && w.open_connections === 0) ? info : undefined;
  }, 15_000, 'both workers serving, nothing in flight, no connection open'))!;
}

test('a worker SIGKILLed while fresh connections are handed to it: every connection is answered (or, if the worker had taken it, closed) within a second; the supervisor keeps no descriptor and no count', async () => {
  // The default settings, but for the number of workers and a provider to answer.
  const gw = await startGateway({
    config: { workers: 2, providers: [{ name: 'up', type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-up' }], models: [{ name: 'm', provider: 'up' }] },
  });
  const supervisor = gw.child.pid!;
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      const before = await settled(gw);
      // The fewest over a moment: the admin connection of the last query may not be closed yet.
      let baseline = openDescriptors(supervisor);
      for (let i = 0; i < 5; i++) {
        await new Promise((r) => setTimeout(r, 20));
        baseline = Math.min(baseline, openDescriptors(supervisor));
      }
      const victim = before.workers[round % 2]!;
      let killedAt: number | undefined;
      const deadline = () => (killedAt === undefined ? Date.now() + 60_000 : killedAt + ANSWER_WITHIN_MS);
      const exchanges: { opened: 'before' | 'after'; outcome: Promise<RawOutcome> }[] = [];
      for (let i = 0; i < CONNECTIONS; i++) {
        exchanges.push({ opened: killedAt === undefined ? 'before' : 'after', outcome: rawExchange(gw.proxyUrl, request, deadline) });
        if (i + 1 === KILL_AFTER) {
          process.kill(victim.pid, 'SIGKILL');
          killedAt = Date.now();
        }
        await new Promise((r) => setTimeout(r, SPACING_MS));
      }
      const outcomes = await Promise.all(exchanges.map(async (e) => ({ opened: e.opened, ...(await e.outcome) })));
      const summary = JSON.stringify(outcomes.map((o) => `${o.opened}:${o.outcome}:${o.status}:${o.at - killedAt!}ms`));
      const hung = outcomes.filter((o) => o.outcome === 'hung');
      assert.equal(hung.length, 0, `round ${round}: ${hung.length} connection(s) neither answered nor closed within ${ANSWER_WITHIN_MS} ms of the kill: ${summary}`);
      for (const o of outcomes) assert.ok(o.at <= killedAt! + ANSWER_WITHIN_MS, `round ${round}: a connection ended ${o.at - killedAt!} ms after the kill: ${summary}`);
      // Opened after the kill: the dead worker never read them, so another worker answers them.
      const afterKill = outcomes.filter((o) => o.opened === 'after');
      assert.deepEqual(afterKill.map((o) => `${o.outcome} ${o.status}`), afterKill.map(() => 'answered 200'), `round ${round}: ${summary}`);
      // Opened before: answered, or closed if the dead worker had taken it (its request died with it).
      const beforeKill = outcomes.filter((o) => o.opened === 'before');
      for (const o of beforeKill) assert.ok((o.outcome === 'answered' && o.status === 200) || (o.outcome === 'closed' && o.status === 0), `round ${round}: ${summary}`);
      const closed = beforeKill.filter((o) => o.outcome === 'closed').length;
      assert.ok(closed <= Math.ceil(KILL_AFTER / 2), `round ${round}: ${closed} closed, more than the killed worker could have taken: ${summary}`);
      const last = Math.max(...outcomes.map((o) => o.at)) - killedAt!;
      process.stdout.write(`# round ${round}: killed worker ${victim.worker}; ${outcomes.length - closed} answered, ${closed} closed (taken by the dead worker); the last ended ${last} ms after the kill\n`);

      // The worker is back, and nothing stays raised: no request, no connection, no descriptor.
      await gw.waitForLog((l) => l.event === 'worker_ready' && l.worker === victim.worker && l.worker_pid !== victim.pid, 15_000);
      await settled(gw);
      assert.equal(sumMetric(await scrape(gw), 'sluice_in_flight_requests', (l) => l.endpoint !== 'metrics'), 0, 'nothing in flight but this scrape');
      await eventually(() => openDescriptors(supervisor) <= baseline, 5000, `the supervisor's descriptors back to ${baseline} (now ${openDescriptors(supervisor)})`);
    }
    assert.equal(metricValue(await scrape(gw), 'sluice_worker_restarts'), ROUNDS);
  } finally {
    await gw.stop();
  }
});
