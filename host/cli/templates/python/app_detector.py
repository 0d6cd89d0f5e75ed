"""{{name}}: a Tessera detection policy, in Python.

Reports a node whose GPUs have sat idle (utilisation at or below
`idle_permille`) for `intervals` consecutive telemetry intervals: a
candidate for consolidation.
"""

from tessera_sdk import ConfigError, Detector, Finding, export_detector


class Policy(Detector):
    NAME = "{{name}}"
    VERSION = "0.1.0"
    DESCRIPTION = "GPUs idle for several intervals"
    CONFIG = {"idle_permille": 50, "intervals": 3}

    def __init__(self, config):
        super().__init__(config)
        if config["intervals"] < 1:
            raise ConfigError("intervals: at least 1")

    def window(self):
        return self.config["intervals"]

    def detect(self, window):
        idle, n = self.config["idle_permille"], self.config["intervals"]
        latest = window.latest()
        if latest is None:
            return []
        return [
            Finding(node=node, kind="low-load", severity=500,
                    message=f"GPU utilisation at or below {idle}‰ for {n} intervals (now {s.gpu_util_permille}‰)")
            for node, s in latest.samples.items()
            if window.consecutive(node, lambda x: x.gpu_util_permille <= idle) >= n
        ]


# The component's export: componentize-py looks for `Detection` here.
Detection = export_detector(Policy)
