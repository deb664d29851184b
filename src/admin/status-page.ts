// GET /status: the live status page, one self-contained document (inline CSS and script, no
// external request: its Content-Security-Policy allows none). It holds no data: it reads
// GET /status/events with the admin token from the URL fragment (`/status#token=…`, which the
// browser never sends) or a form, and writes everything it shows as text (textContent), never as
// HTML: model names and the like come from clients. Two more views, chosen by the fragment
// (`#usage`, `#requests`), read the usage ledger's routes (admin/usage-api.ts) when opened: the
// spend and tokens per day as SVG bar charts built element by element, the top keys, the budgets,
// and the request log with each request's attempts. They only read (GETs): a read token sees them.
import { createHash } from 'node:crypto';

const STYLE = `
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2430}
header{display:flex;gap:12px;align-items:center;padding:10px 18px;background:#1d2430;color:#fff;flex-wrap:wrap}
h1{font-size:17px;margin:0}h2{font-size:14px;margin:0 0 6px}
main{display:grid;grid-template-columns:repeat(auto-fit,minmax(330px,1fr));gap:12px;padding:12px 18px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:10px 12px}
.wide{grid-column:1/-1}.sub{display:grid;grid-template-columns:repeat(auto-fit,minmax(330px,1fr));gap:12px}.hidden{display:none}
.warn{background:#fff4e5;border-color:#e8a33d}
.badge{padding:2px 8px;border-radius:10px;background:#556;font-weight:600}
.serving{background:#1a7f37}.draining{background:#b35900}.closing{background:#9a3412}.exited{background:#6b7280}
.muted{color:#8a93a3}.big{font-size:26px;font-weight:600}
.cards{display:flex;gap:24px;flex-wrap:wrap}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:2px 8px 2px 0;border-bottom:1px solid #eef0f3}
th{font-weight:600;color:#556}td.n{text-align:right;font-variant-numeric:tabular-nums}td.t{white-space:nowrap}
.bar{height:14px;background:#e5e7eb;border-radius:7px;overflow:hidden;margin:6px 0}
.fill{height:100%;width:0;background:#b35900;transition:width .4s}
ol{margin:4px 0;padding-left:20px}
form{display:flex;gap:8px}input{flex:1;padding:4px}
nav{display:flex;gap:4px;padding:0 18px;background:#27303f}
nav a{color:#cfd6e2;padding:7px 14px;text-decoration:none;border-bottom:2px solid transparent}
nav a.on{color:#fff;border-bottom-color:#6aa5ff}
#login{margin:12px 18px 0}
.controls{display:flex;gap:12px;align-items:center;flex-wrap:wrap}
select,button{padding:3px 8px}
svg{display:block}svg text{font:11px system-ui,sans-serif;fill:#556}
.legend{display:flex;gap:4px 14px;flex-wrap:wrap;margin-top:4px}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}
.meter{height:10px;background:#e5e7eb;border-radius:5px;overflow:hidden;min-width:120px}
.meter div{height:100%;width:0;background:#1a7f37}.meter div.high{background:#b35900}.meter div.over{background:#b91c1c}
tr.pick{cursor:pointer}tr.pick:hover,tr.pick:focus{background:#eef4ff}tr.open{background:#dde9ff}
form.filters{display:grid;grid-template-columns:repeat(auto-fit,minmax(130px,1fr));gap:6px;margin-bottom:8px}
.fields{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0 0 8px}.fields dt{color:#556}.fields dd{margin:0;overflow-wrap:anywhere}
`;

const SCRIPT = `
const $ = (id) => document.getElementById(id);
const MOMENTS = { drain_started: 'drain started', window_over: 'window over', workers_exited: 'workers exited', listeners_closed: 'listeners closed', forced: 'drain forced', exited: 'exited' };
let token = '';
/**
 * The fragment names the view (#usage, #requests) and may carry the token (#token=…,
 * #usage&token=…): it is kept for the tab and taken out of the address bar at once. true if one was.
 */
function takeToken() {
  const fragment = location.hash.slice(1).split('&').filter((part) => part !== '');
  const given = fragment.find((part) => part.startsWith('token='));
  if (given === undefined) return false;
  try {
    token = decodeURIComponent(given.slice(6));
  } catch {
    token = given.slice(6);
  }
  sessionStorage.setItem('sluice-admin-token', token);
  const rest = fragment.filter((part) => !part.startsWith('token='));
  history.replaceState(null, '', location.pathname + location.search + (rest.length > 0 ? '#' + rest.join('&') : ''));
  return true;
}
if (!takeToken()) token = sessionStorage.getItem('sluice-admin-token') || '';
let exited = false;
/** Whether the status stream is followed (or retried): false only once it was refused the token. */
let following = false;

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
  following = true;
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
    following = false;
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


// The views: Status (the stream above), Usage and Requests (the ledger's routes, read when shown).
const VIEWS = ['status', 'usage', 'requests'];
const TITLES = { status: 'Sluice status', usage: 'Sluice usage', requests: 'Sluice requests' };
let view = '';
function showView() {
  const name = location.hash.slice(1).split('&')[0];
  view = VIEWS.includes(name) ? name : 'status';
  for (const each of VIEWS) {
    $('view-' + each).classList.toggle('hidden', each !== view);
    const tab = $('tab-' + each);
    tab.classList.toggle('on', each === view);
    if (each === view) tab.setAttribute('aria-current', 'page');
    else tab.removeAttribute('aria-current');
  }
  document.title = TITLES[view];
  if (view === 'usage') loadUsage();
  else if (view === 'requests') loadRequests(false);
}

/** GET one of the admin API's JSON routes: { ok, status, body } or { ok: false, status, code, message }. */
async function api(path) {
  let res;
  try {
    res = await fetch(path, { headers: token ? { authorization: 'Bearer ' + token } : {}, cache: 'no-store' });
  } catch {
    return { ok: false, status: 0, code: '', message: 'cannot reach the admin listener' };
  }
  let body = null;
  try {
    body = await res.json();
  } catch {}
  if (res.ok && body && typeof body === 'object') return { ok: true, status: res.status, body };
  const error = (body && typeof body === 'object' && body.error) || {};
  if (res.status === 401) $('login').classList.remove('hidden');
  return { ok: false, status: res.status, code: typeof error.code === 'string' ? error.code : '', message: typeof error.message === 'string' ? error.message : 'HTTP ' + res.status };
}
/** A failed answer in words. */
function failure(r) {
  if (r.code === 'ledger_not_enabled') return 'The usage ledger is not enabled on this gateway: add a ledger section to its config (docs/usage-ledger.md).';
  if (r.status === 401) return token ? 'The admin token was refused.' : 'The admin token is needed.';
  if (r.status === 404 && (r.code === 'unknown_path' || r.code === '')) return 'This gateway has no usage ledger routes (an older Sluice).';
  if (r.status === 0) return 'Cannot reach the admin listener.';
  return 'HTTP ' + r.status + (r.code ? ' ' + r.code : '') + ': ' + r.message;
}
function note(id, message) {
  const el = $(id);
  el.textContent = message || '';
  el.classList.toggle('hidden', !message);
}

function usd(n) {
  if (typeof n !== 'number' || !isFinite(n)) return '-';
  const [whole, decimals] = n.toFixed(6).split('.');
  return '$' + whole + '.' + decimals.replace(/0+$/, '').padEnd(2, '0');
}
function count(n) { return typeof n === 'number' ? n.toLocaleString('en-US') : '-'; }
function short(n) {
  const cut = (x) => x.toFixed(1).replace(/[.]0$/, '');
  return n >= 1e6 ? cut(n / 1e6) + 'M' : n >= 1e3 ? cut(n / 1e3) + 'k' : String(Math.round(n));
}
function pad(n) { return String(n).padStart(2, '0'); }
function when(ms) {
  const d = new Date(ms);
  if (!isFinite(d.getTime())) return '-';
  return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
}
function millis(n) { return typeof n === 'number' ? Math.round(n) + ' ms' : '-'; }
/** A group's name as shown ('' is none). */
function named(value) { return value === undefined || value === null || value === '' ? '(none)' : String(value); }

const SVG = 'http://www.w3.org/2000/svg';
function svg(name, attributes) {
  const el = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) el.setAttribute(key, String(value));
  return el;
}
/**
 * A stacked bar chart, element by element: one bar a day, one segment a series, each with its
 * value as a tooltip; the scale at the left.
 */
function barChart(id, label, days, series, format) {
  const W = 720, H = 200, left = 64, top = 8, bottom = 20;
  const plot = H - top - bottom;
  const totals = days.map((_, i) => series.reduce((sum, s) => sum + s.values[i], 0));
  const max = Math.max(0, ...totals);
  const chart = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, width: '100%', role: 'img' });
  chart.setAttribute('aria-label', label);
  for (const part of [0, 0.5, 1]) {
    const y = top + plot * (1 - part);
    chart.append(svg('line', { x1: left, x2: W, y1: y, y2: y, stroke: '#e5e7eb' }));
    const scale = svg('text', { x: left - 6, y: y + 4, 'text-anchor': 'end' });
    scale.textContent = format(max * part);
    chart.append(scale);
  }
  const slot = (W - left) / days.length;
  const width = Math.max(2, slot * 0.7);
  const every = Math.ceil(days.length / 10);
  days.forEach((day, i) => {
    const x = left + slot * i + (slot - width) / 2;
    let y = top + plot;
    for (const s of series) {
      const value = s.values[i];
      if (!(value > 0) || !(max > 0)) continue;
      const height = (value / max) * plot;
      y -= height;
      const bar = svg('rect', { x, y, width, height: Math.max(height, 0.5), fill: s.colour, class: 'bar-part' });
      const tip = svg('title', {});
      tip.textContent = day + ' ' + s.name + ': ' + format(value);
      bar.append(tip);
      chart.append(bar);
    }
    if (i % every === 0) {
      const tick = svg('text', { x: x + width / 2, y: H - 5, 'text-anchor': 'middle' });
      tick.textContent = day;
      chart.append(tick);
    }
  });
  $(id).replaceChildren(chart);
}

const DAY = 86400000;
const COLOURS = ['#2563eb', '#16a34a', '#d97706', '#9333ea', '#dc2626', '#0891b2', '#db2777'];
let usageSeq = 0;
async function loadUsage() {
  const seq = ++usageSeq;
  const days = Number($('range').value) || 7;
  const by = $('group').value;
  // Whole days, UTC (the ledger's day buckets), today the last.
  const from = Math.floor(Date.now() / DAY) * DAY - (days - 1) * DAY;
  const range = 'from=' + encodeURIComponent(new Date(from).toISOString()) + '&to=' + encodeURIComponent(new Date(from + days * DAY).toISOString());
  text('usage-state', 'loading');
  const [daily, keys, budgets] = await Promise.all([api('usage?' + range + '&group_by=' + by + '&bucket=day'), api('usage?' + range + '&group_by=key'), api('budgets')]);
  if (seq !== usageSeq) return;
  const failed = [daily, keys].find((r) => !r.ok);
  note('usage-note', failed ? failure(failed) : '');
  $('usage-data').classList.toggle('hidden', failed !== undefined);
  if (!failed) {
    const t = keys.body.totals || {};
    text('total-spend', usd(t.cost_usd));
    text('total-requests', count(t.requests));
    text('total-errors', count(t.errors));
    text('total-tokens', short(t.prompt_tokens || 0) + ' / ' + short(t.completion_tokens || 0));
    renderCharts(daily.body.rows || [], by, from, days);
    const top = (keys.body.rows || []).slice().sort((a, b) => b.cost_usd - a.cost_usd || b.requests - a.requests).slice(0, 10);
    rows('top-keys', top, (r) => [[named(r.key)], [count(r.requests), true], [count(r.errors), true], [count(r.prompt_tokens), true], [count(r.completion_tokens), true], [usd(r.cost_usd), true]]);
  }
  renderBudgets(budgets);
  text('usage-state', failed ? '' : 'updated ' + new Date().toLocaleTimeString());
}

/** Spend and tokens per day, one series per group: the seven that spent most, or six and "other". */
function renderCharts(data, by, from, days) {
  const labels = [];
  for (let i = 0; i < days; i++) labels.push(new Date(from + i * DAY).toISOString().slice(5, 10));
  const sums = new Map();
  for (const r of data) {
    const name = named(r[by]);
    const sum = sums.get(name) || { cost: 0, tokens: 0 };
    sum.cost += r.cost_usd;
    sum.tokens += r.prompt_tokens + r.completion_tokens;
    sums.set(name, sum);
  }
  const ranked = [...sums.entries()].sort((a, b) => b[1].cost - a[1].cost || b[1].tokens - a[1].tokens || (a[0] < b[0] ? -1 : 1)).map(([name]) => name);
  const own = ranked.length > COLOURS.length ? ranked.slice(0, COLOURS.length - 1) : ranked;
  const series = own.map((name, i) => ({ name, colour: COLOURS[i], cost: new Array(days).fill(0), tokens: new Array(days).fill(0) }));
  if (ranked.length > own.length) series.push({ name: 'other (' + (ranked.length - own.length) + ')', colour: '#9ca3af', cost: new Array(days).fill(0), tokens: new Array(days).fill(0) });
  for (const r of data) {
    const day = Math.floor((Date.parse(r.bucket) - from) / DAY);
    if (!(day >= 0 && day < days)) continue;
    const index = own.indexOf(named(r[by]));
    const s = series[index === -1 ? series.length - 1 : index];
    s.cost[day] += r.cost_usd;
    s.tokens[day] += r.prompt_tokens + r.completion_tokens;
  }
  barChart('spend-chart', 'spend per day by ' + by, labels, series.map((s) => ({ name: s.name, colour: s.colour, values: s.cost })), usd);
  barChart('tokens-chart', 'tokens per day by ' + by, labels, series.map((s) => ({ name: s.name, colour: s.colour, values: s.tokens })), short);
  const legend = $('legend');
  legend.replaceChildren();
  for (const s of series) {
    const item = document.createElement('span');
    const swatch = document.createElement('span');
    swatch.className = 'swatch';
    swatch.style.background = s.colour;
    item.append(swatch, document.createTextNode(s.name + ' ' + usd(s.cost.reduce((a, b) => a + b, 0))));
    legend.append(item);
  }
  if (series.length === 0) legend.textContent = 'no requests in these days';
}

function renderBudgets(r) {
  const body = $('budgets');
  body.replaceChildren();
  if (!r.ok) return note('budgets-note', failure(r));
  const budgets = Array.isArray(r.body.budgets) ? r.body.budgets : [];
  note('budgets-note', budgets.length === 0 ? 'No budgets: a key or a team with a budget is listed here (docs/keys-and-limits.md).' : '');
  for (const b of budgets) {
    const tr = document.createElement('tr');
    const cell = (value, numeric) => {
      const td = document.createElement('td');
      td.textContent = value;
      if (numeric) td.className = 'n';
      tr.append(td);
      return td;
    };
    const part = b.budget_usd > 0 ? b.spent_usd / b.budget_usd : 0;
    const percent = Math.round(part * 100);
    cell(String(b.scope));
    cell(String(b.name));
    cell(String(b.period));
    const meter = document.createElement('div');
    meter.className = 'meter';
    meter.setAttribute('role', 'progressbar');
    meter.setAttribute('aria-valuemin', '0');
    meter.setAttribute('aria-valuemax', '100');
    meter.setAttribute('aria-valuenow', String(Math.min(100, percent)));
    const fill = document.createElement('div');
    fill.style.width = Math.min(100, percent) + '%';
    fill.className = part >= 1 ? 'over' : part >= 0.8 ? 'high' : '';
    meter.append(fill);
    cell('').append(meter);
    cell(usd(b.spent_usd) + ' of ' + usd(b.budget_usd) + ' (' + percent + '%)', true);
    cell(usd(b.left_usd), true);
    cell(when(Date.parse(b.resets_at)));
    body.append(tr);
  }
}

const FILTERS = ['key', 'team', 'model', 'provider', 'user', 'error', 'tag'];
let listQuery = '';
let nextCursor = null;
let requestsSeq = 0;
/** The first page with the form's filters, or (more) the next page of the list shown. */
async function loadRequests(more) {
  const seq = ++requestsSeq;
  if (!more) {
    const q = new URLSearchParams();
    q.set('from', new Date(Date.now() - Number($('since').value) * 3600000).toISOString());
    for (const name of FILTERS) {
      const value = $('f-' + name).value.trim();
      if (value !== '') q.set(name, value);
    }
    // A status, or "error" (any status from 400) or "ok" (any below).
    const status = $('f-status').value.trim().toLowerCase();
    if (status === 'error' || status === 'errors') q.set('errors', 'true');
    else if (status === 'ok') q.set('errors', 'false');
    else if (status !== '') q.set('status', status);
    q.set('limit', '50');
    listQuery = q.toString();
  }
  $('more').disabled = true;
  const r = await api('requests?' + listQuery + (more && nextCursor ? '&cursor=' + encodeURIComponent(nextCursor) : ''));
  if (seq !== requestsSeq) return;
  $('more').disabled = false;
  note('requests-note', r.ok ? '' : failure(r));
  $('requests-data').classList.toggle('hidden', !r.ok);
  const body = $('request-list');
  if (!more) body.replaceChildren();
  if (!r.ok) return;
  const items = Array.isArray(r.body.items) ? r.body.items : [];
  for (const item of items) body.append(requestRow(item));
  if (!more && items.length === 0) rows('request-list', [], () => []);
  nextCursor = typeof r.body.next_cursor === 'string' ? r.body.next_cursor : null;
  $('more').classList.toggle('hidden', nextCursor === null);
  const shown = body.querySelectorAll('tr.pick').length;
  text('requests-count', shown + (nextCursor === null ? '' : ' shown, more to come'));
}

function requestRow(item) {
  const tr = document.createElement('tr');
  tr.className = 'pick';
  tr.tabIndex = 0;
  const cells = [
    [when(item.started_at)],
    [item.key || '-'],
    [item.team || '-'],
    [item.user || '-'],
    [item.model],
    [item.provider || '-'],
    [String(item.status) + (item.error ? ' ' + item.error : '')],
    [count(item.prompt_tokens) + ' / ' + count(item.completion_tokens), true],
    [item.cost_micros === null || item.cost_micros === undefined ? '-' : usd(item.cost_micros / 1e6), true],
    [millis(item.ended_at - item.started_at), true],
    [item.first_byte_ms === null || item.first_byte_ms === undefined ? '-' : millis(item.first_byte_ms), true],
  ];
  for (const [value, numeric] of cells) {
    const td = document.createElement('td');
    td.textContent = value === null || value === undefined ? '-' : String(value);
    td.className = numeric ? 'n t' : tr.children.length === 0 ? 't' : '';
    tr.append(td);
  }
  const open = () => openRequest(String(item.id), tr);
  tr.addEventListener('click', open);
  tr.addEventListener('keydown', (event) => {
    if (event.key === 'Enter') open();
  });
  return tr;
}

let detailSeq = 0;
/** One request's every field, and its attempts. */
async function openRequest(id, tr) {
  const seq = ++detailSeq;
  for (const open of document.querySelectorAll('#request-list tr.open')) open.classList.remove('open');
  tr.classList.add('open');
  $('request-detail').classList.remove('hidden');
  $('request-detail').scrollIntoView({ block: 'nearest' });
  text('detail-id', id);
  note('detail-note', 'loading');
  const r = await api('requests/' + encodeURIComponent(id));
  if (seq !== detailSeq) return;
  const fields = $('detail-fields');
  fields.replaceChildren();
  const q = r.ok ? r.body.request : undefined;
  if (!q) {
    note('detail-note', r.code === 'unknown_request' ? r.message : failure(r));
    rows('attempts', [], () => []);
    return;
  }
  note('detail-note', '');
  const shown = [
    ['id', q.id],
    ['kind', q.kind],
    ['started', when(q.started_at)],
    ['duration', millis(q.ended_at - q.started_at)],
    ['first byte', q.first_byte_ms === null ? 'none' : millis(q.first_byte_ms)],
    ['key', q.key || '-'],
    ['team', q.team || '-'],
    ['user', q.user || '-'],
    ['tags', Array.isArray(q.tags) && q.tags.length > 0 ? q.tags.join(', ') : '-'],
    ['metadata', q.metadata ? Object.entries(q.metadata).map(([k, v]) => k + '=' + v).join(', ') : '-'],
    ['api, endpoint', q.api + ', ' + q.endpoint],
    ['model', q.model],
    ['route', q.route || '-'],
    ['provider, served model', (q.provider || '-') + ', ' + (q.served_model || '-')],
    ['status', String(q.status) + (q.error ? ' ' + q.error : '')],
    ['tokens in / out', count(q.prompt_tokens) + ' / ' + count(q.completion_tokens) + (q.usage_estimated ? ' (estimated)' : '')],
    ['cached, cache write', count(q.cached_tokens) + ', ' + count(q.cache_write_tokens)],
    ['cost', q.cost_micros === null ? 'no price' : usd(q.cost_micros / 1e6)],
    ['bytes in / out', count(q.bytes_in) + ' / ' + count(q.bytes_out)],
    ['listener, worker, generation', q.listener + ', ' + q.worker + ', ' + q.generation],
  ];
  for (const [name, value] of shown) {
    const dt = document.createElement('dt');
    dt.textContent = name;
    const dd = document.createElement('dd');
    dd.textContent = value === null || value === undefined ? '-' : String(value);
    fields.append(dt, dd);
  }
  rows('attempts', Array.isArray(q.attempts) ? q.attempts : [], (a) => [[a.target], [a.outcome], [a.status], [millis(a.ms), true]]);
}

$('login').addEventListener('submit', (event) => {
  event.preventDefault();
  token = $('token').value.trim();
  sessionStorage.setItem('sluice-admin-token', token);
  $('token').value = '';
  if (!following) connect();
  if (view !== 'status') showView();
});
window.addEventListener('hashchange', () => {
  if (takeToken() && !following) connect();
  showView();
});
$('range').addEventListener('change', loadUsage);
$('group').addEventListener('change', loadUsage);
$('usage-reload').addEventListener('click', loadUsage);
$('filters').addEventListener('submit', (event) => {
  event.preventDefault();
  loadRequests(false);
});
$('since').addEventListener('change', () => loadRequests(false));
$('more').addEventListener('click', () => loadRequests(true));
$('detail-close').addEventListener('click', () => {
  $('request-detail').classList.add('hidden');
  for (const open of document.querySelectorAll('#request-list tr.open')) open.classList.remove('open');
});
connect();
showView();
`;

const BODY = `<header><h1>Sluice</h1><span id="state" class="badge">…</span><span id="ready"></span><span id="who" class="muted"></span><span id="link" class="muted">connecting</span></header>
<nav aria-label="views"><a id="tab-status" href="#status">Status</a><a id="tab-usage" href="#usage">Usage</a><a id="tab-requests" href="#requests">Requests</a></nav>
<section class="hidden" id="login"><h2>Admin token</h2><form><input id="token" type="password" autocomplete="off" placeholder="admin token"><button>Connect</button></form></section>
<main id="view-status">
<section class="wide warn hidden" id="etcd-warning"><h2>etcd</h2><div id="etcd-away"></div></section>
<section class="wide hidden" id="drain"><h2>Drain</h2><div id="window"></div><div class="bar" id="bar" role="progressbar" aria-valuemin="0" aria-valuemax="100"><div class="fill" id="fill"></div></div>
<div>Waiting for: <span id="waiting"></span></div><ol id="timeline"></ol></section>
<section class="wide"><div class="cards"><div><div class="big" id="rps">-</div>requests/s</div><div><div class="big" id="inflight">-</div>in flight</div><div><div class="big" id="conns">-</div>open connections</div>
<div><div>Config: <span id="source"></span></div><div>Last reload: <span id="reload"></span></div></div></div></section>
<section class="wide"><h2>Open streams and sessions: <span id="open-count">0</span></h2><table><thead><tr><th>kind</th><th>endpoint</th><th>model</th><th>protocol</th><th>worker</th><th>age</th></tr></thead><tbody id="open"></tbody></table></section>
<section><h2>In flight by endpoint</h2><table><thead><tr><th>endpoint</th><th>protocol</th><th>count</th></tr></thead><tbody id="by-endpoint"></tbody></table></section>
<section><h2>Connections</h2><table><thead><tr><th>listener</th><th>state</th><th>count</th></tr></thead><tbody id="connections"></tbody></table></section>
<section class="wide"><h2>Targets</h2><table><thead><tr><th>worker</th><th>provider</th><th>model</th><th>circuit</th><th>in flight</th><th>first token (EWMA ms)</th><th>failures in a row</th></tr></thead><tbody id="targets"></tbody></table></section>
<section class="wide hidden" id="workers-box"><h2>Workers</h2><table><thead><tr><th>worker</th><th>pid</th><th>state</th><th>ready</th><th>in flight</th><th>connections</th></tr></thead><tbody id="workers"></tbody></table></section>
</main>
<main id="view-usage" class="hidden">
<section class="wide"><div class="controls"><h2>Usage</h2><label>days <select id="range"><option value="7">the last 7</option><option value="30">the last 30</option></select></label>
<label>by <select id="group"><option value="team">team</option><option value="key">key</option><option value="model">model</option></select></label><button id="usage-reload" type="button">Reload</button><span id="usage-state" class="muted"></span></div></section>
<section class="wide warn hidden" id="usage-note"></section>
<div class="wide sub hidden" id="usage-data">
<section class="wide"><div class="cards"><div><div class="big" id="total-spend">-</div>spent</div><div><div class="big" id="total-requests">-</div>requests</div><div><div class="big" id="total-errors">-</div>errors</div><div><div class="big" id="total-tokens">-</div>tokens in / out</div></div></section>
<section class="wide"><h2>Spend per day (UTC)</h2><div id="spend-chart"></div><div class="legend" id="legend"></div></section>
<section class="wide"><h2>Tokens per day (in + out)</h2><div id="tokens-chart"></div></section>
<section class="wide"><h2>Top keys by spend</h2><table><thead><tr><th>key</th><th>requests</th><th>errors</th><th>tokens in</th><th>tokens out</th><th>spent</th></tr></thead><tbody id="top-keys"></tbody></table></section>
</div>
<section class="wide"><h2>Budgets this period</h2><div class="muted hidden" id="budgets-note"></div><table><thead><tr><th>scope</th><th>name</th><th>period</th><th></th><th>spent</th><th>left</th><th>resets</th></tr></thead><tbody id="budgets"></tbody></table></section>
</main>
<main id="view-requests" class="hidden">
<section class="wide"><h2>Requests</h2><form id="filters" class="filters"><select id="since" aria-label="since"><option value="1">the last hour</option><option value="24" selected>the last 24 hours</option><option value="168">the last 7 days</option><option value="720">the last 30 days</option></select><input id="f-key" placeholder="key" aria-label="key"><input id="f-team" placeholder="team" aria-label="team"><input id="f-model" placeholder="model" aria-label="model"><input id="f-provider" placeholder="provider" aria-label="provider">
<input id="f-user" placeholder="user" aria-label="user"><input id="f-status" placeholder="status: 429, error, ok" aria-label="status"><input id="f-error" placeholder="error code" aria-label="error code"><input id="f-tag" placeholder="tag" aria-label="tag"><button>Filter</button></form></section>
<section class="wide warn hidden" id="requests-note"></section>
<section class="wide hidden" id="request-detail"><div class="controls"><h2>Request <span id="detail-id"></span></h2><button id="detail-close" type="button">Close</button></div><div class="muted hidden" id="detail-note"></div>
<dl class="fields" id="detail-fields"></dl><h2>Attempts</h2><table><thead><tr><th>target</th><th>outcome</th><th>status</th><th>time</th></tr></thead><tbody id="attempts"></tbody></table></section>
<section class="wide hidden" id="requests-data"><h2>Newest first: <span id="requests-count"></span></h2><table><thead><tr><th>time</th><th>key</th><th>team</th><th>user</th><th>model</th><th>provider</th><th>status</th><th>tokens in / out</th><th>cost</th><th>duration</th><th>first byte</th></tr></thead><tbody id="request-list"></tbody></table>
<button id="more" type="button" class="hidden">More</button></section>
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
