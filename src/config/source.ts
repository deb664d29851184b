// Where the configuration comes from, behind one interface: `load()` (validated, or a ConfigError)
// and `watch()` (told when it may have changed). One reload procedure serves every trigger (cli.ts):
// SIGHUP, a change of the file, a change in etcd (`etcd-source.ts`), and through it the admin API.
import { createHash } from 'node:crypto';
import { readFileSync, unwatchFile, watch, watchFile, type FSWatcher } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import type { Config } from './schema.ts';
import { loadConfigFile, loadDefaultConfig } from './load.ts';

export interface ConfigSource {
  /** What it is, for logs: the file, or "embedded default". */
  readonly name: string;
  /**
   * The configuration as it is now, validated. Throws a ConfigError. `trigger` (as `watch` gave
   * it, or "SIGHUP") lets a source skip what cannot have changed.
   */
  load(trigger?: string): Config;
  /** Calls `changed` (debounced) with what changed ("file change", "etcd") when the configuration may have changed; returns the way to stop. */
  watch(changed: (trigger: string) => void): () => void;
}

/** How long a burst of file events (an editor's write, rename, chmod) is let settle. */
const DEBOUNCE_MS = 150;

/** The embedded default: nothing to watch. */
export function embeddedSource(): ConfigSource {
  return { name: 'embedded default', load: () => loadDefaultConfig(), watch: () => () => {} };
}

/**
 * A YAML file. It is watched through its directory, not its inode: editors that save by writing a
 * new file and renaming it over the old one, and Kubernetes' ConfigMap volumes (a symlink swapped
 * in the directory), replace the inode a watch on the file would follow. Any event in the
 * directory is followed, after `DEBOUNCE_MS` of quiet, by reading the file and comparing its bytes
 * with those last loaded: only a real change is reported. Where the directory cannot be watched
 * (no inotify left), the file is polled every second instead.
 */
export function fileSource(file: string): ConfigSource {
  const path = resolve(file);
  let loaded: string | undefined;
  const digest = (): string | undefined => {
    try {
      return createHash('sha256').update(readFileSync(path)).digest('hex');
    } catch {
      return undefined;
    }
  };
  return {
    name: file,
    load() {
      // The bytes validated are the ones compared later (read before, so a change during the load is seen again).
      const before = digest();
      const config = loadConfigFile(file);
      loaded = before;
      return config;
    },
    watch(changed) {
      let timer: NodeJS.Timeout | undefined;
      const settle = () => {
        if (timer) clearTimeout(timer);
        timer = setTimeout(() => {
          timer = undefined;
          const now = digest();
          if (now !== undefined && now !== loaded) changed('file change');
        }, DEBOUNCE_MS);
        timer.unref();
      };
      let watcher: FSWatcher | undefined;
      try {
        watcher = watch(dirname(path), { persistent: false }, (_event, name) => {
          // Another file of the directory changing needs no read, unless it may be what the file points at.
          if (name === null || name === basename(path) || name.startsWith('..')) settle();
        });
        watcher.on('error', () => {});
      } catch {
        watchFile(path, { interval: 1000, persistent: false }, settle);
      }
      return () => {
        if (timer) clearTimeout(timer);
        if (watcher) watcher.close();
        else unwatchFile(path, settle);
      };
    },
  };
}
