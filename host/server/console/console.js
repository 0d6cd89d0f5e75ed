// Tessera console: tabs, the live stream, policies and the actions
// behind the API token. The entry point (a module: /ui/console.js).
import { $, state, el, clear, api, fmt, kv, table, traceLink, time, shade, options } from './util.js';
import { loadMap, drawMap, hover, keys } from './map.js';
import { loadRecent, explain, loadHeatmap, loadPlans } from './views.js';

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
  const latest = [...chaos.runs].reverse().find((x) => Array.isArray(x.gates) && x.gates.length);
  if (latest) {
    const cols = Object.keys(latest.gates[0]);
    c.append(el('h4', { text: `Gates of run ${latest.id} (${fmt(latest.verdict)})` }));
    c.append(table(cols, latest.gates.map((g) => el('tr', {}, cols.map((k) =>
      el('td', { class: typeof g[k] === 'number' ? 'num' : (k === 'pass' ? (g[k] ? 'ok' : 'error') : ''), text: typeof g[k] === 'object' && g[k] !== null ? JSON.stringify(g[k]) : fmt(g[k]) })))),
    { id: 'chaos-gates' }));
  }
  const body = clear($('plugins').tBodies[0]);
  options($('plugin-name'), new Set(plugins.map((p) => p.name)));
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

async function act(path, body, type) {
  const out = $('action-result');
  const headers = {};
  const token = $('token').value.trim();
  if (token) headers.Authorization = 'Bearer ' + token;
  if (body !== undefined) headers['Content-Type'] = type || 'application/yaml';
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
  $('plans-empty').addEventListener('change', () => refresh(true));
  $('pod-form').addEventListener('submit', (e) => { e.preventDefault(); explain($('pod-name').value.trim()); });
  $('act-candidate').addEventListener('click', () => act('/v1/rollout/candidate', $('candidate-doc').value));
  $('act-canary').addEventListener('click', () => act(`/v1/rollout/stage?stage=canary&share=${encodeURIComponent($('canary-share').value)}`));
  $('act-promote').addEventListener('click', () => act('/v1/rollout/promote'));
  $('act-rollback').addEventListener('click', () => act('/v1/rollout/rollback'));
  $('act-upload').addEventListener('click', async () => {
    const file = $('plugin-file').files[0];
    const name = $('plugin-name').value.trim();
    if (!file || !name) { $('action-result').className = 'error'; $('action-result').textContent = 'choose a plugin of the policy and a .wasm file'; return; }
    await act('/v1/plugins?name=' + encodeURIComponent(name), await file.arrayBuffer(), 'application/wasm');
  });
  if (!state.config.mutations) $('action-result').textContent = 'Mutating endpoints are disabled on this service (no api_token).';
  show(location.hash.slice(1) || 'cluster');
  live();
});

