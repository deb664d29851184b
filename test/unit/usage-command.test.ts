// `sluice usage` (src/commands/usage-command.ts): the table (aligned, a total line, names with
// control characters escaped, dollars with 2 to 6 decimals), the CSV (RFC 4180 quoting read back by
// a parser, formulas defused), and the command against a fake admin API: the query it sends, the
// JSON as answered, and an error answer as one line with its code and exit code 1.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { csvField, formatUsd, instant, usageCommand, usageCsv, usageTable, type UsageAnswer, type UsageOutput } from '../../src/commands/usage-command.ts';

const ANSWER: UsageAnswer = {
  from: '2026-12-01T00:00:00.000Z',
  to: '2026-12-03T00:00:00.000Z',
  group_by: ['team', 'key'],
  bucket: null,
  rows: [
    { team: 'research', key: 'alice', requests: 1200, errors: 3, prompt_tokens: 456789, completion_tokens: 12345, cached_tokens: 1000, cost_usd: 12.5 },
    { team: '', key: 'ci\x1b[2J\u009b1;1H', requests: 7, errors: 0, prompt_tokens: 70, completion_tokens: 7, cached_tokens: 0, cost_usd: 0.000123 },
  ],
  totals: { requests: 1207, errors: 3, prompt_tokens: 456859, completion_tokens: 12352, cached_tokens: 1000, cost_usd: 12.500123 },
};

describe('formatUsd', () => {
  test('at least cents, up to micro-dollars, no trailing zeros beyond the cents', () => {
    assert.equal(formatUsd(12.5), '$12.50');
    assert.equal(formatUsd(3), '$3.00');
    assert.equal(formatUsd(0), '$0.00');
    assert.equal(formatUsd(0.000123), '$0.000123');
    assert.equal(formatUsd(1.2345678), '$1.234568');
    assert.equal(formatUsd(0.1 + 0.2), '$0.30');
    assert.equal(formatUsd(1234.0105), '$1234.0105');
  });
});

describe('usageTable', () => {
  const lines = usageTable(ANSWER);

  test('a range line, a header, one row per group and a total line', () => {
    assert.equal(lines[0], 'usage from 2026-12-01T00:00:00.000Z to 2026-12-03T00:00:00.000Z by team,key');
    assert.equal(lines[1], '');
    const [header, first, second, total, ...rest] = lines.slice(2);
    assert.deepEqual(rest, []);
    assert.deepEqual(header!.split(/\s+/), ['TEAM', 'KEY', 'REQUESTS', 'ERRORS', 'TOKENS_IN', 'TOKENS_OUT', 'COST']);
    assert.deepEqual(first!.split(/\s+/), ['research', 'alice', '1200', '3', '456789', '12345', '$12.50']);
    // An empty team is "-"; the key's controls are each "?": nothing reaches the terminal raw.
    assert.deepEqual(second!.split(/\s+/), ['-', 'ci?[2J?1;1H', '7', '0', '70', '7', '$0.000123']);
    assert.deepEqual(total!.split(/\s+/), ['TOTAL', '1207', '3', '456859', '12352', '$12.500123']);
    for (const line of lines) assert.ok(!/[\x00-\x1f\x7f-\x9f]/.test(line), `a control character in ${JSON.stringify(line)}`);
  });

  test('the columns are aligned: names start together, numbers end together', () => {
    const table = lines.slice(2);
    assert.equal(new Set(table.map((l) => l.length)).size, 1, table.join('\n'));
    const header = table[0]!;
    // Names are left-aligned under their titles.
    const keyAt = header.indexOf('KEY');
    assert.equal(table[1]!.indexOf('alice'), keyAt);
    assert.equal(table[2]!.indexOf('ci?'), keyAt);
    // Numbers are right-aligned under theirs: each ends where its title ends.
    for (const [title, values] of [
      ['REQUESTS', ['1200', '7', '1207']],
      ['ERRORS', ['3', '0', '3']],
      ['TOKENS_IN', ['456789', '70', '456859']],
      ['TOKENS_OUT', ['12345', '7', '12352']],
      ['COST', ['$12.50', '$0.000123', '$12.500123']],
    ] as const) {
      const end = header.indexOf(title) + title.length;
      values.forEach((value, i) => {
        const row = table[i + 1]!;
        assert.ok(row.slice(0, end).endsWith(` ${value}`) && (row[end] ?? ' ') === ' ', `${title} ${value} in:\n${header}\n${row}`);
      });
    }
    assert.ok(table[3]!.endsWith('$12.500123'));
    assert.ok(table[1]!.endsWith('    $12.50'));
  });

  test('per day: the bucket is the first column', () => {
    const daily = usageTable({ ...ANSWER, bucket: 'day', group_by: ['model'], rows: [{ bucket: '2026-12-01T00:00:00.000Z', model: 'gpt-4o', requests: 1, errors: 1, prompt_tokens: 2, completion_tokens: 3, cached_tokens: 0, cost_usd: 0.01 }] });
    assert.equal(daily[0], 'usage from 2026-12-01T00:00:00.000Z to 2026-12-03T00:00:00.000Z by model, per day');
    assert.deepEqual(daily[2]!.split(/\s+/), ['BUCKET', 'MODEL', 'REQUESTS', 'ERRORS', 'TOKENS_IN', 'TOKENS_OUT', 'COST']);
    assert.deepEqual(daily[3]!.split(/\s+/), ['2026-12-01T00:00:00.000Z', 'gpt-4o', '1', '1', '2', '3', '$0.01']);
  });

  test('without a group: the total line only', () => {
    const lines = usageTable({ ...ANSWER, group_by: [], rows: [{ requests: 3, errors: 1, prompt_tokens: 30, completion_tokens: 9, cached_tokens: 0, cost_usd: 0.5 }], totals: { requests: 3, errors: 1, prompt_tokens: 30, completion_tokens: 9, cached_tokens: 0, cost_usd: 0.5 } });
    assert.equal(lines[0], 'usage from 2026-12-01T00:00:00.000Z to 2026-12-03T00:00:00.000Z');
    assert.deepEqual(lines.slice(2).map((l) => l.trim().split(/\s+/)), [
      ['REQUESTS', 'ERRORS', 'TOKENS_IN', 'TOKENS_OUT', 'COST'],
      ['TOTAL', '3', '1', '30', '9', '$0.50'],
    ]);
  });
});

describe('instant', () => {
  const now = Date.parse('2026-12-03T12:00:00Z');
  test('30m, 24h, 7d: that long before now; anything else as written', () => {
    assert.equal(instant('30m', now), '2026-12-03T11:30:00.000Z');
    assert.equal(instant('24h', now), '2026-12-02T12:00:00.000Z');
    assert.equal(instant('7d', now), '2026-11-26T12:00:00.000Z');
    assert.equal(instant('2026-12-01', now), '2026-12-01');
    assert.equal(instant('1764800000000', now), '1764800000000');
    assert.equal(instant('7w', now), '7w');
  });
});

/** An RFC 4180 reader: the records of a CSV text, each a list of fields. */
function readCsv(text: string): string[][] {
  const records: string[][] = [];
  let record: string[] = [];
  let field = '';
  let i = 0;
  while (i < text.length) {
    if (text[i] === '"' && field === '') {
      i++;
      for (;;) {
        if (text[i] === '"' && text[i + 1] === '"') (field += '"'), (i += 2);
        else if (text[i] === '"') {
          i++;
          break;
        } else if (i >= text.length) throw new Error('unterminated quote');
        else field += text[i++];
      }
      assert.ok(i >= text.length || text[i] === ',' || text.startsWith('\r\n', i), `text after a closing quote at ${i}`);
    } else if (text[i] === ',') {
      record.push(field);
      field = '';
      i++;
    } else if (text.startsWith('\r\n', i)) {
      record.push(field);
      records.push(record);
      record = [];
      field = '';
      i += 2;
    } else {
      assert.ok(text[i] !== '"' && text[i] !== '\n' && text[i] !== '\r', `a bare ${JSON.stringify(text[i])} at ${i} in an unquoted field`);
      field += text[i++];
    }
  }
  assert.equal(field, '', 'the last record ends with CRLF');
  assert.deepEqual(record, []);
  return records;
}

describe('CSV', () => {
  test('csvField: quoted only when needed, quotes doubled, formulas defused', () => {
    assert.equal(csvField('alice'), 'alice');
    assert.equal(csvField('a,b'), '"a,b"');
    assert.equal(csvField('say "hi"'), '"say ""hi"""');
    assert.equal(csvField('two\nlines'), '"two\nlines"');
    assert.equal(csvField('cr\rhere'), '"cr\rhere"');
    assert.equal(csvField('=HYPERLINK("http://x")'), '"\'=HYPERLINK(""http://x"")"');
    assert.equal(csvField('+1'), "'+1");
    assert.equal(csvField('-2'), "'-2");
    assert.equal(csvField('@SUM(A1)'), "'@SUM(A1)");
    assert.equal(csvField('a=b'), 'a=b');
    assert.equal(csvField(12.5), '12.5');
    assert.equal(csvField(0), '0');
  });

  test('any text reads back as itself (a formula with its leading quote)', () => {
    fc.assert(
      fc.property(fc.string({ unit: fc.constantFrom('a', ',', '"', '\n', '\r', '=', '+', '-', '@', ' ', "'", 'é') }), (text) => {
        const [[read]] = readCsv(`${csvField(text)}\r\n`) as [[string]];
        assert.equal(read, /^[=+\-@]/.test(text) ? `'${text}` : text);
      }),
    );
  });

  test('usageCsv: the API field names, one record per row, CRLF, names escaped and defused', () => {
    const rows = [...ANSWER.rows, { team: 'a,"b"', key: '=cmd|" /C calc"!A0', requests: 1, errors: 0, prompt_tokens: 1, completion_tokens: 1, cached_tokens: 0, cost_usd: 0.1 + 0.2 }];
    const csv = usageCsv({ ...ANSWER, rows });
    assert.ok(csv.endsWith('\r\n'));
    assert.ok(!/[\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f]/.test(csv), 'no control character but the line ends');
    assert.deepEqual(readCsv(csv), [
      ['team', 'key', 'requests', 'errors', 'prompt_tokens', 'completion_tokens', 'cached_tokens', 'cost_usd'],
      ['research', 'alice', '1200', '3', '456789', '12345', '1000', '12.5'],
      ['', 'ci?[2J?1;1H', '7', '0', '70', '7', '0', '0.000123'],
      ['a,"b"', '\'=cmd|" /C calc"!A0', '1', '0', '1', '1', '0', '0.3'],
    ]);
  });

  test('per hour: the bucket is the first field', () => {
    const csv = usageCsv({ ...ANSWER, bucket: 'hour', group_by: [], rows: [{ bucket: '2026-12-01T10:00:00.000Z', requests: 2, errors: 0, prompt_tokens: 3, completion_tokens: 4, cached_tokens: 0, cost_usd: 0 }] });
    assert.equal(csv, 'bucket,requests,errors,prompt_tokens,completion_tokens,cached_tokens,cost_usd\r\n2026-12-01T10:00:00.000Z,2,0,3,4,0,0\r\n');
  });
});

/** A stand-in for the admin API: answers GET /usage with `reply`, records what was asked. */
class FakeAdmin {
  readonly server: Server;
  readonly asked: { url: string; authorization: string | undefined }[] = [];
  reply: { status: number; body: unknown } = { status: 200, body: ANSWER };
  url = '';

  constructor() {
    this.server = createServer((req: IncomingMessage, res) => {
      this.asked.push({ url: req.url ?? '', authorization: req.headers.authorization });
      res.writeHead(this.reply.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(this.reply.body));
    });
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }
}

function capture(): UsageOutput & { out: string; errors: string[] } {
  const io = {
    out: '',
    errors: [] as string[],
    write: (text: string) => void (io.out += text),
    err: (line: string) => void io.errors.push(line),
  };
  return io;
}

describe('usageCommand against a fake admin API', () => {
  const admin = new FakeAdmin();
  const env = { SLUICE_ADMIN_TOKEN: '' };
  before(() => admin.start());
  after(() => new Promise<void>((resolve) => admin.server.close(() => resolve())));

  test('sends the range, the groups and the bucket with the token; prints the table', async () => {
    admin.reply = { status: 200, body: ANSWER };
    const io = capture();
    const code = await usageCommand(['--url', admin.url, '--token', 't0k', '--from', '2026-12-01', '--to', '1h', '--by', 'team, key', '--bucket', 'day'], io, env, () => Date.parse('2026-12-03T01:00:00Z'));
    assert.equal(code, 0, io.errors.join('\n'));
    const asked = new URL(admin.asked.at(-1)!.url, admin.url);
    assert.equal(asked.pathname, '/usage');
    assert.deepEqual(Object.fromEntries(asked.searchParams), { from: '2026-12-01', to: '2026-12-03T00:00:00.000Z', group_by: 'team,key', bucket: 'day' });
    assert.equal(admin.asked.at(-1)!.authorization, 'Bearer t0k');
    assert.equal(io.out, usageTable(ANSWER).map((l) => `${l}\n`).join(''));
  });

  test('-o json: the answer as is, its controls escaped where JSON reads them back', async () => {
    const io = capture();
    assert.equal(await usageCommand(['--url', admin.url, '-o', 'json'], io, env), 0);
    assert.equal(admin.asked.at(-1)!.url, '/usage');
    assert.deepEqual(JSON.parse(io.out), ANSWER);
    assert.ok(!/[\x00-\x09\x0b-\x1f\x7f-\x9f]/.test(io.out));
  });

  test('-o csv', async () => {
    const io = capture();
    assert.equal(await usageCommand(['--admin', admin.url, '-o', 'csv'], io, env), 0);
    assert.equal(io.out, usageCsv(ANSWER));
  });

  test('an error answer: one line with its status and code, exit 1, nothing on stdout', async () => {
    admin.reply = { status: 404, body: { error: { type: 'not_found_error', code: 'ledger_not_enabled', message: 'the usage ledger is not enabled: add a `ledger` section' } } };
    const io = capture();
    assert.equal(await usageCommand(['--url', admin.url], io, env), 1);
    assert.equal(io.out, '');
    assert.deepEqual(io.errors, ['sluice usage: GET /usage: 404 ledger_not_enabled: the usage ledger is not enabled: add a `ledger` section']);
    admin.reply = { status: 400, body: { error: { code: 'invalid_query', message: 'from: not a time\nsecond line \x1b[31m' } } };
    const bad = capture();
    assert.equal(await usageCommand(['--url', admin.url, '--from', 'yesterday'], bad, env), 1);
    assert.deepEqual(bad.errors, ['sluice usage: GET /usage: 400 invalid_query: from: not a time?second line ?[31m']);
  });

  test('a 200 that is not usage, an unreachable API, and bad flags', async () => {
    admin.reply = { status: 200, body: { hello: 1 } };
    const odd = capture();
    assert.equal(await usageCommand(['--url', admin.url], odd, env), 1);
    assert.match(odd.errors[0]!, /^sluice usage: GET \/usage answered something else than usage/);
    const down = capture();
    assert.equal(await usageCommand(['--url', 'http://127.0.0.1:1'], down, env), 1);
    assert.match(down.errors[0]!, /^sluice usage: cannot reach the admin API at http:\/\/127\.0\.0\.1:1/);
    for (const args of [['-o', 'yaml'], ['--by', 'team,colour'], ['--bucket', 'week'], ['--nope'], ['--url', 'ftp://x']]) {
      const io = capture();
      assert.equal(await usageCommand(['--url', admin.url, ...args].slice(args[0] === '--url' ? 2 : 0), io, env), 2, args.join(' '));
      assert.equal(io.errors.length, 1);
    }
  });
});
