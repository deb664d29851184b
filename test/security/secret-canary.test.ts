// The secret canary (#24, defect 2): an admin token, or a write to etcd, must not be a way to read
// the gateway's environment. A gateway in etcd mode, with tracing on and its status feed read, has
// canary variables in its environment: SLUICE_CANARY (listed in etcd.allowed_env), and
// SLUICE_CANARY_HIDDEN and SLUICE_CANARY_NUMBER (not listed). `${…}` of each, alone, with a
// default, nested and inside longer text, is written into every field of every kind of resource
// (the fields found by walking the schema, so a new field is covered without editing this test):
// through the admin API (PUT, POST /config/keys, rotate), through etcdctl directly (valid, invalid,
// not JSON), and through `sluice apply -f`; then every model is called. The canaries must be in no
// answer (body or header), log line, metric, /server_info, span, snapshot file or status event.
// Only a secret-bearing field (a provider's api_key and header values, a target's header values)
// expands, and only an allowed variable: everything else is refused, naming the variable.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { hash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { stringify } from 'yaml';
import { eventually, metricValue, runSluice, scrape, startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { httpRequest, postJson, type RawResponse } from '../support/http.ts';
import { etcdCheck, startEtcd, type EtcdServer } from '../support/etcd.ts';
import { startMockUpstream, type MockUpstream } from '../support/mock-upstream.ts';
import { startOtlpReceiver, type OtlpReceiver } from '../support/otlp-receiver.ts';
import { watchStatus, type StatusWatcher } from '../support/status-stream.ts';
import { schemaLeaves, withValueAt, type FieldPath } from '../support/schema-fields.ts';
import { findCanaries, newCanary, newNumericCanary } from '../support/canary.ts';
import { modelSchema, namedKeySchema, providerSchema } from '../../src/config/schema.ts';

const skip = etcdCheck().skip;
const TOKEN = 'canary-admin-token-0123456789';
const LOAD_KEY = 'sk-canary-load-0123456789';
const sha256 = (text: string) => hash('sha256', text, 'base64');
const auth = { authorization: `Bearer ${TOKEN}` };

const CANARY = newCanary('cnry');
const HIDDEN = newCanary('hddn');
const NUMBER = newNumericCanary();
const CANARIES = [CANARY, HIDDEN, NUMBER];
const ENV = { SLUICE_CANARY: CANARY, SLUICE_CANARY_HIDDEN: HIDDEN, SLUICE_CANARY_NUMBER: NUMBER };

/** The `${…}` forms written; `expands` when every variable it names is allowed (SLUICE_CANARY only). */
const FORMS: { text: string; expands: boolean; names: string }[] = [
  { text: '${SLUICE_CANARY}', expands: true, names: 'SLUICE_CANARY' },
  { text: '${SLUICE_CANARY:-fallback}', expands: true, names: 'SLUICE_CANARY' },
  { text: 'before-${SLUICE_CANARY}-after', expands: true, names: 'SLUICE_CANARY' },
  { text: '${SLUICE_CANARY:-${SLUICE_CANARY_HIDDEN}}', expands: true, names: 'SLUICE_CANARY' },
  { text: '${SLUICE_CANARY_HIDDEN}', expands: false, names: 'SLUICE_CANARY_HIDDEN' },
  { text: 'x${SLUICE_CANARY_HIDDEN:-}x', expands: false, names: 'SLUICE_CANARY_HIDDEN' },
  { text: '${SLUICE_CANARY_NUMBER}', expands: false, names: 'SLUICE_CANARY_NUMBER' },
];

const KINDS = { providers: providerSchema, models: modelSchema, keys: namedKeySchema } as const;
type Kind = keyof typeof KINDS;

/** The fields that may carry a credential, where an allowed variable expands: a provider's api_key and header values, a target's header values. */
function secretBearing(kind: Kind, path: FieldPath): boolean {
  if (kind === 'providers') return path[0] === 'api_key' || path[0] === 'headers';
  if (kind === 'models') return path[0] === 'targets' && path[2] === 'headers';
  return false;
}

let etcd: EtcdServer;
let mock: MockUpstream;
let receiver: OtlpReceiver;
let gw: GatewayProcess;
let watcher: StatusWatcher;
const prefix = `/canary-${process.pid}/`;
/** Every answer the gateway gave, as text (status, headers, body). */
const answers: string[] = [];
/** What `sluice apply` printed. */
const cliOutput: string[] = [];

/** A valid resource of `kind` to put a value into at `path` (the key's form and the model's form chosen by the path). */
function baseOf(kind: Kind, path: FieldPath): Record<string, unknown> {
  if (kind === 'providers') return { type: 'openai', base_url: `${mock.url}/v1` };
  if (kind === 'models') return path[0] === 'targets' ? { targets: [{ provider: 'up' }] } : { provider: 'up' };
  return path[0] === 'key' || path[0] === 'key_sha256' ? {} : { key_sha256: sha256('sk-canary-base-0123') };
}

async function admin(method: string, path: string, body?: unknown): Promise<RawResponse> {
  const res = await httpRequest(`${gw.adminUrl}${path}`, { method, headers: { ...auth, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  answers.push(`${method} ${path} → ${res.status} ${JSON.stringify(res.headers)}\n${res.body}`);
  return res;
}

async function servedUpTo(revision: number): Promise<void> {
  await eventually(async () => (metricValue(await scrape(gw), 'sluice_config_revision') ?? 0) >= revision, 15_000, `the gateway serving etcd revision ${revision}`);
}

before(async () => {
  if (skip) return;
  [etcd, mock, receiver] = await Promise.all([startEtcd(), startMockUpstream(), startOtlpReceiver()]);
  await etcd.put(`${prefix}providers/local`, JSON.stringify({ type: 'echo' }));
  await etcd.put(`${prefix}providers/up`, JSON.stringify({ type: 'openai', base_url: `${mock.url}/v1`, api_key: 'sk-upstream-plain' }));
  await etcd.put(`${prefix}models/base`, JSON.stringify({ provider: 'local' }));
  await etcd.put(`${prefix}keys/load`, JSON.stringify({ key_sha256: sha256(LOAD_KEY) }));
  gw = await startGateway({
    config: {
      admin: { tokens: [{ name: 'ops', token: TOKEN }] },
      etcd: { endpoints: [etcd.endpoint], prefix, allowed_env: ['SLUICE_CANARY'] },
      tracing: { enabled: true, endpoint: receiver.url },
      // Nothing stands in front of it: no drain window to wait out at the exit (the rest at its defaults).
      shutdown: { min_drain_secs: 0 },
    },
    env: { ...ENV, OTEL_BSP_SCHEDULE_DELAY: '100' },
  });
  watcher = await watchStatus(gw.adminUrl, auth);
});

after(async () => {
  watcher?.close();
  await gw?.stop();
  await Promise.all([etcd?.close(), mock?.close(), receiver?.close()]);
});

describe('the secret canary', { skip }, () => {
  test('${VAR} of a canary in every field of every kind, through the admin API, etcdctl and sluice apply: found on no surface; only allowed variables in secret-bearing fields expand', { timeout: 240_000 }, async () => {
    let n = 0;
    const refusedWithoutName: string[] = [];
    const wronglyAccepted: string[] = [];
    const wronglyRefused: string[] = [];

    // 1. The admin API: PUT each form into each field.
    for (const [kind, schema] of Object.entries(KINDS) as [Kind, (typeof KINDS)[Kind]][]) {
      for (const path of schemaLeaves(schema, 'x-canary')) {
        for (const form of FORMS) {
          const name = `c-${++n}`;
          const res = await admin('PUT', `/config/${kind}/${name}`, withValueAt(baseOf(kind, path), path, form.text));
          const where = `PUT ${kind}/${name} ${path.join('.')} = ${form.text}`;
          const accepted = res.status === 200 || res.status === 201;
          // A name in the body that is not the URL's is refused as such (name_mismatch), whatever it holds.
          if (path[0] === 'name') continue;
          if (secretBearing(kind, path) && form.expands) {
            if (!accepted) wronglyRefused.push(`${where}: ${res.status} ${res.body}`);
          } else if (accepted) wronglyAccepted.push(where);
          else if (!res.body.includes(form.names)) refusedWithoutName.push(`${where}: ${res.body}`);
        }
      }
    }

    // 2. POST /config/keys with each form in each field, and a rotation of keys written with them.
    for (const path of schemaLeaves(namedKeySchema, 'x-canary')) {
      if (path[0] === 'key' || path[0] === 'key_sha256') continue;
      for (const form of FORMS) {
        const res = await admin('POST', '/config/keys', withValueAt({ name: `k-${++n}` }, path, form.text));
        if (res.status === 201) wronglyAccepted.push(`POST /config/keys ${path.join('.')} = ${form.text}`);
      }
      const rotated = `r-${++n}`;
      await etcd.put(`${prefix}keys/${rotated}`, JSON.stringify(withValueAt({ key_sha256: sha256('sk-canary-rotate-0123') }, path, FORMS[n % FORMS.length]!.text)));
      const res = await admin('POST', `/config/keys/${rotated}/rotate`);
      if (res.status === 200 && path[0] !== 'name') wronglyAccepted.push(`rotate ${rotated} with ${path.join('.')} = ${FORMS[n % FORMS.length]!.text}`);
    }

    // 3. etcdctl: each field with a form (in turn), every field at once with each form, and text that is not JSON.
    for (const [kind, schema] of Object.entries(KINDS) as [Kind, (typeof KINDS)[Kind]][]) {
      const leaves = schemaLeaves(schema, 'x-canary');
      for (const path of leaves) await etcd.put(`${prefix}${kind}/e-${++n}`, JSON.stringify(withValueAt(baseOf(kind, path), path, FORMS[n % FORMS.length]!.text)));
      for (const form of FORMS) {
        const everything = leaves.reduce((doc, path) => withValueAt(doc, path, form.text), {} as Record<string, unknown>);
        await etcd.put(`${prefix}${kind}/all-${++n}`, JSON.stringify(everything));
      }
    }
    await etcd.put(`${prefix}providers/broken-1`, `{"type": ${CANARY}}`);
    await etcd.put(`${prefix}providers/broken-2`, `${HIDDEN} {"type":"openai"}`);
    await etcd.put(`${prefix}providers/broken-3`, `{"type":"openai","api_key":"${CANARY}" "x":1}`);
    await servedUpTo(await etcd.revision());

    // 4. sluice apply, in an environment without the canaries (an operator's): the secret-bearing
    // fields are sent as written (the gateway expands the allowed one), the rest is resolved by
    // apply, which refuses a variable it does not have.
    const dir = dirname(gw.configFile);
    const apply = async (file: string, resources: object) => {
      writeFileSync(join(dir, file), stringify(resources));
      const result = await runSluice(['apply', '-f', join(dir, file), '--admin', gw.adminUrl, '--token', TOKEN], {
        env: { SLUICE_CONFIG: undefined, SLUICE_ADMIN_TOKEN: undefined, SLUICE_CANARY: undefined, SLUICE_CANARY_HIDDEN: undefined, SLUICE_CANARY_NUMBER: undefined },
      });
      cliOutput.push(`apply ${file} → ${result.code}\n${result.stdout}${result.stderr}`);
      return result;
    };
    const secretOnly = await apply('secret-fields.yaml', {
      providers: [{ name: 'applied', type: 'openai', base_url: `${mock.url}/v1`, api_key: '${SLUICE_CANARY}', headers: { 'x-canary': 'a-${SLUICE_CANARY}-b' } }],
      models: [{ name: 'applied-model', targets: [{ provider: 'applied', headers: { 'x-canary': '${SLUICE_CANARY:-x}' } }] }],
    });
    const hidden = await apply('hidden.yaml', { providers: [{ name: 'applied-hidden', type: 'openai', base_url: `${mock.url}/v1`, api_key: '${SLUICE_CANARY_HIDDEN}' }] });
    const elsewhere = await apply('elsewhere.yaml', { models: [{ name: 'applied-elsewhere', provider: 'up', upstream_model: '${SLUICE_CANARY}' }] });
    const everyField = await apply('every-field.yaml', Object.fromEntries(Object.entries(KINDS).map(([kind, schema]) => [kind, [schemaLeaves(schema, 'x-canary').reduce((doc, path) => withValueAt(doc, path, '${SLUICE_CANARY}'), { name: `applied-all-${kind}` } as Record<string, unknown>)]])));

    // 5. Every model is called (an expanded value must not reach an answer, a log line or a span).
    const models = JSON.parse((await admin('GET', '/config/models')).body) as { items: { name: string }[] };
    for (const { name } of models.items) {
      const res = await postJson(`${gw.proxyUrl}/v1/chat/completions`, { model: name, messages: [{ role: 'user', content: 'hi' }] }, { authorization: `Bearer ${LOAD_KEY}` });
      answers.push(`chat ${name} → ${res.status} ${JSON.stringify(res.headers)}\n${res.body}`);
    }
    await receiver.waitFor((spans) => spans.some((s) => String(s.attributes['gen_ai.request.model']) === 'base'), 15_000, 'the spans of the model calls');
    for (const route of ['/server_info', '/metrics', '/config/providers', '/config/models', '/config/keys']) await admin('GET', route);
    await watcher.waitFor((e) => e.name === 'status' && Date.parse(String(e.data.at)) > Date.now() - 500, 5000, 'a fresh status event');

    // 6. The snapshot is written and the gateway exits (its last log lines and snapshot included).
    const snapshotFile = `${gw.configFile}.snapshot.json`;
    const revision = await etcd.revision();
    await eventually(() => (JSON.parse(readFileSync(snapshotFile, 'utf8')) as { revision: number }).revision >= revision, 10_000, 'the snapshot at the last revision');
    gw.signal('SIGTERM');
    await gw.exited;

    const surfaces = new Map<string, string>([
      ['answers', answers.join('\n')],
      ['stdout (log)', gw.stdout()],
      ['stderr', gw.stderr()],
      ['spans', JSON.stringify(receiver.spans)],
      ['snapshot', readFileSync(snapshotFile, 'utf8')],
      ['status events', JSON.stringify(watcher.events)],
      ['sluice apply', cliOutput.join('\n')],
    ]);
    const findings = findCanaries(surfaces, CANARIES);
    assert.deepEqual(findings, [], `a canary was found:\n${findings.map((f) => `  ${f.surface} (${f.form}): …${f.context}…`).join('\n')}`);
    // sluice apply: the secret-bearing fields applied; a variable the gateway does not allow refused by
    // it; one apply does not have refused by apply (exit 1, nothing written).
    assert.equal(secretOnly.code, 0, secretOnly.stderr);
    assert.ok(models.items.some((m) => m.name === 'applied-model'), 'the model applied with secret-bearing fields is served');
    assert.equal(hidden.code, 1);
    assert.match(hidden.stderr, /SLUICE_CANARY_HIDDEN/);
    // The allowed variable did expand where it may: the upstream got it (so finding it nowhere else means something).
    const upstreamGot = mock.received.find((r) => r.headers.authorization === `Bearer ${CANARY}`);
    assert.ok(upstreamGot, 'the provider applied with api_key ${SLUICE_CANARY} sent the canary upstream');
    assert.match(String(upstreamGot.headers['x-canary']), new RegExp(`^(a-)?${CANARY}(-b)?$`), 'the header values with ${SLUICE_CANARY} expanded');
    assert.equal(elsewhere.code, 1);
    assert.match(elsewhere.stderr, /\$\{SLUICE_CANARY\}/);
    assert.equal(elsewhere.stdout, '');
    assert.notEqual(everyField.code, 0);
    assert.deepEqual(wronglyAccepted, [], 'a ${VAR} outside a secret-bearing field, or of a variable not allowed, was accepted');
    assert.deepEqual(wronglyRefused, [], 'an allowed variable in a secret-bearing field was refused');
    assert.deepEqual(refusedWithoutName, [], 'a refusal that does not name the variable');
    // The etcd writes were seen and rejected, named in resource_rejected lines.
    const rejected = gw.logs.filter((l) => l.event === 'resource_rejected');
    assert.ok(rejected.length >= 40, `resource_rejected lines: ${rejected.length}`);
    assert.ok(rejected.some((l) => String(l.reason).includes('SLUICE_CANARY_HIDDEN')), 'a rejection names the variable');
  });
});

describe('the secret canary in file mode', () => {
  test('credentials a config file reads from ${VAR} (api_key, header values, target header values, client keys): shown by neither the admin API nor sluice get', { timeout: 60_000 }, async () => {
    const file = await startGateway({
      config: {
        admin: { tokens: [{ name: 'ops', token: TOKEN }] },
        providers: [{ name: 'up', type: 'openai', base_url: 'http://127.0.0.1:9/v1', api_key: '${SLUICE_CANARY}', headers: { authorization: 'Bearer ${SLUICE_CANARY}', 'x-org': '${SLUICE_CANARY}' } }],
        models: [{ name: 'm', targets: [{ provider: 'up', headers: { 'x-team': 'team-${SLUICE_CANARY}', authorization: '${SLUICE_CANARY}' } }] }],
        keys: [{ name: 'k', key: '${SLUICE_CANARY}' }, '${SLUICE_CANARY_HIDDEN}'],
      },
      env: ENV,
    });
    try {
      const seen: string[] = [];
      for (const path of ['/config/providers', '/config/models', '/config/keys', '/config/providers/up', '/config/models/m', '/config/keys/k', '/server_info', '/metrics']) {
        const res = await httpRequest(`${file.adminUrl}${path}`, { headers: auth });
        assert.equal(res.status, 200, `${path}: ${res.body}`);
        seen.push(`${path} ${JSON.stringify(res.headers)}\n${res.body}`);
      }
      for (const kind of ['providers', 'models', 'keys']) {
        for (const output of [[], ['-o', 'json'], ['-o', 'yaml']]) {
          const result = await runSluice(['get', kind, ...output, '--admin', file.adminUrl, '--token', TOKEN], { env: { SLUICE_CONFIG: undefined, SLUICE_ADMIN_TOKEN: undefined } });
          assert.equal(result.code, 0, result.stderr);
          seen.push(result.stdout, result.stderr);
        }
      }
      const findings = findCanaries(new Map([['admin API and sluice get', seen.join('\n')], ['log', file.stdout() + file.stderr()]]), CANARIES);
      assert.deepEqual(findings, [], `a canary was found:\n${findings.map((f) => `  ${f.surface} (${f.form}): …${f.context}…`).join('\n')}`);
      // The headers are there, by name: only their values are withheld.
      assert.match(seen.join('\n'), /"x-team":"\[redacted\]"/);
    } finally {
      await file.stop();
    }
  });
});
