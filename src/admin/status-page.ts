// GET /status: the live status page, one self-contained document (inline CSS and script, no
// external request: its Content-Security-Policy allows none). It holds no data: it reads
// GET /status/events with the admin token from the URL fragment (`/status#token=…`, which the
// browser never sends) or a form, and writes everything it shows as text (textContent), never as
// HTML: model names and the like come from clients.
import { createHash } from 'node:crypto';

const STYLE = `
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2430}
header{display:flex;gap:12px;align-items:center;padding:10px 18px;background:#1d2430;color:#fff;flex-wrap:wrap}
h1{font-size:17px;margin:0}h2{font-size:14px;margin:0 0 6px}
main{display:grid;grid-template-columns:repeat(auto-fit,minmax(330px,1fr));gap:12px;padding:12px 18px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:10px 12px}
.wide{grid-column:1/-1}.hidden{display:none}
.warn{background:#fff4e5;border-color:#e8a33d}
.badge{padding:2px 8px;border-radius:10px;background:#556;font-weight:600}
.serving{background:#1a7f37}.draining{background:#b35900}.closing{background:#9a3412}.exited{background:#6b7280}
.muted{color:#8a93a3}.big{font-size:26px;font-weight:600}
.cards{display:flex;gap:24px;flex-wrap:wrap}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:2px 8px 2px 0;border-bottom:1px solid #eef0f3}
th{font-weight:600;color:#556}td.n{text-align:right;font-variant-numeric:tabular-nums}
.bar{height:14px;background:#e5e7eb;border-radius:7px;overflow:hidden;margin:6px 0}
.fill{height:100%;width:0;background:#b35900;transition:width .4s}
ol{margin:4px 0;padding-left:20px}
form{display:flex;gap:8px}input{flex:1;padding:4px}
`;

const SCRIPT = `
const $ = (id) => document.getElementById(id);
const MOMENTS = { drain_started: 'drain started', window_over: 'window over', workers_exited: 'workers exited', listeners_closed: 'listeners closed', forced: 'drain forced', exited: 'exited' };
let token = '';
const fromHash = /(?:^#|&)token=([^&]*)/.exec(location.hash);
if (fromHash) {
  token = decodeURIComponent(fromHash[1]);
  sessionStorage.setItem('sluice-admin-token', token);
  history.replaceState(null, '', location.pathname + location.search);
} else token = sessionStorage.getItem('sluice-admin-token') || '';
let exited = false;

function text(id, value) { $(id).textContent = String(value); }
function secs(n) { return (Math.round(n * 10) / 10).toFixed(1) + ' s'; }
function rows(id, items, cells) {
  const body = $(id);
  body.replaceChildren();
  for (const item of items) {
    const tr = document.createElement('tr');
    for (const [value, numeric] of cells(item)) {
      const td = document.createElement('td');
      td.textContent = value === null || value === undefined ? '-' : String(value);
      if (numeric) td.className = 'n';
      tr.append(td);
    }
    body.append(tr);
  }
  if (items.length === 0) {
    const td = document.createElement('td');
    td.colSpan = 9;
    td.className = 'muted';
    td.textContent = 'none';
    const tr = document.createElement('tr');
    tr.append(td);
    body.append(tr);
  }
}
function timeline(id, moments, trigger, windowSecs) {
  const list = $(id);
  list.replaceChildren();
  const item = (text, cls) => {
    const li = document.createElement('li');
    li.textContent = text;
    if (cls) li.className = cls;
    list.append(li);
  };
  for (const m of moments) item('+' + secs(m.at_secs) + '  ' + (MOMENTS[m.event] || m.event) + (m.event === 'drain_started' && trigger ? ' (' + trigger + ')' : ''));
  if (windowSecs > 0 && !moments.some((m) => m.event === 'window_over')) item('+' + secs(windowSecs) + '  window over (to come), then the listeners close once nothing is in flight', 'muted');
}
function setState(state) {
  const badge = $('state');
  badge.textContent = state;
  badge.className = 'badge ' + state;
}

function render(s) {
  setState(s.state);
  text('ready', s.ready ? 'ready' : 'not ready');
  text('who', 'pid ' + s.pid + ' · v' + s.version + ' · up ' + s.uptime_secs + ' s');
  text('rps', s.requests_per_sec);
  text('inflight', s.in_flight);
  text('conns', s.open_connections);
  const c = s.config;
  text('source', c.source + (c.file ? ' (' + c.file.split('/').pop() + ')' : '') + (c.revision !== undefined ? ' revision ' + c.revision + (c.following ? '' : ', not following etcd') : ''));
  const away = c.source === 'etcd' && !c.following;
  $('etcd-warning').classList.toggle('hidden', !away);
  if (away) text('etcd-away', 'Not following etcd for ' + secs((Date.parse(s.at) - Date.parse(c.since)) / 1000) + ' (' + (c.last_error || 'no answer yet') + '). Serving revision ' + c.revision + '; changes made in etcd meanwhile are not applied here.');
  const r = c.last_reload;
  text('reload', r ? r.outcome + ' at ' + new Date(r.at).toLocaleTimeString() + ' (' + r.trigger + ')' + (r.reason ? ': ' + r.reason : '') : 'none since the start');
  rows('by-endpoint', s.in_flight_by, (e) => [[e.endpoint], [e.protocol], [e.count, true]]);
  rows('connections', s.connections, (e) => [[e.listener], [e.state], [e.count, true]]);
  rows('targets', s.targets, (t) => [[t.worker], [t.provider], [t.model], [t.state], [t.in_flight, true], [t.ewma_first_token_ms, true], [t.consecutive_failures, true]]);
  rows('workers', s.workers, (w) => [[w.worker], [w.pid], [w.state], [w.ready ? 'yes' : 'no'], [w.in_flight, true], [w.open_connections, true]]);
  $('workers-box').classList.toggle('hidden', s.workers.length === 0);
  const d = s.drain;
  $('drain').classList.toggle('hidden', !d);
  if (d) {
    const part = d.window_secs > 0 ? Math.min(1, d.elapsed_secs / d.window_secs) : 1;
    $('fill').style.width = Math.round(part * 100) + '%';
    $('bar').setAttribute('aria-valuenow', String(Math.round(part * 100)));
    text('window', 'window ' + secs(Math.min(d.elapsed_secs, d.window_secs)) + ' of ' + secs(d.window_secs) + ' · drain ' + secs(d.elapsed_secs) + ' · ' + d.trigger);
    text('waiting', d.waiting);
    timeline('timeline', d.timeline, d.trigger, d.window_secs);
  }
  text('open-count', s.open_work.total + (s.open_work.total > s.open_work.oldest.length ? ' (the oldest ' + s.open_work.oldest.length + ' shown)' : ''));
  rows('open', s.open_work.oldest, (o) => [[o.kind], [o.endpoint], [o.model], [o.protocol], [o.worker], [secs(o.age_secs), true]]);
}

function renderExit(e) {
  exited = true;
  setState('exited');
  text('ready', 'exit code ' + e.exit_code + (e.forced ? ' (forced: ' + e.forced + ')' : ''));
  text('link', 'the process exited after a drain of ' + secs(e.drain_secs));
  $('drain').classList.remove('hidden');
  $('fill').style.width = '100%';
  timeline('timeline', e.timeline, '', 0);
  text('waiting', 'nothing: the process has exited');
  rows('open', [], () => []);
  text('open-count', 0);
}

function handle(block) {
  let event = 'message';
  const data = [];
  for (const line of block.split('\\n')) {
    if (line.startsWith('event: ')) event = line.slice(7);
    else if (line.startsWith('data: ')) data.push(line.slice(6));
  }
  if (data.length === 0) return;
  const value = JSON.parse(data.join('\\n'));
  if (event === 'status') render(value);
  else if (event === 'exited') renderExit(value);
}

async function connect() {
  let res;
  try {
    res = await fetch('status/events', { headers: token ? { authorization: 'Bearer ' + token } : {}, cache: 'no-store' });
  } catch {
    text('link', exited ? 'the process exited; waiting for a new one' : 'cannot reach the admin listener; retrying');
    return void setTimeout(connect, exited ? 5000 : 2000);
  }
  if (res.status === 401) {
    $('login').classList.remove('hidden');
    text('link', token ? 'the admin token was refused' : 'the admin token is needed');
    return;
  }
  if (!res.ok) {
    text('link', 'HTTP ' + res.status + '; retrying');
    return void setTimeout(connect, 5000);
  }
  $('login').classList.add('hidden');
  exited = false;
  text('link', 'live');
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf('\\n\\n')) !== -1) {
        handle(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  } catch {}
  if (!exited) text('link', 'the stream ended; reconnecting');
  setTimeout(connect, exited ? 5000 : 1000);
}

$('login').addEventListener('submit', (event) => {
  event.preventDefault();
  token = $('token').value.trim();
  sessionStorage.setItem('sluice-admin-token', token);
  $('token').value = '';
  connect();
});
connect();
`;

const BODY = `<header><h1>Sluice</h1><span id="state" class="badge">…</span><span id="ready"></span><span id="who" class="muted"></span><span id="link" class="muted">connecting</span></header>
<main>
<section class="wide warn hidden" id="etcd-warning"><h2>etcd</h2><div id="etcd-away"></div></section>
<section class="wide hidden" id="login"><h2>Admin token</h2><form><input id="token" type="password" autocomplete="off" placeholder="admin token"><button>Connect</button></form></section>
<section class="wide hidden" id="drain"><h2>Drain</h2><div id="window"></div><div class="bar" id="bar" role="progressbar" aria-valuemin="0" aria-valuemax="100"><div class="fill" id="fill"></div></div>
<div>Waiting for: <span id="waiting"></span></div><ol id="timeline"></ol></section>
<section class="wide"><div class="cards"><div><div class="big" id="rps">-</div>requests/s</div><div><div class="big" id="inflight">-</div>in flight</div><div><div class="big" id="conns">-</div>open connections</div>
<div><div>Config: <span id="source"></span></div><div>Last reload: <span id="reload"></span></div></div></div></section>
<section class="wide"><h2>Open streams and sessions: <span id="open-count">0</span></h2><table><thead><tr><th>kind</th><th>endpoint</th><th>model</th><th>protocol</th><th>worker</th><th>age</th></tr></thead><tbody id="open"></tbody></table></section>
<section><h2>In flight by endpoint</h2><table><thead><tr><th>endpoint</th><th>protocol</th><th>count</th></tr></thead><tbody id="by-endpoint"></tbody></table></section>
<section><h2>Connections</h2><table><thead><tr><th>listener</th><th>state</th><th>count</th></tr></thead><tbody id="connections"></tbody></table></section>
<section class="wide"><h2>Targets</h2><table><thead><tr><th>worker</th><th>provider</th><th>model</th><th>circuit</th><th>in flight</th><th>first token (EWMA ms)</th><th>failures in a row</th></tr></thead><tbody id="targets"></tbody></table></section>
<section class="wide hidden" id="workers-box"><h2>Workers</h2><table><thead><tr><th>worker</th><th>pid</th><th>state</th><th>ready</th><th>in flight</th><th>connections</th></tr></thead><tbody id="workers"></tbody></table></section>
</main>`;

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

/** The page itself (a few KB). */
export const STATUS_PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><meta name="referrer" content="no-referrer">
<title>Sluice status</title><style>${STYLE}</style></head>
<body>${BODY}<script>${SCRIPT}</script></body></html>
`;

/** Its headers: nothing may be loaded from anywhere, only its own inline style and script run, and it talks only to this listener. */
export const STATUS_PAGE_HEADERS: Readonly<Record<string, string>> = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'content-security-policy': `default-src 'none'; script-src ${sha256(SCRIPT)}; style-src ${sha256(STYLE)}; connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
};
