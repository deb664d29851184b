// Test PKI made with the openssl command: a CA, server certificates for 127.0.0.1/localhost
// (two, to observe a reload), a client certificate from the same CA and one from a stranger CA.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TestPki {
  dir: string;
  caCert: string;
  caPem: Buffer;
  server: { cert: string; key: string };
  server2: { cert: string; key: string };
  client: { cert: Buffer; key: Buffer };
  strangerClient: { cert: Buffer; key: Buffer };
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
}

function ca(dir: string, name: string): void {
  openssl(dir, ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`]);
}

function leaf(dir: string, name: string, issuer: string, extensions: string): void {
  openssl(dir, ['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`]);
  writeFileSync(join(dir, `${name}.ext`), extensions);
  openssl(dir, ['x509', '-req', '-in', `${name}.csr`, '-CA', `${issuer}.crt`, '-CAkey', `${issuer}.key`, '-CAcreateserial', '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`]);
}

export function makePki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-pki-'));
  ca(dir, 'test-ca');
  ca(dir, 'stranger-ca');
  const serverExt = 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n';
  leaf(dir, 'server', 'test-ca', serverExt);
  leaf(dir, 'server2', 'test-ca', serverExt);
  leaf(dir, 'client', 'test-ca', 'extendedKeyUsage=clientAuth\n');
  leaf(dir, 'stranger', 'stranger-ca', 'extendedKeyUsage=clientAuth\n');
  const file = (name: string) => join(dir, name);
  return {
    dir,
    caCert: file('test-ca.crt'),
    caPem: readFileSync(file('test-ca.crt')),
    server: { cert: file('server.crt'), key: file('server.key') },
    server2: { cert: file('server2.crt'), key: file('server2.key') },
    client: { cert: readFileSync(file('client.crt')), key: readFileSync(file('client.key')) },
    strangerClient: { cert: readFileSync(file('stranger.crt')), key: readFileSync(file('stranger.key')) },
  };
}
