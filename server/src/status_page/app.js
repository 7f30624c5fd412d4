// The status page's script: polls /v1/stats and /v1/overview about once a second and draws them.
// Plain JavaScript, no build step, no other origin (the page's Content-Security-Policy allows
// only this server). On TCP every call carries the server's bearer token, like any client's.
'use strict';

const TOKEN_KEY = 'oncelake-token';
const POLL_MS = 1000;
const SVG_NS = 'http://www.w3.org/2000/svg';

// The counters shown as cards: [key, label, where in /v1/stats, whether a rate is shown, level].
// A level marks a card that is worth a look when its value is above zero.
const CARDS = [
  ['commits', 'commits', s => s.counters.commits, true],
  ['units_committed', 'units committed', s => s.counters.units_committed, true],
  ['duplicates_collapsed', 'duplicates collapsed', s => s.counters.duplicates_collapsed, true],
  ['conflicts', 'conflicts', s => s.counters.conflicts, true, 'bad'],
  ['fenced_rejections', 'fenced', s => s.counters.fenced_rejections, true, 'warn'],
  ['busy_rejections', 'busy', s => s.counters.busy_rejections, true, 'warn'],
  ['stale_rejections', 'stale', s => s.counters.stale_rejections, true],
  ['commits_aborted', 'commits aborted', s => s.counters.commits_aborted, true, 'warn'],
  ['claims_granted', 'claims granted', s => s.counters.claims_granted, true],
  ['claims_taken_over', 'claims taken over', s => s.counters.claims_taken_over, true, 'warn'],
  ['units', 'units stored', s => s.units, false],
  ['bytes_stored', 'bytes stored', s => s.bytes_stored, false],
  ['seq', 'last seq', s => s.seq, false],
  ['objects_staged', 'objects staged', s => s.counters.objects_staged, true],
];

const STATES = ['done', 'cut_off', 'running', 'ready', 'failed', 'blocked'];
const STATE_LABEL = { done: 'done', cut_off: 'cut off', running: 'running', ready: 'ready',
  failed: 'failed', blocked: 'blocked' };

let token = '';
let previous = null; // { at, stats } of the last poll
let lastSeq = 0;     // newest log record drawn, to mark the fresh ones

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

const fmt = n => Number(n).toLocaleString('en-US');

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + ' ' + units[i];
}

function micros(us) {
  if (us < 1000) return us + ' µs';
  if (us < 1e6) return (us / 1000).toFixed(1) + ' ms';
  return (us / 1e6).toFixed(2) + ' s';
}

function ago(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + ' s ago';
  if (s < 3600) return Math.round(s / 60) + ' min ago';
  if (s < 86400) return Math.round(s / 3600) + ' h ago';
  return Math.round(s / 86400) + ' d ago';
}

// The token from the URL's fragment (never sent to a server), then kept in this tab only.
function takeToken() {
  const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  token = sessionStorage.getItem(TOKEN_KEY) || '';
}

class Unauthorized extends Error {}

async function call(path) {
  const headers = token ? { Authorization: 'Bearer ' + token } : {};
  const r = await fetch(path, { headers, cache: 'no-store', credentials: 'omit' });
  if (r.status === 401) throw new Unauthorized();
  if (!r.ok) throw new Error(path + ': ' + r.status + ' ' + (await r.text()));
  return r;
}

// The bucket bound below which a fraction p of the values fall ([bound, count] buckets).
function percentile(buckets, p) {
  const total = buckets.reduce((a, b) => a + b[1], 0);
  if (total === 0) return null;
  let seen = 0;
  for (const [bound, n] of buckets) {
    seen += n;
    if (seen >= p * total) return bound;
  }
  return buckets[buckets.length - 1][0];
}

// The commit latency since the last poll when there were commits, else over the process's life.
function latency(stats) {
  const h = stats.commit_latency_us;
  let buckets = h.buckets;
  let window = 'since start';
  if (previous && h.count > previous.stats.commit_latency_us.count) {
    const before = previous.stats.commit_latency_us.buckets;
    buckets = h.buckets.map(([b, n], i) => [b, n - (before[i] ? before[i][1] : 0)]);
    window = 'last second';
  }
  return { p50: percentile(buckets, 0.5), p99: percentile(buckets, 0.99), window,
    mean: h.count ? Math.round(h.sum / h.count) : null };
}

function card(key, label, value, text, rate, level) {
  const c = el('div', { class: 'card' + (level && value > 0 ? ' ' + level : ''), 'data-key': key });
  c.append(el('div', { class: 'label' }, label));
  c.append(el('div', { class: 'value', 'data-value': String(value) }, text));
  c.append(el('div', { class: 'rate' }, rate));
  return c;
}

function drawCounters(stats, now) {
  const dt = previous ? (now - previous.at) / 1000 : 0;
  const cards = CARDS.map(([key, label, get, withRate, level]) => {
    const v = get(stats);
    let rate = '';
    if (withRate && dt > 0) {
      rate = (Math.max(0, v - get(previous.stats)) / dt).toFixed(1) + ' /s';
    } else if (key === 'bytes_stored') {
      rate = bytes(v);
    }
    return card(key, label, v, fmt(v), rate, level);
  });
  const lat = latency(stats);
  // The histogram's buckets are powers of two: a percentile is the bound of its bucket.
  const show = v => (v === null ? '–' : '≤ ' + micros(v));
  cards.push(card('commit_p50', 'commit latency p50', lat.p50 || 0, show(lat.p50), lat.window));
  cards.push(card('commit_p99', 'commit latency p99', lat.p99 || 0, show(lat.p99),
    'mean ' + (lat.mean === null ? '–' : micros(lat.mean))));
  document.getElementById('counters').replaceChildren(...cards);
}

function pairs(list) {
  const dl = el('dl');
  for (const [k, v, cls] of list) {
    dl.append(el('dt', {}, k), el('dd', cls ? { class: cls } : {}, v));
  }
  return dl;
}

function drawMaintenance(ov, stats) {
  const box = document.getElementById('maintenance');
  const gc = ov.gc;
  const v = ov.verify;
  box.replaceChildren(
    gc
      ? pairs([['last GC', ago(ov.now_ms - gc.at_ms) + (gc.dry_run ? ' (dry run)' : '')],
        ['objects removed', fmt(gc.objects) + ' (' + bytes(gc.object_bytes) + ')'],
        ['objects kept', fmt(gc.objects_referenced)],
        ['history pruned', fmt(gc.history_rows_pruned) + ' rows']])
      : pairs([['last GC', 'none through this server']]),
    v
      ? pairs([['last verify', ago(ov.now_ms - v.at_ms) + (v.deep ? ' (deep)' : '')],
        ['result', v.ok ? 'ok' : v.problems + ' problems', v.ok ? 'good' : 'bad'],
        ['checked', fmt(v.entries_checked) + ' entries at seq ' + fmt(v.seq)]])
      : pairs([['last verify', 'none through this server']]),
    pairs([['collected (process)', fmt(stats.counters.orphans_collected) + ' orphans, ' +
      bytes(stats.counters.bytes_collected)]]));
  const s = stats.server;
  document.getElementById('server').replaceChildren(pairs([
    ['pid', String(ov.pid)],
    ['requests', fmt(s.requests)],
    ['connections open', fmt(s.connections_open)],
    ['401 / 400 / 413', fmt(s.unauthorized) + ' / ' + fmt(s.bad_requests) + ' / ' + fmt(s.too_large)],
    ['shed (503)', fmt(s.overloaded), s.overloaded > 0 ? 'bad' : ''],
  ]));
}

// Stages in columns by depth (a stage one column right of its deepest upstream stage).
function layout(stages) {
  const depth = {};
  for (const s of stages) depth[s.stage] = Math.max(0, ...s.upstream.map(u => depth[u] + 1));
  const rows = {};
  const at = {};
  for (const s of stages) {
    const d = depth[s.stage];
    rows[d] = (rows[d] || 0) + 1;
    at[s.stage] = { col: d, row: rows[d] - 1 };
  }
  return { at, cols: Math.max(...Object.values(depth)) + 1, rows: Math.max(...Object.values(rows)) };
}

function drawPipeline(ov) {
  const box = document.getElementById('pipeline');
  const title = document.getElementById('pipeline-title');
  const p = ov.pipeline;
  if (!p) {
    title.textContent = '';
    box.replaceChildren(el('p', { class: 'muted' }, ov.pipeline_error ||
      'No pipeline is recorded in this store (a pipeline run records its definition).'));
    return;
  }
  title.textContent = fmt(p.units) + ' units · definition recorded at seq ' + fmt(p.recorded_seq);
  const W = 230, H = 78, GX = 60, GY = 18;
  const { at, cols, rows } = layout(p.stages);
  const s = svg('svg', { width: cols * (W + GX) - GX + 2, height: rows * (H + GY) - GY + 2,
    role: 'img', 'aria-label': 'pipeline DAG' });
  const pos = n => ({ x: 1 + at[n].col * (W + GX), y: 1 + at[n].row * (H + GY) });
  for (const st of p.stages) {
    const b = pos(st.stage);
    for (const u of st.upstream) {
      const a = pos(u);
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
      s.append(svg('path', { class: 'edge',
        d: `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}` }));
    }
  }
  for (const st of p.stages) s.append(stageNode(st, pos(st.stage), W, H, p.units));
  box.replaceChildren(s);
  document.getElementById('legend').replaceChildren(...STATES.map(k =>
    el('span', {}, el('i', { class: 's-' + k }), STATE_LABEL[k])));
}

function stageNode(st, { x, y }, W, H, units) {
  const g = svg('g', { class: 'stage-node', 'data-stage': st.stage });
  for (const k of ['done', 'ready', 'running', 'failed', 'blocked', 'cut_off', 'stale']) {
    g.setAttribute('data-' + k.replace('_', '-'), String(st[k]));
  }
  g.append(svg('rect', { class: 'stage', x, y, width: W, height: H, rx: 6 }));
  g.append(svg('text', { x: x + 8, y: y + 17, 'font-weight': '600' }, st.stage));
  g.append(svg('text', { x: x + W - 8, y: y + 17, 'text-anchor': 'end', class: 'count' },
    'code v' + st.code_version));
  // One bar per stage: its cells by state, done ones cut off apart from those that ran.
  const parts = { ...st, done: st.done - st.cut_off };
  const total = Math.max(1, units);
  let bx = x + 8;
  const bw = W - 16;
  for (const k of STATES) {
    const w = (parts[k] / total) * bw;
    if (w > 0) g.append(svg('rect', { class: 's-' + k, x: bx, y: y + 26, width: w, height: 12 }));
    bx += w;
  }
  if (bx === x + 8) g.append(svg('rect', { class: 's-blocked', x: bx, y: y + 26, width: bw, height: 12, opacity: 0.3 }));
  const line1 = `${st.done} done · ${st.ready} ready · ${st.running} running`;
  const line2 = `${st.failed} failed · ${st.cut_off} cut off · ${st.blocked} blocked`;
  g.append(svg('text', { x: x + 8, y: y + 54, class: 'count' }, line1));
  g.append(svg('text', { x: x + 8, y: y + 69, class: 'count' }, line2));
  return g;
}

function drawRecords(ov) {
  const rows = ov.records.map(r => {
    const units = r.units.map(u => u.unit + ' v' + u.version +
      (u.size === null ? '' : ' (' + bytes(u.size) + ')')).join('\n') +
      (r.more ? '\n… and ' + r.more + ' more' : '');
    const tr = el('tr', { 'data-seq': String(r.seq), class: r.seq > lastSeq && lastSeq ? 'fresh' : '' },
      el('td', {}, fmt(r.seq)), el('td', {}, ago(ov.now_ms - r.time_ms)), el('td', {}, r.kind.replace('_', ' ')),
      el('td', { class: 'units' }, units), el('td', {}, r.worker || ''));
    return tr;
  });
  document.querySelector('#records tbody').replaceChildren(...rows);
  if (ov.records.length) lastSeq = Math.max(lastSeq, ov.records[0].seq);
}

function setLive(text, cls) {
  const b = document.getElementById('live');
  b.textContent = text;
  b.className = 'live ' + cls;
}

async function poll() {
  try {
    const [stats, ov] = await Promise.all([
      call('/v1/stats').then(r => r.json()),
      call('/v1/overview').then(r => r.json()),
    ]);
    const now = Date.now();
    document.getElementById('login').hidden = true;
    document.getElementById('main').hidden = false;
    document.getElementById('store').textContent = ov.store;
    drawCounters(stats, now);
    drawMaintenance(ov, stats);
    drawPipeline(ov);
    drawRecords(ov);
    previous = { at: now, stats };
    setLive('live · seq ' + fmt(stats.seq) + ' · ' + new Date(now).toLocaleTimeString(), 'ok');
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  } catch (e) {
    if (e instanceof Unauthorized) {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin(token ? 'The server refused that token (401): it changes with every start.' : '');
      return; // polling resumes when a token is given
    }
    setLive('disconnected: ' + e.message, 'down');
  }
  setTimeout(poll, POLL_MS);
}

function showLogin(message) {
  document.getElementById('main').hidden = true;
  document.getElementById('login').hidden = false;
  document.getElementById('login-error').textContent = message;
  setLive('needs the token', 'down');
}

// /metrics and the JSON behind the page, fetched with the token and shown over the page.
async function showRaw(ev) {
  ev.preventDefault();
  const a = ev.currentTarget;
  const raw = document.getElementById('raw');
  try {
    const text = await (await call(a.getAttribute('href'))).text();
    raw.textContent = a.dataset.raw === 'json' ? JSON.stringify(JSON.parse(text), null, 2) : text;
  } catch (e) {
    raw.textContent = String(e.message || e);
  }
  raw.hidden = false;
}

function start() {
  takeToken();
  document.getElementById('login').addEventListener('submit', ev => {
    ev.preventDefault();
    token = document.getElementById('token').value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    poll();
  });
  for (const a of document.querySelectorAll('a[data-raw]')) a.addEventListener('click', showRaw);
  document.getElementById('raw').addEventListener('click', () => { document.getElementById('raw').hidden = true; });
  // A token pasted into the address bar of an open page changes only the fragment: no reload.
  window.addEventListener('hashchange', () => {
    const waiting = !document.getElementById('login').hidden;
    takeToken();
    if (waiting) poll();
  });
  poll();
}

document.addEventListener('DOMContentLoaded', start);
