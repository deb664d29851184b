// `sluice validate`, once the config has loaded: the summary line on stdout, and on stderr what the
// gateway would warn about at start with this config. A warning never fails validation (exit 0):
// a proxy open on purpose (a private network, a gateway behind an authenticating proxy) is valid.
import { requiresClientKey, workerCount, type Config } from '../config/schema.ts';
import { redactUrl } from '../config/redact-url.ts';
import { NO_CLIENT_KEYS, openProxyListeners, openProxyMessage } from '../auth/open-proxy.ts';
import { printable } from './terminal-text.ts';
import { machineShape } from '../cluster/machine.ts';

export interface ValidateOutput {
  out(text: string): void;
  err(text: string): void;
}

const PROCESS_OUTPUT: ValidateOutput = { out: (text) => process.stdout.write(text), err: (text) => process.stderr.write(text) };

/** Prints what `validate` says of a valid `config` (read from `source`); returns the exit code, 0. */
export function reportValid(config: Config, source: string, io: ValidateOutput = PROCESS_OUTPUT): number {
  const resources = config.etcd
    ? `providers, models and keys in etcd (${config.etcd.endpoints.map(redactUrl).join(', ')}, prefix ${config.etcd.prefix})`
    : `${config.providers.length} providers, ${config.models.length} models, ${config.keys.length} keys${config.teams.length > 0 ? `, ${config.teams.length} teams` : ''}`;
  io.out(printable(`config OK (${source}): ${config.listeners.length} listeners, ${resources}, ${workers(config)} workers`) + '\n');
  for (const warning of warnings(config)) io.err(`${printable(`warning: ${warning}`)}\n`);
  return 0;
}

/** The gateway's start-time warnings about client keys, for this config. */
function warnings(config: Config): string[] {
  const found: string[] = [];
  // The gateway warns `proxy_open` when it starts with these open; in etcd mode (auth.require_key
  // turned off) that depends on whether etcd holds a key then, which validate cannot know.
  const open = openProxyListeners(config).map((listener) => `${openProxyMessage(listener)} [proxy_open]${config.etcd ? ' (while etcd holds no client key)' : ''}`);
  found.push(...open);
  // A config file that requires a key and lists none serves nothing: the gateway's `ready` line says so.
  if (!config.etcd && requiresClientKey(config) && config.keys.length === 0) found.push(`${NO_CLIENT_KEYS}, and readiness fails (client_keys) until one is added`);
  return found;
}

/** How many worker processes `config` starts on this machine. */
function workers(config: Config): number {
  const { cpus, memory } = machineShape();
  return workerCount(config, cpus, memory);
}
