// Tests that need a system program (HAProxy, etcd, Redis) skip with the package name when it is
// missing, except where SLUICE_REQUIRE_SYSTEM_TOOLS=1 (set by .ci/run): there a missing program is
// a failure, so CI can never pass such a test silently.
import { spawnSync } from 'node:child_process';

export interface ToolCheck {
  /** The reason to skip, or false when the tool is there. */
  skip: string | false;
}

export function requireTool(command: string, debianPackage: string): ToolCheck {
  const found = spawnSync('sh', ['-c', `command -v ${command}`], { encoding: 'utf8' }).status === 0;
  if (found) return { skip: false };
  const reason = `${command} not found: install the Debian package "${debianPackage}" (apt-get install -y ${debianPackage})`;
  if (process.env.SLUICE_REQUIRE_SYSTEM_TOOLS === '1') throw new Error(`required system tool missing: ${reason}`);
  return { skip: reason };
}
