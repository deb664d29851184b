// Hostile web pages in headless Chromium, for the tests of what a page of another origin (or one
// reached through DNS rebinding) can make the gateway do: the browser, the server of the pages,
// and the page's own tries (fetch, image loads, form posts), each recording its outcome in
// `results`, which the page hands back as `window.attackDone`.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { launchChromium, type Chromium } from './chromium.ts';

export type PageResult = { type?: string; status?: number; body?: string | null; error?: string; opened?: boolean; messages?: string[]; closed?: number | null };
export type PageResults = Record<string, PageResult | string>;

export interface HostilePages {
  /** Where the pages of another origin are served: `http://<pageHost>:<port>`. */
  readonly origin: string;
  /** The browser, for pages of the gateway's own (the status page). */
  readonly chromium: Chromium;
  /**
   * Opens `url` with `html` as its document and waits for its tries to finish. A URL of `origin`
   * is served by the pages' server; any other (a rebinding name on the gateway's own port) gets
   * `html` as the attacker's answer from before the name pointed at the gateway.
   */
  visit(url: string, html: string, timeoutMs?: number): Promise<PageResults>;
  close(): Promise<void>;
}

/** Chromium with every name of `resolve` mapped to 127.0.0.1, and a server of pages at `http://<pageHost>:<port>`. */
export async function openHostilePages(options: { pageHost: string; resolve: string[] }): Promise<HostilePages> {
  const chromium: Chromium = await launchChromium({
    args: [
      ...(options.resolve.length > 0 ? [`--host-resolver-rules=${options.resolve.map((name) => `MAP ${name} 127.0.0.1`).join(', ')}`] : []),
      // Chromium's own Local Network Access checks may hold back a request to loopback; other
      // browsers have none: the gateway must stand alone.
      '--disable-features=LocalNetworkAccessChecks,PrivateNetworkAccessRespectPreflightResults,BlockInsecurePrivateNetworkRequests',
    ],
  });
  let served = '';
  const pages: Server = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(served));
  await new Promise<void>((resolve) => pages.listen(0, '127.0.0.1', resolve));
  const origin = `http://${options.pageHost}:${(pages.address() as AddressInfo).port}`;
  return {
    origin,
    chromium,
    async visit(url, html, timeoutMs = 60_000) {
      const page = await chromium.context.newPage();
      try {
        if (url.startsWith(origin)) served = html;
        else await page.route(url, (route) => route.fulfill({ status: 200, contentType: 'text/html; charset=utf-8', body: html }));
        await page.goto(url);
        await page.waitForFunction(() => (window as unknown as { attackDone?: unknown }).attackDone !== undefined, undefined, { timeout: timeoutMs });
        return (await page.evaluate(() => (window as unknown as { attackDone: unknown }).attackDone)) as PageResults;
      } finally {
        await page.close();
      }
    },
    async close() {
      await chromium.close();
      await new Promise((resolve) => pages.close(resolve));
    },
  };
}

/**
 * The page's tries against `target` (an origin, or '' for the page's own): `fetchTry(name, path,
 * init)`, `imageTry(name, path)` and `formTry(name, path, enctype, fields)` (a form posted into an
 * iframe of its own), each recording in `results[name]`.
 */
export function pageTries(target: string): string {
  return `
const target = ${JSON.stringify(target)};
const results = {};
async function fetchTry(name, path, init) {
  try {
    const res = await fetch(target + path, init);
    let body = null;
    if (res.type !== 'opaque') body = await res.text();
    results[name] = { type: res.type, status: res.status, body };
  } catch (error) {
    results[name] = { error: String(error) };
  }
}
function imageTry(name, path) {
  return new Promise((resolve) => {
    const img = new Image();
    img.onload = () => { results[name] = 'load'; resolve(); };
    img.onerror = () => { results[name] = 'error'; resolve(); };
    img.src = target + path;
  });
}
function formTry(name, path, enctype, fields) {
  return new Promise((resolve) => {
    const frame = document.createElement('iframe');
    frame.name = name;
    document.body.append(frame);
    const form = document.createElement('form');
    form.method = 'POST';
    form.action = target + path;
    form.enctype = enctype;
    form.target = name;
    for (const [key, value] of Object.entries(fields)) {
      const input = document.createElement('input');
      input.type = 'hidden';
      input.name = key;
      input.value = value;
      form.append(input);
    }
    document.body.append(form);
    let done = false;
    const finish = (how) => { if (!done) { done = true; results[name] = how; resolve(); } };
    frame.addEventListener('load', () => finish('loaded'));
    setTimeout(() => finish('timeout'), 5000);
    form.submit();
  });
}
`;
}

/** A page whose script is `script` (which ends by setting `window.attackDone`). */
export function hostilePage(script: string): string {
  return `<!doctype html><html><head><meta charset="utf-8"><title>a page</title></head><body><script>${script}</script></body></html>`;
}
