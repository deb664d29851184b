// The etcd harness (test/support/etcd.ts) does what the etcd source's tests rely on: a key written
// survives a stop and a start on the same ports (and a crash), and compact() leaves the history
// before its revision unreadable, as a watch that fell behind would find it.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';

const etcd = etcdCheck();

let server: EtcdServer | undefined;
after(async () => {
  await server?.close();
});

test('etcd: put, stop, start again on the same port with the data kept, compact, close', { skip: etcd.skip }, async () => {
  server = await startEtcd();
  assert.match(server.endpoint, /^http:\/\/127\.0\.0\.1:\d+$/);
  const endpoint = server.endpoint;

  const first = await server.put('/sluice/providers/openai', '{"type":"openai"}');
  // A key starting with "-" is not taken for an option of etcdctl.
  await server.put('-dash', '-value');
  assert.equal(await server.get('-dash'), '-value');
  assert.equal(await server.del('-dash'), 1);
  assert.equal(await server.get('-dash'), undefined);
  assert.equal(await server.del('-dash'), 0);

  await server.stop();
  assert.equal(server.running, false);
  await assert.rejects(fetch(`${endpoint}/health`), 'nothing listens once stopped');

  await server.start();
  assert.equal(server.endpoint, endpoint, 'the same client port after a restart');
  assert.equal(await server.get('/sluice/providers/openai'), '{"type":"openai"}', 'the data directory survived the restart');

  // A crash loses nothing acknowledged either (etcd fsyncs its log before it answers).
  await server.put('/sluice/models/gpt-4o', '{"provider":"openai"}');
  await server.kill();
  await server.start();
  assert.equal(await server.get('/sluice/models/gpt-4o'), '{"provider":"openai"}');

  const compacted = await server.compact();
  assert.ok(compacted > first, `compacted at ${compacted}, after the first write at ${first}`);
  assert.equal(compacted, await server.revision());
  // Reading at a revision before the compaction is what etcd refuses once compacted.
  await assert.rejects(server.etcdctl('get', `--rev=${first}`, '/sluice/providers/openai'), /required revision has been compacted/);
  // Compacting again with nothing written in between is not an error.
  assert.equal(await server.compact(), compacted);

  const { dataDir } = server;
  await server.close();
  server = undefined;
  assert.equal(existsSync(dataDir), false, 'close() removes the data directory');
});
