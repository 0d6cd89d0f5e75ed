// Native tests of {{name}}: the same glue the component runs, under Node.js.
//
//     node --test
import assert from "node:assert/strict";
import { test } from "node:test";

import { Policy } from "./app.js";
import { ConfigError, Pod, ScorerHarness } from "./tessera_sdk.js";

const node = (id, freeCpu, gpuFree, cpuUtil = 0) => ({
  tag: "upsert",
  val: {
    id,
    name: `n${id}`,
    capacity: { cpuMilli: 32000n, memoryMib: 131072n },
    free: { cpuMilli: BigInt(freeCpu), memoryMib: 65536n },
    gpus: gpuFree.map((f) => ({ freeMilli: f, health: "healthy" })),
    cpuUtilPermille: cpuUtil,
  },
});

function harness() {
  const h = new ScorerHarness(Policy, '{"max_cpu_util_permille": 800}');
  h.apply([node(0, 8000, [1000, 0]), node(1, 4000, [1000, 1000]), node(2, 30000, [1000, 1000], 950)]);
  return h;
}
const pod = new Pod({ requests: { cpuMilli: 1000n, memoryMib: 1024n }, gpuCount: 1, gpuMilli: 1000 });

test("prefers free GPUs", () => {
  const { values, hints } = harness().score(pod, [0, 1]);
  assert.ok(values[1] > values[0]);
  assert.deepEqual(hints, []);
});

test("filters busy nodes", () => {
  assert.deepEqual([...harness().filter(pod, [0, 2])], [0, 1]); // 1 = FILTER_REASONS[0]
});

test("refuses unknown configuration", () => {
  assert.throws(() => new ScorerHarness(Policy, '{"max_cpu": 1}'), ConfigError);
});

test("unknown candidates are errors", () => {
  assert.throws(() => harness().score(pod, [9]), /unknown node id 9/);
});
