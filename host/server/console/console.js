// Tessera console: one page over the service's API. No framework, no
// build step; every value from the API goes into the page as text (never
// as HTML).
'use strict';

const $ = (id) => document.getElementById(id);
const state = {
  tab: 'cluster',
  config: { trace_url: null, mutations: false },
  map: null,
  layout: null,
  focus: { node: 0, gpu: 0 },
  pulse: null,
  seen: {},
  loading: {},
};

// ---- helpers ----------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

async function api(path, opts) {
  const r = await fetch(path, opts);
  let body = null;
  try { body = await r.json(); } catch (_) { body = null; }
  if (!r.ok) {
    const e = new Error((body && body.message) || r.statusText);
    e.code = body && body.code;
    e.status = r.status;
    throw e;
  }
  return body;
}

function fmt(x, digits) {
  if (x === null || x === undefined) return '—';
  if (typeof x === 'number') return digits === undefined ? String(x) : x.toFixed(digits);
  return String(x);
}

function kv(pairs) {
  return el('dl', { class: 'kv' }, pairs.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', {}, v)]));
}

function table(head, rows, attrs) {
  return el('table', Object.assign({ class: 'grid' }, attrs || {}),
    el('thead', {}, el('tr', {}, head.map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', {}, rows));
}

function traceLink(id) {
  if (!id) return '—';
  if (!state.config.trace_url) return id;
  return el('a', { href: state.config.trace_url.replace('{trace_id}', id), target: '_blank', rel: 'noopener', text: id });
}

function time(ms) {
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

// ---- tabs -------------------------------------------------------------

const TABS = ['cluster', 'pods', 'decisions', 'plans', 'policies'];

function show(tab) {
  if (!TABS.includes(tab)) tab = 'cluster';
  state.tab = tab;
  for (const t of TABS) {
    $(t).hidden = t !== tab;
    $('tab-' + t).setAttribute('aria-selected', String(t === tab));
  }
  refresh(true);
}

function refresh(force) {
  const loaders = { cluster: loadMap, pods: loadRecent, decisions: loadHeatmap, plans: loadPlans, policies: loadPolicies };
  const tab = state.tab;
  const now = Date.now();
  // At most one load a tab at a time, and not more than every 2 s live.
  if (state.loading[tab] || (!force && now - (state.seen[tab] || 0) < 2000)) return;
  state.loading[tab] = true;
  state.seen[tab] = now;
  loaders[tab]().catch((e) => console.error(tab, e)).finally(() => { state.loading[tab] = false; });
}

// ---- live -------------------------------------------------------------

function live() {
  const es = new EventSource('/v1/console/events');
  es.addEventListener('pulse', (e) => {
    const p = JSON.parse(e.data);
    const before = state.pulse;
    state.pulse = p;
    $('live').className = 'dot';
    $('pulse-text').textContent =
      `${p.policy}${p.candidate ? ' (candidate ' + p.candidate + ')' : ''} · t = ${p.backend_time_s} s · ` +
      `${p.nodes} nodes · ${p.pods_running} running · ${p.pods_waiting} waiting · ${p.decisions} decisions`;
    const changed = !before || before.decisions !== p.decisions || before.latest_plan !== p.latest_plan ||
      before.policy !== p.policy || before.candidate !== p.candidate || before.pods_running !== p.pods_running;
    if (changed) refresh(false);
  });
  es.onerror = () => {
    $('live').className = 'dot off';
    $('pulse-text').textContent = 'disconnected; retrying…';
  };
}

// ---- cluster ----------------------------------------------------------

const HEALTH = ['healthy', 'degraded', 'failed'];

function podsOn(node, gpu) {
  return node.pods.filter((p) => (p[1] >>> gpu) & 1);
}

// Free share stranded in partly used GPUs of the node, ÷ its free share.
function fragmentation(node) {
  let free = 0, partial = 0;
  node.free.forEach((f, i) => {
    if (node.health[i] === 2) return;
    free += f;
    if (f > 0 && f < 1000) partial += f;
  });
  return free === 0 ? 0 : partial / free;
}

function shade(x) {
  // 0 → light, 1 → dark blue (monotone in lightness: readable without hue).
  const l = Math.round(95 - 70 * Math.max(0, Math.min(1, x)));
  return `hsl(212 70% ${l}%)`;
}

function colour(node, g, mode) {
  if (!node.ready) return '#9e9e9e';
  if (mode === 'health') return ['#cfe8d4', '#f0b000', '#b3261e'][node.health[g]];
  if (mode === 'fragmentation') return shade(fragmentation(node));
  if (node.health[g] === 2) return '#b3261e';
  return shade(1 - node.free[g] / 1000);
}

function legend(mode) {
  const box = clear($('map-legend'));
  const items = mode === 'health'
    ? [['healthy', '#cfe8d4'], ['degraded', '#f0b000'], ['failed', '#b3261e'], ['not ready', '#9e9e9e']]
    : mode === 'fragmentation'
      ? [['no free share stranded', shade(0)], ['half stranded', shade(0.5)], ['all stranded', shade(1)], ['not ready', '#9e9e9e']]
      : [['free', shade(0)], ['half allocated', shade(0.5)], ['allocated', shade(1)], ['failed', '#b3261e'], ['not ready', '#9e9e9e']];
  for (const [label, c] of items) {
    const s = el('span', { text: label });
    s.style.setProperty('--swatch', c);
    box.append(s);
  }
}

function visible(node) {
  const z = $('map-zone').value, m = $('map-model').value, q = $('map-queue').value;
  return (!z || node.zone === z) && (!m || node.model === m) && (!q || node.pods.some((p) => p[3] === q));
}

function options(select, values) {
  const keep = select.value;
  const have = new Set([...select.options].map((o) => o.value));
  for (const v of [...values].sort()) if (!have.has(v)) select.append(el('option', { value: v, text: v }));
  select.value = keep;
}

async function loadMap() {
  const m = await api('/v1/console/cluster');
  state.map = m;
  options($('map-zone'), new Set(m.nodes.map((n) => n.zone).filter(Boolean)));
  options($('map-model'), new Set(m.nodes.map((n) => n.model).filter(Boolean)));
  options($('map-queue'), new Set(m.nodes.flatMap((n) => n.pods.map((p) => p[3])).filter(Boolean)));
  drawMap();
}

function drawMap() {
  const m = state.map;
  if (!m) return;
  const mode = $('map-colour').value;
  legend(mode);
  const nodes = m.nodes.map((n, i) => [n, i]).filter(([n]) => visible(n));
  const canvas = $('map');
  const width = canvas.parentElement.clientWidth || 1000;
  const perNode = Math.max(1, ...nodes.map(([n]) => n.free.length));
  const cols = Math.min(perNode, 4);
  const rows = Math.ceil(perNode / cols);
  // The largest cell that fits every node in about a screen.
  let cell = 14;
  for (; cell > 2; cell--) {
    const bw = cols * cell + 3, bh = rows * cell + 3;
    const per = Math.max(1, Math.floor(width / bw));
    if (Math.ceil(nodes.length / per) * bh <= 900) break;
  }
  const bw = cols * cell + 3, bh = rows * cell + 3;
  const per = Math.max(1, Math.floor(width / bw));
  const height = Math.max(bh, Math.ceil(nodes.length / per) * bh);
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.height = height + 'px';
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = '#ffffff';
  ctx.fillRect(0, 0, width, height);
  nodes.forEach(([n], k) => {
    const x0 = (k % per) * bw, y0 = Math.floor(k / per) * bh;
    n.free.forEach((_, g) => {
      const x = x0 + (g % cols) * cell, y = y0 + Math.floor(g / cols) * cell;
      ctx.fillStyle = colour(n, g, mode);
      ctx.fillRect(x, y, cell - (cell > 4 ? 1 : 0), cell - (cell > 4 ? 1 : 0));
    });
  });
  state.layout = { nodes, per, bw, bh, cols, cell };
  // The text alternative of the picture.
  let gpus = 0, free = 0, failed = 0, degraded = 0;
  for (const [n] of nodes) {
    n.free.forEach((f, g) => {
      gpus++;
      if (n.health[g] === 2) failed++;
      else { free += f; if (n.health[g] === 1) degraded++; }
    });
  }
  const alloc = gpus ? 100 * (1 - free / 1000 / (gpus - failed || 1)) : 0;
  $('map-summary').textContent =
    `${nodes.length} of ${m.nodes.length} nodes shown, ${gpus} GPUs, ${alloc.toFixed(1)}% of healthy GPU share allocated, ` +
    `${degraded} degraded, ${failed} failed; ${m.waiting} pods waiting; backend time ${m.backend_time_s} s.`;
  canvas.setAttribute('aria-label', 'GPU map: ' + $('map-summary').textContent);
  canvas.dataset.nodes = String(nodes.length);
  canvas.dataset.gpus = String(gpus);
}

function gpuText(n, g) {
  const pods = podsOn(n, g);
  const used = 1000 - n.free[g];
  return `${n.name} · GPU ${g} (${n.model || 'no model'}${n.zone ? ', ' + n.zone : ''})\n` +
    `${(used / 10).toFixed(1)}% allocated · ${HEALTH[n.health[g]]}${n.ready ? '' : ' · node not ready'}\n` +
    (pods.length ? pods.map((p) => `${p[0]} (${p[2] ? (p[2] / 10).toFixed(0) + '%' : 'whole'}${p[3] ? ', queue ' + p[3] : ''})`).join('\n') : 'no pods');
}

function at(x, y) {
  const L = state.layout;
  if (!L) return null;
  const col = Math.floor(x / L.bw), row = Math.floor(y / L.bh);
  if (col >= L.per) return null;
  const k = row * L.per + col;
  if (k >= L.nodes.length) return null;
  const [n, id] = L.nodes[k];
  const gx = Math.floor((x - col * L.bw) / L.cell), gy = Math.floor((y - row * L.bh) / L.cell);
  if (gx >= L.cols) return null;
  const g = gy * L.cols + gx;
  if (g >= n.free.length) return null;
  return { n, id, g, k };
}

function hover(ev) {
  const r = $('map').getBoundingClientRect();
  const hit = at(ev.clientX - r.left, ev.clientY - r.top);
  const tip = $('map-tip');
  if (!hit) { tip.hidden = true; return; }
  tip.textContent = gpuText(hit.n, hit.g);
  tip.hidden = false;
  tip.style.left = Math.min(ev.clientX - r.left + 12, r.width - 300) + 'px';
  tip.style.top = (ev.clientY - r.top + 12) + 'px';
}

function keys(ev) {
  const L = state.layout;
  if (!L || !L.nodes.length) return;
  const f = state.focus;
  const count = (k) => L.nodes[k][0].free.length;
  if (ev.key === 'ArrowRight') { if (f.gpu + 1 < count(f.node)) f.gpu++; else if (f.node + 1 < L.nodes.length) { f.node++; f.gpu = 0; } }
  else if (ev.key === 'ArrowLeft') { if (f.gpu > 0) f.gpu--; else if (f.node > 0) { f.node--; f.gpu = count(f.node) - 1; } }
  else if (ev.key === 'ArrowDown') { f.node = Math.min(L.nodes.length - 1, f.node + L.per); f.gpu = Math.min(f.gpu, count(f.node) - 1); }
  else if (ev.key === 'ArrowUp') { f.node = Math.max(0, f.node - L.per); f.gpu = Math.min(f.gpu, count(f.node) - 1); }
  else return;
  ev.preventDefault();
  f.node = Math.min(f.node, L.nodes.length - 1);
  $('map-focus').textContent = gpuText(L.nodes[f.node][0], f.gpu);
}

// ---- pods -------------------------------------------------------------

async function loadRecent() {
  const list = await api('/v1/decisions?limit=1000');
  const names = clear($('pod-names'));
  for (const d of list.slice(0, 1000)) names.append(el('option', { value: d.pod }));
  const body = clear($('recent').tBodies[0]);
  for (const d of list.slice(0, 30)) {
    body.append(el('tr', {},
      el('td', {}, el('a', { href: '#pods', onclick: (e) => { e.preventDefault(); explain(d.pod); }, text: d.pod })),
      el('td', { text: d.outcome }),
      el('td', { text: fmt(d.node) }),
      el('td', { text: fmt(d.reason) }),
      el('td', { class: 'num', text: d.latency_us })));
  }
}

async function explain(name) {
  $('pod-name').value = name;
  const out = clear($('pod-result'));
  let d;
  try {
    d = await api('/v1/decisions/' + encodeURIComponent(name));
  } catch (e) {
    out.append(el('p', { class: 'error', text: `${e.code || e.status}: ${e.message}` }));
    return;
  }
  const plugins = d.plugins || [];
  out.append(el('h3', { text: `Pod ${d.pod}` }));
  out.append(kv([
    ['outcome', el('strong', { id: 'x-outcome', text: d.outcome })],
    ['node', el('span', { id: 'x-node', text: fmt(d.node) })],
    ['GPUs', el('span', { id: 'x-gpus', text: d.gpus.length ? d.gpus.join(', ') : '—' })],
    ['reason', el('span', { id: 'x-reason', text: fmt(d.reason) })],
    ['candidates (host filter) / feasible (plugin filters)', el('span', { id: 'x-candidates', text: `${d.candidates} / ${d.feasible}` })],
    ['winner total', el('span', { id: 'x-total', text: fmt(d.winner_total, 4) })],
    ['victims (preempted)', d.victims.length ? d.victims.join(', ') : '—'],
    ['latency', el('span', { id: 'x-latency', text: `${d.latency_us} µs` })],
    ['policy', d.policy],
    ['workload', d.workload || '—'],
    ['decided', `${time(d.at_unix_ms)} (backend ${d.backend_time_s} s)`],
    ['trace', traceLink(d.trace_id)],
  ]));
  const host = Object.entries(d.host_filter || {});
  out.append(el('h4', { text: 'Host filter rejections' }));
  out.append(host.length
    ? table(['reason', 'nodes'], host.map(([k, v]) => el('tr', {}, el('td', { text: k }), el('td', { class: 'num', text: v }))), { id: 'x-host-filter' })
    : el('p', { text: 'none' }));
  if ((d.plugin_filter || []).length) {
    out.append(el('h4', { text: 'Plugin filter rejections' }));
    out.append(table(['plugin', 'reason', 'nodes'], d.plugin_filter.map((r) =>
      el('tr', {}, el('td', { text: r.plugin }), el('td', { text: r.reason }), el('td', { class: 'num', text: r.nodes })))));
  }
  out.append(el('h4', { text: 'Plugins' }));
  out.append(table(['plugin', 'version', 'weight', 'score for the winner', 'latency µs', 'error'], plugins.map((p) =>
    el('tr', {}, el('td', { text: p.plugin }), el('td', { text: p.version }), el('td', { class: 'num', text: p.weight }),
      el('td', { class: 'num', text: fmt(p.winner_score) }), el('td', { class: 'num', text: p.latency_us }),
      el('td', { text: p.error_code ? `${p.error_code}: ${p.error || ''}` : '—' }))), { id: 'x-plugins' }));
  out.append(el('h4', { text: 'Winner and runners-up' }));
  const rows = [];
  if (d.node) {
    rows.push(el('tr', { class: 'winner' }, el('td', { text: d.node + ' (chosen)' }), el('td', { class: 'num', text: fmt(d.winner_total, 4) }),
      plugins.map((p) => el('td', { class: 'num', text: fmt(p.winner_score) }))));
  }
  for (const c of d.runners_up) {
    rows.push(el('tr', {}, el('td', { text: c.node }), el('td', { class: 'num', text: fmt(c.total, 4) }),
      c.scores.map((s) => el('td', { class: 'num', text: s }))));
  }
  out.append(table(['node', 'total', ...plugins.map((p) => p.plugin)], rows, { id: 'x-runners' }));
}

// ---- decisions over time ---------------------------------------------

async function loadHeatmap() {
  const h = await api('/v1/console/latency');
  const max = Math.max(1, ...h.counts.flat());
  const us = (v) => (v >= 1000 ? v / 1000 + ' ms' : v + ' µs');
  // The last row has no upper bound.
  const rowLabel = (i) => (i === h.rows_us.length - 1 ? `> ${us(h.rows_us[i - 1])}` : `≤ ${us(h.rows_us[i])}`);
  const rows = [];
  for (let i = h.rows_us.length - 1; i >= 0; i--) {
    rows.push(el('tr', {}, el('th', { scope: 'row', text: rowLabel(i) }), h.counts[i].map((n, j) => {
      const from = h.edges_unix_ms[j], to = h.edges_unix_ms[j + 1];
      const label = `${n} decisions ${rowLabel(i)} from ${time(from)} to ${time(to)}`;
      const b = el('button', { class: 'cell' + (n ? '' : ' empty'), 'aria-label': label, title: label, text: n, disabled: n === 0 });
      b.style.background = n ? shade(0.15 + 0.85 * n / max) : '#f4f4f4';
      b.addEventListener('click', () => cellDecisions(from, to));
      return el('td', {}, b);
    })));
  }
  const box = clear($('heatmap'));
  box.append(el('table', { 'aria-label': `Decision latency by time, ${h.decisions} decisions` },
    el('tbody', {}, rows),
    el('tfoot', {}, el('tr', {}, el('th', { text: '' }), el('td', { colspan: h.counts[0].length, text: `${time(h.edges_unix_ms[0])} → ${time(h.edges_unix_ms[h.edges_unix_ms.length - 1])}` })))));
  const body = clear($('failures').tBodies[0]);
  const failures = Object.entries(h.failures);
  if (!failures.length) body.append(el('tr', {}, el('td', { colspan: 2, text: 'none' })));
  for (const [code, n] of failures) body.append(el('tr', {}, el('td', { text: code }), el('td', { class: 'num', text: n })));
}

async function cellDecisions(from, to) {
  const a = await api(`/v1/attribution?metric=tessera_decision_latency_seconds_bucket&from=${from}&to=${to}`);
  const out = clear($('cell-decisions'));
  out.append(el('h3', { text: `Decisions from ${time(from)} to ${time(to)} (${a.matched} of ${a.in_window})` }));
  out.append(table(['pod', 'outcome', 'node', 'reason', 'latency µs', 'trace'], a.decisions.map((d) =>
    el('tr', {}, el('td', {}, el('a', { href: '#pods', onclick: () => { show('pods'); explain(d.pod); }, text: d.pod })),
      el('td', { text: d.outcome }), el('td', { text: fmt(d.node) }), el('td', { text: fmt(d.reason) }),
      el('td', { class: 'num', text: d.latency_us }), el('td', {}, traceLink(d.trace_id))))));
}

// ---- plans ------------------------------------------------------------

async function loadPlans() {
  const plans = await api('/v1/plans?limit=50');
  const body = clear($('plan-list').tBodies[0]);
  if (!plans.length) body.append(el('tr', {}, el('td', { colspan: 7, text: 'no plan yet' })));
  for (const p of plans) {
    body.append(el('tr', {},
      el('td', {}, el('button', { type: 'button', 'data-plan': p.id, onclick: () => planDetail(p.id), text: `plan ${p.id}` })),
      el('td', { text: p.trigger }), el('td', { text: p.state }), el('td', { class: 'num', text: p.moves.length }),
      el('td', { class: 'num', text: fmt(p.cost, 2) }), el('td', { class: 'num', text: fmt(p.gain, 2) }),
      el('td', { text: `${fmt(p.fragmentation_before, 0)} → ${fmt(p.fragmentation_after, 0)}` })));
  }
  const open = $('plan-detail').dataset.plan;
  if (open) planDetail(Number(open));
}

// Move j waits for move i when i leaves the node j goes to (i makes room).
function dag(moves) {
  const preds = moves.map((m, j) => moves.map((o, i) => (i !== j && o.from === m.to ? i : -1)).filter((i) => i >= 0));
  const depth = moves.map(() => 0);
  for (let pass = 0; pass < moves.length; pass++) {
    let changed = false;
    preds.forEach((ps, j) => ps.forEach((i) => { if (depth[i] + 1 > depth[j] && depth[i] + 1 <= moves.length) { depth[j] = depth[i] + 1; changed = true; } }));
    if (!changed) break;
  }
  return { preds, depth };
}

async function planDetail(id) {
  const p = await api('/v1/plans/' + id);
  const out = clear($('plan-detail'));
  out.dataset.plan = String(id);
  out.append(el('h3', { text: `Plan ${p.id}` }));
  out.append(kv([
    ['state', p.state + (p.reason ? ` (${p.reason})` : '')], ['trigger', p.trigger], ['solver', p.solver + (p.timed_out ? ', timed out' : '')],
    ['planned in', `${fmt(p.plan_ms, 1)} ms`], ['cost / gain', `${fmt(p.cost, 2)} / ${fmt(p.gain, 2)}`],
    ['fragmentation before → after', `${fmt(p.fragmentation_before, 0)} → ${fmt(p.fragmentation_after, 0)}`],
    ['whole free GPUs before → after', `${p.whole_free_before} → ${p.whole_free_after}`], ['trace', traceLink(p.trace_id)],
  ]));
  const moves = p.moves;
  if (!moves.length) { out.append(el('p', { text: 'no moves' })); return; }
  const { preds, depth } = dag(moves);
  const W = 190, H = 44, GX = 40, GY = 12;
  const byDepth = [];
  moves.forEach((_, j) => { (byDepth[depth[j]] = byDepth[depth[j]] || []).push(j); });
  const pos = [];
  byDepth.forEach((js, d) => js.forEach((j, r) => { pos[j] = [10 + d * (W + GX), 10 + r * (H + GY)]; }));
  const width = 20 + byDepth.length * (W + GX), height = 20 + Math.max(...byDepth.map((js) => js.length)) * (H + GY);
  const NS = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('class', 'dag');
  svg.setAttribute('id', 'plan-dag');
  svg.setAttribute('width', width);
  svg.setAttribute('height', height);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `Plan ${p.id}: ${moves.length} moves in ${byDepth.length} waves`);
  const make = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  preds.forEach((ps, j) => ps.forEach((i) => {
    svg.append(make('line', { x1: pos[i][0] + W, y1: pos[i][1] + H / 2, x2: pos[j][0], y2: pos[j][1] + H / 2, stroke: '#555555', 'stroke-width': 1.2 }));
  }));
  moves.forEach((m, j) => {
    const g = make('g', { class: 'move', 'data-state': m.state });
    g.append(make('title', {}, `${m.pod}: ${m.from} → ${m.to}, ${m.state}${m.reason ? ' (' + m.reason + ')' : ''}, ${m.strategy}, cost ${fmt(m.cost, 2)}`));
    g.append(make('rect', { x: pos[j][0], y: pos[j][1], width: W, height: H, rx: 4, class: 'state-' + m.state, stroke: '#444444' }));
    g.append(make('text', { x: pos[j][0] + 6, y: pos[j][1] + 16 }, m.pod.length > 28 ? m.pod.slice(0, 27) + '…' : m.pod));
    g.append(make('text', { x: pos[j][0] + 6, y: pos[j][1] + 33 }, `${m.from} → ${m.to} · ${m.state}`));
    svg.append(g);
  });
  out.append(el('p', { class: 'help', text: 'An arrow: the move on the right waits for the one on the left to free its target.' }));
  out.append(svg);
  out.append(table(['pod', 'from', 'to', 'strategy', 'cost', 'state', 'reason'], moves.map((m) =>
    el('tr', {}, el('td', { text: m.pod }), el('td', { text: m.from }), el('td', { text: m.to }), el('td', { text: m.strategy }),
      el('td', { class: 'num', text: fmt(m.cost, 2) }), el('td', { text: m.state }), el('td', { text: fmt(m.reason) })))));
}

// ---- policies ---------------------------------------------------------

async function loadPolicies() {
  const [r, chaos, plugins, learning] = await Promise.all([
    api('/v1/rollout'), api('/v1/chaos'), api('/v1/plugins'), api('/v1/learning'),
  ]);
  const box = clear($('rollout'));
  const stage = r.stage ? (r.stage.stage === 'canary' ? `canary, ${(100 * r.stage.share).toFixed(0)}% of pods` : r.stage.stage) : '—';
  box.append(kv([
    ['active', el('strong', { id: 'p-active', text: r.active })],
    ['candidate', el('span', { id: 'p-candidate', text: fmt(r.candidate) })],
    ['stage', el('span', { id: 'p-stage', text: stage })],
    ['compared / disagreements', `${r.compared} / ${r.disagreements}`],
    ['acted by the candidate', String(r.candidate_acted)],
    ['verdict', r.verdict ? `${r.verdict.verdict} (${r.verdict.campaign}${r.verdict.failing.length ? ', failing ' + r.verdict.failing.join(', ') : ''})` : '—'],
    ['promotions', String(r.promotions)],
  ]));
  if (r.recent.length) {
    box.append(el('h4', { text: 'Latest disagreements' }));
    box.append(table(['pod', 'active chose', 'candidate chose', 'acted'], r.recent.slice(-10).map((d) =>
      el('tr', {}, el('td', { text: d.pod }), el('td', { text: fmt(d.active) }), el('td', { text: fmt(d.candidate) }), el('td', { text: d.acted })))));
  }
  const c = clear($('chaos'));
  c.append(el('p', { class: 'help', text: chaos.schedule ? `Scheduled ${chaos.schedule} (${chaos.campaign}); next ${chaos.next_run_unix_ms ? time(chaos.next_run_unix_ms) : '—'}${chaos.running ? '; running now' : ''}.` : 'No campaign is scheduled.' }));
  if (chaos.runs.length) {
    c.append(table(['run', 'candidate', 'baseline', 'verdict', 'failing gates', 'ended'], [...chaos.runs].reverse().slice(0, 10).map((x) =>
      el('tr', {}, el('td', { text: x.id }), el('td', { text: x.candidate }), el('td', { text: x.baseline }),
        el('td', { class: x.verdict === 'PROMOTE' ? 'ok' : 'error', text: fmt(x.verdict) }),
        el('td', { text: x.failing.join(', ') || '—' }), el('td', { text: x.ended_unix_ms ? time(x.ended_unix_ms) : 'running' })))));
  }
  const body = clear($('plugins').tBodies[0]);
  for (const p of plugins) {
    body.append(el('tr', {}, el('td', { text: p.name }), el('td', { text: p.kind }), el('td', { text: p.version }),
      el('td', { class: 'num', text: p.weight }), el('td', { class: 'num', text: p.calls }), el('td', { class: 'num', text: p.faults }),
      el('td', { class: p.quarantined ? 'error' : '', text: p.quarantined ? 'yes' : 'no' })));
  }
  const l = clear($('learning'));
  l.append(el('p', { class: 'help', text: learning.schedule ? `Fine-tuning ${learning.plugin} on ${learning.schedule}${learning.running ? '; running now' : ''}.` : 'Fine-tuning is not configured.' }));
  if (learning.runs.length) {
    l.append(table(['run', 'arrivals', 'outcome', 'gain in use → tuned', 'candidate', 'reason'], [...learning.runs].reverse().slice(0, 10).map((x) =>
      el('tr', {}, el('td', { text: x.id }), el('td', { class: 'num', text: x.arrivals }), el('td', { text: fmt(x.outcome) }),
        el('td', { text: x.current_gain === null ? '—' : `${fmt(x.current_gain, 4)} → ${fmt(x.tuned_gain, 4)}` }),
        el('td', { text: fmt(x.candidate) }), el('td', { text: fmt(x.reason) })))));
  }
}

async function act(path, body) {
  const out = $('action-result');
  const headers = {};
  const token = $('token').value.trim();
  if (token) headers.Authorization = 'Bearer ' + token;
  if (body !== undefined) headers['Content-Type'] = 'application/yaml';
  try {
    await api(path, { method: 'POST', headers, body });
    out.className = 'ok';
    out.textContent = `done: ${path}`;
  } catch (e) {
    out.className = 'error';
    out.textContent = `${e.code || e.status}: ${e.message}`;
  }
  state.seen.policies = 0;
  refresh(true);
}

// ---- start ------------------------------------------------------------

document.addEventListener('DOMContentLoaded', async () => {
  try { state.config = await api('/v1/console/config'); } catch (_) { /* defaults */ }
  for (const t of TABS) $('tab-' + t).addEventListener('click', (e) => { e.preventDefault(); history.replaceState(null, '', '#' + t); show(t); });
  window.addEventListener('hashchange', () => show(location.hash.slice(1)));
  for (const id of ['map-colour', 'map-zone', 'map-model', 'map-queue']) $(id).addEventListener('change', drawMap);
  $('map').addEventListener('mousemove', hover);
  $('map').addEventListener('mouseleave', () => { $('map-tip').hidden = true; });
  $('map').addEventListener('keydown', keys);
  window.addEventListener('resize', drawMap);
  $('pod-form').addEventListener('submit', (e) => { e.preventDefault(); explain($('pod-name').value.trim()); });
  $('act-candidate').addEventListener('click', () => act('/v1/rollout/candidate', $('candidate-doc').value));
  $('act-canary').addEventListener('click', () => act(`/v1/rollout/stage?stage=canary&share=${encodeURIComponent($('canary-share').value)}`));
  $('act-promote').addEventListener('click', () => act('/v1/rollout/promote'));
  $('act-rollback').addEventListener('click', () => act('/v1/rollout/rollback'));
  if (!state.config.mutations) $('action-result').textContent = 'Mutating endpoints are disabled on this service (no api_token).';
  show(location.hash.slice(1) || 'cluster');
  live();
});
