"""Native tests of {{name}}: the same glue the component runs, without Wasm.

    python3 -m unittest
"""

import unittest

from app import Policy
from tessera_sdk import ConfigError, GpuRecord, NodeRecord, Pod, Resources, ScorerHarness, Upsert


def node(id, free_cpu, gpu_free, cpu_util=0):
    return NodeRecord(
        id=id, name=f"n{id}",
        capacity=Resources(32_000, 131_072), free=Resources(free_cpu, 65_536),
        gpus=[GpuRecord(free_milli=f) for f in gpu_free], cpu_util_permille=cpu_util,
    )


class PolicyTest(unittest.TestCase):
    def setUp(self):
        self.h = ScorerHarness(Policy, '{"max_cpu_util_permille": 800}')
        self.h.apply([Upsert(node(0, 8_000, [1000, 0])), Upsert(node(1, 4_000, [1000, 1000])),
                      Upsert(node(2, 30_000, [1000, 1000], cpu_util=950))])
        self.pod = Pod(requests=Resources(1_000, 1_024), gpu_count=1, gpu_milli=1000)

    def test_prefers_free_gpus(self):
        values, hints = self.h.score(self.pod, [0, 1])
        self.assertGreater(values[1], values[0])
        self.assertEqual(hints, [])

    def test_filters_busy_nodes(self):
        self.assertEqual(self.h.filter(self.pod, [0, 2]), bytes([0, 1]))  # 1 = FILTER_REASONS[0]

    def test_refuses_unknown_configuration(self):
        with self.assertRaisesRegex(ConfigError, "unknown field `max_cpu`"):
            ScorerHarness(Policy, '{"max_cpu": 1}')

    def test_unknown_candidates_are_errors(self):
        with self.assertRaisesRegex(LookupError, "unknown node id 9"):
            self.h.score(self.pod, [9])


if __name__ == "__main__":
    unittest.main()
