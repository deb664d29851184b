// Reading a V8 .cpuprofile (node --cpu-prof): where the busy time went.
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

interface ProfileNode { id: number; hitCount?: number; children?: number[]; callFrame: { functionName: string; url: string; lineNumber: number } }
interface Profile { nodes: ProfileNode[]; samples: number[] }

const read = (file: string): Profile => JSON.parse(readFileSync(file, 'utf8')) as Profile;
const percent = (hits: number, busy: number): string => ((hits / busy) * 100).toFixed(1).padStart(5);

/** Top `n` functions by self time, idle excluded. */
export function topSelf(file: string, n = 15): string {
  const totals = new Map<string, number>();
  let busy = 0;
  for (const node of read(file).nodes) {
    const { functionName, url, lineNumber } = node.callFrame;
    const hits = node.hitCount ?? 0;
    if (functionName === '(idle)' || hits === 0) continue;
    busy += hits;
    const key = `${functionName || '(anonymous)'}${url ? ` ${basename(url)}:${lineNumber + 1}` : ''}`;
    totals.set(key, (totals.get(key) ?? 0) + hits);
  }
  const top = [...totals].sort((a, b) => b[1] - a[1]).slice(0, n);
  return top.map(([k, hits]) => `  ${percent(hits, busy)}%  ${k}`).join('\n');
}

/**
 * Busy time by the gateway's own source file: each sample goes to the innermost frame of the stack
 * that is in `dist/` (what our code costs, Node's and the libraries' work it calls included), or
 * to "outside the gateway's code" (the event loop, the HTTP parser, socket writes on their own).
 */
export function byOwnFile(file: string, n = 20): string {
  const profile = read(file);
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const owner = new Map<number, string>();
  const ownerOf = (id: number): string => {
    const known = owner.get(id);
    if (known !== undefined) return known;
    const node = byId.get(id)!;
    const url = node.callFrame.url;
    const at = url.indexOf('/dist/');
    const up = parent.get(id);
    const found = at !== -1 && !url.includes('/node_modules/') ? url.slice(at + 6) : up === undefined ? 'outside the gateway\'s code' : ownerOf(up);
    owner.set(id, found);
    return found;
  };
  const totals = new Map<string, number>();
  let busy = 0;
  for (const node of profile.nodes) {
    const hits = node.hitCount ?? 0;
    if (hits === 0 || node.callFrame.functionName === '(idle)') continue;
    busy += hits;
    const key = ownerOf(node.id);
    totals.set(key, (totals.get(key) ?? 0) + hits);
  }
  const top = [...totals].sort((a, b) => b[1] - a[1]).slice(0, n);
  return top.map(([k, hits]) => `  ${percent(hits, busy)}%  ${k}`).join('\n');
}

interface AllocNode { id: number; selfSize: number; children: AllocNode[]; callFrame: { functionName: string; url: string; lineNumber: number } }

/**
 * An allocation profile (bench/alloc-sampling.mjs) read per request: the bytes allocated by each
 * of the top `n` functions, and by the gateway's own source files (what they call included), each
 * divided by the number of requests the load made.
 */
export function allocations(file: string, requests: number, n = 15): string {
  const { head } = JSON.parse(readFileSync(file, 'utf8')) as { head: AllocNode };
  const bySelf = new Map<string, number>();
  const byFile = new Map<string, number>();
  let total = 0;
  const walk = (node: AllocNode, owner: string): void => {
    const { functionName, url, lineNumber } = node.callFrame;
    const at = url.indexOf('/dist/');
    const mine = at !== -1 && !url.includes('/node_modules/') ? url.slice(at + 6) : owner;
    if (node.selfSize > 0) {
      total += node.selfSize;
      const key = `${functionName || '(anonymous)'}${url ? ` ${basename(url)}:${lineNumber + 1}` : ''}`;
      bySelf.set(key, (bySelf.get(key) ?? 0) + node.selfSize);
      byFile.set(mine, (byFile.get(mine) ?? 0) + node.selfSize);
    }
    for (const child of node.children) walk(child, mine);
  };
  walk(head, 'outside the gateway\'s code');
  const rows = (totals: Map<string, number>, count: number): string =>
    [...totals].sort((a, b) => b[1] - a[1]).slice(0, count).map(([k, bytes]) => `  ${(bytes / requests).toFixed(0).padStart(7)} B  ${percent(bytes, total)}%  ${k}`).join('\n');
  return `${(total / requests).toFixed(0)} bytes allocated per request (sampled)\n\nTop ${n} functions by bytes allocated, per request:\n${rows(bySelf, n)}\n\n` +
    `By the gateway's source file (what it calls included), per request:\n${rows(byFile, 20)}`;
}
