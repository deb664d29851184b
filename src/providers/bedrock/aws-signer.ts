// Bedrock requests signed with AWS Signature Version 4 by AWS's own signer, with credentials from
// the AWS default chain (the environment, the shared config and credentials files and their
// profiles, a web identity token file as on EKS, the container credentials endpoint as on ECS and
// EKS Pod Identity, the instance metadata service). AWS's libraries are loaded when the first
// Bedrock provider is built, never by a gateway that has none.
import { createRequire } from 'node:module';
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
    const { Hash } = require('@smithy/core/serde') as typeof import('@smithy/core/serde');
    const chain = defaultProvider(options.profile === undefined ? {} : { profile: options.profile });
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
      sha256: Hash.bind(null, 'sha256'),
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
