#!/usr/bin/env node
// The entry of `sluice` (and of every worker process): checks the Node.js version before anything
// else is loaded, then loads the command. Static imports are all evaluated before a module's first
// line runs, so on an older Node.js a check in the command itself could come too late (or never:
// an import could fail, or worker processes wait for ever). Keep this file free of imports.
const NEEDED_MAJOR = 24;

const running = process.versions.node;
if (Number(running.split('.')[0]) < NEEDED_MAJOR) {
  process.stderr.write(`Sluice needs Node.js ${NEEDED_MAJOR} or later ("engines" in package.json); this is ${running}\n`);
  process.exit(1);
}

await import('./cli.ts');
