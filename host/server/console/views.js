// Tessera console: a pod's decision, decisions over time, plans.
import { $, state, el, clear, api, fmt, kv, table, traceLink, time, shade, options } from './util.js';

// ---- pods -------------------------------------------------------------

export async function loadRecent() {
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

export async function explain(name) {
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
  if (!plugins.length) out.append(el('p', { text: 'No plugin scored it: no node passed the filters.' }));
  else out.append(table(['plugin', 'version', 'weight', 'score for the winner', 'latency µs', 'error'], plugins.map((p) =>
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
  if (rows.length) out.append(table(['node', 'total', ...plugins.map((p) => p.plugin)], rows, { id: 'x-runners' }));
  else out.append(el('p', { id: 'x-runners', text: 'No candidate.' }));
  if (d.outcome !== 'bound') await waitsFor(out, d);
}

// For a pod that did not bind: what it waits for, and what would have to
// move for it to fit (the planner's room-making search).
async function waitsFor(out, d) {
  out.append(el('h4', { text: 'What it waits for' }));
  let r;
  try {
    r = await api(`/v1/decisions/${encodeURIComponent(d.pod)}/room`);
  } catch (e) {
    out.append(el('p', { class: 'error', text: `${e.code || e.status}: ${e.message}` }));
    return;
  }
  if (!r.waiting) {
    out.append(el('p', { id: 'x-room', text: 'It is not waiting any more (placed, or gone).' }));
    return;
  }
  out.append(el('p', { id: 'x-room' },
    `Waiting: ${r.reason || d.reason || 'no reason recorded'}. `,
    r.node
      ? el('span', { id: 'x-room-node', text: `It would fit on ${r.node} if ${r.moves.length} pod${r.moves.length === 1 ? '' : 's'} moved:` })
      : el('span', { id: 'x-room-node', text: `No node can be cleared for it by moving at most ${r.max_moves} pods (hard-tier pods never move): it waits for capacity to free up.` })));
  if (r.moves.length) {
    out.append(table(['pod', 'from', 'to', 'GPUs'], r.moves.map((m) =>
      el('tr', {}, el('td', { text: m.pod }), el('td', { text: m.from }), el('td', { text: m.to }), el('td', { text: m.gpus.join(', ') || '—' }))),
    { id: 'x-room-moves' }));
  }
}

// ---- decisions over time ---------------------------------------------

export async function loadHeatmap() {
  const h = await api('/v1/console/latency');
  const box = clear($('heatmap'));
  if (!h.starts_unix_ms.length) { box.append(el('p', { text: 'No decision yet.' })); return; }
  const max = Math.max(1, ...h.counts.flat());
  const us = (v) => (v >= 1000 ? v / 1000 + ' ms' : v + ' µs');
  // Rows are the histogram's buckets; the last has no upper bound.
  const rowLabel = (i) => (i === h.bounds_us.length ? `> ${us(h.bounds_us[i - 1])}` : `≤ ${us(h.bounds_us[i])}`);
  // Only the rows some decision fell in, and the one above.
  const used = h.counts.map((r) => r.some((n) => n > 0));
  const top = Math.min(h.counts.length - 1, used.lastIndexOf(true) + 1);
  const bottom = Math.max(0, used.indexOf(true) - 1);
  const rows = [];
  for (let i = top; i >= bottom; i--) {
    rows.push(el('tr', {}, el('th', { scope: 'row', text: rowLabel(i) }), h.counts[i].map((n, j) => {
      const from = h.starts_unix_ms[j], to = from + h.column_ms;
      const label = `${n} decisions ${rowLabel(i)} from ${time(from)} to ${time(to)}`;
      const b = el('button', { class: 'cell' + (n ? '' : ' empty'), 'aria-label': label, title: label, text: n, disabled: n === 0 });
      b.style.background = n ? shade(0.15 + 0.85 * n / max) : '#f4f4f4';
      b.addEventListener('click', () => cellDecisions(from, to));
      return el('td', {}, b);
    })));
  }
  const last = h.starts_unix_ms[h.starts_unix_ms.length - 1] + h.column_ms;
  box.append(el('table', { 'aria-label': `Decision latency by minute, ${h.decisions} decisions` },
    el('tbody', {}, rows),
    el('tfoot', {}, el('tr', {}, el('th', { text: '' }), el('td', { colspan: h.starts_unix_ms.length, text: `${time(h.starts_unix_ms[0])} → ${time(last)}, a column a minute` })))));
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
    el('tr', {}, el('td', {}, el('a', { href: '#pods', onclick: () => { location.hash = 'pods'; explain(d.pod); }, text: d.pod })),
      el('td', { text: d.outcome }), el('td', { text: fmt(d.node) }), el('td', { text: fmt(d.reason) }),
      el('td', { class: 'num', text: d.latency_us }), el('td', {}, traceLink(d.trace_id))))));
}

// ---- plans ------------------------------------------------------------

export async function loadPlans() {
  const all = await api('/v1/plans?limit=200');
  const plans = $('plans-empty').checked ? all : all.filter((p) => p.moves.length > 0);
  const body = clear($('plan-list').tBodies[0]);
  if (!plans.length) body.append(el('tr', {}, el('td', { colspan: 7, text: all.length ? 'no plan moved anything' : 'no plan yet' })));
  for (const p of plans.slice(0, 50)) {
    body.append(el('tr', {},
      el('td', {}, el('button', { type: 'button', 'data-plan': p.id, onclick: () => planDetail(p.id), text: `plan ${p.id}` })),
      el('td', { text: p.trigger }), el('td', { text: p.state }), el('td', { class: 'num', text: p.moves.length }),
      el('td', { class: 'num', text: fmt(p.cost, 2) }), el('td', { class: 'num', text: fmt(p.gain, 2) }),
      el('td', { text: `${fmt(p.fragmentation_before, 0)} → ${fmt(p.fragmentation_after, 0)}` })));
  }
  const open = $('plan-detail').dataset.plan;
  if (open) planDetail(Number(open));
}

// The Movement Manager's order: move j waits for the moves in its
// `after` (they free its room, or are its earlier hop). Waves by depth.
function dag(moves) {
  const preds = moves.map((m) => (m.after || []).filter((i) => i >= 0 && i < moves.length));
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
  out.append(el('p', { class: 'help', text: 'An arrow: the move on the right waits for the one on the left (it frees the room, or is the same pod\'s earlier hop), as the Movement Manager orders them.' }));
  out.append(svg);
  out.append(table(['pod', 'from', 'to', 'strategy', 'cost', 'state', 'reason'], moves.map((m) =>
    el('tr', {}, el('td', { text: m.pod }), el('td', { text: m.from }), el('td', { text: m.to }), el('td', { text: m.strategy }),
      el('td', { class: 'num', text: fmt(m.cost, 2) }), el('td', { text: m.state }), el('td', { text: fmt(m.reason) })))));
}

