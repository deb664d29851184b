// etcd mode's sections: `etcd` (where the resources live, how it is reached, the variables a
// resource may read) and `snapshot` (the file that keeps the resources last applied, L9).
import { z } from 'zod';
import { positiveMilliseconds } from './value-schemas.ts';

/**
 * An etcd client URL: a scheme, a host and a port. etcd's gRPC client reads nothing else of it: a
 * `user:password@` made every connection fail with the password quoted in the error (and so in the
 * logs, /server_info and the status page); credentials have their own keys.
 */
const etcdEndpoint = z
  .url({ protocol: /^https?$/, error: 'expected an etcd client URL such as http://127.0.0.1:2379' })
  .refine((text) => !/^[^:]+:\/\/[^/?#]*@|[?#]/.test(text), {
    error: 'expected only a scheme, a host and a port (http://127.0.0.1:2379): etcd\'s client reads no user, password or query from an endpoint; write them in etcd.username and etcd.password',
  });

export const etcdSchema = z.strictObject({
  /** etcd v3 client URLs (http:// or https://): scheme, host and port. */
  endpoints: z.array(etcdEndpoint).min(1, 'expected at least one etcd endpoint'),
  /** Every resource lives under this key prefix, one key per resource: <prefix>providers/<name>. */
  prefix: z.string().min(1).regex(/\/$/, 'expected a prefix ending in "/" (for example /sluice/)').default('/sluice/'),
  username: z.string().min(1).optional(),
  password: z.string().optional(),
  tls: z
    .strictObject({
      ca_file: z.string().min(1),
      cert_file: z.string().min(1).optional(),
      key_file: z.string().min(1).optional(),
    })
    .optional(),
  /** A request to etcd (a read, a write of the admin API) not answered by then fails. */
  request_timeout_ms: positiveMilliseconds.default(5000),
  /** Connecting to an endpoint is given this long. */
  dial_timeout_ms: positiveMilliseconds.default(3000),
  /**
   * The environment variables a resource may read with `${VAR}`, and only in a provider's
   * `api_key` and header values and a target's header values (resource-variables.ts). Default
   * none: whoever can write a resource (an admin token, etcd access) must not read this host's
   * environment through it.
   */
  allowed_env: z.array(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'expected the name of an environment variable')).default([]),
});

export const snapshotSchema = z.strictObject({
  /**
   * L9: the resources last applied are kept in this file (temp file, fsync, rename), so that the
   * gateway starts and serves while etcd is down. Default: beside the config file, named after it.
   */
  path: z.string().min(1).optional(),
});
