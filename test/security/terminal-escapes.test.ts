// `sluice get` prints what a gateway holds on an operator's terminal (#24, defect 9, first half): a
// resource's name (a model's may be any text), a key's allowed models and metadata. A terminal acts
// on control characters (ESC sequences retitle or clear it, move the cursor; a C1 control such as
// U+009B does it alone; U+2028 and the bidirectional overrides make a line seem to say something
// else), so none is printed raw: in a table each is "?", in -o json and -o yaml each is an escape
// that reads back as the same character, so the output still round-trips. Against the built CLI
// and a gateway at the default settings.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { parse } from 'yaml';
import { runSluice, startGateway, type GatewayProcess, type RunResult } from '../support/gateway-process.ts';

const TOKEN = 'escapes-admin-token-0123456789';
/** Every character a terminal acts on, or that reorders a line; a line feed is only a document's own. */
const CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

const HOSTILE = {
  title: '\u001b]0;pwned\u0007title',
  clear: 'clear\u001b[2J\u001b[H',
  c1: 'c1\u009b31mred',
  rewrite: 'ok\r\u001b[1Afake line',
  bidi: 'gpt\u202e-4o',
  separator: 'a\u2028b',
};

let gw: GatewayProcess;
before(async () => {
  gw = await startGateway({
    config: {
      admin: { tokens: [{ name: 'ops', token: TOKEN }] },
      providers: [{ name: 'local', type: 'echo' }],
      models: Object.values(HOSTILE).map((name) => ({ name, provider: 'local', upstream_model: `${name}-up` })),
      keys: [{ name: 'team', key: 'sk-team-0123456789', models: [HOSTILE.clear, HOSTILE.c1], metadata: { [HOSTILE.title]: HOSTILE.rewrite }, budget: { usd: 5 } }],
    },
  });
});
after(async () => gw?.stop());

const get = (...args: string[]): Promise<RunResult> =>
  runSluice(['get', ...args, '--admin', gw.adminUrl, '--token', TOKEN], { env: { SLUICE_CONFIG: undefined, SLUICE_ADMIN_TOKEN: undefined } });

function assertHarmless(result: RunResult, what: string): void {
  assert.equal(result.code, 0, `${what}: ${result.stderr}`);
  for (const [stream, text] of [['stdout', result.stdout], ['stderr', result.stderr]] as const) {
    const found = CONTROL.exec(text);
    assert.equal(found, null, `${what}: ${stream} holds U+${found?.[0].charCodeAt(0).toString(16).padStart(4, '0')} raw: ${JSON.stringify(text.slice(Math.max(0, (found?.index ?? 0) - 40), (found?.index ?? 0) + 40))}`);
  }
}

describe('sluice get never prints a control character raw', () => {
  test('a table: each control character is "?" (names, upstream models, a key\'s models), one line per resource', async () => {
    const models = await get('models');
    assertHarmless(models, 'get models');
    const lines = models.stdout.trimEnd().split('\n');
    assert.equal(lines.length, 1 + Object.keys(HOSTILE).length, models.stdout);
    assert.ok(lines.some((l) => l.startsWith('?]0;pwned?title ')), models.stdout);
    assert.ok(lines.some((l) => l.startsWith('clear?[2J?[H ')), models.stdout);
    assert.ok(lines.some((l) => l.startsWith('c1?31mred ')), models.stdout);

    const keys = await get('keys');
    assertHarmless(keys, 'get keys');
    assert.match(keys.stdout, /^team\s+-\s+clear\?\[2J\?\[H,c1\?31mred\s/m);

    const one = await get('models', HOSTILE.rewrite);
    assertHarmless(one, 'get models NAME');
    assert.match(one.stdout, /^ok\?\?\[1Afake line\s+local\s+ok\?\?\[1Afake line-up\s/m);
  });

  test('-o json and -o yaml: each control character escaped, and what is read back is the name itself', async () => {
    const json = await get('models', '-o', 'json');
    assertHarmless(json, 'get models -o json');
    const names = (JSON.parse(json.stdout) as { items: { name: string }[] }).items.map((i) => i.name);
    assert.deepEqual(names.sort(), Object.values(HOSTILE).sort());

    const yaml = await get('models', '-o', 'yaml');
    assertHarmless(yaml, 'get models -o yaml');
    const read = parse(yaml.stdout) as { models: { name: string; upstream_model: string }[] };
    assert.deepEqual(read.models.map((m) => m.name).sort(), Object.values(HOSTILE).sort());
    assert.ok(read.models.every((m) => m.upstream_model === `${m.name}-up`));

    const keys = await get('keys', '-o', 'yaml');
    assertHarmless(keys, 'get keys -o yaml');
    const key = (parse(keys.stdout) as { keys: { models: string[]; metadata: Record<string, string> }[] }).keys[0]!;
    assert.deepEqual(key.models, [HOSTILE.clear, HOSTILE.c1]);
    assert.deepEqual(key.metadata, { [HOSTILE.title]: HOSTILE.rewrite });
  });

  test('an error naming a resource is escaped too', async () => {
    const missing = await get('models', `absent\u001b[2J`);
    assert.equal(missing.code, 1);
    assert.doesNotMatch(missing.stderr, CONTROL);
    assert.match(missing.stderr, /no models\/absent\?\[2J/);
  });
});
