// TLS material for a listener: loaded from PEM files, checked before use, and swapped for new
// handshakes when the files change or on SIGHUP (existing connections keep theirs).
import { readFileSync, watchFile, unwatchFile } from 'node:fs';
import { createSecureContext, type SecureContextOptions } from 'node:tls';
import type { TlsConfig } from '../config/schema.ts';

export interface TlsMaterial {
  options: SecureContextOptions;
}

/** Reads and checks the files; throws with a clear message when they do not make a usable context. */
export function loadTlsMaterial(config: TlsConfig): TlsMaterial {
  const read = (file: string, what: string) => {
    try {
      return readFileSync(file);
    } catch (error) {
      throw Object.assign(new Error(`cannot read TLS ${what} ${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`), { code: 'SLUICE_ERR_TLS' });
    }
  };
  const options: SecureContextOptions = { cert: read(config.cert_file, 'certificate'), key: read(config.key_file, 'key') };
  if (config.client_ca_file) options.ca = read(config.client_ca_file, 'client CA');
  try {
    // Throws on a malformed PEM or a key that does not match the certificate.
    createSecureContext(options);
  } catch (error) {
    throw Object.assign(new Error(`TLS certificate ${config.cert_file} / key ${config.key_file} rejected: ${(error as Error).message}`), { code: 'SLUICE_ERR_TLS' });
  }
  return { options };
}

/** Calls `onChange` when any of the files changes (polling, which also sees Kubernetes' symlink swaps). */
export function watchTlsFiles(config: TlsConfig, onChange: () => void): () => void {
  const files = [config.cert_file, config.key_file, ...(config.client_ca_file ? [config.client_ca_file] : [])];
  const listener = (current: { mtimeMs: number }, previous: { mtimeMs: number }) => {
    if (current.mtimeMs !== previous.mtimeMs) onChange();
  };
  for (const file of files) watchFile(file, { interval: 1000, persistent: false }, listener);
  return () => {
    for (const file of files) unwatchFile(file, listener);
  };
}
