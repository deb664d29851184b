// Google Cloud access tokens for Vertex AI from application default credentials, by Google's own
// auth library: the key file GOOGLE_APPLICATION_CREDENTIALS names (a service account, or an
// external account: workload identity federation), else the metadata server (GKE workload
// identity, Compute Engine, Cloud Run). The library is loaded when the first Vertex provider is
// built, never by a gateway that has none.
import { createRequire } from 'node:module';
import type { Clock } from '../../lifecycle/clock.ts';
import { RefreshingCredential, type CredentialEvents } from '../refreshing-credential.ts';

const require = createRequire(import.meta.url);

const SCOPE = 'https://www.googleapis.com/auth/cloud-platform';
/** The library refreshes a token this long before it expires: never later than ours asks. */
const LIBRARY_REFRESH_AHEAD_MS = 5 * 60_000;
/** When the library does not say a token's expiry: Google's tokens last an hour. */
const DEFAULT_LIFETIME_MS = 55 * 60_000;

/** `project`: the provider's, given to the library so that it never looks for one (gcloud, the metadata server). */
export function googleAccessToken(provider: string, project: string, events: CredentialEvents, clock: Clock): RefreshingCredential<string> {
  const { GoogleAuth } = require('google-auth-library') as typeof import('google-auth-library');
  const auth = new GoogleAuth({ scopes: [SCOPE], projectId: project, clientOptions: { eagerRefreshThresholdMillis: LIBRARY_REFRESH_AHEAD_MS } });
  return new RefreshingCredential({
    provider,
    source: 'Google access token',
    fetch: async () => {
      const client = await auth.getClient();
      const { token } = await client.getAccessToken();
      if (typeof token !== 'string' || token === '') throw new Error('the credentials gave no access token');
      const expiry = client.credentials?.expiry_date;
      return { value: token, expiresAt: typeof expiry === 'number' ? expiry : Date.now() + DEFAULT_LIFETIME_MS };
    },
    events,
    clock,
  });
}
