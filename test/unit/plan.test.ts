// D1–D3, L8, L9: the sizing arithmetic of `sluice plan` (src/deploy/plan.ts) and its warnings.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { exitAllowance, plan, sizingFromConfig, type ConfigSizing } from '../../src/deploy/plan.ts';
import { parseConfig } from '../../src/config/load.ts';

const base: ConfigSizing = {
  windowSecs: 30,
  maxDrainSecs: 0,
  group: false,
  etcd: false,
  redisLimits: false,
  ledger: false,
  memoryLimits: false,
  tracingFlushSecs: 0,
  statusPage: false,
  hotRestart: false,
  parentShutdownSecs: 900,
  proxy: { port: 8080, loopback: false, tls: false },
};
const codes = (p: ReturnType<typeof plan>) => p.warnings.map((w) => w.code).sort();

describe('D1/D2: grace and TimeoutStopSec', () => {
  const cases: Array<[string, Partial<ConfigSizing>, Parameters<typeof plan>[1], number, number]> = [
    // name, config, flags, terminationGracePeriodSeconds, TimeoutStopSec
    ['the issue example: preStop 5 + window 30 + longest 60 + exit 5 + margin 0', { etcd: true }, { longestSecs: 60, preStopSecs: 5, marginSecs: 0 }, 100, 95],
    ['defaults: longest 60 assumed, margin 5, nothing to flush', {}, {}, 95, 95],
    ['Redis usage commit in one process: 5 s', { redisLimits: true }, { longestSecs: 10, marginSecs: 0 }, 45, 45],
    ['etcd and Redis in one process run in parallel: 5 s', { etcd: true, redisLimits: true }, { longestSecs: 10, marginSecs: 0 }, 45, 45],
    ['etcd and Redis with workers: two steps, 10 s', { etcd: true, redisLimits: true, group: true }, { longestSecs: 10, marginSecs: 0 }, 50, 50],
    ['the usage ledger in one process: 5 s', { ledger: true }, { longestSecs: 10, marginSecs: 0 }, 45, 45],
    ['the ledger is the workers\' step, before the supervisor\'s snapshot', { ledger: true, etcd: true, group: true }, { longestSecs: 10, marginSecs: 0 }, 50, 50],
    ['a tracing flush longer than 5 s is the bound', { etcd: true, tracingFlushSecs: 8 }, { longestSecs: 10, marginSecs: 0 }, 48, 48],
    ['with workers, tracing is the workers\' step, the snapshot the supervisor\'s', { etcd: true, tracingFlushSecs: 2, group: true }, { longestSecs: 10, marginSecs: 0 }, 47, 47],
    ['the status page (1 s) in one process, in parallel', { statusPage: true }, { longestSecs: 10, marginSecs: 0 }, 41, 41],
    ['the status page is the supervisor\'s step, after the workers\' Redis commit', { statusPage: true, redisLimits: true, group: true }, { longestSecs: 10, marginSecs: 0 }, 46, 46],
    ['max_drain_secs bounds the drain: 60 + forced end 1', { maxDrainSecs: 60 }, { longestSecs: 300, marginSecs: 2, preStopSecs: 3 }, 66, 63],
    ['max_drain_secs longer than window + longest changes nothing', { maxDrainSecs: 600 }, { longestSecs: 100, marginSecs: 0 }, 130, 130],
    ['D3: window 0, nothing to flush: only the work in flight', { windowSecs: 0 }, { longestSecs: 12, marginSecs: 0, platforms: ['systemd'] }, 12, 12],
    ['fractions are rounded up, never down', { windowSecs: 1.5 }, { longestSecs: 0.2, marginSecs: 0 }, 2, 2],
  ];
  for (const [name, config, flags, grace, stop] of cases) {
    test(name, () => {
      const p = plan({ ...base, ...config }, flags);
      assert.equal(p.grace.secs, grace, p.grace.terms.map((t) => `${t.name} ${t.secs}`).join(' + '));
      assert.equal(p.stop.secs, stop);
      assert.equal(p.grace.secs - p.stop.secs, Math.ceil(flags?.preStopSecs ?? 0), 'preStop is the only difference');
    });
  }
});

describe('L9: the exit allowance and why', () => {
  test('says what it waits for', () => {
    assert.match(exitAllowance({ ...base }).why, /nothing to flush/);
    assert.equal(exitAllowance({ ...base }).secs, 0);
    assert.match(exitAllowance({ ...base, etcd: true }).why, /snapshot write ≤ 5 s/);
    assert.match(exitAllowance({ ...base, etcd: true, redisLimits: true, group: true }).why, /workers: usage commit to Redis ≤ 5 s, then supervisor: snapshot write ≤ 5 s/);
  });
});

describe('warnings: where the config and the platform disagree', () => {
  const cases: Array<[string, Partial<ConfigSizing>, Parameters<typeof plan>[1], string[]]> = [
    ['none for the defaults', {}, { longestSecs: 60 }, []],
    ['a window shorter than the balancer detection time', { windowSecs: 5 }, { healthCheckIntervalSecs: 2, healthCheckFailures: 3 }, ['window_below_detection']],
    ['a window exactly the detection time is enough', { windowSecs: 6 }, { healthCheckIntervalSecs: 2, healthCheckFailures: 3 }, []],
    ['D3 window 0 behind a balancer (Kubernetes)', { windowSecs: 0 }, {}, ['window_zero_behind_balancer']],
    ['D3 window 0 on systemd with nothing in front: fine', { windowSecs: 0 }, { platforms: ['systemd'] }, []],
    ['D3 window 0 on systemd behind a health-checking balancer', { windowSecs: 0 }, { platforms: ['systemd'], healthCheckIntervalSecs: 2 }, ['window_zero_behind_balancer']],
    ['max_drain_secs cuts the longest stream', { maxDrainSecs: 60 }, { longestSecs: 45 }, ['max_drain_cuts_longest']],
    ['max_drain_secs shorter than the window', { maxDrainSecs: 20 }, { longestSecs: 5 }, ['max_drain_below_window', 'max_drain_cuts_longest']],
    ['a platform grace shorter than needed', {}, { longestSecs: 60, graceSecs: 30 }, ['grace_too_short']],
    ['a platform grace exactly as needed', {}, { longestSecs: 60, graceSecs: 95 }, []],
    ['hot restart in Kubernetes', { hotRestart: true }, { platforms: ['kubernetes'] }, ['hot_restart_in_kubernetes']],
    ['hot restart whose parent_shutdown_secs cuts the longest stream', { hotRestart: true, parentShutdownSecs: 30 }, { platforms: ['systemd'], longestSecs: 60 }, ['parent_shutdown_cuts_longest']],
    ['a loopback proxy listener in a container', { proxy: { port: 8080, loopback: true, tls: false } }, { platforms: ['docker'] }, ['proxy_on_loopback']],
    ['a loopback proxy listener under systemd is fine', { proxy: { port: 8080, loopback: true, tls: false } }, { platforms: ['systemd'] }, []],
  ];
  for (const [name, config, flags, expected] of cases) {
    test(name, () => assert.deepEqual(codes(plan({ ...base, ...config }, flags)), expected.sort()));
  }
});

describe('sizingFromConfig', () => {
  test('reads the window, the drain bound, workers, etcd, Redis and the proxy listener', () => {
    const config = parseConfig(
      [
        'workers: 1',
        'listeners: [{ name: p, address: "127.0.0.1:8081", role: proxy }]',
        'shutdown: { min_drain_secs: 12, max_drain_secs: 300 }',
        'limits: { store: redis, redis: { url: "redis://127.0.0.1:6379" } }',
      ].join('\n'),
      'test.yaml',
      {},
    );
    const sizing = sizingFromConfig(config);
    assert.deepEqual(
      { ...sizing },
      { ...base, windowSecs: 12, maxDrainSecs: 300, group: false, redisLimits: true, proxy: { port: 8081, loopback: true, tls: false } },
    );
    const admin = parseConfig('listeners: [{ name: p, address: ":80", role: proxy }, { name: a, address: "127.0.0.1:9901", role: admin }]\ntracing: { enabled: true }', 't', {});
    assert.deepEqual([sizingFromConfig(admin).statusPage, sizingFromConfig(admin).tracingFlushSecs], [true, 2]);
    assert.equal(
      sizingFromConfig(parseConfig('listeners: [{ name: p, address: ":80", role: proxy }, { name: a, address: "127.0.0.1:9901", role: admin }]\nadmin: { status_page: false }', 't', {})).statusPage,
      false,
    );
    assert.equal(sizingFromConfig(parseConfig('listeners: [{ name: p, address: ":80", role: proxy }]', 't', {})).group, true, 'workers auto may be a group');
  });

  test('memory counters: noted when there is something to count, since only a hot restart carries them', () => {
    const sizing = (extra: string) => sizingFromConfig(parseConfig(`listeners: [{ name: p, address: ":80", role: proxy }]\n${extra}`, 't', {}));
    assert.equal(sizing('').memoryLimits, false, 'nothing to count');
    assert.equal(sizing('keys: [{ name: a, key: sk-0123456789abcdef }]').memoryLimits, false, 'a key without limits or budget');
    assert.equal(sizing('keys: [{ name: a, key: sk-0123456789abcdef, budget: { usd: 5, period: day } }]').memoryLimits, true);
    assert.equal(sizing('limits: { global: { rpm: 100 } }').memoryLimits, true);
    assert.equal(sizing('limits: { models: { m: { tpm: 1000 } } }').memoryLimits, true);
    assert.equal(sizing('limits: { store: redis, redis: { url: "redis://127.0.0.1:6379" }, global: { rpm: 100 } }').memoryLimits, false, 'Redis keeps them');
    const noted = plan({ ...base, memoryLimits: true }).notes.filter((n) => n.startsWith('limits.store memory'));
    assert.equal(noted.length, 1);
    assert.match(noted[0]!, /hot restart carries them/);
    assert.match(noted[0]!, /rolling update/);
    assert.deepEqual(plan(base).notes.filter((n) => n.startsWith('limits.store memory')), []);
  });
});
