// Native tests of {{name}}: the same glue the component runs, under Node.js.
//
//     node --test
import assert from "node:assert/strict";
import { test } from "node:test";

import { Policy } from "./app.js";
import { DetectorHarness } from "./tessera_sdk.js";

function frame(h, seq, utils) {
  const zeros = utils.map(() => 0);
  h.observe({
    seq: BigInt(seq),
    nodes: utils.map((_, i) => i),
    gpuUtilPermille: utils,
    memoryFreePermille: utils.map(() => 500),
    cpuUtilPermille: zeros,
    strandedGpuMilli: zeros,
  });
}

test("idle for three intervals", () => {
  const h = new DetectorHarness(Policy, "");
  [[0, 900], [10, 0], [20, 0]].forEach((u, seq) => frame(h, seq, u));
  assert.deepEqual(h.detect().map((f) => [f.node, f.kind]), [[0, "low-load"]]);
});

test("refuses unknown configuration", () => {
  assert.throws(() => new DetectorHarness(Policy, '{"idle": 1}'), /unknown field `idle`/);
});
