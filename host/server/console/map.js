// Tessera console: the cluster's GPU map (one canvas, whatever the size).
import { $, state, el, clear, api, fmt, kv, table, traceLink, time, shade, options } from './util.js';

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

export async function loadMap() {
  const m = await api('/v1/console/cluster');
  state.map = m;
  options($('map-zone'), new Set(m.nodes.map((n) => n.zone).filter(Boolean)));
  options($('map-model'), new Set(m.nodes.map((n) => n.model).filter(Boolean)));
  options($('map-queue'), new Set(m.nodes.flatMap((n) => n.pods.map((p) => p[3])).filter(Boolean)));
  drawMap();
}

export function drawMap() {
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

export function hover(ev) {
  const r = $('map').getBoundingClientRect();
  const hit = at(ev.clientX - r.left, ev.clientY - r.top);
  const tip = $('map-tip');
  if (!hit) { tip.hidden = true; return; }
  tip.textContent = gpuText(hit.n, hit.g);
  tip.hidden = false;
  tip.style.left = Math.min(ev.clientX - r.left + 12, r.width - 300) + 'px';
  tip.style.top = (ev.clientY - r.top + 12) + 'px';
}

export function keys(ev) {
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

