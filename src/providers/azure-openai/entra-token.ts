// Microsoft Entra ID access tokens for Azure OpenAI (`auth: entra_id`), of the gateway's own
// identity, by Microsoft's identity library. The credentials a server runs with are tried in
// order, as DefaultAzureCredential tries them, without its developer tools (Azure CLI,
// PowerShell, VS Code, azd, the broker): a gateway never signs in as a person.
//   1. A service principal from the environment: AZURE_TENANT_ID and AZURE_CLIENT_ID with
//      AZURE_CLIENT_SECRET (or AZURE_CLIENT_CERTIFICATE_PATH).
//   2. Workload identity: AZURE_FEDERATED_TOKEN_FILE with AZURE_TENANT_ID, AZURE_CLIENT_ID and
//      AZURE_AUTHORITY_HOST, as AKS sets them.
//   3. The managed identity (Azure VMs, App Service, Container Apps); user-assigned when
//      AZURE_CLIENT_ID names it.
// No secret is in the config. The library is loaded when the first provider with
// `auth: entra_id` is built, never by a gateway that has none.
import { createRequire } from 'node:module';
import type { TokenCredential } from '@azure/identity';
import type { Clock } from '../../lifecycle/clock.ts';
import { RefreshingCredential, type CredentialEvents } from '../refreshing-credential.ts';

const require = createRequire(import.meta.url);

type Identity = typeof import('@azure/identity');

/** Azure OpenAI's (Cognitive Services') scope. */
export const AZURE_OPENAI_SCOPE = 'https://cognitiveservices.azure.com/.default';
/** A fetch that has not answered by then fails: a token endpoint that hangs must not hold every request. */
const FETCH_TIMEOUT_MS = 30_000;
/** The environment variables whose values are secrets: never in a failure's reason. */
const SECRET_VARIABLES = ['AZURE_CLIENT_SECRET', 'AZURE_CLIENT_CERTIFICATE_PASSWORD', 'AZURE_PASSWORD'];

/**
 * The Entra ID access token of the gateway's identity for Azure OpenAI, shared by the provider's
 * requests and refreshed ahead of its expiry; a failure is reported once through `events`.
 */
export function entraAccessToken(provider: string, events: CredentialEvents, clock: Clock): RefreshingCredential<string> {
  const credential = serverCredential(require('@azure/identity') as Identity);
  return new RefreshingCredential({
    provider,
    source: 'Microsoft Entra ID token',
    fetch: async () => {
      try {
        const token = await within(credential.getToken(AZURE_OPENAI_SCOPE), FETCH_TIMEOUT_MS, clock);
        if (token === null || token.token === '') throw new Error('the credentials gave no access token');
        return { value: token.token, expiresAt: token.expiresOnTimestamp };
      } catch (error) {
        throw withoutSecrets(error);
      }
    },
    events,
    clock,
  });
}

/** The chain of the credentials a server runs with (see the header). */
function serverCredential(identity: Identity): TokenCredential {
  // Instance discovery asks login.microsoftonline.com to vouch for the authority host. Microsoft's
  // clouds' hosts are known to the library without asking, and any other (a private cloud, Azure
  // Stack) is the operator's own AZURE_AUTHORITY_HOST, which that service cannot vouch for.
  const options = { disableInstanceDiscovery: true };
  const clientId = process.env.AZURE_CLIENT_ID || undefined;
  return new identity.ChainedTokenCredential(
    new identity.EnvironmentCredential(options),
    unavailableWhenRefused(() => new identity.WorkloadIdentityCredential(options)),
    new identity.ManagedIdentityCredential(clientId === undefined ? {} : { clientId }),
  );
}

/**
 * A credential whose constructor refuses an environment without its variables (throwing
 * CredentialUnavailableError): the chain then goes on to the next, as DefaultAzureCredential does.
 */
function unavailableWhenRefused(make: () => TokenCredential): TokenCredential {
  try {
    return make();
  } catch (error) {
    return { getToken: () => Promise.reject(error) };
  }
}

/** `promise`, or a rejection once `ms` have passed. */
function within<T>(promise: Promise<T>, ms: number, clock: Clock): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = clock.after(ms, () => reject(new Error(`no answer within ${ms / 1000} s`)));
    promise.then(
      (value) => {
        timer.cancel();
        resolve(value);
      },
      (error: unknown) => {
        timer.cancel();
        reject(error);
      },
    );
  });
}

/**
 * The failure as it is reported, with any secret of the environment cut out of its message. The
 * library's messages quote Entra ID's, which name codes and ids, not secrets: this is a guard.
 */
function withoutSecrets(error: unknown): Error {
  const failure = error instanceof Error ? error : new Error(String(error));
  let message = failure.message;
  for (const name of SECRET_VARIABLES) {
    const secret = process.env[name];
    if (secret !== undefined && secret.length >= 4) message = message.replaceAll(secret, '[redacted]');
  }
  if (message === failure.message) return failure;
  const redacted = new Error(message);
  redacted.name = failure.name;
  return redacted;
}
