// DrainSettings for unit tests: every field filled as src/app.ts drainSettings() fills it from the
// config schema's defaults, with a test's own values on top.
import type { DrainSettings } from '../../src/lifecycle/contracts.ts';

export function drainSettings(settings: Partial<DrainSettings> = {}): DrainSettings {
  const minDrainSecs = settings.minDrainSecs ?? 30;
  return {
    minDrainSecs,
    maxDrainSecs: 0,
    progressLogSecs: 5,
    freshConnectionGraceSecs: 10,
    freshTimeoutSecs: 0,
    idleTimeoutSecs: 0,
    drainStrategy: 'immediate',
    resetUpgradedOnProactiveDrain: false,
    // The config's default drain time is the window.
    drainTimeSecs: minDrainSecs,
    connectionDrainTimeoutSecs: 5,
    ...settings,
  };
}
