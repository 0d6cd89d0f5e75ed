// Tessera console: what every view shares. No framework, no build step;
// every value from the API goes into the page as text (never as HTML).

export const $ = (id) => document.getElementById(id);
export const state = {
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

export function el(tag, attrs, ...children) {
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

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export async function api(path, opts) {
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

export function fmt(x, digits) {
  if (x === null || x === undefined) return '—';
  if (typeof x === 'number') return digits === undefined ? String(x) : x.toFixed(digits);
  return String(x);
}

export function kv(pairs) {
  return el('dl', { class: 'kv' }, pairs.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', {}, v)]));
}

export function table(head, rows, attrs) {
  return el('table', Object.assign({ class: 'grid' }, attrs || {}),
    el('thead', {}, el('tr', {}, head.map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', {}, rows));
}

export function traceLink(id) {
  if (!id) return '—';
  if (!state.config.trace_url) return id;
  return el('a', { href: state.config.trace_url.replace('{trace_id}', id), target: '_blank', rel: 'noopener', text: id });
}

export function time(ms) {
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

export function shade(x) {
  // 0 → light, 1 → dark blue (monotone in lightness: readable without hue).
  const l = Math.round(95 - 70 * Math.max(0, Math.min(1, x)));
  return `hsl(212 70% ${l}%)`;
}

export function options(select, values) {
  const keep = select.value;
  const have = new Set([...select.options].map((o) => o.value));
  for (const v of [...values].sort()) if (!have.has(v)) select.append(el('option', { value: v, text: v }));
  select.value = keep;
}
