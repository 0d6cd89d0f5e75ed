// The console in a real browser: playwright-core drives Debian's Chromium,
// headless, against a `tessera serve` the Rust test started on loopback
// (tests/all/serve/console.rs). Checks that what the page shows is what
// the API says. Exit status 0: every check passed; else the first failure.
//
// Environment: TESSERA_URL (http://127.0.0.1:PORT), TESSERA_TOKEN,
// CHROMIUM (the browser binary), SCREENSHOTS (optional: a directory the
// views' PNGs are written to).

import { chromium } from 'playwright-core';
import path from 'node:path';

const base = process.env.TESSERA_URL;
const token = process.env.TESSERA_TOKEN;
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
  console.log('ok - ' + what);
}

async function api(path) {
  const r = await fetch(base + path);
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r.json();
}

async function shot(page, name) {
  if (process.env.SCREENSHOTS) await page.screenshot({ path: path.join(process.env.SCREENSHOTS, name + '.png'), fullPage: true });
}

async function until(what, f, ms = 60000) {
  const t0 = Date.now();
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() - t0 > ms) throw new Error('timed out waiting for ' + what);
    await new Promise((r) => setTimeout(r, 250));
  }
}

const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
const outside = [];
const consoleErrors = [];
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('request', (r) => { if (!r.url().startsWith(base)) outside.push(r.url()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));

  // ---- the cluster map ----
  await page.goto(base + '/');
  check(new URL(page.url()).pathname === '/ui/', '/ redirects to the console');
  await page.waitForFunction(() => Number(document.getElementById('map').dataset.nodes || 0) > 0);
  const cluster = await api('/v1/console/cluster');
  const shown = await page.$eval('#map', (c) => ({ nodes: Number(c.dataset.nodes), gpus: Number(c.dataset.gpus), w: c.width, h: c.height }));
  const gpus = cluster.nodes.reduce((s, n) => s + n.free.length, 0);
  check(shown.nodes === cluster.nodes.length, `the map draws every node (${shown.nodes} of ${cluster.nodes.length})`);
  check(shown.gpus === gpus, `and every GPU (${shown.gpus})`);
  const painted = await page.$eval('#map', (c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    const colours = new Set();
    for (let i = 0; i < d.length; i += 4 * 7) colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    return colours.size;
  });
  check(painted > 2, `the map is painted in several colours (${painted})`);
  const summary = await page.textContent('#map-summary');
  check(summary.includes(`${cluster.nodes.length} of ${cluster.nodes.length} nodes shown`), 'the summary states the map in words');
  // Hover the first GPU of the first node: its name and share.
  const box = await page.$eval('#map', (c) => { const r = c.getBoundingClientRect(); return { x: r.left, y: r.top }; });
  await page.mouse.move(box.x + 3, box.y + 3);
  const tip = await page.textContent('#map-tip');
  check(tip.startsWith(cluster.nodes[0].name + ' · GPU 0'), `hovering a GPU names it (${tip.split('\n')[0]})`);
  // Keyboard: the map takes focus and the arrows read GPUs aloud.
  await page.focus('#map');
  await page.keyboard.press('ArrowRight');
  const read = await page.textContent('#map-focus');
  check(read.startsWith(cluster.nodes[0].name + ' · GPU 1'), 'the arrow keys move along the GPUs');
  // A filter redraws fewer nodes.
  const zones = [...new Set(cluster.nodes.map((n) => n.zone).filter(Boolean))];
  if (zones.length > 1) {
    await page.selectOption('#map-zone', zones[0]);
    const n = await page.$eval('#map', (c) => Number(c.dataset.nodes));
    check(n === cluster.nodes.filter((x) => x.zone === zones[0]).length, `filtering by zone ${zones[0]} keeps its ${n} nodes`);
    await page.selectOption('#map-zone', '');
  }
  await shot(page, 'cluster');

  // ---- a pod's decision ----
  await page.click('#tab-pods');
  const decisions = await api('/v1/decisions?limit=200');
  const bound = decisions.find((d) => d.outcome === 'bound' && d.runners_up.length > 0) || decisions[0];
  check(bound !== undefined, 'the service has decided pods');
  await page.fill('#pod-name', bound.pod);
  await page.click('#pod-form button[type=submit]');
  await page.waitForSelector('#x-outcome');
  const d = await api('/v1/decisions/' + encodeURIComponent(bound.pod));
  check(await page.textContent('#x-outcome') === d.outcome, `outcome of ${d.pod}: ${d.outcome}`);
  check(await page.textContent('#x-node') === (d.node ?? '—'), `node: ${d.node}`);
  check(await page.textContent('#x-gpus') === (d.gpus.length ? d.gpus.join(', ') : '—'), 'GPUs');
  check(await page.textContent('#x-candidates') === `${d.candidates} / ${d.feasible}`, 'candidates and feasible');
  check(await page.textContent('#x-latency') === `${d.latency_us} µs`, 'latency');
  const pluginRows = await page.$$eval('#x-plugins tbody tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  check(pluginRows.length === d.plugins.length, `a row per plugin (${pluginRows.length})`);
  d.plugins.forEach((p, i) => {
    check(pluginRows[i][0] === p.plugin && pluginRows[i][3] === String(p.winner_score ?? '—') && pluginRows[i][4] === String(p.latency_us),
      `plugin ${p.plugin}: score ${p.winner_score}, ${p.latency_us} µs`);
  });
  const runnerRows = await page.$$eval('#x-runners tbody tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  check(runnerRows.length === d.runners_up.length + (d.node ? 1 : 0), 'the winner and every runner-up');
  d.runners_up.forEach((c, i) => {
    const row = runnerRows[i + (d.node ? 1 : 0)];
    check(row[0] === c.node && row[1] === c.total.toFixed(4), `runner-up ${c.node} at ${c.total.toFixed(4)}`);
  });
  const hostRows = await page.$$eval('#x-host-filter tbody tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  check(hostRows.length === Object.keys(d.host_filter).length, 'every host-filter reason');
  await shot(page, 'pod');
  // A pod that waits: why, and what would have to move for it to fit.
  const pending = decisions.find((x) => x.outcome === 'unschedulable');
  check(pending !== undefined, 'some pod waits (demand is above capacity)');
  await page.fill('#pod-name', pending.pod);
  await page.click('#pod-form button[type=submit]');
  await page.waitForSelector('#x-room');
  const room = await api(`/v1/decisions/${encodeURIComponent(pending.pod)}/room`);
  const roomText = await page.textContent('#x-room');
  if (room.waiting) {
    check(roomText.includes(room.reason || pending.reason), `why ${pending.pod} waits: ${room.reason}`);
    const moves = await page.$$('#x-room-moves tbody tr');
    check(moves.length === room.moves.length, `what would have to move for it: ${room.moves.length} pods${room.node ? ' to fit on ' + room.node : ''}`);
  } else {
    check(roomText.startsWith('It is not waiting'), `${pending.pod} no longer waits, and the page says so`);
  }
  await shot(page, 'waiting');
  await page.fill('#pod-name', 'no-such-pod');
  await page.click('#pod-form button[type=submit]');
  await page.waitForSelector('#pod-result .error');
  check((await page.textContent('#pod-result .error')).startsWith('DECISION-NOT-FOUND'), 'an unknown pod says so with its code');

  // ---- decisions over time ----
  await page.click('#tab-decisions');
  await page.waitForSelector('#heatmap .cell:not(.empty)');
  const cells = await page.$$eval('#heatmap .cell:not(.empty)', (bs) => bs.reduce((s, b) => s + Number(b.textContent), 0));
  const heat = await api('/v1/console/latency');
  check(cells > 0 && cells <= heat.decisions, `the heatmap counts the decisions of the histogram (${cells} of ${heat.decisions})`);
  await page.click('#heatmap .cell:not(.empty)');
  await page.waitForSelector('#cell-decisions tbody tr');
  check((await page.$$('#cell-decisions tbody tr')).length > 0, 'a cell opens the decisions behind it');
  await shot(page, 'decisions');

  // ---- a plan's DAG ----
  const plan = await until('a plan with moves', async () => (await api('/v1/plans?limit=50')).find((p) => p.moves.length > 0));
  await page.click('#tab-plans');
  await page.waitForSelector(`button[data-plan="${plan.id}"]`);
  await page.click(`button[data-plan="${plan.id}"]`);
  await page.waitForSelector('#plan-dag');
  const drawn = await page.$$eval('#plan-dag g.move', (gs) => gs.map((g) => g.getAttribute('data-state')));
  const fresh = await api('/v1/plans/' + plan.id);
  check(drawn.length === fresh.moves.length, `plan ${plan.id}'s DAG has a box per move (${drawn.length})`);
  check(drawn.every((s, i) => s === fresh.moves[i].state), 'each box shows its move\'s state');
  const edges = await page.$$eval('#plan-dag line', (ls) => ls.length);
  const deps = fresh.moves.reduce((n, m) => n + m.after.length, 0);
  check(edges === deps, `an arrow per dependency of the Movement Manager's DAG (${edges})`);
  await shot(page, 'plan');

  // ---- policies and the token ----
  await page.click('#tab-policies');
  await page.waitForSelector('#p-active');
  const rollout = await api('/v1/rollout');
  check(await page.textContent('#p-active') === rollout.active, `the active policy (${rollout.active})`);
  await page.click('#act-promote');
  await page.waitForFunction(() => document.getElementById('action-result').textContent.length > 0);
  const refused = await page.textContent('#action-result');
  check(refused.startsWith('API-UNAUTHORIZED'), `promote without the token is refused (${refused})`);
  await page.fill('#token', token);
  await page.fill('#candidate-doc', 'name: packer\nplugins:\n  - name: binpack\n    source: builtin:binpack\n');
  await page.click('#act-candidate');
  await page.waitForFunction(() => document.getElementById('p-candidate').textContent === 'packer');
  check((await api('/v1/rollout')).candidate === 'packer', 'the candidate set from the page is the service\'s');
  await page.click('#act-promote');
  await page.waitForFunction(() => document.getElementById('action-result').textContent.startsWith('ROLLOUT-'));
  const inShadow = await page.textContent('#action-result');
  check(inShadow.startsWith('ROLLOUT-STAGE'), `a candidate in shadow is not promoted (${inShadow})`);
  check((await api('/v1/rollout')).active === rollout.active, 'the active policy did not change');
  // A plugin's new version, uploaded from the page, is swapped in.
  const before = (await api('/v1/plugins')).find((p) => p.name === 'topology-spread');
  await page.selectOption('#plugin-name', 'topology-spread');
  await page.setInputFiles('#plugin-file', process.env.PLUGIN_WASM);
  await page.click('#act-upload');
  await page.waitForFunction(() => document.getElementById('action-result').textContent.includes('/v1/plugins'));
  const uploaded = await page.textContent('#action-result');
  const after = (await api('/v1/plugins')).find((p) => p.name === 'topology-spread');
  check(uploaded.startsWith('done') && after.versions_loaded === before.versions_loaded + 1,
    `a plugin uploaded from the page is swapped in (${uploaded}; versions ${before.versions_loaded} → ${after.versions_loaded})`);
  await shot(page, 'policies');

  check(outside.length === 0, `no request left the service (${outside.join(', ')})`);
  check(consoleErrors.length === 0, `no script error (${consoleErrors.join('; ')})`);
} finally {
  await browser.close();
}
