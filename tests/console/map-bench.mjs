// The GPU map on a large cluster, timed in Chromium: how long the page
// takes from navigation to a drawn map, how large /v1/console/cluster is,
// and how long a redraw (a filter change) takes. Against a running
// `tessera serve` (TESSERA_URL); prints one JSON line.
//
//   tessera serve --config big.yaml &      # sim: {node_count: 10000}
//   TESSERA_URL=http://127.0.0.1:8080 node tests/console/map-bench.mjs

import { chromium } from 'playwright-core';

const base = process.env.TESSERA_URL;
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const t0 = Date.now();
  await page.goto(base + '/ui/');
  await page.waitForFunction(() => Number(document.getElementById('map').dataset.nodes || 0) > 0, null, { timeout: 120000 });
  const firstMapMs = Date.now() - t0;
  const r = await fetch(base + '/v1/console/cluster');
  const body = await r.text();
  const nodes = JSON.parse(body).nodes.length;
  const redraw = await page.evaluate(() => {
    const sel = document.getElementById('map-colour');
    const t = performance.now();
    for (const v of ['health', 'fragmentation', 'allocation']) { sel.value = v; sel.dispatchEvent(new Event('change')); }
    return (performance.now() - t) / 3;
  });
  const domNodes = await page.evaluate(() => document.getElementsByTagName('*').length);
  console.log(JSON.stringify({ nodes, cluster_json_bytes: body.length, first_map_ms: firstMapMs, redraw_ms: Math.round(redraw * 10) / 10, dom_elements: domNodes }));
} finally {
  await browser.close();
}
