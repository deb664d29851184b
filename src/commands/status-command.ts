// `sluice status`: follows GET /status/events of a running gateway. On a terminal it redraws a
// compact screen, with a progress bar of the drain window; otherwise it prints plain lines, one
// per change that matters (state, readiness, each moment of a drain, the drain's progress every
// few seconds). It exits 0 when the gateway exits (`exited`), 1 when it cannot follow it.
import type { Config } from '../config/schema.ts';
import { redactUrl, redactUrlsIn } from '../config/redact-url.ts';
import type { DrainMoment } from '../lifecycle/contracts.ts';
import type { ExitedEvent, StatusSnapshot } from '../admin/status-snapshot.ts';
import { adminToken, adminUrl, reasonOf } from './admin-client.ts';
import { printableDeep } from './terminal-text.ts';

export interface StatusOptions {
  admin: string | undefined;
  token: string | undefined;
}

/** Where the command writes (a test may give its own). */
export interface StatusOutput {
  write(text: string): void;
  readonly isTTY: boolean;
  readonly columns: number;
}

/** Connecting, and the answer's head. */
const CONNECT_TIMEOUT_MS = 10_000;
/**
 * The stream, once it answered: the gateway sends an update every second (every half second
 * during a drain), so this long without a byte is ten missed updates at least: a gateway frozen
 * or cut off, not a slow one.
 */
export const READ_IDLE_TIMEOUT_MS = 10_000;
/** Plain lines: the drain's progress at most this often. */
const PROGRESS_EVERY_MS = 2000;

const MOMENTS: Record<DrainMoment['event'], string> = {
  drain_started: 'drain started',
  window_over: 'window over',
  workers_exited: 'workers exited',
  listeners_closed: 'listeners closed',
  forced: 'drain forced',
  exited: 'exited',
};

export async function followStatus(config: Config, options: StatusOptions, out: StatusOutput = stdoutOutput(), err: (text: string) => void = (t) => process.stderr.write(t)): Promise<number> {
  const base = adminUrl(config, options.admin);
  if (!base) {
    err('sluice status: the config has no admin listener; name one with --admin URL\n');
    return 1;
  }
  const token = adminToken(config, options.token);
  // The connect timeout bounds connecting and the answer's head; then the read-idle timeout, moved
  // on by every chunk, bounds the silence between two. Nothing bounds how long the stream lasts.
  const abort = new AbortController();
  let deadline = setTimeout(() => abort.abort(), CONNECT_TIMEOUT_MS);
  let res: Response;
  try {
    res = await fetch(`${base}/status/events`, { headers: { accept: 'text/event-stream', ...(token ? { authorization: `Bearer ${token}` } : {}) }, signal: abort.signal });
  } catch (error) {
    err(`sluice status: cannot reach the admin API at ${redactUrl(base)}: ${abort.signal.aborted ? `no answer within ${CONNECT_TIMEOUT_MS / 1000} s` : redactUrlsIn(reasonOf(error))}\n`);
    return 1;
  } finally {
    clearTimeout(deadline);
  }
  let silent = false;
  deadline = setTimeout(() => {
    silent = true;
    abort.abort();
  }, READ_IDLE_TIMEOUT_MS);
  try {
    return await follow(res, base, out, err, () => deadline.refresh());
  } catch (error) {
    err(`sluice status: lost the connection to ${base}: ${silent ? `no update within ${READ_IDLE_TIMEOUT_MS / 1000} s` : reasonOf(error)}\n`);
    return 1;
  } finally {
    clearTimeout(deadline);
  }
}

/** Reads the stream to its `exited` event (0), or to its end without one (1); throws when the connection is lost. */
async function follow(res: Response, base: string, out: StatusOutput, err: (text: string) => void, heard: () => void): Promise<number> {
  if (res.status !== 200 || !res.body) {
    const text = await res.text().catch(() => '');
    err(`sluice status: ${refusal(res.status, text)}\n`);
    return 1;
  }
  const view = out.isTTY ? new ScreenView(out) : new LineView(out);
  // Ctrl-C: the terminal gets its cursor back.
  if (out.isTTY) {
    process.once('SIGINT', () => {
      view.lost();
      process.exit(130);
    });
  }
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for await (const chunk of res.body) {
      heard();
      buffer += decoder.decode(chunk as Uint8Array, { stream: true });
      let end;
      while ((end = buffer.indexOf('\n\n')) !== -1) {
        const event = parseEvent(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (event?.name === 'status') view.status(event.data as StatusSnapshot);
        else if (event?.name === 'exited') {
          view.exited(event.data as ExitedEvent);
          return 0;
        }
      }
    }
  } catch (error) {
    view.lost();
    throw error;
  }
  view.lost();
  err(`sluice status: the stream from ${base} ended before the gateway said it exited\n`);
  return 1;
}

function stdoutOutput(): StatusOutput {
  return {
    write: (text) => void process.stdout.write(text),
    isTTY: process.stdout.isTTY === true,
    get columns() {
      return process.stdout.columns || 100;
    },
  };
}

function refusal(status: number, text: string): string {
  let code: string | undefined;
  let message: string | undefined;
  try {
    const error = (JSON.parse(text) as { error?: { code?: string; message?: string } }).error;
    code = error?.code;
    message = error?.message;
  } catch {
    // Not the admin API's error shape.
  }
  if (status === 401) return 'the admin token was refused (401 invalid_admin_token): pass --token, or set SLUICE_ADMIN_TOKEN';
  if (status === 404) return 'this gateway serves no status stream (404): admin.status_page is off, or this is not an admin listener';
  return `the admin API answered ${status}${code ? ` ${code}` : ''}${message ? `: ${message}` : ''}`;
}

function parseEvent(block: string): { name: string; data: unknown } | undefined {
  let name = 'message';
  const data: string[] = [];
  for (const line of block.split('\n')) {
    if (line.startsWith('event: ')) name = line.slice(7);
    else if (line.startsWith('data: ')) data.push(line.slice(6));
  }
  if (data.length === 0) return undefined;
  try {
    // Some strings come from clients (a model name): none may move a terminal's cursor or start a line of its own.
    return { name, data: printableDeep(JSON.parse(data.join('\n'))) };
  } catch {
    return undefined;
  }
}

const secs = (n: number) => `${(Math.round(n * 10) / 10).toFixed(1)} s`;
const clock = (iso: string) => iso.slice(11, 19);

/** What a drain waits for, and how far its window is, in one line. */
function drainLine(s: StatusSnapshot): string {
  const d = s.drain!;
  const part = d.window_secs > 0 ? Math.min(1, d.elapsed_secs / d.window_secs) : 1;
  return `window ${secs(Math.min(d.elapsed_secs, d.window_secs))} of ${secs(d.window_secs)} (${Math.round(part * 100)}%), drain ${secs(d.elapsed_secs)}; ${d.waiting}`;
}

function exitLine(e: ExitedEvent): string {
  return `exited: code ${e.exit_code}${e.forced ? ` (drain forced: ${e.forced})` : ''} after a drain of ${secs(e.drain_secs)}`;
}

/** Not a terminal: plain lines, no escape codes. */
class LineView {
  readonly #out: StatusOutput;
  #last = '';
  #moments = 0;
  #progressAt = 0;

  constructor(out: StatusOutput) {
    this.#out = out;
  }

  status(s: StatusSnapshot): void {
    const headline = `${s.state}${s.ready ? ', ready' : ', not ready'}${s.workers.length ? `, workers ${s.workers.map((w) => `${w.worker}:${w.state}`).join(' ')}` : ''}${notFollowing(s) ? ', not following etcd' : ''}`;
    if (headline !== this.#last) {
      this.#last = headline;
      // The error is told when the state changes, not followed: its text may change at every retry.
      const why = notFollowing(s) ? `; etcd: ${s.config.last_error ?? 'no answer yet'}` : '';
      this.#line(s.at, `${headline} (pid ${s.pid}, v${s.version}; config: ${s.config.source}${why}); in flight ${s.in_flight}, connections ${s.open_connections}, requests/s ${s.requests_per_sec}`);
    }
    const d = s.drain;
    if (!d) return;
    for (const m of d.timeline.slice(this.#moments)) this.#line(s.at, `${MOMENTS[m.event] ?? m.event} at +${secs(m.at_secs)}${m.event === 'drain_started' ? ` (${d.trigger})` : ''}`);
    this.#moments = d.timeline.length;
    const now = Date.now();
    if (now - this.#progressAt >= PROGRESS_EVERY_MS) {
      this.#progressAt = now;
      this.#line(s.at, `draining: ${drainLine(s)}${openList(s, 3)}`);
    }
  }

  exited(e: ExitedEvent): void {
    for (const m of e.timeline.slice(this.#moments)) if (m.event !== 'exited') this.#line(e.at, `${MOMENTS[m.event] ?? m.event} at +${secs(m.at_secs)}`);
    this.#line(e.at, exitLine(e));
  }

  lost(): void {}

  #line(at: string, text: string): void {
    this.#out.write(`${clock(at)} ${text}\n`);
  }
}

/** etcd mode, and its watch is not open: changes made in etcd are not applied. */
function notFollowing(s: StatusSnapshot): boolean {
  return s.config.source === 'etcd' && s.config.following === false;
}

function openList(s: StatusSnapshot, max: number): string {
  const open = s.open_work;
  if (open.total === 0) return '';
  const shown = open.oldest.slice(0, max).map((o) => `${o.kind} ${o.endpoint} ${o.age_secs.toFixed(0)} s`);
  return `; open: ${shown.join(', ')}${open.total > shown.length ? ` and ${open.total - shown.length} more` : ''}`;
}

const ESC = '\x1b[';
const BAR_WIDTH = 30;

/** A terminal: one compact screen, redrawn at each tick, with the drain window as a bar. */
class ScreenView {
  readonly #out: StatusOutput;
  #drawn = false;

  constructor(out: StatusOutput) {
    this.#out = out;
  }

  status(s: StatusSnapshot): void {
    const lines = [
      `${ESC}1msluice ${s.version}${ESC}0m  pid ${s.pid}  ${stateColour(s.state)}${s.state}${ESC}0m  ${s.ready ? 'ready' : 'not ready'}  up ${s.uptime_secs} s  ${clock(s.at)}`,
      `config: ${s.config.source}${s.config.file ? ` (${s.config.file})` : ''}${s.config.revision !== undefined ? ` revision ${s.config.revision}` : ''}; last reload: ${s.config.last_reload ? `${s.config.last_reload.outcome} at ${clock(s.config.last_reload.at)} (${s.config.last_reload.trigger})` : 'none'}`,
      ...(notFollowing(s) ? [`${ESC}33mnot following etcd since ${clock(s.config.since!)}: ${s.config.last_error ?? 'no answer yet'}${ESC}0m`] : []),
      `requests/s ${s.requests_per_sec}   in flight ${s.in_flight}   connections ${s.open_connections}`,
      `in flight:   ${s.in_flight_by.map((e) => `${e.endpoint}/${e.protocol} ${e.count}`).join('  ') || '-'}`,
      `connections: ${s.connections.map((c) => `${c.listener} ${c.state} ${c.count}`).join('  ') || '-'}`,
      `targets:     ${s.targets.map((t) => `${t.worker !== undefined ? `w${String(t.worker)} ` : ''}${String(t.provider)}/${String(t.model)} ${String(t.state)} ${String(t.in_flight)}${t.ewma_first_token_ms !== null ? ` ${String(t.ewma_first_token_ms)} ms` : ''}`).join('  ') || '-'}`,
    ];
    if (s.workers.length) lines.push(`workers:     ${s.workers.map((w) => `${w.worker}:${w.state}${w.ready ? '' : ' (not ready)'} ${w.in_flight ?? '?'}`).join('  ')}`);
    const d = s.drain;
    if (d) {
      const part = d.window_secs > 0 ? Math.min(1, d.elapsed_secs / d.window_secs) : 1;
      const filled = Math.round(part * BAR_WIDTH);
      lines.push('');
      lines.push(`${ESC}1mdrain${ESC}0m (${d.trigger}) ${ESC}42m${' '.repeat(filled)}${ESC}100m${' '.repeat(BAR_WIDTH - filled)}${ESC}0m ${Math.round(part * 100)}%  window ${secs(Math.min(d.elapsed_secs, d.window_secs))} of ${secs(d.window_secs)}, drain ${secs(d.elapsed_secs)}`);
      lines.push(`  waiting for: ${d.waiting}`);
      lines.push(`  timeline: ${d.timeline.map((m) => `+${secs(m.at_secs)} ${MOMENTS[m.event] ?? m.event}`).join(' · ')}`);
      for (const o of s.open_work.oldest.slice(0, 8)) lines.push(`  ${o.kind} ${o.endpoint} ${o.model} (${o.protocol}${o.worker !== undefined ? `, worker ${o.worker}` : ''}) ${secs(o.age_secs)}`);
      if (s.open_work.total > 8) lines.push(`  … and ${s.open_work.total - 8} more`);
    }
    this.#draw(lines);
  }

  exited(e: ExitedEvent): void {
    this.#out.write(`\n${exitLine(e)}\n${ESC}?25h`);
  }

  lost(): void {
    this.#out.write(`${ESC}?25h`);
  }

  #draw(lines: string[]): void {
    const width = Math.max(40, this.#out.columns);
    const text = lines.map((l) => `${cut(l, width)}${ESC}K`).join('\n');
    this.#out.write(`${this.#drawn ? '' : `${ESC}?25l${ESC}2J`}${ESC}H${text}\n${ESC}J`);
    this.#drawn = true;
  }
}

/** At most `width` visible characters (escape sequences do not count). */
function cut(line: string, width: number): string {
  let visible = 0;
  let result = '';
  for (let i = 0; i < line.length; i++) {
    if (line[i] === '\x1b') {
      const end = line.indexOf('m', i);
      const k = line.indexOf('K', i);
      const stop = end === -1 ? k : k === -1 ? end : Math.min(end, k);
      result += line.slice(i, stop + 1);
      i = stop;
      continue;
    }
    if (visible >= width) continue;
    result += line[i];
    visible++;
  }
  return result;
}

function stateColour(state: string): string {
  return state === 'serving' ? `${ESC}32m` : state === 'draining' || state === 'closing' ? `${ESC}33m` : `${ESC}90m`;
}
