// `sluice apply -f` and `${VAR}` (#24, defect 3): a client key written `key: "${TEAM_A_KEY}"` (the
// documented form) is resolved from apply's own environment, as the config loader resolves it, and
// the real key is what the gateway then accepts; `Bearer ${TEAM_A_KEY}` is refused. A variable apply
// does not have stops it before anything is written, and no key containing "${" is ever stored:
// not by apply, not through the admin API, not from etcd. Against the built CLI and a gateway in
// etcd mode at the default settings.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { hash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { runSluice, startGateway, type GatewayProcess, type RunResult } from '../support/gateway-process.ts';
import { httpRequest, postJson } from '../support/http.ts';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';

const skip = etcdCheck().skip;
const TOKEN = 'apply-admin-token-0123456789';
const TEAM_A_KEY = 'sk-team-a-real-key-0123456789';
const sha256 = (text: string) => hash('sha256', text, 'base64');
const prefix = `/apply-${process.pid}/`;

let etcd: EtcdServer;
let gw: GatewayProcess;

before(async () => {
  if (skip) return;
  etcd = await startEtcd();
  await etcd.put(`${prefix}providers/local`, JSON.stringify({ type: 'echo' }));
  await etcd.put(`${prefix}models/base`, JSON.stringify({ provider: 'local' }));
  gw = await startGateway({ config: { admin: { tokens: [{ name: 'ops', token: TOKEN }] }, etcd: { endpoints: [etcd.endpoint], prefix } } });
});
after(async () => {
  await gw?.stop();
  await etcd?.close();
});

/** `sluice apply -f` of `text`, with `env` (the variables a test does not give are unset). */
function apply(name: string, text: string, env: Record<string, string | undefined> = {}): Promise<RunResult> {
  const file = join(dirname(gw.configFile), name);
  writeFileSync(file, text);
  return runSluice(['apply', '-f', file, '--admin', gw.adminUrl, '--token', TOKEN], { env: { SLUICE_CONFIG: undefined, SLUICE_ADMIN_TOKEN: undefined, TEAM_A_KEY: undefined, TEAM_B_KEY: undefined, ...env } });
}

const chat = (key: string) => postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: 'base', messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${key}` });
const admin = (method: string, path: string, body: unknown) =>
  httpRequest(`${gw.adminUrl}${path}`, { method, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });

const TEAM_A = 'keys:\n  - name: team-a\n    key: "${TEAM_A_KEY}"\n    models: [base]\n';

describe('sluice apply resolves ${VAR} from its own environment', { skip }, () => {
  test('key: "${TEAM_A_KEY}": the real key gets 200, "Bearer ${TEAM_A_KEY}" 401; applied again: unchanged', async () => {
    const created = await apply('team-a.yaml', TEAM_A, { TEAM_A_KEY });
    assert.equal(created.stderr, '');
    assert.equal(created.code, 0);
    assert.equal(created.stdout, 'keys/team-a created\n');
    assert.equal(JSON.parse((await etcd.get(`${prefix}keys/team-a`))!).key_sha256, sha256(TEAM_A_KEY), 'etcd holds the digest of the real key');
    assert.equal((await chat(TEAM_A_KEY)).status, 200, 'the real key is accepted');
    assert.equal((await chat('${TEAM_A_KEY}')).status, 401, 'the text of the reference is not a key');

    const revision = await etcd.revision();
    const again = await apply('team-a.yaml', TEAM_A, { TEAM_A_KEY });
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stdout, 'keys/team-a unchanged\n');
    assert.equal(await etcd.revision(), revision, 'nothing written');
  });

  test('a variable apply does not have: exit 1 naming it and where, nothing written (not even what comes before it); the good key stays', async () => {
    const revision = await etcd.revision();
    const result = await apply(
      'unset.yaml',
      `providers:\n  - { name: fresh, type: echo }\nmodels:\n  - { name: fresh-model, provider: fresh }\n${TEAM_A}  - name: team-b\n    key: "\${TEAM_B_KEY}"\n`,
    );
    assert.equal(result.code, 1);
    assert.equal(result.stdout, '');
    assert.match(result.stderr, /keys\[0\]\.key: environment variable \$\{TEAM_A_KEY\} is not set/);
    assert.match(result.stderr, /keys\[1\]\.key: environment variable \$\{TEAM_B_KEY\} is not set/);
    assert.match(result.stderr, /nothing was applied/);
    assert.equal(await etcd.revision(), revision, 'nothing written');
    assert.equal((await chat(TEAM_A_KEY)).status, 200, 'the key applied before still works');
  });

  test('a key that still holds "${" after resolving ($${VAR}, or a value that holds one) is refused by apply; ${VAR:-default} resolves', async () => {
    const revision = await etcd.revision();
    const escaped = await apply('escaped.yaml', 'keys:\n  - { name: team-c, key: "$${TEAM_A_KEY}" }\n');
    assert.equal(escaped.code, 1);
    assert.match(escaped.stderr, /keys\[0\]\.key: a client key must not contain "\$\{"/);
    const nested = await apply('nested.yaml', 'keys:\n  - { name: team-c, key: "${TEAM_B_KEY}" }\n', { TEAM_B_KEY: 'sk-${NOT_EXPANDED_AGAIN}' });
    assert.equal(nested.code, 1);
    assert.match(nested.stderr, /must not contain "\$\{"/);
    assert.doesNotMatch(nested.stderr, /NOT_EXPANDED_AGAIN/, 'the value is not quoted');
    assert.equal(await etcd.revision(), revision, 'nothing written');
    const fallback = await apply('fallback.yaml', 'keys:\n  - { name: team-d, key: "${TEAM_B_KEY:-sk-team-d-default-0123}" }\n');
    assert.equal(fallback.code, 0, fallback.stderr);
    assert.equal((await chat('sk-team-d-default-0123')).status, 200);
  });
});

describe('no stored key holds "${"', { skip }, () => {
  test('PUT /config/keys/x with {"key": "…${…}…"} is 400, naming the field; nothing is written', async () => {
    for (const key of ['${TEAM_A_KEY}', 'sk-prefix-${TEAM_A_KEY}', '${TEAM_A_KEY:-sk-default-key}']) {
      const revision = await etcd.revision();
      const res = await admin('PUT', '/config/keys/literal', { key });
      assert.equal(res.status, 400, res.body);
      const error = (JSON.parse(res.body) as { error: { code: string; message: string } }).error;
      assert.equal(error.code, 'invalid_resource');
      assert.match(error.message, /^keys\/literal: key: a client key must not contain "\$\{"/);
      assert.equal(await etcd.revision(), revision);
    }
    assert.equal((await chat('${TEAM_A_KEY}')).status, 401);
  });

  test('{"key": "${…}"} written to etcd directly is rejected (resource_rejected), never served', async () => {
    await etcd.put(`${prefix}keys/from-etcdctl`, JSON.stringify({ key: '${TEAM_A_KEY}' }));
    const line = await gw.waitForLog((l) => l.event === 'resource_rejected' && l.resource === 'keys/from-etcdctl');
    assert.match(String(line.reason), /^key: /);
    assert.equal((await chat('${TEAM_A_KEY}')).status, 401);
  });
});
