// A URL of the config as it is logged or shown: its userinfo, query and fragment withheld, the rest
// (scheme, host, port, path) kept as written. Fuzzed: whatever a URL holds in those three places,
// none of it is left, and a URL without them is returned as it is.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { REDACTED, redactUrl, redactUrlsIn } from '../../src/config/redact-url.ts';

const SEED = Number(process.env.SLUICE_FUZZ_SEED ?? 20261203);
const RUNS = Number(process.env.SLUICE_FUZZ_RUNS ?? 200);

test('the common forms', () => {
  const cases: [string, string][] = [
    ['redis://:s3cret@redis.internal:6379/0', `redis://${REDACTED}@redis.internal:6379/0`],
    ['rediss://default:s3cret@redis:6380', `rediss://${REDACTED}@redis:6380`],
    ['http://root:s3cret@127.0.0.1:2379', `http://${REDACTED}@127.0.0.1:2379`],
    ['https://api.example.com/v1?api-key=s3cret&api-version=2024-02-01', `https://api.example.com/v1?${REDACTED}`],
    ['https://sk-s3cret@api.example.com/v1', `https://${REDACTED}@api.example.com/v1`],
    ['https://collector:4318/v1/traces#s3cret', `https://collector:4318/v1/traces#${REDACTED}`],
    // A password holding "@" (written unencoded): everything up to the last "@" is withheld.
    ['redis://:p@ss@host:6379', `redis://${REDACTED}@host:6379`],
    // What the URL parser refuses is split by its delimiters all the same.
    ['redis://:s3cret@[bad:6379', `redis://${REDACTED}@[bad:6379`],
    ['user:s3cret@host:2379', `${REDACTED}@host:2379`],
  ];
  for (const [url, shown] of cases) assert.equal(redactUrl(url), shown, url);
  for (const url of ['https://api.openai.com/v1', 'redis://127.0.0.1:6379', 'http://[::1]:2379', 'http://127.0.0.1:4318/v1/traces']) assert.equal(redactUrl(url), url);
});

test('URLs inside a text (an error message that quotes one) are redacted, the rest kept', () => {
  assert.equal(
    redactUrlsIn('request to http://user:s3cret@127.0.0.1:2379/x?t=s3cret failed (http://u:s3cret@h/v1?k=s3cret).'),
    `request to http://${REDACTED}@127.0.0.1:2379/x?${REDACTED} failed (http://${REDACTED}@h/v1?${REDACTED}).`,
  );
  assert.equal(redactUrlsIn('connect ECONNREFUSED 127.0.0.1:6379'), 'connect ECONNREFUSED 127.0.0.1:6379');
});

const secret = fc.stringMatching(/^[A-Za-z0-9]{12,24}$/).map((s) => `S${s}`);
const host = fc.constantFrom('127.0.0.1:2379', 'redis.internal:6379', 'api.example.com', '[::1]:8080', 'h');
const path = fc.constantFrom('', '/', '/v1', '/v1/traces', '/0');

test('fuzzed: a secret in the userinfo, the query or the fragment is never left; the scheme, host and path are', () => {
  fc.assert(
    fc.property(
      fc.constantFrom('http://', 'https://', 'redis://', 'rediss://'),
      fc.record({ user: fc.option(secret), password: fc.option(secret), query: fc.option(secret), name: fc.option(secret), fragment: fc.option(secret) }),
      host,
      path,
      (scheme, parts, where, at) => {
        const userinfo = parts.user !== null || parts.password !== null ? `${parts.user ?? ''}${parts.password !== null ? `:${parts.password}` : ''}@` : '';
        const query = parts.query !== null || parts.name !== null ? `?${parts.name ?? 'key'}=${parts.query ?? ''}&x=${parts.query ?? 'y'}` : '';
        const fragment = parts.fragment !== null ? `#${parts.fragment}` : '';
        const url = `${scheme}${userinfo}${where}${at}${query}${fragment}`;
        const shown = redactUrl(url);
        for (const value of Object.values(parts)) if (value !== null) assert.ok(!shown.includes(value), `${url} → ${shown}`);
        assert.ok(shown.startsWith(scheme), shown);
        assert.ok(shown.includes(`${where}${at}`), shown);
        if (userinfo === '' && query === '' && fragment === '') assert.equal(shown, url);
        // Once is enough: redacting again changes nothing.
        assert.equal(redactUrl(shown), shown);
      },
    ),
    { seed: SEED, numRuns: RUNS },
  );
});

test('fuzzed: any text at all is answered, and no "@" is left before the host', () => {
  fc.assert(
    fc.property(fc.string({ maxLength: 200 }), (text) => {
      const shown = redactUrl(text);
      const authority = /^(?:[A-Za-z][A-Za-z0-9+.-]*:\/\/)?([^/?#]*)/.exec(shown)![1]!;
      assert.ok(!authority.replace(`${REDACTED}@`, '').includes('@'), `${JSON.stringify(text)} → ${JSON.stringify(shown)}`);
    }),
    { seed: SEED, numRuns: RUNS },
  );
});
