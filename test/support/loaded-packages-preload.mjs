// Loaded with `node --import`: prints `loaded-package <name>` on stderr the first time a module of
// a package under node_modules is loaded (test/e2e/loaded-packages.test.ts).
import { registerHooks } from 'node:module';

const seen = new Set();
registerHooks({
  load(url, context, next) {
    const match = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
    if (match && !seen.has(match[1])) {
      seen.add(match[1]);
      process.stderr.write(`loaded-package ${match[1]}\n`);
    }
    return next(url, context);
  },
});
