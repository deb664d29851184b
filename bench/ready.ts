// How the bench learns that a server it spawned is ready: the first JSON line on its stdout from
// which `urlFrom` reads a URL. Its stdout is drained after that (the access log must not block it).
import type { ChildProcess } from 'node:child_process';

export function readyUrl(name: string, child: ChildProcess, urlFrom: (line: Record<string, unknown>) => string | undefined, stderr: () => string = () => ''): Promise<string> {
  return new Promise((done, fail) => {
    let pending = '';
    const timer = setTimeout(() => fail(new Error(`${name} did not start within 15 s\n${stderr()}`)), 15_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      fail(new Error(`${name} exited (code ${code}) before it was ready\n${stderr()}`));
    });
    const onData = (chunk: Buffer): void => {
      pending += chunk.toString();
      for (let nl = pending.indexOf('\n'); nl !== -1; nl = pending.indexOf('\n')) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        let url: string | undefined;
        try {
          url = urlFrom(JSON.parse(line) as Record<string, unknown>);
        } catch {
          continue; // not JSON
        }
        if (url === undefined) continue;
        clearTimeout(timer);
        child.stdout!.off('data', onData).on('data', () => {}); // from now on: drain (the access log)
        done(url);
        return;
      }
    };
    child.stdout!.on('data', onData);
  });
}
