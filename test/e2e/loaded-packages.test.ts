// A feature a config does not use costs nothing, memory included (issue #25): the etcd client
// (gRPC and protobuf with it), the Redis client, the OpenTelemetry SDK and the clouds' signing
// and credential libraries (AWS's, Google's, Microsoft's) are loaded only by a config that uses them. Each is a large part of a process's idle RSS (the etcd client alone about
// 20 MB). The packages a process loads are read through a module hook (loaded-packages-preload.mjs).
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { startGateway, type GatewayProcess } from '../support/gateway-process.ts';
import { redisCheck, startRedis } from '../support/redis.ts';

const PRELOAD = ['--import', pathToFileURL(join(import.meta.dirname, '..', 'support', 'loaded-packages-preload.mjs')).href];
const AWS = ['@aws-sdk/credential-provider-node', '@smithy/signature-v4'];
const GOOGLE = ['google-auth-library'];
const AZURE = ['@azure/identity', '@azure/msal-node'];
const OPTIONAL = ['etcd3', '@grpc/grpc-js', 'protobufjs', 'ioredis', '@opentelemetry/sdk-trace-base', '@opentelemetry/exporter-trace-otlp-http', ...AWS, ...GOOGLE, ...AZURE];

const started: GatewayProcess[] = [];
after(async () => {
  for (const gw of started) await gw.stop();
});

const loaded = (gw: GatewayProcess): string[] => [...gw.stderr().matchAll(/^loaded-package (\S+)$/gm)].map((m) => m[1]!);

describe('packages loaded at start', () => {
  test('the embedded default (one process) loads none of the optional clients', async () => {
    const gw = await startGateway({ useDefault: true, nodeArgs: PRELOAD, env: { SLUICE_WORKERS: '1' } });
    started.push(gw);
    const packages = loaded(gw);
    assert.ok(packages.includes('undici'), `the hook sees the packages loaded: ${packages.join(', ')}`);
    assert.deepEqual(OPTIONAL.filter((name) => packages.includes(name)), []);
  });

  test('control: a config with limits in Redis loads the Redis client, and only it of those', { skip: redisCheck().skip }, async (t) => {
    const redis = await startRedis();
    t.after(() => redis.close());
    const gw = await startGateway({
      nodeArgs: PRELOAD,
      config: { workers: 1, providers: [{ name: 'echo', type: 'echo' }], models: [{ name: 'm', provider: 'echo' }], limits: { store: 'redis', redis: { url: redis.url } } },
    });
    started.push(gw);
    assert.deepEqual(OPTIONAL.filter((name) => loaded(gw).includes(name)), ['ioredis']);
  });

  test("control: a config with a bedrock and a vertex provider loads AWS's and Google's libraries, and not Microsoft's", async () => {
    const gw = await startGateway({
      nodeArgs: PRELOAD,
      config: {
        workers: 1,
        providers: [
          { name: 'aws', type: 'bedrock', region: 'us-east-1' },
          { name: 'gcp', type: 'vertex', project: 'my-project' },
        ],
        models: [{ name: 'm', provider: 'aws' }],
      },
    });
    started.push(gw);
    assert.deepEqual(OPTIONAL.filter((name) => loaded(gw).includes(name)), [...AWS, ...GOOGLE]);
  });
});
