// Issue 24, a leftover: `PUT /config/{kind}/{name}` with another `name` in its body stored the body
// under the URL's name in silence (while etcd refuses a key whose value names another). It is now a
// 400 `name_mismatch` naming both, each quoted up to 256 characters, and nothing is written; the
// same name, or none, is written as before. Fuzzed: any name in the body, any name in the URL.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { httpRequest, type RawResponse } from '../support/http.ts';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';
import { assertSettled } from '../support/reliability.ts';

const skip = etcdCheck().skip;
const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 20261203);
const RUNS = Number(process.env.SLUICE_FUZZ_RUNS ?? 60);

describe('a PUT whose body names another resource', { skip }, () => {
  let etcd: EtcdServer;
  let gw: GatewayProcess;
  const prefix = `/names-${process.pid}/`;
  before(async () => {
    etcd = await startEtcd();
    await etcd.put(`${prefix}providers/local`, JSON.stringify({ type: 'echo' }));
    gw = await startGateway({ config: { etcd: { endpoints: [etcd.endpoint], prefix } } });
  });
  after(async () => {
    await gw?.stop();
    await etcd?.close();
  });

  const put = (kind: string, name: string, body: unknown): Promise<RawResponse> =>
    httpRequest(`${gw.adminUrl}/config/${kind}/${encodeURIComponent(name)}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const stored = async (kind: string, name: string) => etcd.get(`${prefix}${kind}/${encodeURIComponent(name)}`);

  test('every kind: 400 name_mismatch naming both names, and nothing is written under either', async () => {
    const bodies = { providers: { type: 'echo' }, models: { provider: 'local' }, keys: { key_sha256: 'bJ2Qx8ZbVNJXOTgkrpaOpbh0jPJ8z3U9rDcbVaGq2ZI=' } };
    for (const [kind, body] of Object.entries(bodies)) {
      const res = await put(kind, 'in-the-url', { ...body, name: 'in-the-body' });
      assert.equal(res.status, 400, `${kind}: ${res.status} ${res.body}`);
      const error = (JSON.parse(res.body) as { error: { code: string; message: string } }).error;
      assert.equal(error.code, 'name_mismatch', kind);
      assert.match(error.message, /"in-the-body"/);
      assert.match(error.message, /"in-the-url"/);
      assert.equal(await stored(kind, 'in-the-url'), undefined, `${kind}: written under the URL's name`);
      assert.equal(await stored(kind, 'in-the-body'), undefined, `${kind}: written under the body's name`);
      // The same name, or none: written.
      assert.equal((await put(kind, 'same', { ...body, name: 'same' })).status, 201, kind);
      assert.equal((await put(kind, 'unnamed', body)).status, 201, kind);
    }
  });

  test('a 512 KB name in the body (the admin API takes bodies up to 1 MB), or one that is not a string: refused with a short answer that does not echo it', async () => {
    const huge = 'n'.repeat(512 * 1024);
    const res = await put('models', 'short', { provider: 'local', name: huge });
    assert.equal(res.status, 400);
    assert.ok(res.body.length < 1024, `an answer of ${res.body.length} characters`);
    assert.ok(res.body.includes(`(${huge.length} characters)`), res.body);
    for (const name of [42, null, ['a'], { a: 1 }, '']) {
      const refused = await put('models', 'short', { provider: 'local', name });
      assert.equal(refused.status, 400, `${JSON.stringify(name)}: ${refused.body}`);
      assert.equal((JSON.parse(refused.body) as { error: { code: string } }).error.code, 'name_mismatch');
    }
    assert.equal(await stored('models', 'short'), undefined);
  });

  test('fuzzed: any name in the URL and in the body; a different one is always a 400 and never written', { timeout: 120_000 }, async () => {
    const name = fc.oneof(fc.string({ minLength: 1, maxLength: 40 }), fc.constantFrom('a', 'A', 'a ', 'a/b', 'a%2Fb', 'é', 'e\u0301', '😀'));
    await fc.assert(
      fc.asyncProperty(name, name, async (inUrl, inBody) => {
        const res = await put('models', inUrl, { provider: 'local', name: inBody });
        if (inUrl === inBody) return assert.ok(res.status === 200 || res.status === 201, `${JSON.stringify(inUrl)}: ${res.status} ${res.body}`);
        assert.equal(res.status, 400, `${JSON.stringify(inUrl)} / ${JSON.stringify(inBody)}: ${res.body}`);
        assert.equal((JSON.parse(res.body) as { error: { code: string } }).error.code, 'name_mismatch');
        assert.ok(res.body.length < 2048);
      }),
      { seed: SEED, numRuns: RUNS },
    );
    await assertSettled(gw, 'after the fuzzing');
  });
});
