"""Native tests of {{name}}: the same glue the component runs, without Wasm.

    python3 -m unittest
"""

import unittest

from app import Policy
from tessera_sdk import DetectorHarness


def frame(h, seq, utils):
    ids = list(range(len(utils)))
    zeros = [0] * len(utils)
    h.observe_columns(seq, ids, utils, [500] * len(utils), zeros, zeros)


class PolicyTest(unittest.TestCase):
    def test_idle_for_three_intervals(self):
        h = DetectorHarness(Policy, "")
        for seq, utils in enumerate([[0, 900], [10, 0], [20, 0]]):
            frame(h, seq, utils)
        found = h.detect()
        self.assertEqual([(f.node, f.kind) for f in found], [(0, "low-load")])

    def test_refuses_unknown_configuration(self):
        with self.assertRaisesRegex(ValueError, "unknown field `idle`"):
            DetectorHarness(Policy, '{"idle": 1}')


if __name__ == "__main__":
    unittest.main()
