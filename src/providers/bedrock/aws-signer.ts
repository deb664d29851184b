// Bedrock requests signed with AWS Signature Version 4 by AWS's own signer, with credentials from
// the AWS default chain (the environment, the shared config and credentials files and their
// profiles, a web identity token file as on EKS, the container credentials endpoint as on ECS and
// EKS Pod Identity, the instance metadata service). AWS's libraries are loaded when the first
// Bedrock provider is built, never by a gateway that has none.
import { createRequire } from 'node:module';
import { createHash, createHmac, createSecretKey, type Hash, type Hmac, type KeyObject } from 'node:crypto';
import type { AwsCredentialIdentity } from '@smithy/types';
import type { SignatureV4 } from '@smithy/signature-v4';
import type { Clock } from '../../lifecycle/clock.ts';
import { RefreshingCredential, type CredentialEvents } from '../refreshing-credential.ts';

const require = createRequire(import.meta.url);

export interface AwsSignerOptions {
  readonly provider: string;
  readonly region: string;
  /** A profile of the shared files; default: the chain's (AWS_PROFILE, else `default`). */
  readonly profile: string | undefined;
  /** host[:port] as the request will carry it. */
  readonly host: string;
  readonly events: CredentialEvents;
  readonly clock: Clock;
}

/** Signs Bedrock requests; one per provider, its credentials shared and refreshed ahead of expiry. */
export class AwsSigner {
  readonly #signer: SignatureV4;
  readonly #host: string;
  readonly #credentials: RefreshingCredential<AwsCredentialIdentity>;

  constructor(options: AwsSignerOptions) {
    const { defaultProvider } = require('@aws-sdk/credential-provider-node') as typeof import('@aws-sdk/credential-provider-node');
    const { SignatureV4: Signer } = require('@smithy/signature-v4') as typeof import('@smithy/signature-v4');
    // A credential endpoint that does not answer fails a fetch within about 2 s (the SDK's HTTP
    // source would otherwise try four times, a second apart): the requests waiting get their 503.
    const chain = defaultProvider({ ...(options.profile === undefined ? {} : { profile: options.profile }), timeout: 1000, maxRetries: 1 });
    this.#credentials = new RefreshingCredential({
      provider: options.provider,
      source: 'AWS credentials',
      // The chain keeps its own copy; ours decides when to refresh, so it is asked for a new one.
      fetch: async () => {
        const identity = await chain({ forceRefresh: true });
        return { value: identity, expiresAt: identity.expiration?.getTime() ?? Infinity };
      },
      events: options.events,
      clock: options.clock,
    });
    this.#host = options.host;
    this.#signer = new Signer({
      credentials: () => this.#credentials.get(),
      region: options.region,
      service: 'bedrock',
      sha256: Sha256,
    });
  }

  /**
   * `headers` with those that sign a POST of `body` to `path` (its query included): host,
   * x-amz-date, x-amz-security-token with temporary credentials, authorization.
   */
  async sign(path: string, body: Buffer, headers: Record<string, string>): Promise<Record<string, string>> {
    const [pathname, query] = splitQuery(path);
    const signed: { headers: Record<string, string> } = await this.#signer.sign({
      method: 'POST',
      protocol: 'https:',
      hostname: this.#host,
      path: pathname,
      query,
      headers: { ...headers, host: this.#host },
      body,
    } as Parameters<SignatureV4['presign']>[0]);
    return signed.headers;
  }
}

function splitQuery(path: string): [string, Record<string, string>] {
  const at = path.indexOf('?');
  if (at === -1) return [path, {}];
  return [path.slice(0, at), Object.fromEntries(new URLSearchParams(path.slice(at + 1)))];
}

/** HMAC keys as KeyObjects, by their bytes: Node makes a key of a Buffer on every createHmac, at about six times the cost of the HMAC. */
const hmacKeys = new Map<string, KeyObject>();
/** The keys a signer uses are few (a secret, a signing key a day); more means something churns: start again. */
const MAX_HMAC_KEYS = 64;

function hmacKey(secret: string | ArrayBuffer | ArrayBufferView): KeyObject {
  const bytes = typeof secret === 'string' ? Buffer.from(secret) : ArrayBuffer.isView(secret) ? Buffer.from(secret.buffer, secret.byteOffset, secret.byteLength) : Buffer.from(secret);
  const id = bytes.toString('base64');
  let key = hmacKeys.get(id);
  if (key === undefined) {
    if (hmacKeys.size >= MAX_HMAC_KEYS) hmacKeys.clear();
    key = createSecretKey(bytes);
    hmacKeys.set(id, key);
  }
  return key;
}

/** SHA-256 and HMAC-SHA-256 for the signer (its `sha256` option), by node:crypto with the HMAC keys kept. */
class Sha256 {
  readonly #secret: string | ArrayBuffer | ArrayBufferView | undefined;
  #hash: Hash | Hmac;

  constructor(secret?: string | ArrayBuffer | ArrayBufferView) {
    this.#secret = secret;
    this.#hash = this.#fresh();
  }

  update(data: string | ArrayBuffer | ArrayBufferView): void {
    this.#hash.update(typeof data === 'string' ? data : ArrayBuffer.isView(data) ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : new Uint8Array(data));
  }

  digest(): Promise<Uint8Array> {
    return Promise.resolve(this.#hash.digest());
  }

  reset(): void {
    this.#hash = this.#fresh();
  }

  #fresh(): Hash | Hmac {
    return this.#secret === undefined ? createHash('sha256') : createHmac('sha256', hmacKey(this.#secret));
  }
}
