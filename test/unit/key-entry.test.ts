// A key's place in its `concurrent` limit is taken when the key is checked, before the body is
// read (Limiter.enter), and handed to the request's admission, or given back when the request ends
// before one: whatever the path, the place is counted once and given back once.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { MemoryStore } from '../../src/limits/memory-store.ts';
import { Limiter } from '../../src/limits/limiter.ts';
import { LimitPolicy, type LimitedKey } from '../../src/limits/limit-policy.ts';
import { UNLIMITED, type Admission } from '../../src/limits/admission.ts';
import type { Entry } from '../../src/limits/key-entry.ts';
import { StoreUnavailable, type Ask, type Renewal, type Settlement } from '../../src/limits/store.ts';
import { GatewayError } from '../../src/api/errors.ts';
import { parseConfig } from '../../src/config/load.ts';

function policy(yaml = ''): LimitPolicy {
  return new LimitPolicy(parseConfig(`listeners: [{ name: p, address: "127.0.0.1:0", role: proxy }]\n${yaml}`, 'test.yaml', {}));
}

const events = { refused() {}, storeError() {}, notCommitted() {} };

/** A memory store that counts what it is asked, and can be away. */
class CountingStore extends MemoryStore {
  acquires: Ask[] = [];
  settlements: Settlement[] = [];
  renewals: Renewal[][] = [];
  down = false;
  override acquire(ask: Ask) {
    if (this.down) throw new StoreUnavailable('away');
    this.acquires.push(ask);
    return super.acquire(ask);
  }
  override settle(s: Settlement) {
    this.settlements.push(s);
    super.settle(s);
  }
  override renew(renewals: readonly Renewal[], leaseMs: number) {
    this.renewals.push([...renewals]);
    super.renew(renewals, leaseMs);
  }
}

const admit = (limiter: Limiter, p: LimitPolicy, key: LimitedKey, id: string, entry: Entry | undefined) =>
  limiter.admit({ policy: p, key, model: 'm', requested: 'm', targets: [{ model: undefined }], generates: true, billed: true, json: { max_tokens: 10 }, bodyBytes: 40, id, entry });

const enter = (limiter: Limiter, p: LimitPolicy, key: LimitedKey, id: string) => limiter.enter(p, key, id) as Entry | GatewayError | undefined;

describe('Limiter.enter: the key\'s place before the body', () => {
  test('a key without a concurrent limit: nothing asked, nothing held', () => {
    const store = new CountingStore(() => 0);
    const limiter = new Limiter(store, events);
    assert.equal(limiter.enter(policy(), { name: 'a', limits: { rpm: 5 } }, '1'), undefined);
    assert.equal(limiter.enter(policy(), { name: 'a' }, '1'), undefined);
    assert.equal(store.acquires.length, 0);
  });

  test('concurrent: 1 — a second request is refused before its body while the first\'s is read; the place is counted once, through the admission, and given back when it finishes', () => {
    const store = new CountingStore(() => 0);
    const limiter = new Limiter(store, events);
    const p = policy();
    const key = { name: 'a', limits: { concurrent: 1, rpm: 5 } };
    const first = enter(limiter, p, key, '1') as Entry;
    assert.ok(first && !(first instanceof GatewayError));
    const second = enter(limiter, p, key, '2');
    assert.ok(second instanceof GatewayError && second.status === 429 && second.code === 'rate_limit_exceeded');
    assert.match(second.message, /^Rate limit reached for API key "a": 1 concurrent requests\. Try again in /);
    const admission = admit(limiter, p, key, '1', first) as Admission;
    assert.ok(!(admission instanceof GatewayError));
    assert.deepEqual(store.acquires.at(-1)!.concurrency, [], 'the admission does not ask for the key\'s place again');
    assert.ok(enter(limiter, p, key, '3') instanceof GatewayError, 'still held by the admitted request');
    first.leave(); // the request's earlier settle hook: nothing once admitted
    assert.ok(enter(limiter, p, key, '4') instanceof GatewayError, 'leave() after the admission gives nothing back');
    admission.finish({ prompt: 1, completion: 1 }, undefined, true);
    assert.deepEqual(store.settlements.at(-1)!.concurrency, ['k:a:cc']);
    assert.ok(!(enter(limiter, p, key, '5') instanceof GatewayError), 'free once the request finished');
  });

  test('a request that ends before its admission gives its place back, once', () => {
    const store = new CountingStore(() => 0);
    const limiter = new Limiter(store, events);
    const p = policy();
    const key = { name: 'a', limits: { concurrent: 1 } };
    const entry = enter(limiter, p, key, '1') as Entry;
    entry.leave();
    entry.leave();
    assert.equal(entry.left, true);
    assert.equal(store.settlements.length, 1);
    assert.ok(!(enter(limiter, p, key, '2') instanceof GatewayError));
  });

  test('an admission refused by another limit gives the key\'s place back', () => {
    const store = new CountingStore(() => 0);
    const limiter = new Limiter(store, events);
    const p = policy();
    const key = { name: 'a', limits: { concurrent: 1, rpm: 1 } };
    (admit(limiter, p, key, '0', enter(limiter, p, key, '0') as Entry) as Admission).finish(undefined, undefined, true);
    const entry = enter(limiter, p, key, '1') as Entry;
    const refused = admit(limiter, p, key, '1', entry);
    assert.ok(refused instanceof GatewayError && /1 requests per minute/.test(refused.message));
    assert.ok(!(enter(limiter, p, key, '2') instanceof GatewayError), 'the place was given back');
  });

  test('a key with only a concurrent limit: its admission asks the store nothing more, and its finish gives the place back', () => {
    const store = new CountingStore(() => 0);
    const limiter = new Limiter(store, events);
    const p = policy();
    const key = { name: 'a', limits: { concurrent: 1 } };
    const entry = enter(limiter, p, key, '1') as Entry;
    const admission = admit(limiter, p, key, '1', entry) as Admission;
    assert.notEqual(admission, UNLIMITED);
    assert.equal(store.acquires.length, 1, 'only the entry asked');
    admission.finish(undefined, undefined, false);
    assert.ok(!(enter(limiter, p, key, '2') instanceof GatewayError));
  });

  test('the place is renewed while the body is read (its lease would expire under a slow body)', async () => {
    const store = new CountingStore(() => 0);
    const limiter = new Limiter(store, events);
    const entry = enter(limiter, policy('limits: { lease_secs: 0.15 }'), { name: 'a', limits: { concurrent: 1 } }, 'slow') as Entry;
    const deadline = Date.now() + 5000;
    while (store.renewals.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.deepEqual(store.renewals[0], [{ lease: 'slow', concurrency: ['k:a:cc'], holds: [], hold: 0 }]);
    entry.leave();
  });

  test('the store away: on_store_error open lets the request on, holding nothing (its admission asks again); closed refuses it (503)', () => {
    const store = new CountingStore(() => 0);
    const limiter = new Limiter(store, events);
    const key = { name: 'a', limits: { concurrent: 1 } };
    store.down = true;
    const open = enter(limiter, policy(), key, '1') as Entry;
    assert.ok(open && !(open instanceof GatewayError));
    const closed = enter(limiter, policy('limits: { on_store_error: closed }'), key, '2');
    assert.ok(closed instanceof GatewayError && closed.status === 503);
    store.down = false;
    const admission = admit(limiter, policy(), key, '1', open) as Admission;
    assert.deepEqual(store.acquires.at(-1)!.concurrency, [{ id: 'k:a:cc', max: 1 }], 'the admission asks for the place the entry could not take');
    assert.ok(enter(limiter, policy(), key, '3') instanceof GatewayError);
    admission.finish(undefined, undefined, false);
  });

  test('fuzzed: requests entered, left, admitted (or refused) and finished in any order leave no place taken', () => {
    const op = fc.record({ what: fc.constantFrom('enter', 'leave', 'admit', 'finish'), which: fc.nat(7) });
    fc.assert(
      fc.property(fc.array(op, { maxLength: 80 }), fc.boolean(), (ops, rpm) => {
        const store = new CountingStore(() => 0);
        const limiter = new Limiter(store, events);
        const p = policy();
        const key = { name: 'a', limits: { concurrent: 3, ...(rpm ? { rpm: 4 } : {}) } };
        const entries = new Map<number, Entry>();
        const admissions = new Map<number, Admission>();
        for (const { what, which } of ops) {
          if (what === 'enter' && !entries.has(which)) {
            const entry = enter(limiter, p, key, `r${which}`);
            if (entry && !(entry instanceof GatewayError)) entries.set(which, entry);
          } else if (what === 'leave') entries.get(which)?.leave();
          else if (what === 'admit' && entries.has(which) && !admissions.has(which) && !entries.get(which)!.left) {
            const admission = admit(limiter, p, key, `r${which}`, entries.get(which));
            if (!(admission instanceof GatewayError)) admissions.set(which, admission as Admission);
            else entries.delete(which);
          } else if (what === 'finish') {
            admissions.get(which)?.finish(undefined, undefined, false);
            entries.get(which)?.leave();
            admissions.delete(which);
            entries.delete(which);
          }
        }
        for (const admission of admissions.values()) admission.finish(undefined, undefined, false);
        for (const entry of entries.values()) entry.leave();
        // Every place is free: three entries fit again.
        for (let i = 0; i < 3; i++) assert.ok(!(enter(limiter, p, { name: 'a', limits: { concurrent: 3 } }, `after${i}`) instanceof GatewayError), `place ${i}`);
      }),
    );
  });
});
