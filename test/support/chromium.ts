// Headless Chromium (Debian's `chromium`, driven by playwright-core) for the tests that need a real
// browser: the status page, and web pages that try to drive the admin API. A fresh profile each
// time, removed at close; the machine may have no network, so Chromium's own background
// connections are switched off.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import { requireTool, type ToolCheck } from './system-tool.ts';

export const CHROMIUM_PATH = '/usr/bin/chromium';

/** Whether Chromium is installed: `{ skip: false }` or the reason to skip (a failure under SLUICE_REQUIRE_SYSTEM_TOOLS=1). */
export function chromiumCheck(): ToolCheck {
  return requireTool('chromium', 'chromium');
}

export interface Chromium {
  readonly context: BrowserContext;
  close(): Promise<void>;
}

/** Launches it with the flags this machine needs, and `args` (e.g. `--host-resolver-rules=…`). */
export async function launchChromium(options: { args?: string[]; viewport?: { width: number; height: number } } = {}): Promise<Chromium> {
  const profile = mkdtempSync(join(tmpdir(), 'sluice-chromium-'));
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM_PATH,
      headless: true,
      viewport: options.viewport ?? { width: 1100, height: 860 },
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', ...(options.args ?? [])],
    });
  } catch (error) {
    rmSync(profile, { recursive: true, force: true });
    throw error;
  }
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
