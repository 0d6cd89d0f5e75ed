"""A hostile Python plugin, for the containment tests: well-behaved on
calls with fewer than `min_candidates` candidates (so it passes the load
check), then, by `mode`: `loop` for ever, `alloc` without bound, `raise`
an exception, or answer `short` (one score too few)."""

from tessera_sdk import Scorer, export_scorer


class Hostile(Scorer):
    NAME = "hostile"
    VERSION = "0.1.0"
    DESCRIPTION = "misbehaves on purpose"
    CONFIG = {"mode": "none", "min_candidates": 5}

    def prepare(self, pod, nodes):
        self.seen = 0

    def score(self, pod, node):
        self.seen += 1
        if self.seen == self.config["min_candidates"]:
            mode = self.config["mode"]
            if mode == "loop":
                while True:
                    pass
            if mode == "alloc":
                hoard = []
                while True:
                    hoard.append(bytearray(64 << 20))
            if mode == "raise":
                raise ValueError("hostile on purpose")
        return 0


class Scoring(export_scorer(Hostile)):
    def score(self, pod, candidates):
        out = super().score(pod, candidates)
        if Scoring.harness.plugin.config["mode"] == "short" and len(candidates) >= 5:
            out.values = out.values[:-1]
        return out
