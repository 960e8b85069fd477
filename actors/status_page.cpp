// The coordinator's live status page, served at "/". It is one HTML document
// with inline CSS and JavaScript that polls "api/status" (relative, so it works
// behind any prefix) every 2 s and renders stages, trainers, two SVG charts and
// recent events in the browser. It deliberately loads nothing else (no CDN, web
// fonts or images): the machines of a swarm often have no internet access.
// All data goes into the DOM through textContent / setAttribute, never as HTML.

#include "actors/status_page.hpp"

namespace swarm {

const char* status_page_html() {
  return R"swarmhtml(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>swarm status</title>
<style>
:root{--fg:#1d232b;--mut:#6b7480;--bd:#dde1e6;--bg:#f4f5f7;--ok:#1a7f37;--warn:#a86400;--bad:#c62828;
--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono","Liberation Mono",monospace}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;align-items:baseline;flex-wrap:wrap;gap:4px 22px;padding:10px 20px;background:#fff;border-bottom:1px solid var(--bd)}
h1{font-size:20px;margin:0 6px 0 0;letter-spacing:.02em}
.stat small{color:var(--mut);margin-right:5px}
.stat b,.mono,td.n,.ev-t{font-family:var(--mono);font-variant-numeric:tabular-nums}
.stat b{font-weight:600}
#banner{background:#fdecea;color:var(--bad);border-bottom:1px solid #f3c1bd;padding:8px 20px;font-weight:600}
main{padding:14px 20px 30px;max-width:1700px;margin:0 auto}
body.offline main{opacity:.55}
section{margin-bottom:18px}
h2{font-size:12px;text-transform:uppercase;letter-spacing:.08em;color:var(--mut);margin:0 0 6px}
h3{font-size:15px;margin:0}
#stages{display:grid;grid-template-columns:repeat(auto-fill,minmax(600px,1fr));gap:12px}
.card{background:#fff;border:1px solid var(--bd);border-radius:6px;padding:10px 12px;overflow-x:auto}
.card-h{display:flex;align-items:baseline;flex-wrap:wrap;gap:4px 18px;margin-bottom:6px}
.meta{color:var(--mut);font-size:13px}.meta b{color:var(--fg);font-family:var(--mono);font-weight:600}
table{border-collapse:collapse;width:100%}
th{text-align:left;font-weight:600;color:var(--mut);font-size:12px;border-bottom:1px solid var(--bd);padding:3px 8px;white-space:nowrap}
td{padding:4px 8px;border-bottom:1px solid #eef0f3;white-space:nowrap}
tr:last-child td{border-bottom:0}
th.n,td.n{text-align:right}
.pill{display:inline-block;min-width:74px;text-align:center;padding:0 8px;border-radius:10px;font-size:12px;font-weight:600;color:#fff}
.st-serving{background:var(--ok)}.st-reloading{background:#d48a00}.st-down{background:var(--bad)}.st-other{background:#8a929c}
tr.stale td,td.stale{color:#a3aab3}
.warn{color:var(--warn)}.bad{color:var(--bad)}.muted{color:var(--mut)}
.bar{position:relative;width:190px;height:18px;background:#e7eaee;border-radius:3px;overflow:hidden}
.bar i{position:absolute;left:0;top:0;bottom:0;background:#9cc3ea}
.bar i.done{background:#98d3a5}
.bar span{position:relative;font:12px/18px var(--mono);padding-left:6px}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(440px,1fr));gap:12px}
svg{display:block;width:100%;height:auto}
svg text{font:11px var(--mono);fill:#5f6873}
.legend{display:flex;flex-wrap:wrap;gap:2px 16px;font-size:12px;margin-top:4px}
#events{list-style:none;margin:0;padding:0;max-height:420px;overflow-y:auto}
#events li{display:flex;gap:12px;padding:3px 4px;border-bottom:1px solid #eef0f3}
.ev-t{color:var(--mut);min-width:88px;text-align:right}
.ev-k{min-width:150px;font-family:var(--mono);font-size:12px;padding-top:1px}
.ev-bad{color:var(--bad)}.ev-ok{color:var(--ok)}.ev-warn{color:var(--warn)}
</style>
</head>
<body>
<header>
<h1>swarm</h1>
<span class="stat"><small>uptime</small><b id="h-uptime">—</b></span>
<span class="stat"><small>stages</small><b id="h-stages">—</b></span>
<span class="stat"><small>servers</small><b id="h-servers">—</b></span>
<span class="stat"><small>trainers</small><b id="h-trainers">—</b></span>
<span class="stat"><small>tokens/s</small><b id="h-tps">—</b></span>
<span class="stat"><small>updated</small><b id="h-updated">never</b></span>
</header>
<div id="banner" hidden></div>
<main>
<section><h2>Stages</h2><div id="stages"><p class="muted">waiting for the first status…</p></div></section>
<section><h2>Trainers</h2><div class="card" id="trainers"><p class="muted">waiting for the first status…</p></div></section>
<section class="charts">
<div class="card"><h3>loss <span class="muted">vs step</span></h3><div id="loss-box"></div><div class="legend" id="loss-legend"></div></div>
<div class="card"><h3>tokens/s <span class="muted">vs time</span></h3><div id="speed-box"></div><div class="legend" id="speed-legend"></div></div>
</section>
<section><h2>Latest events</h2><div class="card"><ul id="events"><li class="muted">none yet</li></ul></div></section>
</main>
<script>
(function () {
'use strict';
var POLL_MS = 2000, TIMEOUT_MS = 5000, STALE_S = 10;
var SVGNS = 'http://www.w3.org/2000/svg';
var PALETTE = ['#1f6fb4', '#d9480f', '#2b8a3e', '#7048e8', '#c2255c', '#0c8599', '#8d6e14', '#495057', '#e8590c', '#5c940d'];
var colors = Object.create(null), ncolors = 0, lastOk = 0;

function $(id) { return document.getElementById(id); }
function arr(x) { return Array.isArray(x) ? x : []; }
function obj(x) { return x && typeof x === 'object' && !Array.isArray(x) ? x : {}; }
function objs(x) { return arr(x).filter(function (v) { return v && typeof v === 'object' && !Array.isArray(v); }); }
function num(x) { return typeof x === 'number' && isFinite(x) ? x : NaN; }
function str(x) { return x == null ? '' : String(x); }
function fix(x, d) { x = num(x); return isNaN(x) ? '—' : x.toFixed(d); }
function int(x) {
  x = num(x); if (isNaN(x)) return '—';
  return Math.round(x).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}
function bytes(x) {
  x = num(x); if (isNaN(x)) return '—';
  var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
  while (x >= 1024 && i < u.length - 1) { x /= 1024; i++; }
  return (i ? x.toFixed(1) : String(Math.round(x))) + ' ' + u[i];
}
function p2(n) { return (n < 10 ? '0' : '') + n; }
function dur(s) {
  s = num(s); if (isNaN(s) || s < 0) return '—';
  s = Math.round(s);
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + 'm ' + p2(s % 60) + 's';
  if (s < 86400) return Math.floor(s / 3600) + 'h ' + p2(Math.floor(s / 60) % 60) + 'm';
  return Math.floor(s / 86400) + 'd ' + p2(Math.floor(s / 3600) % 24) + 'h';
}
function clock(t) {
  var d = new Date(t);
  return p2(d.getHours()) + ':' + p2(d.getMinutes()) + ':' + p2(d.getSeconds());
}
function color(id) {
  if (!(id in colors)) colors[id] = PALETTE[ncolors++ % PALETTE.length];
  return colors[id];
}
function el(tag, cls, text) {
  var e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}
function add(p) {
  for (var i = 1; i < arguments.length; i++) {
    var c = arguments[i];
    if (c != null) p.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return p;
}
function put(p, c) { return p.appendChild(c); }
function fill(p) {
  while (p.firstChild) p.removeChild(p.firstChild);
  for (var i = 1; i < arguments.length; i++) if (arguments[i] != null) p.appendChild(arguments[i]);
  return p;
}
// cells: [content, className]; content is a string or an element
function table(head, rows) {
  var t = el('table'), tr = put(put(t, el('thead')), el('tr'));
  head.forEach(function (h) { add(tr, el('th', h[1], h[0])); });
  var tb = put(t, el('tbody'));
  rows.forEach(function (r) {
    var row = put(tb, el('tr', r.cls));
    r.cells.forEach(function (c) {
      var td = put(row, el('td', c[1]));
      if (typeof c[0] === 'string') td.textContent = c[0]; else add(td, c[0]);
    });
  });
  return t;
}
function stat(id, v) { $(id).textContent = v; }
function meta(label, value, cls) {
  var s = el('span', 'meta'); add(s, label + ' ', el('b', cls, value)); return s;
}

function renderStages(stages) {
  var box = $('stages');
  if (!stages.length) { fill(box, el('p', 'muted', 'no stages registered')); return; }
  stages = stages.slice().sort(function (a, b) { return (num(a.stage) || 0) - (num(b.stage) || 0); });
  fill(box);
  stages.forEach(function (st) {
    st = obj(st);
    var rd = obj(st.rounds), step = num(st.step), card = put(box, el('div', 'card'));
    var h = put(card, el('div', 'card-h'));
    add(h, el('h3', null, 'stage ' + (str(st.stage) || '?')), meta('step', int(step)),
        meta('rounds', int(rd.applied)), meta('failed', int(rd.failed), num(rd.failed) > 0 ? 'bad' : null),
        meta('mean round', fix(rd.mean_seconds, 2) + ' s'), meta('last', fix(rd.last_seconds, 2) + ' s'));
    var servers = objs(st.servers);
    if (!servers.length) { add(card, el('p', 'muted', 'no servers')); return; }
    add(card, table(
      [['server'], ['address'], ['state'], ['step', 'n'], ['samples/s', 'n'], ['hash'], ['last report', 'n']],
      servers.map(function (sv) {
        sv = obj(sv);
        var state = str(sv.state), age = num(sv.last_report_s), s = num(sv.step);
        var pill = el('span', 'pill st-' + (/^(serving|reloading|down)$/.test(state) ? state : 'other'), state || '?');
        return {cls: age > STALE_S ? 'stale' : null, cells: [
          [str(sv.id) || '?', 'mono'], [sv.host == null && sv.port == null ? '—' : str(sv.host) + ':' + str(sv.port), 'mono'], [pill],
          [int(s), 'n' + (!isNaN(s) && !isNaN(step) && s !== step ? ' warn' : '')],
          [fix(sv.samples_per_s, 1), 'n'], [str(sv.hash) || '—', 'mono'],
          [isNaN(age) ? '—' : age.toFixed(1) + ' s', 'n']]};
      })));
  });
}

function progress(step, max) {
  var b = el('div', 'bar'), pct = Math.max(0, Math.min(100, step / max * 100));
  var f = put(b, el('i', pct >= 100 ? 'done' : null));
  f.style.width = (isFinite(pct) ? pct : 0).toFixed(1) + '%';
  add(b, el('span', null, int(step) + ' / ' + int(max) + ' \u00b7 ' + (isFinite(pct) ? pct.toFixed(0) : '0') + '%'));
  return b;
}

function renderTrainers(trainers) {
  var box = $('trainers');
  if (!trainers.length) { fill(box, el('p', 'muted', 'no trainers connected')); return; }
  fill(box, table(
    [['trainer'], ['progress'], ['loss', 'n'], ['tokens/s', 'n'], ['samples', 'n'], ['dropped', 'n'],
     ['retries', 'n'], ['reroutes', 'n'], ['bans', 'n'], ['wire', 'n'], ['elapsed', 'n'], ['ETA', 'n'],
     ['last report', 'n']],
    trainers.map(function (t) {
      t = obj(t);
      var id = str(t.id), step = num(t.step), max = num(t.max_steps), el_s = num(t.elapsed_s);
      var age = num(t.last_report_s), eta = '—';
      if (max > 0 && step >= max) eta = 'done';
      else if (max > 0 && step > 0 && el_s > 0) eta = dur(el_s / step * (max - step));
      var name = el('span', 'mono'); add(name, el('span', 'sw'), id || '?');
      name.firstChild.style.background = color(id);
      return {cls: age > STALE_S ? 'stale' : null, cells: [
        [name], [max > 0 ? progress(step, max) : int(step), max > 0 ? null : 'mono'],
        [fix(t.loss, 3), 'n'], [int(t.tokens_per_s), 'n'], [int(t.samples), 'n'],
        [int(t.dropped), 'n' + (num(t.dropped) > 0 ? ' warn' : '')], [int(t.retries), 'n'],
        [int(t.reroutes), 'n'], [int(t.bans), 'n' + (num(t.bans) > 0 ? ' warn' : '')],
        [bytes(t.wire_bytes), 'n'], [dur(el_s), 'n'], [eta, 'n'],
        [isNaN(age) ? '—' : age.toFixed(1) + ' s', 'n']]};
    })));
}

// ---- charts (inline SVG) ----
function sv(tag, attrs, text) {
  var e = document.createElementNS(SVGNS, tag);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  if (text != null) e.textContent = text;
  return e;
}
function ticks(lo, hi, n) {
  var span = hi - lo, step = Math.pow(10, Math.floor(Math.log10(span / n))), err = span / n / step;
  if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
  var out = [];
  for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9 && out.length < 50; v += step)
    out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return {v: out, step: step};
}
function tickLabel(v, step) {
  if (Math.abs(v) >= 1e4 && step >= 100) return +(v / 1000).toFixed(Math.max(0, 3 - Math.floor(Math.log10(step)))) + 'k';
  return v.toFixed(Math.max(0, Math.min(6, -Math.floor(Math.log10(step)))));
}
function getChart(box, id) {
  var s = $(id);
  if (!s) s = $(box).appendChild(sv('svg', {id: id, viewBox: '0 0 600 250', role: 'img'}));
  return s;
}
// series: [{id, color, pts: [[x, y], ...]}]; o: {xlabel, ylabel, xmax}
function chart(svg, series, o) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  var W = 600, H = 250, L = 54, R = 16, T = 18, B = 34, pw = W - L - R, ph = H - T - B;
  var x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  series.forEach(function (s) {
    s.pts.forEach(function (p) {
      x0 = Math.min(x0, p[0]); x1 = Math.max(x1, p[0]); y0 = Math.min(y0, p[1]); y1 = Math.max(y1, p[1]);
    });
  });
  add(svg, sv('text', {x: 4, y: 11}, o.ylabel), sv('text', {x: L + pw / 2, y: H - 3, 'text-anchor': 'middle'}, o.xlabel));
  add(svg, sv('rect', {x: L, y: T, width: pw, height: ph, fill: 'none', stroke: '#c9ced5'}));
  if (!(x1 >= x0) || !(y1 >= y0)) {
    add(svg, sv('text', {x: L + pw / 2, y: T + ph / 2, 'text-anchor': 'middle'}, 'no data yet'));
    return;
  }
  if (o.xmax != null) x1 = Math.max(x1, o.xmax);
  if (x1 - x0 < 1e-9) { x0 -= 1; x1 += 1; }
  var lo = y0, pad = (y1 - y0) * 0.08 || Math.abs(y0) * 0.1 || 1;
  y0 -= pad; y1 += pad;
  if (lo >= 0 && y0 < 0) y0 = 0;
  function X(v) { return L + (v - x0) / (x1 - x0) * pw; }
  function Y(v) { return T + (1 - (v - y0) / (y1 - y0)) * ph; }
  var ty = ticks(y0, y1, 5), tx = ticks(x0, x1, 6);
  ty.v.forEach(function (v) {
    var y = Y(v).toFixed(1);
    add(svg, sv('line', {x1: L, x2: L + pw, y1: y, y2: y, stroke: '#eceef1'}),
        sv('text', {x: L - 6, y: y, dy: '0.32em', 'text-anchor': 'end'}, tickLabel(v, ty.step)));
  });
  tx.v.forEach(function (v) {
    var x = X(v).toFixed(1);
    add(svg, sv('line', {x1: x, x2: x, y1: T + ph, y2: T + ph + 4, stroke: '#9aa1aa'}),
        sv('text', {x: x, y: T + ph + 16, 'text-anchor': 'middle'}, tickLabel(v, tx.step)));
  });
  series.forEach(function (s) {
    var pts = [];
    s.pts.forEach(function (p) {
      var x = X(p[0]), y = Y(p[1]);
      if (isFinite(x) && isFinite(y)) pts.push(x.toFixed(1) + ',' + y.toFixed(1));
    });
    if (!pts.length) return;
    if (pts.length > 1)
      add(svg, sv('polyline', {points: pts.join(' '), fill: 'none', stroke: s.color, 'stroke-width': 1.6,
                               'stroke-linejoin': 'round', 'data-trainer': s.id}));
    var last = pts[pts.length - 1].split(',');
    add(svg, sv('circle', {cx: last[0], cy: last[1], r: 3, fill: s.color}));
  });
}
function legend(id, series) {
  var box = fill($(id));
  series.forEach(function (s) {
    var sw = el('span', 'sw'); sw.style.background = s.color;
    add(box, add(el('span', 'mono'), sw, s.id));
  });
}
function renderCharts(trainers, hist, now) {
  var ids = [], seen = Object.create(null), cur = Object.create(null);
  trainers.forEach(function (t) { var id = str(t.id); cur[id] = t; if (id && !seen[id]) { seen[id] = 1; ids.push(id); } });
  Object.keys(hist).sort().forEach(function (id) { if (!seen[id]) { seen[id] = 1; ids.push(id); } });
  var loss = [], speed = [];
  ids.forEach(function (id) {
    var lp = [], sp = [], c = color(id);
    arr(hist[id]).forEach(function (p) {
      p = arr(p);
      var t = num(p[0]), st = num(p[1]), l = num(p[2]), v = num(p[3]);
      if (!isNaN(st) && !isNaN(l)) lp.push([st, l]);
      if (!isNaN(t) && !isNaN(v)) sp.push([t - now, v]);
    });
    var t = cur[id];  // the current value if it is newer than the history
    if (t && !isNaN(num(t.step)) && !isNaN(num(t.loss)) && (!lp.length || t.step > lp[lp.length - 1][0]))
      lp.push([t.step, t.loss]);
    loss.push({id: id, color: c, pts: lp});
    speed.push({id: id, color: c, pts: sp});
  });
  chart(getChart('loss-box', 'loss-chart'), loss, {xlabel: 'step', ylabel: 'loss'});
  chart(getChart('speed-box', 'speed-chart'), speed, {xlabel: 'seconds (0 = now)', ylabel: 'tokens/s', xmax: 0});
  legend('loss-legend', loss);
  legend('speed-legend', speed);
}

function evClass(kind) {
  if (/down|fail|unreach|error|lost|dead|timeout|ban|kill|crash/i.test(kind)) return 'ev-bad';
  if (/join|(^|_)up$|start|recover|register|serving|done|finish|rejoin/i.test(kind)) return 'ev-ok';
  if (/reload|reroute|retry|drop|stall|slow|warn|move|rebalanc/i.test(kind)) return 'ev-warn';
  return '';
}
function renderEvents(events, now) {
  var box = fill($('events'));
  if (!events.length) { add(box, el('li', 'muted', 'none yet')); return; }
  for (var i = events.length - 1; i >= 0; i--) {
    var e = events[i], t = num(e.t), kind = str(e.event), li = put(box, el('li', evClass(kind)));
    var ts = put(li, el('span', 'ev-t', isNaN(t) ? '—' : dur(Math.max(0, now - t)) + ' ago'));
    if (!isNaN(t)) ts.title = clock(t * 1000);
    add(li, el('span', 'ev-k', kind), el('span', null, str(e.text)));
  }
}

function render(d) {
  d = obj(d);
  var now = num(d.time); if (isNaN(now)) now = Date.now() / 1000;
  var stages = objs(d.stages), trainers = objs(d.trainers), nsrv = 0, nup = 0, tps = 0;
  stages.forEach(function (s) {
    objs(s.servers).forEach(function (v) { nsrv++; if (v.state === 'serving') nup++; });
  });
  trainers.forEach(function (t) { var v = num(t.tokens_per_s); if (!isNaN(v)) tps += v; });
  stat('h-uptime', dur(d.uptime_s));
  stat('h-stages', String(stages.length));
  stat('h-servers', nup + ' serving / ' + nsrv);
  stat('h-trainers', String(trainers.length));
  stat('h-tps', int(tps));
  renderStages(stages);
  renderTrainers(trainers);
  renderCharts(trainers, obj(d.history), now);
  renderEvents(objs(d.events), now);
  stat('h-updated', clock(Date.now()));
}

function banner(msg) {
  var b = $('banner');
  b.hidden = !msg;
  b.textContent = msg || '';
  document.body.classList.toggle('offline', !!msg);
}

function poll() {
  var ctl = typeof AbortController === 'function' ? new AbortController() : null;
  var timer = ctl ? setTimeout(function () { ctl.abort(); }, TIMEOUT_MS) : 0;
  fetch('api/status', {cache: 'no-store', signal: ctl ? ctl.signal : undefined})
    .then(function (r) {
      if (!r.ok) throw new Error('HTTP ' + r.status);
      return r.json();
    })
    .then(function (d) {
      try { render(d); } catch (e) {
        banner('could not render the status (' + str(e && e.message) + '), retrying');
        return;
      }
      lastOk = Date.now();
      banner(null);
    }, function (e) {
      var why = e && e.name === 'AbortError' ? 'timeout' : str(e && e.message) || 'error';
      banner('coordinator unreachable, retrying every ' + POLL_MS / 1000 + ' s (' + why + ')' +
             (lastOk ? '; last update ' + dur((Date.now() - lastOk) / 1000) + ' ago' : ''));
    })
    .catch(function () {})
    .then(function () { clearTimeout(timer); setTimeout(poll, POLL_MS); });
}
renderCharts([], {}, 0);
poll();
})();
</script>
</body>
</html>
)swarmhtml";
}

}  // namespace swarm
